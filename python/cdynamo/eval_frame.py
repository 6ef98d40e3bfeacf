# eval_frame.py — owns optimize/compile/disable/skip/run (decorator and context-manager forms), reset(),
# assume_constant_result, and OptimizedModule (an nn.Module whose calls run with the frame callback set).
import functools
import inspect
import types
import weakref

import torch
from torch.nn.modules import module as _nn_module

from . import _callback, _core, _dynamic
from .backends.registry import lookup_backend


# The module arrives as a keyword-only default, not a closure: a frame with cells cannot graph-break yet.
_TRAMPOLINE_SRC = "def module_call(*args, _cdynamo_module):\n    return _cdynamo_module(*args)\n"
_TRAMPOLINE_CODE = compile(_TRAMPOLINE_SRC, "<cdynamo module call>", "exec").co_consts[0]
# Keyword calls (HF models: model(input_ids=...)) enter through their own trampoline, with **kwargs.
_KW_TRAMPOLINE_SRC = ("def module_call_kw(*args, _cdynamo_module, **kwargs):\n"
                      "    return _cdynamo_module(*args, **kwargs)\n")
_KW_TRAMPOLINE_CODE = compile(_KW_TRAMPOLINE_SRC, "<cdynamo module call>", "exec").co_consts[0]


# One trampoline code object per forward function: compiled code is cached per code object, so the instances of one
# module class wrapped one by one (compile(model.layers[i]) for each i, FSDP2's per-block compile) share their
# entries as under torch.compile, where the cache lives on forward's code: modules are guarded by type and structure,
# and an instance that needs an entry of its own still gets its own recompile limit (`_cdynamo_module` is the frame's
# first local, hook/translate.cpp: same_pinned_locals).
_TRAMPOLINES = weakref.WeakKeyDictionary()


def _trampoline_code(forward, template=_TRAMPOLINE_CODE):
    if forward is None:
        return template.replace()  # no forward function to share by: a code object of its own
    try:
        codes = _TRAMPOLINES.get(forward)
        if codes is None:
            codes = _TRAMPOLINES[forward] = {}
        code = codes.get(template)
        if code is None:
            code = codes[template] = template.replace()
        return code
    except TypeError:  # not weakly referenceable
        return template.replace()


def _module_trampoline(mod, template=_TRAMPOLINE_CODE):
    # The globals of the module's forward (the trampoline reads none itself): the tracer inlines a user function
    # only from a frame with the same globals, so forward is traced inside this frame, and nopython=True applies
    # to it.
    forward = getattr(getattr(mod, "forward", None), "__func__", None)
    fwd_globals = getattr(forward, "__globals__", None)
    fn = types.FunctionType(_trampoline_code(forward, template), fwd_globals if isinstance(fwd_globals, dict) else {},
                            "module_call")
    fn.__kwdefaults__ = {"_cdynamo_module": mod}
    return fn


def _wrap(fn, cb):
    oc = _core.C().OptimizedCallable(fn, cb)
    try:
        functools.update_wrapper(oc, fn)
    except (AttributeError, TypeError):  # callables without __name__ etc. keep what they have
        oc.__wrapped__ = fn
    return oc


class _ModuleEntryCallback:
    """The optimize callback, with the module's entry frame (the trampoline) reporting a fallback as one of the
    module's forward: forward, traced inside the entry frame, then runs as its own frame and may fall back for
    the same reason (a failing backend); the user gets one warning, naming their forward, not two."""

    def __init__(self, callback, entry_code, forward_code):
        self._callback = callback
        self._entry_code = entry_code
        self._forward_code = forward_code

    def __getattr__(self, name):
        return getattr(self._callback, name)

    def __repr__(self):
        return repr(self._callback)

    def on_fallback(self, info):
        if info.get("code") is self._entry_code:
            fc = self._forward_code
            info = dict(info, co_filename=fc.co_filename, co_firstlineno=fc.co_firstlineno, co_name=fc.co_name)
        return self._callback.on_fallback(info)


class _CallbackContext:
    """Sets the thread's frame callback while active; wraps functions and nn.Modules when called."""

    def __init__(self, callback):
        self.callback = callback
        self._prev = []

    def __reduce__(self):  # pickled with its callback; a copy starts with no active `with` blocks
        return (type(self), (self.callback,))

    def __deepcopy__(self, memo):
        # Shared, not copied: copy.deepcopy(optimized_module) keeps the same backend (and the C++ hook only
        # knows its own sentinel callbacks, e.g. run()'s RUN_ONLY, by identity).
        return self

    def __enter__(self):
        self._prev.append(_core.C().set_callback(self.callback))
        return self

    def __exit__(self, *exc):
        _core.C().set_callback(self._prev.pop())
        return False

    def __call__(self, fn):
        if isinstance(fn, torch.nn.Module):
            return OptimizedModule(fn, self)
        if inspect.isclass(fn):
            raise TypeError(f"cdynamo cannot wrap a class ({fn.__qualname__}); wrap a function, a method or "
                            "an nn.Module instance")
        if not callable(fn):
            raise TypeError(f"cdynamo expects a function or an nn.Module, got {type(fn).__name__} {fn!r}")
        return self._wrap_fn(fn)

    def _wrap_fn(self, fn):
        return _wrap(fn, self.callback)

    def _wrap_module_call(self, mod):
        # Positional calls enter through a small trampoline frame (its file is not library code), whose
        # `mod(*args)` the tracer follows into forward() — so modules whose forward lives in torch
        # (a bare nn.Linear) are captured too, and hooks are guarded. Keyword calls enter through a second one.
        entry = _module_trampoline(mod)
        forward_code = getattr(getattr(getattr(mod, "forward", None), "__func__", None), "__code__", None)
        entry_cb = self.callback
        if isinstance(entry_cb, _callback.Callback) and forward_code is not None:
            entry_cb = _ModuleEntryCallback(entry_cb, entry.__code__, forward_code)
        trampoline = _wrap(entry, entry_cb)
        kw_entry = _module_trampoline(mod, _KW_TRAMPOLINE_CODE)
        kw_cb = self.callback
        if isinstance(kw_cb, _callback.Callback) and forward_code is not None:
            kw_cb = _ModuleEntryCallback(kw_cb, kw_entry.__code__, forward_code)
        with_kwargs = _wrap(kw_entry, kw_cb)

        def call(*args, **kwargs):
            if kwargs:
                return with_kwargs(*args, **kwargs)
            return trampoline(*args)

        functools.update_wrapper(call, mod.__call__)
        call._cdynamo_entries = (trampoline, with_kwargs)  # OptimizedModule.__call__ calls them directly
        return call


class _OptimizeContext(_CallbackContext):
    """Returned by optimize(): capture with a backend."""


class _NullContext(_CallbackContext):
    """optimize(..., disable=True): wraps nothing and changes nothing."""

    def __init__(self):
        super().__init__(None)

    def __reduce__(self):
        return (type(self), ())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        return fn


class _DisableContext(_CallbackContext):
    """disable(): frames inside run uncaptured; the wrapped function itself is never captured."""

    def __init__(self):
        super().__init__(None)

    def __reduce__(self):
        return (type(self), ())

    def _wrap_fn(self, fn):
        code = getattr(fn, "__code__", None)
        if code is not None and inspect.iscode(code):
            _core.C().skip_code(code)
        return _wrap(fn, None)


class _RunContext(_CallbackContext):
    """run(): use code already compiled, never compile anything new."""

    def __init__(self):
        super().__init__(_core.C().RUN_ONLY)

    def __reduce__(self):
        return (type(self), ())


def _check_bool(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")


def optimize(backend="inductor", *, nopython=False, guard_fail_fn=None, disable=False, dynamic=None):
    """Compile the frames of a function or nn.Module with ``backend`` (a registered name or a callable
    ``backend(gm, example_inputs) -> callable``). Returns a context usable as a decorator, a wrapper
    (``optimize("eager")(fn)``) or a ``with`` block."""
    _check_bool("nopython", nopython)
    _check_bool("disable", disable)
    if dynamic is not None and not isinstance(dynamic, bool):
        raise TypeError(f"dynamic must be None or a bool, got {type(dynamic).__name__} {dynamic!r}")
    if guard_fail_fn is not None and not callable(guard_fail_fn):
        raise TypeError(f"guard_fail_fn must be callable, got {type(guard_fail_fn).__name__}")
    if disable:
        return _NullContext()
    fn = lookup_backend(backend)
    name = backend if isinstance(backend, str) else None
    cb = _callback.Callback(fn, nopython=nopython, guard_fail_fn=guard_fail_fn, dynamic=dynamic,
                            backend_name=name)
    _core.C()  # a missing extension is reported here, not at the first call
    _core.refresh_disable_codes()
    return _OptimizeContext(cb)


def _check_inductor_options(options):
    """torch.compile's check of ``options``: every key an inductor config name ('-' read as '_') with a value of
    that option's type; RuntimeError (torch's messages) otherwise, before anything is compiled."""
    if not options:
        return {}
    import typing

    from torch._inductor import config as inductor_config

    current = inductor_config.get_config_copy()
    checked = {}
    for key, val in options.items():
        name = key.replace("-", "_")
        if name not in current:
            raise RuntimeError(f"Unexpected optimization option {key}, known options are {list(current.keys())}")
        expected = inductor_config.get_type(name)
        if typing.get_origin(expected) is None and not isinstance(val, expected):
            raise RuntimeError(f"Unexpected type of attr {key}, got {type(val).__name__} should be "
                               f"{type(current[name]).__name__}")
        checked[name] = val
    return checked


def _inductor_with(mode, options):
    import torch._inductor

    patches = dict(torch._inductor.list_mode_options(mode) if mode else {})
    patches.update(_check_inductor_options(options))
    inductor = lookup_backend("inductor")

    def inductor_with_options(gm, example_inputs):
        return inductor(gm, example_inputs, config_patches=patches)

    # By region by default, as the inductor backend (config.compile_regions), except under CUDA graphs
    # (mode="reduce-overhead"): there each segment is one more graph replay per call, and at decode sizes that costs
    # more than the compile time saved (GPT-2 decode on an H200: 0.785 ms by region vs 0.539 ms for torch.compile).
    inductor_with_options._cdynamo_regions = not patches.get("triton.cudagraphs", False)
    inductor_with_options._cdynamo_compile_batch = getattr(inductor, "_cdynamo_compile_batch", None)
    return inductor_with_options


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None,
            disable=False):
    """torch.compile's signature: ``compile(fn)``, ``@compile``, ``@compile(backend="eager")``; ``backend=None``
    is the default backend (inductor), as in torch.compile."""
    if backend is None:
        backend = "inductor"
    _check_bool("fullgraph", fullgraph)
    _check_bool("disable", disable)
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be specified at the same time.")
    if mode is not None and not isinstance(mode, str):
        raise TypeError(f"mode must be a str, got {type(mode).__name__}")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options must be a dict, got {type(options).__name__}")
    if model is None:
        def decorator(m):
            if m is None:
                raise RuntimeError("Model can't be None")
            return compile(m, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                           options=options, disable=disable)
        return decorator
    if not callable(model):
        raise TypeError(f"compile expects a callable or an nn.Module, got {type(model).__name__} {model!r}")
    if (mode is not None or options) and not disable:
        if backend != "inductor":
            raise ValueError(f"mode/options are only supported with backend='inductor', got {backend!r}")
        if mode not in (None, "default"):
            import torch._inductor

            if mode not in torch._inductor.list_mode_options():
                raise RuntimeError(f"Unrecognized mode={mode!r}, should be one of: "
                                   f"{', '.join(torch._inductor.list_mode_options())}")
        backend = _inductor_with(None if mode == "default" else mode, options)
    return optimize(backend, nopython=fullgraph, dynamic=dynamic, disable=disable)(model)


def _innermost(fn):
    """The function under cdynamo's own wrappers (an optimize() result, a disable(recursive=False) wrapper)."""
    while isinstance(fn, _core.C().OptimizedCallable) or getattr(fn, "_cdynamo_nonrecursive_of", None) is not None:
        inner = getattr(fn, "_cdynamo_nonrecursive_of", None) or getattr(fn, "__wrapped__", None)
        if inner is None:
            break
        fn = inner
    return fn


def _nonrecursive_disable(fn):
    fn = _innermost(fn)
    if not callable(fn):
        raise TypeError(f"disable expects a callable, got {type(fn).__name__} {fn!r}")
    return _nonrecursive_wrapper(fn)


def _nonrecursive_wrapper(fn):
    # This wrapper's code is registered with the C++ hook (_core): the frame it calls directly runs as Python,
    # the frames that one calls are captured. It lives in cdynamo's package, so the tracer never inlines it:
    # a call to it inside a compiled function is a graph break.
    @functools.wraps(fn)
    def cdynamo_nonrecursive_disable(*args, **kwargs):
        return fn(*args, **kwargs)

    cdynamo_nonrecursive_disable._cdynamo_nonrecursive_of = fn
    return cdynamo_nonrecursive_disable


NONRECURSIVE_WRAPPER_CODE = _nonrecursive_wrapper(lambda: None).__code__
_core.register_nonrecursive_wrapper_code(NONRECURSIVE_WRAPPER_CODE)


def disable(fn=None, recursive=True):
    """Run ``fn`` (and everything it calls) without capture; ``fn``'s own frames are never captured.
    Without ``fn``: a decorator / ``with`` block that turns capture off.

    ``recursive=False``: returns a wrapper whose call runs ``fn``'s frame as Python while the functions ``fn``
    calls are still compiled (torch._dynamo.disable(fn, recursive=False)); without ``fn``, a decorator."""
    if not recursive:
        return _nonrecursive_disable if fn is None else _nonrecursive_disable(fn)
    ctx = _DisableContext()
    return ctx if fn is None else ctx(fn)


def skip(fn=None):
    """Never capture ``fn``'s frames, nor inline it into a caller's graph (a call to it is a graph break), while
    the functions it calls are still compiled (torch._dynamo.skip). Marks ``fn.__code__`` for the process (kept
    across reset()) and returns ``fn`` itself."""
    if fn is None:
        return skip
    fn = _innermost(fn)
    code = getattr(fn, "__code__", None)
    if not inspect.iscode(code):
        raise TypeError(f"skip expects a Python function, got {type(fn).__name__} {fn!r}")
    _core.C().mark_skip(code)
    return fn


def assume_constant_result(fn):
    """Inside a compiled function, a call to ``fn`` is made once, while tracing, and its result (constants,
    tensors, tuples/lists of them) becomes a constant of the graph, without guards: the caller promises it does
    not change (torch._dynamo.assume_constant_result). Outside a trace ``fn`` runs as usual. Returns ``fn``."""
    fn._dynamo_marked_constant = True  # torch._dynamo's mark: functions marked by either are honoured by both
    return fn


def run(fn=None):
    """Run ``fn`` with the code already compiled for it (guards checked) but never compile anything new.
    Without ``fn``: a decorator / ``with`` block."""
    ctx = _RunContext()
    return ctx if fn is None else ctx(fn)


def reset():
    """Forget every compiled frame (C++ caches and injected globals), the compile times and the private counters;
    cdynamo.utils.counters are kept, as torch._dynamo.reset() keeps torch._dynamo.utils.counters."""
    _core.C().reset()
    _callback.clear_state()
    _dynamic.clear_state()


class OptimizedModule(torch.nn.Module):
    """Wraps an nn.Module: same parameters and attributes (forwarded to ``_orig_mod``), and each call runs
    the original module's ``__call__`` (hooks included) under the optimize context."""

    _own_attrs = frozenset({"_orig_mod", "_cdynamo_ctx", "forward", "_cdynamo_entries", "_super_module_initialized"})

    def __init__(self, mod, ctx):
        object.__setattr__(self, "_super_module_initialized", False)
        super().__init__()
        object.__setattr__(self, "_super_module_initialized", True)
        self._orig_mod = mod  # registered as a submodule: parameters are shared, not copied
        self._cdynamo_ctx = ctx
        self.forward = ctx._wrap_module_call(mod)
        self._cdynamo_entries = (self.forward, *self.forward._cdynamo_entries)

    @property
    def training(self):
        return self._orig_mod.training

    @training.setter
    def training(self, value):
        if self._super_module_initialized:
            self._orig_mod.training = value

    def __getattr__(self, name):
        if name == "_orig_mod":
            return self._modules["_orig_mod"]
        return getattr(self._orig_mod, name)

    def __setattr__(self, name, value):
        if name in OptimizedModule._own_attrs or hasattr(type(self), name):
            return super().__setattr__(name, value)
        return setattr(self._orig_mod, name, value)

    def __delattr__(self, name):
        if name in OptimizedModule._own_attrs or hasattr(type(self), name):
            return super().__delattr__(name)
        return delattr(self._orig_mod, name)

    def __dir__(self):
        return sorted(set(self._orig_mod.__dir__()) | set(super().__dir__()))

    def __repr__(self):
        return f"OptimizedModule({self._orig_mod!r})"

    def __reduce__(self):
        # copy.deepcopy / pickle rebuild the wrapper around the copied module (as torch's OptimizedModule does):
        # copying __dict__ would keep `forward`, whose closure calls the original module.
        return (self.__class__, (self._orig_mod, self._cdynamo_ctx))


# __call__: nn.Module.__call__ with its no-hook path inlined, in C++ (csrc/hook/module_call.cpp; no Python frame per
# call): hooks on the wrapper, global module hooks, `module.compile()` and torch.jit tracing take nn.Module's own
# path; otherwise the wrapper's positional or keyword entry (`_cdynamo_entries`) runs, or a `forward` set since.
_core.C().install_module_call(OptimizedModule, _nn_module.__dict__, torch.nn.Module.__call__)
