# Per-call time of cached compiled functions drawing module-level `random` values (issue 31 residue): torch._dynamo
# vs cdynamo vs eager, interleaved rounds in one process; graphs per frontend and the Python random state checked.
import random

import torch

try:
    from . import common as C
except ImportError:  # run as a script
    import common as C


def jitter(x):
    """Scale jitter of augmentation code: one graph in both frontends (two draws)."""
    return x * random.uniform(0.8, 1.2) + random.randint(0, 3)


def twice(x):
    """random.random() twice: one graph in cdynamo; torch 2.13's torch._dynamo breaks on it."""
    return x * random.random() + random.random()


def gauss_noise(x):
    """random.gauss: one graph in cdynamo (drawn as an input); torch 2.13's torch._dynamo breaks on it."""
    return x + random.gauss(0, 0.1)


CASES = {"uniform + randint (2 draws)": jitter, "random.random() x2": twice, "random.gauss": gauss_noise}


def measure(frontend, fn, x, number, repeat):
    """(eager ns list, compiled ns list, graphs): compiled once, checked against eager from one seed (values and the
    random state after), then timed interleaved with eager."""
    backend = C.CountingBackend()
    frontend.reset()
    try:
        opt = frontend.compile(C.fresh_copy(fn), backend)
        random.seed(1)
        want = [fn(x) for _ in range(3)], random.getstate()
        random.seed(1)
        got = [opt(x) for _ in range(3)], random.getstate()
        if got[1] != want[1] or not all(torch.equal(a, b) for a, b in zip(got[0], want[0])):
            raise RuntimeError("values or random state differ from eager")
        graphs = backend.graphs
        res = C.interleaved_ns({"eager": fn, "compiled": opt}, (x,), number, repeat)
        if backend.graphs != graphs:
            raise RuntimeError(f"recompiled during timing: {backend.graphs} graphs")
        return res["eager"], res["compiled"], graphs
    finally:
        frontend.reset()


def run(quick=False):
    C.setup()
    number, repeat = (2000, 3) if quick else (20000, 5)
    dyn, cdyn = C.DynamoFrontend(), C.CDynamoFrontend()
    table = C.Table(f"random calls, cached call (median of {repeat} x {number} calls)", "us per call")
    data = {}
    x = torch.randn(8)
    for case, fn in CASES.items():
        us, graphs, eager, notes = {}, {}, [], []
        for fe in (dyn, cdyn):
            try:
                e, c, g = measure(fe, fn, x, number, repeat)
                eager += e
                us[fe.name], graphs[fe.name] = C.median(c) / 1e3, g
            except Exception as ex:  # noqa: BLE001 - report the row, keep going
                us[fe.name] = "ERR"
                notes.append(f"{fe.name} ERROR: {C.short_error(ex)}")
        eager_us = C.median(eager) / 1e3 if eager else None
        d, c = us[dyn.name], us[cdyn.name]
        notes.append(f"graphs: torch._dynamo {graphs.get(dyn.name, '?')}, cdynamo {graphs.get(cdyn.name, '?')}")
        table.add(case, eager_us, d, c, C.ratio(d, c), "-", C.status(None if not isinstance(c, float) else True),
                  "; ".join(notes))
        data[case] = dict(eager=eager_us, dynamo=d, cdynamo=c, graphs=graphs)
    return [table], data


if __name__ == "__main__":
    C.bench_main(run, __doc__)
