# Shared helpers for the cdynamo benchmarks: timing, counting backend, frontends, result tables.
import gc
import os
import statistics
import sys
import time
import traceback
import types

import torch

# ---------------------------------------------------------------------------
# environment


def setup():
    """One thread for stable numbers; make sure the repo's benchmarks dir is importable."""
    torch.set_num_threads(1)
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)


def machine_info():
    import platform

    return (f"Python {platform.python_version()}, torch {torch.__version__}, "
            f"{os.cpu_count()} cores, torch threads {torch.get_num_threads()}, "
            f"{platform.machine()} {platform.system()}, load avg {os.getloadavg()[0]:.2f}")


# ---------------------------------------------------------------------------
# timing


def time_once_ns(fn, *args):
    """Wall time of one call (ns) and its result."""
    t0 = time.perf_counter_ns()
    out = fn(*args)
    return time.perf_counter_ns() - t0, out


def loop_ns(fn, args, number):
    """Mean ns per call of fn(*args) over `number` calls, gc disabled (like timeit)."""
    gc_was = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        for _ in range(number):
            fn(*args)
        t1 = time.perf_counter_ns()
    finally:
        if gc_was:
            gc.enable()
    return (t1 - t0) / number


def interleaved_ns(fns, args, number, repeat, warmup=200):
    """Time several callables on the same args, round-robin per repeat (so slow drift hits all alike).

    fns: dict name -> callable. Returns dict name -> list of ns/call (one entry per repeat).
    """
    for f in fns.values():
        for _ in range(warmup):
            f(*args)
    res = {name: [] for name in fns}
    for _ in range(repeat):
        for name, f in fns.items():
            res[name].append(loop_ns(f, args, number))
    return res


def median(xs):
    return statistics.median(xs)


# ---------------------------------------------------------------------------
# backend that counts graphs / ops and runs the graph as-is


def count_ops(gm):
    return sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method"))


class CountingBackend:
    """backend(gm, example_inputs) -> gm.forward; records the op count of every graph it receives."""

    def __init__(self):
        self.op_counts = []

    def __call__(self, gm, example_inputs):
        self.op_counts.append(count_ops(gm))
        return gm.forward

    @property
    def graphs(self):
        return len(self.op_counts)

    @property
    def ops(self):
        return sum(self.op_counts)


# ---------------------------------------------------------------------------
# frontends: never both active at once -- each compiled fn is called on its own


def fresh_copy(fn):
    """A new function object with a new code object, so no frontend sees a warmed cache."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


_CDYNAMO = None

PROBE_TIMEOUT_S = 60
_PROBE = ("import cdynamo, cdynamo._C, torch\n"
          "f = cdynamo.optimize('eager')(lambda x: torch.sin(x))\n"
          "x = torch.randn(3)\n"
          "assert torch.equal(f(x), torch.sin(x))\n")


def probe_cdynamo(timeout=PROBE_TIMEOUT_S):
    """Smoke-test cdynamo in a subprocess, so a hang or a crash cannot take the benchmark down.

    Returns None if it works, else an error string (with the tail of the child's stderr).
    """
    import subprocess

    try:
        r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", _PROBE], capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return (f"cdynamo smoke test (optimize('eager')(torch.sin) first call) hung: "
                f"no result after {timeout}s")
    if r.returncode != 0:
        tail = " | ".join(r.stderr.strip().splitlines()[-3:])
        return f"cdynamo smoke test failed (exit code {r.returncode}): {tail}"
    return None


def load_cdynamo(probe=True):
    """(module, None) or (None, error string). Imported lazily so eager/dynamo still run without it."""
    global _CDYNAMO
    if _CDYNAMO is None:
        err = probe_cdynamo() if probe and os.environ.get("CDYNAMO_BENCH_NO_PROBE") != "1" else None
        if err:
            _CDYNAMO = (None, err)
            return _CDYNAMO
        try:
            import cdynamo
            import cdynamo._C  # noqa: F401
            _CDYNAMO = (cdynamo, None)
        except Exception as e:  # noqa: BLE001 - report any failure as a row error
            _CDYNAMO = (None, f"import cdynamo failed: {type(e).__name__}: {e}")
    return _CDYNAMO


class Frontend:
    name = "?"

    def reset(self):
        raise NotImplementedError

    def compile(self, fn, backend):
        raise NotImplementedError


class DynamoFrontend(Frontend):
    name = "torch._dynamo"

    def reset(self):
        import torch._dynamo
        torch._dynamo.reset()

    def compile(self, fn, backend):
        return torch.compile(fn, backend=backend)


class CDynamoFrontend(Frontend):
    name = "cdynamo"

    def __init__(self):
        self.mod, self.error = load_cdynamo()

    def reset(self):
        if self.mod is None:
            raise RuntimeError(self.error)
        self.mod.reset()

    def compile(self, fn, backend):
        if self.mod is None:
            raise RuntimeError(self.error)
        return self.mod.optimize(backend)(fn)


def short_error(e):
    msg = f"{type(e).__name__}: {e}".strip().splitlines()
    return msg[0][:200] if msg else type(e).__name__


def format_exc_tail(limit=3):
    return "".join(traceback.format_exc(limit=-limit)).rstrip()


# ---------------------------------------------------------------------------
# tables


def fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 10:
        return f"{v:.2f}"
    return f"{v:.{digits}f}"


def ratio(a, b):
    """a / b, or None when either is missing or b is not positive."""
    if a is None or b is None or isinstance(a, str) or isinstance(b, str) or b <= 0:
        return None
    return a / b


def status(ok):
    if ok is None:
        return "ERR"
    return "PASS" if ok else "MISS"


class Table:
    """rows = cases; columns = eager / torch._dynamo / cdynamo, ratio dynamo/cdynamo, target, PASS/MISS."""

    HEAD = ("case", "eager", "torch._dynamo", "cdynamo", "dynamo/cdynamo", "target", "status")

    def __init__(self, title, unit):
        self.title = title
        self.unit = unit
        self.rows = []
        self.notes = []

    def add(self, case, eager, dyn, cdyn, rat, target, st, note=None):
        self.rows.append((case, fmt(eager), fmt(dyn), fmt(cdyn),
                          (fmt(rat) + "x") if isinstance(rat, (int, float)) else fmt(rat),
                          target or "-", st))
        if note:
            self.notes.append(f"{case}: {note}")

    def note(self, text):
        self.notes.append(text)

    def render(self):
        cells = [self.HEAD] + self.rows
        widths = [max(len(str(r[i])) for r in cells) for i in range(len(self.HEAD))]
        lines = [f"## {self.title}  [{self.unit}]"]
        sep = "  "
        for j, r in enumerate(cells):
            parts = [str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i])
                     for i, c in enumerate(r)]
            lines.append(sep.join(parts).rstrip())
            if j == 0:
                lines.append(sep.join("-" * w for w in widths))
        for n in self.notes:
            lines.append(f"  * {n}")
        return "\n".join(lines)

    def print(self):
        print(self.render(), flush=True)
        print(flush=True)


def first_calls_ms(frontend, make, arg_sets, repeat):
    """Median over `repeat` fresh compiles of the time to wrap a fresh target and call it once per arg set
    (every graph and continuation those calls need). `make()` returns a new function or module, so no
    frontend sees a warm cache. Returns (ms, outputs of the last repeat, its backend)."""
    times, outs, backend = [], None, None
    for _ in range(repeat):
        target = make()
        backend = CountingBackend()
        frontend.reset()
        gc.collect()
        t0 = time.perf_counter_ns()
        opt = frontend.compile(target, backend)
        outs = [opt(*args) for args in arg_sets]
        times.append(time.perf_counter_ns() - t0)
    frontend.reset()
    return median(times) / 1e6, outs, backend


def zoo_model_rows(name, build, main, dyn, cdyn, t1, t2, number, calls, speedup_target):
    """One library model of a zoo (``build() -> (model, make_inputs(seed))``, eval, no_grad): its first call
    under each frontend (eager backend, every graph compiled; row in ``t1``), graphs/ops and graphs after
    ``calls`` same-shape calls, output checked against eager through ``main``, and the steady-state call
    time of eager and both frontends, interleaved (row in ``t2``). Returns the result dict."""
    torch.manual_seed(0)
    model, make_inputs = build()
    model.eval()
    kwargs = make_inputs(0)
    call = lambda m: m(**kwargs)  # noqa: E731
    with torch.no_grad():
        ref = main(model(**kwargs))
        eager_ms = loop_ns(lambda: call(model), (), 5) / 1e6
        vals, notes, steady, compiled = {}, [], {}, {}
        for fe in (dyn, cdyn):
            try:
                fe.reset()
                be = CountingBackend()
                opt = fe.compile(model, be)
                t0 = time.perf_counter()
                out = main(opt(**kwargs))
                vals[fe.name] = (time.perf_counter() - t0) * 1e3
                first_graphs = be.graphs
                for s in range(1, calls):
                    opt(**make_inputs(s))
                notes.append(f"{fe.name}: {first_graphs} graph(s), {be.ops} ops, {be.graphs} graphs after "
                             f"{calls} calls")
                if not torch.allclose(out, ref, rtol=1e-4, atol=1e-5):
                    notes.append(f"{fe.name}: output differs from eager")
                compiled[fe.name] = opt
            except Exception as e:  # noqa: BLE001
                vals[fe.name] = "ERR"
                notes.append(f"{fe.name} ERROR: {short_error(e)}")
        if len(compiled) == 2:
            fns = {"eager": lambda: call(model)}
            fns.update({k: (lambda o=o: call(o)) for k, o in compiled.items()})
            res = interleaved_ns(fns, (), number, 3, warmup=40)  # past any recompile cap
            steady = {k: median(v) / 1e3 for k, v in res.items()}
        for fe in (dyn, cdyn):
            fe.reset()
    d, c = vals.get(dyn.name), vals.get(cdyn.name)
    sp = ratio(d, c)
    t1.add(name, eager_ms, d, c, sp, f">={speedup_target:g}x",
           status(None if sp is None else sp >= speedup_target), "; ".join(notes))
    sd, sc = steady.get(dyn.name), steady.get(cdyn.name)
    ok = None if sd is None or sc is None else sc <= sd * 1.05
    t2.add(name, steady.get("eager"), sd, sc, ratio(sd, sc), "c<=dynamo", status(ok))
    return dict(model=name, eager_ms=eager_ms, dynamo_ms=d, cdynamo_ms=c, speedup=sp, steady_us=steady, notes=notes)


def inductor_steady(build, main, dyn, cdyn, number):
    """Steady-state us per eval call under no_grad: eager, torch.compile(model) (inductor), cdynamo.compile(model,
    "inductor"); `main(out)` picks the tensor compared with eager. Returns ({frontend: us}, notes)."""
    torch.manual_seed(0)
    model, make_inputs = build()
    model.eval()
    kwargs = make_inputs(0)
    call = lambda m: m(**kwargs)  # noqa: E731
    compiled, notes, compile_s = {}, [], {}
    with torch.no_grad():
        ref = call(model)
        for fe, opt in ((dyn, lambda: torch.compile(model)), (cdyn, lambda: cdyn.compile(model, "inductor"))):
            try:
                fe.reset()
                t0 = time.perf_counter()
                o = opt()
                out = call(o)
                compile_s[fe.name] = time.perf_counter() - t0
                if not torch.allclose(main(out), main(ref), rtol=1e-4, atol=1e-4):
                    notes.append(f"{fe.name}: output differs from eager")
                compiled[fe.name] = o
            except Exception as e:  # noqa: BLE001
                notes.append(f"{fe.name} ERROR: {short_error(e)}")
        steady = {}
        if len(compiled) == 2:
            fns = {"eager": lambda: call(model)}
            fns.update({k: (lambda o=o: call(o)) for k, o in compiled.items()})
            res = interleaved_ns(fns, (), number, 3, warmup=10)
            steady = {k: median(v) / 1e3 for k, v in res.items()}
    for fe in (dyn, cdyn):
        fe.reset()
    notes.append("first call (compile + run) " + ", ".join(f"{k} {v:.1f} s" for k, v in compile_s.items())
                 + " (cdynamo's second compile of the same graph may hit inductor's FX graph cache)")
    return steady, notes


def add_inductor_row(table, name, steady, notes, dyn, cdyn):
    """One row of an inductor steady-state table: eager, torch.compile, cdynamo, ratio, and the 1.05x target."""
    sd, sc = steady.get(dyn.name), steady.get(cdyn.name)
    ok = None if sd is None or sc is None else sc <= sd * 1.05
    table.add(name, steady.get("eager"), sd, sc, ratio(sd, sc), "c<=dynamo", status(ok), "; ".join(notes))


def bench_main(run, description=None):
    """Command line of a single benchmark module: `--quick`, then print its tables."""
    import argparse

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--quick", action="store_true", help="fewer repeats/iterations (noisier)")
    a = ap.parse_args()
    tables, _ = run(quick=a.quick)
    for t in tables:
        t.print()
