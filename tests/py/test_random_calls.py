# test_random_calls.py — owns module-level `random` calls traced into graphs (issue 31 residue, item 1): the values
# and the Python `random` state as eager leaves them, graph and op counts beside torch._dynamo's on the same torch.
import random

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter
from versions import REFERENCE_PINNED


def uniform_scale(x):
    return x * random.uniform(0.5, 1.5)


def randint_shift(x):
    return x + random.randint(1, 9)


def randrange_shift(x):
    return x - random.randrange(2, 20, 3)


def mixed(x):
    return x * random.uniform(1, 2) + random.randint(1, 5) - random.randrange(7)


def random_twice(x):
    return x * random.random() + random.random()


def _run(opt, calls=4, seed=3):
    """Calls `opt` `calls` times from one seed: (results, the random module's state after)."""
    random.seed(seed)
    x = torch.arange(3.0)
    outs = [opt(x) for _ in range(calls)]
    return outs, random.getstate()


def _mine(fn, nopython=True, **kw):
    cdynamo.reset()
    counter = CompileCounter()
    return _run(cdynamo.optimize(counter, nopython=nopython)(fn), **kw), counter


def _theirs(fn, fullgraph=True, **kw):
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    out = _run(torch.compile(fn, backend=counter, fullgraph=fullgraph), **kw)
    torch._dynamo.reset()
    return out, counter


@pytest.mark.parametrize("fn,draws", [(uniform_scale, 1), (randint_shift, 1), (randrange_shift, 1), (mixed, 3)],
                         ids=["uniform_scale", "randint_shift", "randrange_shift", "mixed"])
def test_values_and_state_as_eager_one_graph_as_torch_dynamo(fn, draws):
    expected, state = _run(fn)
    (got, got_state), mine = _mine(fn)
    torch.testing.assert_close(got, expected)
    assert got_state == state  # each value drawn once per call, in program order; tracing drew none
    assert len({float(o.sum()) for o in got}) > 1  # a new value per call, not a constant of the first
    (ref, ref_state), theirs = _theirs(fn)
    torch.testing.assert_close(ref, expected)
    assert ref_state == state
    # One op more per draw: cdynamo's graph reads the drawn 0-d tensor's item() (a Python number, as eager has it);
    # torch._dynamo's backend gets its graph after the pass that makes those uses tensor ops.
    assert mine.frame_count == theirs.frame_count == 1
    assert mine.op_count == theirs.op_count + draws


def test_random_random_one_graph_where_torch_dynamo_breaks():
    # torch 2.13's torch._dynamo lists random.random among its traced functions but graph-breaks on the builtin method
    # (2 graphs); cdynamo draws it as it draws uniform: one graph, eager's values and state.
    expected, state = _run(random_twice)
    (got, got_state), mine = _mine(random_twice)
    torch.testing.assert_close(got, expected)
    assert got_state == state and mine.frame_count == 1
    (ref, ref_state), theirs = _theirs(random_twice, fullgraph=False)
    torch.testing.assert_close(ref, expected)
    assert ref_state == state and theirs.frame_count > mine.frame_count


def branch_on_draw(x):
    if random.uniform(0, 1) < 0.5:
        return x + 1
    return x - 1


def draw_break_draw(x):
    n = random.randint(1, 5)
    y = x + n
    cdynamo.graph_break()
    return y * random.uniform(0, 1)


def seeded_inside(x):
    random.seed(11)  # a graph break (as in torch._dynamo): the seed takes effect between the draws, as in eager
    return x * random.random()


def choice_of_constants(x):
    return x * random.choice([1, 2, 3])  # a graph break (as in torch._dynamo): Python picks


@pytest.mark.parametrize("fn", [branch_on_draw, draw_break_draw, seeded_inside, choice_of_constants],
                         ids=lambda f: f.__name__)
def test_draws_around_graph_breaks_as_eager(fn):
    expected, state = _run(fn, calls=8)
    (got, got_state), mine = _mine(fn, nopython=False, calls=8)
    torch.testing.assert_close(got, expected)
    assert got_state == state
    (ref, _), theirs = _theirs(_dynamo_spelling(fn), fullgraph=False, calls=8)
    torch.testing.assert_close(ref, expected)
    # branch_on_draw 3 (the draw's graph, then one continuation per side), draw_break_draw 2, seeded_inside 1 (only
    # the continuation after the seed has ops), choice_of_constants 2: torch._dynamo's counts on the pinned torch
    # (torch 2.11's torch._dynamo captures no graph for branch_on_draw).
    if REFERENCE_PINNED:
        assert mine.frame_count == theirs.frame_count, (mine.frame_count, theirs.frame_count)


def _dynamo_spelling(fn):
    if fn is not draw_break_draw:
        return fn

    def f(x):
        n = random.randint(1, 5)
        y = x + n
        torch._dynamo.graph_break()
        return y * random.uniform(0, 1)

    return f


def test_a_call_that_raises_is_left_to_python():
    seen = []

    def f(x):
        seen.append(random.random())
        return x + random.randint(5, 1)  # ValueError: empty range

    random.seed(0)
    with pytest.raises(ValueError):
        f(torch.zeros(2))
    state, first = random.getstate(), seen[0]
    seen.clear()
    cdynamo.reset()
    random.seed(0)
    with pytest.raises(ValueError):
        cdynamo.optimize("eager")(f)(torch.zeros(2))
    assert random.getstate() == state and seen == [first]


def test_a_replaced_module_function_is_not_drawn_as_random():
    def f(x):
        return x * random.uniform(1, 2)

    cdynamo.reset()
    opt = cdynamo.optimize("eager")(f)
    opt(torch.ones(2))
    real = random.uniform
    random.uniform = lambda a, b: 100.0
    try:
        torch.testing.assert_close(opt(torch.ones(2)), torch.full((2,), 100.0))
    finally:
        random.uniform = real


def test_graph_takes_the_draw_as_an_input_under_aot_eager():
    expected, state = _run(mixed)
    cdynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    got, got_state = _run(cdynamo.optimize(counter)(mixed))
    torch.testing.assert_close(got, expected)
    assert got_state == state and counter.frame_count == 1
