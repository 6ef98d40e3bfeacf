# The timm model zoo (tests/py/timm_zoo_models.py: resnet18, vit_tiny_patch16_224, convnext_atto from timm's configs, random weights): first call (every graph compiled, eager backend) and steady-state eval call time, torch._dynamo vs cdynamo vs eager, with graphs, ops and graphs compiled over repeated same-shape calls; and resnet18's steady-state call with inductor (cdynamo backend "inductor" vs torch.compile's default).
import os
import sys
import time
import warnings

import torch

try:
    from . import common as C
except ImportError:  # run as a script
    import common as C

SPEEDUP_TARGET = 10.0
CALLS = 6  # same-shape calls counted for recompiles
INDUCTOR_MODELS = ("resnet18",)  # inductor compiles take ~10-20 s each on 2 cores: one model


def _zoo():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(here, "tests", "py"))
    import vision_shim  # noqa: F401  (before timm imports torchvision: its C++ extension may not load)
    import timm_zoo_models
    return timm_zoo_models.MODELS


def _inductor_steady(name, build, dyn, cdyn, number):
    """Steady-state us per call: eager, torch.compile(model) (inductor), cdynamo.optimize("inductor")."""
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
                if not torch.allclose(out, ref, rtol=1e-4, atol=1e-4):
                    notes.append(f"{fe.name}: output differs from eager")
                compiled[fe.name] = o
            except Exception as e:  # noqa: BLE001
                notes.append(f"{fe.name} ERROR: {C.short_error(e)}")
        steady = {}
        if len(compiled) == 2:
            fns = {"eager": lambda: call(model)}
            fns.update({k: (lambda o=o: call(o)) for k, o in compiled.items()})
            res = C.interleaved_ns(fns, (), number, 3, warmup=10)
            steady = {k: C.median(v) / 1e3 for k, v in res.items()}
    for fe in (dyn, cdyn):
        fe.reset()
    notes.append("first call (compile + run) " + ", ".join(f"{k} {v:.1f} s" for k, v in compile_s.items())
                 + " (cdynamo's second compile of the same graph may hit inductor's FX graph cache)")
    return steady, notes


def run(quick=False):
    C.setup()
    try:
        models = _zoo()
        import timm  # noqa: F401
    except ImportError as e:
        t = C.Table(f"timm zoo (skipped: {C.short_error(e)})", "-")
        return [t], {}
    warnings.simplefilter("ignore")
    dyn, cdyn = C.DynamoFrontend(), C.CDynamoFrontend()
    t1 = C.Table("timm zoo, first call (eager backend, every graph compiled)", "ms")
    t2 = C.Table("timm zoo, steady-state eval call (median of interleaved repeats)", "us per call")
    t3 = C.Table("timm zoo, steady-state eval call with inductor (torch.compile default vs cdynamo 'inductor')",
                 "us per call")
    results = []
    number = 5 if quick else 20
    for name, build in models.items():
        row = C.zoo_model_rows(name, build, lambda out: out, dyn, cdyn, t1, t2, number, CALLS, SPEEDUP_TARGET)
        if name in INDUCTOR_MODELS:
            isteady, inotes = _inductor_steady(name, build, dyn, cdyn, number)
            sd, sc = isteady.get(dyn.name), isteady.get(cdyn.name)
            ok = None if sd is None or sc is None else sc <= sd * 1.05
            t3.add(name, isteady.get("eager"), sd, sc, C.ratio(sd, sc), "c<=dynamo", C.status(ok),
                   "; ".join(inotes))
            row.update(inductor_steady_us=isteady, inductor_notes=inotes)
        results.append(row)
    return [t1, t2, t3], results


if __name__ == "__main__":
    for t in run(quick="--quick" in sys.argv)[0]:
        t.print()
