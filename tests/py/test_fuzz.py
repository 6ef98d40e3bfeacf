# test_fuzz.py — owns the differential fuzz run over a fixed seed range (tests/fuzz), run whole, and its KNOWN_FAILURES list.
"""Runs the generated programs of a FIXED seed range eagerly and through cdynamo (backend "eager" on every
seed, "aot_eager" on every AOT_EVERY-th seed) in worker subprocesses, and asserts:

- every program of the range ran, however long that takes (no time budget: a worker silent for SEED_TIMEOUT
  seconds fails its program as a hang, and the test's own hang limit is far above any plausible run);
- no failure (wrong result / mutation / print / exception, crash, hang) other than KNOWN_FAILURES;
- every KNOWN_FAILURES seed still fails (remove it from the dict once its bug is fixed);
- no backend refused a graph (a warning only: the runner sets suppress_errors) outside KNOWN_BACKEND_FAILURES,
  and every one of those the run reached still refuses.

Reproduce one seed: ``python -m tests.fuzz.run --show SEED --backends eager,aot_eager`` (prints the program);
shrink it: ``python -m tests.fuzz.reduce SEED``. The distinct bugs are in tests/fuzz/FINDINGS.md and
tests/py/test_fuzz_regressions.py.
"""
import os
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)  # tests/fuzz is imported as the package tests.fuzz (the workers run from _ROOT too)

from tests.fuzz.run import run_seeds  # noqa: E402
from tiers import by_tier  # noqa: E402

SEED_START = 0
# The fixed range, run whole: its coverage never depends on the machine's speed. The slice tier (CI's other
# interpreters) runs its first SLICE_COUNT seeds; the full tier (CI's first interpreter, the README's command) all.
SEED_COUNT = by_tier(2000, 300)
AOT_EVERY = 4              # aot_eager on seeds divisible by this
CHUNK = 200
# Two parts of the range run side by side (worker subprocesses): the test is most of a full run's time.
JOBS = int(os.environ.get("CDYNAMO_FUZZ_JOBS", "2"))
# Hang limit of the whole test (the conftest's timeout_s): the range takes 6-15 minutes on a 2-core machine.
HANG_LIMIT_S = 5400

# seed -> short reason (bug in tests/fuzz/FINDINGS.md). Every one must still fail; drop entries once fixed.
KNOWN_FAILURES = {
    800: "torch 2.13 aot_autograd donated buffers: a dynamic graph reused by a later call whose backward has "
         "retain_graph=True raises (torch.compile(backend='aot_eager') raises the same; FINDINGS run 17)",
}

# seed -> why the backend refuses a graph of it (the graph runs as Python: the runner sets suppress_errors). A seed
# not listed fails the test: a graph the backend cannot take is a cdynamo bug until shown otherwise.
KNOWN_BACKEND_FAILURES = {
    1408: "aot_eager: the graph changes in place a tensor that an earlier op of the same graph saved for backward "
          "(aot_autograd's trace raises 'modified by an inplace operation'; eager only raises at backward, which "
          "the program never calls); torch._dynamo splits this program elsewhere",
}


@pytest.mark.timeout_s(HANG_LIMIT_S)
def test_fuzz_fixed_seed_range():
    summ = run_seeds(SEED_START, SEED_COUNT, backends=("eager", "aot_eager"), aot_every=AOT_EVERY, chunk=CHUNK,
                     jobs=JOBS)
    report = summ.report()
    print(report)
    assert summ.aborted is None, report
    assert sorted(summ.results) == list(range(SEED_START, SEED_START + SEED_COUNT)), \
        f"{summ.ran} of the {SEED_COUNT} programs ran\n{report}"
    # every aot_eager program ran too (a worker crash counts no backend run; it fails below as a new failure)
    crashed = {s for s, r in summ.results.items() if r["status"] == "fail" and r["fails"][0][0] == "?"}
    aot_seeds = set(range(SEED_START, SEED_START + SEED_COUNT, AOT_EVERY))
    assert summ.backend_runs.get("aot_eager", 0) == len(aot_seeds - crashed), report

    failures = summ.failures()
    unexpected = {s: summ.reason(s) for s in failures if s not in KNOWN_FAILURES}
    assert not unexpected, "new fuzz failures:\n" + "\n".join(f"  seed {s}: {r}"[:400] for s, r in unexpected.items())

    summ.check_backend_failures(KNOWN_BACKEND_FAILURES)

    # known failures outside the range this tier runs: run them now
    missing = [s for s in KNOWN_FAILURES if s not in summ.results]
    for s in missing:
        extra = run_seeds(s, 1, backends=("eager", "aot_eager"), aot_every=AOT_EVERY, chunk=1)
        summ.results.update(extra.results)
    fixed = [s for s in KNOWN_FAILURES if s in summ.results and summ.results[s]["status"] != "fail"]
    assert not fixed, f"these KNOWN_FAILURES pass now, remove them from the dict: {fixed}"
