# test_api.py — owns the tests of cdynamo's Python layer: config, backends registry, optimize/compile/disable/run
# semantics, OptimizedModule, the callback contract (warnings, recompiles), explain/export and logging.
import io
import os
import subprocess
import sys
import warnings

import pytest
import torch

import cdynamo
from cdynamo import _core, _logging, config
from cdynamo.backends import registry
from cdynamo.exc import BackendCompilerFailed, CdynamoError, CdynamoWarning, InvalidBackend, Unsupported
from cdynamo.testing import CompileCounter, CompileCounterWithBackend, EagerAndRecordGraphs, same
from versions import REFERENCE_PINNED


def _reset():
    if _core.available():  # without _C the tests that need it fail on their own (test_extension_is_built...)
        cdynamo.reset()


@pytest.fixture(autouse=True)
def _clean():
    _reset()
    saved = config.to_dict()
    yield
    for k, v in saved.items():
        setattr(config, k, v)
    _logging.disable()
    _logging.set_stream(None)
    _reset()


def toy(x):
    a = torch.sin(x)
    b = torch.cos(x)
    return a * b


def add_one(x):
    return x + 1


def first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


# ---------------------------------------------------------------- the extension

def test_extension_is_built_and_installed():
    from cdynamo import _C

    src = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python")
    assert not os.path.abspath(cdynamo.__file__).startswith(src + os.sep), cdynamo.__file__
    for name in ("set_callback", "get_callback", "OptimizedCallable", "reset", "skip_code", "RUN_ONLY"):
        assert hasattr(_C, name), name


# ---------------------------------------------------------------- config

def test_config_defaults_and_alias():
    assert config.recompile_limit == 8
    assert config.cache_size_limit == 8
    config.cache_size_limit = 3
    assert config.recompile_limit == 3
    config.recompile_limit = 5
    assert config.cache_size_limit == 5
    assert config.suppress_errors is False and config.verbose is False


def test_config_unknown_key_names_it_and_lists_valid():
    with pytest.raises(AttributeError, match="no_such_option.*recompile_limit"):
        config.no_such_option = 1
    with pytest.raises(AttributeError, match="no_such_option"):
        config.no_such_option


@pytest.mark.parametrize("name,value", [("recompile_limit", "x"), ("recompile_limit", 2.5),
                                        ("recompile_limit", True), ("suppress_errors", 1), ("verbose", "yes")])
def test_config_wrong_type(name, value):
    before = getattr(config, name)
    with pytest.raises(TypeError, match=name):
        setattr(config, name, value)
    assert getattr(config, name) == before


def test_config_patch_context_and_decorator():
    with config.patch(recompile_limit=2, verbose=True):
        assert config.recompile_limit == 2 and config.verbose is True
    assert config.recompile_limit == 8 and config.verbose is False
    with config.patch("cache_size_limit", 4):
        assert config.recompile_limit == 4

    @config.patch({"suppress_errors": True})
    def read():
        return config.suppress_errors

    assert read() is True and config.suppress_errors is False
    with pytest.raises(AttributeError):
        config.patch(bogus=1)
    with pytest.raises(TypeError):
        config.patch(recompile_limit="many")


def test_config_is_what_cpp_imports():
    import importlib

    assert importlib.import_module("cdynamo.config") is config


# ---------------------------------------------------------------- exceptions

def test_exception_hierarchy():
    assert issubclass(CdynamoError, RuntimeError)
    assert issubclass(Unsupported, CdynamoError)
    assert issubclass(InvalidBackend, CdynamoError) and issubclass(InvalidBackend, ValueError)
    assert issubclass(BackendCompilerFailed, CdynamoError)
    assert issubclass(cdynamo.exc.InternalError, CdynamoError)


# ---------------------------------------------------------------- backends registry

def test_builtin_backends_listed():
    assert {"eager", "aot_eager", "inductor"} <= set(cdynamo.list_backends())
    assert cdynamo.list_backends() == sorted(cdynamo.list_backends())


def test_register_lookup_and_errors():
    def my_backend_for_test(gm, example_inputs):
        return gm.forward

    try:
        assert cdynamo.register_backend(my_backend_for_test) is my_backend_for_test
        assert cdynamo.lookup_backend("my_backend_for_test") is my_backend_for_test
        assert "my_backend_for_test" in cdynamo.list_backends()

        @cdynamo.register_backend(name="named_for_test")
        def other(gm, example_inputs):
            return gm.forward

        assert cdynamo.lookup_backend("named_for_test") is other
        with pytest.raises(ValueError, match="already registered"):
            cdynamo.register_backend(lambda gm, ex: gm.forward, name="named_for_test")
    finally:
        registry._registry.pop("my_backend_for_test", None)
        registry._registry.pop("named_for_test", None)

    with pytest.raises(TypeError):
        cdynamo.register_backend(42, name="x")
    with pytest.raises(InvalidBackend, match="no_such_backend.*aot_eager.*eager.*inductor"):
        cdynamo.lookup_backend("no_such_backend")
    with pytest.raises(TypeError):
        cdynamo.lookup_backend(3.5)


def test_entry_point_backend_is_loaded_lazily(tmp_path, monkeypatch):
    (tmp_path / "ep_backend_mod.py").write_text("def backend(gm, example_inputs):\n    return gm.forward\n")
    dist = tmp_path / "ep_backend_pkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-backend-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[torch_dynamo_backends]\nep_test_backend = ep_backend_mod:backend\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert "ep_test_backend" in cdynamo.list_backends()
        assert "ep_test_backend" not in registry._registry
        fn = cdynamo.lookup_backend("ep_test_backend")
        assert fn.__module__ == "ep_backend_mod" and fn.__name__ == "backend"
    finally:
        registry._registry.pop("ep_test_backend", None)
        sys.modules.pop("ep_backend_mod", None)


def _traced(fn):
    return torch.fx.symbolic_trace(fn)


def test_eager_backend_on_fx_graph():
    gm = _traced(toy)
    x = torch.randn(5)
    assert same(cdynamo.lookup_backend("eager")(gm, [x])(x), toy(x))


def test_aot_eager_backend_forward_and_backward():
    def f(x, y):
        return (torch.sin(x) * y + 1,)

    x, y = torch.randn(4, requires_grad=True), torch.randn(4)
    compiled = cdynamo.lookup_backend("aot_eager")(_traced(f), [x, y])
    out = first(compiled(x, y))
    out.sum().backward()
    x2 = x.detach().clone().requires_grad_(True)
    ref = f(x2, y)[0]
    ref.sum().backward()
    assert same(out.detach(), ref.detach()) and same(x.grad, x2.grad)


def test_inductor_backend_on_fx_graph():
    x = torch.randn(8)
    compiled = cdynamo.lookup_backend("inductor")(_traced(toy), [x])
    assert same(first(compiled(x)), toy(x))


# ---------------------------------------------------------------- testing helpers

def test_compile_counter_counts_call_nodes():
    cnt = CompileCounter()
    gm = _traced(toy)
    x = torch.randn(3)
    assert same(cnt(gm, [x])(x), toy(x))
    assert (cnt.frame_count, cnt.op_count) == (1, 3)
    cnt(_traced(add_one), [x])
    assert (cnt.frame_count, cnt.op_count) == (2, 4)
    cnt.clear()
    assert (cnt.frame_count, cnt.op_count) == (0, 0)
    with_backend = CompileCounterWithBackend("eager")
    with_backend(gm, [x])
    assert with_backend.frame_count == 1 and with_backend.graphs == [gm]
    rec = EagerAndRecordGraphs()
    rec(gm, [x])
    assert rec.graphs == [gm]


def test_same():
    t = torch.ones(3)
    assert same((t, [1, 2.0], {"a": t}), (t.clone(), [1, 2.0], {"a": t + 1e-7}))
    assert not same(t, t + 1)
    assert not same([t], [t, t])
    assert not same({"a": 1}, {"b": 1})
    assert not same(torch.ones(3), torch.ones(3, dtype=torch.float64))
    assert same(float("nan"), float("nan"), equal_nan=True) and not same(float("nan"), float("nan"))


# ---------------------------------------------------------------- optimize: bad input

def test_optimize_bad_inputs():
    with pytest.raises(InvalidBackend, match="not_a_backend"):
        cdynamo.optimize("not_a_backend")
    with pytest.raises(TypeError):
        cdynamo.optimize(42)
    with pytest.raises(TypeError, match="nopython"):
        cdynamo.optimize("eager", nopython="yes")
    with pytest.raises(TypeError, match="guard_fail_fn"):
        cdynamo.optimize("eager", guard_fail_fn=3)
    with pytest.raises(TypeError, match="dynamic"):
        cdynamo.optimize("eager", dynamic="maybe")
    with pytest.raises(TypeError, match="disable"):
        cdynamo.optimize("eager", disable=1)
    ctx = cdynamo.optimize("eager")
    with pytest.raises(TypeError):
        ctx(42)
    with pytest.raises(TypeError, match="class"):
        ctx(torch.nn.Linear)


def test_optimize_disable_true_returns_fn_unchanged():
    assert cdynamo.optimize("eager", disable=True)(toy) is toy
    assert cdynamo.compile(toy, backend="eager", disable=True) is toy


# ---------------------------------------------------------------- optimize: semantics (need _C)

def test_optimize_wraps_and_compiles_once():
    from cdynamo import _C

    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(toy)
    assert isinstance(opt, _C.OptimizedCallable)
    assert opt.__wrapped__ is toy and opt.__name__ == "toy" and opt.__qualname__ == toy.__qualname__
    x = torch.randn(10)
    assert same(opt(x), toy(x))
    y = torch.randn(10)
    assert same(opt(y), toy(y))
    assert cnt.frame_count == 1 and cnt.op_count == 3
    assert _C.get_callback() is None


def test_callback_restored_after_exception():
    from cdynamo import _C

    def boom(x):
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        cdynamo.optimize("eager")(boom)(torch.ones(1))
    assert _C.get_callback() is None


def test_optimize_as_context_manager_restores_previous():
    from cdynamo import _C

    cnt = CompileCounter()
    ctx = cdynamo.optimize(cnt)
    x = torch.randn(4)
    with ctx:
        assert _C.get_callback() is ctx.callback
        with cdynamo.disable():
            assert _C.get_callback() is None
            assert same(toy(x), toy(x))
        assert _C.get_callback() is ctx.callback
        got = toy(x)
    assert _C.get_callback() is None
    assert same(got, toy(x))
    assert cnt.frame_count == 1


def test_disabled_function_is_not_captured():
    cnt = CompileCounter()

    def inner(x):
        return torch.cos(x) + 2

    dis = cdynamo.disable(inner)
    assert dis.__wrapped__ is inner
    x = torch.randn(4)
    assert same(cdynamo.optimize(cnt)(dis)(x), inner(x))
    assert cnt.frame_count == 0
    # skip_code: even the undecorated function is never captured afterwards
    assert same(cdynamo.optimize(cnt)(inner)(x), inner(x))
    assert cnt.frame_count == 0


def test_disable_as_decorator_with_parens():
    cnt = CompileCounter()

    @cdynamo.disable()
    def inner2(x):
        return x * 3

    assert same(cdynamo.optimize(cnt)(inner2)(torch.ones(2)), torch.ones(2) * 3)
    assert cnt.frame_count == 0


def test_run_uses_cache_and_never_compiles():
    cnt = CompileCounter()
    x = torch.randn(6)
    assert same(cdynamo.run(toy)(x), toy(x))
    assert cnt.frame_count == 0
    cdynamo.optimize(cnt)(toy)(x)
    assert cnt.frame_count == 1
    ran = cdynamo.run(toy)
    assert same(ran(x), toy(x))
    other = torch.randn(2, 3)  # fails the guards: runs as Python, no compile
    assert same(ran(other), toy(other))
    with cdynamo.run():
        assert same(toy(other), toy(other))
    assert cnt.frame_count == 1


def test_methods_can_be_optimized():
    cnt = CompileCounter()

    class Holder:
        def __init__(self):
            self.k = 2

        @cdynamo.optimize(cnt)
        def go(self, x):
            return torch.sin(x) * 2

    h = Holder()
    x = torch.randn(3)
    assert same(h.go(x), torch.sin(x) * 2)


def test_compile_forms():
    cnt = CompileCounter()

    @cdynamo.compile(backend=cnt)
    def f(x):
        return torch.relu(x) + 1

    x = torch.randn(5)
    assert same(f(x), torch.relu(x) + 1)
    assert cnt.frame_count == 1

    @cdynamo.compile
    def g(x):
        return x

    assert g.__wrapped__.__name__ == "g"
    assert cdynamo.compile(add_one, backend="eager").__wrapped__ is add_one
    with pytest.raises(RuntimeError, match="mode or options"):
        cdynamo.compile(add_one, mode="max-autotune", options={"a": 1})
    with pytest.raises(ValueError, match="inductor"):
        cdynamo.compile(add_one, backend="eager", mode="max-autotune")
    with pytest.raises(TypeError):
        cdynamo.compile(3)
    with pytest.raises(TypeError, match="fullgraph"):
        cdynamo.compile(add_one, fullgraph="yes")
    with pytest.raises(InvalidBackend):
        cdynamo.compile(add_one, backend="nope")


# ---------------------------------------------------------------- backends by name, failures, compile() vs torch.compile

def _fake_distribution(root, dist_name, entry_points):
    """An installed distribution on `root` (a *.dist-info folder) declaring `entry_points` ({group: {name: value}})."""
    dist = root / f"{dist_name}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 1.0\n")
    lines = []
    for group, eps in entry_points.items():
        lines.append(f"[{group}]")
        lines.extend(f"{name} = {value}" for name, value in eps.items())
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")


def test_entry_point_backend_used_by_name_in_optimize_and_compile(tmp_path, monkeypatch):
    import importlib

    (tmp_path / "zoo_ep_backend_mod.py").write_text(
        "calls = []\n\ndef backend(gm, example_inputs):\n    calls.append(len(example_inputs))\n    return gm.forward\n")
    _fake_distribution(tmp_path, "zoo_ep_backend_pkg",
                       {"torch_dynamo_backends": {"zoo_ep_backend": "zoo_ep_backend_mod:backend",
                                                  "zoo_ep_broken": "zoo_no_such_module:backend"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()  # importlib.metadata's path cache
    try:
        assert {"zoo_ep_backend", "zoo_ep_broken"} <= set(cdynamo.list_backends())
        x = torch.randn(4)
        assert same(cdynamo.optimize("zoo_ep_backend")(toy)(x), toy(x))
        calls = sys.modules["zoo_ep_backend_mod"].calls
        assert calls == [1]
        cdynamo.reset()
        assert same(cdynamo.compile(toy, backend="zoo_ep_backend", fullgraph=True)(x), toy(x))
        lin = torch.nn.Linear(4, 2)
        assert same(cdynamo.optimize("zoo_ep_backend")(lin)(x), lin(x))
        assert calls == [1, 1, 3]  # toy twice (x), then the Linear (x, weight, bias)
        # An entry point whose module is missing fails its own lookup with the import error, no other lookup.
        with pytest.raises(ModuleNotFoundError, match="zoo_no_such_module"):
            cdynamo.optimize("zoo_ep_broken")
        assert cdynamo.lookup_backend("eager") is registry._registry["eager"]
    finally:
        registry._registry.pop("zoo_ep_backend", None)
        sys.modules.pop("zoo_ep_backend_mod", None)


def test_registered_backend_used_by_name():
    seen = []

    @cdynamo.register_backend(name="zoo_registered_backend")
    def backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    try:
        x = torch.randn(3)
        assert same(cdynamo.optimize("zoo_registered_backend")(toy)(x), toy(x))
        cdynamo.reset()
        assert same(cdynamo.compile(toy, backend="zoo_registered_backend", fullgraph=True)(x), toy(x))
        assert len(seen) == 2 and all(isinstance(gm, torch.fx.GraphModule) for gm in seen)
        assert "zoo_registered_backend" in cdynamo.list_backends()
    finally:
        registry._registry.pop("zoo_registered_backend", None)


def test_backend_failure_on_a_module_raises_and_warns_once_under_suppress_errors():
    class Broken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            return torch.relu(self.lin(x)) * 2

    mod = Broken()
    x = torch.randn(2, 3)
    # suppress_errors=True: the module runs as Python, one warning naming its forward, however many calls.
    opt = cdynamo.optimize(failing_backend)(mod)
    with config.patch(suppress_errors=True), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            assert same(opt(x), mod(x))
    mine = [str(m.message) for m in w if issubclass(m.category, CdynamoWarning)]
    assert len(mine) == 1 and "backend exploded" in mine[0] and "running as plain Python" in mine[0], mine
    assert "forward" in mine[0], mine
    cdynamo.reset()
    # By default (as torch.compile) and under nopython/fullgraph whatever suppress_errors says: raised.
    for strict, suppress in ((cdynamo.optimize(failing_backend)(mod), False),
                             (cdynamo.optimize(failing_backend, nopython=True)(mod), True),
                             (cdynamo.compile(mod, backend=failing_backend, fullgraph=True), True)):
        with config.patch(suppress_errors=suppress), \
                pytest.raises(BackendCompilerFailed, match="failing_backend.*backend exploded") as info:
            strict(x)
        assert isinstance(info.value.__cause__, RuntimeError)
        cdynamo.reset()
    from torch import _dynamo as dynamo

    try:
        with pytest.raises(dynamo.exc.BackendCompilerFailed, match="backend exploded"):
            torch.compile(mod, backend=failing_backend)(x)
    finally:
        dynamo.reset()


# torch.compile's parameters cdynamo.compile does not take (yet).
TORCH_COMPILE_ONLY = {"name", "recompile_limit", "isolate_recompiles", "shapes_spec"}


def test_compile_signature_mirrors_torch_compile():
    import inspect

    ours = inspect.signature(cdynamo.compile).parameters
    theirs = inspect.signature(torch.compile).parameters
    assert [n for n in theirs if n in ours] == list(ours), "same names in the same order"
    for name, p in ours.items():
        q = theirs[name]
        assert p.kind == q.kind, name
        if name == "backend":  # torch.compile's None (2.13; "inductor" before) is inductor; cdynamo takes both
            assert p.default == "inductor" and q.default in ("inductor", None)
        else:
            assert p.default == q.default, name
    if REFERENCE_PINNED:
        assert set(theirs) - set(ours) == TORCH_COMPILE_ONLY
    else:  # an older torch.compile lacks some of those
        assert set(theirs) - set(ours) <= TORCH_COMPILE_ONLY
    assert cdynamo.compile(add_one, backend=None).__wrapped__ is add_one


# case -> (call on a compile function, the exception torch.compile raises, cdynamo's, a message both contain)
COMPILE_ERRORS = {
    "mode_and_options": (lambda c: c(add_one, mode="max-autotune", options={"max_autotune": True}),
                         RuntimeError, RuntimeError, "Either mode or options can be specified"),
    "unknown_backend": (lambda c: c(add_one, backend="zoo_no_such_backend"),
                        RuntimeError, InvalidBackend, "Invalid backend: 'zoo_no_such_backend'"),
    "unknown_mode": (lambda c: c(add_one, mode="fastest"), RuntimeError, RuntimeError, "Unrecognized mode="),
    "unknown_option": (lambda c: c(add_one, options={"zoo_no_such_option": 1}),
                       RuntimeError, RuntimeError, "Unexpected optimization option zoo_no_such_option"),
    "option_type": (lambda c: c(add_one, options={"max_autotune": "yes"}),
                    RuntimeError, RuntimeError, "Unexpected type of attr max_autotune, got str should be bool"),
    "decorator_on_none": (lambda c: c()(None), RuntimeError, RuntimeError, "Model can't be None"),
    # torch asserts; cdynamo raises TypeError (both name the type)
    "non_callable_model": (lambda c: c(3), AssertionError, TypeError, "int"),
    # torch accepts a string for a bool flag; cdynamo checks the type
    "fullgraph_not_bool": (lambda c: c(add_one, fullgraph="yes", backend="eager"), None, TypeError, "fullgraph"),
    # torch passes mode/options to other backends as keyword arguments; cdynamo takes them for inductor only
    "mode_for_eager": (lambda c: c(add_one, backend="eager", mode="max-autotune"), None, ValueError, "inductor"),
}


@pytest.mark.parametrize("case", list(COMPILE_ERRORS))
def test_compile_errors_compared_with_torch_compile(case):
    from torch import _dynamo as dynamo

    call, torch_exc, our_exc, text = COMPILE_ERRORS[case]
    with pytest.raises(our_exc) as ours:
        call(cdynamo.compile)
    assert text in str(ours.value)
    try:
        if torch_exc is None:
            call(torch.compile)  # accepted by torch.compile (no call, so nothing compiles)
        else:
            with pytest.raises(torch_exc) as theirs:
                call(torch.compile)
            assert text in str(theirs.value)
    finally:
        dynamo.reset()


# ---------------------------------------------------------------- OptimizedModule

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.scale = 2.0

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.scale


def test_optimized_module_shares_state_and_forwards_attributes():
    torch.manual_seed(0)
    mod = Net()
    opt = cdynamo.optimize("eager")(mod)
    assert isinstance(opt, cdynamo.OptimizedModule) and isinstance(opt, torch.nn.Module)
    assert opt._orig_mod is mod
    assert opt.lin is mod.lin
    assert [id(p) for p in opt.parameters()] == [id(p) for p in mod.parameters()]
    assert callable(opt.forward) and opt.forward.__wrapped__ == mod.__call__
    opt.scale = 3.0  # forwarded to the original
    assert mod.scale == 3.0
    opt.eval()
    assert mod.training is False and opt.training is False
    opt.train()
    assert mod.training is True
    x = torch.randn(2, 4)
    assert same(opt(x), mod(x))
    assert set(opt.state_dict()) == {"_orig_mod." + k for k in mod.state_dict()}


def test_optimized_module_runs_hooks_of_the_original():
    mod = Net()
    seen = []
    mod.register_forward_hook(lambda m, inp, out: seen.append(out.shape))
    opt = cdynamo.optimize(CompileCounter())(mod)
    x = torch.randn(2, 4)
    assert same(opt(x), mod(x))
    assert seen == [torch.Size([2, 3])] * 2


# ---------------------------------------------------------------- callback contract: failures, recompiles

def failing_backend(gm, example_inputs):
    raise RuntimeError("backend exploded")


def test_backend_failure_raises_by_default_and_retries_next_call():
    opt = cdynamo.optimize(failing_backend)(toy)
    x = torch.randn(3)
    for _ in range(2):  # nothing is cached for a failed compile: each call tries (and raises) again
        with pytest.raises(BackendCompilerFailed, match="backend exploded") as info:
            opt(x)
        assert isinstance(info.value.__cause__, RuntimeError)


def test_backend_failure_with_suppress_errors_warns_once_and_runs_as_python():
    opt = cdynamo.optimize(failing_backend)(toy)
    x = torch.randn(3)
    with config.patch(suppress_errors=True), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert same(opt(x), toy(x))
        assert same(opt(x), toy(x))
    mine = [str(m.message) for m in w if issubclass(m.category, CdynamoWarning)]
    assert len(mine) == 1, mine
    assert "toy" in mine[0] and "running as plain Python" in mine[0] and "backend exploded" in mine[0]
    assert "\n" not in mine[0]


def test_backend_failure_under_nopython_raises():
    opt = cdynamo.optimize(failing_backend, nopython=True)(toy)
    with pytest.raises(BackendCompilerFailed, match="backend exploded") as info:
        opt(torch.randn(3))
    assert isinstance(info.value.__cause__, RuntimeError)


def test_recompile_calls_guard_fail_fn_and_limit_warns():
    fails = []
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt, guard_fail_fn=fails.append)(toy)
    # automatic dynamic shapes off: each new size is a recompile (with it, the second size compiles a dynamic graph)
    with config.patch(recompile_limit=2, automatic_dynamic_shapes=False), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in (2, 3, 4, 5):
            x = torch.randn(n)
            assert same(opt(x), toy(x))
    assert cnt.frame_count == 2
    assert len(fails) >= 1 and isinstance(fails[0].reason, str) and fails[0].reason
    limit = [str(m.message) for m in w if issubclass(m.category, CdynamoWarning)]
    assert len(limit) == 1 and "recompile limit" in limit[0], limit


# ---------------------------------------------------------------- callback contract, driven as the C++ hook does

def _info(**kw):
    base = {"co_name": "toy", "co_filename": "example.py", "co_firstlineno": 9}
    base.update(kw)
    return base


def test_callback_compile_graph_logs_and_wraps_backend_errors():
    from cdynamo._callback import Callback

    buf = io.StringIO()
    _logging.enable("graph", stream=buf)
    cnt = CompileCounter()
    cb = Callback(cnt, backend_name="cnt")
    gm = _traced(toy)
    x = torch.randn(3)
    fn = cb.compile_graph(gm, [x], _info(name="__compiled_fn_7", op_count=3))
    assert same(fn(x), toy(x)) and cnt.frame_count == 1
    text = buf.getvalue()
    assert text.startswith("[cdynamo:graph] __compiled_fn_7 <eval_with_key>")
    assert "opcode" in text and "call_function" in text and "<built-in method sin" in text

    bad = Callback(failing_backend, nopython=True)
    with pytest.raises(BackendCompilerFailed, match="failing_backend.*backend exploded") as e:
        bad.compile_graph(gm, [x], _info(name="__compiled_fn_8"))
    assert isinstance(e.value.__cause__, RuntimeError)
    with pytest.raises(BackendCompilerFailed, match="expected a callable"):
        Callback(lambda gm, ex: None).compile_graph(gm, [x], _info(name="__compiled_fn_9"))


def test_callback_on_compiled_prints_seed_format():
    from cdynamo._callback import Callback

    buf = io.StringIO()
    _logging.enable("bytecode", "guards", "graph_breaks", stream=buf)
    Callback(CompileCounter()).on_compiled(_info(
        original_bytecode="  0 LOAD_FAST 0 (a)", modified_bytecode="  0 LOAD_GLOBAL 3 (__compiled_fn_0)",
        guards=["local 'a' TENSOR_MATCH", "global 'torch' FUNCTION_MATCH"], graph_count=1, compile_time_s=0.01,
        break_reasons=[{"reason": "generic_jump", "filename": "example.py", "lineno": 11, "line": "if b.sum() < 0:"}],
        resume_bytecode=[("__resume_at_30_1", "  0 LOAD_FAST 0 (b)")]))
    text = buf.getvalue()
    assert "ORIGINAL BYTECODE toy example.py 9\n  0 LOAD_FAST 0 (a)" in text
    assert "MODIFIED BYTECODE toy example.py 9\n  0 LOAD_GLOBAL 3 (__compiled_fn_0)" in text
    assert "RESUME FUNCTION __resume_at_30_1" in text
    assert "GUARDS:\n - local 'a' TENSOR_MATCH\n - global 'torch' FUNCTION_MATCH" in text
    assert "generic_jump\n  at example.py:11\n    if b.sum() < 0:" in text


def test_callback_on_fallback_warns_once_per_code_and_kind_rules():
    from cdynamo._callback import Callback

    buf = io.StringIO()
    _logging.enable("graph_breaks", stream=buf)
    cb = Callback(CompileCounter())
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        cb.on_fallback(_info(kind="unsupported", reason="call to print", break_reasons=[]))
        cb.on_fallback(_info(kind="internal", reason="internal error: oops\nmore detail"))
        cb.on_fallback(_info(kind="internal", reason="internal error: oops again"))
        cb.on_fallback(_info(kind="recompile_limit", reason="recompile limit (8) reached"))
    msgs = [str(m.message) for m in w if issubclass(m.category, CdynamoWarning)]
    assert msgs == ["cdynamo: internal error in toy (example.py:9): oops; running as plain Python",
                    "cdynamo: recompile limit reached in toy (example.py:9): recompile limit (8) reached; "
                    "running as plain Python"]
    assert w[0].filename == "example.py" and w[0].lineno == 9
    assert "call to print" in buf.getvalue()


def test_callback_on_recompile_calls_guard_fail_fn_and_logs():
    from cdynamo._callback import Callback, GuardFail

    buf = io.StringIO()
    _logging.enable("recompiles", stream=buf)
    got = []
    Callback(CompileCounter(), guard_fail_fn=got.append).on_recompile(_info(reason="tensor 'x' size mismatch"))
    assert got == [GuardFail("tensor 'x' size mismatch", None)]
    assert "Recompiling function toy in example.py:9" in buf.getvalue()
    assert "tensor 'x' size mismatch" in buf.getvalue()


def test_explain_output_from_recorded_events():
    from cdynamo._explain import _output, _Recorder

    rec = _Recorder()
    gm = _traced(toy)
    rec.on_graph(gm, [], _info(name="__compiled_fn_0"), 0.0)
    rec.on_compiled(_info(guards=["local 'x' TENSOR_MATCH"], compile_time_s=0.5, break_reasons=[
        {"reason": "generic_jump TensorVariable()", "filename": "example.py", "lineno": 11, "line": "if x:"}]))
    rec.on_fallback(_info(kind="unsupported", reason="print", break_reasons=[]))
    out = _output(rec)
    assert (out.graph_count, out.graph_break_count, out.op_count) == (1, 2, 3)
    assert out.out_guards == ["local 'x' TENSOR_MATCH"] and out.compile_times == {"toy": [0.5]}
    text = str(out)
    assert "Graph Count: 1" in text and "Graph Break Count: 2" in text
    assert "example.py:11" in text and "Hint: data-dependent control flow" in text


# ---------------------------------------------------------------- explain / export

def test_explain_one_graph():
    x = torch.randn(10)
    out = cdynamo.explain(toy)(x)
    assert out.graph_count == 1 and out.graph_break_count == 0 and out.op_count == 3
    assert len(out.ops_per_graph) == 1 and len(out.ops_per_graph[0]) == 3
    assert any("'x'" in g and "TENSOR_MATCH" in g for g in out.out_guards), out.out_guards
    assert "Graph Count: 1" in str(out)
    assert cdynamo.explain(toy, x).graph_count == 1
    with pytest.raises(TypeError):
        cdynamo.explain(5)


def test_export_one_graph():
    x = torch.randn(10)
    gm, guards = cdynamo.export(toy, x)
    assert isinstance(gm, torch.fx.GraphModule)
    assert same(first(gm(x)), toy(x))
    assert any("TENSOR_MATCH" in g for g in guards)


def test_export_without_a_graph_raises():
    def no_tensor_ops(x):
        return x

    with pytest.raises(Unsupported, match="exactly one graph"):
        cdynamo.export(no_tensor_ops, torch.randn(2))


def bar(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_export_with_graph_break_raises():
    with pytest.raises(Unsupported):
        cdynamo.export(bar, torch.randn(10), torch.randn(10))


# ---------------------------------------------------------------- allow / disallow / graph_break

def test_allow_and_disallow_in_graph():
    from cdynamo import _allowed

    def helper(x):
        return x

    assert cdynamo.allow_in_graph(helper) is helper
    assert id(helper) in _allowed.allowed and id(helper) not in _allowed.disallowed
    cdynamo.disallow_in_graph(helper)
    assert id(helper) in _allowed.disallowed and id(helper) not in _allowed.allowed
    with pytest.raises(TypeError):
        cdynamo.allow_in_graph(3)
    with pytest.raises(TypeError):
        cdynamo.disallow_in_graph("nope")
    assert cdynamo.graph_break() is None


# ---------------------------------------------------------------- logging

def test_logging_parse_and_enable():
    assert _logging.parse("graph, +guards") == {"graph", "guards"}
    assert _logging.parse("+all") == set(_logging.KINDS)
    with pytest.raises(ValueError, match="bogus"):
        _logging.parse("graph,bogus")
    _logging.enable("bytecode")
    assert _logging.is_enabled("bytecode") and not _logging.is_enabled("graph")
    _logging.disable()
    assert _logging.enabled() == set()


def test_logs_env_var_parsed_at_import():
    code = "import cdynamo._logging as l; print(','.join(sorted(l.enabled())))"
    env = dict(os.environ, CDYNAMO_LOGS="guards,+graph")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "graph,guards"
    env["CDYNAMO_LOGS"] = "typo,recompiles"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "recompiles" and "typo" in out.stderr


def test_logs_print_graph_bytecode_guards():
    buf = io.StringIO()
    _logging.enable("graph", "bytecode", "guards", stream=buf)
    x = torch.randn(10)
    assert same(cdynamo.optimize("eager")(toy)(x), toy(x))
    text = buf.getvalue()
    assert "__compiled_fn_" in text and "opcode" in text and "placeholder" in text
    assert "ORIGINAL BYTECODE toy" in text and "MODIFIED BYTECODE toy" in text
    assert "GUARDS:" in text and "TENSOR_MATCH" in text


def test_demo_runs():
    out = subprocess.run([sys.executable, "-m", "cdynamo.demo"], cwd="/", capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "OK: compiled == eager (toy)" in out.stdout
    assert "ORIGINAL BYTECODE toy" in out.stdout and "GUARDS:" in out.stdout


def test_readme_first_screen_commands():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    head = "\n".join(open(os.path.join(root, "README.md")).read().splitlines()[:25])
    assert "bash scripts/demo.sh" in head and "bash scripts/test.sh" in head
