# test_modules.py — owns nn.Module tests: modules traced inline (parameters, buffers, submodules, torch.nn
# layers), training steps and eval mode equal to eager, guards on module state, hooks kept exact.
import copy

import pytest
import torch
import torch.nn as nn

import cdynamo
from cdynamo.testing import CompileCounter, assert_same


# cdynamo.reset() before and after each test (conftest.py).
pytestmark = pytest.mark.usefixtures("cdynamo_reset")


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0

    def forward(self, x):
        return torch.relu(x) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.drop = nn.Dropout(0.0)
        self.ln = nn.LayerNorm(8)
        self.conv = nn.Conv1d(2, 2, 3, padding=1)
        self.emb = nn.Embedding(10, 4)
        self.act = nn.GELU()
        self.inner = Inner()
        self.register_buffer("offset", torch.ones(8))

    def forward(self, x, idx):
        y = self.act(self.bn(self.lin(x + self.emb(idx).sum(1))))
        y = self.inner(self.ln(self.drop(y)) + self.offset)
        return self.conv(y.view(y.shape[0], 2, 4)).flatten(1)


def make_pair(cls=Net):
    torch.manual_seed(0)
    eager = cls()
    return eager, copy.deepcopy(eager)


def test_whole_model_is_one_graph_and_equals_eager():
    eager, ours = make_pair()
    counter = CompileCounter()
    opt = cdynamo.optimize(counter)(ours)
    x, idx = torch.randn(5, 4), torch.randint(0, 10, (5, 3))
    for _ in range(3):
        assert_same(opt(x, idx), eager(x, idx))
    assert counter.frame_count == 1
    # BatchNorm's running statistics were updated by the graph exactly as by eager.
    assert_same(ours.bn.running_mean, eager.bn.running_mean)
    assert_same(ours.bn.running_var, eager.bn.running_var)
    assert_same(ours.bn.num_batches_tracked, eager.bn.num_batches_tracked)


def test_training_steps_match_eager_then_eval_recompiles_once():
    eager, ours = make_pair()
    counter = CompileCounter()
    opt = cdynamo.optimize(counter)(ours)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_o = torch.optim.SGD(ours.parameters(), lr=0.1)
    torch.manual_seed(1)
    for _ in range(3):
        x, idx = torch.randn(5, 4), torch.randint(0, 10, (5, 3))
        for model, o, f in ((eager, opt_e, eager), (ours, opt_o, opt)):
            o.zero_grad()
            f(x, idx).pow(2).mean().backward()
            o.step()
    for (n, pe), (_, po) in zip(eager.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(po, pe, msg=lambda m: f"{n}: {m}")
    assert counter.frame_count == 1
    eager.eval()
    ours.eval()
    x, idx = torch.randn(5, 4), torch.randint(0, 10, (5, 3))
    assert_same(opt(x, idx), eager(x, idx))
    assert counter.frame_count == 2  # `training` is guarded: eval() recompiles once
    assert_same(opt(x, idx), eager(x, idx))
    assert counter.frame_count == 2


def test_module_attribute_change_recompiles():
    eager, ours = make_pair()
    counter = CompileCounter()
    opt = cdynamo.optimize(counter)(ours)
    x, idx = torch.randn(5, 4), torch.randint(0, 10, (5, 3))
    assert_same(opt(x, idx), eager(x, idx))
    eager.inner.scale = ours.inner.scale = 3.0
    assert_same(opt(x, idx), eager(x, idx))
    assert counter.frame_count == 2


def test_forward_hook_on_submodule_runs_exactly_as_eager():
    eager, ours = make_pair()
    calls = []

    def hook(mod, args, out):
        calls.append(out.shape)
        return out * 0.5

    eager.inner.register_forward_hook(hook)
    ours.inner.register_forward_hook(hook)
    x, idx = torch.randn(5, 4), torch.randint(0, 10, (5, 3))
    expected = eager(x, idx)
    got = cdynamo.optimize(CompileCounter())(ours)(x, idx)
    assert_same(got, expected)
    assert len(calls) == 2  # once in eager, once in the compiled run


def test_hook_added_after_compile_is_seen():
    eager, ours = make_pair()
    opt = cdynamo.optimize(CompileCounter())(ours)
    x, idx = torch.randn(5, 4), torch.randint(0, 10, (5, 3))
    assert_same(opt(x, idx), eager(x, idx))
    eager.inner.register_forward_hook(lambda m, a, o: o + 1)
    ours.inner.register_forward_hook(lambda m, a, o: o + 1)
    assert_same(opt(x, idx), eager(x, idx))


def test_user_objects_methods_and_properties():
    class Cfg:
        factor = 2.0

        def __init__(self):
            self.shift = 1.0

        def apply(self, x):
            return x * self.factor + self.shift

        @property
        def double_shift(self):
            return self.shift * 2

    cfg = Cfg()

    def fn(x):
        return cfg.apply(x) + cfg.double_shift

    counter = CompileCounter()
    opt = cdynamo.optimize(counter)(fn)
    x = torch.randn(3)
    assert_same(opt(x), fn(x))
    assert counter.frame_count == 1
    cfg.shift = 4.0
    assert_same(opt(x), fn(x))
    assert counter.frame_count == 2
    Cfg.factor = 5.0  # a class attribute the trace relied on
    try:
        assert_same(opt(x), fn(x))
    finally:
        Cfg.factor = 2.0


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 4))
        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        y = self.seq(x)
        for i, block in enumerate(self.blocks):
            y = block(y) * (i + 1) + y
        return y


def test_sequential_and_module_list_loops_unroll_into_one_graph():
    eager, ours = make_pair(Stack)
    counter = CompileCounter()
    opt = cdynamo.optimize(counter)(ours)
    x = torch.randn(5, 3)
    assert_same(opt(x), eager(x))
    assert counter.frame_count == 1
    assert counter.op_count == 3 + 3 * 3  # seq: linear, relu, linear; each block: linear, mul, add
    # A structural change (one more block) fails the length guard and recompiles.
    eager.blocks.append(nn.Linear(4, 4))
    ours.blocks.append(copy.deepcopy(eager.blocks[-1]))
    assert_same(opt(x), eager(x))
    assert counter.frame_count == 2


def test_attribute_writes_are_replayed_in_order_around_a_break():
    class Obj:
        pass

    def fn(x, o):
        y = x * 2
        o.cache = y               # a tensor from the graph
        o.tag = o.tag + "b"       # reads back its own earlier state
        z = o.cache + 1           # reads the value this trace assigned
        print("break")
        o.last = z
        return z

    eager_o, ours_o = Obj(), Obj()
    eager_o.tag = ours_o.tag = "a"
    x = torch.randn(3)
    expected = fn(x, eager_o)
    got = cdynamo.optimize(CompileCounter())(fn)(x, ours_o)
    assert_same(got, expected)
    assert_same(ours_o.cache, eager_o.cache)
    assert_same(ours_o.last, eager_o.last)
    assert ours_o.tag == eager_o.tag == "ab"


def test_module_counter_attribute_updates_like_eager():
    class Counting(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return self.lin(x) * self.calls

    eager, ours = make_pair(Counting)
    opt = cdynamo.optimize(CompileCounter())(ours)
    x = torch.randn(2, 3)
    for _ in range(3):
        assert_same(opt(x), eager(x))
    assert ours.calls == eager.calls == 3


def test_bare_torch_modules_are_captured_through_the_wrapper():
    # A module whose forward lives in torch (no user frame at all) is still one graph.
    torch.manual_seed(0)
    for mod, n_ops in ((nn.Linear(3, 4), 1), (nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)), 3)):
        counter = CompileCounter()
        opt = cdynamo.optimize(counter)(mod)
        x = torch.randn(2, 3)
        assert_same(opt(x), mod(x))
        assert_same(opt(x), mod(x))
        assert (counter.frame_count, counter.op_count) == (1, n_ops)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_real_backends_train_like_eager(backend):
    eager, ours = make_pair()
    counter = cdynamo.testing.CompileCounterWithBackend(backend)
    opt = cdynamo.optimize(counter)(ours)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_o = torch.optim.SGD(ours.parameters(), lr=0.1)
    torch.manual_seed(2)
    for _ in range(3):
        x, idx = torch.randn(5, 4), torch.randint(0, 10, (5, 3))
        for o, f in ((opt_e, eager), (opt_o, opt)):
            o.zero_grad()
            f(x, idx).pow(2).mean().backward()
            o.step()
    for (n, pe), (_, po) in zip(eager.named_parameters(), ours.named_parameters()):
        assert po.grad is not None, n
        torch.testing.assert_close(po.grad, pe.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{n} grad: {m}")
        torch.testing.assert_close(po, pe, rtol=1e-4, atol=1e-5, msg=lambda m: f"{n}: {m}")
    assert counter.frame_count == 1
    eager.eval()
    ours.eval()
    x, idx = torch.randn(5, 4), torch.randint(0, 10, (5, 3))
    torch.testing.assert_close(opt(x, idx), eager(x, idx), rtol=1e-4, atol=1e-5)
    assert counter.frame_count == 2


# ---------------------------------------------------------------------------------------------------------
# Hooks traced into the graph, guarded on the hook dicts; functions of other modules inlined.

def test_hooks_are_traced_and_registering_one_recompiles():
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    model = nn.Sequential(lin, nn.ReLU())
    seen = []

    def pre(mod, args):
        return (args[0] * 2,)

    def post(mod, args, out):
        seen.append(out.shape)  # a list of the test: changed in place and written back
        return out + 1

    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(model)
    x = torch.randn(2, 4)
    assert_same(opt(x), model(x))
    assert cnt.frame_count == 1
    h1 = lin.register_forward_pre_hook(pre)
    h2 = lin.register_forward_hook(post)
    seen.clear()
    out = opt(x)
    assert len(seen) == 1
    assert_same(out, model(x))
    assert cnt.frame_count == 2, "hooks added: recompiled, and traced (one graph)"
    assert cnt.op_count >= 2 + 4
    h1.remove()
    assert_same(opt(x), model(x))
    assert cnt.frame_count == 3, "a hook removed: recompiled"
    h2.remove()


def test_global_forward_hook_registration_recompiles():
    model = nn.Linear(3, 3)
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(model)
    x = torch.randn(2, 3)
    assert_same(opt(x), model(x))
    calls = []
    handle = nn.modules.module.register_module_forward_hook(lambda m, a, o: calls.append(1))
    try:
        opt(x)
        assert calls, "the global hook ran"
    finally:
        handle.remove()


def test_function_from_another_module_is_inlined_and_its_globals_guarded():
    import other_module_helpers as other

    def f(x):
        return other.scaled_relu(x) + 1

    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(f)
    x = torch.randn(5)
    assert_same(opt(x), f(x))
    assert cnt.frame_count == 1 and cnt.op_count == 3
    old = other.SCALE
    try:
        other.SCALE = 5.0
        assert_same(opt(x), f(x))
        assert cnt.frame_count == 2, "the other module's global changed: recompiled"
    finally:
        other.SCALE = old


def test_module_iteration_methods_are_traced():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 3)
            self.b = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
            self.register_buffer("shift", torch.ones(3))

        def forward(self, x):
            for name, child in self.named_children():
                x = child(x)
            n = sum(p.numel() for p in self.parameters())
            total = sum(b.sum() for b in self.buffers())
            return x * n + total + len(list(self.modules()))

    m = M()
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(m)
    x = torch.randn(2, 3)
    assert_same(opt(x), m(x))
    assert cnt.frame_count == 1
    m.extra = nn.Identity()  # the module tree changed: recompiled, still equal
    assert_same(opt(x), m(x))
    assert cnt.frame_count == 2


def test_transformer_fast_path_in_eval_no_grad_is_one_graph():
    # Eval under no_grad takes torch.nn's fused fast path (torch._transformer_encoder_layer_fwd).
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = torch.randn(2, 5, 16)
    cnt = CompileCounter()
    with torch.no_grad():
        out = cdynamo.optimize(cnt)(enc)(x)
        torch.testing.assert_close(out, enc(x))
    assert cnt.frame_count == 1 and cnt.op_count >= 2


def test_global_assignment_in_another_modules_function_happens_once_per_call():
    import other_module_helpers as other

    def f(x):
        return other.counted_double(x) + other.CALLS

    opt = cdynamo.optimize("eager")(f)
    x = torch.randn(3)
    other.CALLS = 0
    expected = [f(x) for _ in range(3)]
    assert other.CALLS == 3
    other.CALLS = 0
    got = [opt(x) for _ in range(3)]
    assert other.CALLS == 3
    for g, e in zip(got, expected):
        assert_same(g, e)
