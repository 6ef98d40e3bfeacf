# Per-call cost of a graph that changes an input sharing its storage with another input (x and v = x[0], v changed in place), aot_eager: torch.compile (aot_autograd's synthetic bases) vs cdynamo (_dealias: one input per storage, as_strided in the graph, a call-time check) vs eager, interleaved in one process; plus the same function on distinct inputs (the path without the rewrite).
import sys

import torch

try:
    from . import common as C
except ImportError:  # run as a script
    import common as C


def _f(x, v, w):
    v.mul_(1.0)
    return (x @ w).softmax(-1)


def _args(aliased):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 32, generator=g)
    w = torch.randn(32, 32, generator=g, requires_grad=True)
    v = x[0] if aliased else torch.randn(32, generator=g)
    return x, v, w


def run(quick=False):
    C.setup()
    dyn, cdyn = C.DynamoFrontend(), C.CDynamoFrontend()
    table = C.Table("Aliased inputs changed in place, steady-state call, aot_eager (median of interleaved repeats)",
                    "us per call")
    repeat = 3 if quick else 7
    number = 200 if quick else 1000
    for aliased in (True, False):
        fns, notes = {"eager": _f}, []
        for fe in (dyn, cdyn):
            fe.reset()
            try:
                compiled = fe.compile(_f, "aot_eager")
                got, ref = compiled(*_args(aliased)), _f(*_args(aliased))
                if not torch.allclose(got, ref):
                    notes.append(f"{fe.name}: differs from eager")
                fns[fe.name] = compiled
            except Exception as e:  # noqa: BLE001
                notes.append(f"{fe.name}: {C.short_error(e)}")
        args = _args(aliased)
        res = C.interleaved_ns(fns, args, number, repeat, warmup=50)
        e = C.median(res["eager"]) / 1e3
        d = C.median(res[dyn.name]) / 1e3 if dyn.name in res else None
        c = C.median(res[cdyn.name]) / 1e3 if cdyn.name in res else None
        rat = C.ratio(d, c)
        table.add("x, v=x[0] (rewrite)" if aliased else "x, v distinct", e, d, c, rat, ">=1x",
                  C.status(None if rat is None else rat >= 1.0))
        for n in notes:
            table.note(n)
    return [table], {}


if __name__ == "__main__":
    C.bench_main(run, __doc__)
