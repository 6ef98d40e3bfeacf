# test_library_constructs.py — owns the Python / library constructs traced as torch._dynamo traces them (issue 31 item
# 8): iter / next, functools.reduce, itertools.chain / repeat, folded library queries; each compared with eager and
# torch._dynamo (one graph, the same op count) and, where a guard is involved, with its recompile.
import functools
import itertools

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 3)
        self.b = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.b(self.a(x))


NET = _Net()


def next_of_iter(x):
    it = iter([x, x + 1, x * 3])
    first = next(it)
    return first + next(it) * 2 + next(it)


def next_of_parameters(x):
    return x * next(NET.parameters()).sum()


def next_with_default(x):
    it = iter((x,))
    next(it)
    return next(it, x * 5)


def iter_of_dict_keys(x):
    d = {"p": x, "q": x * 2}
    it = iter(d)
    return d[next(it)] - d[next(it)]


def reduce_sum(x):
    return functools.reduce(lambda a, b: a + b, [x, x * 2, x * 3])


def reduce_with_initial(x):
    return functools.reduce(lambda a, b: a * b, [x, x + 1], torch.ones(3))


def chained(x):
    return sum(itertools.chain([x], (x + 1, x + 2)))


def repeated(x):
    return sum(itertools.repeat(x * 2, 3))


def library_queries(x):
    y = x + 1
    if torch.fx._symbolic_trace.is_fx_tracing():
        y = y * 100
    if torch.onnx.is_in_onnx_export():
        y = y * 1000
    if torch.are_deterministic_algorithms_enabled():
        y = y - 7
    return y


CASES = [next_of_iter, next_of_parameters, next_with_default, iter_of_dict_keys, reduce_sum, reduce_with_initial,
         chained, repeated, library_queries]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_one_graph_as_torch_dynamo(fn):
    x = torch.randn(3)
    expected = fn(x)
    cdynamo.reset()
    mine = CompileCounter()
    got = cdynamo.optimize(mine, nopython=True)(fn)(x)
    torch.testing.assert_close(got, expected)
    torch._dynamo.reset()
    theirs = torch._dynamo.testing.CompileCounter()
    ref = torch.compile(fn, backend=theirs, fullgraph=True)(x)
    torch.testing.assert_close(ref, expected)
    assert (mine.frame_count, mine.op_count) == (theirs.frame_count, theirs.op_count) == (1, theirs.op_count)


def test_next_past_the_end_raises_stop_iteration_as_eager():
    def f(x):
        it = iter([x])
        next(it)
        return next(it)

    cdynamo.reset()
    with pytest.raises(StopIteration):
        f(torch.randn(2))
    with pytest.raises(StopIteration):
        cdynamo.optimize("eager")(f)(torch.randn(2))
    cdynamo.reset()  # entries are shared by callbacks: compile anew under nopython
    with pytest.raises(cdynamo.exc.Unsupported, match="exhausted iterator"):
        cdynamo.optimize("eager", nopython=True)(f)(torch.randn(2))


def test_deterministic_query_recompiles_when_the_setting_changes():
    cdynamo.reset()
    counter = CompileCounter()
    opt = cdynamo.optimize(counter)(library_queries)
    x = torch.randn(3)
    before = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(False)
        torch.testing.assert_close(opt(x), x + 1)
        torch.use_deterministic_algorithms(True)
        torch.testing.assert_close(opt(x), x + 1 - 7)
        assert counter.frame_count == 2
    finally:
        torch.use_deterministic_algorithms(before)


def test_reduce_of_an_empty_sequence_runs_as_python():
    def f(x):
        return x + functools.reduce(lambda a, b: a + b, [])

    cdynamo.reset()
    with pytest.raises(TypeError):
        cdynamo.optimize("eager")(f)(torch.randn(2))


# torch.nn modules made inside the trace (the commonest construct of crawled modules torch._dynamo captures).
def softmax_made(x):
    return torch.nn.Softmax(dim=-1)(x) * 2


def relu_made_inplace(x):
    y = x * 3
    torch.nn.ReLU(inplace=True)(y)
    return y + 1


def log_softmax_made(x):
    return torch.nn.LogSoftmax(dim=0)(x)


def unfold_made(x):
    return torch.nn.Unfold(kernel_size=1)(x.reshape(1, 1, 3, 1)).sum() + x


@pytest.mark.parametrize("fn", [softmax_made, relu_made_inplace, log_softmax_made, unfold_made],
                         ids=lambda f: f.__name__)
def test_module_made_in_the_trace_as_torch_dynamo(fn):
    x = torch.randn(3)
    expected = fn(x.clone())
    cdynamo.reset()
    mine = CompileCounter()
    torch.testing.assert_close(cdynamo.optimize(mine, nopython=True)(fn)(x.clone()), expected)
    torch._dynamo.reset()
    theirs = torch._dynamo.testing.CompileCounter()
    torch.testing.assert_close(torch.compile(fn, backend=theirs, fullgraph=True)(x.clone()), expected)
    # torch._dynamo traces Module.__init__ and keeps its torch._C._log_api_usage_once('python.nn_module') call as a
    # graph node; cdynamo makes the module while tracing, so its graph has the same ops but that one.
    assert (mine.frame_count, mine.op_count) == (theirs.frame_count, theirs.op_count - 1) == (1, theirs.op_count - 1)


def test_module_made_in_the_trace_sees_a_global_hook_registered_later():
    def double_output(module, args, output):
        return output * 2

    cdynamo.reset()
    counter = CompileCounter()
    opt = cdynamo.optimize(counter)(softmax_made)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), softmax_made(x))
    handle = torch.nn.modules.module.register_module_forward_hook(double_output)
    try:
        expected = softmax_made(x)  # the hook doubles the softmax
        torch.testing.assert_close(opt(x), expected)
    finally:
        handle.remove()
    torch.testing.assert_close(opt(x), softmax_made(x))


def test_module_made_in_the_trace_and_returned_runs_as_python():
    def make(x):
        return torch.nn.Softmax(dim=-1), x + 1

    cdynamo.reset()
    mod, y = cdynamo.optimize("eager")(make)(torch.ones(2))
    mod2, _ = cdynamo.optimize("eager")(make)(torch.ones(2))
    assert isinstance(mod, torch.nn.Softmax) and mod.dim == -1 and mod is not mod2  # a new module on every call
    torch.testing.assert_close(y, torch.ones(2) + 1)
