# test_break_with_blocks.py — owns graph breaks inside `with torch.no_grad()/enable_grad()` blocks (issue 11
# item 3): the frame is split into graphs and a continuation that re-enters the block's grad mode, with
# eager's results, requires_grad flags, grad mode afterwards and exceptions, and torch._dynamo's graph counts.
import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter
from graph_counts import dynamo_graphs

pytestmark = pytest.mark.usefixtures("cdynamo_reset")

LOG = []


def break_in_no_grad(x):
    y = x * 2
    with torch.no_grad():
        z = y + 1
        LOG.append(("in", torch.is_grad_enabled()))
        print("graph break")
        z = z * 3
    return z + y, torch.is_grad_enabled()


def nested_blocks(x):
    with torch.no_grad():
        a = x + 1
        with torch.enable_grad():
            b = x * a
            print("inner break")
            LOG.append(("inner", torch.is_grad_enabled()))
            c = b.sin()
        LOG.append(("outer", torch.is_grad_enabled()))
        print("outer break")
        d = c + a
    return d, c


def two_breaks_in_block(x):
    with torch.no_grad():
        a = x.cos()
        print("one")
        b = a * x
        print("two")
        c = b + 1
    return c * x


CASES = [break_in_no_grad, nested_blocks, two_breaks_in_block]


def results_equal(ref, got):
    ref = ref if isinstance(ref, tuple) else (ref,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        if isinstance(r, torch.Tensor):
            torch.testing.assert_close(g, r)
            assert g.requires_grad == r.requires_grad
        else:
            assert g == r


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_break_inside_grad_block_splits_the_frame(fn, backend, capsys):
    x = torch.randn(4, requires_grad=True)
    LOG.clear()
    ref = fn(x)
    eager_log, eager_out = list(LOG), capsys.readouterr().out
    LOG.clear()
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt if backend == "eager" else backend)(fn)
    got = opt(x)
    assert torch.is_grad_enabled()
    results_equal(ref, got)
    assert LOG == eager_log
    assert capsys.readouterr().out == eager_out
    if backend == "eager":
        assert cnt.frame_count == dynamo_graphs(fn, x) and cnt.frame_count >= 2
        LOG.clear()
        ref2 = fn(x)
        LOG.clear()  # the same list length as at the first call: the cached code runs, no recompile
        results_equal(ref2, opt(x))
        assert cnt.frame_count == dynamo_graphs(fn, x)


def test_backward_through_a_split_block():
    def f(x):
        y = x.sin()
        with torch.no_grad():
            s = y.sum()
            print("break")
            scale = s.abs() + 1
        return y * scale
    x1 = torch.randn(5, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    f(x1).sum().backward()
    cdynamo.optimize("aot_eager")(f)(x2).sum().backward()
    torch.testing.assert_close(x2.grad, x1.grad)


def raise_after_break(x, fail):
    with torch.no_grad():
        y = x + 1
        print("break")
        if fail:
            raise ValueError("inside the block")
        y = y * 2
    return y


def test_exception_after_break_restores_grad_mode():
    opt = cdynamo.optimize("eager")(raise_after_break)
    x = torch.randn(3, requires_grad=True)
    results_equal(raise_after_break(x, False), opt(x, False))
    with pytest.raises(ValueError, match="inside the block"):
        opt(x, True)
    assert torch.is_grad_enabled()


def test_other_context_managers_still_run_the_frame_as_python():
    import contextlib

    def f(x):
        with contextlib.suppress(ZeroDivisionError):
            y = x + 1
            print("break")
        return y * 2
    x = torch.randn(3)
    ex = cdynamo.explain(f)(x)
    torch.testing.assert_close(cdynamo.optimize("eager")(f)(x), f(x))
    assert ex.graph_count <= 1


def test_break_inside_a_nullcontext_block_continues_like_dynamo():
    import contextlib
    import io

    def f(x):
        with contextlib.nullcontext():
            y = x + 1
            print("break")
            z = y.cos()
        return z * 2
    x = torch.randn(3)
    out, ref = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out):
        got = cdynamo.optimize("eager")(f)(x)
    with contextlib.redirect_stdout(ref):
        want = f(x)
    torch.testing.assert_close(got, want)
    assert out.getvalue() == ref.getvalue()
    assert cdynamo.explain(f)(x).graph_count == dynamo_graphs(f, x) == 2


GL = []


def break_in_block_inside_try(x, y):
    # fuzz seed 37146: the break (y[10] raises while tracing) is inside a with block that a try encloses;
    # the handler must still catch what the breaking instruction raises.
    with torch.no_grad():
        try:
            with torch.no_grad():
                GL.append(y[10])
        except (IndexError, KeyError) as e:
            print('caught', type(e).__name__)
    return x + 1


def test_break_in_a_with_block_inside_a_try_keeps_the_handler(capsys):
    x, y = torch.randn(4), torch.randn(4)
    ref = break_in_block_inside_try(x, y)
    eager_out = capsys.readouterr().out
    got = cdynamo.optimize("eager")(break_in_block_inside_try)(x, y)
    torch.testing.assert_close(got, ref)
    assert capsys.readouterr().out == eager_out == "caught IndexError\n"
    assert torch.is_grad_enabled()
