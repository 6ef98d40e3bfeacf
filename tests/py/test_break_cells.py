# test_break_cells.py — owns the tests of graph breaks in functions with cell and free variables: the rewritten frame stores cells with STORE_DEREF and makes the continuation as a closure over them.
"""Before, any break in a function with a cell (a local a nested function captures) or a free variable ran
the whole frame as Python. Each case compares results, printed output and the captured cell contents with
eager, and counts graphs (one per straight piece, as torch._dynamo makes)."""
import contextlib
import io

import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter

pytestmark = pytest.mark.usefixtures("cdynamo_reset")


def closure_after_break(x, k):
    n = 3
    y = x.sin() * n
    print("break")
    n = n + 1
    h = lambda t: t + n   # noqa: E731 - captures the cell n, made in the continuation
    return h(y) * k


def cell_argument(x):
    y = x.cos()
    print("break")
    get = lambda: x * 2   # noqa: E731 - x is an argument and a cell
    return get() + y


def two_breaks_cells(x):
    total = x.sum()
    y = x * total
    print("one")
    total = total + 1
    y = y - total
    print("two")
    f = lambda: total * y  # noqa: E731
    return f()


def closure_returned(x):
    scale = x.mean()
    print("break")
    scale = scale * 3
    return lambda t: t * scale


def outer_with_free(x):
    base = x.sum()

    def inner(t):
        u = t * base          # base is a free variable of inner
        print("break in inner")
        return u + base
    return inner(x)


def made_before_break(x):
    acc = []

    def add(v):
        acc.append(v)
    y = x * 2
    print("break")
    add(y)
    return acc[0] + 1


class Base(torch.nn.Module):
    def forward(self, x):
        return x + 1


class UsesSuper(Base):
    def forward(self, x):
        y = x * 2
        print("break")
        return super().forward(y)


CASES = {
    "closure_after_break": (closure_after_break, (torch.ones(3), 2.0), 2),
    "cell_argument": (cell_argument, (torch.ones(3),), 2),
    "two_breaks_cells": (two_breaks_cells, (torch.ones(3),), 3),
    "outer_with_free": (outer_with_free, (torch.ones(3),), 2),
}


def _quiet(fn, *args):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        r = fn(*args)
    return r, out.getvalue()


@pytest.mark.parametrize("name", sorted(CASES))
def test_break_in_function_with_cells(name):
    fn, args, graphs = CASES[name]
    ref, ref_out = _quiet(fn, *args)
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(fn)
    for _ in range(2):
        got, got_out = _quiet(opt, *args)
        torch.testing.assert_close(got, ref)
        assert got_out == ref_out
    assert cnt.frame_count == graphs  # each piece once, no recompile


def test_closure_made_after_break_sees_the_cell():
    ref = closure_after_break(torch.ones(3), 1.0)
    got = _quiet(cdynamo.optimize("eager")(closure_after_break), torch.ones(3), 1.0)[0]
    torch.testing.assert_close(got, ref)


def test_returned_closure_holds_the_rebuilt_cell():
    x = torch.arange(3.0)
    ref = closure_returned(x)
    got = _quiet(cdynamo.optimize("eager")(closure_returned), x)[0]
    torch.testing.assert_close(got(torch.ones(3)), ref(torch.ones(3)))
    assert got.__code__.co_freevars == ("scale",)


def test_function_made_before_break_runs_as_python():
    ex = cdynamo.explain(made_before_break)(torch.ones(3))
    assert any("captures a cell" in str(r) for r in ex.break_reasons)
    torch.testing.assert_close(_quiet(cdynamo.optimize("eager")(made_before_break), torch.ones(3))[0],
                               made_before_break(torch.ones(3)))


def test_zero_argument_super_with_break_equals_eager():
    m = UsesSuper()
    ref = _quiet(m, torch.ones(3))[0]
    got = _quiet(cdynamo.optimize("eager")(m), torch.ones(3))[0]
    torch.testing.assert_close(got, ref)


def test_continuation_is_a_closure_not_a_global():
    cnt = CompileCounter()
    _quiet(cdynamo.optimize(cnt)(cell_argument), torch.ones(3))
    assert not [k for k in globals() if k.startswith("__resume_at")]
