# _aten_meta.py — owns the dispatch mode under which the tracer propagates shapes on meta tensors: each aten op
# runs ATen's C++ Meta kernel where torch shadows it with a Python one (cdynamo._C.call_aten_meta).
"""Why: `import torch` registers Python meta kernels (torch/_meta_registrations.py, references from torch._refs
and torch._decomp) over ATen's own C++ Meta kernels for about 640 aten ops. The Python ones import sympy
(torch._check) and torch._dynamo with torch._inductor (torch._disable_dynamo wrappers): about a second before
the first graph of a fresh process. ATen's C++ Meta kernel computes the same output metadata (the structured
kernel's meta function, which the CPU kernel itself runs); an op whose only C++ kernel for Meta is a composite one
(CompositeExplicitAutograd: convolution, native_layer_norm, embedding, ...) runs that, as the dispatcher would
without the Python registration, its own aten calls coming back to this mode. A pointwise op with per-device kernels only (relu, where,
hardtanh) runs its CPU kernel on zeros of the same metadata (its output metadata never depends on values).
convolution, native_batch_norm, var_mean, _adaptive_avg_pool2d, index_select and where.self_out (no C++ Meta
kernel; Python ones that import sympy or torch._dynamo) get their metadata from cdynamo._aten_shapes.

Two routes reach ATen's composite kernels where the C++ side (kinds 1, 2) does not:
- an op with no Meta registration at all whose Meta kernel is therefore a composite one (full_like, _to_copy,
  softmax.int, ...): the dispatcher would run that composite, but with this mode popped its aten calls would
  reach torch's Python meta kernels (empty_like, _softmax); here they come back to the mode (kind 5);
- a factory op (arange, ones, scalar_tensor, ...) called with no tensor argument and device="meta": the C++ side
  only takes calls with a meta tensor argument; the composite kernel the Python registration shadows runs here.
The out= overload of a pointwise op with per-device kernels only (abs.out, which abs's composite calls) gets
`out` back the way torch's reference does (kind 6).
Other ops without a C++ kernel for Meta, tensors that are not all meta, and calls made under a user's own dispatch
mode dispatch exactly as before.
"""
import torch
from torch._C import DispatchKey
from torch.utils._python_dispatch import TorchDispatchMode

from torch.utils._pytree import tree_flatten as _tree_flatten, tree_unflatten as _tree_unflatten

from ._aten_shapes import SHAPES as _SHAPES
from ._core import C


class _AtenMetaMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls):
        # torch wraps a mode's __torch_dispatch__ in torch._disable_dynamo (importing torch._dynamo on its first
        # call) unless this is False; torch._dynamo never traces this mode: cdynamo enters it only while tracing.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        kind = _kinds.get(func)
        if kind is None:
            kind = _kinds[func] = _kind_of(func)
        if kind == 1:  # ATen's C++ Meta kernel
            r = _call(func, args, kwargs)
        elif kind == 2:  # a composite kernel: the aten ops it calls come back here
            with _AtenMetaMode():
                r = _call(func, args, kwargs)
                if r is NotImplemented:  # (no meta tensor argument: a factory op's call with device="meta")
                    r = _factory(func, args, kwargs)
        elif kind == 3:  # pointwise with CPU kernels only (relu, where, hardtanh, ...)
            r = _pointwise_on_zeros(func, args, kwargs)
        elif kind == 4:  # no C++ Meta kernel, a Python one that imports sympy: cdynamo._aten_shapes
            fn, reenter = _SHAPES[func]
            if reenter:
                with _AtenMetaMode():
                    r = fn(*args, **kwargs)
            else:
                r = fn(*args, **kwargs)
        elif kind == 5:  # no Meta registration: the composite kernel the dispatcher picks, its calls back here
            with _AtenMetaMode():
                r = _composite(func, args, kwargs)
        elif kind == 6:  # the out= form of a pointwise op with CPU kernels only (abs.out in abs's composite)
            with _AtenMetaMode():
                r = _pointwise_out(func, args, kwargs)
        else:
            return func(*args, **kwargs)
        if r is NotImplemented:  # not all tensors meta, or the kernel refused: as before
            return func(*args, **kwargs)
        return r


_ZEROS_LIMIT = 1 << 20  # elements of meta operands a pointwise op may run on as zeros
_kinds = {}  # OpOverload -> aten_meta_kind (ops live as long as the process)
_kernels = {}  # OpOverload -> (dispatch key, ATen composite kernel or None), for kinds 2 (factories) and 5
_functional = {}  # out= OpOverload -> its functional OpOverload or None, for kind 6
_in_out = set()  # out= OpOverloads whose functional form is being run (compiles hold a lock: one thread)
_call = C().call_aten_meta
_kind = C().aten_meta_kind
_stack_len = torch._C._len_torch_dispatch_stack


def _kind_of(func):
    if func in _SHAPES:
        return 4
    kind = _kind(func)
    if (kind == 0 and func.namespace == "aten" and torch.Tag.pointwise in func.tags
            and torch.Tag.nondeterministic_seeded not in func.tags and not func._schema.is_mutable
            and all(r.alias_info is None for r in func._schema.returns)):
        return 3
    if kind == 0 and _composite_kernel(func, DispatchKey.Meta) is not None:
        return 5
    if kind == 0 and _functional_of(func) is not None:
        return 6
    return kind


def _functional_of(func):
    """For the out= overload of a pointwise aten op (one `out` tensor, returned), its functional overload."""
    if func in _functional:
        return _functional[func]
    found = None
    schema = func._schema
    outs = [a for a in schema.arguments if a.is_out]
    if (func.namespace == "aten" and torch.Tag.pointwise in func.tags and len(outs) == 1
            and schema.arguments[-1].is_out and len(schema.returns) == 1 and str(outs[0].type) == "Tensor"):
        want = [(a.name, str(a.type)) for a in schema.arguments[:-1]]
        for name in func.overloadpacket.overloads():
            other = getattr(func.overloadpacket, name)
            o = other._schema
            if (other is not func and not o.is_mutable and len(o.returns) == 1 and o.returns[0].alias_info is None
                    and [(a.name, str(a.type)) for a in o.arguments] == want):
                found = other
                break
    _functional[func] = found
    return found


def _pointwise_out(func, args, kwargs):
    """Kind 6: what torch's Python meta kernel (a reference under out_wrapper) gives for an out= call: `out` itself,
    resized to the result's shape (contiguous) when it is empty. The result's shape and dtype come from the
    functional overload, under this mode. NotImplemented (the usual dispatch) for a dtype other than the result's
    or an `out` of another shape with elements (torch warns and resizes it)."""
    out = kwargs.get("out")
    if type(out) is not torch.Tensor or out.device.type != "meta" or out.layout != torch.strided:
        return NotImplemented
    if not _all_meta(_tree_flatten((args, kwargs))[0]):
        return NotImplemented
    rest = {k: v for k, v in kwargs.items() if k != "out"}
    if func in _in_out:
        # The functional op's composite kernel calls this out= form again (abs -> abs.out -> abs -> ...): the
        # functional op's CPU kernel on zeros gives the result's metadata instead.
        r = _pointwise_on_zeros(_functional_of(func), args, rest)
        if r is NotImplemented:
            return NotImplemented
    else:
        _in_out.add(func)
        try:
            r = _functional_of(func)(*args, **rest)
        finally:
            _in_out.discard(func)
    if type(r) is not torch.Tensor or r.dtype != out.dtype:
        return NotImplemented
    if tuple(r.shape) != tuple(out.shape):
        if out.numel() != 0:
            return NotImplemented
        out.resize_(r.shape)
    return out


def _composite_kernel(func, key):
    """The kernel the dispatcher computed for `key` when it is one of ATen's composite kernels (generated
    RegisterComposite*.cpp; never a Python one, a user's or a backend's) of an aten op that changes no argument;
    else None. An op returning a view of an argument qualifies only with a CompositeImplicitAutograd kernel (reshape:
    the views are made by the aten ops it calls, which come back to the mode; those ops make them as before)."""
    got = _kernels.get(func)
    if got is not None and got[0] == key:
        return got[1]
    kernel = None
    if func.namespace == "aten" and not func._schema.is_mutable:
        name = func.name()
        if key == DispatchKey.Meta and not torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta") \
                or key == DispatchKey.CPU and not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU"):
            k = torch._C._dispatch_get_computed_kernel_for_dispatch_key(name, key)
            debug, view = repr(k), any(r.alias_info is not None for r in func._schema.returns)
            if _ATEN_COMPOSITE_IMPLICIT in debug or (_ATEN_COMPOSITE in debug and not view):
                kernel = k
    _kernels[func] = (key, kernel)
    return kernel


_ATEN_COMPOSITE = "/ATen/RegisterComposite"
_ATEN_COMPOSITE_IMPLICIT = "/ATen/RegisterCompositeImplicitAutograd"
_META_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)


def _all_meta(flat):
    """Every tensor a plain strided meta tensor (at least one)."""
    n = 0
    for a in flat:
        if isinstance(a, torch.Tensor):
            if type(a) is not torch.Tensor or a.device.type != "meta" or a.layout != torch.strided:
                return False
            n += 1
    return n > 0


def _run_kernel(kernel, args, kwargs):
    try:
        return kernel.call_boxed(_META_KEYS, *args, **kwargs)
    except Exception:  # noqa: BLE001 - a functional op: the usual dispatch raises what it always raised
        return NotImplemented


def _composite(func, args, kwargs):
    """Kind 5: an op with no kernel registered for Meta, whose Meta kernel is an ATen composite one."""
    kernel = _composite_kernel(func, DispatchKey.Meta)
    if kernel is None or not _all_meta(_tree_flatten((args, kwargs))[0]):
        return NotImplemented
    return _run_kernel(kernel, args, kwargs)


def _factory(func, args, kwargs):
    """A kind 2 factory op called with no tensor argument and device="meta": the composite kernel that torch's
    Python meta registration shadows (kind 2 says ATen's composite is the one behind it). It is found as the
    kernel computed for CPU, which has no kernel of its own, so the dispatcher computes it from that composite."""
    device = kwargs.get("device")
    if device is None or torch.device(device).type != "meta":
        return NotImplemented
    if any(isinstance(a, torch.Tensor) for a in _tree_flatten((args, kwargs))[0]):
        return NotImplemented
    kernel = _composite_kernel(func, DispatchKey.CPU)
    if kernel is None:
        return NotImplemented
    return _run_kernel(kernel, args, kwargs)


def _pointwise_on_zeros(func, args, kwargs):
    """A pointwise op whose only kernels are per device (no C++ Meta kernel, no composite one): its CPU kernel
    run on zeros of the meta arguments' metadata, the result's metadata back as meta tensors. A pointwise kernel's
    output metadata follows from its operands' (TensorIterator), never from their values; it draws no random
    numbers (seeded ops are not taken) and changes no argument. NotImplemented where anything differs."""
    flat, spec = _tree_flatten((args, kwargs))
    real = []
    metas = [a for a in flat if isinstance(a, torch.Tensor) and a.device.type == "meta"]
    if not metas or sum(a.numel() for a in metas) > _ZEROS_LIMIT:
        return NotImplemented  # (large operands: the Python meta kernel, rather than memory for zeros)
    for a in flat:
        if isinstance(a, torch.Tensor):
            if type(a) is not torch.Tensor or a.layout != torch.strided:
                return NotImplemented
            if a.device.type == "meta":
                a = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype).zero_()
            elif not (a.device.type == "cpu" and a.dim() == 0):
                return NotImplemented
        real.append(a)
    rargs, rkwargs = _tree_unflatten(real, spec)
    try:
        out = func(*rargs, **rkwargs)
    except Exception:  # noqa: BLE001 - the usual dispatch raises what it always raised
        return NotImplemented
    if type(out) is not torch.Tensor or out.layout != torch.strided:
        return NotImplemented
    return torch.empty_strided(out.shape, out.stride(), dtype=out.dtype, device="meta")


def run(fn, args, kwargs):
    """fn(*args, **kwargs) with meta tensors, under the mode (not under a mode of the user's: as before)."""
    if _stack_len():
        return fn(*args, **kwargs)
    with _AtenMetaMode():
        return fn(*args, **kwargs)
