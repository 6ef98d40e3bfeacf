# tiers.py — owns the test tiers: "full" runs everything, "slice" a representative part (CDYNAMO_TEST_TIER).
"""The README's test command runs the full tier. CI (.ci/run) runs the full tier on its first interpreter and
the slice tier on the others, so that three interpreters fit CI's limit on a slow machine: the slice skips the
tests marked ``full_tier`` (the model zoos, the long fixed fuzz ranges' full length, live torch._dynamo
comparisons of whole models), which are interpreter-independent in what they check, and keeps every test of
bytecode, guards, codegen and the Python constructs, which are not.
"""
import os

TIER = os.environ.get("CDYNAMO_TEST_TIER", "full").strip().lower() or "full"
if TIER not in ("full", "slice"):
    raise RuntimeError(f"CDYNAMO_TEST_TIER must be 'full' or 'slice', got {TIER!r}")


# Files run whole in the full tier only: the model zoos (real library models compared with eager and with
# torch._dynamo; what they check of cdynamo is interpreter-independent, and every construct they use has tests of
# its own that run on every interpreter).
FULL_TIER_FILES = frozenset({"test_hf_zoo.py", "test_hf_more.py", "test_timm_zoo.py", "test_model_zoo.py"})


def full_tier_only(filename, nodeid, marked):
    """True if a test runs in the full tier only: marked ``full_tier``, in FULL_TIER_FILES, or an inductor test
    (inductor compiles C++ kernels: seconds per graph; the graphs it gets are the ones the eager and aot_eager tests
    check on every interpreter)."""
    return marked or filename in FULL_TIER_FILES or "inductor" in nodeid.lower()


def by_tier(full, slice):
    """``full`` in the full tier, ``slice`` in the slice tier (e.g. the length of a fixed fuzz range)."""
    return full if TIER == "full" else slice
