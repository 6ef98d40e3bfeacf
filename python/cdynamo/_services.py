# _services.py — owns the one object through which cdynamo's C++ core calls its Python side: built here, handed to
# _C.set_services by the package's __init__ (the C++ core imports no cdynamo module by name; csrc/interp/services.h).
from . import _allowed, _ctx_objects, _dict_positions, _dynamic, _graph_call, config, exc


class Services:
    """Each attribute is a field of the C++ ``Services`` struct, read once at ``install()``; the methods named
    ``lazy_*`` are called once, on the C++ side's first need, so that their modules stay unimported until then (cold
    start). Renaming or removing an attribute here fails ``install()`` with a TypeError naming it."""

    def __init__(self):
        self.config = config  # a module: read at each use (users change it at any time)
        self.unsupported_error = exc.Unsupported
        self.internal_error = exc.InternalError
        self.allowed_ids = _allowed.allowed  # sets of id(fn), changed in place by allow_in_graph / disallow_in_graph
        self.disallowed_ids = _allowed.disallowed
        self.graph_break = _allowed.graph_break
        self.graph_error_policy = _graph_call.error_policy
        self.graph_save_inputs = _graph_call.save_inputs
        self.graph_restore_inputs = _graph_call.restore_inputs
        self.frame_is_dynamic = _dynamic.frame_is_dynamic
        self.trace_shapes = _dynamic.TraceShapes
        self.need_fake_tensors = _dynamic.need_fake_tensors
        self.op_error_is_genuine = _dynamic.op_error_is_genuine
        self.is_user_error = _dynamic.is_user_error
        self.observe_tensor = _dynamic.observe_tensor
        self.observe_scalar = _dynamic.observe_scalar
        self.dict_key_at = _dict_positions.key_at  # loads of DictKey / DictValue sources by rewritten code
        self.dict_value_at = _dict_positions.value_at
        self.ctx_entered = _ctx_objects.entered  # a torch context object remade as its __enter__ left it

    @staticmethod
    def lazy_aten_meta_run():
        from . import _aten_meta

        return _aten_meta.run

    @staticmethod
    def lazy_meta_fallback_run():
        from . import _meta_fallback

        return _meta_fallback.run

    @staticmethod
    def lazy_autograd_function_apply():
        from . import _autograd

        return _autograd.FunctionApply

    @staticmethod
    def lazy_random_values():
        from . import _random_values

        return _random_values


def install(C):
    """Hands the services to the loaded extension module ``C`` (cdynamo._C)."""
    C.set_services(Services())
