# The transformers model zoo (tests/py/hf_zoo_models.py: BERT, GPT-2, T5, Llama, DistilBERT, ViT from small configs): first call (every graph compiled, eager backend) and steady-state eval call time, torch._dynamo vs cdynamo vs eager, with graphs, ops and graphs compiled over repeated same-shape calls.
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


def _zoo():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(here, "tests", "py"))
    import vision_shim  # noqa: F401  (transformers' model classes import torchvision when it is installed)
    import hf_zoo_models
    return hf_zoo_models.MODELS


def _main(out):
    return out["last_hidden_state"] if "last_hidden_state" in out else out["logits"]


def run(quick=False):
    C.setup()
    try:
        import transformers  # noqa: F401
    except ImportError:
        t = C.Table("transformers zoo (skipped: transformers is not installed)", "-")
        return [t], {}
    import logging
    logging.getLogger("transformers").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    models = _zoo()
    dyn, cdyn = C.DynamoFrontend(), C.CDynamoFrontend()
    t1 = C.Table("transformers zoo, first call (eager backend, every graph compiled)", "ms")
    t2 = C.Table("transformers zoo, steady-state eval call (median of interleaved repeats)", "us per call")
    results = []
    number = 5 if quick else 20
    for name, build in models.items():
        torch.manual_seed(0)
        model, make_inputs = build()
        model.eval()
        kwargs = make_inputs(0)
        call = lambda m: m(**kwargs)  # noqa: E731
        with torch.no_grad():
            ref = _main(model(**kwargs))
            eager_ms = C.loop_ns(lambda: call(model), (), 5) / 1e6
            vals, notes, steady, compiled = {}, [], {}, {}
            for fe in (dyn, cdyn):
                try:
                    fe.reset()
                    be = C.CountingBackend()
                    opt = fe.compile(model, be)
                    t0 = time.perf_counter()
                    out = _main(opt(**kwargs))
                    vals[fe.name] = (time.perf_counter() - t0) * 1e3
                    first_graphs = be.graphs
                    for s in range(1, CALLS):
                        opt(**make_inputs(s))
                    notes.append(f"{fe.name}: {first_graphs} graph(s), {be.ops} ops, {be.graphs} graphs after "
                                 f"{CALLS} calls")
                    if not torch.allclose(out, ref, rtol=1e-4, atol=1e-5):
                        notes.append(f"{fe.name}: output differs from eager")
                    compiled[fe.name] = opt
                except Exception as e:  # noqa: BLE001
                    vals[fe.name] = "ERR"
                    notes.append(f"{fe.name} ERROR: {C.short_error(e)}")
            if len(compiled) == 2:
                fns = {"eager": lambda: call(model)}
                fns.update({k: (lambda o=o: call(o)) for k, o in compiled.items()})
                res = C.interleaved_ns(fns, (), number, 3, warmup=40)  # past any recompile cap
                steady = {k: C.median(v) / 1e3 for k, v in res.items()}
            for fe in (dyn, cdyn):
                fe.reset()
        d, c = vals.get(dyn.name), vals.get(cdyn.name)
        sp = C.ratio(d, c)
        t1.add(name, eager_ms, d, c, sp, f">={SPEEDUP_TARGET:g}x",
               C.status(None if sp is None else sp >= SPEEDUP_TARGET), "; ".join(notes))
        sd, sc = steady.get(dyn.name), steady.get(cdyn.name)
        ok = None if sd is None or sc is None else sc <= sd * 1.05
        t2.add(name, steady.get("eager"), sd, sc, C.ratio(sd, sc), "c<=dynamo", C.status(ok))
        results.append(dict(model=name, eager_ms=eager_ms, dynamo_ms=d, cdynamo_ms=c, speedup=sp,
                            steady_us=steady, notes=notes))
    return [t1, t2], results


if __name__ == "__main__":
    for t in run(quick="--quick" in sys.argv)[0]:
        t.print()
