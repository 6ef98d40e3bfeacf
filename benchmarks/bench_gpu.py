# GPU per-call time of small models (an MLP, a transformer encoder layer, a small conv net) compiled with inductor under mode="default" and mode="reduce-overhead" (CUDA graphs): torch.compile vs cdynamo.compile vs eager, interleaved in one process; plus first-call (compile) time. Skipped without CUDA.
import sys
import time

import torch
import torch._dynamo

try:
    from . import common as C
except ImportError:  # run as a script
    import common as C

MODES = ("default", "reduce-overhead")


def _models():
    def mlp():
        return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64),
                                   torch.nn.GELU(), torch.nn.Linear(64, 10)), torch.randn(8, 64)

    def encoder():
        return torch.nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True), torch.randn(4, 32, 128)

    def convnet():
        return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                                   torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
                                   torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                   torch.nn.Linear(32, 10)), torch.randn(8, 3, 32, 32)
    return {"mlp": mlp, "encoder_layer": encoder, "convnet": convnet}


def _per_call_us(fns, x, number, repeat):
    """Median us per call over `repeat` interleaved rounds of `number` calls, synchronised per round."""
    res = {k: [] for k in fns}
    for _ in range(repeat):
        for k, f in fns.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(number):
                f(x)
            torch.cuda.synchronize()
            res[k].append((time.perf_counter_ns() - t0) / number / 1e3)
    return {k: C.median(v) for k, v in res.items()}


def run(quick=False):
    C.setup()
    if not torch.cuda.is_available():
        t = C.Table("GPU per-call time (skipped: no CUDA device)", "-")
        return [t], {}
    cd, err = C.load_cdynamo()
    number, repeat = (50, 5) if quick else (200, 15)
    tables, results = [], []
    first = C.Table("GPU first call (compile + run), inductor", "ms")
    for mode in MODES:
        t = C.Table(f"GPU steady-state call, inductor mode={mode!r} (median of interleaved rounds)", "us per call")
        for name, make in _models().items():
            torch.manual_seed(0)
            model, x = make()
            model = model.cuda().eval()
            x = x.cuda()
            torch._dynamo.reset()
            cd.reset()
            with torch.no_grad():
                t0 = time.perf_counter()
                dm = torch.compile(model, mode=mode)
                ref = dm(x)
                torch.cuda.synchronize()
                d_first = (time.perf_counter() - t0) * 1e3
                t0 = time.perf_counter()
                cm = cd.compile(model, mode=mode)
                got = cm(x)
                torch.cuda.synchronize()
                c_first = (time.perf_counter() - t0) * 1e3
                ok = torch.allclose(got, model(x), atol=1e-3, rtol=1e-3) and torch.allclose(ref, model(x), atol=1e-3,
                                                                                             rtol=1e-3)
                for _ in range(5):  # past CUDA-graph recording
                    dm(x), cm(x)
                us = _per_call_us({"eager": model, "dynamo": dm, "cdynamo": cm}, x, number, repeat)
            rat = us["dynamo"] / us["cdynamo"]
            t.add(name, us["eager"], us["dynamo"], us["cdynamo"], rat, ">= 1x", C.status(rat >= 1.0 and ok),
                  None if ok else "results differ from eager")
            first.add(f"{name} ({mode})", None, d_first, c_first, d_first / c_first, "-", "")
            results.append(dict(model=name, mode=mode, eager_us=us["eager"], dynamo_us=us["dynamo"],
                                cdynamo_us=us["cdynamo"], dynamo_first_ms=d_first, cdynamo_first_ms=c_first,
                                equal=bool(ok)))
        tables.append(t)
    tables.append(first)
    for t in tables:
        t.note(f"{torch.cuda.get_device_name()}; {C.machine_info()}")
    return tables, results


if __name__ == "__main__":
    for t in run(quick="--quick" in sys.argv)[0]:
        t.print()
