# test_cold_start.py — owns the check that a fresh process's first compile with the eager backend or a callable
# backend (and `import cdynamo` itself) imports none of torch._dynamo, torch._inductor, aot_autograd or sympy, and
# that the meta routes that make this possible (cdynamo._aten_meta, cdynamo._aten_shapes) give torch's metadata.
"""Each case runs in a fresh interpreter (the modules a process has imported cannot be unimported): the child
imports torch, then cdynamo, compiles and calls, and prints which heavy modules sys.modules holds and whether the
results equal eager. The timeout is only a hang guard; nothing here measures time (benchmarks/bench_cold_start.py
does)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("torch._dynamo", "torch._inductor", "torch._functorch.aot_autograd", "sympy")
_HANG_GUARD_S = 600

_PRELUDE = textwrap.dedent(
    """
    import json, sys
    HEAVY = {heavy!r}
    def heavy():
        return sorted(m for m in HEAVY if m in sys.modules)
    import torch
    before_cdynamo = heavy()
    import cdynamo
    after_import = heavy()
    import importlib.util
    assert importlib.util.find_spec("cdynamo._C") is not None, cdynamo.__file__  # a built cdynamo, not python/
    """
)


def _run(*parts):
    code = _PRELUDE.format(heavy=HEAVY) + "".join(textwrap.dedent(part) for part in parts)
    env = dict(os.environ)
    env.pop("CDYNAMO_LOGS", None)
    # The cdynamo this process imported (installed, or staged on PYTHONPATH as on the GPU machine), never python/ of
    # the source tree: the conftest refuses that one.
    import cdynamo
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(cdynamo.__file__)))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=_HANG_GUARD_S,
                       cwd=os.path.dirname(os.path.abspath(__file__)), env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    last = [line for line in p.stdout.splitlines() if line.startswith("{")][-1]
    return json.loads(last)


def test_import_cdynamo_imports_no_heavy_module():
    out = _run("""
        print(json.dumps({"before": before_cdynamo, "after": after_import}))
    """)
    assert out["before"] == []
    assert out["after"] == []


_THREE_OPS = """
    def fn(x, y):
        a = torch.sin(x)
        b = torch.cos(y)
        return a * b + 1
    x, y = torch.randn(8, 4), torch.randn(8, 4)
"""


def test_first_eager_compile_imports_no_heavy_module():
    out = _run(_THREE_OPS, """
        opt = cdynamo.optimize("eager")(fn)
        got = opt(x, y)
        first = heavy()
        got2 = opt(x, y)
        print(json.dumps({"heavy": first, "heavy2": heavy(), "equal": bool(torch.equal(got, fn(x, y))),
                          "equal2": bool(torch.equal(got2, fn(x, y))), "frames": cdynamo.utils.counters["stats"]["unique_graphs"]}))
    """)
    assert out["heavy"] == [] and out["heavy2"] == []
    assert out["equal"] and out["equal2"]
    assert out["frames"] == 1


def test_first_callable_backend_compile_imports_no_heavy_module():
    out = _run(_THREE_OPS, """
        graphs = []
        def backend(gm, example_inputs):
            graphs.append(len([n for n in gm.graph.nodes if n.op == "call_function"]))
            return gm.forward
        got = cdynamo.optimize(backend)(fn)(x, y)
        print(json.dumps({"heavy": heavy(), "equal": bool(torch.equal(got, fn(x, y))), "graphs": graphs}))
    """)
    assert out["heavy"] == []
    assert out["equal"]
    assert out["graphs"] == [4]


def test_first_module_compile_imports_no_heavy_module():
    # nn.Linear (aten::linear decomposes into addmm / matmul), softmax, a view, reductions, autograd.
    out = _run("""
        torch.manual_seed(0)
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1 = torch.nn.Linear(16, 32)
                self.fc2 = torch.nn.Linear(32, 8)
            def forward(self, x):
                h = torch.relu(self.fc1(x)) * 0.5
                h = self.fc2(h).view(-1, 2, 4)
                return torch.softmax(h, -1).sum(1)
        net = Net()
        x = torch.randn(5, 16)
        opt = cdynamo.optimize("eager")(net)
        got = opt(x)
        got.sum().backward()
        grads = [p.grad.clone() for p in net.parameters()]
        net.zero_grad()
        want = net(x)
        want.sum().backward()
        same_grads = all(torch.equal(g, p.grad) for g, p in zip(grads, net.parameters()))
        print(json.dumps({"heavy": heavy(), "equal": bool(torch.equal(got, want)), "grads": same_grads}))
    """)
    assert out["heavy"] == []
    assert out["equal"] and out["grads"]


def test_first_conv_norm_compile_imports_no_heavy_module():
    # Convolutions (2d, grouped, transposed, 1d), batch norm in eval and training mode, layer and group norm, pools:
    # their shapes come from cdynamo._aten_shapes and ATen's C++ kernels, never torch's Python meta kernels (which
    # import sympy, torch._dynamo and torch._inductor). Results, gradients and running stats equal eager's.
    out = _run("""
        import copy
        torch.manual_seed(0)
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
                self.bn = torch.nn.BatchNorm2d(8)
                self.dw = torch.nn.Conv2d(8, 8, 3, stride=2, groups=4)
                self.up = torch.nn.ConvTranspose2d(8, 4, 2, stride=2, output_padding=0)
                self.gn = torch.nn.GroupNorm(2, 4)
                self.c1 = torch.nn.Conv1d(4, 4, 3, padding=1)
                self.ln = torch.nn.LayerNorm(4)
                self.fc = torch.nn.Linear(4, 5)
            def forward(self, x):
                h = torch.relu(self.bn(self.conv(x)))
                h = torch.nn.functional.max_pool2d(h, 2)
                h = self.gn(self.up(self.dw(h)))
                h = self.c1(h.flatten(2)).transpose(1, 2)
                h = self.ln(h).mean(1)
                return self.fc(torch.nn.functional.adaptive_avg_pool1d(h.unsqueeze(1), 4).squeeze(1))
        x = torch.randn(2, 3, 16, 16)
        result = {}
        for mode in ("eval", "train"):
            net = Net().train(mode == "train")
            ref = copy.deepcopy(net)
            got = cdynamo.optimize("eager")(net)(x)
            want = ref(x)
            result[mode + "_heavy"] = heavy()
            result[mode + "_equal"] = bool(torch.allclose(got, want, atol=1e-6))
            got.sum().backward()
            want.sum().backward()
            result[mode + "_grads"] = all(torch.allclose(a.grad, b.grad, atol=1e-5)
                                          for a, b in zip(net.parameters(), ref.parameters()))
            result[mode + "_stats"] = all(torch.equal(a, b) for a, b in zip(net.buffers(), ref.buffers()))
        print(json.dumps(result))
    """)
    for mode in ("eval", "train"):
        assert out[mode + "_heavy"] == [], mode
        assert out[mode + "_equal"] and out[mode + "_grads"] and out[mode + "_stats"], (mode, out)


def test_user_imports_are_the_users():
    # A user who imported torch._dynamo keeps it; the compile still gives eager's result.
    out = _run(_THREE_OPS, """
        import torch._dynamo
        got = cdynamo.optimize("eager")(fn)(x, y)
        print(json.dumps({"heavy": heavy(), "equal": bool(torch.equal(got, fn(x, y)))}))
    """)
    assert "torch._dynamo" in out["heavy"]
    assert out["equal"]


def test_aot_eager_imports_aot_autograd_when_used():
    # aot_eager imports what it needs at its first compile (and gives eager's result).
    out = _run(_THREE_OPS, """
        got = cdynamo.optimize("aot_eager")(fn)(x, y)
        print(json.dumps({"heavy": heavy(), "equal": bool(torch.allclose(got, fn(x, y)))}))
    """)
    assert "torch._functorch.aot_autograd" in out["heavy"]
    assert out["equal"]


# In-process checks (this pytest process has imported everything already).

def _meta(*shape, dtype=None, channels_last=False):
    import torch
    t = torch.empty(*shape, dtype=dtype or torch.float32, device="meta")
    return t.to(memory_format=torch.channels_last) if channels_last else t


def _cases():
    import torch
    import torch.nn.functional as F
    M = _meta
    return {
        "sin": (torch.sin, (M(3, 4),), {}),
        "add_broadcast": (torch.add, (M(3, 1), M(1, 4)), {"alpha": 2}),
        "add_scalar": (torch.add, (M(3, 4), 1), {}),
        "int_plus_float": (torch.add, (M(3, dtype=torch.int64), M(3)), {}),
        "mul_transposed": (torch.mul, (M(4, 3).t(), M(3, 4)), {}),
        "mul_channels_last": (torch.mul, (M(2, 3, 4, 5, channels_last=True), M(2, 3, 4, 5)), {}),
        "where": (torch.where, (M(3, 4, dtype=torch.bool), M(3, 4), M(4).expand(3, 4)), {}),
        "relu": (torch.relu, (M(2, 3, 4, 5, channels_last=True),), {}),
        "softmax": (torch.softmax, (M(3, 4), -1), {}),
        "linear": (F.linear, (M(5, 16), M(8, 16), M(8)), {}),
        "matmul": (torch.matmul, (M(2, 3, 4), M(4, 5)), {}),
        "sum_dim": (torch.sum, (M(3, 4, 5), 1), {"keepdim": True}),
        "mean": (torch.mean, (M(3, 4),), {}),
        "cat": (torch.cat, ([M(3, 4), M(2, 4)],), {}),
        "index_select": (torch.index_select, (M(5, 4), 0, _meta(3, dtype=torch.int64)), {}),
        "conv2d": (F.conv2d, (M(1, 3, 8, 8), M(4, 3, 3, 3)), {"padding": 1}),
        "layer_norm": (F.layer_norm, (M(2, 5, 8), (8,)), {}),
        "embedding": (F.embedding, (_meta(2, 3, dtype=torch.int64), M(10, 4)), {}),
        "clamp": (torch.clamp, (M(3, 4),), {"min": 0.0}),
        "pow": (torch.pow, (M(3, 4), 2), {}),
        "gt": (torch.gt, (M(3, 4), 0), {}),
        "gelu": (F.gelu, (M(3, 4),), {}),
        "max_pool2d": (F.max_pool2d, (M(1, 2, 8, 8), 2), {}),
        "masked_fill": (torch.masked_fill, (M(3, 4), _meta(3, 4, dtype=torch.bool), 0.5), {}),
        # cdynamo._aten_shapes (no C++ Meta kernel; torch's Python one imports sympy)
        "conv2d_stride_dilation": (F.conv2d, (M(2, 4, 11, 9), M(6, 2, 3, 2)), {"stride": (2, 1), "padding": (1, 0),
                                                                                 "dilation": (2, 3), "groups": 2}),
        "conv2d_channels_last": (F.conv2d, (M(1, 3, 8, 8, channels_last=True), M(4, 3, 3, 3), M(4)), {}),
        "conv1d": (F.conv1d, (M(2, 3, 10), M(5, 3, 4)), {"stride": 3}),
        "conv3d": (F.conv3d, (M(1, 2, 5, 6, 7), M(3, 2, 2, 3, 1)), {"padding": 1}),
        "conv_transpose2d": (F.conv_transpose2d, (M(1, 4, 5, 5), M(4, 3, 3, 3)), {"stride": 2, "padding": 1,
                                                                                   "output_padding": 1}),
        "conv_transpose1d_groups": (F.conv_transpose1d, (M(2, 4, 7), M(4, 3, 2)), {"groups": 2, "dilation": 2}),
        "conv_zero_batch": (F.conv2d, (M(0, 3, 8, 8), M(4, 3, 3, 3)), {}),
        "conv_1x1_transposed_strides": (F.conv2d, (M(4, 3, 6, 6).transpose(2, 3), M(5, 3, 1, 1)), {}),
        "batch_norm_eval": (F.batch_norm, (M(2, 3, 4, 4), M(3), M(3), M(3), M(3), False), {}),
        "batch_norm_train": (F.batch_norm, (M(2, 3, 4, 4), M(3), M(3), M(3), M(3), True), {}),
        "batch_norm_train_no_stats": (F.batch_norm, (M(4, 3, 5), None, None), {"training": True}),
        "batch_norm_channels_last": (F.batch_norm, (M(2, 3, 4, 4, channels_last=True), M(3), M(3)), {}),
        "batch_norm_half": (F.batch_norm, (M(2, 3, 4, dtype=torch.float16), M(3), M(3), M(3), M(3), True), {}),
        "native_batch_norm": (torch.ops.aten.native_batch_norm.default,
                              (M(2, 3, 4, 4), M(3), M(3), M(3), M(3), True, 0.1, 1e-5), {}),
        "native_batch_norm_eval": (torch.ops.aten.native_batch_norm.default,
                                   (M(2, 3, 4, 4), None, None, M(3), M(3), False, 0.1, 1e-5), {}),
        "layer_norm_2d": (F.layer_norm, (M(2, 5, 4, 8), (4, 8), M(4, 8), M(4, 8)), {}),
        "native_layer_norm": (torch.ops.aten.native_layer_norm.default, (M(2, 5, 8), [8], M(8), M(8), 1e-5), {}),
        "group_norm": (F.group_norm, (M(2, 4, 3, 3), 2, M(4), M(4)), {}),
        "instance_norm": (F.instance_norm, (M(2, 3, 5, 5),), {}),
        "var_mean_dim": (torch.var_mean, (M(3, 4, 5), [0, 2]), {"keepdim": True}),
        "var_mean_all": (torch.var_mean, (M(3, 4),), {}),
        "var_mean_negative": (torch.var_mean, (M(3, 4, 5), -1), {"correction": 0}),
        "var_mean_half": (torch.var_mean, (M(3, 4, dtype=torch.float16), 1), {}),
        "adaptive_avg_pool2d": (F.adaptive_avg_pool2d, (M(2, 3, 7, 9), (2, 3)), {}),
        "adaptive_avg_pool2d_3d": (F.adaptive_avg_pool2d, (M(3, 7, 9), 4), {}),
        "adaptive_avg_pool2d_channels_last": (F.adaptive_avg_pool2d, (M(2, 3, 7, 9, channels_last=True), 2), {}),
        "adaptive_avg_pool2d_c1": (F.adaptive_avg_pool2d, (M(2, 1, 7, 9, channels_last=True), 2), {}),
        "adaptive_avg_pool2d_strided": (F.adaptive_avg_pool2d, (M(2, 6, 7, 9)[:, ::2], 2), {}),
        "adaptive_avg_pool1d": (F.adaptive_avg_pool1d, (M(2, 4, 9), 3), {}),
        "adaptive_avg_pool2d_overlapping_order": (F.adaptive_avg_pool2d, (M(120).as_strided((2, 3, 4, 5), (60, 1, 10, 2)),
                                                                          2), {}),
        "adaptive_avg_pool2d_ones": (F.adaptive_avg_pool2d, (M(2, 1, 1, 1), 2), {}),
    }


def _metadata(r):
    import torch
    if isinstance(r, torch.Tensor):
        return (tuple(r.shape), r.stride(), r.dtype, r.device.type, r.storage_offset())
    return tuple(_metadata(x) for x in r)


@pytest.mark.parametrize("name", list(_cases()))
def test_aten_meta_mode_gives_torchs_metadata(name):
    # Shape propagation under cdynamo._aten_meta's mode (ATen's C++ Meta / composite kernels, pointwise ops on
    # zeros) gives the sizes, strides, dtype and offset torch's own meta dispatch gives (its Python kernels).
    from cdynamo import _aten_meta
    fn, args, kwargs = _cases()[name]
    assert _metadata(_aten_meta.run(fn, args, kwargs)) == _metadata(fn(*args, **kwargs))


def test_aten_meta_mode_errors_as_before():
    # A shape error raises what torch's own meta dispatch raises.
    import torch
    from cdynamo import _aten_meta
    with pytest.raises(RuntimeError) as ours:
        _aten_meta.run(torch.mm, (_meta(3, 4), _meta(5, 6)), {})
    with pytest.raises(RuntimeError) as theirs:
        torch.mm(_meta(3, 4), _meta(5, 6))
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("case", ["channels", "kernel", "output_too_small", "batch_norm_eval_no_stats",
                                  "var_mean_dim"])
def test_aten_shapes_errors_as_before(case):
    # An argument torch's own meta kernel rejects: cdynamo._aten_shapes gives way, torch's kernel raises its error.
    import torch
    import torch.nn.functional as F
    from cdynamo import _aten_meta
    M = _meta
    fn, args, kwargs = {
        "channels": (F.conv2d, (M(1, 3, 8, 8), M(4, 2, 3, 3)), {}),
        "kernel": (F.conv2d, (M(1, 3, 2, 2), M(4, 3, 3, 3)), {}),
        "output_too_small": (torch.ops.aten.convolution.default,
                             (M(1, 4, 1, 1), M(4, 3, 1, 1), None, [1, 1], [2, 2], [1, 1], True, [0, 0], 1), {}),
        "batch_norm_eval_no_stats": (torch.ops.aten.native_batch_norm.default,
                                     (M(2, 3, 4), None, None, None, None, False, 0.1, 1e-5), {}),
        "var_mean_dim": (torch.var_mean, (M(3, 4), 2), {}),
    }[case]
    with pytest.raises(Exception) as theirs:
        fn(*args, **kwargs)
    with pytest.raises(type(theirs.value)) as ours:
        _aten_meta.run(fn, args, kwargs)
    assert str(ours.value) == str(theirs.value)


def test_aten_shapes_take_their_ops():
    # The ops cdynamo._aten_shapes owns are dispatched to it (kind 4), and it computes their results itself.
    import torch
    import torch.nn.functional as F
    from cdynamo import _aten_meta, _aten_shapes
    for op in _aten_shapes.SHAPES:
        assert _aten_meta._kind_of(op) == 4, op
    assert _aten_shapes.convolution(_meta(1, 3, 8, 8), _meta(4, 3, 3, 3), None, [1], [1], [1], False, [0], 1).shape \
        == (1, 4, 8, 8)
    assert _aten_shapes.convolution(_meta(1, 3, 8, 8), _meta(4, 2, 3, 3), None, [1], [1], [1], False, [0], 1) \
        is NotImplemented
    assert _aten_shapes.var_mean(_meta(3, 4), [1], keepdim=True)[0].shape == (3, 1)


def test_inductor_inference_graph_uses_inductors_caches(cdynamo_reset, tmp_path, monkeypatch):
    # A static-shape inference graph reaches inductor's FX graph cache (a miss or a hit, never a bypass), so a
    # second process can find it.
    import torch
    import cdynamo
    from torch._dynamo.utils import counters
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    counters.clear()
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    x = torch.randn(4, 8)
    with torch.no_grad():
        got = cdynamo.optimize("inductor")(model)(x)
        want = model(x)
    assert torch.allclose(got, want)
    fx = counters["inductor"]
    assert fx["fxgraph_cache_bypass"] == 0
    assert fx["fxgraph_cache_miss"] + fx["fxgraph_cache_hit"] >= 1
    # inductor's CPU vector-ISA probe ran in cdynamo's thread (backends/_inductor_prefetch.py), done before compile_fx
    from cdynamo.backends import _inductor_prefetch
    from torch._inductor import cpu_vec_isa
    assert _inductor_prefetch._thread is not None and not _inductor_prefetch._thread.is_alive()
    assert cpu_vec_isa.valid_vec_isa_list.cache_info().currsize == 1


def test_inductor_training_graph_uses_inductors_caches(cdynamo_reset, tmp_path, monkeypatch):
    # A static-shape training graph (parameters that require grad, grad mode on) reaches AOTAutograd's cache and
    # inductor's FX graph cache too (a miss or a hit, never a bypass); outputs and gradients equal eager's.
    import copy
    import torch
    import cdynamo
    from torch._dynamo.utils import counters
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    counters.clear()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    ref = copy.deepcopy(model)
    x = torch.randn(4, 8)
    got = cdynamo.optimize("inductor")(model)(x)
    want = ref(x)
    assert torch.allclose(got, want, atol=1e-6)
    got.sum().backward()
    want.sum().backward()
    assert all(torch.allclose(a.grad, b.grad, atol=1e-6) for a, b in zip(model.parameters(), ref.parameters()))
    aot, fx = counters["aot_autograd"], counters["inductor"]
    assert aot["autograd_cache_bypass"] == 0 and fx["fxgraph_cache_bypass"] == 0
    assert aot["autograd_cache_miss"] + aot["autograd_cache_hit"] == 1
    assert fx["fxgraph_cache_miss"] + fx["fxgraph_cache_hit"] == 2  # the forward and the backward graph
