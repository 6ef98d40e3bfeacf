# test_library_python.py — owns tests of the Python constructs library model code uses (issue 11 item 2):
# each is traced into one graph (counted against torch._dynamo where it captures) with eager's results.
import importlib
import os
import sys
import textwrap

import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter
from graph_counts import compiled, dynamo_graphs

pytestmark = pytest.mark.usefixtures("cdynamo_reset")


# ---- IMPORT_NAME / IMPORT_FROM of modules already imported -------------------------------------------

def import_plain(x):
    import math
    return x * math.pi


def import_dotted(x):
    import torch.nn.functional
    return torch.nn.functional.relu(x) + 1


def import_from(x):
    from torch.nn import functional as F
    from math import sqrt
    return F.gelu(x) * sqrt(2.0)


def import_as_dotted(x):
    import torch.nn.functional as F
    return F.silu(x) - 1


@pytest.mark.parametrize("fn", [import_plain, import_dotted, import_from, import_as_dotted])
def test_import_of_imported_module_is_one_graph(fn):
    x = torch.randn(6)
    opt, cnt = compiled(fn)
    torch.testing.assert_close(opt(x), fn(x))
    assert cnt.frame_count == 1 == dynamo_graphs(fn, x)
    assert cnt.op_count >= 1
    opt(torch.randn(6))
    assert cnt.frame_count == 1  # no recompile


def test_first_import_is_a_break_and_runs(tmp_path, monkeypatch):
    (tmp_path / "cd_fresh_mod.py").write_text("VALUE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("cd_fresh_mod", None)

    def fn(x):
        y = x + 1
        import cd_fresh_mod
        return y * cd_fresh_mod.VALUE

    x = torch.randn(4)
    opt, cnt = compiled(fn)
    torch.testing.assert_close(opt(x), (x + 1) * 3)
    assert "cd_fresh_mod" in sys.modules          # the import ran, once, in the continuation
    assert cnt.frame_count == 2
    sys.modules.pop("cd_fresh_mod", None)


def test_relative_import_in_a_package(tmp_path, monkeypatch):
    pkg = tmp_path / "cd_pkg_rel"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "consts.py").write_text("SCALE = 5\n")
    (pkg / "mod.py").write_text(textwrap.dedent("""
        import torch
        from . import consts

        def fn(x):
            from .consts import SCALE
            from . import consts as c
            return x * SCALE + c.SCALE
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("cd_pkg_rel.mod")
    x = torch.randn(3)
    opt, cnt = compiled(mod.fn)
    torch.testing.assert_close(opt(x), x * 5 + 5)
    assert cnt.frame_count == 1
    for m in [m for m in sys.modules if m.startswith("cd_pkg_rel")]:
        del sys.modules[m]


def test_import_guard_sees_a_replaced_module(tmp_path, monkeypatch):
    (tmp_path / "cd_swap_mod.py").write_text("K = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("cd_swap_mod", None)
    import cd_swap_mod  # noqa: F401

    def fn(x):
        import cd_swap_mod
        return x * cd_swap_mod.K

    x = torch.ones(2)
    opt, cnt = compiled(fn)
    torch.testing.assert_close(opt(x), x * 2)
    sys.modules.pop("cd_swap_mod")
    (tmp_path / "cd_swap_mod.py").write_text("K = 7  # replaced, a different size\n")
    importlib.invalidate_caches()
    import cd_swap_mod  # noqa: F401,F811 - a new module object
    torch.testing.assert_close(opt(x), x * 7)
    sys.modules.pop("cd_swap_mod", None)


# ---- dict subclasses that override get / __getitem__ / __contains__ and call dict's through super() --------

class _Registry(dict):
    """Like transformers' _CanRecordRegistry: keys are class names, lookups go through dict's own get."""

    def get(self, model):
        return super().get(type(model).__name__) or {}

    def __contains__(self, model):
        return super().__contains__(type(model).__name__)


REGISTRY = _Registry()


class _Probe:
    pass


def registry_lookup(x, probe):
    flags = REGISTRY.get(probe)
    if probe in REGISTRY:
        return x * flags["scale"]
    return x + 1


def test_super_dict_get_on_a_dict_subclass_is_guarded():
    REGISTRY.clear()
    probe = _Probe()
    x = torch.randn(3)
    opt, cnt = compiled(registry_lookup)
    torch.testing.assert_close(opt(x, probe), x + 1)
    assert cnt.frame_count == 1
    REGISTRY["_Probe"] = {"scale": 3.0}  # the key appears: the guard on its absence fails
    torch.testing.assert_close(opt(x, probe), x * 3.0)
    assert cnt.frame_count == 2
    REGISTRY["_Probe"] = {"scale": 5.0}  # a new value under the key
    torch.testing.assert_close(opt(x, probe), x * 5.0)
    del REGISTRY["_Probe"]
    torch.testing.assert_close(opt(x, probe), x + 1)
    REGISTRY.clear()


# ---- enum members and container truth values ------------------------------------------------------------

import enum  # noqa: E402


class _Action(enum.Enum):
    NONE = "none"
    WARN = "warn"


def enum_branch(x, action):
    if action == _Action.NONE:
        return x + 1
    return x - 1


def test_enum_members_are_constants():
    opt, cnt = compiled(enum_branch)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x, _Action.NONE), x + 1)
    torch.testing.assert_close(opt(x, _Action.WARN), x - 1)  # a different member recompiles
    assert cnt.frame_count == 2


def dict_or_default(x, d):
    flags = d or {"scale": 2.0}
    return x * flags["scale"]


def test_truth_value_of_a_dict():
    opt, cnt = compiled(dict_or_default)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x, {}), x * 2.0)
    torch.testing.assert_close(opt(x, {"scale": 4.0}), x * 4.0)
    assert cnt.frame_count == 2


# ---- collections.abc mixin methods (frozen in 3.11) are inlined ---------------------------------------------

from collections.abc import MutableMapping  # noqa: E402


class _Interface(MutableMapping):
    """Like transformers' AttentionInterface: a MutableMapping over a class-wide dict."""
    _global = {"eager": 1.0, "scaled": 2.0}

    def __init__(self):
        self._local = {}

    def __getitem__(self, key):
        return self._local[key] if key in self._local else self._global[key]

    def __setitem__(self, key, value):
        self._local[key] = value

    def __delitem__(self, key):
        del self._local[key]

    def __iter__(self):
        return iter({**self._global, **self._local})

    def __len__(self):
        return len(self._global.keys() | self._local.keys())


INTERFACE = _Interface()


def interface_lookup(x, name):
    if name not in INTERFACE:  # Mapping.__contains__ from _collections_abc, then __getitem__
        return x
    return x * INTERFACE[name]


def test_mapping_mixin_contains_is_inlined():
    opt, cnt = compiled(interface_lookup)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x, "scaled"), x * 2.0)
    assert "Graph Break Count: 0" in str(cdynamo.explain(interface_lookup)(x, "scaled"))
    assert cnt.frame_count == 1 and cnt.op_count == 1  # `in` and [] traced: one graph, the multiplication
    torch.testing.assert_close(opt(x, "missing"), x)  # no tensor op on this path: runs as Python
    torch.testing.assert_close(opt(x, "scaled"), x * 2.0)


# ---- isinstance on objects, functions stored on modules, bound methods passed in, inspect.signature ----

class _CacheA:
    def __init__(self):
        self.n = 1


class _CacheB(_CacheA):
    pass


def _isinstance_branch(x, cache):
    if isinstance(cache, _CacheB):
        return x - 1
    return x + 1


def test_isinstance_on_an_object_is_answered_from_its_type():
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(_isinstance_branch)
    x = torch.zeros(2)
    for _ in range(3):
        assert torch.equal(opt(x, _CacheA()), x + 1)   # a new object each call: no recompile
    assert cnt.frame_count == 1
    assert torch.equal(opt(x, _CacheB()), x - 1)       # another type: recompiles, right branch
    assert cnt.frame_count == 2


class _Act(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.act = torch.nn.functional.gelu            # a builtin function stored on the module

    def forward(self, x):
        return self.act(x) * 2


def test_builtin_function_stored_on_a_module_is_traced():
    cnt = CompileCounter()
    m = _Act()
    x = torch.randn(4)
    torch.testing.assert_close(cdynamo.optimize(cnt)(m)(x), m(x))
    assert cnt.frame_count == 1 and cnt.op_count == 2


class _Scaler(torch.nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s

    def chunk(self, x):
        return x * self.s


def _apply(fn, x):
    return fn(x) + 1


def test_bound_method_argument_guarded_by_receiver_not_identity():
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(_apply)
    m = _Scaler(2.0)
    x = torch.ones(3)
    for _ in range(3):
        torch.testing.assert_close(opt(m.chunk, x), x * 2 + 1)   # m.chunk is a new object on each call
    assert cnt.frame_count == 1
    torch.testing.assert_close(opt(_Scaler(5.0).chunk, x), x * 5 + 1)


def _nargs(fn, x):
    import inspect
    n = len(inspect.signature(fn).parameters)
    return x * n


def _one(a):
    return a


def _two(a, b):
    return a


def test_inspect_signature_is_a_trace_time_constant():
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(_nargs)
    x = torch.ones(2)
    torch.testing.assert_close(opt(_one, x), x)
    torch.testing.assert_close(opt(_two, x), x * 2)              # another function: its own signature
    torch.testing.assert_close(opt(_Scaler(1.0).chunk, x), x)   # bound: `self` not counted
    assert cnt.frame_count == 3
    ex = cdynamo.explain(_nargs)(_one, x)
    assert ex.graph_count == 1 and not ex.break_reasons


# ---- os.environ reads (transformers' sdpa_attention reads TRANSFORMERS_SDPA_FORCE_GQA per call) -----------

def env_reads(x):
    y = x * 2 if os.environ.get("CDYNAMO_TEST_FLAG", "0") == "1" else x * 3
    if "CDYNAMO_TEST_FLAG" in os.environ:
        y = y + int(os.environ["CDYNAMO_TEST_FLAG"])
    return y - len(os.environ.get("CDYNAMO_TEST_OTHER") or "")


@pytest.mark.parametrize("start", [None, "1", "5"])
def test_os_environ_reads_are_constants_guarded_on_the_variable(start, monkeypatch):
    """Like torch._dynamo: one graph; the values read are guarded, so setting, changing or removing the
    variable recompiles with eager's answer, and an unchanged environment reuses the graph."""
    monkeypatch.delenv("CDYNAMO_TEST_OTHER", raising=False)
    if start is None:
        monkeypatch.delenv("CDYNAMO_TEST_FLAG", raising=False)
    else:
        monkeypatch.setenv("CDYNAMO_TEST_FLAG", start)
    x = torch.randn(4)
    opt, cnt = compiled(env_reads)
    torch.testing.assert_close(opt(x), env_reads(x))
    assert cnt.frame_count == 1 == dynamo_graphs(env_reads, x)
    opt(torch.randn(4))
    assert cnt.frame_count == 1
    for value in ("1", "7", None):
        if value is None:
            monkeypatch.delenv("CDYNAMO_TEST_FLAG", raising=False)
        else:
            monkeypatch.setenv("CDYNAMO_TEST_FLAG", value)
        torch.testing.assert_close(opt(x), env_reads(x))
    monkeypatch.setenv("CDYNAMO_TEST_OTHER", "abc")
    torch.testing.assert_close(opt(x), env_reads(x))
    assert cdynamo.explain(env_reads)(x).graph_break_count == 0


def env_missing_item(x):
    return x + len(os.environ["CDYNAMO_TEST_MISSING"])


def test_os_environ_missing_item_raises_key_error_as_eager(monkeypatch):
    monkeypatch.delenv("CDYNAMO_TEST_MISSING", raising=False)
    opt, _ = compiled(env_missing_item)
    with pytest.raises(KeyError):
        opt(torch.randn(2))


# ---- getattr / hasattr on constants (masking_utils: getattr(cache, "is_compileable", False), cache None) ----

def const_getattr(x, cache):
    if getattr(cache, "is_compileable", False) or hasattr(cache, "shape"):
        return x + 1
    return x * getattr(2.5, "real") + hasattr("s", "upper")


@pytest.mark.parametrize("cache", [None, 3, "text"])
def test_getattr_and_hasattr_on_constants_are_folded(cache):
    x = torch.randn(3)
    opt, cnt = compiled(const_getattr)
    torch.testing.assert_close(opt(x, cache), const_getattr(x, cache))
    assert cnt.frame_count == 1 == dynamo_graphs(const_getattr, x, cache)
    assert cdynamo.explain(const_getattr)(x, cache).graph_break_count == 0


def const_getattr_missing(x):
    return x + getattr(None, "nothing_here")


def test_getattr_of_missing_attribute_on_a_constant_raises_as_eager():
    opt, _ = compiled(const_getattr_missing)
    with pytest.raises(AttributeError):
        opt(torch.randn(2))


# ---- enumerate over a slice of a ModuleList (Qwen2: enumerate(self.layers[: config.num_hidden_layers])) ----

class SlicedLayers(torch.nn.Module):
    def __init__(self, n=4, use=3):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(n))
        self.use = use

    def forward(self, x):
        for i, layer in enumerate(self.layers[: self.use]):
            x = layer(x) * (i + 1)
        for layer in self.layers[1::2]:
            x = layer(x)
        return x


def test_enumerate_over_a_module_list_slice_is_one_graph():
    torch.manual_seed(0)
    m = SlicedLayers()
    x = torch.randn(2, 4)
    opt, cnt = compiled(m)
    torch.testing.assert_close(opt(x), m(x))
    assert cnt.frame_count == 1 == dynamo_graphs(m, x)
    assert cnt.op_count == 3 * 2 + 2
    assert cdynamo.explain(m)(x).graph_break_count == 0
    m.use = 2  # the slice bound is guarded
    torch.testing.assert_close(opt(x), m(x))
    m.layers.append(torch.nn.Linear(4, 4))  # the container's size is guarded
    torch.testing.assert_close(opt(x), m(x))


# ---- isinstance of a tensor with a tuple of classes (funnel: isinstance(tensor, (tuple, list))) ---------------

def isinstance_tuple(x, legacy):
    a = 1 if isinstance(x, (tuple, list)) else 2
    b = 10 if isinstance(x * 2, (dict, (torch.Tensor,))) else 20
    c = 100 if isinstance(x, (int, legacy)) else 200
    return x + a + b + c


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_isinstance_of_a_tensor_with_a_tuple_of_classes(dtype):
    x = torch.randn(3, dtype=dtype)
    opt, cnt = compiled(isinstance_tuple)
    torch.testing.assert_close(opt(x, torch.FloatTensor), isinstance_tuple(x, torch.FloatTensor))
    assert cnt.frame_count == 1 == dynamo_graphs(isinstance_tuple, x, torch.FloatTensor)
    assert cdynamo.explain(isinstance_tuple)(x, torch.FloatTensor).graph_break_count == 0


# ---- Mapping.get / __contains__ mixins whose __getitem__ raises KeyError (transformers' AttentionInterface) ----

REG = _Interface()  # _global {'eager': 1.0, 'scaled': 2.0}, like transformers' AttentionInterface


def registry_get(x):
    return x * REG.get("eager", 0) + REG.get("missing", 5) + (REG.get("missing2", None) is None) + ("b" in REG)


def test_mapping_get_of_a_missing_key_returns_the_default():
    x = torch.randn(3)
    opt, cnt = compiled(registry_get)
    torch.testing.assert_close(opt(x), registry_get(x))
    assert cnt.frame_count == 1 == dynamo_graphs(registry_get, x)
    assert cdynamo.explain(registry_get)(x).graph_break_count == 0
    REG["b"] = 2  # the local mapping's keys are guarded: now present
    try:
        torch.testing.assert_close(opt(x), registry_get(x))
        REG["missing"] = 7
        torch.testing.assert_close(opt(x), registry_get(x))
    finally:
        REG._local.pop("b", None)
        REG._local.pop("missing", None)
    torch.testing.assert_close(opt(x), registry_get(x))


# ---- torch.ops: aten packets and overloads, and torch.library custom ops (Mixtral's MoE grouped_mm) ---------

@torch.library.custom_op("cdynamo_test::scaled_add", mutates_args=())
def scaled_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return x + alpha * y


@scaled_add.register_fake
def _(x, y, alpha):
    return torch.empty_like(x)


def ops_calls(x, y):
    a = torch.ops.aten.add(x, y) + torch.ops.aten.mul.Tensor(x, y)
    return torch.ops.cdynamo_test.scaled_add(a, y, 0.5) + torch.ops.cdynamo_test.scaled_add.default(x, a, 2.0)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_ops_and_custom_ops_are_graph_ops(backend):
    x, y = torch.randn(3), torch.randn(3)
    cnt = CompileCounter() if backend == "eager" else None
    opt = cdynamo.optimize(cnt or backend)(ops_calls)
    torch.testing.assert_close(opt(x, y), ops_calls(x, y))
    if cnt is not None:
        assert cnt.frame_count == 1 == dynamo_graphs(ops_calls, x, y)
        assert cnt.op_count == 6  # add, mul, add, scaled_add, scaled_add.default, add
        assert cdynamo.explain(ops_calls)(x, y).graph_break_count == 0


# ---- advanced indexing with a tuple of tensors (masking_utils: padding_mask[batch_idx, kv_idx]) -------------

def tensor_index_tuple(mask, b, k):
    return mask[b, k].float() + mask[b, :].sum() + mask[b, 1:3].sum()


def test_index_tuple_holding_tensors_is_a_graph_op():
    m = torch.rand(4, 6) > 0.5
    b, k = torch.tensor([0, 1, 3]), torch.tensor([2, 5, 0])
    opt, cnt = compiled(tensor_index_tuple)
    torch.testing.assert_close(opt(m, b, k), tensor_index_tuple(m, b, k))
    assert cnt.frame_count == 1 == dynamo_graphs(tensor_index_tuple, m, b, k)
    assert cdynamo.explain(tensor_index_tuple)(m, b, k).graph_break_count == 0


# ---- a torch class's method called on the class (SqueezeBERT: nn.LayerNorm.forward(self, x)) ----------------

class ChannelLayerNorm(torch.nn.LayerNorm):
    def forward(self, x):
        x = x.permute(0, 2, 1)
        return torch.nn.LayerNorm.forward(self, x).permute(0, 2, 1)


def test_torch_class_method_called_on_the_class_is_inlined():
    torch.manual_seed(0)
    m = ChannelLayerNorm(4)
    x = torch.randn(2, 4, 5)
    opt, cnt = compiled(m)
    torch.testing.assert_close(opt(x), m(x))
    assert cnt.frame_count == 1 == dynamo_graphs(m, x)
    assert cdynamo.explain(m)(x).graph_break_count == 0
