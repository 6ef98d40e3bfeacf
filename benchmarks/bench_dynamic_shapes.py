# Dynamic shapes (issue 14, item 7): over 20 input lengths, total time of the first call at each length (compiles
# included) and the number of compiles, cdynamo vs torch._dynamo (same backend: eager, aot_eager) vs eager; then
# the per-call cost of a cached call whose input length changes every call (after warm-up over the 20 lengths).
"""Both frontends run with their defaults (automatic dynamic shapes: each compiles once static, once with the changed
dimension dynamic, then every later length hits that graph). The "resnet18" rows run timm's resnet18 (random
weights, 64x64 images) over 8 batch sizes instead of 20 lengths, when timm is installed."""
import gc
import time
import warnings

import torch
import torch.nn as nn

try:
    from . import common as C
except ImportError:  # run as a script
    import common as C

LENGTHS = tuple(range(8, 168, 8))   # 20 sequence lengths: 8, 16, ..., 160
OVERHEAD_RATIO_TARGET = 1 / 3     # cdynamo overhead / torch._dynamo overhead, as for static shapes


def seq_fn(x):
    """Shape-dependent: sizes read, arithmetic on them, views from them."""
    b, t, c = x.shape
    y = torch.tanh(x.reshape(b * t, c)) * 2 + 1
    return y.view(b, t, c).sum(1) / t


class Block(nn.Module):
    """Linear + LayerNorm + scaled attention over (batch, seq, 16)."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.ln = nn.LayerNorm(16)

    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).chunk(3, dim=-1)
        s = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        return x + torch.softmax(s, dim=-1) @ v


def small_fn(x):
    return x.view(x.shape[0], -1) * 2


BATCHES = tuple(range(2, 10))   # resnet18 rows: 8 batch sizes


def _timm_models():
    import os
    import sys
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(here, "tests", "py"))
    import vision_shim  # noqa: F401  (before timm imports torchvision: its C++ extension may not load)
    import timm_zoo_models
    return timm_zoo_models.MODELS


def make_target(kind):
    if kind == "fn":
        return C.fresh_copy(seq_fn)
    torch.manual_seed(0)
    if kind == "resnet18":
        return _timm_models()["resnet18"]()[0].eval()
    return Block().eval()


def inputs(kind, lengths):
    g = torch.Generator().manual_seed(0)
    if kind == "resnet18":
        return [(torch.randn(b, 3, 64, 64, generator=g),) for b in BATCHES]
    return [(torch.randn(2, t, 16, generator=g),) for t in lengths]


def kinds():
    try:
        _timm_models()
        return ("fn", "module", "resnet18")
    except ImportError:
        return ("fn", "module")


class Counting:
    """A frontend's own backend (looked up by name), counting the graphs it is given."""

    def __init__(self, inner):
        self.inner = inner
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return self.inner(gm, example_inputs)


def lookup(fe, name):
    if fe.name == "cdynamo":
        return fe.mod.lookup_backend(name)
    from torch._dynamo.backends.registry import lookup_backend
    return lookup_backend(name)


def fallback_warnings(caught):
    return [w for w in caught if "recompile" in str(w.message).lower() or "limit" in str(w.message).lower()]


def lengths_run(fe, kind, backend, arg_sets, repeat):
    """Median over `repeat` fresh compiles of the total time of one call per length (every compile included);
    plus compiles, whether the frontend gave up (recompile limit) and the outputs of the last repeat."""
    times, outs, be, gave_up = [], None, None, False
    for _ in range(repeat):
        target = make_target(kind)
        be = Counting(lookup(fe, backend))
        fe.reset()
        gc.collect()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter_ns()
            opt = fe.compile(target, be)
            with torch.no_grad():
                outs = [opt(*a) for a in arg_sets]
            times.append(time.perf_counter_ns() - t0)
        gave_up = bool(fallback_warnings(caught))
    fe.reset()
    return C.median(times) / 1e6, be.graphs, gave_up, outs


def run_lengths(dyn, cdyn, quick):
    table = C.Table(f"{len(LENGTHS)} input lengths ({LENGTHS[0]}..{LENGTHS[-1]}; resnet18: batch {BATCHES[0]}.."
                    f"{BATCHES[-1]}), one call each: total time, "
                    f"compiles included (median of fresh compiles)", "ms for all calls")
    repeat = 1 if quick else 3
    res = []
    for kind in kinds():
        arg_sets = inputs(kind, LENGTHS)
        target = make_target(kind)
        with torch.no_grad():
            refs = [target(*a) for a in arg_sets]
            t0 = time.perf_counter_ns()
            for a in arg_sets:
                target(*a)
            eager_ms = (time.perf_counter_ns() - t0) / 1e6
        for backend in ("eager", "aot_eager"):
            vals, notes, counts = {}, [], {}
            for fe in (dyn, cdyn):
                try:
                    ms, graphs, gave_up, outs = lengths_run(fe, kind, backend, arg_sets, repeat)
                    vals[fe.name], counts[fe.name] = ms, graphs
                    bad = [i for i, (o, r) in enumerate(zip(outs, refs)) if not torch.allclose(o, r, atol=1e-5)]
                    notes.append(f"{fe.name}: {graphs} compiles" + (
                        f", then ran as plain Python (recompile limit) for the other {len(arg_sets) - graphs} sizes"
                        if gave_up else ""))
                    if bad:
                        notes.append(f"{fe.name}: differs from eager at calls {bad}")
                except Exception as e:  # noqa: BLE001
                    vals[fe.name] = "ERR"
                    notes.append(f"{fe.name} ERROR: {C.short_error(e)}")
            d, c = vals.get(dyn.name), vals.get(cdyn.name)
            r = C.ratio(d, c)
            dc, cc = counts.get(dyn.name), counts.get(cdyn.name)
            ok = None if dc is None or cc is None else cc <= dc
            table.add(f"{kind}, {backend}", eager_ms, d, c, r, "compiles<=dynamo", C.status(ok), "; ".join(notes))
            res.append(dict(case=f"{kind}/{backend}", eager_ms=eager_ms, dynamo_ms=d, cdynamo_ms=c,
                            dynamo_compiles=dc, cdynamo_compiles=cc, notes=notes))
    table.note("eager = the same calls without compiling; ratio = dynamo/cdynamo time (higher: cdynamo faster); "
               "status compares compile counts (issue 14's target: cdynamo compiles as torch._dynamo does)")
    return table, res


def cycling_ns(fn, arg_sets, number):
    """Mean ns per call over `number` calls cycling through arg_sets (a new length each call), gc off."""
    n = len(arg_sets)
    gc_was = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        for i in range(number):
            fn(*arg_sets[i % n])
        return (time.perf_counter_ns() - t0) / number
    finally:
        if gc_was:
            gc.enable()


def run_cached(dyn, cdyn, quick):
    """Per-call time of small_fn with a new length each call, after each frontend has seen all 20 lengths."""
    table = C.Table("Cached call, length changes every call (after warm-up over the 20 lengths)", "us per call")
    ovh = C.Table("Overhead over eager of that call (median of paired compiled-eager differences)", "us per call")
    number, repeat = (400, 3) if quick else (4000, 7)
    res = {}
    for label, lengths in ((f"{len(LENGTHS)} lengths cycled", LENGTHS), ("one length (static)", LENGTHS[:1])):
        arg_sets = [(torch.randn(t, 4),) for t in lengths]
        fns, notes, counters = {"eager": small_fn}, [], {}
        for fe in (dyn, cdyn):
            try:
                fe.reset()
                be = Counting(lookup(fe, "eager"))
                opt = fe.compile(C.fresh_copy(small_fn), be)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    for a in arg_sets * 2:
                        if not torch.equal(opt(*a), small_fn(*a)):
                            raise RuntimeError(f"differs from eager at length {a[0].shape[0]}")
                gave_up = bool(fallback_warnings(caught))
                notes.append(f"{fe.name}: {be.graphs} compiles" + (
                    "; recompile limit reached: the calls timed below run small_fn as plain Python" if gave_up else ""))
                fns[fe.name] = opt
                counters[fe.name] = be
            except Exception as e:  # noqa: BLE001
                notes.append(f"{fe.name} ERROR: {C.short_error(e)}")
        # interleaved rounds (both frontends' caches stay warm: torch.compile and cdynamo wrappers coexist)
        for f in fns.values():
            cycling_ns(f, arg_sets, 100)
        before = {k: b.graphs for k, b in counters.items()}
        times = {k: [] for k in fns}
        for _ in range(repeat):
            for k, f in fns.items():
                times[k].append(cycling_ns(f, arg_sets, number))
        for k, b in counters.items():
            if b.graphs != before[k]:
                notes.append(f"{k}: compiled {b.graphs - before[k]} more graphs while timed")
        e = C.median(times["eager"]) / 1e3
        vals = {k: C.median(v) / 1e3 for k, v in times.items()}
        over = {k: C.median([a - b for a, b in zip(times[k], times["eager"])]) / 1e3 for k in times if k != "eager"}
        d, c = vals.get(dyn.name), vals.get(cdyn.name)
        table.add(label, e, d, c, C.ratio(d, c), None, "-", "; ".join(notes))
        od, oc = over.get(dyn.name), over.get(cdyn.name)
        cd = C.ratio(oc, od)
        ovh.add(label, None, od, oc, C.ratio(od, oc), f"c/d<={OVERHEAD_RATIO_TARGET:.2f}",
                C.status(None if cd is None else cd <= OVERHEAD_RATIO_TARGET),
                None if cd is None else f"cdynamo/dynamo overhead = {cd:.3f}")
        res[label] = dict(eager_us=e, us=vals, overhead_us=over, notes=notes)
    for fe in (dyn, cdyn):
        fe.reset()
    if any("recompile limit" in n for r in res.values() for n in r["notes"]):
        ovh.note("cdynamo ran as plain Python after its recompile limit (notes above): its row measures that fallback "
                 "(failing guards of every entry, then Python), not a compiled dynamic call; no result for issue 14")
    return [table, ovh], res


def run(quick=False):
    C.setup()
    torch.manual_seed(0)
    dyn, cdyn = C.DynamoFrontend(), C.CDynamoFrontend()
    # one-time import / initialisation costs (aot_autograd, fake tensors) outside the measurement
    for fe in (dyn, cdyn):
        for backend in ("eager", "aot_eager"):
            try:
                lengths_run(fe, "fn", backend, inputs("fn", LENGTHS[:3]), 1)
            except Exception:  # noqa: BLE001 - reported again per row
                pass
    t1, r1 = run_lengths(dyn, cdyn, quick)
    t23, r2 = run_cached(dyn, cdyn, quick)
    if cdyn.mod is not None:
        t1.note(f"cdynamo config.recompile_limit = {cdyn.mod.config.recompile_limit}; "
                f"automatic_dynamic_shapes: {getattr(cdyn.mod.config, 'automatic_dynamic_shapes', 'not in config')}"
                if hasattr(cdyn.mod.config, "recompile_limit") else "")
    return [t1] + t23, dict(lengths=r1, cached=r2)


if __name__ == "__main__":
    import cdynamo

    cdynamo.config.automatic_dynamic_shapes = True  # the default of both; set so an edited config cannot skew rows
    C.bench_main(run, __doc__)
