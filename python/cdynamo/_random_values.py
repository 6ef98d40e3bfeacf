# _random_values.py — owns the run-time side of module-level `random` calls traced into a graph (random_calls.cpp): the
# callable the rewritten code calls to draw each value, and the trace-time check of a call on a copy of the state.
import random
import threading

import torch

from ._core import C as _core_c

_saved = threading.local()  # .states: (Draws, [(generator, state), ...]) saved by the first draw of a graph's inputs


class RandomInput:
    """Draws one value of ``fn(*args, **kwargs)`` (``random.random`` / ``uniform`` / ``randint`` / ``randrange`` of the
    module's hidden generator) when the rewritten code loads the graph's inputs, in the order the trace made the calls,
    and hands it to the graph as a 0-d tensor (float64 for a float, int64 for an int) whose ``item()`` the graph reads,
    as torch._dynamo hands its random values to the graph before calling it."""

    __slots__ = ("fn", "args", "kwargs", "dtype", "draws")

    def __init__(self, fn, args, kwargs, dtype):
        self.fn, self.args, self.kwargs, self.dtype = fn, args, kwargs, dtype
        self.draws = None  # the first draw of a graph: its Draws, saved before drawing (draws_of)

    def __call__(self):
        if self.draws is not None:
            self.draws.save()
        return torch.tensor(self.fn(*self.args, **self.kwargs), dtype=self.dtype)

    def __repr__(self):
        return f"RandomInput({self.fn.__name__}, {self.args}, {self.kwargs})"


def supported():
    """The module-level functions traced (as torch._dynamo's call_random_fn: random, randint, randrange, uniform; and
    gauss, where torch._dynamo breaks: drawn at run time like the others, its cached second value included)."""
    return (random.random, random.uniform, random.randint, random.randrange, random.gauss)


def try_call(fn, args, kwargs):
    """What ``fn(*args, **kwargs)`` gives on a copy of the module's generator (the real state is left as it is): a
    float or int, or None when the call raises or gives another type (left to Python)."""
    copy = random.Random()
    copy.setstate(random.getstate())
    try:
        v = getattr(copy, fn.__name__)(*args, **kwargs)
    except Exception:
        return None
    return v if type(v) in (int, float) else None


def make(fn, args, kwargs):
    """The RandomInput of one traced call, or None when it is not traced (see try_call)."""
    v = try_call(fn, tuple(args), dict(kwargs))
    if v is None:
        return None
    return RandomInput(fn, tuple(args), dict(kwargs), torch.float64 if type(v) is float else torch.int64)


class Draws:
    """The generators one graph's inputs draw from. The graph's first draw saves their states (per thread); when the
    graph then fails cleanly and its frame reruns as Python, ``restore`` puts them back, so that the rerun draws each
    value once, as eager does (the rewritten code draws the inputs before calling the graph)."""

    __slots__ = ("generators",)

    def __init__(self, generators):
        self.generators = generators

    def save(self):
        _saved.states = (self, [_state_of(g) for g in self.generators])


def draws_of(makes):
    """The Draws of a graph whose inputs are drawn by the RandomInputs ``makes`` (in draw order): the first saves."""
    generators = []
    for m in makes:
        g = m.fn.__self__
        if not any(g is seen for seen in generators):
            generators.append(g)
    draws = Draws(generators)
    makes[0].draws = draws
    return draws


def restore(draws):
    """After a clean failure of the graph of ``draws``: its generators as its first draw found them."""
    saved = getattr(_saved, "states", None)
    _saved.states = None
    if saved is None or saved[0] is not draws:
        return
    for g, fast, state in saved[1]:
        if fast is None or not _core_c().random_state_restore(g, fast):
            g.setstate(state)
        else:
            g.gauss_next = state


def _state_of(g):
    """(generator, its Mersenne Twister state copied in C or None, gauss_next; or the whole getstate() when the C
    copy does not apply). getstate() builds a 625-int tuple (~3 us); the C copy is one memcpy."""
    fast = _core_c().random_state_save(g) if type(g) is random.Random else None
    return (g, fast, g.gauss_next if fast is not None else g.getstate())
