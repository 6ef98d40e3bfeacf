# The timm model zoo (tests/py/timm_zoo_models.py: resnet18, vit_tiny_patch16_224, convnext_atto from timm's configs, random weights): first call (every graph compiled, eager backend) and steady-state eval call time, torch._dynamo vs cdynamo vs eager, with graphs, ops and graphs compiled over repeated same-shape calls; and resnet18's steady-state call with inductor (cdynamo backend "inductor" vs torch.compile's default).
import os
import sys
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
            isteady, inotes = C.inductor_steady(build, lambda out: out, dyn, cdyn, number)
            C.add_inductor_row(t3, name, isteady, inotes, dyn, cdyn)
            row.update(inductor_steady_us=isteady, inductor_notes=inotes)
        results.append(row)
    return [t1, t2, t3], results


if __name__ == "__main__":
    for t in run(quick="--quick" in sys.argv)[0]:
        t.print()
