# test_library_residue.py — owns the issue 31 residue constructs beside test_library_constructs.py: `nonlocal`
# assignments of the compiled frame, closure ints and float globals that change (dynamic at their second value), sets
# of tensors, tensor-keyed dicts held at a break or returned, cls.__subclasses__(); each against eager and
# torch._dynamo on the same torch.
import gc

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


def _both(make_fn, calls, nopython=False, graph_break=None):
    """Runs `make_fn(graph_break)` (a fresh function and a probe of its state) over `calls` argument tuples under
    eager, cdynamo and torch._dynamo: (eager (outs, state), cdynamo's, torch._dynamo's, cdynamo frames, theirs)."""
    def run(wrap, brk):
        fn, probe = make_fn(brk)
        f = wrap(fn)
        return [f(*a) for a in calls], probe()

    eager = run(lambda f: f, lambda: None)
    cdynamo.reset()
    mine = CompileCounter()
    got = run(lambda f: cdynamo.optimize(mine, nopython=nopython)(f), cdynamo.graph_break)
    torch._dynamo.reset()
    theirs = torch._dynamo.testing.CompileCounter()
    ref = run(lambda f: torch.compile(f, backend=theirs, fullgraph=nopython), torch._dynamo.graph_break)
    return eager, got, ref, mine, theirs


def _same(a, b):
    outs_a, state_a = a
    outs_b, state_b = b
    torch.testing.assert_close(outs_a, outs_b)
    assert state_a == state_b


# --- item 2: `nonlocal` assignments in the compiled frame itself ---------------------------------------------------
def make_counter(brk):
    n = 0

    def f(x):
        nonlocal n
        n += 1
        return x + n

    return f, lambda: n


def test_nonlocal_counter_of_the_frame_two_graphs_as_torch_dynamo():
    # The frame ran as Python before; now its store is replayed on the real cell after the graph, and the int becomes
    # a SymInt at its second value as torch._dynamo's automatic dynamic makes it (2 graphs over 5 values).
    x = torch.zeros(2)
    eager, got, ref, mine, theirs = _both(make_counter, [(x,)] * 5)
    _same(got, eager)
    _same(ref, eager)
    assert eager[1] == 5 and mine.frame_count == theirs.frame_count == 2


def test_nonlocal_of_the_frame_under_nopython_one_graph():
    x = torch.zeros(2)
    eager, got, ref, mine, theirs = _both(make_counter, [(x,)], nopython=True)
    _same(got, eager)
    _same(ref, eager)
    assert (mine.frame_count, mine.op_count) == (theirs.frame_count, theirs.op_count) == (1, theirs.op_count)


def make_shared_cell(brk):
    total = 1

    def peek():
        return total

    def f(x):
        nonlocal total
        y = x * peek()  # reads the old value through another function's cell
        total = total + 2
        y = y + peek()  # the new one: the store is seen by the inlined read
        brk()
        total = total * 10
        return y + total

    return f, lambda: total


def test_nonlocal_store_seen_by_an_inlined_closure_and_across_a_break():
    x = torch.ones(2)
    eager, got, ref, mine, theirs = _both(make_shared_cell, [(x,)] * 2)
    _same(got, eager)
    _same(ref, eager)
    assert mine.frame_count == theirs.frame_count


def make_inner_bump(brk):
    count = 0

    def bump():
        nonlocal count
        count += 1

    def f(x):
        before = count
        bump()  # an inlined closure writes the cell the frame reads next
        return x * before + count

    return f, lambda: count


def test_frame_reads_a_cell_an_inlined_closure_wrote():
    x = torch.ones(2)
    eager, got, ref, mine, theirs = _both(make_inner_bump, [(x,)] * 3)
    _same(got, eager)
    _same(ref, eager)
    assert mine.frame_count <= theirs.frame_count


# --- item 6: float globals that change -----------------------------------------------------------------------------
SCALE = 0.5


def scaled_by_global(x):
    return x * SCALE


def branch_on_global(x):
    if SCALE > 0.5:
        return x + 1
    return x - 1


@pytest.mark.parametrize("fn", [scaled_by_global, branch_on_global], ids=lambda f: f.__name__)
def test_float_global_graph_count_equals_dynamo(fn):
    global SCALE
    values = [0.1 + i * 0.05 for i in range(26)]
    x = torch.randn(3)

    def run(opt):
        global SCALE
        outs = []
        for v in values:
            SCALE = v
            outs.append(opt(x))
        return outs

    try:
        expected = run(fn)
        cdynamo.reset()
        mine = CompileCounter()
        torch.testing.assert_close(run(cdynamo.optimize(mine)(fn)), expected)
        torch._dynamo.reset()
        theirs = torch._dynamo.testing.CompileCounter()
        torch.testing.assert_close(run(torch.compile(fn, backend=theirs)), expected)
        assert mine.frame_count == theirs.frame_count, (mine.frame_count, theirs.frame_count)
    finally:
        SCALE = 0.5


# --- item 3: sets of tensors ---------------------------------------------------------------------------------------
def set_membership(x):
    y = x + 1
    s = {x, y}
    s.add(x * 2)
    s.add(x)  # already there (by identity)
    a = x * 3 if x in s else x
    b = y * 5 if (y + 0) in s else y  # another tensor: not in s
    return a + b + len(s)


def set_discard(x):
    y = x.sin()
    s = {x, y}
    s.discard(x)
    return y * 2 if x not in s else y, len(s)


@pytest.mark.parametrize("fn,dead", [(set_membership, 2), (set_discard, 0)], ids=["set_membership", "set_discard"])
def test_set_of_tensors_one_graph_as_torch_dynamo(fn, dead):
    # `dead`: ops whose results only the set held (x * 2, y + 0), dropped by cdynamo's dead-code pass
    x = torch.randn(3)
    expected = fn(x)
    mine = CompileCounter()
    torch.testing.assert_close(cdynamo.optimize(mine, nopython=True)(fn)(x), expected)
    theirs = torch._dynamo.testing.CompileCounter()
    torch.testing.assert_close(torch.compile(fn, backend=theirs, fullgraph=True)(x), expected)
    assert mine.frame_count == theirs.frame_count == 1
    assert mine.op_count == theirs.op_count - dead


def test_set_of_tensors_returned_is_the_graphs_tensors():
    def f(x):
        y = x + 1
        return {x, y}, y

    x = torch.randn(3)
    s, y = cdynamo.optimize(CompileCounter(), nopython=True)(f)(x)
    assert type(s) is set and len(s) == 2 and x in s and y in s  # the argument itself and the graph's output
    torch.testing.assert_close(y, x + 1)


def test_iterating_a_set_of_tensors_is_left_to_python():
    # Its order is the tensors' ids at run time: never guessed at trace time (a graph break; nopython refuses).
    def f(x):
        s = {x + 1, x * 2, x - 3}
        out = []
        for t in s:
            out.append(t.sum().item())
        return out

    x = torch.randn(3)
    got = cdynamo.optimize("eager")(f)(x)
    assert sorted(got) == sorted(f(x))
    cdynamo.reset()
    with pytest.raises(cdynamo.exc.Unsupported, match="set of tensors"):
        cdynamo.optimize("eager", nopython=True)(f)(x)


# --- item 4: tensor-keyed dicts held at a break or returned ------------------------------------------------------
def make_keyed_across_break(brk):
    def f(x):
        y = x + 1
        d = {x: 1, y: 2}
        brk()
        return d[y] * y + d[x], list(d.values())

    return f, lambda: None


def test_tensor_keyed_dict_held_at_a_break_as_torch_dynamo():
    x = torch.randn(3)
    eager, got, ref, mine, theirs = _both(make_keyed_across_break, [(x,)])
    _same(got, eager)
    _same(ref, eager)
    assert (mine.frame_count, mine.op_count) == (theirs.frame_count, theirs.op_count) == (2, theirs.op_count)


def test_tensor_keyed_dict_returned_keys_are_the_tensors():
    def f(x):
        y = x + 1
        return {x: 1, y: 2}, y

    x = torch.randn(3)
    mine = CompileCounter()
    d, y = cdynamo.optimize(mine, nopython=True)(f)(x)
    keys = list(d)
    assert list(d.values()) == [1, 2] and keys[0] is x and keys[1] is y and mine.frame_count == 1
    theirs = torch._dynamo.testing.CompileCounter()
    torch.compile(f, backend=theirs, fullgraph=True)(x)
    assert mine.op_count == theirs.op_count


# --- item 7: cls.__subclasses__() ----------------------------------------------------------------------------------
class _Plugin:
    pass


class _PluginA(_Plugin):
    scale = 2.0


def by_subclasses(x):
    for cls in _Plugin.__subclasses__():
        x = x * cls.scale
    return x + len(_Plugin.__subclasses__())


def test_subclasses_one_graph_and_a_new_subclass_recompiles_as_torch_dynamo():
    x = torch.randn(3)

    def run(opt):
        first = opt(x)

        class _PluginB(_Plugin):
            scale = 3.0

        second = opt(x)
        third = opt(x)
        return [first, second, third], _PluginB

    expected, b = run(by_subclasses)
    del b
    gc.collect()
    mine = CompileCounter()
    reasons = []
    got, b = run(cdynamo.optimize(mine, guard_fail_fn=reasons.append)(by_subclasses))
    del b
    gc.collect()
    torch.testing.assert_close(got, expected)
    assert any("_Plugin'.__subclasses__()" in str(getattr(r, "reason", r)) for r in reasons), reasons
    theirs = torch._dynamo.testing.CompileCounter()
    ref, b = run(torch.compile(by_subclasses, backend=theirs))
    del b
    gc.collect()
    torch.testing.assert_close(ref, expected)
    assert mine.frame_count == theirs.frame_count == 2


def test_subclasses_under_nopython_one_graph():
    x = torch.randn(3)
    mine = CompileCounter()
    torch.testing.assert_close(cdynamo.optimize(mine, nopython=True)(by_subclasses)(x), by_subclasses(x))
    theirs = torch._dynamo.testing.CompileCounter()
    torch.compile(by_subclasses, backend=theirs, fullgraph=True)(x)
    assert (mine.frame_count, mine.op_count) == (theirs.frame_count, theirs.op_count) == (1, theirs.op_count)
