# The transformers model zoo (tests/py/hf_zoo_models.py: BERT, GPT-2, T5, Llama, DistilBERT, ViT from small configs): first call (every graph compiled, eager backend) and steady-state eval call time, torch._dynamo vs cdynamo vs eager, with graphs, ops and graphs compiled over repeated same-shape calls; and BERT's steady-state call with inductor (cdynamo backend "inductor" vs torch.compile's default).
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
INDUCTOR_MODELS = ("bert",)  # inductor compiles take ~10-30 s each on 2 cores: one model


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
    t3 = C.Table("transformers zoo, steady-state eval call with inductor (torch.compile default vs cdynamo "
                 "'inductor')", "us per call")
    results = []
    number = 5 if quick else 20
    for name, build in models.items():
        row = C.zoo_model_rows(name, build, _main, dyn, cdyn, t1, t2, number, CALLS, SPEEDUP_TARGET)
        if name in INDUCTOR_MODELS:
            isteady, inotes = C.inductor_steady(build, _main, dyn, cdyn, number)
            C.add_inductor_row(t3, name, isteady, inotes, dyn, cdyn)
            row.update(inductor_steady_us=isteady, inductor_notes=inotes)
        results.append(row)
    return [t1, t2, t3], results


if __name__ == "__main__":
    for t in run(quick="--quick" in sys.argv)[0]:
        t.print()
