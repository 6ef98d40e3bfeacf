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


# cdynamo's own modules that a plain eager compile never needs: explain/export, regions, DDP splitting.
_LAZY_OWN = ("cdynamo._explain", "cdynamo._export", "cdynamo._regions", "cdynamo._region_work", "cdynamo._split",
             "cdynamo._ddp")


def test_import_and_eager_compile_leave_cdynamos_optional_modules_unimported():
    out = _run(f"LAZY = {_LAZY_OWN!r}\n", _THREE_OPS, """
        at_import = sorted(m for m in LAZY if m in sys.modules)
        cdynamo.optimize("eager")(fn)(x, y)
        at_compile = sorted(m for m in LAZY if m in sys.modules)
        names_work = cdynamo.explain is cdynamo._explain.explain and cdynamo.ExportResult.__name__ == "ExportResult"
        print(json.dumps({"import": at_import, "compile": at_compile, "names": names_work,
                          "explain": "cdynamo._explain" in sys.modules}))
    """)
    assert out["import"] == [] and out["compile"] == []
    assert out["names"] and out["explain"]  # the public names still resolve, importing their module then


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


_ATTENTION = """
    import torch.nn.functional as F
    torch.manual_seed(0)
    class Attn(torch.nn.Module):  # the ops of an HF attention block: position ids, causal and padding masks, sdpa
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(50, 16)
            self.pos = torch.nn.Embedding(16, 16)
            self.qkv = torch.nn.Linear(16, 48)
            self.ln = torch.nn.LayerNorm(16)
            self.out = torch.nn.Linear(16, 50)
        def forward(self, ids, mask):
            b, n = ids.shape
            pos = torch.arange(n, device=ids.device)
            h = self.ln(self.emb(ids) + self.pos(pos)[None])
            q, k, v = self.qkv(h).view(b, n, 3, 2, 8).permute(2, 0, 3, 1, 4).unbind(0)
            causal = torch.ones(n, n, dtype=torch.bool, device=ids.device).tril()
            keep = causal[None, None] & mask[:, None, None, :].bool()
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            s = (q @ k.transpose(-1, -2)) * 8 ** -0.5
            s = torch.where(keep, s, torch.full_like(s, torch.finfo(s.dtype).min))
            a = a + torch.softmax(s, -1) @ v
            return self.out(a.transpose(1, 2).reshape(b, n, 16))
    ids = torch.randint(0, 50, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, 4:] = 0
"""


def test_first_attention_compile_imports_no_heavy_module():
    # arange, ones, full_like, embedding's index_select, sdpa with a boolean mask (_safe_softmax: scalar_tensor,
    # where.self_out) and softmax.int: before, these reached torch's Python meta kernels, which import sympy,
    # torch._dynamo and torch._inductor. Results equal eager's and torch._dynamo's (imported after the check).
    out = _run(_ATTENTION, """
        result = {}
        for mode in ("eval", "train"):
            m = Attn().train(mode == "train")
            with torch.no_grad():
                got = cdynamo.optimize("eager")(m)(ids, mask)
                result[mode + "_heavy"] = heavy()
                result[mode + "_equal"] = bool(torch.equal(got, m(ids, mask)))
        import torch._dynamo
        with torch.no_grad():
            m = Attn().eval()
            result["dynamo_equal"] = bool(torch.equal(cdynamo.optimize("eager")(m)(ids, mask),
                                                      torch.compile(m, backend="eager")(ids, mask)))
        print(json.dumps(result))
    """)
    assert out["eval_heavy"] == [] and out["train_heavy"] == [], out
    assert out["eval_equal"] and out["train_equal"] and out["dynamo_equal"], out


# torch's Python meta machinery (its meta kernels, references, prims and the wrappers that import torch._dynamo):
# none of it may run while cdynamo traces. native_batch_norm_helper is cdynamo._aten_shapes' own choice (layer
# norm's composite kernel calls native_batch_norm; the helper's aten calls come back to cdynamo's mode).
_PY_META_FILES = ("torch/_meta_registrations.py", "torch/_refs/", "torch/_prims/", "torch/_prims_common/wrappers.py",
                  "torch/_decomp/", "torch/_compile.py", "torch/fx/experimental/symbolic_shapes.py")
_PY_META_ALLOWED = ("native_batch_norm_helper",)


@pytest.mark.full_tier
@pytest.mark.parametrize("model", ["gpt2", "bert", "llama", "t5", "distilbert", "vit"])
def test_hf_first_eager_compile_runs_no_python_meta_kernel(model):
    # transformers' own modules import torch._dynamo and sympy (masking_utils, distributed tensor), so which modules
    # are loaded says nothing here; instead the child records every Python function of torch's meta machinery that
    # runs during cdynamo's first compile: none may (each would import those modules in a process without them).
    # Results equal eager's and torch._dynamo's.
    pytest.importorskip("transformers")
    out = _run(f"""
        import os, warnings, logging
        warnings.simplefilter("ignore")
        import vision_shim
        import transformers
        logging.getLogger("transformers").setLevel(logging.ERROR)
        from hf_zoo_models import MODELS
        torch.manual_seed(0)
        model, make_inputs = MODELS[{model!r}]()
        model.eval()
        kw = make_inputs(0)
        FILES, ALLOWED = {_PY_META_FILES!r}, {_PY_META_ALLOWED!r}
        ran = set()
        def profile(frame, event, arg):
            if event == "call":
                f = frame.f_code.co_filename.replace(os.sep, "/")
                if any(p in f for p in FILES) and frame.f_code.co_name not in ALLOWED:
                    b = frame.f_back
                    if not (b and any(p in b.f_code.co_filename.replace(os.sep, "/") for p in FILES)):
                        ran.add(f.split("torch/")[-1] + ":" + frame.f_code.co_name)
        opt = cdynamo.optimize("eager")(model)
        with torch.no_grad():
            sys.setprofile(profile)
            try:
                got = opt(**kw)
            finally:
                sys.setprofile(None)
            want = model(**kw)
            import torch._dynamo
            theirs = torch.compile(model, backend="eager")(**kw)
        first = lambda o: o[0] if isinstance(o, (tuple, list)) else next(iter(o.values()))
        print(json.dumps({{"ran": sorted(ran), "graphs": cdynamo.utils.counters["stats"]["unique_graphs"],
                          "equal": bool(torch.equal(first(got), first(want))),
                          "dynamo_equal": bool(torch.equal(first(got), first(theirs)))}}))
    """)
    assert out["ran"] == [], out
    assert out["graphs"] >= 1
    assert out["equal"] and out["dynamo_equal"], out


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
        "index_select_negative_dim": (torch.index_select, (M(5, 4, 3), -2, _meta(6, dtype=torch.int64)), {}),
        "index_select_int32_scalar_index": (torch.index_select, (M(5, 4), 1, _meta((), dtype=torch.int32)), {}),
        "index_select_transposed": (torch.index_select, (M(4, 5).t(), 0, _meta(2, dtype=torch.int64)), {}),
        "embedding_2d_ids": (F.embedding, (_meta(2, 8, dtype=torch.int64), M(10, 4)), {}),
        "embedding_expanded_ids": (F.embedding, (_meta(1, 8, dtype=torch.int64).expand(3, 8), M(10, 4)), {}),
        "where_out": (torch.where, (_meta(2, 1, 4, 1, dtype=torch.bool), M(()), M(2, 3, 4, 5)),
                      {"out": M(2, 3, 4, 5)}),
        "where_out_transposed": (torch.where, (_meta(5, 4, dtype=torch.bool), M(4, 5).t(), M(())),
                                 {"out": M(4, 5).t()}),
        # ATen composite kernels the dispatcher picks for Meta (no Meta registration): their aten calls come back
        "full_like": (torch.full_like, (M(3, 4).t(), 2.5), {}),
        "full_like_int": (torch.full_like, (M(3, 4), 7), {"dtype": torch.int64}),
        "softmax_dtype": (torch.softmax, (M(3, 4, dtype=torch.float16), 0), {"dtype": torch.float32}),
        "to_dtype": (lambda t: t.to(torch.float32), (_meta(2, 3, dtype=torch.int64).t(),), {}),
        "reshape_copy": (torch.reshape, (M(4, 1).expand(4, 6), (-1,)), {}),
        "reshape_view": (torch.reshape, (M(4, 6), (2, -1)), {}),
        "sdpa_bool_mask": (F.scaled_dot_product_attention, (M(2, 2, 5, 8), M(2, 2, 5, 8), M(2, 2, 5, 8)),
                           {"attn_mask": _meta(2, 1, 5, 5, dtype=torch.bool)}),
        "sdpa_float_mask": (F.scaled_dot_product_attention, (M(1, 2, 5, 8), M(1, 2, 6, 8), M(1, 2, 6, 4)),
                            {"attn_mask": M(1, 1, 5, 6)}),
        "sdpa_causal": (F.scaled_dot_product_attention, (M(1, 2, 5, 8), M(1, 2, 5, 8), M(1, 2, 5, 8)),
                        {"is_causal": True}),
        "safe_softmax": (torch.ops.aten._safe_softmax.default, (M(2, 3, 4), -1), {}),
        # factory ops with no tensor argument, device="meta"
        "arange": (torch.arange, (8,), {"device": "meta"}),
        "arange_start_step": (torch.arange, (2, 11, 3), {"device": "meta"}),
        "arange_float": (torch.arange, (0.5, 3.25, 0.25), {"device": "meta"}),
        "arange_dtype": (torch.arange, (5,), {"dtype": torch.float16, "device": "meta"}),
        "ones_bool": (torch.ones, (3, 4), {"dtype": torch.bool, "device": "meta"}),
        "zeros": (torch.zeros, ((2, 3, 4),), {"device": "meta"}),
        "full_int": (torch.full, ((2, 3), 4), {"device": "meta"}),
        "full_float": (torch.full, ((2, 3), -float("inf")), {"device": "meta"}),
        "full_bool": (torch.full, ((2,), True), {"device": "meta"}),
        "scalar_tensor": (torch.scalar_tensor, (0.0,), {"dtype": torch.float16, "device": "meta"}),
        # the out= form of a pointwise op with CPU kernels only (abs of an int tensor is a composite over abs.out)
        "abs_int": (torch.abs, (_meta(3, 4, dtype=torch.int64),), {}),
        "abs_out_empty": (torch.abs, (M(3, 4).t(),), {"out": M(0)}),
        "abs_out_strided": (torch.abs, (M(3, 4),), {"out": M(4, 3).t()}),
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


@pytest.mark.parametrize("name", ["where_out", "where_out_transposed", "abs_out_empty", "abs_out_strided"])
def test_out_forms_return_out(name):
    # An out= call gives back the `out` tensor itself, as torch's meta kernel does.
    from cdynamo import _aten_meta
    fn, args, kwargs = _cases()[name]
    ours, theirs = dict(kwargs), dict(kwargs)
    ours["out"], theirs["out"] = _clone_meta(kwargs["out"]), _clone_meta(kwargs["out"])
    assert _aten_meta.run(fn, args, ours) is ours["out"]
    assert fn(*args, **theirs) is theirs["out"]
    assert _metadata(ours["out"]) == _metadata(theirs["out"])


def _clone_meta(t):
    import torch
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def test_new_routes_take_their_ops():
    # The ops of the new routes are dispatched to them: composite kernels (kind 5), out= forms of pointwise ops
    # (kind 6), factories through the composite kernel torch's Python meta registration shadows.
    import torch
    from cdynamo import _aten_meta
    aten = torch.ops.aten
    for op in (aten.full_like.default, aten.softmax.int, aten._to_copy.default, aten.reshape.default):
        assert _aten_meta._kind_of(op) == 5, op
    assert _aten_meta._kind_of(aten.abs.out) == 6
    assert _aten_meta._functional_of(aten.abs.out) is aten.abs.default
    for op in (aten.arange.default, aten.ones.default, aten.scalar_tensor.default, aten.full.default):
        assert _aten_meta._kind_of(op) == 2 and _aten_meta._composite_kernel(op, torch._C.DispatchKey.CPU), op
    # never a Python kernel, a mutable op, or a CompositeExplicitAutograd view
    assert _aten_meta._composite_kernel(aten.where.self_out, torch._C.DispatchKey.Meta) is None
    assert _aten_meta._composite_kernel(aten.copy_.default, torch._C.DispatchKey.Meta) is None
    assert _aten_meta._composite_kernel(aten.detach.default, torch._C.DispatchKey.Meta) is None


@pytest.mark.parametrize("case", ["channels", "kernel", "output_too_small", "batch_norm_eval_no_stats",
                                  "var_mean_dim", "index_select_dim", "where_out_dtype", "where_not_bool",
                                  "arange_zero_step", "full_like_bad_dtype", "abs_out_dtype"])
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
        "index_select_dim": (torch.index_select, (M(3, 4), 2, _meta(2, dtype=torch.int64)), {}),
        "where_out_dtype": (torch.where, (_meta(3, dtype=torch.bool), M(3), M(3)), {"out": M(3, dtype=torch.float64)}),
        "where_not_bool": (torch.where, (M(3), M(3), M(3)), {"out": M(3)}),
        "arange_zero_step": (torch.arange, (0, 5, 0), {"device": "meta"}),
        "full_like_bad_dtype": (torch.full_like, (M(3), 1.5), {"dtype": torch.bool, "layout": torch.sparse_coo}),
        "abs_out_dtype": (torch.abs, (M(3),), {"out": _meta(3, dtype=torch.int64)}),
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


def test_first_compile_of_unary_pointwise_ops_is_one_graph():
    # In a fresh process (torch's Python meta kernels not loaded): abs's composite kernel calls abs.out, whose rule ran
    # abs again, endlessly; the RecursionError was a failed shape propagation, a graph break at every torch.abs.
    out = _run("""
        failed = []
        for name in ("abs", "neg", "sign", "sgn", "floor", "ceil", "round", "trunc", "frac", "exp", "log1p", "sqrt",
                     "sigmoid", "tanh", "sin", "reciprocal", "square", "logical_not", "bitwise_not"):
            fn = getattr(torch, name)
            for dtype in (torch.float32, torch.int64, torch.bool):
                x = (torch.arange(6) - 3).to(dtype)
                try:
                    want = fn(x)
                except RuntimeError:
                    continue  # the op does not take that dtype
                cdynamo.reset()  # one code object for every op: each compiles afresh
                try:
                    got = cdynamo.optimize("eager", nopython=True)(lambda a: fn(a) * 1)(x)
                    ok = torch.allclose(got.double(), (want * 1).double(), equal_nan=True)
                except Exception as e:  # noqa: BLE001 - reported
                    ok = False
                if not ok:
                    failed.append(f"{name} {dtype}")
        print(json.dumps({"failed": failed}))
    """)
    assert out["failed"] == []
