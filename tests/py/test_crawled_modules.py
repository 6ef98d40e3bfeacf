# test_crawled_modules.py — owns tests of small modules written as public projects write them (issue 11 item 2,
# last sentence): each compiles to torch._dynamo's graph count with eager's outputs, gradients and no recompile.
import collections
import random

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
import torch.nn as nn
import torch.nn.functional as F

import cdynamo
from cdynamo.testing import CompileCounterWithBackend, same

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")

BACKENDS = ["eager", "aot_eager"]


def dynamo_counts(model, *args):
    """torch._dynamo's (graphs, ops) for one call of `model` on `args`. Ops as CompileCounter counts them, less
    the getitem that unpacks a custom autograd.Function's result: torch._dynamo's autograd_function_apply node
    returns a tuple, cdynamo's node returns what Function.apply returns."""
    import operator

    import torch._dynamo
    counts = {"graphs": 0, "ops": 0}

    def backend(gm, example_inputs):
        counts["graphs"] += 1
        for n in gm.graph.nodes:
            if n.op not in ("call_function", "call_method", "call_module"):
                continue
            unpacks_hop = (n.target is operator.getitem and isinstance(n.args[0], torch.fx.Node)
                           and "autograd_function_apply" in str(n.args[0].target))
            counts["ops"] += 0 if unpacks_hop else 1
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend=backend)(*args)
    torch._dynamo.reset()
    return counts["graphs"], counts["ops"]


def build(make):
    torch.manual_seed(0)  # the same parameters on every build (weight_norm modules cannot be deep-copied)
    return make()


def check(make, inputs, backend, graphs=True):
    """`make()` builds the module (or returns the function), `inputs()` fresh same-shape arguments (floating
    ones requiring grad). Checks the output and the gradients of the parameters and inputs against eager, the
    graph count against torch._dynamo's (captured ops >=), and that a call on fresh inputs compiles nothing."""
    def fresh():
        return [a.requires_grad_() if a.is_floating_point() else a for a in inputs()]

    def total(out):
        return sum(o.sum() for o in out) if isinstance(out, tuple) else out.sum()

    def params(m):
        return list(m.named_parameters()) if isinstance(m, nn.Module) else []

    model, ref_model = build(make), build(make)
    dyn_graphs, dyn_ops = dynamo_counts(build(make), *fresh())
    cnt = CompileCounterWithBackend(backend)
    opt = cdynamo.optimize(cnt)(model)
    args = fresh()
    rargs = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    out, ref = opt(*args), ref_model(*rargs)
    assert same(ref, out)
    frames = cnt.frame_count
    assert frames == dyn_graphs or not graphs, f"cdynamo {frames} graphs / {cnt.op_count} ops, torch._dynamo {dyn_graphs} / {dyn_ops}"
    assert cnt.op_count >= dyn_ops or not graphs, f"cdynamo {cnt.op_count} ops, torch._dynamo {dyn_ops}"
    if out.requires_grad if isinstance(out, torch.Tensor) else any(o.requires_grad for o in out):
        total(out).backward()
        total(ref).backward()
        for (name, p), (_, rp) in zip(params(model), params(ref_model)):
            assert same(rp.grad, p.grad), name
        for a, r in zip(args, rargs):
            if r.requires_grad:
                assert same(r.grad, a.grad)
    args = fresh()
    assert same(ref_model(*args), opt(*args))
    assert cnt.frame_count == frames, "recompiled on fresh same-shape inputs"
    return cnt


# ---- ConvTranspose with output_padding / output_size (torch.nn's _ntuple closures) -------------------------

class UpBlock1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose1d(4, 3, kernel_size=3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        return F.relu(self.up(x))


class UpBlock2d(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 3, 3, stride=(2, 2), padding=1, output_padding=(1, 0))

    def forward(self, x):
        return self.up(x)


class UNetUp(nn.Module):
    """The U-Net decoder step: upsample to the skip connection's size, then concatenate."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1)

    def forward(self, x, skip):
        x = self.up(x, output_size=skip.size())
        return torch.cat([x, skip], dim=1)


# ---- legacy nn.utils.weight_norm (a forward pre-hook recomputes the weight) --------------------------------

class WNConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.utils.weight_norm(nn.Conv1d(3, 4, 3, padding=1))

    def forward(self, x):
        return F.leaky_relu(self.conv(x), 0.1)


class WNLinearNoDim(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.utils.weight_norm(nn.Linear(4, 5), dim=None)

    def forward(self, x):
        return self.fc(x)


# ---- forward declared as a @staticmethod -------------------------------------------------------------------

class Swish(nn.Module):
    @staticmethod
    def forward(x):
        return x * torch.sigmoid(x)


class MLPWithSwish(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = Swish()
        self.seq = nn.Sequential(nn.Linear(4, 3), Swish())

    def forward(self, x):
        return self.seq(self.act(self.fc(x)))


# ---- Tensor.type() -----------------------------------------------------------------------------------------

class TypeCast(nn.Module):
    def forward(self, x, mask):
        return x * mask.type(torch.float32) + mask.type(x.dtype)


class TypeString(nn.Module):
    def forward(self, x, mask):
        return (x.type(torch.DoubleTensor) * 2).sum() + mask.type("torch.DoubleTensor").sum()


class TypeNoArg(nn.Module):
    def forward(self, x, mask):
        if x.type() == "torch.FloatTensor":
            y = x + 1
        else:
            y = x - 1
        return y * mask.type(x.type())


# ---- len() of a ModuleList / Sequential --------------------------------------------------------------------

class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.head = nn.Sequential(nn.Linear(4, 4), nn.Tanh())

    def forward(self, x):
        for i in range(len(self.layers)):
            x = self.layers[i](x)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x * len(self.head)


# ---- custom torch.autograd.Function.apply ------------------------------------------------------------------

class ClampGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x > 0).float() * 2  # not clamp's true gradient: the custom backward must run


class GradReverse(torch.autograd.Function):
    """The domain-adversarial gradient reversal layer."""

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.alpha, None


class WithClampGrad(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return ClampGrad.apply(self.fc(x)) + 1


class WithGradReverse(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(GradReverse.apply(x, 0.5))


# ---- iterating over a tensor -------------------------------------------------------------------------------

def rows_loop(x):
    out = []
    for row in x:
        out.append(row * 2)
    return torch.stack(out)


def zip_loop(x, y):
    total = 0
    for a, b in zip(x, y):
        total = total + a * b
    return total


def rows_comprehension(x):
    return torch.cat([r.sin() for r in x])


# ---- torch functions stored as module attributes -----------------------------------------------------------

class ActAttr(nn.Module):
    def __init__(self, act=torch.tanh):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = act

    def forward(self, x):
        return self.act(self.fc(x))


class NormAttr(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm_fn = F.normalize
        self.pool = torch.mean

    def forward(self, x):
        return self.pool(self.norm_fn(x, dim=-1), dim=0)


# ---- small torch helpers -----------------------------------------------------------------------------------

class LegacyLoss(nn.Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, x, y):
        diff = (x - y) ** 2
        enum = F._Reduction.get_enum(self.reduction)
        if enum == 1:
            return diff.mean()
        if enum == 2:
            return diff.sum()
        return diff


class DeviceAware(nn.Module):
    def forward(self, x):
        x = x * 2
        device = "cuda" if torch.cuda.is_available() and x.is_cuda else "cpu"  # CPU inputs on a CUDA machine too
        return x + torch.ones(x.shape, device=device)


# ---- issue 31 item 8: ParameterList indexing, new_tensor, legacy constructors, module comparisons ----------------

class ScaleBank(nn.Module):
    """Per-branch scales in an nn.ParameterList, indexed and iterated in forward."""

    def __init__(self):
        super().__init__()
        self.scales = nn.ParameterList([nn.Parameter(torch.randn(4)) for _ in range(3)])

    def forward(self, x):
        out = x * self.scales[0] + self.scales[-1]
        for s in self.scales:
            out = out + s * len(self.scales)
        return out


class OffsetNewTensor(nn.Module):
    """A constant offset made with new_tensor and a legacy FloatTensor mask."""

    def forward(self, x):
        offset = x.new_tensor([0.5, -0.5, 1.0, 2.0])
        mask = torch.FloatTensor([1.0, 0.0, 1.0, 1.0])
        return (x + offset) * mask


class SharedOrNot(nn.Module):
    """Two heads that may be one module: compared with != in forward."""

    def __init__(self, tie):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = self.a if tie else nn.Linear(4, 4)

    def forward(self, x):
        y = self.a(x)
        if self.a != self.b:
            y = y + self.b(x)
        return y


# ---- issue 31 item 8 leftovers: tensors as dict keys, jit-scripted helpers, defaultdict registries ------------

class SharedProjection(nn.Module):
    """Attention that projects each distinct input tensor once (self-attention passes the same tensor as q, k and v):
    a memo dict keyed by the input tensors."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, q, k=None, v=None):
        k = q if k is None else k
        v = k if v is None else v
        memo = {}
        outs = []
        for t in (q, k, v):
            if t not in memo:
                memo[t] = self.proj(t)
            outs.append(memo[t])
        attn = torch.softmax(outs[0] @ outs[1].transpose(-1, -2), dim=-1)
        return attn @ outs[2]


class LayerwiseScale(nn.Module):
    """Layer-wise decay as optimizers' helpers write it: parameters numbered by identity, then looked up."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        depth = {p: i for i, p in enumerate(self.parameters())}
        for blk in self.blocks:
            x = blk(x) * (0.9 ** depth[blk.weight])
        return x


@torch.jit.script
def fused_bias_gelu(x, bias):
    y = x + bias
    return y * 0.5 * (1.0 + torch.tanh(0.79788456 * y * (1 + 0.044715 * y * y)))


class FusedGeluMLP(nn.Module):
    """Megatron-style MLP whose activation is a torch.jit.script'ed function."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8, bias=False)
        self.bias = nn.Parameter(torch.zeros(8))
        self.fc2 = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc2(fused_bias_gelu(self.fc1(x), self.bias))


_ACTIVATIONS = collections.defaultdict(lambda: F.relu, {"gelu": F.gelu, "silu": F.silu})


class RegistryActivation(nn.Module):
    """An activation looked up by name in a module-level defaultdict registry (unknown names fall back to ReLU)."""

    def __init__(self, name="silu"):
        super().__init__()
        self.name = name
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return _ACTIVATIONS[self.name](self.fc(x))


# ---- issue 31 residue: sets of tensors, a tensor-keyed memo held across a print, a plugin registry ----------------

class TiedScale(nn.Module):
    """Counts the distinct weight tensors (tied or not) in a set and checks membership, as weight-tying code does."""

    def __init__(self, tie=True):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        if tie:
            self.b.weight = self.a.weight

    def forward(self, x):
        weights = {self.a.weight, self.b.weight}
        y = self.b(self.a(x))
        return y * len(weights) if self.b.weight in weights else y


class MemoAcrossPrint(nn.Module):
    """A per-call memo keyed by the input tensor, alive across a debugging print (a graph break in both)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        memo = {x: self.fc(x)}
        print("memo of", len(memo), "input(s)")
        return memo[x].relu() + x


class _Plugin:
    pass


class _DoublePlugin(_Plugin):
    factor = 2.0


class _NegatePlugin(_Plugin):
    factor = -1.0


class PluginChain(nn.Module):
    """Applies every registered plugin class found through Base.__subclasses__() (registries of crawled projects)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        for cls in _Plugin.__subclasses__():
            y = y * cls.factor
        return y


CASES = {
    "set_of_tied_weights": (TiedScale, lambda: (torch.randn(2, 4),)),
    "set_of_untied_weights": (lambda: TiedScale(False), lambda: (torch.randn(2, 4),)),
    "tensor_keyed_memo_across_print": (MemoAcrossPrint, lambda: (torch.randn(2, 4),)),
    "subclasses_registry": (PluginChain, lambda: (torch.randn(2, 4),)),
    "tensor_keyed_memo": (SharedProjection, lambda: (torch.randn(2, 4),)),
    "tensor_keyed_memo_distinct": (SharedProjection, lambda: (torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 4))),
    "parameters_numbered_by_identity": (LayerwiseScale, lambda: (torch.randn(2, 4),)),
    "jit_scripted_activation": (FusedGeluMLP, lambda: (torch.randn(2, 4),)),
    "defaultdict_registry": (RegistryActivation, lambda: (torch.randn(2, 4),)),
    "parameter_list_index_iterate": (ScaleBank, lambda: (torch.randn(2, 4),)),
    "new_tensor_and_float_tensor": (OffsetNewTensor, lambda: (torch.randn(2, 4),)),
    "module_ne_untied": (lambda: SharedOrNot(False), lambda: (torch.randn(2, 4),)),
    "module_ne_tied": (lambda: SharedOrNot(True), lambda: (torch.randn(2, 4),)),
    "convtranspose1d_output_padding": (UpBlock1d, lambda: (torch.randn(2, 4, 5),)),
    "convtranspose2d_output_padding": (UpBlock2d, lambda: (torch.randn(2, 4, 5, 5),)),
    "convtranspose2d_output_size": (UNetUp, lambda: (torch.randn(1, 4, 4, 4), torch.randn(1, 2, 8, 8))),
    "weight_norm_conv_dim0": (WNConv, lambda: (torch.randn(2, 3, 6),)),
    "weight_norm_linear_dim_none": (WNLinearNoDim, lambda: (torch.randn(3, 4),)),
    "staticmethod_forward": (Swish, lambda: (torch.randn(5),)),
    "staticmethod_forward_nested": (MLPWithSwish, lambda: (torch.randn(2, 4),)),
    "tensor_type_dtype": (TypeCast, lambda: (torch.randn(4), torch.rand(4) > 0.5)),
    "tensor_type_string": (TypeString, lambda: (torch.randn(4), torch.rand(4) > 0.5)),
    "tensor_type_no_arg": (TypeNoArg, lambda: (torch.randn(4), torch.rand(4) > 0.5)),
    "len_modulelist": (Stack, lambda: (torch.randn(2, 4),)),
    "autograd_function_save_for_backward": (WithClampGrad, lambda: (torch.randn(3, 4),)),
    "autograd_function_grad_reverse": (WithGradReverse, lambda: (torch.randn(3, 4),)),
    "iterate_rows": (lambda: rows_loop, lambda: (torch.randn(3, 4),)),
    "iterate_zip": (lambda: zip_loop, lambda: (torch.randn(3, 4), torch.randn(3, 4))),
    "iterate_comprehension": (lambda: rows_comprehension, lambda: (torch.randn(3, 2),)),
    "torch_fn_attr_tanh": (ActAttr, lambda: (torch.randn(2, 4),)),
    "torch_fn_attr_functional": (lambda: ActAttr(F.gelu), lambda: (torch.randn(2, 4),)),
    "torch_fn_attr_kwargs": (NormAttr, lambda: (torch.randn(3, 4),)),
    "reduction_get_enum": (LegacyLoss, lambda: (torch.randn(3), torch.randn(3))),
    "reduction_get_enum_none": (lambda: LegacyLoss("none"), lambda: (torch.randn(3), torch.randn(3))),
    "cuda_is_available": (DeviceAware, lambda: (torch.randn(3),)),
}


# Cases cdynamo does not yet capture as torch._dynamo does: case -> reason (a strict xfail).
XFAIL = {}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.xfail(reason=XFAIL[c], strict=True))
                                  if c in XFAIL else c for c in CASES])
def test_crawled_module(case, backend):
    make, inputs = CASES[case]
    check(make, inputs, backend)


# ---- soundness around the constructs above -----------------------------------------------------------------

def test_iterating_a_0d_tensor_raises_as_in_eager():
    def fn(x):
        y = x + 1
        for v in y:
            y = y + v
        return y

    opt = cdynamo.optimize("eager")(fn)
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        fn(torch.tensor(1.0))
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        opt(torch.tensor(1.0))


def test_iterating_a_tensor_guards_its_length():
    cnt = CompileCounterWithBackend("eager")
    opt = cdynamo.optimize(cnt)(rows_loop)
    for n in (3, 3, 5):
        x = torch.randn(n, 2)
        assert same(rows_loop(x), opt(x))
    assert cnt.frame_count == 2


def test_tensor_type_no_arg_follows_the_dtype():
    opt = cdynamo.optimize("eager")(TypeNoArg())
    x, m = torch.randn(4), torch.rand(4) > 0.5
    assert same(TypeNoArg()(x, m), opt(x, m))
    assert same(TypeNoArg()(x.double(), m), opt(x.double(), m))  # "torch.DoubleTensor": the other branch


def test_weight_norm_sees_updated_parameters():
    model = WNConv()
    opt = cdynamo.optimize("eager")(model)
    x = torch.randn(2, 3, 6)
    opt(x)
    with torch.no_grad():
        model.conv.weight_g.mul_(3.0)
    assert same(model(x), opt(x))


def test_reduction_get_enum_of_an_unknown_name_raises():
    opt = cdynamo.optimize("eager")(LegacyLoss("bogus"))
    with pytest.raises(ValueError, match="bogus"):
        opt(torch.randn(3), torch.randn(3))


def test_iterating_rows_writes_through_the_views():
    def fn(x):
        for row in x:
            row.mul_(2)
        return x.sum(0)

    x = torch.randn(3, 4)
    ref_x, opt_x = x.clone(), x.clone()
    opt = cdynamo.optimize("eager")(fn)
    assert same(fn(ref_x), opt(opt_x))
    assert same(ref_x, opt_x)


def test_tensor_type_to_a_cuda_type_is_not_captured():
    def fn(x):
        return (x + 1).type("torch.cuda.FloatTensor")

    opt = cdynamo.optimize("eager")(fn)
    x = torch.randn(3)
    if torch.cuda.is_available():
        assert same(fn(x), opt(x))
        return
    with pytest.raises(Exception) as ref:
        fn(x)
    with pytest.raises(type(ref.value)):
        opt(x)


class _ShortList(nn.Sequential):
    def __len__(self):  # a subclass's own __len__ is called, not the children counted
        return 1


class _UsesShortList(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = _ShortList(nn.Linear(4, 4), nn.Linear(4, 4))

    def forward(self, x):
        for i in range(len(self.layers)):
            x = self.layers[i](x)
        return x


def test_len_of_a_module_container_subclass_uses_its_len():
    torch.manual_seed(0)
    model = _UsesShortList()
    x = torch.randn(2, 4)
    assert same(model(x), cdynamo.optimize("eager")(model)(x))


def test_len_of_a_module_list_is_guarded():
    model = Stack()
    cnt = CompileCounterWithBackend("eager")
    opt = cdynamo.optimize(cnt)(model)
    x = torch.randn(2, 4)
    opt(x)
    model.layers.append(nn.Linear(4, 4))
    assert same(model(x), opt(x))
    assert cnt.frame_count == 2


class _StaticHelper(nn.Module):
    @staticmethod
    def scale(x):
        return x * 2

    @classmethod
    def shift(cls, x):
        return x - 1

    def forward(self, x):
        return self.shift(self.scale(x))


def test_static_and_class_methods_of_a_module_compile_once():
    cnt = CompileCounterWithBackend("eager")
    opt = cdynamo.optimize(cnt)(_StaticHelper())
    for _ in range(3):
        x = torch.randn(3)
        assert same(_StaticHelper()(x), opt(x))
    assert cnt.frame_count == 1


class AuxLossHead(nn.Module):
    """A head that adds its auxiliary losses into a caller's `losses = defaultdict(float)` (detection codebases)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, losses):
        y = self.fc(x)
        losses["aux"] += y.abs().mean()
        losses["reg"] += 0.1 * self.fc.weight.pow(2).sum()
        return y.relu()


def test_losses_accumulated_into_a_defaultdict_argument():
    def run(model, calls=2):
        out = []
        for i in range(calls):
            losses = collections.defaultdict(float)
            y = model(torch.full((2, 4), float(i)), losses)
            out.append((y, list(losses), sum(losses.values())))
        return out

    torch.manual_seed(0)
    ref_model = AuxLossHead()
    torch.manual_seed(0)
    model = AuxLossHead()
    expected = run(ref_model)
    cnt = CompileCounterWithBackend("eager")
    got = run(cdynamo.optimize(cnt)(model))
    for (y, keys, total), (ry, rkeys, rtotal) in zip(got, expected):
        assert same(y, ry) and keys == rkeys == ["aux", "reg"] and same(total, rtotal)
    got[-1][2].backward()
    expected[-1][2].backward()
    assert same(model.fc.weight.grad, ref_model.fc.weight.grad)
    torch.manual_seed(0)
    graphs = {"n": 0}

    def backend(gm, example_inputs):
        graphs["n"] += 1
        return gm.forward

    torch._dynamo.reset()
    run(torch.compile(AuxLossHead(), backend=backend))
    assert cnt.frame_count == graphs["n"] == 1  # one graph, no recompile for the second call's fresh dict


# ---- issue 31 residue: random augmentation and a step counter in a closure (state compared, not only outputs) ------

class RandomScaleJitter(nn.Module):
    """Scale jitter of augmentation pipelines: a factor drawn with random.uniform per call, a flip with randint."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        s = random.uniform(0.8, 1.2)
        y = self.conv(x) * s
        return y.flip(-1) * random.randint(0, 1) + y


def test_random_augmentation_as_eager_one_graph_as_torch_dynamo():
    def run(model):
        random.seed(7)
        outs = [model(torch.ones(1, 3, 4, 4)) for _ in range(3)]
        return outs, random.getstate()

    expected, state = run(build(RandomScaleJitter))
    cnt = CompileCounterWithBackend("aot_eager")
    got, got_state = run(cdynamo.optimize(cnt)(build(RandomScaleJitter)))
    assert all(same(a, b) for a, b in zip(got, expected)) and got_state == state
    dyn_graphs, _ = dynamo_counts(build(RandomScaleJitter), torch.ones(1, 3, 4, 4))
    assert cnt.frame_count == dyn_graphs == 1


def make_step_schedule():
    """A warmup schedule kept in a closure counter, as training scripts write it (nonlocal in the compiled step)."""
    step = 0
    fc = build(lambda: nn.Linear(4, 4))

    def train_step(x):
        nonlocal step
        step += 1
        warm = min(1.0, step / 3)
        return fc(x) * warm

    return train_step, lambda: step


def test_nonlocal_step_counter_as_eager_two_graphs_as_torch_dynamo():
    x = torch.randn(2, 4)
    f, steps = make_step_schedule()
    expected = [f(x) for _ in range(5)]
    f, steps = make_step_schedule()
    cnt = CompileCounterWithBackend("eager")
    opt = cdynamo.optimize(cnt)(f)
    got = [opt(x) for _ in range(5)]
    assert all(same(a, b) for a, b in zip(got, expected)) and steps() == 5
    f, _ = make_step_schedule()
    torch._dynamo.reset()
    dcnt = torch._dynamo.testing.CompileCounter()
    dopt = torch.compile(f, backend=dcnt)
    for _ in range(5):
        dopt(x)
    assert cnt.frame_count == dcnt.frame_count, (cnt.frame_count, dcnt.frame_count)
