# test_cuda.py — owns the CUDA tests (issue 13 item 5): device guards, models on CUDA, inductor on CUDA (default and reduce-overhead) equal to eager; skipped without a GPU.
import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter, CompileCounterWithBackend

pytestmark = [pytest.mark.usefixtures("cdynamo_reset"),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _fn(x, y):
    return (x * 2 + y).relu().sum(0)


def test_cuda_tensor_never_runs_a_cpu_entry():
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(_fn)
    cpu = (torch.randn(4, 3), torch.randn(4, 3))
    torch.testing.assert_close(opt(*cpu), _fn(*cpu))
    gpu = tuple(t.cuda() for t in cpu)
    out = opt(*gpu)
    assert out.device.type == "cuda"
    torch.testing.assert_close(out, _fn(*gpu))
    assert cnt.frame_count == 2  # the CPU entry's device guard failed
    mixed = (gpu[0], cpu[1])  # eager raises for mixed devices; so must the compiled call
    with pytest.raises(RuntimeError):
        _fn(*mixed)
    with pytest.raises(RuntimeError):
        opt(*mixed)
    frames = cnt.frame_count
    out = opt(*cpu)
    assert out.device.type == "cpu" and cnt.frame_count == frames  # back to the CPU entry, no recompile
    torch.testing.assert_close(opt(*gpu), _fn(*gpu))
    assert cnt.frame_count == frames


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_cuda_device_index_is_guarded():
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(_fn)
    a = (torch.randn(4, 3, device="cuda:0"), torch.randn(4, 3, device="cuda:0"))
    b = tuple(t.to("cuda:1") for t in a)
    assert opt(*a).device == torch.device("cuda:0")
    assert opt(*b).device == torch.device("cuda:1")
    assert cnt.frame_count == 2


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.layer(x).mean(1))


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_module_on_cuda_equals_eager(backend):
    torch.manual_seed(0)
    m = Block().cuda().eval()
    x = torch.randn(2, 16, 64, device="cuda")
    cnt = CompileCounter() if backend == "eager" else None
    opt = cdynamo.optimize(cnt or backend)(m)
    with torch.no_grad():
        ref = m(x)
        for _ in range(3):
            got = opt(x)
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    if cnt is not None:
        assert cnt.frame_count == 1


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune-no-cudagraphs"])
def test_inductor_modes_on_cuda_equal_eager(mode):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).cuda()
    opt = cdynamo.compile(m, mode=mode)
    for seed in range(4):  # reduce-overhead records a CUDA graph on a later call: run past it
        x = torch.randn(16, 32, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
        with torch.no_grad():
            torch.testing.assert_close(opt(x).clone(), m(x), atol=1e-4, rtol=1e-4)


def test_training_step_on_cuda_equals_eager():
    torch.manual_seed(0)
    m = Block().cuda()
    twin = Block().cuda()
    twin.load_state_dict(m.state_dict())
    opt = cdynamo.optimize("aot_eager")(twin)
    x = torch.randn(2, 16, 64, device="cuda")
    for model in (m, opt):
        model(x).pow(2).mean().backward()
    for (name, p), q in zip(m.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-4, rtol=1e-4, msg=name)


def test_timm_model_on_cuda_equals_eager():
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    m = timm.create_model("resnet18", pretrained=False, num_classes=10).cuda().eval()
    x = torch.randn(2, 3, 64, 64, device="cuda")
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(m)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), m(x), atol=1e-4, rtol=1e-4)
    assert cnt.frame_count == 1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_dynamic_shapes_on_cuda_compile_twice_and_equal_eager(backend):
    """Automatic dynamic shapes on CUDA: the second length compiles a graph with symbolic sizes (fake CUDA tensors,
    inductor's dynamic kernels), every later length hits it."""
    def attn(x):
        b, t, d = x.shape
        s = (x @ x.transpose(1, 2)) / d ** 0.5
        return torch.softmax(s, -1) @ x[:, : t // 2 * 2].reshape(b, t, d)

    cnt = CompileCounterWithBackend(backend)
    opt = cdynamo.optimize(cnt)(attn)
    for t in (6, 8, 10, 12, 14):
        x = torch.randn(2, t, 16, device="cuda")
        torch.testing.assert_close(opt(x), attn(x), rtol=1e-4, atol=1e-4)
    assert cnt.frame_count == 2


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)
        self.norm = torch.nn.LayerNorm(64)

    def forward(self, x):
        return self.norm(self.lin(x).relu() + x)


def _kept_outputs_run(compile_model):
    """Calls a CUDA-graph compiled model 6 times keeping every output alive (a user's loop often does) and reading
    only the newest; returns whether each newest output equalled eager and whether reading the first one raises."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(*[_Block() for _ in range(4)]).cuda().eval()
    opt = compile_model(m)
    kept, equal = [], []
    with torch.no_grad():
        for _ in range(6):
            x = torch.randn(8, 64, device="cuda")
            kept.append(opt(x))
            equal.append(torch.allclose(kept[-1], m(x), atol=1e-4, rtol=1e-4))
    try:
        kept[0].sum().item()
        first = "readable"
    except RuntimeError as e:
        first = "overwritten" if "overwritten by a subsequent run" in str(e) else f"raises {e}"
    return equal, first


def test_reduce_overhead_with_kept_outputs_as_torch_compile():
    # Each compiled call starts a new CUDA-graph generation, as under torch.compile: the newest output is right,
    # and an older one kept alive is overwritten in both (reading it raises torch's error, never a stale value).
    import torch._dynamo
    mine = _kept_outputs_run(lambda m: cdynamo.compile(m, mode="reduce-overhead"))
    torch._dynamo.reset()
    theirs = _kept_outputs_run(lambda m: torch.compile(m, mode="reduce-overhead"))
    assert all(mine[0]) and all(theirs[0]), (mine, theirs)
    assert mine[1] == theirs[1], (mine, theirs)


def test_regions_under_cuda_graphs_train_like_eager():
    # Regions asked for under mode="reduce-overhead" (by default CUDA graphs compile whole graphs): each distinct
    # segment is compiled once and recorded as CUDA graphs; training steps past the recording give eager's outputs
    # and gradients.
    from cdynamo import config, utils
    from test_regions import Stack, _train_step  # the regions tests' stack of Linear / LayerNorm / GELU blocks

    torch.manual_seed(0)
    model = Stack(d=64, n=4).cuda()
    before = dict(utils.counters["stats"])
    with config.patch(compile_regions=True):
        fn = cdynamo.compile(model, mode="reduce-overhead")
        for step in range(4):  # CUDA graphs are recorded on a later call: run past it
            x = torch.randn(8, 32, 8, device="cuda", generator=torch.Generator("cuda").manual_seed(step))
            got, got_g = _train_step(model, fn, x)
            ref, ref_g = _train_step(model, model, x)
            torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(got_g, ref_g, atol=1e-4, rtol=1e-3)
    after = dict(utils.counters["stats"])
    assert after.get("region_graphs", 0) - before.get("region_graphs", 0) == 1
    assert after["region_compiles"] - before.get("region_compiles", 0) == 3  # before, one layer, after
