# test_api_parity.py — owns cdynamo.utils (counters, compile_times) and config's torch._dynamo names, compared with torch._dynamo.
import collections
import warnings

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
import torch._dynamo.utils

import cdynamo
from cdynamo import config
from cdynamo.exc import BackendCompilerFailed, CdynamoWarning
from cdynamo.testing import CompileCounter

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


@pytest.fixture(autouse=True)
def _clean_counters_and_config():
    saved = config.to_dict()
    cdynamo.utils.counters.clear()
    torch._dynamo.utils.counters.clear()
    yield
    for k, v in saved.items():
        setattr(config, k, v)
    cdynamo.utils.counters.clear()
    torch._dynamo.utils.counters.clear()


def _snapshot(counters):
    return {k: dict(v) for k, v in counters.items() if v}


def _cd(fn, backend="eager", **kw):
    return cdynamo.optimize(backend, **kw)(fn)


def _td(fn, backend="eager", **kw):
    return torch.compile(fn, backend=backend, **kw)


# ---------------------------------------------------------------- counters

def test_counters_is_a_defaultdict_of_counters_like_dynamo():
    for counters in (cdynamo.utils.counters, torch._dynamo.utils.counters):
        assert isinstance(counters, collections.defaultdict)
        assert counters.default_factory is collections.Counter


def test_counters_after_one_graph_break_match_dynamo():
    # .item() breaks in both without running Python frames (print would: pytest's capture, which torch._dynamo
    # counts as frames and cdynamo skips as library code).
    def fn(x):
        a = x.sin()
        s = a.sum().item()
        return a.cos() * s

    x = torch.randn(4)
    _cd(fn)(x)
    ours = _snapshot(cdynamo.utils.counters)
    _td(fn)(x)
    theirs = _snapshot(torch._dynamo.utils.counters)

    # The frame and its continuation: two frames tried, both compiled, one graph each.
    assert ours["frames"] == theirs["frames"] == {"total": 2, "ok": 2}
    assert ours["stats"]["unique_graphs"] == theirs["stats"]["unique_graphs"] == 2
    # One break, counted once, keyed by a reason naming the call (the texts differ).
    assert list(ours["graph_break"].values()) == list(theirs["graph_break"].values()) == [1]
    assert "item()" in next(iter(ours["graph_break"])) and "item()" in next(iter(theirs["graph_break"]))
    assert "unimplemented" not in ours and "unimplemented" not in theirs


def test_counters_frame_running_as_python_is_total_not_ok_and_unimplemented_like_dynamo():
    def fn(x):
        for i in range(2):  # a break inside a loop: the whole frame runs as Python, in both
            x = x + 1
            x = x * x.sum().item()
        return x

    x = torch.randn(3)
    _cd(fn)(x)
    ours = _snapshot(cdynamo.utils.counters)
    _td(fn)(x)
    theirs = _snapshot(torch._dynamo.utils.counters)

    assert ours["frames"] == theirs["frames"] == {"total": 1}
    # torch._dynamo keys the break and, chained, "graph break in loop"; cdynamo one reason saying both.
    assert list(ours["unimplemented"].values()) == [1] and set(theirs["unimplemented"].values()) == {1}
    for reasons in (ours["unimplemented"], theirs["unimplemented"]):
        assert any("item()" in r for r in reasons) and any("loop" in r for r in reasons)
    assert "graph_break" not in ours and "graph_break" not in theirs


def test_counters_recompiles_by_reason_and_frames_per_compile_like_dynamo():
    def fn(x):
        return x * 2 + 1

    calls = [torch.randn(3), torch.randn(3, dtype=torch.float64)]
    opt = _cd(fn)
    for x in calls:
        opt(x)
    ours = _snapshot(cdynamo.utils.counters)
    opt = _td(fn)
    for x in calls:
        opt(x)
    theirs = _snapshot(torch._dynamo.utils.counters)

    assert ours["frames"] == theirs["frames"] == {"total": 2, "ok": 2}
    assert sum(ours["recompiles"].values()) == 1
    assert "dtype" in next(iter(ours["recompiles"]))


def test_backend_failure_counts_a_frame_tried_not_ok():
    def boom(gm, example_inputs):
        raise ValueError("no")

    def fn(x):
        return x + 1

    config.suppress_errors = True
    with pytest.warns(CdynamoWarning, match="backend failed"):
        assert torch.equal(_cd(fn, boom)(torch.ones(2)), torch.full((2,), 2.0))
    assert _snapshot(cdynamo.utils.counters)["frames"] == {"total": 1}


def test_reset_keeps_counters_and_clears_compile_times_like_dynamo():
    def fn(x):
        return x.sin()

    x = torch.randn(3)
    _cd(fn)(x)
    _td(fn)(x)
    before = (_snapshot(cdynamo.utils.counters), _snapshot(torch._dynamo.utils.counters))
    for mod in (cdynamo.utils, torch._dynamo.utils):
        assert len(mod.compile_times().splitlines()) > 2  # title, header, rows

    cdynamo.reset()
    torch._dynamo.reset()
    assert (_snapshot(cdynamo.utils.counters), _snapshot(torch._dynamo.utils.counters)) == before
    ours, theirs = (mod.compile_times().splitlines()[1:] for mod in (cdynamo.utils, torch._dynamo.utils))
    assert ours == theirs  # the header alone ("Function, Runtimes (s)", or laid out by `tabulate` where installed)
    assert ours[0].replace(",", " ").split() == ["Function", "Runtimes", "(s)"]
    for mod in (cdynamo.utils, torch._dynamo.utils):
        assert mod.compile_times(repr="csv") == ([], [])


def test_compile_times_laid_out_by_tabulate_where_installed(monkeypatch):
    """As torch._dynamo's: the rows go through `tabulate.tabulate(rows, headers=...)` when the package imports."""
    import sys
    import types

    seen = []
    fake = types.ModuleType("tabulate")
    fake.tabulate = lambda rows, headers: seen.append((list(rows), headers)) or "TABLE"
    monkeypatch.setitem(sys.modules, "tabulate", fake)
    monkeypatch.setitem(cdynamo.utils.compilation_time_metrics, "phase", [0.5, 0.25])
    assert cdynamo.utils.compile_times() == "cdynamo compilation metrics:\nTABLE"
    assert seen[-1] == ([("phase", "0.5000, 0.2500")], ("Function", "Runtimes (s)"))


def test_compile_times_forms_like_dynamo():
    def fn(x):
        a = x.sin()
        s = a.sum().item()
        return a.cos() * s

    x = torch.randn(3)
    _cd(fn)(x)
    _td(fn)(x)
    for mod in (cdynamo.utils, torch._dynamo.utils):
        text = mod.compile_times()
        assert isinstance(text, str) and text.splitlines()[0].endswith("compilation metrics:")
        headers, values = mod.compile_times(repr="csv")
        assert isinstance(headers, list) and len(headers) == len(values) > 0
        _, summed = mod.compile_times(repr="csv", aggregate=True)
        assert all("," not in v for v in summed)  # one number per phase
        _, listed = mod.compile_times(repr="csv", aggregate=False)
        assert any("," in v for v in listed)      # a phase that ran more than once lists every run
        assert mod.compile_times(repr="nope") is None
    headers, _ = cdynamo.utils.compile_times(repr="csv")
    assert set(headers) == {"translate", "call_user_compiler"}


# ---------------------------------------------------------------- config

_PARITY_NAMES = ["cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit",
                 "suppress_errors", "verbose", "capture_scalar_outputs", "capture_dynamic_output_shape_ops",
                 "traceable_tensor_subclasses", "verify_correctness", "optimize_ddp"]


@pytest.mark.parametrize("name", _PARITY_NAMES)
def test_config_name_exists_with_dynamos_default(name):
    assert getattr(config, name) == getattr(torch._dynamo.config, name)
    assert name in dir(config)


def test_config_unknown_name_raises_attribute_error_on_get_and_set_like_dynamo():
    for cfg in (config, torch._dynamo.config):
        with pytest.raises(AttributeError):
            cfg.no_such_option_for_parity
        with pytest.raises(AttributeError):
            cfg.no_such_option_for_parity = 1
        assert not hasattr(cfg, "no_such_option_for_parity")


@pytest.mark.parametrize("alias,name", [("cache_size_limit", "recompile_limit"),
                                        ("accumulated_cache_size_limit", "accumulated_recompile_limit")])
def test_config_aliases_are_one_value_like_dynamo(alias, name):
    for cfg in (config, torch._dynamo.config):
        default = getattr(cfg, name)
        with cfg.patch(**{alias: 3}):
            assert getattr(cfg, name) == 3
        with cfg.patch(**{name: 5}):
            assert getattr(cfg, alias) == 5
        assert getattr(cfg, alias) == getattr(cfg, name) == default


def test_config_traceable_tensor_subclasses_is_a_mutable_set_like_dynamo():
    class MyTensor(torch.Tensor):
        pass

    config.traceable_tensor_subclasses.add(MyTensor)
    assert MyTensor in config.traceable_tensor_subclasses
    assert config.defaults()["traceable_tensor_subclasses"] == set()  # the default itself is not changed
    config.traceable_tensor_subclasses = set()


@pytest.mark.parametrize("limit", [2, 3])
def test_cache_size_limit_alias_sets_when_recompiles_stop_like_dynamo(limit):
    def fn(x, mode):
        return x + 1 if mode == "a" else x - 1

    ours, theirs = CompileCounter(), torch._dynamo.testing.CompileCounter()
    opt_ours, opt_theirs = _cd(fn, ours), _td(fn, theirs)
    x = torch.randn(2)
    with config.patch(cache_size_limit=limit), torch._dynamo.config.patch(cache_size_limit=limit), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", CdynamoWarning)
        for mode in "abcde":  # each string is a constant guarded by value: one compile per new value
            assert torch.equal(opt_ours(x, mode), fn(x, mode))
            assert torch.equal(opt_theirs(x, mode), fn(x, mode))
    assert ours.frame_count == theirs.frame_count == limit


# ---------------------------------------------------------------- verify_correctness

def _off_by_one(gm, example_inputs):
    def run(*args):
        return tuple(o + 1 for o in gm.forward(*args))
    return run


def _torch_off_by_one(gm, example_inputs):
    def run(*args):
        out = gm.forward(*args)
        return tuple(o + 1 for o in out) if isinstance(out, (tuple, list)) else out + 1
    return run


def test_verify_correctness_off_a_wrong_backend_goes_unnoticed():
    def fn(x):
        return x.sin() * 2

    x = torch.randn(3)
    assert torch.allclose(_cd(fn, _off_by_one)(x), fn(x) + 1)


def test_verify_correctness_raises_on_a_wrong_backend_like_dynamo():
    def fn(x):
        return x.sin() * 2

    x = torch.randn(3)
    config.verify_correctness = True
    with pytest.raises(BackendCompilerFailed, match="incorrect results") as info:
        _cd(fn, _off_by_one, nopython=True)(x)
    assert isinstance(info.value.__cause__, RuntimeError)
    with torch._dynamo.config.patch(verify_correctness=True), \
            pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="incorrect results"):
        _td(fn, _torch_off_by_one)(x)


def test_verify_correctness_raises_without_nopython_like_dynamo():
    def fn(x):
        return x.sin() * 2

    x = torch.randn(3)
    config.verify_correctness = True
    with pytest.raises(BackendCompilerFailed, match="incorrect results") as info:
        _cd(fn, _off_by_one)(x)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_verify_correctness_with_suppress_errors_falls_back_to_the_right_result():
    # The backend-failure policy: suppress_errors=True runs the frame as Python with one warning (torch: the same,
    # logged instead of warned).
    def fn(x):
        return x.sin() * 2

    x = torch.randn(3)
    config.verify_correctness = True
    config.suppress_errors = True
    with pytest.warns(CdynamoWarning, match="incorrect results"):
        assert torch.allclose(_cd(fn, _off_by_one)(x), fn(x))
    assert _snapshot(cdynamo.utils.counters)["frames"] == {"total": 1}
    with torch._dynamo.config.patch(verify_correctness=True, suppress_errors=True):
        assert torch.allclose(_td(fn, _torch_off_by_one)(x), fn(x))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_verify_correctness_passes_a_random_graph_and_keeps_the_random_stream(backend):
    # torch._dynamo's check reports a mismatch here (both runs draw different numbers); cdynamo replays the RNG.
    def fn(x):
        return x + torch.rand(3)

    x = torch.randn(3)
    torch.manual_seed(0)
    expected = (fn(x), torch.rand(2))
    config.verify_correctness = True
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CdynamoWarning)
        got = (_cd(fn, backend, nopython=True)(x), torch.rand(2))
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


def test_verify_correctness_runs_on_copies_of_the_inputs():
    def fn(x, y):
        x.add_(1)
        return x * y

    x, y = torch.zeros(3), torch.full((3,), 2.0)
    config.verify_correctness = True
    out = _cd(fn, "eager", nopython=True)(x, y)
    assert torch.equal(x, torch.ones(3)) and torch.equal(out, torch.full((3,), 2.0))


def test_verify_copies_keep_strides_and_overlap_and_share_nothing():
    from cdynamo._verify import clone_input

    base = torch.arange(12.0)
    for x in (base.view(3, 4).t(), base[2:].view(2, 5)[:, ::2], torch.ones(3, 1).expand(3, 4),
              torch.randn(2, 3, requires_grad=True), torch.tensor([], dtype=torch.int64)):
        y = clone_input(x)
        assert (y.shape, y.stride(), y.storage_offset(), y.dtype) == (x.shape, x.stride(), x.storage_offset(), x.dtype)
        assert torch.equal(y.detach(), x.detach()) and y.requires_grad == x.requires_grad and y.is_leaf
        if x.numel():
            assert y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


def test_cache_is_kept_per_backend():
    # A function compiled for one backend is compiled again for another (torch._dynamo's backend guard);
    # the same backend through another optimize() reuses the compiled code.
    def fn(x):
        return x.sin() + 1

    x = torch.randn(3)
    a, b = CompileCounter(), CompileCounter()
    cdynamo.optimize(a)(fn)(x)
    cdynamo.optimize(b)(fn)(x)
    cdynamo.optimize(a)(fn)(x)
    assert (a.frame_count, b.frame_count) == (1, 1)
    da, db = torch._dynamo.testing.CompileCounter(), torch._dynamo.testing.CompileCounter()
    torch.compile(fn, backend=da)(x)
    torch.compile(fn, backend=db)(x)
    assert (da.frame_count, db.frame_count) == (1, 1)
    with cdynamo.run():
        torch.testing.assert_close(fn(x), x.sin() + 1)  # run-only: any cached entry serves


def test_backend_failure_is_not_shared_with_other_backends():
    def fn(x):
        return x.cos() * 2

    def broken(gm, example_inputs):
        raise RuntimeError("backend down")

    x = torch.randn(3)
    with pytest.raises(BackendCompilerFailed, match="backend down"):
        cdynamo.optimize(broken)(fn)(x)
    config.suppress_errors = True
    with pytest.warns(CdynamoWarning, match="backend down"):
        torch.testing.assert_close(cdynamo.optimize(broken)(fn)(x), fn(x))
    cnt = CompileCounter()
    cdynamo.optimize(cnt)(fn)(x)
    assert cnt.frame_count == 1
