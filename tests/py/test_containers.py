# test_containers.py — owns the soundness tests of containers from the frame: lists, dicts and sets passed in
# or read from globals are traced as values, their changes written back after the graph (identity kept, in
# order, never twice), their structure guarded, and aliasing between them guarded.
import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter, assert_same


# cdynamo.reset() before and after each test (conftest.py).
pytestmark = pytest.mark.usefixtures("cdynamo_reset")


def compiled(fn):
    cnt = CompileCounter()
    return cdynamo.optimize(cnt)(fn), cnt


def test_dict_argument_keys_are_guarded_values_are_inputs():
    def f(d):
        return d["a"] * 2 + d["b"]

    opt, cnt = compiled(f)
    d = {"a": torch.randn(3), "b": torch.randn(3)}
    assert_same(opt(d), f(d))
    d2 = {"a": torch.randn(3), "b": torch.randn(3)}
    assert_same(opt(d2), f(d2))
    assert cnt.frame_count == 1, "same keys, new tensors: no recompile"
    d3 = {"b": torch.randn(3), "a": torch.randn(3)}
    assert_same(opt(d3), f(d3))
    assert cnt.frame_count == 2, "key order changed: recompiled"
    d4 = {"a": torch.randn(3), "b": torch.randn(3), "c": 1}
    assert_same(opt(d4), f(d4))
    assert cnt.frame_count == 3, "a key added: recompiled"


def test_list_argument_mutations_are_written_back_in_place():
    def f(xs, x):
        xs.append(x * 2)
        xs.insert(0, x + 1)
        last = xs.pop()
        xs[1] = xs[1] - 1
        return last + xs[0]

    opt, cnt = compiled(f)
    x = torch.randn(3)
    a, b = [torch.ones(3), torch.zeros(3)], [torch.ones(3), torch.zeros(3)]
    ida = id(a)
    assert_same(opt(a, x), f(b, x))
    assert id(a) == ida
    assert_same(a, b)
    assert cnt.frame_count == 1 and cnt.op_count >= 4


def test_values_are_read_before_the_containers_change():
    def f(xs, y):
        first = xs[0]  # read from the list before it changes
        xs.remove(first)  # found by identity (no tensor comparison)
        xs.insert(0, y)
        return first * 2, xs

    opt, _ = compiled(f)
    t0, t1, y = torch.randn(2), torch.randn(2), torch.randn(2)
    a = [t0, t1]
    out, lst = opt(a, y)
    assert lst is a
    assert_same(out, t0 * 2)
    assert a[0] is y and a[1] is t1 and len(a) == 2


def test_dict_and_set_arguments_written_back():
    def f(x, d, s):
        d["count"] = d["count"] + 1
        d.pop("drop")
        d["new"] = 3
        s.add("seen")
        s.discard("gone")
        return x * d["count"] + len(s)

    opt, cnt = compiled(f)
    x = torch.randn(3)
    d1, s1 = {"count": 1, "drop": 0}, {"gone", "kept"}
    d2, s2 = {"count": 1, "drop": 0}, {"gone", "kept"}
    assert_same(opt(x, d1, s1), f(x, d2, s2))
    assert d1 == d2 and list(d1) == list(d2) and s1 == s2
    # The guards saw {"count": 1, ...}: a different count recompiles, the same does not.
    d1, s1 = {"count": 1, "drop": 0}, {"gone", "kept"}
    opt(x, d1, s1)
    assert cnt.frame_count == 1
    d1, d2 = {"count": 5, "drop": 0}, {"count": 5, "drop": 0}
    assert_same(opt(x, d1, {"gone"}), f(x, d2, {"gone"}))
    assert d1 == d2


def test_aliased_containers_are_guarded():
    def f(a, b, x):
        a.append(1)
        return x * len(b)

    opt, cnt = compiled(f)
    x = torch.randn(3)
    assert_same(opt([], [], x), f([], [], x))
    shared, shared2 = [], []
    assert_same(opt(shared, shared, x), f(shared2, shared2, x))
    assert shared == shared2
    assert cnt.frame_count == 2, "aliasing between the lists changed: recompiled"


def test_global_list_and_dict_mutations():
    g = f_globals_holder.__globals__
    g["_LOG"], g["_STATS"] = [], {}
    opt, _ = compiled(f_globals_holder)
    x = torch.randn(3)
    out = opt(x)
    assert_same(out, x + 1)
    assert g["_LOG"] == ["called"] and g["_STATS"] == {"n": 1}
    opt(x)
    assert g["_LOG"] == ["called", "called"] and g["_STATS"] == {"n": 2}


_LOG = []
_STATS = {}


def f_globals_holder(x):
    _LOG.append("called")
    _STATS["n"] = _STATS.get("n", 0) + 1
    return x + 1


def _bump_then_break(d, x):
    d["n"] = d["n"] + 1
    cdynamo.graph_break()
    return x * d["n"]


def _calls_bump(x):
    x = x + 1  # a graph before the break, so the break is compiled (not the whole frame run as Python)
    d = {"n": 0}
    y = _bump_then_break(d, x)
    return y + d["n"]


def test_failed_inline_does_not_apply_a_mutation_twice():
    # The callee changes the dict, then hits a graph break: the call runs as Python (once), and the
    # trace's half-done change is rolled back. (Module-level functions: a frame with free variables
    # would run wholly as Python and test nothing.)
    opt, cnt = compiled(_calls_bump)
    x = torch.randn(3)
    assert_same(opt(x), _calls_bump(x))
    assert cnt.frame_count >= 1


def test_nonlocal_writes_reach_the_enclosing_frame():
    def f(x):
        total = 0
        acc = x

        def step(v):
            nonlocal total, acc
            total += v
            acc = acc * 2

        step(1)
        step(2)
        return acc + total

    opt, cnt = compiled(f)
    x = torch.randn(3)
    assert_same(opt(x), f(x))
    assert cnt.frame_count == 1 and cnt.op_count == 3


def test_closure_sees_assignments_after_it_was_made():
    def f(x):
        k = 1
        g = lambda y: y * k  # noqa: E731
        k = 3
        return g(x)

    opt, cnt = compiled(f)
    x = torch.randn(3)
    assert_same(opt(x), f(x))
    assert cnt.frame_count == 1


# ---------------------------------------------------------------------------------------------------------
# Objects of plain classes made in the traced code.

class _Acc:
    bias = 1.0

    def __init__(self, x, scale=2.0):
        self.x = x * scale
        self.calls = 0

    def step(self, y):
        self.calls += 1
        self.x = self.x + y + self.bias
        return self


def test_object_made_in_the_trace_is_rebuilt_once_with_its_attributes():
    def f(x):
        acc = _Acc(x)
        acc.step(x).step(1.0)
        return acc, [acc], acc.x.sum()

    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(f)
    x = torch.randn(3)
    a, lst, s = opt(x)
    e, _, es = f(x)
    assert cnt.frame_count == 1, "the object's creation and methods are inside the graph"
    assert type(a) is _Acc and lst[0] is a
    assert a.calls == e.calls == 2
    assert_same(a.x, e.x)
    assert_same(s, es)
    _Acc.bias = 5.0  # a class attribute the trace read: guarded
    try:
        assert_same(opt(x)[0].x, f(x)[0].x)
        assert cnt.frame_count == 2
    finally:
        _Acc.bias = 1.0


def test_type_of_a_set_from_the_frame_is_set_and_of_a_frozenset_result_frozenset():
    fs = frozenset({5, 6})

    def f(x, s):
        r = fs | s  # a frozenset result (the left operand's type)
        return x + 1, type(s) is set, isinstance(s, frozenset), type(r) is frozenset, type(s | fs) is set, len(r)

    opt, cnt = compiled(f)
    s, x = {1, 2}, torch.randn(3)
    expected = f(x, s)
    assert expected[1:] == (True, False, True, True, 4)
    got = opt(x, s)
    assert_same(got[0], expected[0])
    assert got[1:] == expected[1:]
    assert cnt.frame_count == 1 and cnt.op_count == 1
    import torch._dynamo as dynamo

    dynamo.reset()
    dyn = dynamo.optimize("eager")(f)(x, s)
    dynamo.reset()
    assert dyn[1:] == expected[1:]
