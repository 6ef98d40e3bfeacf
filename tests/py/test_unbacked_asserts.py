# test_unbacked_asserts.py — owns issue 31 item 1: what the trace assumes of symbols from .item() (unbacked) is
# checked when the graph runs, so a value that breaks the assumption raises as eager instead of taking a branch
# decided for another value.
import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


def _new_zeros_then_branch(x, t):
    n = t.item()
    y = x.new_zeros(n)  # the trace assumes n >= 0 from here on (a deferred runtime assert)
    if n >= 0:          # decided by that assumption: no guard, no break
        return y + 1
    return y - 1


def _checked_then_branch(x, t):
    n = t.item()
    torch._check(n < 10)  # a library call: a graph break, so the check runs as Python
    if n < 10:
        return x + 1
    return x - 1


def _outcome(fn, *args):
    try:
        return "returns", fn(*args)
    except RuntimeError as e:
        return "raises", str(e).splitlines()[0]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("fn", [_new_zeros_then_branch, _checked_then_branch])
def test_values_breaking_what_the_trace_assumed_raise_as_eager(fn, backend):
    cnt = CompileCounter() if backend == "eager" else None
    with cdynamo.config.patch(capture_scalar_outputs=True):
        opt = cdynamo.optimize(cnt or backend)(fn)
        x = torch.zeros(2)
        torch.testing.assert_close(opt(x, torch.tensor(3)), fn(x, torch.tensor(3)))
        for bad in (torch.tensor(-2), torch.tensor(20)):
            got, want = _outcome(opt, x, bad), _outcome(fn, x, bad)
            assert got[0] == want[0], (got, want)
            if got[0] == "raises":
                assert got[1] == want[1], (got, want)
            else:
                torch.testing.assert_close(got[1], want[1])
        torch.testing.assert_close(opt(x, torch.tensor(4)), fn(x, torch.tensor(4)))
    if cnt is not None and fn is _new_zeros_then_branch:
        assert cnt.frame_count == 1  # one graph: .item() and the branch are captured, not broken on
