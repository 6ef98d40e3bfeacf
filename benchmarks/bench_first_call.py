# First-call (trace + guards + codegen + backend) time: torch._dynamo vs cdynamo on a toy fn and 100/1000-op chains.

import torch

try:
    from . import common as C
except ImportError:  # run as a script
    import common as C

SPEEDUP_TARGET = 10.0      # dynamo_time / cdynamo_time >= 10x
LINEARITY_TARGET = 1.2     # cdynamo per-op(1000) / per-op(100) <= 1.2

# one op per line: torch functions, tensor methods and operators, values kept bounded by sin/tanh/sigmoid
CHAIN_OPS = [
    "x = torch.sin(x)",
    "x = x * 1.01",
    "x = x + y",
    "x = x.tanh()",
    "x = torch.cos(x)",
    "x = x - y",
    "x = x.sigmoid()",
    "x = torch.mul(x, y)",
    "x = x.relu()",
    "x = x / 1.5",
    "x = torch.add(x, 0.5)",
    "x = x.neg()",
]


def toy(x):
    a = torch.sin(x)
    b = torch.cos(x)
    return a * b


def make_chain(n):
    lines = [f"def chain_{n}(x, y):"]
    lines += ["    " + CHAIN_OPS[i % len(CHAIN_OPS)] for i in range(n)]
    lines.append("    return x")
    ns = {"torch": torch}
    exec(compile("\n".join(lines) + "\n", f"<chain_{n}>", "exec"), ns)
    return ns[f"chain_{n}"]


def measure(frontend, fn, args, repeat):
    """Median first-call time in ms over `repeat` fresh compiles; plus last output and backend."""
    ms, outs, backend = C.first_calls_ms(frontend, lambda: C.fresh_copy(fn), [args], repeat)
    return ms, outs[0], backend


def warm_up(frontends):
    """Pay one-time import/initialisation costs outside the measurement."""
    x = torch.randn(8)
    for fe in frontends:
        try:
            measure(fe, toy, (x,), 2)
            measure(fe, make_chain(12), (x, x), 1)
        except Exception:  # noqa: BLE001 - reported again per case
            pass


def run(quick=False):
    C.setup()
    torch.manual_seed(0)
    dyn, cdyn = C.DynamoFrontend(), C.CDynamoFrontend()
    warm_up([dyn, cdyn])

    x, y = torch.randn(8), torch.randn(8)
    cases = [("toy sin*cos (3 ops)", toy, (x,), 3, 3 if quick else 9),
             ("chain 100 ops", make_chain(100), (x, y), 100, 2 if quick else 5),
             ("chain 1000 ops", make_chain(1000), (x, y), 1000, 1 if quick else 3)]

    t1 = C.Table("First call: trace + guards + codegen + backend(gm)->gm.forward, incl. running it", "ms per call")
    t2 = C.Table("Tracing cost per captured op (first-call ms / ops)", "us per op")
    per_op = {}  # (frontend, n) -> us/op
    results = []

    for label, fn, args, n_ops, repeat in cases:
        ref = fn(*args)
        eager_ms = C.loop_ns(fn, args, 20 if n_ops >= 1000 else 200) / 1e6
        vals, notes, checks_ok = {}, [], True
        ops = {}
        for fe in (dyn, cdyn):
            try:
                ms, out, be = measure(fe, fn, args, repeat)
                vals[fe.name] = ms
                ops[fe.name] = be.ops
                if be.graphs != 1:
                    checks_ok = False
                    notes.append(f"{fe.name}: {be.graphs} graphs (expected 1)")
                if not (isinstance(out, torch.Tensor) and torch.allclose(out, ref, rtol=1e-5, atol=1e-6)):
                    checks_ok = False
                    notes.append(f"{fe.name}: output differs from eager")
            except Exception as e:  # noqa: BLE001 - one failing frontend must not stop the table
                vals[fe.name] = "ERR"
                notes.append(f"{fe.name} ERROR: {C.short_error(e)}")
                try:
                    fe.reset()
                except Exception:  # noqa: BLE001
                    pass
        if len(ops) == 2 and ops[dyn.name] != ops[cdyn.name]:
            checks_ok = False
            notes.append(f"op count differs: dynamo={ops[dyn.name]} cdynamo={ops[cdyn.name]}")
        ops_note = "ops " + "/".join(f"{k}={v}" for k, v in ops.items())
        notes.insert(0, ops_note)

        d, c = vals.get(dyn.name), vals.get(cdyn.name)
        sp = C.ratio(d, c)
        st = C.status(None if sp is None else sp >= SPEEDUP_TARGET)
        if sp is not None and not checks_ok:
            st = "FAIL(check)"
        t1.add(label, eager_ms, d, c, sp, f">={SPEEDUP_TARGET:g}x", st, "; ".join(notes))
        results.append(dict(case=label, n_ops=n_ops, eager_ms=eager_ms, dynamo_ms=d, cdynamo_ms=c,
                            speedup=sp, checks_ok=checks_ok, notes=notes))

        if n_ops >= 100:
            pe = eager_ms * 1e3 / n_ops
            pd = d * 1e3 / n_ops if isinstance(d, float) else d
            pc = c * 1e3 / n_ops if isinstance(c, float) else c
            per_op[("eager", n_ops)], per_op[("dyn", n_ops)], per_op[("cdyn", n_ops)] = pe, pd, pc
            sp2 = C.ratio(pd, pc)
            t2.add(f"per-op, {label}", pe, pd, pc, sp2, f">={SPEEDUP_TARGET:g}x",
                   C.status(None if sp2 is None else sp2 >= SPEEDUP_TARGET))

    def marginal(k):  # (t1000 - t100) / 900: per-op cost without the fixed per-frame cost
        a, b = per_op.get((k, 1000)), per_op.get((k, 100))
        return (a * 1000 - b * 100) / 900 if isinstance(a, float) and isinstance(b, float) else None

    mg = {k: marginal(k) for k in ("eager", "dyn", "cdyn")}
    sp3 = C.ratio(mg["dyn"], mg["cdyn"])
    t2.add("marginal per-op (t1000-t100)/900", mg["eager"], mg["dyn"], mg["cdyn"], sp3,
           f">={SPEEDUP_TARGET:g}x", C.status(None if sp3 is None else sp3 >= SPEEDUP_TARGET))
    lin = {k: C.ratio(per_op.get((k, 1000)), per_op.get((k, 100))) for k in ("eager", "dyn", "cdyn")}
    t2.add("linearity per-op(1000)/per-op(100)", lin["eager"], lin["dyn"], lin["cdyn"], None,
           f"cdynamo<={LINEARITY_TARGET:g}",
           C.status(None if lin["cdyn"] is None else lin["cdyn"] <= LINEARITY_TARGET))
    t1.note("eager = steady-state plain call of the same fn; first-call = median of fresh compiles "
            "(reset + new code object each), gc enabled")
    return [t1, t2], dict(first_call=results, linearity=lin, marginal_us_per_op=mg)


if __name__ == "__main__":
    C.bench_main(run, __doc__)
