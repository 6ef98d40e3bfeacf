# test_module_call.py — owns the tests of OptimizedModule.__call__ in C++ (csrc/hook/module_call.cpp): each path it
# takes (the entries, a replaced forward, nn.Module.__call__ for hooks, compile() and tracing) against eager, torch.compile and
# nn.Module.__call__ (the general path it inlines).
import pytest
import torch
from torch import nn

import cdynamo


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, scale=1.0):
        return torch.relu(self.fc(x)) * scale


class Counting:
    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


def _pair():
    torch.manual_seed(0)
    net = Net()
    backend = Counting()
    return net, cdynamo.optimize(backend)(net), backend


pytestmark = pytest.mark.usefixtures("cdynamo_reset")


def test_call_is_the_cpp_descriptor():
    call = type(cdynamo.optimize("eager")(Net())).__call__
    assert type(call).__name__ == "method_descriptor"
    assert call is not torch.nn.Module.__call__


def test_positional_and_keyword_calls_run_compiled():
    net, opt, backend = _pair()
    x = torch.randn(2, 4)
    assert torch.equal(opt(x), net(x))
    assert torch.equal(opt(x, scale=2.0), net(x, scale=2.0))
    assert torch.equal(opt(x=x), net(x=x))
    graphs = backend.graphs
    assert graphs >= 1
    for _ in range(3):  # cached calls through both entries: no new graph
        opt(x)
        opt(x, scale=2.0)
    assert backend.graphs == graphs


def test_wrapper_hooks_run_as_in_eager_and_torch_compile():
    x = torch.randn(2, 4)
    results = []
    for wrap in (lambda m: m, lambda m: torch.compile(m, backend="eager"), lambda m: cdynamo.optimize("eager")(m)):
        torch.manual_seed(0)
        mod = wrap(Net())
        seen = []
        mod.register_forward_pre_hook(lambda m, a: (a[0] * 2,))
        mod.register_forward_hook(lambda m, a, o: seen.append(o.shape) or o + 1)
        results.append((mod(x), seen))
        torch._dynamo.reset()
    (eager, eager_seen), (dyn, dyn_seen), (ours, our_seen) = results
    assert torch.equal(ours, eager) and torch.equal(dyn, eager)
    assert our_seen == eager_seen == dyn_seen == [torch.Size([2, 4])]


def test_backward_hook_on_wrapper_as_torch_compile():
    # A full backward hook registered on the wrapper: torch.compile's wrapper and ours both take nn.Module.__call__,
    # whose hook then sees no grad_fn of the wrapper's own (the count is torch.compile's: 0).
    counts = []
    for wrap in (lambda m: torch.compile(m, backend="eager"), lambda m: cdynamo.optimize("eager")(m), "module"):
        torch.manual_seed(0)
        if wrap == "module":
            mod = cdynamo.optimize("eager")(Net())
            call = lambda *a: torch.nn.Module.__call__(mod, *a)  # noqa: E731
        else:
            mod = call = wrap(Net())
        grads = []
        mod.register_full_backward_hook(lambda m, gi, go: grads.append(1))
        x = torch.randn(2, 4, requires_grad=True)
        call(x).sum().backward()
        counts.append(len(grads))
        torch._dynamo.reset()
    assert counts[1] == counts[0] == counts[2]


def test_global_module_hook_runs():
    net, opt, _ = _pair()
    x = torch.randn(2, 4)
    calls = []
    handle = nn.modules.module.register_module_forward_hook(lambda m, a, o: calls.append(type(m).__name__))
    try:
        out = opt(x)
    finally:
        handle.remove()
    assert torch.allclose(out, net(x))
    assert "OptimizedModule" in calls  # the wrapper's own call went through nn.Module.__call__
    calls.clear()
    opt(x)
    assert calls == []  # removed: the entry again


def test_replaced_forward_is_called():
    net, opt, _ = _pair()
    x = torch.randn(2, 4)
    opt.forward = lambda x, scale=1.0: x * 3 * scale
    assert torch.equal(opt(x), x * 3)
    assert torch.equal(opt(x, scale=2.0), x * 6)


def test_jit_trace_of_wrapper_traces_module_path():
    net, opt, _ = _pair()
    x = torch.randn(2, 4)
    traced = torch.jit.trace(opt, (x,), check_trace=False)
    assert torch.allclose(traced(x), net(x))


def test_module_compile_takes_module_path():
    net, opt, _ = _pair()
    x = torch.randn(2, 4)
    calls = []
    opt._compiled_call_impl = lambda *a, **k: calls.append(1) or net(*a, **k)
    assert torch.equal(opt(x), net(x))
    assert calls == [1]


def test_errors_propagate_and_bad_self_is_a_type_error():
    net, opt, _ = _pair()
    with pytest.raises(TypeError):
        opt(torch.randn(2, 4), torch.randn(1), torch.randn(1))  # too many arguments: forward's own TypeError
    with pytest.raises(RuntimeError):
        opt(torch.randn(2, 5))  # a shape error from the Linear
    with pytest.raises(TypeError):
        type(opt).__call__(object(), torch.randn(2, 4))


def test_same_results_as_module_call():
    torch.manual_seed(0)
    net, opt, _ = _pair()
    x = torch.randn(2, 4)
    for args, kwargs in (((x,), {}), ((x,), {"scale": 3.0}), ((), {"x": x})):
        assert torch.equal(type(opt).__call__(opt, *args, **kwargs), torch.nn.Module.__call__(opt, *args, **kwargs))
