# test_cold_start.py — owns the check that a fresh process's first compile with the eager backend or a callable
# backend (and `import cdynamo` itself) imports none of torch._dynamo, torch._inductor, aot_autograd or sympy.
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
    assert cdynamo.__file__.startswith(sys.prefix) or 'site-packages' in cdynamo.__file__, cdynamo.__file__
    """
)


def _run(*parts):
    code = _PRELUDE.format(heavy=HEAVY) + "".join(textwrap.dedent(part) for part in parts)
    env = dict(os.environ)
    env.pop("CDYNAMO_LOGS", None)
    env.pop("PYTHONPATH", None)  # the installed cdynamo, never python/ of the source tree
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
