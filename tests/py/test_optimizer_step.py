# test_optimizer_step.py — owns the behaviour tests of compiled torch.optim steps: optimizer.step() and zero_grad()
# under cdynamo compared with eager (parameters and state) and with torch._dynamo (graphs, ops, recompiles), and a
# compiled training step.

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounterWithBackend as DynamoCounter

import cdynamo
from cdynamo.testing import CompileCounterWithBackend
from cdynamo.utils import counters
from versions import REFERENCE_PINNED

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")

# name -> (class, kwargs). The first six take torch's default (single-tensor on CPU); the _foreach ones force the
# multi-tensor path.
OPTIMIZERS = {
    "SGD": (torch.optim.SGD, dict(lr=0.1)),
    "SGD_momentum": (torch.optim.SGD, dict(lr=0.1, momentum=0.9)),
    "Adam": (torch.optim.Adam, dict(lr=0.01)),
    "AdamW": (torch.optim.AdamW, dict(lr=0.01)),
    "RMSprop": (torch.optim.RMSprop, dict(lr=0.01)),
    "Adagrad": (torch.optim.Adagrad, dict(lr=0.01)),
}
FOREACH = {
    "Adam_foreach": (torch.optim.Adam, dict(lr=0.01, foreach=True)),
    "SGD_momentum_foreach": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, foreach=True)),
    "Adagrad_foreach": (torch.optim.Adagrad, dict(lr=0.01, foreach=True)),
}
STEPS = 4


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))


def inputs(n=STEPS, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(5, 4, generator=g), torch.randn(5, 3, generator=g)) for _ in range(n)]


def state_of(opt):
    """The optimizer's per-parameter state, as lists in parameter order (tensors cloned)."""
    out = []
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p, {})
            out.append({k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in sorted(st.items())})
    return out


def assert_close_state(a, b):
    assert len(a) == len(b)
    for sa, sb in zip(a, b):
        assert sorted(sa) == sorted(sb)
        for k in sa:
            if torch.is_tensor(sa[k]):
                torch.testing.assert_close(sa[k], sb[k], atol=1e-6, rtol=1e-5, msg=lambda m: f"state {k}: {m}")
            else:
                assert sa[k] == sb[k], k


def run_steps(kind, spec, backend="eager", steps=STEPS):
    """Runs `steps` optimizer steps (backward in eager, step() compiled by `kind`: None, "cdynamo", "dynamo").
    Returns (params, state, counter, compiles seen after each step)."""
    cls, kwargs = spec
    model = make_model()
    opt = cls(model.parameters(), **kwargs)

    def step():
        opt.step()

    cnt = None
    if kind == "cdynamo":
        cnt = CompileCounterWithBackend(backend)
        fn = cdynamo.optimize(cnt)(step)
    elif kind == "dynamo":
        cnt = DynamoCounter(backend)
        fn = torch.compile(step, backend=cnt)
    else:
        fn = step
    seen = []
    for x, y in inputs(steps):
        torch.nn.functional.mse_loss(model(x), y).backward()
        fn()
        opt.zero_grad()
        seen.append(cnt.frame_count if cnt else 0)
    return [p.detach().clone() for p in model.parameters()], state_of(opt), cnt, seen


def recompiles():
    return sum(counters["recompiles"].values())


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_step_matches_eager_and_dynamo(name, backend):
    spec = OPTIMIZERS[name]
    ref_params, ref_state, _, _ = run_steps(None, spec)
    counters.clear()
    params, state, cnt, seen = run_steps("cdynamo", spec, backend)
    ours_recompiles = recompiles()
    torch._dynamo.reset()
    _, _, dcnt, dseen = run_steps("dynamo", spec, backend)
    for a, b in zip(params, ref_params):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert_close_state(state, ref_state)
    assert len(ref_state[0]) > 0 or name == "SGD"  # the state really was built
    # Graphs (frames that compiled one, as CompileCounter counts them) and ops as torch._dynamo's, on the same torch.
    assert cnt.frame_count == dcnt.frame_count, (cnt.frame_count, dcnt.frame_count)
    if REFERENCE_PINNED:  # torch 2.11's torch._dynamo decomposes SGD's add_(alpha=) into more ops
        assert cnt.op_count == dcnt.op_count, (cnt.op_count, dcnt.op_count)
    # No more compiles than torch._dynamo at any step (state initialised at the first one: no recompile for it),
    # and none at all once the state exists.
    assert all(a <= b for a, b in zip(seen, dseen)), (seen, dseen)
    assert seen[-1] == seen[1], seen
    assert ours_recompiles <= dcnt.frame_count - 1, (ours_recompiles, dict(counters["recompiles"]))


@pytest.mark.parametrize("name", list(FOREACH))
def test_foreach_step_matches_eager(name):
    spec = FOREACH[name]
    ref_params, ref_state, _, _ = run_steps(None, spec)
    # Without the dead-code pass: it drops the unused getitem nodes of the foreach ops' list results (Adam: 56 of
    # 68), which torch._dynamo keeps; with every node kept, no op of torch._dynamo's graph may be missing.
    with cdynamo.config.patch(dead_code_elimination=False):
        params, state, cnt, seen = run_steps("cdynamo", spec, "eager")
    _, _, dcnt, _ = run_steps("dynamo", spec, "eager")
    for a, b in zip(params, ref_params):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert_close_state(state, ref_state)
    assert cnt.frame_count == dcnt.frame_count
    # cdynamo's graphs also hold the getitem nodes of the foreach ops' list results.
    assert cnt.op_count >= dcnt.op_count
    assert seen[-1] == seen[1]


def test_adam_inductor():
    spec = OPTIMIZERS["Adam"]
    ref_params, ref_state, _, _ = run_steps(None, spec, steps=3)
    params, state, cnt, _ = run_steps("cdynamo", spec, "inductor", steps=3)  # the suite's hang limit bounds it
    for a, b in zip(params, ref_params):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert_close_state(state, ref_state)
    assert cnt.frame_count == 1


def test_state_is_made_at_trace_time_once():
    """The lazy state of Adam is initialised while tracing the first step (as torch._dynamo): the graph is the
    optimizer's own step frame, reading params, grads and state from `self` (torch._dynamo's inputs are
    L_self_param_groups_0_params_0_grad, ...)."""
    from cdynamo.testing import EagerAndRecordGraphs
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    rec = EagerAndRecordGraphs()
    step = cdynamo.optimize(rec)(lambda: opt.step())
    x, y = inputs(1)[0]
    torch.nn.functional.mse_loss(model(x), y).backward()
    step()
    assert len(rec.graphs) == 1
    assert all(float(opt.state[p]["step"]) == 1.0 for p in model.parameters())
    names = [n.name for n in rec.graphs[0].graph.nodes if n.op == "placeholder"]
    assert len(names) == 4 * 5  # per param: itself, its grad, step, exp_avg, exp_avg_sq
    assert all(n.startswith("self_param_groups_0_params_") or n.startswith("self_state_") for n in names), names


def test_changed_hyperparameter_recompiles():
    """lr is a constant of the graph, guarded: a new lr makes a new graph, and the result is eager's (to the rounding
    of the capturable formulas at a large lr, which torch._dynamo's graphs share: those are matched exactly)."""
    spec = OPTIMIZERS["Adam"]
    results = []
    for kind in (None, "cdynamo", "dynamo"):
        model = make_model()
        opt = spec[0](model.parameters(), **spec[1])
        cnt = CompileCounterWithBackend("eager") if kind == "cdynamo" else DynamoCounter("eager")
        fn = lambda: opt.step()  # noqa: E731
        if kind == "cdynamo":
            fn = cdynamo.optimize(cnt)(fn)
        elif kind == "dynamo":
            fn = torch.compile(fn, backend=cnt)
        for i, (x, y) in enumerate(inputs(4)):
            if i == 2:
                opt.param_groups[0]["lr"] = 0.5
            torch.nn.functional.mse_loss(model(x), y).backward()
            fn()
            opt.zero_grad()
        results.append(([p.detach().clone() for p in model.parameters()], cnt.frame_count))
    for a, b, c in zip(results[0][0], results[1][0], results[2][0]):
        torch.testing.assert_close(b, a, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(b, c, atol=1e-7, rtol=1e-6)
    assert results[1][1] == 2 == results[2][1]


def test_param_without_grad_is_skipped():
    """A parameter whose grad is None takes no step (its None grad is guarded): same as eager."""
    out = []
    for kind in (None, "cdynamo"):
        model = make_model()
        model[2].bias.requires_grad_(False)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        cnt = CompileCounterWithBackend("eager")
        fn = cdynamo.optimize(cnt)(lambda: opt.step()) if kind else (lambda: opt.step())
        for x, y in inputs(3):
            torch.nn.functional.mse_loss(model(x), y).backward()
            fn()
            opt.zero_grad()
        out.append(([p.detach().clone() for p in model.parameters()], state_of(opt)))
    for a, b in zip(out[0][0], out[1][0]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert_close_state(out[0][1], out[1][1])
    assert out[1][1][-1] == {}
    assert cnt.frame_count == 1


@pytest.mark.parametrize("name", ["Adam", "SGD_momentum"])
def test_grad_appearing_later_recompiles(name):
    """Which params have a grad is guarded: params unused (grad None) for two steps, then used, get their state and
    steps as in eager (a graph that skipped them is not reused; nothing else about them changed)."""
    spec = OPTIMIZERS[name]
    out = []
    for kind in (None, "cdynamo"):
        model = make_model()
        extra = torch.nn.Linear(4, 3)
        opt = spec[0](list(model.parameters()) + list(extra.parameters()), **spec[1])
        cnt = CompileCounterWithBackend("eager")
        fn = cdynamo.optimize(cnt)(lambda: opt.step()) if kind else (lambda: opt.step())
        for i, (x, y) in enumerate(inputs(5)):
            out_ = model(x) + extra(x) if i >= 2 else model(x)
            torch.nn.functional.mse_loss(out_, y).backward()
            fn()
            opt.zero_grad()
        out.append(([p.detach().clone() for p in list(model.parameters()) + list(extra.parameters())], state_of(opt)))
    for a, b in zip(out[0][0], out[1][0]):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)
    assert_close_state(out[1][1], out[0][1])
    assert cnt.frame_count >= 2  # before and after the bias took part


def train_step(model, opt, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_training_step(backend):
    """forward, backward (a graph break: autograd runs as in eager), step and zero_grad in one compiled function."""
    results = {}
    for kind in (None, "cdynamo", "dynamo"):
        model = make_model()
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        cnt = None
        if kind == "cdynamo":
            counters.clear()
            cnt = CompileCounterWithBackend(backend)
            fn = cdynamo.optimize(cnt)(train_step)
        elif kind == "dynamo":
            torch._dynamo.reset()
            cnt = DynamoCounter(backend)
            fn = torch.compile(train_step, backend=cnt)
        else:
            fn = train_step
        losses = [fn(model, opt, x, y).detach() for x, y in inputs(5)]
        results[kind] = (losses, [p.detach().clone() for p in model.parameters()], state_of(opt), cnt,
                         [p.grad for p in model.parameters()])
    ref = results[None]
    ours = results["cdynamo"]
    for a, b in zip(ours[0], ref[0]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    for a, b in zip(ours[1], ref[1]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert_close_state(ours[2], ref[2])
    assert all(g is None for g in ours[4])  # zero_grad's set_to_none
    dyn = results["dynamo"][3]
    assert ours[3].frame_count == dyn.frame_count
    assert ours[3].op_count == dyn.op_count


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad(set_to_none):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def fn(x):
        opt.zero_grad(set_to_none=set_to_none)
        return model(x).sum()

    cnt = CompileCounterWithBackend("eager")
    opt_fn = cdynamo.optimize(cnt)(fn)
    x = torch.randn(2, 4)
    model(x).sum().backward()
    out = opt_fn(x)
    torch.testing.assert_close(out, model(x).sum())
    for p in model.parameters():
        if set_to_none:
            assert p.grad is None
        else:
            assert p.grad is not None and not p.grad.any()
    torch._dynamo.reset()
    dcnt = DynamoCounter("eager")
    model(x).sum().backward()
    torch.compile(fn, backend=dcnt)(x)
    assert cnt.frame_count == dcnt.frame_count


def test_is_compiling_in_user_code_keeps_dynamo_graphs():
    """User code that branches on torch.compiler.is_compiling() and then breaks keeps torch._dynamo's graphs (the
    no-break-after-the-query rule holds only for torch's own code)."""

    def fn(x):
        if torch.compiler.is_compiling():
            x = x + 1
        print("", end="")
        return x * 2

    x = torch.randn(3)
    cnt = CompileCounterWithBackend("eager")
    out = cdynamo.optimize(cnt)(fn)(x)
    dcnt = DynamoCounter("eager")
    dout = torch.compile(fn, backend=dcnt)(x)
    torch.testing.assert_close(out, dout)
    assert cnt.frame_count == dcnt.frame_count == 2


def test_no_break_after_is_compiling_in_torch_code():
    """torch.optim's _stack_if_compiling stacks under compile and returns its list in eager; called with floats (as a
    frame running as Python after a break would), its frame must run wholly as Python, not take the compile branch
    and then break on torch.stack (which raised before)."""
    from torch.optim.optimizer import _get_value, _stack_if_compiling

    def fn(x):
        y = x * 2
        return y, _stack_if_compiling([1.0, 2.0]), _get_value(torch.tensor(3.0))

    cnt = CompileCounterWithBackend("eager")
    y, stacked, value = cdynamo.optimize(cnt)(fn)(torch.ones(2))
    torch.testing.assert_close(y, torch.full((2,), 2.0))
    assert stacked == [1.0, 2.0]
    assert float(value) == 3.0  # (a tensor here, as under torch.compile: _get_value is inlined and folded)
    assert cnt.frame_count >= 1


@pytest.mark.parametrize("name", ["Adam", "SGD_momentum"])
def test_two_param_groups(name):
    """Two param groups (the second with its own lr): one graph as torch._dynamo's, eager's parameters. SGD's second
    _init_group runs after the first group's momentum buffers were stored (pending writes of other params' state)."""
    cls, kwargs = OPTIMIZERS[name]
    res = {}
    for kind in (None, "cdynamo", "dynamo"):
        model = make_model()
        opt = cls([{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.05}], **kwargs)
        cnt = CompileCounterWithBackend("eager") if kind == "cdynamo" else DynamoCounter("eager")
        fn = lambda: opt.step()  # noqa: E731
        if kind == "cdynamo":
            fn = cdynamo.optimize(cnt)(fn)
        elif kind == "dynamo":
            fn = torch.compile(fn, backend=cnt)
        for x, y in inputs(4):
            torch.nn.functional.mse_loss(model(x), y).backward()
            fn()
            opt.zero_grad()
        res[kind] = ([p.detach().clone() for p in model.parameters()], state_of(opt), cnt)
    for a, b in zip(res["cdynamo"][0], res[None][0]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert_close_state(res["cdynamo"][1], res[None][1])
    assert res["cdynamo"][2].frame_count == res["dynamo"][2].frame_count
    if REFERENCE_PINNED:  # as above
        assert res["cdynamo"][2].op_count == res["dynamo"][2].op_count


def test_without_torch_compile_in_the_process():
    """Before torch.compile has run, torch.optim's _init_group methods are plain functions (torch._dynamo wraps them
    in its disable when it first compiles, as in this test process): both forms are made for real."""
    import subprocess
    import sys
    code = (
        "import torch, cdynamo\n"
        "from cdynamo.testing import EagerAndRecordGraphs\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Linear(4, 3)\n"
        "opt = torch.optim.Adam(m.parameters(), lr=0.01)\n"
        "assert torch.optim.Adam._init_group.__code__.co_name == '_init_group'\n"
        "rec = EagerAndRecordGraphs()\n"
        "step = cdynamo.optimize(rec)(lambda: opt.step())\n"
        "for _ in range(3):\n"
        "    m(torch.randn(2, 4)).sum().backward()\n"
        "    step()\n"
        "names = [n.name for n in rec.graphs[0].graph.nodes if n.op == 'placeholder']\n"
        "print(len(rec.graphs), all(n.startswith(('self_param_groups_', 'self_state_')) for n in names),\n"
        "      float(opt.state[m.weight]['step']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "True", "3.0"], out.stdout
