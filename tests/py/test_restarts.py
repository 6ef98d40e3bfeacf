# test_restarts.py — owns the one restart mechanism (csrc/interp/restart.h, hook/translate.cpp: accept_restart): which
# traces are started again, how often, and that a remembered restart is kept for the traced frame's code, never an
# inlined callee's (issue 32 item 4). Results are compared with eager.
import pytest
import torch

import cdynamo
from cdynamo import utils
from cdynamo.testing import CompileCounterWithBackend

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


def _restarts():
    return dict(utils.counters["restarts"])


class ItemScale(torch.nn.Module):
    def forward(self, x):
        return x * x.max().item()


def test_scalar_outputs_restart_is_remembered_for_the_traced_frame_not_the_inlined_forward():
    """A module call enters through a trampoline frame whose trace inlines forward: Tensor.item() under
    capture_scalar_outputs restarts the first trace with fake tensors, and a recompile of the same frame starts with
    them (before: remembered under forward's code, which the trampoline's next compile never asked about)."""
    m = ItemScale()
    with cdynamo.config.patch(capture_scalar_outputs=True):
        utils.counters.clear()
        cnt = CompileCounterWithBackend("eager")
        opt = cdynamo.optimize(cnt)(m)
        for x in (torch.randn(4), torch.randn(4, dtype=torch.float64), torch.randn(3, 2)):
            torch.testing.assert_close(opt(x), m(x))
    assert cnt.frame_count == 3, cnt.frame_count
    assert _restarts() == {"fake_tensors": 1}, _restarts()


def test_dynamic_input_restarts_once_then_starts_with_fake_tensors():
    def f(x):
        return x.sin() + 1

    utils.counters.clear()
    cnt = CompileCounterWithBackend("eager")
    opt = cdynamo.optimize(cnt)(f)
    for n in (2, 3, 4, 5):
        x = torch.randn(n)
        torch.testing.assert_close(opt(x), f(x))
    assert cnt.frame_count == 2, cnt.frame_count
    assert _restarts() == {"fake_tensors": 1}, _restarts()


def test_autocast_restarts_every_static_trace_it_meets():
    """An enabled torch.autocast block needs fake tensors (autocast casts no meta tensor); that is not remembered (the
    next compile outside an autocast needs none), so each static trace that meets one restarts."""
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return x @ w

    utils.counters.clear()
    opt = cdynamo.optimize("eager")(f)
    for dtype in (torch.float32, torch.float64):
        x, w = torch.randn(4, 4, dtype=dtype), torch.randn(4, 4, dtype=dtype)
        torch.testing.assert_close(opt(x, w), f(x, w))
    assert _restarts() == {"fake_tensors": 2}, _restarts()


def test_float_attribute_of_an_inlined_forward_recorded_under_the_traced_frame():
    """The frame state of a float read by the inlined forward (L['_cdynamo_module'].lr, a source of the traced
    frame) is the traced frame's: the second value restarts once, later values start with fake tensors at once."""
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lr = 0.1

        def forward(self, x):
            return x * self.lr

    m = Scaled()
    utils.counters.clear()
    cnt = CompileCounterWithBackend("eager")
    opt = cdynamo.optimize(cnt)(m)
    x = torch.randn(4)
    for v in (0.1, 0.2, 0.3, 0.4):
        m.lr = v
        torch.testing.assert_close(opt(x), m(x))
    assert cnt.frame_count == 2, cnt.frame_count
    assert _restarts() == {"fake_tensors": 1}, _restarts()


class WritesThenTries(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4, bias=False)
        self.calls = 0

    def forward(self, x):
        with torch.no_grad():
            self.lin.weight.copy_(self.lin.weight * 0.5)  # a graph that writes an input fails uncleanly

        try:
            def step(t):
                self.calls += 1
                return t - 1.0
            x = step(x)
        except ValueError:
            x = x * 0
        return x


def test_a_restart_without_ops_in_try_uses_nothing_of_the_first_attempts_graph():
    """The first attempt puts the ops of the try block in a graph that writes an input (not clean): traced again
    without them, the new attempt breaks before the inlined call and keeps none of the first attempt's graph stage
    (fuzz modules seed 25: its stale graph name reached the rewritten code, NameError)."""
    import copy

    torch.manual_seed(0)
    m = WritesThenTries()
    ref = copy.deepcopy(m)
    utils.counters.clear()
    opt = cdynamo.optimize("eager")(m)
    x = torch.randn(4, 4)
    for _ in range(3):
        torch.testing.assert_close(opt(x), ref(x))
        torch.testing.assert_close(m.lin.weight, ref.lin.weight)
    assert m.calls == ref.calls == 3
    assert _restarts().get("no_ops_in_try") == 1, _restarts()
