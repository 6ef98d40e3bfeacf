# test_leaf_inputs.py — owns the leafness of tensor inputs that a graph changes in place (issue 31 item 2): a graph
# traced for a non-leaf input, called with a leaf that requires grad (and the reverse), behaves as eager does.
import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")

LEAF_ERROR = "a leaf Variable that requires grad is being used in an in-place operation"


def _scale_in_place(x):
    x.mul_(2)
    return x + 1


def _leaf():
    return torch.randn(3, requires_grad=True)


def _non_leaf():
    return torch.randn(3, requires_grad=True) * 1


def _outcome(fn, x):
    try:
        out = fn(x)
    except RuntimeError as e:
        return "raises", LEAF_ERROR in str(e)
    return "returns", out.detach().clone()


def _same(a, b):
    assert a[0] == b[0], (a, b)
    if a[0] == "raises":
        assert a[1] and b[1], (a, b)
    else:
        torch.testing.assert_close(a[1], b[1])


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("order", ["non_leaf_first", "leaf_first"])
def test_in_place_change_of_leaf_and_non_leaf_inputs_as_eager(backend, order):
    opt = cdynamo.optimize(backend)(_scale_in_place)
    makers = [_non_leaf, _leaf] if order == "non_leaf_first" else [_leaf, _non_leaf]
    for make in makers + makers:
        torch.manual_seed(0)
        a = make()
        torch.manual_seed(0)
        b = make()
        _same(_outcome(opt, a), _outcome(_scale_in_place, b))
        if a.is_leaf:
            assert a.grad is None and torch.equal(a.detach(), b.detach())  # the failing op changed nothing


def test_leaf_that_does_not_require_grad_runs_the_compiled_graph():
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(_scale_in_place)
    for _ in range(2):
        x = torch.ones(3)
        torch.testing.assert_close(opt(x), torch.full((3,), 3.0))
        torch.testing.assert_close(x, torch.full((3,), 2.0))
    assert cnt.frame_count == 1
