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


# cdynamo.reset() before and after each test (conftest.py).
pytestmark = pytest.mark.usefixtures("cdynamo_reset")


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


class _RecordingBackend:
    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


def _check_example_values(gm, real_inputs):
    """Runs gm node by node on real inputs and checks every node's meta example value has the real
    result's shape, strides, dtype and requires_grad (what shape propagation promised the backend)."""
    import torch.fx

    seen = []

    class Rec(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            ev = n.meta.get("example_value")
            if isinstance(out, torch.Tensor) and isinstance(ev, torch.Tensor):
                seen.append(n.name)
                assert tuple(ev.shape) == tuple(out.shape), (n.name, ev.shape, out.shape)
                assert ev.dtype == out.dtype, (n.name, ev.dtype, out.dtype)
                assert ev.requires_grad == out.requires_grad, (n.name, ev.requires_grad, out.requires_grad)
                if out.is_contiguous() and ev.is_contiguous():
                    assert ev.stride() == out.stride(), (n.name, ev.stride(), out.stride())
            return out

    Rec(gm).run(*real_inputs)
    return seen


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_example_values_match_real_results(case):
    fn, make_args, _ = case
    torch.manual_seed(0)
    args = make_args()
    rec = _RecordingBackend()
    cdynamo.optimize(rec)(fn)(*clone_args(args))
    assert len(rec.graphs) == 1
    # The real inputs in placeholder order: tensors of the arguments, found through the example metadata.
    gm = rec.graphs[0]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    real = []
    flat = [a for a in args if isinstance(a, torch.Tensor)]
    for a in args:
        if isinstance(a, (list, tuple)):
            flat += [t for t in a if isinstance(t, torch.Tensor)]
    for p in placeholders:
        ev = p.meta["example_value"]
        match = [t for t in flat if tuple(t.shape) == tuple(ev.shape) and t.dtype == ev.dtype]
        if not match:
            pytest.skip("placeholder not found among the arguments (a global tensor)")
        real.append(match[0].detach().clone().requires_grad_(match[0].requires_grad))
    _check_example_values(gm, real)


def test_shape_memo_hits_and_keeps_metadata_apart():
    def fn(x, y, z):
        a, b, c = x.sin(), y.sin(), z.sin()        # one op, three different input metadata
        d, e = torch.sin(x), torch.sin(x)          # same key twice: a memo hit
        f = a * 2, b * 2, c * 2
        return a, b, c, d, e, f, a.shape, b.dtype, c.requires_grad, c.shape

    x, y, z = torch.randn(3), torch.randn(3, dtype=torch.float64), torch.randn(2, 3, requires_grad=True)
    rec = _RecordingBackend()
    got = cdynamo.optimize(rec)(fn)(x, y, z)
    assert_same(got, fn(x, y, z))
    _, hits = cdynamo._C.meta_cache_stats()
    assert hits >= 1
    _check_example_values(rec.graphs[0], [x, y, z])
    cdynamo.reset()
    assert cdynamo._C.meta_cache_stats() == (0, 0)
