# test_parametrize.py — owns the tests of properties whose getter is a closure (torch.nn.utils.parametrize's injected properties, weight_norm via parametrizations, custom parametrizations, user classes) and of the legacy weight_norm pre-hook: results and gradients equal to eager, graph counts equal to torch._dynamo's, guards on the getter's cells.
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
from torch import nn
from torch.nn.utils import parametrize

import cdynamo
from cdynamo.testing import CompileCounter
from versions import REFERENCE_PINNED

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


def _dynamo_frames(fn, *args):
    cnt = torch._dynamo.testing.CompileCounter()
    torch.compile(fn, backend=cnt)(*args)
    return cnt.frame_count, cnt.op_count


class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(0, 1)


class Scale(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s

    def forward(self, X):
        return X * self.s


def _conv_wn():
    torch.manual_seed(0)
    return nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 6, 3, padding=1), name="weight", dim=2)


def _check_eval(m, x, graphs=1):
    cnt = CompileCounter()
    om = cdynamo.optimize(cnt)(m)
    ref = m(x)
    torch.testing.assert_close(om(x), ref, atol=1e-5, rtol=1e-5)
    first = cnt.frame_count
    torch.testing.assert_close(om(x), ref, atol=1e-5, rtol=1e-5)
    assert cnt.frame_count == first  # no recompile
    d_frames, d_ops = _dynamo_frames(m, x)
    assert first == d_frames == graphs
    assert cnt.op_count == d_ops
    return om


def _check_grads(m, x):
    om = cdynamo.optimize("eager")(m)
    params = [p for p in m.parameters()]
    ref_loss = m(x).square().sum()
    ref = torch.autograd.grad(ref_loss, params)
    loss = om(x).square().sum()
    got = torch.autograd.grad(loss, params)
    torch.testing.assert_close(loss, ref_loss, atol=1e-4, rtol=1e-4)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-4)


def test_weight_norm_parametrization_one_graph_like_dynamo():
    m = _conv_wn()
    assert type(m).__dict__["weight"].fget.__closure__  # the getter is a closure of _inject_property
    _check_eval(m, torch.randn(2, 4, 8))


def test_weight_norm_parametrization_no_grad_and_grads():
    m = _conv_wn()
    x = torch.randn(2, 4, 8)
    with torch.no_grad():
        _check_eval(m, x)
    cdynamo.reset()
    _check_grads(m, x)
    assert set(n for n, _ in m.named_parameters()) >= {"parametrizations.weight.original0",
                                                        "parametrizations.weight.original1"}


def test_custom_parametrization_symmetric_and_chained():
    torch.manual_seed(0)
    m = nn.Linear(5, 5)
    parametrize.register_parametrization(m, "weight", Symmetric())
    x = torch.randn(3, 5)
    _check_eval(m, x)
    _check_grads(m, x)
    cdynamo.reset()
    torch._dynamo.reset()
    parametrize.register_parametrization(m, "weight", Scale(2.0))  # a second one: ParametrizationList's loop
    _check_eval(m, x)
    _check_grads(m, x)


def test_parametrization_removed_between_calls_recompiles():
    m = _conv_wn()
    x = torch.randn(2, 4, 8)
    cnt = CompileCounter()
    om = cdynamo.optimize(cnt)(m)
    torch.testing.assert_close(om(x), m(x))
    parametrize.remove_parametrizations(m, "weight")  # the class goes back to Conv1d, weight a parameter
    with torch.no_grad():
        m.weight.mul_(2)
    torch.testing.assert_close(om(x), m(x))
    assert cnt.frame_count == 2


def test_parametrization_module_replaced_between_calls():
    torch.manual_seed(0)
    m = nn.Linear(4, 4)
    parametrize.register_parametrization(m, "weight", Scale(2.0))
    x = torch.randn(2, 4)
    om = cdynamo.optimize("eager", nopython=True)(m)
    torch.testing.assert_close(om(x), m(x))
    m.parametrizations.weight[0].s = 3.0  # a constant the trace read: guarded
    torch.testing.assert_close(om(x), m(x))
    torch.testing.assert_close(m(x), x @ (3.0 * m.parametrizations.weight.original).T + m.bias)


def test_parametrize_cached_context_matches_eager():
    torch.manual_seed(0)
    m = nn.Linear(4, 4)
    parametrize.register_parametrization(m, "weight", Symmetric())

    def fn(x):
        return m(x) + m(x * 2)

    x = torch.randn(2, 4)
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt, nopython=True)(fn)
    with parametrize.cached():
        ref = fn(x)
    with parametrize.cached():
        torch.testing.assert_close(opt(x), ref)
    with parametrize.cached():  # a fresh cache: torch._dynamo computes the parametrization in its graph too
        assert (cnt.frame_count, cnt.op_count) == _dynamo_frames(fn, x)
    with parametrize.cached():
        torch.testing.assert_close(opt(x), ref)
    torch.testing.assert_close(opt(x), ref)  # outside the context: no stale cache used
    assert parametrize._cache == {}


def test_legacy_weight_norm_pre_hook():
    torch.manual_seed(0)
    with pytest.warns(FutureWarning):
        m = nn.utils.weight_norm(nn.Linear(4, 6))
    x = torch.randn(3, 4)
    _check_eval(m, x)
    cdynamo.reset()
    _check_grads(m, x)


def _closure_class(scale):
    def get(self):
        return self.w * scale

    def bump():
        nonlocal scale
        scale = scale + 1

    return type("Holder", (), {"v": property(get), "__init__": lambda self, w: setattr(self, "w", w)}), bump


def test_user_property_closure_getter_and_cell_change():
    cls, bump = _closure_class(2.0)
    obj = cls(torch.randn(3))

    def fn(x):
        return obj.v + x

    x = torch.randn(3)
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(fn)
    torch.testing.assert_close(opt(x), fn(x))
    assert cnt.frame_count == _dynamo_frames(fn, x)[0] == 1
    bump()  # the getter's cell now holds 3.0: the guard on it fails
    torch.testing.assert_close(opt(x), obj.w * 3.0 + x)
    assert cnt.frame_count == 2
    type(obj).v = property(lambda self: self.w - 1)  # another property object: recompiles
    torch.testing.assert_close(opt(x), obj.w - 1 + x)


def test_user_property_closure_holding_a_tensor():
    t = torch.randn(3)

    def get(self):
        return self.k * t

    Holder = type("Holder", (), {"v": property(get), "k": 2})
    obj = Holder()

    def fn(x):
        return obj.v + x

    x = torch.randn(3)
    opt = cdynamo.optimize("eager", nopython=True)(fn)
    torch.testing.assert_close(opt(x), 2 * t + x)
    get.__closure__[0].cell_contents = torch.ones(3)  # a new tensor in the cell
    torch.testing.assert_close(opt(x), 2 * torch.ones(3) + x)


def test_property_subclass_with_own_get_is_not_trusted():
    class Odd(property):
        def __get__(self, obj, cls=None):
            return 5.0

    Holder = type("Holder", (), {"v": Odd(lambda self: 1.0)})
    obj = Holder()

    def fn(x):
        return x * obj.v

    x = torch.randn(3)
    torch.testing.assert_close(cdynamo.optimize("eager")(fn)(x), x * 5.0)


def test_call_with_star_generator_expression():
    """ParametrizationList.forward's `self[0](*originals)` with a generator expression of originals."""
    ws = [torch.randn(3), torch.randn(3)]

    def add(a, b):
        return a * b

    def fn(x):
        return add(*(w + x for w in ws))

    x = torch.randn(3)
    cnt = CompileCounter()
    torch.testing.assert_close(cdynamo.optimize(cnt)(fn)(x), fn(x))
    assert (cnt.frame_count, cnt.op_count) == _dynamo_frames(fn, x)


def test_call_with_star_generator_expression_that_breaks():
    def add(a, b):
        print("adding")  # a break inside the callee: the call reruns as Python on the same iterator
        return a * b

    def fn(x):
        return add(*(x + i for i in range(2))) + 1

    x = torch.randn(3)
    torch.testing.assert_close(cdynamo.optimize("eager")(fn)(x), fn(x))


def _probe_calls():
    return []


def test_lru_cache_over_constant_result_function():
    """transformers' install probes: @lru_cache over a function marked assume_constant_result."""
    import functools
    calls = _probe_calls()

    @functools.lru_cache
    def probe():
        calls.append(1)
        return False
    probe.__wrapped__._dynamo_marked_constant = True

    def fn(x):
        if probe():
            return x - 1
        return x + 1

    x = torch.randn(3)
    cnt = CompileCounter()
    torch.testing.assert_close(cdynamo.optimize(cnt, nopython=True)(fn)(x), x + 1)
    assert cnt.frame_count == 1
    assert calls == [1]  # called once, through the cache, as eager does
    cnt2 = CompileCounter()

    @functools.lru_cache
    def unmarked():
        return True

    def fn2(x):
        return x - 1 if unmarked() else x + 1

    torch.testing.assert_close(cdynamo.optimize(cnt2)(fn2)(x), x - 1)


def _scale(v):
    print("scale", v)  # cannot be traced: the comprehension breaks
    return v


def test_comprehension_frame_over_dict_keyiterator_like_eager():
    """A break inside an inlined dict comprehension: the call runs as Python and the comprehension's own frame
    starts with a real dict_keyiterator in `.0` (transformers' recordable_keys before the config fix). It runs
    as Python (a break inside its loop), as torch._dynamo leaves it; the result is eager's."""
    d = {"a": 1.0, "b": 2.0}

    def fn(x):
        y = x.sin()
        r = {k: _scale(d[k]) for k in d}
        return y * r["a"] + r["b"]

    x = torch.randn(3)
    cnt = CompileCounter()
    torch.testing.assert_close(cdynamo.optimize(cnt)(fn)(x), fn(x))
    if REFERENCE_PINNED:  # torch 2.11's torch._dynamo compiles 2 frames on 3.12 where 2.13's and cdynamo compile none
        assert cnt.frame_count == _dynamo_frames(fn, x)[0]


def test_dict_changed_during_iteration_raises_like_eager():
    d = {"a": 1.0, "b": 2.0}

    def fn(x):
        out = []
        for k in iter(d):
            out.append(x * d[k])
            d["c"] = 3.0
        return out

    x = torch.randn(3)
    with pytest.raises(RuntimeError, match="changed size during iteration"):
        fn(x)
    assert d == {"a": 1.0, "b": 2.0, "c": 3.0}
    del d["c"]
    with pytest.raises(RuntimeError, match="changed size during iteration"):
        cdynamo.optimize("eager")(fn)(x)
    assert d == {"a": 1.0, "b": 2.0, "c": 3.0}


def test_legacy_weight_norm_removed_between_calls():
    torch.manual_seed(0)
    with pytest.warns(FutureWarning):
        m = nn.utils.weight_norm(nn.Linear(4, 6))
    x = torch.randn(3, 4)
    om = cdynamo.optimize("eager")(m)
    torch.testing.assert_close(om(x), m(x))
    nn.utils.remove_weight_norm(m)  # the pre-hook is gone, weight a parameter again
    with torch.no_grad():
        m.weight.mul_(-1)
    torch.testing.assert_close(om(x), m(x))


def test_id_of_a_frame_object_is_guarded():
    class Box:
        pass

    a, b = Box(), Box()
    holder = {"obj": a}

    def fn(x):
        return x + (1 if id(holder["obj"]) == id(a) else 2)

    x = torch.randn(3)
    opt = cdynamo.optimize("eager", nopython=True)(fn)
    torch.testing.assert_close(opt(x), x + 1)
    holder["obj"] = b
    torch.testing.assert_close(opt(x), x + 2)
