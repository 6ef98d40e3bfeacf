# A compiled torch.optim Adam step (an MLP's parameters, single-tensor path as torch defaults on CPU): first call (trace, state initialised at trace time, eager backend) and steady-state time per step, eager vs torch.compile(backend=eager) vs cdynamo, side by side in one process, with graphs, ops and graphs after repeated steps.
import sys

import torch

try:
    from . import common as C
except ImportError:  # run as a script
    import common as C

STEPS = 6  # steps counted for recompiles


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 10))


def _setup():
    """A model with gradients and a fresh Adam over it, and the step function a frontend compiles."""
    model = _model()
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
    model(x).square().mean().backward()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.step()

    return model, opt, step


def run(quick=False):
    C.setup()
    dyn, cdyn = C.DynamoFrontend(), C.CDynamoFrontend()
    t1 = C.Table("Adam step, first call (eager backend: trace, state init, compile, run)", "ms")
    t2 = C.Table("Adam step, steady state (median of interleaved repeats)", "us per step")
    repeat = 3 if quick else 5
    number = 50 if quick else 200

    # first call: a fresh optimizer (empty state) each repeat
    eager_first = []
    for _ in range(repeat):
        _, _, step = _setup()
        ns, _ = C.time_once_ns(step)
        eager_first.append(ns / 1e6)
    first, notes, steps = {}, [], {}
    for fe in (dyn, cdyn):
        times = []
        try:
            for _ in range(repeat):
                fe.reset()
                model, opt, step = _setup()
                be = C.CountingBackend()
                compiled = fe.compile(step, be)
                ns, _ = C.time_once_ns(compiled)
                times.append(ns / 1e6)
            for _ in range(STEPS - 1):
                compiled()
            notes.append(f"{fe.name}: {be.op_counts[:1]} op(s) in the first graph, {be.graphs} graph(s) after "
                         f"{STEPS} steps")
            # parameters after STEPS steps against eager's
            ref_model, _, ref_step = _setup()
            for _ in range(STEPS):
                ref_step()
            same = all(torch.allclose(a, b, atol=1e-6, rtol=1e-5)
                       for a, b in zip(model.parameters(), ref_model.parameters()))
            if not same:
                notes.append(f"{fe.name}: parameters differ from eager")
            first[fe.name] = C.median(times)
            steps[fe.name] = compiled
        except Exception as e:  # noqa: BLE001
            first[fe.name] = "ERR"
            notes.append(f"{fe.name}: {C.short_error(e)}")
    rat = C.ratio(first.get(dyn.name), first.get(cdyn.name))
    t1.add("Adam (6 params, 26k elements)", C.median(eager_first), first.get(dyn.name), first.get(cdyn.name), rat,
           ">=1x", C.status(None if rat is None else rat >= 1.0))
    for n in notes:
        t1.note(n)

    # steady state: each frontend steps its own model and optimizer (state initialised by the runs above)
    if dyn.name in steps and cdyn.name in steps:
        _, _, eager_step = _setup()
        eager_step()
        res = C.interleaved_ns({"eager": eager_step, dyn.name: steps[dyn.name], cdyn.name: steps[cdyn.name]}, (),
                               number, repeat, warmup=20)
        e, d, c = (C.median(res[k]) / 1e3 for k in ("eager", dyn.name, cdyn.name))
        rat = C.ratio(d, c)
        t2.add("Adam step", e, d, c, rat, ">=1x", C.status(rat >= 1.0))
        t2.note(f"cdynamo/eager {c / e:.2f}x, torch._dynamo/eager {d / e:.2f}x")
    return [t1, t2], {"first_ms": first, "notes": notes}


if __name__ == "__main__":
    for t in run(quick="--quick" in sys.argv)[0]:
        t.print()
