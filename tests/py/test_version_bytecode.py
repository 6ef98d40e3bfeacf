# test_version_bytecode.py — owns the tests of source constructs whose bytecode differs between CPython versions
# (3.12: inlined comprehensions, LOAD_SUPER_ATTR, BINARY_SLICE/STORE_SLICE, RETURN_CONST, CALL_INTRINSIC_1,
# exception handlers placed after the normal code): compiled equals eager on every version, with the graph
# counts the construct allows.
import torch

import cdynamo
from cdynamo.testing import CompileCounter


def _run(fn, *args):
    cnt = CompileCounter()
    got = cdynamo.optimize(cnt)(fn)(*args)
    return got, cnt


def comprehension_shadows_a_local(x):
    i = x * 2  # an inlined comprehension (3.12) saves and restores the outer `i`
    ys = [x + i for i in range(3)]
    return i + sum(ys)


def comprehension_over_unbound_name(x):
    ys = [x * k for k in range(2)]
    return ys[0] + ys[1]


class Base(torch.nn.Module):
    def scale(self, x):
        return x * 3


class Child(Base):
    def scale(self, x):
        return super().scale(x) + 1  # zero-argument super (3.12: LOAD_SUPER_ATTR)

    def forward(self, x):
        return self.scale(x)


def slices(x):
    xs = [1, 2, 3, 4]
    xs[1:3] = [7]          # STORE_SLICE
    return x[1:3] * sum(xs[0:2])  # BINARY_SLICE


def returns_a_constant(x):
    y = x + 1
    y.add_(1)
    return None  # RETURN_CONST


def plus_and_star_args(x):
    args = [x, 2]
    return +torch.mul(*args)  # CALL_INTRINSIC_1 (list to tuple, unary +)


def break_after_except(x):
    try:
        k = int("3")
    except ValueError:
        k = 0
    y = x * k
    print("break")  # after the handler rejoined (3.12: a backward jump that is no loop)
    return y + 1


def break_after_suppressed_with(x):
    import contextlib

    with contextlib.suppress(KeyError):
        {}["missing"]
    y = x + 1
    print("break")
    return y * 2


def test_comprehension_restores_the_shadowed_local():
    x = torch.randn(3)
    got, cnt = _run(comprehension_shadows_a_local, x)
    torch.testing.assert_close(got, comprehension_shadows_a_local(x))
    assert cnt.frame_count == 1


def test_comprehension_over_a_fresh_name():
    x = torch.randn(3)
    got, cnt = _run(comprehension_over_unbound_name, x)
    torch.testing.assert_close(got, comprehension_over_unbound_name(x))
    assert cnt.frame_count == 1


def test_zero_argument_super_is_inlined():
    m = Child()
    x = torch.randn(3)
    got, cnt = _run(m, x)
    torch.testing.assert_close(got, m(x))
    assert cnt.frame_count == 1


def test_slices_of_lists_and_tensors():
    x = torch.randn(5)
    got, cnt = _run(slices, x)
    torch.testing.assert_close(got, slices(x))
    assert cnt.frame_count == 1


def test_return_of_a_constant():
    x, ref = torch.zeros(2), torch.zeros(2)
    got, _ = _run(returns_a_constant, x)
    assert got is None and returns_a_constant(ref) is None


def test_unary_plus_and_star_args():
    x = torch.randn(3)
    got, cnt = _run(plus_and_star_args, x)
    torch.testing.assert_close(got, plus_and_star_args(x))
    assert cnt.frame_count == 1


def test_break_after_an_except_clause_splits_the_frame(capsys):
    x = torch.randn(3)
    got, cnt = _run(break_after_except, x)
    torch.testing.assert_close(got, break_after_except(x))
    assert cnt.frame_count == 2  # not "inside a loop": the graph before the print and the continuation's


def test_break_after_a_suppressing_with_equals_eager(capsys):
    x = torch.randn(3)
    got, _ = _run(break_after_suppressed_with, x)  # the raise inside the block: the frame runs as Python
    torch.testing.assert_close(got, break_after_suppressed_with(x))
