# demo.py — owns `python -m cdynamo.demo`: the seeds' toy and bar examples with graphs, bytecode and guards printed.
"""Runs two examples under cdynamo.optimize with a printing backend and every log kind on:

* toy(x): sin, cos, mul — one graph;
* bar(a, b): a data-dependent branch — graphs before and after the break, one per branch taken.

The examples are written to a temporary example.py (cdynamo does not capture its own package's files).
"""
import importlib.util
import os
import sys
import tempfile
import textwrap
import traceback

import torch

EXAMPLE = textwrap.dedent('''\
    import torch


    def toy(x):
        a = torch.sin(x)
        b = torch.cos(x)
        return a * b


    def bar(a, b):
        x = a / (torch.abs(a) + 1)
        if b.sum() < 0:
            b = b * -1
        return x * b
''')


def _load_examples():
    path = os.path.join(tempfile.mkdtemp(prefix="cdynamo-demo-"), "example.py")
    with open(path, "w") as f:
        f.write(EXAMPLE)
    spec = importlib.util.spec_from_file_location("cdynamo_demo_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_graphs = []


def my_compiler(gm, example_inputs):
    _graphs.append(gm)
    n = sum(1 for node in gm.graph.nodes if node.op.startswith("call_"))
    shapes = [tuple(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)]
    print(f"my_compiler() called with an FX graph of {n} ops, example input shapes {shapes}")
    return gm.forward


def _section(title):
    print("\n" + "=" * 78 + f"\n{title}\n" + "=" * 78, flush=True)


def _check(name, got, expected):
    from cdynamo.testing import same

    if same(expected, got):
        print(f"OK: compiled == eager ({name})", flush=True)
        return True
    print(f"MISMATCH: compiled != eager ({name})\n  compiled: {got}\n  eager:    {expected}", flush=True)
    return False


def _run(name, fn):
    before = len(_graphs)
    try:
        return fn()
    except Exception:  # show what we got and keep going with the next example
        print(f"FAILED: {name} raised:", flush=True)
        traceback.print_exc(file=sys.stdout)
        return False
    finally:
        if name != "explain":
            print(f"[{name}] graphs captured: {len(_graphs) - before}", flush=True)


def main():
    import cdynamo
    from cdynamo import _logging

    ex = _load_examples()
    _logging.enable("all", stream=sys.stdout)
    torch.manual_seed(0)
    ok = True

    _section("toy(x): a = sin(x); b = cos(x); return a * b")

    def toy_demo():
        x = torch.randn(10)
        opt_toy = cdynamo.optimize(my_compiler)(ex.toy)
        return _check("toy", opt_toy(x), ex.toy(x))

    ok &= bool(_run("toy", toy_demo))

    _section("bar(a, b): x = a / (abs(a) + 1); if b.sum() < 0: b = b * -1; return x * b")

    def bar_demo():
        cdynamo.reset()
        a, b = torch.randn(10), torch.randn(10)
        opt_bar = cdynamo.optimize(my_compiler)(ex.bar)
        good = True
        for label, bb in (("bar(a, b)", b), ("bar(a, -b)", -b)):
            print(f"\n--- calling {label}", flush=True)
            good &= _check(label, opt_bar(a, bb), ex.bar(a, bb))
        return good

    ok &= bool(_run("bar", bar_demo))

    _section("cdynamo.explain(bar)(a, b)")
    _logging.disable()

    def explain_demo():
        print(cdynamo.explain(ex.bar)(torch.randn(10), torch.randn(10)), flush=True)
        return True

    ok &= bool(_run("explain", explain_demo))
    print("\n" + ("demo finished: all results equal eager" if ok else "demo finished WITH FAILURES"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
