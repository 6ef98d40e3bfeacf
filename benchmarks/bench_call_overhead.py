# Per-call overhead over eager of a cached compiled call (1/10/50 tensor inputs): torch._dynamo vs cdynamo.

import torch

try:
    from . import common as C
except ImportError:  # run as a script
    import common as C

RATIO_TARGET = 1 / 3        # cdynamo_overhead / dynamo_overhead <= 1/3
ONE_INPUT_TARGET_US = 1.0   # DESIGN: < 1 us total overhead for a one-tensor function
PER_INPUT_TARGET_NS = 20.0  # DESIGN: guard cost < 20 ns per tensor input
INPUT_COUNTS = (1, 10, 50)


def make_sum(n):
    params = ", ".join(f"x{i}" for i in range(n))
    body = "x0 + 1" if n == 1 else " + ".join(f"x{i}" for i in range(n))
    ns = {}
    exec(compile(f"def sum_{n}({params}):\n    return {body}\n", f"<sum_{n}>", "exec"), ns)
    return ns[f"sum_{n}"]


def make_stack(n):
    """One op over all inputs: same guards as the sum chain, but little eager time -> less noise."""
    params = ", ".join(f"x{i}" for i in range(n))
    ns = {"torch": torch}
    exec(compile(f"def stack_{n}({params}):\n    return torch.stack(({params},))\n", f"<stack_{n}>", "exec"), ns)
    return ns[f"stack_{n}"]


def measure_case(frontends, fn, args, number, repeat):
    """Per frontend: compiled median us/call and overhead us/call (or 'ERR'); plus eager us and notes."""
    vals, over, eager_all, notes = {}, {}, [], []
    for fe in frontends:
        try:
            e, c, _ = measure(fe, fn, args, number, repeat)
            eager_all += e
            vals[fe.name] = C.median(c) / 1e3
            over[fe.name] = C.median([ci - ei for ci, ei in zip(c, e)]) / 1e3
        except Exception as ex:  # noqa: BLE001 - report the row, keep going
            vals[fe.name] = over[fe.name] = "ERR"
            notes.append(f"{fe.name} ERROR: {C.short_error(ex)}")
    eager_us = C.median(eager_all) / 1e3 if eager_all else None
    return eager_us, vals, over, notes


def measure(frontend, fn, args, number, repeat):
    """Compile, check one graph + correct output, then time eager vs compiled interleaved.

    Only this frontend is compiled during its phase; it is reset afterwards.
    Returns (eager ns list, compiled ns list, backend).
    """
    backend = C.CountingBackend()
    frontend.reset()
    try:
        opt = frontend.compile(C.fresh_copy(fn), backend)
        out = opt(*args)
        if backend.graphs != 1:
            raise RuntimeError(f"{backend.graphs} graphs after first call (expected 1)")
        if not torch.equal(out, fn(*args)):
            raise RuntimeError("output differs from eager")
        res = C.interleaved_ns({"eager": fn, "compiled": opt}, args, number, repeat)
        if backend.graphs != 1:
            raise RuntimeError(f"recompiled during timing: {backend.graphs} graphs")
        return res["eager"], res["compiled"], backend
    finally:
        frontend.reset()


def run(quick=False):
    C.setup()
    torch.manual_seed(0)
    number, repeat = (2000, 3) if quick else (20000, 5)
    dyn, cdyn = C.DynamoFrontend(), C.CDynamoFrontend()

    raw = C.Table(f"Per call, cached (median of {repeat} x {number} calls)", "us per call")
    ovh = C.Table("Overhead over eager (median of paired compiled-eager differences)", "us per call")
    per_in = C.Table("Guard cost per tensor input: (overhead(50) - overhead(10)) / 40", "ns per input")
    overhead = {}  # (frontend name, n) -> us

    for n in INPUT_COUNTS:
        fn = make_sum(n)
        args = tuple(torch.randn(2) for _ in range(n))
        eager_us, vals, over, notes = measure_case((dyn, cdyn), fn, args, number, repeat)
        for k, v in over.items():
            overhead[(k, n)] = v
        label = f"{n} input{'s' if n > 1 else ''}"
        d, c = vals[dyn.name], vals[cdyn.name]
        raw.add(label, eager_us, d, c, C.ratio(d, c), None, "-", "; ".join(notes) or None)

        od, oc = over[dyn.name], over[cdyn.name]
        r = C.ratio(od, oc)
        cd_over_d = C.ratio(oc, od)
        ovh.add(label, None, od, oc, r, f"c/d<={RATIO_TARGET:.2f}",
                C.status(None if cd_over_d is None else cd_over_d <= RATIO_TARGET),
                None if cd_over_d is None else f"cdynamo/dynamo overhead = {cd_over_d:.3f}")
        if n == 1:
            ovh.add("1 input, absolute (DESIGN)", None, od, oc, r, f"c<{ONE_INPUT_TARGET_US:g}us",
                    C.status(None if not isinstance(oc, float) else oc < ONE_INPUT_TARGET_US))

    def per_input(o50, o10):
        if not isinstance(o50, float) or not isinstance(o10, float):
            return "ERR"
        return (o50 - o10) / 40 * 1e3  # us -> ns

    pd = per_input(overhead[(dyn.name, 50)], overhead[(dyn.name, 10)])
    pc = per_input(overhead[(cdyn.name, 50)], overhead[(cdyn.name, 10)])
    per_in.add("sum chain, 50 vs 10 inputs", None, pd, pc, C.ratio(pd, pc), f"c<{PER_INPUT_TARGET_NS:g}ns",
               C.status(None if not isinstance(pc, float) else pc < PER_INPUT_TARGET_NS))

    # low-noise variant: one torch.stack over all inputs (eager part ~10x smaller than the sum chain)
    st = {}
    st_notes = []
    for n in (10, 50):
        args = tuple(torch.randn(2) for _ in range(n))
        _, _, over, notes = measure_case((dyn, cdyn), make_stack(n), args, number, repeat)
        st[n] = over
        st_notes += [f"{n} inputs: {x}" for x in notes]
    sd = per_input(st[50][dyn.name], st[10][dyn.name])
    sc = per_input(st[50][cdyn.name], st[10][cdyn.name])
    per_in.add("one torch.stack, 50 vs 10 inputs", None, sd, sc, C.ratio(sd, sc),
               f"c<{PER_INPUT_TARGET_NS:g}ns",
               C.status(None if not isinstance(sc, float) else sc < PER_INPUT_TARGET_NS),
               "; ".join(st_notes) or None)
    return [raw, ovh, per_in], dict(overhead_us={f"{k[0]}/{k[1]}": v for k, v in overhead.items()},
                                    per_input_ns={dyn.name: pd, cdyn.name: pc},
                                    per_input_ns_stack={dyn.name: sd, cdyn.name: sc})


if __name__ == "__main__":
    C.bench_main(run, __doc__)
