# backends/registry.py — owns the name -> backend registry, lookup (with entry-point loading) and listing.
"""A backend is ``fn(gm: torch.fx.GraphModule, example_inputs: list) -> callable``.

Names come from ``register_backend``, the built-ins (eager, aot_eager, inductor) and, lazily on the
lookup of an unknown name, the ``torch_dynamo_backends`` entry-point group of installed packages.
"""
import functools
from importlib import metadata

from ..exc import InvalidBackend

ENTRY_POINT_GROUP = "torch_dynamo_backends"

_registry = {}


def register_backend(compiler_fn=None, name=None):
    """Register ``compiler_fn`` under ``name`` (default: its __name__); usable as a decorator with or
    without arguments. Returns compiler_fn."""
    if compiler_fn is None:
        return functools.partial(register_backend, name=name)
    if isinstance(compiler_fn, str) and name is None:  # @register_backend("name")
        return functools.partial(register_backend, name=compiler_fn)
    if not callable(compiler_fn):
        raise TypeError(f"register_backend expects a callable backend, got {type(compiler_fn).__name__}")
    if name is None:
        name = getattr(compiler_fn, "__name__", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"backend name must be a non-empty str, got {name!r}")
    if name in _registry and _registry[name] is not compiler_fn:
        raise ValueError(f"a backend named {name!r} is already registered")
    _registry[name] = compiler_fn
    return compiler_fn


def _entry_points():
    try:
        return list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # a broken installed distribution must not break lookups of the built-ins
        return []


def _load_entry_point(name):
    for ep in _entry_points():
        if ep.name == name:
            fn = ep.load()
            if not callable(fn):
                raise TypeError(f"entry point {ep.value!r} for backend {name!r} is not callable")
            _registry.setdefault(name, fn)
            return _registry[name]
    return None


def lookup_backend(compiler_fn):
    """The backend callable for a registered name (or the callable itself)."""
    if isinstance(compiler_fn, str):
        fn = _registry.get(compiler_fn) or _load_entry_point(compiler_fn)
        if fn is None:
            raise InvalidBackend(compiler_fn, list_backends())
        return fn
    if callable(compiler_fn):
        return compiler_fn
    raise TypeError(f"backend must be a registered name or a callable, got {type(compiler_fn).__name__} "
                    f"{compiler_fn!r}")


def list_backends():
    """Sorted names of the registered backends and of the installed entry-point backends."""
    return sorted(set(_registry) | {ep.name for ep in _entry_points()})

