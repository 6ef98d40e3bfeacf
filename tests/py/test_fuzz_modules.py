# test_fuzz_modules.py — owns the short differential fuzz run (run whole, no time budget) of the module-shaped generator (tests/fuzz/gen_modules.py) over a fixed seed range.
"""Runs the module-shaped programs of a FIXED seed range (nn.Module hierarchies, configs, outputs, hooks,
breaks inside blocks) eagerly and through cdynamo, backend "eager" on every seed and "aot_eager" on every
AOT_EVERY-th, in one worker subprocess, and asserts that none differs from eager (results, model state,
config, globals, printed output, exceptions) other than KNOWN_FAILURES, that every KNOWN_FAILURES seed
still fails, and that no backend refused a graph (only a warning: the runner sets suppress_errors).

Reproduce one seed: ``python -m tests.fuzz.run --gen modules --show SEED --backends eager,aot_eager``.
The bugs it found are in tests/fuzz/FINDINGS.md ("Module-shaped generator") and
tests/py/test_fuzz_regressions.py.
"""
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.fuzz.run import run_seeds  # noqa: E402
from tiers import by_tier  # noqa: E402

SEED_START = 0
# The fixed range, run whole (about 1-2 s a program with the dynamic-shape recompiles); its first 20 in the slice tier.
SEED_COUNT = by_tier(40, 20)
AOT_EVERY = 4              # aot_eager on seeds divisible by this

# seed -> short reason (bug in tests/fuzz/FINDINGS.md). Every one must still fail; drop entries once fixed.
KNOWN_FAILURES = {
}

# seed -> why the backend refuses a graph of it (the graph runs as Python: the runner sets suppress_errors). A seed
# not listed fails the test: a graph the backend cannot take is a cdynamo bug until shown otherwise.
KNOWN_BACKEND_FAILURES = {
    36: "aot_eager: `x += residual` changes a tensor an earlier op of the graph saved for backward (aot_autograd "
        "raises 'modified by an inplace operation'); torch.compile(backend='aot_eager') raises the same",
}


def test_fuzz_modules_fixed_seed_range():
    # No time budget: the range runs whole (a worker silent for run.SEED_TIMEOUT seconds fails its program as a hang).
    summ = run_seeds(SEED_START, SEED_COUNT, backends=("eager", "aot_eager"), aot_every=AOT_EVERY,
                     chunk=SEED_COUNT, gen="modules")
    report = summ.report()
    print(report)
    assert summ.aborted is None, report
    assert sorted(summ.results) == list(range(SEED_START, SEED_START + SEED_COUNT)), \
        f"{summ.ran} of the {SEED_COUNT} programs ran\n{report}"
    failures = summ.failures()
    unexpected = {s: summ.reason(s) for s in failures if s not in KNOWN_FAILURES}
    assert not unexpected, "new fuzz failures:\n" + "\n".join(f"  seed {s}: {r}"[:400] for s, r in unexpected.items())
    summ.check_backend_failures(KNOWN_BACKEND_FAILURES)
    fixed = [s for s in KNOWN_FAILURES if s in summ.results and summ.results[s]["status"] != "fail"]
    assert not fixed, f"these KNOWN_FAILURES pass now, remove them from the dict: {fixed}"
