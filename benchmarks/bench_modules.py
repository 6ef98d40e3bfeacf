# nn.Module and Python-coverage frontends: first-call time (eager backend) and cached steady-state call
# time of a 24-layer MLP, a small CNN-style net, a 4-layer transformer encoder, 10 nested inlined calls and a
# loop unrolled 100 times: torch._dynamo vs cdynamo (and eager). Then the inductor backend end to end:
# steady-state time of cdynamo.optimize("inductor")(model) vs torch.compile(model, backend="inductor") vs eager
# for the MLP and the transformer encoder.
import copy
import time

import torch
import torch.nn as nn

try:
    from . import common as C
except ImportError:  # run as a script
    import common as C

SPEEDUP_TARGET = 10.0


class MLP(nn.Module):
    def __init__(self, depth=24, width=64):
        super().__init__()
        self.layers = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())])

    def forward(self, x):
        return self.layers(x)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)) + y)
        return self.head(y.mean((2, 3)))


class Encoder(nn.Module):
    def __init__(self, d_model=64, nhead=4, layers=4):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=2 * d_model, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x):
        return self.encoder(x)


def _f0(x):
    return x.sin() + 1


def _make_nested(depth):
    # Defined in this module's globals (as user helpers are), each calling the previous one.
    g = globals()
    for i in range(1, depth):
        exec(f"def _f{i}(x):\n    return _f{i - 1}(x) * 1.01\n", g)
    return g[f"_f{depth - 1}"]


NESTED = _make_nested(10)


def nested_calls(x):
    return NESTED(x)


def unrolled_loop(x):
    for i in range(100):
        x = x * 1.001 + i
    return x


def first_call_ms(fe, make, args, repeat):
    ms, outs, backend = C.first_calls_ms(fe, make, [args], repeat)
    return ms, outs[0], backend


def run(quick=False):
    C.setup()
    torch.manual_seed(0)
    dyn, cdyn = C.DynamoFrontend(), C.CDynamoFrontend()
    mlp, cnn, enc = MLP().eval(), ConvNet().eval(), Encoder().eval()
    mlp_args, enc_args = (torch.randn(8, 64),), (torch.randn(4, 16, 64),)
    cases = [
        ("24-layer MLP (eval)", lambda: copy.deepcopy(mlp), mlp, mlp_args),
        ("conv/bn net (eval)", lambda: copy.deepcopy(cnn), cnn, (torch.randn(2, 3, 16, 16),)),
        ("4-layer transformer encoder (eval)", lambda: copy.deepcopy(enc), enc, enc_args),
        ("10 nested inlined calls", lambda: C.fresh_copy(nested_calls), nested_calls, (torch.randn(8),)),
        ("loop unrolled 100x", lambda: C.fresh_copy(unrolled_loop), unrolled_loop, (torch.randn(8),)),
    ]
    repeat = 2 if quick else 5
    for fe in (dyn, cdyn):  # one-time initialisation outside the measurement
        try:
            first_call_ms(fe, lambda: C.fresh_copy(nested_calls), (torch.randn(8),), 1)
        except Exception:  # noqa: BLE001
            pass
    t1 = C.Table("Modules and inlining, first call (eager backend)", "ms")
    t2 = C.Table("Modules and inlining, cached call time (median of repeats)", "us per call")
    results = []
    for label, make, ref_fn, args in cases:
        ref = ref_fn(*args)
        eager_ms = C.loop_ns(ref_fn, args, 50) / 1e6
        vals, notes, steady = {}, [], {}
        for fe in (dyn, cdyn):
            try:
                ms, out, be = first_call_ms(fe, make, args, repeat)
                vals[fe.name] = ms
                notes.append(f"{fe.name}: {be.graphs} graph(s), {be.ops} ops")
                if not torch.allclose(out, ref, rtol=1e-4, atol=1e-5):
                    notes.append(f"{fe.name}: output differs from eager")
                fe.reset()
                opt = fe.compile(make(), C.CountingBackend())
                opt(*args)
                res = C.interleaved_ns({"eager": ref_fn, "compiled": opt}, args, 200 if quick else 2000, 3)
                steady[fe.name] = C.median(res["compiled"]) / 1e3
                steady["eager"] = C.median(res["eager"]) / 1e3
            except Exception as e:  # noqa: BLE001
                vals[fe.name] = "ERR"
                notes.append(f"{fe.name} ERROR: {C.short_error(e)}")
            finally:
                fe.reset()
        d, c = vals[dyn.name], vals[cdyn.name]
        sp = C.ratio(d, c)
        t1.add(label, eager_ms, d, c, sp, f">={SPEEDUP_TARGET:g}x", C.status(None if sp is None else sp >= SPEEDUP_TARGET),
               "; ".join(notes))
        sd, sc = steady.get(dyn.name), steady.get(cdyn.name)
        ok = None if sd is None or sc is None else sc <= sd * 1.05
        t2.add(label, steady.get("eager"), sd, sc, C.ratio(sd, sc), "c<=dynamo", C.status(ok))
        results.append(dict(case=label, eager_ms=eager_ms, dynamo_ms=d, cdynamo_ms=c, speedup=sp,
                            steady_us=steady, notes=notes))
    t3, inductor = inductor_steady_state([("24-layer MLP", mlp, mlp_args),
                                          ("4-layer transformer encoder", enc, enc_args)], quick)
    return [t1, t2, t3], dict(modules=results, inductor=inductor)


class SpeedupTable(C.Table):
    """Steady-state times (us per call) and ratios: speedup over eager of each frontend, cdynamo / torch.compile."""

    HEAD = ("case", "eager", "torch.compile", "cdynamo", "eager/torch.compile", "eager/cdynamo",
            "cdynamo/torch.compile", "target", "status")

    def add(self, case, eager, tc, cd, note=None):  # Table.add's role, with these columns
        rel = C.ratio(cd, tc)
        self.rows.append((case, C.fmt(eager), C.fmt(tc), C.fmt(cd), _x(C.ratio(eager, tc)),
                          _x(C.ratio(eager, cd)), _x(rel), "<=1.05x",
                          C.status(None if rel is None else rel <= 1.05)))
        if note:
            self.notes.append(f"{case}: {note}")


def _x(r):
    return "-" if r is None else C.fmt(r) + "x"


def _graph_count(frontend):
    """Graphs the frontend has compiled (a running count: torch._dynamo.reset() keeps it)."""
    if isinstance(frontend, C.CDynamoFrontend):
        return frontend.mod._callback.counters["graphs"]
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def _inductor_compile(frontend, model):
    if isinstance(frontend, C.CDynamoFrontend):
        if frontend.mod is None:
            raise RuntimeError(frontend.error)
        return frontend.mod.optimize("inductor")(model)
    return torch.compile(model, backend="inductor")


def inductor_steady_state(cases, quick):
    """Both frontends with the inductor backend, models in eval mode under torch.no_grad() (inference): the
    first call (compile) is timed once, then eager and both compiled models are timed interleaved."""
    frontends = {"torch.compile": C.DynamoFrontend(), "cdynamo": C.CDynamoFrontend()}
    table = SpeedupTable("Inductor backend, cached call time (eval, no_grad; median of repeats)", "us per call")
    results = []
    for label, model, args in cases:
        fns, notes = {}, []
        with torch.no_grad():
            ref = model(*args)
            for name, fe in frontends.items():
                try:
                    fe.reset()
                    graphs_before = _graph_count(fe)
                    t0 = time.perf_counter()
                    fn = _inductor_compile(fe, copy.deepcopy(model))
                    out = fn(*args)
                    notes.append(f"{name}: first call {time.perf_counter() - t0:.1f} s, "
                                 f"{_graph_count(fe) - graphs_before} graph(s)")
                    if not torch.allclose(out, ref, rtol=1e-3, atol=1e-4):
                        notes.append(f"{name}: output differs from eager")
                    fns[name] = fn
                except Exception as e:  # noqa: BLE001
                    notes.append(f"{name} ERROR: {C.short_error(e)}")
            res = C.interleaved_ns({"eager": model, **fns}, args, 100 if quick else 500, 3, warmup=20)
        us = {k: C.median(v) / 1e3 for k, v in res.items()}
        table.add(label, us.get("eager"), us.get("torch.compile"), us.get("cdynamo"), "; ".join(notes))
        results.append(dict(case=label, steady_us=us, notes=notes))
        for fe in frontends.values():
            try:
                fe.reset()
            except Exception:  # noqa: BLE001 - cdynamo missing: nothing to reset
                pass
    return table, results


if __name__ == "__main__":
    C.bench_main(run, __doc__)
