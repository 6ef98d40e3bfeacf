# test_dynamic_floats.py — float arguments that change between calls, as torch._dynamo passes them: a 0-d tensor input and its item() (a backed SymFloat), guards on its value, graph counts equal to torch._dynamo's.
import math

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
import torch.nn.functional as F

import cdynamo
from cdynamo.testing import CompileCounterWithBackend
from versions import REFERENCE_PINNED

VALUES = [i / 25 for i in range(26)]  # 0.5 exactly among them


def _same(got, want):
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want, equal_nan=True)
    else:
        assert got == want or (math.isnan(got) and math.isnan(want)), (got, want)


def _counts(fn, calls, backend="eager", nopython=False):
    """(cdynamo's frame count, torch._dynamo's), each call's result checked against eager's."""
    cdynamo.reset()
    cnt = CompileCounterWithBackend(backend)
    opt = cdynamo.optimize(cnt, nopython=nopython)(fn)
    for args in calls:
        _same(opt(*args), fn(*args))
    torch._dynamo.reset()
    dcnt = torch._dynamo.testing.CompileCounter()
    ref = torch.compile(fn, backend=dcnt, fullgraph=nopython)
    for args in calls:
        _same(ref(*args), fn(*args))
    torch._dynamo.reset()
    return cnt.frame_count, dcnt.frame_count


def _calls(values, x=None):
    x = torch.randn(4) if x is None else x
    return [(x, v) for v in values]


def branch(x, t):
    if t > 0.5:
        return x * t
    return x - t


def arith(x, t):
    return x * t + 1


def full_of(x, t):
    return x + torch.full((4,), t)


def reshape_by(x, t):
    return x.reshape(int(t) + 1, -1)


def sqrt_of(x, t):
    return x * math.sqrt(t)


def floor_of(x, t):
    return x * math.floor(t * 10)


def clamp_max(x, t):
    return torch.clamp(x, max=t)


def pow_of(x, t):
    return x.abs().pow(t)


def int_of(x, t):
    return x * int(t * 10)


def round_of(x, t):
    return x * round(t * 10)


def mul(x, t):
    return x * t


@pytest.mark.parametrize("fn,values", [
    (branch, VALUES), (arith, VALUES), (full_of, VALUES), (sqrt_of, VALUES), (floor_of, VALUES),
    (clamp_max, VALUES), (pow_of, VALUES), (int_of, VALUES), (round_of, VALUES),
    (mul, [2.0, 3.0, 4.0, 5.0]),  # integral floats
])
def test_float_argument_graph_count_equals_dynamo(fn, values):
    got, want = _counts(fn, _calls(values))
    assert got == want, (fn.__name__, got, want)


def test_branch_on_a_float_is_one_graph_per_side():
    """The probe of issue 31: 3 graphs (the first value static, then one per side of t > 0.5), no graph break."""
    got, want = _counts(branch, _calls(VALUES))
    assert got == want == 3


def test_branch_guard_takes_the_other_entry_and_is_right_at_the_edge():
    cdynamo.reset()
    cnt = CompileCounterWithBackend("eager")
    opt = cdynamo.optimize(cnt)(branch)
    x = torch.randn(4)
    for v in (0.1, 0.2, 0.7, 0.5, 0.5000000000000001, 0.49999999999999994, 0.3, 0.9):
        _same(opt(x, v), branch(x, v))
    assert cnt.frame_count == 3


def test_float_used_as_a_size():
    x = torch.randn(24)
    got, want = _counts(reshape_by, [(x, v) for v in (0.0, 1.0, 2.0, 3.0, 1.5, 5.0)])
    assert got == want, (got, want)


def test_nan_and_inf_after_the_float_became_dynamic():
    for values in ([1.0, 2.0, float("nan"), 3.0, float("inf"), -float("inf")], [1.0, float("nan"), 2.0, float("inf")],
                   [float("nan"), float("nan"), float("nan")]):
        got, want = _counts(mul, _calls(values))
        assert got == want, (values, got, want)
    got, want = _counts(branch, _calls([0.1, 0.2, float("nan"), 0.7, float("nan"), float("inf")]))
    assert got == want, (got, want)


def test_nopython_branch_on_a_float_does_not_raise():
    got, want = _counts(branch, _calls(VALUES), nopython=True)
    assert got == want == 3


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lr = 0.1
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) * self.lr


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Scaled()

    def forward(self, x):
        return self.inner(x) + 1


class Config:
    def __init__(self, scale):
        self.scale = scale


def scale_by_config(x, cfg):
    return x * cfg.scale


def _module_counts(make, setter, call):
    """(cdynamo's frame count, torch._dynamo's) over VALUES set with `setter`, each result checked against eager's."""
    def run(compile_fn):
        m = make()
        opt = compile_fn(m)
        for v in VALUES:
            setter(m, v)
            _same(call(opt, m), call(m, m))
    cdynamo.reset()
    cnt = CompileCounterWithBackend("eager")
    run(lambda m: cdynamo.optimize(cnt)(m))
    torch._dynamo.reset()
    dcnt = torch._dynamo.testing.CompileCounter()
    run(lambda m: torch.compile(m, backend=dcnt))
    torch._dynamo.reset()
    return cnt.frame_count, dcnt.frame_count


def test_changing_float_module_attribute_graph_count_equals_dynamo():
    """Issue 31: an lr-like attribute of the module that changes between calls is a dynamic float from the second
    compile on (2 graphs, as torch._dynamo), not one graph per value up to the recompile limit. The module's forward
    is inlined into its entry frame: the dynamic-shape state is the traced frame's."""
    x = torch.randn(2, 4)
    got, want = _module_counts(Scaled, lambda m, v: setattr(m, "lr", v), lambda f, m: f(x))
    assert got == want == 2, (got, want)


def test_changing_float_attribute_of_a_submodule_graph_count_equals_dynamo():
    x = torch.randn(2, 4)
    got, want = _module_counts(Outer, lambda m, v: setattr(m.inner, "lr", v), lambda f, m: f(x))
    assert got == want == 2, (got, want)


def test_changing_float_attribute_of_an_argument_graph_count_equals_dynamo():
    cfg = Config(0.1)
    x = torch.randn(4)
    got, want = _module_counts(lambda: scale_by_config, lambda m, v: setattr(cfg, "scale", v),
                               lambda f, m: f(x, cfg))
    assert got == want == 2, (got, want)


def test_float_attributes_stay_constants_under_dynamic_true_until_they_change():
    """compile(dynamic=True) makes float arguments symbolic at once, but an attribute (LayerNorm's eps, a module's lr)
    only once it changed: the first graph takes no float input."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(list(example_inputs))
        return gm.forward

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(4)
            self.lr = 0.1

        def forward(self, x):
            return self.norm(x) * self.lr

    cdynamo.reset()
    m = Net()
    opt = cdynamo.compile(m, backend=backend, dynamic=True)
    x = torch.randn(3, 4)
    _same(opt(x), m(x))
    m.lr = 0.2
    _same(opt(x), m(x))
    m.lr = 0.3
    _same(opt(x), m(x))
    assert len(graphs) == 2, len(graphs)
    floats = [[e for e in ex if getattr(e, "_cdynamo_float_input", False)] for ex in graphs]
    assert [len(f) for f in floats] == [0, 1], graphs


def test_dynamic_float_graph_takes_a_0d_float64_tensor_and_item():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    cdynamo.reset()
    opt = cdynamo.optimize(backend)(branch)
    x = torch.randn(4)
    for v in (0.1, 0.2, 0.7):
        _same(opt(x, v), branch(x, v))
    assert len(graphs) == 3
    gm, ex = graphs[1]
    floats = [e for e in ex if isinstance(e, torch.Tensor) and e.dim() == 0 and e.dtype == torch.float64]
    assert len(floats) == 1, ex
    assert ".item()" in gm.code, gm.code


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_float_argument_under_aot_backends(backend):
    for fn in (branch, arith, sqrt_of):
        cdynamo.reset()
        cnt = CompileCounterWithBackend(backend)
        opt = cdynamo.optimize(cnt)(fn)
        x = torch.randn(4)
        for v in VALUES[::3] + [0.5, 0.52]:
            _same(opt(x, v), fn(x, v))
        torch._dynamo.reset()
        dcnt = torch._dynamo.testing.CompileCounterWithBackend(backend)
        ref = torch.compile(fn, backend=dcnt)
        for v in VALUES[::3] + [0.5, 0.52]:
            ref(x, v)
        torch._dynamo.reset()
        counts = (fn.__name__, backend, cnt.frame_count, dcnt.frame_count)
        if REFERENCE_PINNED:
            assert cnt.frame_count == dcnt.frame_count, counts
        else:  # torch 2.11's torch._dynamo recompiles sqrt_of per value (a guard on an "unknown source" item())
            assert cnt.frame_count <= dcnt.frame_count, counts
