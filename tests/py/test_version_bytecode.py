# test_version_bytecode.py — owns the tests of source constructs whose bytecode differs between CPython versions
# (3.12: inlined comprehensions, LOAD_SUPER_ATTR, BINARY_SLICE/STORE_SLICE, RETURN_CONST, CALL_INTRINSIC_1,
# exception handlers placed after the normal code; 3.13: LOAD_FAST_LOAD_FAST and the other paired local
# instructions, TO_BOOL and COMPARE_OP's bool form, CALL_KW, f-string CONVERT_VALUE/FORMAT_*, closures made
# with SET_FUNCTION_ATTRIBUTE and LOAD_CLOSURE as LOAD_FAST): compiled equals eager on every version, with the
# graph counts the construct allows.
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


def paired_locals_past_slot_15_after_a_break(x):
    t = x  # slot 1, dead at the break: the continuation puts it after the 17 live locals (slot 18)
    l0, l1, l2, l3, l4, l5, l6, l7, l8 = x + 0, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7, x + 8
    l9, l10, l11, l12, l13, l14, l15, l16 = x + 9, x + 10, x + 11, x + 12, x + 13, x + 14, x + 15, x + 16
    print("break")
    t = x * 2
    a = t + l1  # 3.13: LOAD_FAST_LOAD_FAST (t, l1), split in the continuation (t's slot is past 15)
    b, c = l2, t  # STORE_FAST_STORE_FAST
    return (a + b + c + l0 + l3 + l4 + l5 + l6 + l7 + l8 + l9 + l10 + l11 + l12 + l13 + l14 + l15 + l16)


def test_paired_local_instructions_split_in_a_continuation(capsys):
    x = torch.randn(3)
    got, cnt = _run(paired_locals_past_slot_15_after_a_break, x)
    torch.testing.assert_close(got, paired_locals_past_slot_15_after_a_break(x))
    assert cnt.frame_count == 2


def conditions_and_not(x, n):
    y = x + 1
    if n > 2 and not n < 0:  # 3.13: COMPARE_OP with its bool bit, TO_BOOL; UNARY_NOT
        y = y * 2
    flag = not (n == 3)  # a comparison converted to bool outside a jump
    return y, flag, f"{n!r:>4}{n}"  # CONVERT_VALUE, FORMAT_WITH_SPEC, FORMAT_SIMPLE


def test_conditions_not_and_fstrings_trace():
    x = torch.randn(3)
    got, cnt = _run(conditions_and_not, x, 3)
    ref = conditions_and_not(x, 3)
    torch.testing.assert_close(got[0], ref[0])
    assert got[1:] == ref[1:]
    assert cnt.frame_count == 1


def not_of_a_tensor_comparison(x):
    y = x.sum() * 2
    z = not (y > 100)  # a tensor comparison's truth value: a graph break, converted by Python
    return y + 1, z


def test_not_of_a_tensor_comparison_breaks_and_equals_eager():
    for x in (torch.ones(3), torch.full((3,), 40.0)):
        got, _ = _run(not_of_a_tensor_comparison, x)
        ref = not_of_a_tensor_comparison(x)
        torch.testing.assert_close(got[0], ref[0])
        assert got[1] is ref[1]


def keyword_call_breaks(x):
    y = x + 1
    print("break", sep="")  # CALL_KW (3.13) / KW_NAMES (3.11, 3.12) restarted after the graph
    return torch.clamp(y, min=-0.5, max=0.5)


def test_keyword_calls_before_and_after_a_break(capsys):
    x = torch.randn(3)
    got, cnt = _run(keyword_call_breaks, x)
    torch.testing.assert_close(got, keyword_call_breaks(x))
    assert cnt.frame_count == 2


def closure_after_a_break(x):
    k = x + 1
    print("break")
    def inner(y):
        return y * k  # k is a cell: the continuation closes over it
    return inner(x)


def test_closure_made_after_a_break(capsys):
    x = torch.randn(3)
    got, _ = _run(closure_after_a_break, x)
    torch.testing.assert_close(got, closure_after_a_break(x))
