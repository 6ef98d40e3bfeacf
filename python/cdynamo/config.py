# config.py — owns cdynamo's runtime options: validated get/set, aliases, and config.patch().
"""cdynamo options, named and defaulted as torch._dynamo.config's.

Read and set them as attributes: ``cdynamo.config.recompile_limit = 4``. Unknown names raise
AttributeError (on get and on set, as torch._dynamo.config), values of the wrong type raise TypeError.
An alias (``cache_size_limit``) and its option (``recompile_limit``) are one value.
``config.patch(...)`` changes options for a ``with`` block or a decorated function. The C++ core reads
``recompile_limit`` and ``accumulated_recompile_limit`` on each recompile, ``suppress_errors`` on a backend failure and ``enable_dynamo_decompositions``
while tracing; the Python callback reads
``verbose`` and ``verify_correctness`` on each event; ``automatic_dynamic_shapes``, ``assume_static_by_default`` and
``capture_scalar_outputs`` / ``capture_dynamic_output_shape_ops``, ``compile_regions`` and ``regions_min_calls`` on
each compile; ``merge_cpp_kernels`` on each inductor segment compile. ``traceable_tensor_subclasses`` is accepted and not read yet (see docs/python_api.md).
"""
import contextlib
import sys
import types

# name -> (type, default, doc)
_OPTIONS = {
    "recompile_limit": (int, 8, "cache entries of a code object for the objects its frame's locals pin by identity "
                        "(a module's self) before that frame runs as plain Python"),
    "accumulated_recompile_limit": (int, 256, "cache entries of a code object over all objects"),
    "suppress_errors": (bool, False, "a backend failure (or a verify_correctness mismatch) runs the frame as Python "
                        "with one warning instead of raising BackendCompilerFailed (never under nopython)"),
    "verbose": (bool, False, "keep full multi-line reasons (tracebacks) in fallback warnings and errors"),
    "verify_correctness": (bool, False, "run each captured graph as is and compiled by the backend on copies of "
                           "its example inputs at compile time; a mismatch is a BackendCompilerFailed"),
    "capture_scalar_outputs": (bool, False, "Tensor.item() is a graph node whose value is an unbacked symbol (the "
                               "frame is traced with fake tensors); a branch on it is a graph break. Off: .item() is a "
                               "graph break; read while tracing"),
    "capture_dynamic_output_shape_ops": (bool, False, "ops whose output shape depends on the data (nonzero, unique, "
                                         "masked indexing) are graph nodes with unbacked sizes (the frame is traced "
                                         "with fake tensors). Off: they are graph breaks; read while tracing"),
    "enable_dynamo_decompositions": (bool, True, "addcmul_/addcdiv_ with value= and add_ with a tensor alpha= are "
                                    "traced as torch._dynamo decomposes them (mul/div, prims.fma, copy_): torch.optim's "
                                    "tensor step sizes stay in the graph; read while tracing"),
    "automatic_dynamic_shapes": (bool, True, "a recompile caused by a changed size (or int argument) makes that "
                                 "dimension (or int) dynamic: the frame compiles once more with symbolic sizes"),
    "assume_static_by_default": (bool, True, "dimensions are static until their size changes or they are marked "
                                 "dynamic; False: every dimension (and int argument) is dynamic from the first "
                                 "compile, as compile(dynamic=True)"),
    "traceable_tensor_subclasses": (set, set(), "accepted, not read (deprecated and unused in torch._dynamo too)"),
    "optimize_ddp": (bool, True, "a graph captured inside a DistributedDataParallel forward is split at DDP's "
                     "gradient-bucket boundaries, one backend compile per bucket, so each bucket's all-reduce overlaps "
                     "the rest of the backward (_ddp.py); read on each compile"),
    "compile_regions": ("optional bool", None, "regional compilation (_regions.py): a graph with repeated calls of "
                        "sibling modules of one class (model.layers.0 ... N-1) is cut at their edges and each distinct "
                        "segment compiled once. None: for the inductor backend (and compile(mode=/options=)); True: "
                        "for every backend; False: never; read on each compile"),
    "regions_min_calls": (int, 3, "how many equal module calls make a graph worth compiling by region (>= 2). 3: "
                          "with two layers the three compiles (before, one layer, after) cost more than one of the "
                          "whole graph (inductor, CPU: Llama of 2 layers 27.0 s by region vs 24.8 s whole; 3 layers "
                          "25.0 vs 24.3; 4 layers 23.5 vs 28.1)"),
    "regions_min_work": (float, 10.0, "the automatic policy (compile_regions None): a region must hold this many "
                         "compiled-segment calls' worth of estimated device time (_region_work.py); smaller layers are "
                         "grouped k at a time, or the graph compiled whole (10: a segment call is at most ~10% of the "
                         "region's time; 0: one region per layer, as compile_regions=True)"),
    "merge_cpp_kernels": (bool, True, "while regions compile their segments with inductor (CPU), the C++ kernels "
                          "of one segment are built in one compiler run, one shared library (backends/"
                          "_inductor_kernels.py): each run's fixed cost (the precompiled header, linking) is paid once "
                          "per segment, not once per kernel; read on each segment compile"),
    "dead_code_elimination": (bool, True, "a captured graph's pure nodes whose values nothing uses are dropped "
                              "before the backend sees it (_dead_code.py); read on each compile"),
}
_ALIASES = {"cache_size_limit": "recompile_limit", "accumulated_cache_size_limit": "accumulated_recompile_limit"}


def _default(name):
    value = _OPTIONS[name][1]
    return set(value) if isinstance(value, set) else value  # a fresh set: the default is never mutated


_values = {name: _default(name) for name in _OPTIONS}


def _canonical(name):
    name = _ALIASES.get(name, name)
    if name not in _OPTIONS:
        valid = ", ".join(sorted(list(_OPTIONS) + list(_ALIASES)))
        raise AttributeError(f"cdynamo.config has no option {name!r}; valid options: {valid}")
    return name


def _check(name, value):
    typ = _OPTIONS[name][0]
    # bool is an int subclass: reject it for int options, and accept only real bools for bool options.
    if typ is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"cdynamo.config.{name} must be an int, got {type(value).__name__} {value!r}")
    if typ is bool and not isinstance(value, bool):
        raise TypeError(f"cdynamo.config.{name} must be a bool, got {type(value).__name__} {value!r}")
    if typ == "optional bool" and value is not None and not isinstance(value, bool):
        raise TypeError(f"cdynamo.config.{name} must be None or a bool, got {type(value).__name__} {value!r}")
    if typ is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise TypeError(f"cdynamo.config.{name} must be a number, got {type(value).__name__} {value!r}")
    if typ is float and not value >= 0:
        raise ValueError(f"cdynamo.config.{name} must be >= 0, got {value}")
    if typ is set and not isinstance(value, (set, frozenset)):
        raise TypeError(f"cdynamo.config.{name} must be a set, got {type(value).__name__} {value!r}")
    if name in ("recompile_limit", "accumulated_recompile_limit") and value < 1:
        raise ValueError(f"cdynamo.config.{name} must be >= 1, got {value}")
    if name == "regions_min_calls" and value < 2:
        raise ValueError(f"cdynamo.config.{name} must be >= 2, got {value}")


def to_dict():
    """A copy of every option's current value."""
    return dict(_values)


def defaults():
    """Every option's default value."""
    return {name: _default(name) for name in _OPTIONS}


class patch(contextlib.ContextDecorator):
    """Temporarily set options: ``with config.patch(recompile_limit=2):`` or ``@config.patch("verbose", True)``."""

    def __init__(self, arg=None, value=None, **kwargs):
        changes = {}
        if isinstance(arg, dict):
            changes.update(arg)
        elif isinstance(arg, str):
            changes[arg] = value
        elif arg is not None:
            raise TypeError(f"config.patch expects a name, a dict or keywords, got {type(arg).__name__}")
        changes.update(kwargs)
        self._changes = {}
        for name, val in changes.items():
            canon = _canonical(name)
            _check(canon, val)
            self._changes[canon] = val
        self._saved = []

    def __enter__(self):
        self._saved.append({name: _values[name] for name in self._changes})
        _values.update(self._changes)
        return self

    def __exit__(self, *exc):
        _values.update(self._saved.pop())
        return False


class _ConfigModule(types.ModuleType):
    def __getattr__(self, name):  # only reached for names not in the module's __dict__
        if name.startswith("__"):
            raise AttributeError(name)
        return _values[_canonical(name)]

    def __setattr__(self, name, value):
        if name.startswith("__"):
            return super().__setattr__(name, value)
        canon = _canonical(name)
        _check(canon, value)
        _values[canon] = value

    def __delattr__(self, name):
        raise AttributeError(f"cdynamo.config options cannot be deleted ({name!r})")

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(_OPTIONS) | set(_ALIASES))


sys.modules[__name__].__class__ = _ConfigModule
