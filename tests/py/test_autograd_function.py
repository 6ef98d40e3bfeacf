# test_autograd_function.py — owns tests of custom torch.autograd.Function.apply in a trace: one graph node
# whose backward is the user's (eager, aot_eager, inductor), and a graph break whenever the forward or backward
# does something a graph cannot hold (Python side effects, in-place changes, untraceable code).
import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounterWithBackend, same
from graph_counts import dynamo_graphs
# Forward is relu; backward is NOT relu's gradient (doubled), so a traced-through forward would be caught.
from test_crawled_modules import ClampGrad as Scale2Grad

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


class ScaleBy(torch.autograd.Function):
    """A constant argument kept on the ctx; backward returns None for it."""

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.alpha, None


class TwoOut(torch.autograd.Function):
    """Two outputs, the second marked non-differentiable."""

    @staticmethod
    def forward(ctx, x, y):
        s = x + y
        idx = (s > 0).to(torch.float32)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(x, y)
        return s * 3, idx

    @staticmethod
    def backward(ctx, g, g_idx):
        x, y = ctx.saved_tensors
        return g * y, g * x


class NewStyle(torch.autograd.Function):
    """forward without ctx plus setup_context (torch >= 2.0 style)."""

    @staticmethod
    def forward(x, k):
        return x.sin() * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, k = inputs
        ctx.save_for_backward(x)
        ctx.k = k

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos() * ctx.k * 10, None


class OnceDiff(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x * 5


def _model(fn_apply):
    lin = torch.nn.Linear(4, 4)

    def f(x):
        return fn_apply(lin(x)) + 1
    return f, lin


def _grads_equal(fn, make_args, backend):
    """fn compiled with `backend` gives eager's outputs and gradients; returns the compile counter."""
    cnt = CompileCounterWithBackend(backend)
    opt = cdynamo.optimize(cnt)(fn)
    args = make_args()
    rargs = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    out, ref = opt(*args), fn(*rargs)
    assert same(ref, out)
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    sum(o.sum() for o in outs if o.requires_grad).backward()
    sum(r.sum() for r in refs if r.requires_grad).backward()
    for a, r in zip(args, rargs):
        if r.requires_grad:
            assert same(r.grad, a.grad)
    return cnt


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("case", ["save_for_backward", "ctx_constant", "two_outputs", "setup_context",
                                  "once_differentiable"])
def test_apply_is_one_graph_with_the_custom_backward(case, backend):
    def x_only():
        return [torch.randn(3, 4, requires_grad=True)]

    def x_y():
        return [torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)]

    fns = {
        "save_for_backward": (lambda x: Scale2Grad.apply(x * 2) + 1, x_only),
        "ctx_constant": (lambda x: ScaleBy.apply(x.sin(), -0.5).cos(), x_only),
        "two_outputs": (lambda x, y: TwoOut.apply(x * 2, y), x_y),
        "setup_context": (lambda x: NewStyle.apply(x + 1, 3.0), x_only),
        "once_differentiable": (lambda x: OnceDiff.apply(x - 1).sum(1), x_only),
    }
    fn, make_args = fns[case]
    cnt = _grads_equal(fn, make_args, backend)
    assert cnt.frame_count == dynamo_graphs(fn, *make_args()) == 1
    # Fresh same-shape inputs: no recompile.
    _ = cdynamo.optimize(cnt)(fn)(*make_args())
    assert cnt.frame_count == 1


def test_apply_in_a_module_with_parameters_has_eager_gradients():
    f, lin = _model(Scale2Grad.apply)
    x = torch.randn(2, 4)
    opt = cdynamo.optimize("aot_eager")(f)
    opt(x).sum().backward()
    got = lin.weight.grad.clone()
    lin.weight.grad = None
    f(x).sum().backward()
    assert same(lin.weight.grad, got)


def test_apply_under_no_grad_and_without_grad_inputs():
    cnt = CompileCounterWithBackend("eager")
    fn = lambda x: Scale2Grad.apply(x) * 2  # noqa: E731
    opt = cdynamo.optimize(cnt)(fn)
    x = torch.randn(5)
    assert same(fn(x), opt(x))
    assert not opt(x).requires_grad
    with torch.no_grad():
        xr = torch.randn(5, requires_grad=True)
        out = opt(xr)
        assert same(fn(xr), out) and not out.requires_grad


def test_apply_output_requires_grad_as_in_eager():
    # The graph's example value must say requires_grad as apply does (it decides later folding in the trace).
    def fn(x):
        y = Scale2Grad.apply(x)
        return y * 2 if y.requires_grad else y * 3

    for rg in (True, False):
        x = torch.randn(4, requires_grad=rg)
        assert same(fn(x), cdynamo.optimize("eager")(fn)(x))


def test_inductor_runs_the_custom_backward():
    fn = lambda x: Scale2Grad.apply(x * 2) + 1  # noqa: E731
    _grads_equal(fn, lambda: [torch.randn(3, 4, requires_grad=True)], "inductor")


# ---- what must not be captured: the call breaks the graph, the function runs as in eager -------------------

LOG = []


class PrintsInForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        print("forward ran")
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class AppendsInForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        LOG.append("fwd")
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class AppendsInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        LOG.append("bwd")
        return g * 2


class InPlaceForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * 2


class DataDependentBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if x.sum() > 0:
            return g * 2
        return g * -2


def _runs_as_eager(fn, make_args, capsys=None):
    LOG.clear()
    args = make_args()
    rargs = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    ref = fn(*rargs)
    if ref.requires_grad:
        ref.sum().backward()
    eager_log = list(LOG)
    eager_out = capsys.readouterr().out if capsys else None
    LOG.clear()
    cnt = CompileCounterWithBackend("aot_eager")
    out = cdynamo.optimize(cnt)(fn)(*args)
    if out.requires_grad:
        out.sum().backward()
    assert same(ref, out)
    assert LOG == eager_log
    for a, r in zip(args, rargs):
        assert same(a, r)
        if r.requires_grad:
            assert same(r.grad, a.grad)
    if capsys:
        assert capsys.readouterr().out == eager_out
    return cnt


def _apply_captured(cnt):
    from cdynamo._autograd import FunctionApply
    return any(isinstance(n.target, FunctionApply) for g in cnt.graphs for n in g.graph.nodes)


# torch._dynamo's graph counts for these: it breaks on the print and on the backward ones (3: before, the
# forward's own frame, after), and replays the forward's list append / in-place change after one graph (1).
# cdynamo breaks on all of them: the node it would make runs the forward inside the backend's graph, where a
# Python side effect would happen once at compile time (aot_autograd traces it), not on every call.
@pytest.mark.parametrize("fn_cls,dynamo", [(PrintsInForward, 3), (AppendsInForward, 1), (AppendsInBackward, 3),
                                           (DataDependentBackward, 3)])
def test_side_effects_or_untraceable_code_break_the_graph(fn_cls, dynamo, capsys):
    fn = lambda x: fn_cls.apply(x.sin()).cos()  # noqa: E731
    cnt = _runs_as_eager(fn, lambda: [torch.randn(4, requires_grad=True)], capsys)
    assert not _apply_captured(cnt)
    assert cnt.frame_count == 3, "graphs before and after the apply, and the forward's own frame when it runs"
    assert dynamo_graphs(fn, torch.randn(4, requires_grad=True)) == dynamo


def test_in_place_forward_breaks_the_graph():
    fn = lambda x: InPlaceForward.apply(x + 0).cos()  # noqa: E731
    cnt = _runs_as_eager(fn, lambda: [torch.randn(4)])
    assert not _apply_captured(cnt) and cnt.frame_count == 3


def test_captured_apply_is_one_node():
    fn = lambda x: Scale2Grad.apply(x * 2) + 1  # noqa: E731
    cnt = CompileCounterWithBackend("eager")
    cdynamo.optimize(cnt)(fn)(torch.randn(3, requires_grad=True))
    assert _apply_captured(cnt) and cnt.frame_count == 1 and cnt.op_count == 3


def test_a_broken_apply_under_nopython_names_the_function():
    fn = lambda x: AppendsInForward.apply(x) + 1  # noqa: E731
    with pytest.raises(cdynamo.exc.Unsupported, match="AppendsInForward.apply"):
        cdynamo.optimize("eager", nopython=True)(fn)(torch.randn(3))


def test_the_function_class_is_guarded():
    # The same code with another Function class in the global: a recompile, never the old class's node.
    global SWAPPED
    SWAPPED = Scale2Grad

    def fn(x):
        return SWAPPED.apply(x) + 1

    cnt = CompileCounterWithBackend("eager")
    opt = cdynamo.optimize(cnt)(fn)
    x = torch.randn(5, requires_grad=True)
    assert same(fn(x), opt(x))
    SWAPPED = OnceDiff
    assert same(fn(x), opt(x))
    assert cnt.frame_count == 2
