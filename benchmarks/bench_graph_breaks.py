# Graph breaks: first-call time of all graphs and continuations (seeds' bar, a break-heavy chain), how that
# time grows with the number of breaks, and the steady-state overhead of a function with one break:
# torch._dynamo vs cdynamo.

import sys

import torch

try:
    from . import common as C
except ImportError:  # run as a script
    import common as C

SPEEDUP_TARGET = 10.0   # dynamo first-call time / cdynamo first-call time >= 10x
RATIO_TARGET = 1 / 3    # cdynamo per-call overhead / dynamo per-call overhead <= 1/3
N_BREAKS = 8            # conditional breaks in the break-heavy chain
SCALING_NS = (50, 200, 800, 3200)   # .item() breaks in the scaling chain (issue 10 item 6)
SCALING_TARGET = 6.0    # time(4n breaks) / time(n breaks) <= 6 (linear = 4), for 200 -> 800 and 800 -> 3200
DYNAMO_SCALING_MAX = 50  # torch._dynamo is measured only up to this many breaks (206 s at 200)


def bar(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def make_break_chain(n):
    """n segments of 3 ops, each followed by a data-dependent branch (always taken at run time)."""
    lines = [f"def break_chain_{n}(x, y):"]
    for i in range(n):
        lines += ["    x = torch.sin(x) * 1.01 + y", "    if x.sum() > -1e9:", "        x = x.tanh()"]
    lines.append("    return x")
    ns = {"torch": torch}
    exec(compile("\n".join(lines) + "\n", f"<break_chain_{n}>", "exec"), ns)
    return ns[f"break_chain_{n}"]


def make_item_chain(n):
    """n statements `t = t + t.sum().item() * 0`: each .item() is a graph break (issue 10 item 6)."""
    lines = [f"def item_chain_{n}(t):"] + ["    t = t + t.sum().item() * 0"] * n + ["    return t"]
    ns = {}
    exec(compile("\n".join(lines) + "\n", f"<item_chain_{n}>", "exec"), ns)
    return ns[f"item_chain_{n}"]


def scaling(dyn, cdyn, quick):
    """First-call time (every graph and continuation compiled, one call) against the number of breaks."""
    ns = SCALING_NS[:2] if quick else SCALING_NS
    t = C.Table("Graph breaks, compile time against the number of breaks (first call, eager backend)", "ms")
    x = torch.randn(8)
    cd_ms = {}
    for n in ns:
        fn = make_item_chain(n)
        ref = fn(x)
        vals, notes = {}, []
        for fe in (dyn, cdyn):
            if fe is dyn and n > DYNAMO_SCALING_MAX:
                vals[fe.name] = "-"
                continue
            old_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(old_limit, 2 * n + 1000))  # every continuation compiled (nested frames)
            try:
                ms, outs, be = first_calls_ms(fe, fn, [(x,)], 1)
                vals[fe.name] = ms
                notes.append(f"{fe.name} graphs={be.graphs}")
                if not torch.equal(outs[0], ref):
                    notes.append(f"{fe.name}: output differs from eager")
            except Exception as e:  # noqa: BLE001
                vals[fe.name] = "ERR"
                notes.append(f"{fe.name} ERROR: {C.short_error(e)}")
            finally:
                sys.setrecursionlimit(old_limit)
        cd = vals[cdyn.name]
        cd_ms[n] = cd
        growth, st, target = None, "-", "-"
        half = [m for m in ns if m < n]
        if half and isinstance(cd, float) and isinstance(cd_ms.get(half[-1]), float):
            growth = cd / cd_ms[half[-1]]
            if n == 4 * half[-1] and half[-1] >= 200:
                target, st = f"<={SCALING_TARGET:g}x of {half[-1]}", C.status(growth <= SCALING_TARGET)
            notes.append(f"cdynamo time x{growth:.2f} for x{n // half[-1]} breaks; {cd / n:.2f} ms per break")
        t.add(f"{n} .item() breaks", None, vals[dyn.name], cd, C.ratio(vals[dyn.name], cd), target, st,
              "; ".join(notes))
    t.note(f"torch._dynamo measured up to {DYNAMO_SCALING_MAX} breaks only (206 s at 200 in issue 10)")
    t.note("each break continues in a nested frame: the recursion limit is raised to 2n+1000 here so that "
           "every continuation compiles (with the default 1000, breaks past ~800 levels run as Python)")
    return t, {str(n): v for n, v in cd_ms.items()}


def first_calls_ms(frontend, fn, arg_sets, repeat):
    """First calls of a fresh copy of fn, once per arg set (both branch directions of bar, say)."""
    return C.first_calls_ms(frontend, lambda: C.fresh_copy(fn), arg_sets, repeat)


def run(quick=False):
    C.setup()
    torch.manual_seed(0)
    dyn, cdyn = C.DynamoFrontend(), C.CDynamoFrontend()
    a, b, y = torch.randn(10), torch.randn(10).abs() + 0.1, torch.randn(10)
    chain = make_break_chain(N_BREAKS)
    cases = [("bar, both branches (3 graphs)", bar, [(a, b), (a, -b)]),
             (f"chain with {N_BREAKS} breaks", chain, [(a, y)])]
    repeat = 3 if quick else 7

    t1 = C.Table("Graph breaks, first calls: every graph + continuation compiled and run", "ms")
    results = []
    for fe in (dyn, cdyn):  # pay one-time initialisation outside the measurement
        try:
            first_calls_ms(fe, bar, [(a, b)], 1)
        except Exception:  # noqa: BLE001 - reported per case below
            pass
    for label, fn, arg_sets in cases:
        refs = [fn(*args) for args in arg_sets]
        eager_ms = sum(C.loop_ns(fn, args, 200) for args in arg_sets) / 1e6
        vals, notes, graphs = {}, [], {}
        for fe in (dyn, cdyn):
            try:
                ms, outs, be = first_calls_ms(fe, fn, arg_sets, repeat)
                vals[fe.name] = ms
                graphs[fe.name] = be.graphs
                if not all(torch.allclose(o, r) for o, r in zip(outs, refs)):
                    notes.append(f"{fe.name}: output differs from eager")
            except Exception as e:  # noqa: BLE001
                vals[fe.name] = "ERR"
                notes.append(f"{fe.name} ERROR: {C.short_error(e)}")
        notes.insert(0, "graphs " + "/".join(f"{k}={v}" for k, v in graphs.items()))
        d, c = vals[dyn.name], vals[cdyn.name]
        sp = C.ratio(d, c)
        t1.add(label, eager_ms, d, c, sp, f">={SPEEDUP_TARGET:g}x", C.status(None if sp is None else sp >= SPEEDUP_TARGET),
               "; ".join(notes))
        results.append(dict(case=label, eager_ms=eager_ms, dynamo_ms=d, cdynamo_ms=c, speedup=sp, notes=notes))

    number, reps = (2000, 3) if quick else (10000, 5)
    t2 = C.Table(f"Graph breaks, cached calls: overhead over eager (median of {reps} x {number})", "us per call")
    over = {}
    steady = [("bar, one break (graph, continuation, graph)", bar, (a, b)),
              (f"chain with {N_BREAKS} breaks", chain, (a, y))]
    for label, fn, args in steady:
        vals, notes, eager_us = {}, [], None
        for fe in (dyn, cdyn):
            try:
                backend = C.CountingBackend()
                fe.reset()
                opt = fe.compile(C.fresh_copy(fn), backend)
                opt(*args)
                n_graphs = backend.graphs
                res = C.interleaved_ns({"eager": fn, "compiled": opt}, args, number, reps)
                if backend.graphs != n_graphs:
                    notes.append(f"{fe.name}: recompiled while timing")
                eager_us = C.median(res["eager"]) / 1e3
                vals[fe.name] = C.median([ci - ei for ci, ei in zip(res["compiled"], res["eager"])]) / 1e3
            except Exception as e:  # noqa: BLE001
                vals[fe.name] = "ERR"
                notes.append(f"{fe.name} ERROR: {C.short_error(e)}")
            finally:
                fe.reset()
        d, c = vals[dyn.name], vals[cdyn.name]
        r = C.ratio(c, d)
        over[label] = dict(dynamo_us=d, cdynamo_us=c, cdynamo_over_dynamo=r)
        t2.add(label, eager_us, d, c, C.ratio(d, c), f"c/d<={RATIO_TARGET:.2f}",
               C.status(None if r is None else r <= RATIO_TARGET),
               "; ".join(notes + ([f"cdynamo/dynamo overhead = {r:.3f}"] if r is not None else [])))
    t1.note("first calls = fresh code object, reset, then one call per branch direction; median of repeats")
    t3, grow = scaling(dyn, cdyn, quick)
    return [t1, t2, t3], dict(first_calls=results, overhead=over, scaling_ms=grow)


if __name__ == "__main__":
    C.bench_main(run, __doc__)
