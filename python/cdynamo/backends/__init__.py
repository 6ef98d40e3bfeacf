# backends/__init__.py — owns the backends package surface: the registry functions (built-ins load on import).
from .registry import list_backends, lookup_backend, register_backend
from . import builtin  # noqa: E402,F401  (registers eager, aot_eager, inductor; imports only .registry)

__all__ = ["list_backends", "lookup_backend", "register_backend"]
