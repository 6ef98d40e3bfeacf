# test_regions.py — owns the regional-compilation tests (issue 33): repeated module calls compiled once, results and
# gradients equal eager and torch._dynamo, a differing layer its own region, the policy switch, explain and logs.
import copy
import io
import logging
import warnings

import pytest
import torch
import torch._dynamo

import cdynamo
from cdynamo import _logging, config, utils
from cdynamo.testing import CompileCounterWithBackend

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


class Block(torch.nn.Module):
    def __init__(self, d, eps=1e-5, p=0.0):
        super().__init__()
        self.fc1 = torch.nn.Linear(d, 2 * d)
        self.fc2 = torch.nn.Linear(2 * d, d)
        self.norm = torch.nn.LayerNorm(d, eps=eps)
        self.p = p
        self.act = torch.nn.functional.gelu

    def forward(self, x):
        h = self.act(self.fc1(self.norm(x)))
        h = torch.nn.functional.dropout(h, self.p, self.training)
        return x + self.fc2(h)


class Stack(torch.nn.Module):
    def __init__(self, d=16, n=4, blocks=None):
        super().__init__()
        self.inp = torch.nn.Linear(8, d)
        self.layers = torch.nn.ModuleList(blocks if blocks is not None else [Block(d) for _ in range(n)])
        self.out = torch.nn.Linear(d, 4)

    def forward(self, x):
        h = self.inp(x).relu()
        for layer in self.layers:
            h = layer(h)
        return self.out(h).sum(-1)


def _model(**kw):
    torch.manual_seed(0)
    return Stack(**kw)


def _x(seed=0, batch=3, seq=5):
    return torch.randn(batch, seq, 8, generator=torch.Generator().manual_seed(seed))


def _stats():
    return dict(utils.counters["stats"])


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _train_step(model, fn, x):
    model.zero_grad(set_to_none=True)
    out = fn(x)
    out.sum().backward()
    return out.detach(), _grads(model)


def test_one_region_for_n_identical_layers():
    model = _model(n=4)
    cnt = CompileCounterWithBackend("eager")
    with config.patch(compile_regions=True):
        got = cdynamo.optimize(cnt)(model)(_x())
    # before the layers, one region for the four layers, after them: three backend compiles, not one
    assert cnt.frame_count == 3
    layer_graphs = [g for g in cnt.graphs if sum(n.op == "call_function" for n in g.graph.nodes) > 5]
    assert len(layer_graphs) == 1
    marks = [n.meta.get("tensor_dict", {}).get("_dynamo_static_input_type")
             for n in layer_graphs[0].graph.nodes if n.op == "placeholder"]
    assert marks.count("unguarded") == 6 and len(marks) == 7  # the layer's parameters (static), its input
    assert utils.counters["stats"]["region_segments"] >= 6
    ref = model(_x())
    torch.testing.assert_close(got, ref)
    torch._dynamo.reset()
    dyn = torch.compile(model, backend="eager")(_x())
    torch.testing.assert_close(got, dyn)


def test_off_switch_compiles_whole_graph():
    model = _model(n=4)
    cnt = CompileCounterWithBackend("eager")
    with config.patch(compile_regions=False):
        got = cdynamo.optimize(cnt)(model)(_x())
    assert cnt.frame_count == 1
    torch.testing.assert_close(got, model(_x()))


def test_default_policy_leaves_other_backends_whole():
    cnt = CompileCounterWithBackend("eager")
    assert config.compile_regions is None
    cdynamo.optimize(cnt)(_model(n=4))(_x())
    assert cnt.frame_count == 1


@pytest.mark.parametrize("layers,compiles", [(2, 1), (3, 3)])
def test_two_equal_layers_are_compiled_whole_by_default(layers, compiles):
    # Three compiles (before, one layer, after) cost more than one of a graph with two layers: regions start at 3
    # equal calls by default (config.regions_min_calls).
    cnt = CompileCounterWithBackend("eager")
    assert config.regions_min_calls == 3
    with config.patch(compile_regions=True):
        cdynamo.optimize(cnt)(_model(n=layers))(_x())
    assert cnt.frame_count == compiles


def test_min_calls():
    cnt = CompileCounterWithBackend("eager")
    with config.patch(compile_regions=True, regions_min_calls=5):
        cdynamo.optimize(cnt)(_model(n=4))(_x())
    assert cnt.frame_count == 1
    with pytest.raises(ValueError):
        config.regions_min_calls = 1
    with pytest.raises(TypeError):
        config.compile_regions = "yes"


def _eager_by_region():
    cnt = CompileCounterWithBackend("eager")
    cnt._cdynamo_regions = True  # as the inductor backend: by region under the automatic policy (compile_regions None)
    return cnt


def _layer_cost(d, batch, seq):
    """The automatic policy's estimate for one Block, in compiled-segment calls' worth (regions_min_work's unit)."""
    from cdynamo import _region_work, _regions, _split
    seen = {}

    def backend(gm, ex):
        nodes = _split.compute_nodes(gm)
        values = _regions._fake_values(gm, ex)
        a, b, *_ = _regions.find_calls(nodes, 3)[0]
        seen["cost"] = _region_work.layer_cost(nodes[a:b], values)
        return gm.forward

    cdynamo.optimize(backend)(_model(d=d, n=3))(_x(batch=batch, seq=seq))
    cdynamo.reset()
    seconds, dev, grad = seen["cost"]
    return seconds / _region_work.segment_call_seconds(dev, grad)


@pytest.mark.parametrize("n,work,segments,cls", [
    (6, 0.5, 8, "Block"),      # a layer holds twice the work asked: one region per layer
    (6, 1.5, 5, "Block (2 layers)"),   # two layers make a region: 3 regions of 2 (+ before and after)
    (9, 2.5, 5, "Block (3 layers)"),   # three: 3 regions of 3
    (6, 2.5, 0, None),         # three, but 6 layers make only 2 such regions (< regions_min_calls): whole graph
    (6, 7.0, 0, None),         # more work than all layers hold: whole graph
])
def test_automatic_policy_groups_layers_by_work(n, work, segments, cls):
    # The automatic policy (compile_regions None, a backend that asks for regions) cuts only where a region's
    # estimated work is regions_min_work segment calls' worth: small layers are grouped k at a time (k dividing the
    # number of layers), or the graph compiled whole. Results equal eager and torch._dynamo.
    cost = _layer_cost(16, 3, 5)
    cnt = _eager_by_region()
    model, x = _model(n=n), _x(1)
    before = _stats()
    stream = io.StringIO()
    _logging.enable("regions", stream=stream)
    try:
        with config.patch(regions_min_work=work * cost):
            got = cdynamo.optimize(cnt)(model)(x)
    finally:
        _logging.disable("regions")
        _logging.set_stream(None)
    after = _stats()
    assert after.get("region_segments", 0) - before.get("region_segments", 0) == segments
    assert cnt.frame_count == (1 if cls is None else 3)
    text = stream.getvalue()
    assert (f"region {cls}: {segments - 2} calls" in text) if cls else ("layers too small to pay for a cut each" in text)
    ref = torch.compile(model, backend="eager")(x)
    torch.testing.assert_close(got, model(x))
    torch.testing.assert_close(got, ref)


def test_automatic_policy_compiles_tiny_layers_whole_and_big_layers_by_region():
    # With the default regions_min_work: 4 layers of width 16 over 15 tokens are far too small to pay for a cut each
    # (the graph compiles whole); width 128 over 512 tokens pays (one region per layer).
    assert config.compile_regions is None and config.regions_min_work == 10.0
    cnt = _eager_by_region()
    cdynamo.optimize(cnt)(_model(n=4))(_x())
    assert cnt.frame_count == 1
    cnt = _eager_by_region()
    model, x = _model(d=128, n=4), _x(batch=8, seq=64)
    got = cdynamo.optimize(cnt)(model)(x)
    assert cnt.frame_count == 3
    torch.testing.assert_close(got, model(x))
    with pytest.raises(ValueError):
        config.regions_min_work = -1.0
    with pytest.raises(TypeError):
        config.regions_min_work = "10"


def test_automatic_policy_grouped_regions_train_like_eager():
    # Grouped regions (2 layers each) in a training step: gradients equal eager's.
    cost = _layer_cost(16, 3, 5)
    model = _model(n=6)
    before = _stats()
    with config.patch(regions_min_work=1.5 * cost):  # cost is measured with gradients flowing (backward counted)
        got, got_g = _train_step(model, cdynamo.optimize(_eager_by_region())(model), _x())
    assert _stats().get("region_segments", 0) - before.get("region_segments", 0) == 5
    ref, ref_g = _train_step(model, model, _x())
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(got_g, ref_g)


def test_automatic_policy_counts_a_training_segment_as_several_calls():
    # A segment that gradients flow through is an autograd node (aot_autograd's forward and backward wrappers): it
    # costs more than an inference call, more than the 3x work a backward adds. At one regions_min_work the same
    # layers get a region each without gradients and 2 a region with them; results and gradients equal eager.
    with torch.no_grad():
        infer = _layer_cost(16, 3, 5)
    train = _layer_cost(16, 3, 5)
    assert train < infer
    work = (train + infer) / 2
    model, x = _model(n=6), _x()
    with config.patch(regions_min_work=work):
        before = _stats().get("region_segments", 0)
        with torch.no_grad():
            got = cdynamo.optimize(_eager_by_region())(model)(x)
        assert _stats()["region_segments"] - before == 8  # 6 layers, one a region (+ before and after)
        torch.testing.assert_close(got, model(x))
        cdynamo.reset()
        before = _stats()["region_segments"]
        got, got_g = _train_step(model, cdynamo.optimize(_eager_by_region())(model), x)
        assert _stats()["region_segments"] - before == 5  # 3 regions of 2 layers
    ref, ref_g = _train_step(model, model, x)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(got_g, ref_g)


def _bench_gpt2(layers=12):
    """HF GPT-2 as benchmarks/bench_regions.py builds it (width 64, 4 heads, vocab 512), dropout off."""
    transformers = pytest.importorskip("transformers")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.GPT2Config(vocab_size=512, n_embd=64, n_layer=layers, n_head=4, n_positions=256)
        model = transformers.GPT2LMHeadModel(cfg)
    model.train()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return model, torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(0))


@pytest.mark.full_tier
def test_automatic_policy_groups_small_gpt2_layers_in_training_only():
    # bench_regions' GPT-2 (12 layers of width 64, 2x32 tokens, one CPU thread ~0.6 ms a layer trained): one region
    # per layer for inference, 2 layers a region for a training step (14 segments of forward and backward wrappers
    # cost ~10% of the step; 8 segments). Logits and gradients equal eager.
    model, ids = _bench_gpt2()
    before = _stats().get("region_segments", 0)
    with torch.no_grad():
        got = cdynamo.optimize(_eager_by_region())(model)(input_ids=ids).logits
        ref = model(input_ids=ids).logits
    assert _stats()["region_segments"] - before == 14
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    cdynamo.reset()
    fn = cdynamo.optimize(_eager_by_region())(model)
    before = _stats()["region_segments"]
    grads = []
    for f in (fn, model):
        model.zero_grad(set_to_none=True)
        f(input_ids=ids).logits.float().pow(2).mean().backward()
        grads.append(_grads_of(model))
    assert _stats()["region_segments"] - before == 8
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 100
    torch.testing.assert_close(grads[0], grads[1], atol=1e-5, rtol=1e-4)


class CastBlock(Block):
    def forward(self, x):
        return super().forward(x.to(self.fc1.weight.dtype)).to(x.dtype)


@pytest.mark.parametrize("differ", ["eps", "dtype", "hook", "target"])
def test_layer_that_differs_is_a_second_region(differ):
    blocks = [CastBlock(16) for _ in range(4)]
    if differ == "eps":
        blocks[2] = CastBlock(16, eps=1e-3)  # a constant baked into the graph
    elif differ == "dtype":
        blocks[2].double()  # its parameters (inputs of its segment) have another dtype
    elif differ == "hook":
        blocks[2].register_forward_hook(lambda mod, args, out: out * 2)
    else:
        blocks[2].act = torch.nn.functional.silu  # same graph but one target
    torch.manual_seed(0)
    model = Stack(blocks=blocks)
    cnt = CompileCounterWithBackend("eager")
    with config.patch(compile_regions=True):
        got = cdynamo.optimize(cnt)(model)(_x())
    assert cnt.frame_count == 4  # before, layers 0/1/3, layer 2, after
    torch.testing.assert_close(got, model(_x()))


class ScaleBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16))
        self.b = torch.nn.Parameter(torch.randn(16))

    def forward(self, x):
        return x * self.w + self.b


class Fan(torch.nn.Module):
    """Every layer reads the same input: layers whose parameters differ only in metadata have equal graphs."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([ScaleBlock() for _ in range(4)])

    def forward(self, x):
        outs = []
        for layer in self.layers:
            outs.append(layer(x))
        return torch.stack([o.float() for o in outs]).sum(0)


@pytest.mark.parametrize("differ", ["dtype", "requires_grad"])
def test_input_metadata_splits_regions(differ):
    torch.manual_seed(0)
    model = Fan()
    for layer in model.layers[2:]:
        layer.double() if differ == "dtype" else layer.requires_grad_(False)
    cnt = CompileCounterWithBackend("aot_eager")
    x = torch.randn(3, 16)
    with config.patch(compile_regions=True, regions_min_calls=2):
        got, got_g = _train_step(model, cdynamo.optimize(cnt)(model), x)
    ref, ref_g = _train_step(model, model, x)
    assert cnt.frame_count == 3  # layers 0-1, layers 2-3, the stack and sum after them
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(got_g, ref_g)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_training_gradients_equal_eager(backend):
    model = _model(n=4)
    cnt = CompileCounterWithBackend(backend)
    with config.patch(compile_regions=True):
        fn = cdynamo.optimize(cnt)(model)
        for seed in range(2):
            got, got_g = _train_step(model, fn, _x(seed))
            ref, ref_g = _train_step(model, model, _x(seed))
            torch.testing.assert_close(got, ref)
            torch.testing.assert_close(got_g, ref_g)
    assert cnt.frame_count == 3
    assert len(ref_g) == len(list(model.parameters()))


def test_dropout_layers_draw_their_own_numbers():
    # eager backend: segments run their ops in graph order, so every draw happens as in eager
    model = _model(n=4, blocks=[Block(16, p=0.5) for _ in range(4)])
    model.train()
    cnt = CompileCounterWithBackend("eager")
    with config.patch(compile_regions=True):
        fn = cdynamo.optimize(cnt)(model)
        torch.manual_seed(5)
        got = fn(_x())
    torch.manual_seed(5)
    ref = model(_x())
    torch.testing.assert_close(got, ref)
    assert cnt.frame_count == 3


def test_dropout_aot_eager_same_numbers_as_whole_graph():
    model = _model(n=4, blocks=[Block(16, p=0.5) for _ in range(4)])
    model.train()
    outs = []
    for regions in (True, False):
        cdynamo.reset()
        with config.patch(compile_regions=regions):
            fn = cdynamo.optimize("aot_eager")(model)
            torch.manual_seed(7)
            outs.append(fn(_x()))
    torch.testing.assert_close(outs[0], outs[1])
    torch.manual_seed(7)
    torch.testing.assert_close(outs[0], model(_x()))


def test_dynamic_shapes():
    model = _model(n=4)
    cnt = CompileCounterWithBackend("aot_eager")
    before = _stats()
    with config.patch(compile_regions=True):
        fn = cdynamo.optimize(cnt, dynamic=True)(model)
        for seq in (5, 7, 9):
            got, got_g = _train_step(model, fn, _x(seq, seq=seq))
            ref, ref_g = _train_step(model, model, _x(seq, seq=seq))
            torch.testing.assert_close(got, ref)
            torch.testing.assert_close(got_g, ref_g)
    assert cnt.frame_count == 3  # one compile per distinct segment, for every length
    # all four layers share one segment (a size specialised to a constant keys as that constant)
    assert _stats()["region_reuses"] - before.get("region_reuses", 0) == 3


class NoGradInsideBlock(Block):
    def forward(self, x):
        with torch.no_grad():
            scale = self.norm.weight.abs().mean() + 1
        return super().forward(x) / scale


class NoGradAroundStack(Stack):
    def forward(self, x):
        h = self.inp(x).relu()
        with torch.no_grad():
            for layer in self.layers:
                h = layer(h)
        return self.out(h).sum(-1)


def test_grad_mode_switch_inside_layers():
    torch.manual_seed(0)
    model = Stack(blocks=[NoGradInsideBlock(16) for _ in range(4)])
    cnt = CompileCounterWithBackend("aot_eager")
    with config.patch(compile_regions=True):
        got, got_g = _train_step(model, cdynamo.optimize(cnt)(model), _x())
    ref, ref_g = _train_step(model, model, _x())
    assert cnt.frame_count == 3
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(got_g, ref_g)


def test_grad_mode_differs_at_layer_edges_compiles_whole():
    torch.manual_seed(0)
    model = NoGradAroundStack()
    cnt = CompileCounterWithBackend("aot_eager")
    with config.patch(compile_regions=True):
        got, got_g = _train_step(model, cdynamo.optimize(cnt)(model), _x())
    ref, ref_g = _train_step(model, model, _x())
    assert cnt.frame_count == 1  # a segment would be compiled under the grad mode of the graph's start
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(got_g, ref_g)


class InplaceBlock(Block):
    def forward(self, x):
        x.mul_(0.5)  # writes its input: the graph is compiled whole
        return super().forward(x)


def test_segment_writing_an_input_compiles_whole():
    torch.manual_seed(0)
    model = Stack(blocks=[InplaceBlock(16) for _ in range(4)])
    cnt = CompileCounterWithBackend("eager")
    with config.patch(compile_regions=True), torch.no_grad():
        got = cdynamo.optimize(cnt)(model)(_x())
        ref = model(_x())
    assert cnt.frame_count == 1
    torch.testing.assert_close(got, ref)


def test_view_outputs_and_aliasing_across_segments():
    class ViewBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 16)

        def forward(self, x):
            y = self.fc(x).view(3, 5, 4, 4)
            return y.view(3, 5, 16).transpose(0, 1).transpose(0, 1)  # a view crosses into the next layer

    torch.manual_seed(0)
    model = Stack(blocks=[ViewBlock() for _ in range(3)])
    cnt = CompileCounterWithBackend("aot_eager")
    with config.patch(compile_regions=True):
        fn = cdynamo.optimize(cnt)(model)
        got, got_g = _train_step(model, fn, _x())
    ref, ref_g = _train_step(model, model, _x())
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(got_g, ref_g)
    assert cnt.frame_count == 3


def test_explain_and_log_show_regions():
    model = _model(n=4)
    with config.patch(compile_regions=True):  # one region per layer (the automatic policy: test_explain_regions.py)
        out = cdynamo.explain(model)(_x())
    assert out.regions == [[{"cls": "Block", "paths": [f"L['self'].layers.{i}" for i in range(4)], "calls": 4}]]
    assert "Block x4" in str(out)
    stream = io.StringIO()
    _logging.enable("regions", stream=stream)
    try:
        with config.patch(compile_regions=True):
            cdynamo.optimize("eager")(model)(_x())
    finally:
        _logging.disable("regions")
        _logging.set_stream(None)
    text = stream.getvalue()
    assert "region Block: 4 calls" in text and "compiled once" in text


# ---- transformers models ----

def _hf(name):
    pytest.importorskip("transformers")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    from hf_zoo_models import MODELS
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MODELS[name]()


def _main(out):
    return out["last_hidden_state"] if "last_hidden_state" in out else out["logits"]


@pytest.mark.full_tier
@pytest.mark.parametrize("name", ["llama", "gpt2", "bert"])
def test_hf_regions_equal_eager_and_dynamo(name):
    model, make_inputs = _hf(name)
    model.eval()
    cnt = CompileCounterWithBackend("aot_eager")
    before = _stats().get("region_graphs", 0)
    with config.patch(compile_regions=True, regions_min_calls=2), torch.no_grad():
        fn = cdynamo.optimize(cnt)(model)
        got = [_main(fn(**make_inputs(s))) for s in range(2)]
        ref = [_main(model(**make_inputs(s))) for s in range(2)]
        dyn_fn = torch.compile(copy.deepcopy(model), backend="aot_eager")
        dyn = [_main(dyn_fn(**make_inputs(s))) for s in range(2)]
    assert _stats()["region_graphs"] == before + 1
    assert cnt.frame_count == 3  # before the layers, one layer, after
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, dyn, atol=1e-5, rtol=1e-5)


@pytest.mark.full_tier
@pytest.mark.parametrize("name", ["llama", "gpt2", "bert"])
def test_hf_regions_training_gradients_equal_eager(name):
    model, make_inputs = _hf(name)
    model.train()
    for m in model.modules():  # dropout off: aot_eager's random numbers are not eager's
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    cnt = CompileCounterWithBackend("aot_eager")
    with config.patch(compile_regions=True, regions_min_calls=2):
        fn = cdynamo.optimize(cnt)(model)
        model.zero_grad(set_to_none=True)
        _main(fn(**make_inputs(0))).float().pow(2).mean().backward()
        got = _grads_of(model)
        model.zero_grad(set_to_none=True)
        _main(model(**make_inputs(0))).float().pow(2).mean().backward()
        ref = _grads_of(model)
    assert cnt.frame_count == 3
    assert got.keys() == ref.keys() and len(got) > 10
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-4)


def _grads_of(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_inductor_default_policy_compiles_layers_once(mode, monkeypatch):
    # reduce-overhead: compile()'s inductor-with-options backend takes the same path when regions are asked for
    # (CUDA graphs: GPU only); by default it compiles whole graphs (test_reduce_overhead_compiles_whole_by_default).
    # Width 128 over 512 tokens: layers big enough for the automatic policy to cut each (regions_min_work).
    if mode is not None:
        monkeypatch.setattr(cdynamo.config, "compile_regions", True)
    model = _model(d=128, n=4)
    before = _stats()
    fn = cdynamo.optimize("inductor")(model) if mode is None else cdynamo.compile(model, mode=mode)
    got, got_g = _train_step(model, fn, _x(batch=8, seq=64))
    ref, ref_g = _train_step(model, model, _x(batch=8, seq=64))
    after = _stats()
    assert after.get("region_graphs", 0) == before.get("region_graphs", 0) + 1
    assert after["region_compiles"] - before.get("region_compiles", 0) == 3
    assert after["region_reuses"] - before.get("region_reuses", 0) == 3
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_g, ref_g, atol=1e-5, rtol=1e-4)


def test_reduce_overhead_compiles_whole_by_default():
    model = _model(n=4)
    before = _stats()
    got, got_g = _train_step(model, cdynamo.compile(model, mode="reduce-overhead"), _x())
    ref, ref_g = _train_step(model, model, _x())
    assert _stats().get("region_graphs", 0) == before.get("region_graphs", 0)  # CUDA-graph replays: one graph
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_g, ref_g, atol=1e-5, rtol=1e-4)


def test_inductor_dropout_layers_do_not_share_masks():
    class Drop(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.dropout(x, 0.5, True) + 0.0

    class Outs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([Drop() for _ in range(4)])

        def forward(self, x):
            return [layer(x) for layer in self.layers]

    before = _stats().get("region_graphs", 0)
    with config.patch(regions_min_work=0.0):  # one region per layer, however small (the automatic policy's switch)
        outs = cdynamo.optimize("inductor")(Outs())(torch.ones(4096))
    assert _stats()["region_graphs"] == before + 1
    masks = [o != 0 for o in outs]
    for i in range(4):
        assert 0.4 < masks[i].float().mean() < 0.6
        for j in range(i):
            assert not torch.equal(masks[i], masks[j])
