# test_aliased_input_mutation.py — owns graphs that change an input sharing its storage with another input
# (python/cdynamo/_dealias.py): equal to eager under aot_eager, where aot_autograd's synthetic bases are wrong.
"""Module fuzz seed 3616: a continuation gets ``x`` and ``v = x[0]`` as inputs, ``v.mul_(2)``, and returns an
intermediate together with its ``detach()`` alias. aot_autograd (torch 2.13) maps that alias through the
synthetic-base input mapping and returns a wrong value (or raises). cdynamo hands the backend ``x`` alone with
``v`` made in the graph by as_strided.
"""
import pytest
import torch

import cdynamo
from cdynamo.utils import counters

pytestmark = pytest.mark.usefixtures("cdynamo_reset")


def body(x, w):
    v = x[0]
    cdynamo.graph_break()  # the continuation's inputs: x and its view v
    v.mul_(2)
    c = (x @ w).chunk(3, dim=-1)
    s = (c[0] @ c[1].transpose(0, 1)).softmax(-1)
    return x + 1, c[0], c[1], c[2], s, s.detach()


def make_inputs(seed, x_grad=False):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(5, 15, generator=g, requires_grad=True)
    x = torch.randn(3, 5, generator=g)
    if x_grad:  # a non-leaf that requires grad (its view may be changed in place)
        x = x + torch.zeros(3, 5, requires_grad=True)
    return x, w


def _check(fn, backend, seeds=(0, 1, 2), x_grad=False):
    opt = cdynamo.optimize(backend)(fn)
    for seed in seeds:
        xe, we = make_inputs(seed, x_grad)
        xc, wc = make_inputs(seed, x_grad)
        ref = fn(xe, we)
        got = opt(xc, wc)
        for i, (r, o) in enumerate(zip(ref, got)):
            assert torch.equal(r.detach(), o.detach()), f"seed {seed} output {i}"
        assert torch.equal(xe.detach(), xc.detach())
        (ref[0].sum() + ref[4].sum()).backward()
        (got[0].sum() + got[4].sum()).backward()
        assert torch.allclose(we.grad, wc.grad), seed


def test_raw_aot_autograd_is_wrong_on_this_graph():
    """The torch 2.13 bug the module works around (a wrong value or an error, by output layout): if this starts
    passing, _dealias may be retired."""
    from torch._dynamo.backends.debugging import aot_eager

    def g(v, x, w):
        v.mul_(2)
        c = (x @ w).chunk(3, dim=-1)
        s = (c[0] @ c[1].transpose(0, 1)).softmax(-1)
        return c[0], c[1], c[2], s, s.detach()

    gm = torch.fx.symbolic_trace(g)
    x, w = make_inputs(0)
    ref = gm(x[0], x, w)
    x2, w2 = make_inputs(0)
    try:
        out = aot_eager(gm, [x2[0], x2, w2])(x2[0], x2, w2)
    except (IndexError, AssertionError):
        return
    assert not all(torch.equal(r.detach(), o.detach()) for r, o in zip(ref, out))


@pytest.mark.parametrize("x_grad", [False, True])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_view_of_input_changed_after_a_break_equals_eager(backend, x_grad):
    counters.clear()
    _check(body, backend, x_grad=x_grad)
    if backend == "aot_eager":
        assert counters["stats"]["aliased_input_mutation_rewrite"] == 1


def test_seed_3616_module_equals_eager():
    class B(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.qkv = torch.nn.Linear(5, 15)
            s.maps = []

        def forward(s, x):
            v1 = x[0]
            print("b", x.sum().item() > 0)
            v1.mul_(2)
            q, k, v = s.qkv(x).chunk(3, dim=-1)
            attn = (q @ k.transpose(0, 1)).softmax(dim=-1)
            s.maps.append(attn.detach())
            x = x + attn @ v
            if hasattr(s, "tmp"):
                x = x + s.tmp
                del s.tmp
            else:
                s.tmp = x.detach().mean()
            return x

    class M(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.b = B()

        def forward(s, x, y):
            return s.b(x + y)

    import copy
    torch.manual_seed(0)
    eager = M()
    comp = copy.deepcopy(eager)
    opt = cdynamo.optimize("aot_eager")(comp)
    for i in range(3):
        x, y = torch.randn(3, 5), torch.randn(3, 5)
        assert torch.equal(eager(x, y), opt(x, y)), i
        assert len(eager.b.maps) == len(comp.b.maps)
        for a, b in zip(eager.b.maps, comp.b.maps):
            assert torch.allclose(a, b), i


def test_view_moved_within_the_storage_runs_the_captured_graph():
    """x and v passed in: the guards see the same sizes, strides and sharing when v moves from x[0] to x[1];
    the call-time check sends that call to the captured graph instead of the as_strided of x[0]."""
    def f(x, v, w):
        v.mul_(2)
        s = (x @ w).softmax(-1)
        return s, s.detach()

    opt = cdynamo.optimize("aot_eager")(f)
    for row in (0, 1, 0):
        xe, we = make_inputs(7)
        xc, wc = make_inputs(7)
        ref = f(xe, xe[row], we)
        got = opt(xc, xc[row], wc)
        assert all(torch.equal(r.detach(), o.detach()) for r, o in zip(ref, got)), row
        assert torch.equal(xe.detach(), xc.detach()), row


def test_no_input_covering_the_storage_runs_the_captured_graph():
    def f(a, b, w):
        a.mul_(2)
        s = (b @ w).softmax(-1)
        return s, s.detach()

    counters.clear()
    opt = cdynamo.optimize("aot_eager")(f)
    for seed in (0, 1):
        base_e = make_inputs(seed)[0].detach().clone()
        base_c = base_e.clone()
        w = make_inputs(seed)[1]
        ref = f(base_e[0:2], base_e[1:3], w)
        got = opt(base_c[0:2], base_c[1:3], w)
        assert all(torch.equal(r.detach(), o.detach()) for r, o in zip(ref, got))
        assert torch.equal(base_e, base_c)
    assert counters["stats"]["aliased_input_mutation_eager"] == 1


def test_inputs_sharing_a_storage_without_a_change_are_left_alone():
    def f(x, v, w):
        return (x @ w).softmax(-1), v + 1

    counters.clear()
    opt = cdynamo.optimize("aot_eager")(f)
    x, w = make_inputs(3)
    ref = f(x, x[0], w)
    got = opt(x, x[0], w)
    assert all(torch.equal(r.detach(), o.detach()) for r, o in zip(ref, got))
    assert not counters["stats"]["aliased_input_mutation_rewrite"]
    assert not counters["stats"]["aliased_input_mutation_eager"]
