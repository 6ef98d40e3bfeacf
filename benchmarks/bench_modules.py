# nn.Module and Python-coverage frontends: first-call time (eager backend) and cached steady-state call
# time of a 24-layer MLP, a small CNN-style net, 10 nested inlined calls and a loop unrolled 100 times:
# torch._dynamo vs cdynamo (and eager).
import copy

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
    mlp, cnn = MLP().eval(), ConvNet().eval()
    cases = [
        ("24-layer MLP (eval)", lambda: copy.deepcopy(mlp), mlp, (torch.randn(8, 64),)),
        ("conv/bn net (eval)", lambda: copy.deepcopy(cnn), cnn, (torch.randn(2, 3, 16, 16),)),
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
    return [t1, t2], dict(modules=results)


if __name__ == "__main__":
    C.bench_main(run, __doc__)
