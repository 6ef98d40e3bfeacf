# backends/__init__.py — owns the backends package surface: the registry functions (built-ins load on import).
from .registry import list_backends, lookup_backend, register_backend

__all__ = ["list_backends", "lookup_backend", "register_backend"]
