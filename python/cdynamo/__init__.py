# __init__.py — owns cdynamo's public surface (torch._dynamo-style names).
"""cdynamo: a C++ PEP 523 frontend that captures PyTorch code into FX graphs for backends.

    import cdynamo
    opt_fn = cdynamo.optimize("eager")(fn)
"""
import importlib

from . import config, exc, utils
from ._allowed import allow_in_graph, disallow_in_graph, graph_break
from .backends.registry import list_backends, lookup_backend, register_backend
from .eval_frame import OptimizedModule, assume_constant_result, compile, disable, optimize, reset, run, skip
from ._dynamic import mark_dynamic, mark_static, maybe_mark_dynamic
from . import _core, _services

try:
    _services.install(_core.C())
except ImportError:  # no extension: every entry point raises _core.C()'s ImportError, which names the fix
    pass

__version__ = "0.1.0"

__all__ = [
    "OptimizedModule", "allow_in_graph", "assume_constant_result", "compile", "config", "disable",
    "disallow_in_graph", "exc", "explain", "export", "graph_break", "list_backends", "lookup_backend", "mark_dynamic", "mark_static",
    "maybe_mark_dynamic", "optimize", "register_backend",
    "reset", "run", "skip", "testing", "utils", "ExplainOutput", "ExportResult",
]


# Imported on first use, so that `import cdynamo` stays cheap (issue 30): explain() and export() bring in the
# export machinery (torch.fx's pytree codegen) that a plain compile never needs.
_LAZY = {"explain": "._explain", "ExplainOutput": "._explain", "export": "._export", "ExportResult": "._export"}


def __getattr__(name):
    if name in ("testing", "_C"):
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'cdynamo' has no attribute {name!r}")
