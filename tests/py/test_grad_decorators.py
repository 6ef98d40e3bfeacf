# test_grad_decorators.py — owns the tests of functions decorated with @torch.no_grad() / @torch.enable_grad() called from compiled code (ops_with.cpp): inlined in that grad mode in one graph, results and gradients equal to eager, graph counts equal to torch._dynamo's, and grad mode never leaked when the call cannot be traced.
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


class Sinusoid(torch.nn.Module):
    """Like M2M100's positional embedding: a forward decorated with @torch.no_grad()."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    @torch.no_grad()
    def forward(self, x):
        return self.lin(x).sin()


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = Sinusoid()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        p = self.pos(x)
        return self.proj(x) + p, p.requires_grad


@torch.enable_grad()
def with_grad(x, w):
    return (x * w).sum()


@torch.no_grad()
def loud(x):
    print("loud", tuple(x.shape))
    return x * 2


def _counts(fn, *args):
    cnt = CompileCounter()
    got = cdynamo.optimize(cnt)(fn)(*args)
    dcnt = torch._dynamo.testing.CompileCounter()
    torch.compile(fn, backend=dcnt)(*args)
    return got, cnt, dcnt


def test_no_grad_forward_is_inlined_in_one_graph():
    torch.manual_seed(0)
    m = Model()
    x = torch.randn(2, 4, requires_grad=True)
    ref_out, ref_flag = m(x)
    (out, flag), cnt, dcnt = _counts(m, x)
    torch.testing.assert_close(out, ref_out)
    assert flag is ref_flag is False
    assert cnt.frame_count == dcnt.frame_count == 1 and cnt.op_count >= 4
    assert not cdynamo.explain(m, x).break_reasons
    # Gradients flow only through proj, as in eager (none into pos.lin).
    out.sum().backward()
    assert m.pos.lin.weight.grad is None and m.proj.weight.grad is not None
    assert torch.is_grad_enabled()


def test_enable_grad_decorator_inside_no_grad():
    w = torch.randn(3, requires_grad=True)

    def f(x):
        with torch.no_grad():
            y = x + 1
            s = with_grad(y, w)
        return s, s.requires_grad, y.requires_grad

    x = torch.randn(3, requires_grad=True)
    ref = f(x)
    got, cnt, dcnt = _counts(f, x)
    torch.testing.assert_close(got[0], ref[0])
    assert got[1:] == ref[1:] == (True, False)
    assert cnt.frame_count == dcnt.frame_count == 1


def test_untraceable_decorated_call_breaks_without_leaking_grad_mode(capsys):
    def f(x):
        y = loud(x)
        z = x * 3
        return y, z, z.requires_grad

    x = torch.randn(2, requires_grad=True)
    ref = f(x)
    got = cdynamo.optimize("eager")(f)(x)
    torch.testing.assert_close(got[0], ref[0])
    torch.testing.assert_close(got[1], ref[1])
    assert got[2] is ref[2] is True and got[1].requires_grad and not got[0].requires_grad
    assert torch.is_grad_enabled()
    assert capsys.readouterr().out.count("loud (2,)") == 2


def test_untraceable_with_block_in_inlined_helper_does_not_leak_grad_mode():
    def helper(x):
        with torch.no_grad():
            print("inside")
            return x * 2

    def f(x):
        y = helper(x)
        z = x * 3
        return y, z.requires_grad

    x = torch.randn(2, requires_grad=True)
    ref = f(x)
    got = cdynamo.optimize("eager")(f)(x)
    torch.testing.assert_close(got[0], ref[0])
    assert got[1] is ref[1] is True
    assert torch.is_grad_enabled()
