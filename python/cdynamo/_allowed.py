# _allowed.py — owns the allow_in_graph / disallow_in_graph registries (ids of callables) the C++ core queries.
"""``allowed`` and ``disallowed`` are sets of ``id(fn)``; ``_keep`` holds the objects so ids stay valid."""

allowed = set()
disallowed = set()
_keep = {}


def _targets(fn, what):
    fns = list(fn) if isinstance(fn, (list, tuple)) else [fn]
    for f in fns:
        if not callable(f):
            raise TypeError(f"{what} expects a callable (or a list of callables), got {type(f).__name__} {f!r}")
    return fns


def allow_in_graph(fn):
    """Put calls to ``fn`` into the graph as one opaque node instead of tracing into it. Returns fn."""
    for f in _targets(fn, "allow_in_graph"):
        allowed.add(id(f))
        disallowed.discard(id(f))
        _keep[id(f)] = f
    return fn


def disallow_in_graph(fn):
    """Never put calls to ``fn`` into a graph: a call to it is a graph break. Returns fn."""
    for f in _targets(fn, "disallow_in_graph"):
        disallowed.add(id(f))
        allowed.discard(id(f))
        _keep[id(f)] = f
    return fn


def graph_break():
    """Does nothing when run; inside a compiled region cdynamo ends the current graph at this call."""
