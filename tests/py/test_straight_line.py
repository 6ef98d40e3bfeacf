# test_straight_line.py — owns the differential tests of straight-line capture: every corpus function runs
# compiled (one graph) and eager with equal results.
import copy

import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter, assert_same

from straight_line_corpus import CASES


def clone_args(args):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            c = a.detach().clone()
            c.requires_grad_(a.requires_grad)
            out.append(c)
        elif isinstance(a, (list, tuple)):
            out.append(type(a)(clone_args(a)))
        else:
            out.append(copy.copy(a))
    return out


@pytest.fixture(autouse=True)
def _reset():
    cdynamo.reset()
    yield
    cdynamo.reset()


def case_id(case):
    return getattr(case[0], "__name__", "fn")


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_equal_to_eager_in_one_graph(case):
    fn, make_args, expected_ops = case
    torch.manual_seed(0)
    args = make_args()
    eager_args = clone_args(args)
    compiled_args = clone_args(args)
    expected = fn(*eager_args)
    counter = CompileCounter()
    opt = cdynamo.optimize(counter)(fn)
    got = opt(*compiled_args)
    assert_same(got, expected)
    # Mutations of inputs are visible exactly as in eager.
    assert_same(compiled_args, eager_args, "args")
    assert counter.frame_count == 1, f"{fn.__name__}: expected one graph, got {counter.frame_count}"
    if expected_ops is not None:
        assert counter.op_count == expected_ops
    # A second call with fresh inputs of the same metadata reuses the cache.
    again_args = clone_args(make_args())
    assert_same(opt(*clone_args(again_args)), fn(*clone_args(again_args)))
    assert counter.frame_count == 1


def test_corpus_is_large_enough():
    assert len(CASES) >= 60


def test_toy_example_graph_is_sin_cos_mul():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def toy(x):
        a = torch.sin(x)
        b = torch.cos(x)
        return a * b

    x = torch.randn(10)
    out = cdynamo.optimize(backend)(toy)(x)
    torch.testing.assert_close(out, toy(x))
    assert len(graphs) == 1
    nodes = [(n.op, n.name) for n in graphs[0].graph.nodes]
    assert nodes == [
        ("placeholder", "x"),
        ("call_function", "sin"),
        ("call_function", "cos"),
        ("call_function", "mul"),
        ("output", "output"),
    ]
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    import operator

    assert targets == [torch.sin, torch.cos, operator.mul]


def test_requires_grad_gradients_match():
    def fn(x, w):
        return (x @ w).tanh().sum()

    x = torch.randn(3, 4)
    w1 = torch.randn(4, 2, requires_grad=True)
    w2 = w1.detach().clone().requires_grad_()
    fn(x, w1).backward()
    cdynamo.optimize("eager")(fn)(x, w2).backward()
    torch.testing.assert_close(w2.grad, w1.grad)


def test_randomness_same_seed_same_result():
    def fn(x):
        return x + torch.randn(3)

    x = torch.zeros(3)
    torch.manual_seed(1)
    expected = fn(x)
    torch.manual_seed(1)
    got = cdynamo.optimize("eager")(fn)(x)
    torch.testing.assert_close(got, expected)


def test_torch_exception_propagates_unchanged():
    def fn(x, y):
        return torch.matmul(x, y)

    opt = cdynamo.optimize("eager")(fn)
    with pytest.raises(RuntimeError) as compiled_err:
        opt(torch.randn(2, 3), torch.randn(4, 5))
    with pytest.raises(RuntimeError) as eager_err:
        fn(torch.randn(2, 3), torch.randn(4, 5))
    assert str(compiled_err.value) == str(eager_err.value)


def test_exception_raised_inside_compiled_graph_propagates():
    # Same metadata on both calls (cache hit); the second index is out of range, which only the
    # graph's run-time data can show: the IndexError must come out of the cached code unchanged.
    def fn(x, idx):
        return x[idx]

    opt = cdynamo.optimize("eager")(fn)
    x = torch.randn(4)
    torch.testing.assert_close(opt(x, torch.tensor([1, 2])), fn(x, torch.tensor([1, 2])))
    with pytest.raises(IndexError):
        fn(x, torch.tensor([7, 1]))
    with pytest.raises(IndexError):
        opt(x, torch.tensor([7, 1]))


def test_grad_mode_restored_when_graph_raises_inside_no_grad():
    def fn(x, y):
        with torch.no_grad():
            return x @ y

    opt = cdynamo.optimize("eager")(fn)
    a, b = torch.randn(2, 3, requires_grad=True), torch.randn(3, 2)
    assert_same(opt(a, b), fn(a, b))
    with pytest.raises(RuntimeError):
        opt(torch.randn(2, 3), torch.randn(4, 2))  # new shapes: recompiles, then the graph raises
    assert torch.is_grad_enabled()
    # The cached graph raising (same metadata as the failing call) restores grad mode too.
    with pytest.raises(RuntimeError):
        opt(torch.randn(2, 3), torch.randn(4, 2))
    assert torch.is_grad_enabled()


def test_grad_mode_guard_recompiles_under_no_grad():
    def fn(x):
        return x * 2

    counter = CompileCounter()
    opt = cdynamo.optimize(counter)(fn)
    x = torch.randn(3, requires_grad=True)
    assert opt(x).requires_grad
    with torch.no_grad():
        assert not opt(x).requires_grad
    assert counter.frame_count == 2
