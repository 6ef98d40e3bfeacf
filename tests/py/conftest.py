# conftest.py — owns making pytest use the installed cdynamo (never python/ of the source tree), the
# cdynamo_reset fixture, the per-test hang limit, the test tiers (tiers.py) and loading vision_shim before any
# test imports torchvision.
import faulthandler
import os
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SRC = os.path.join(_ROOT, "python")

# python/cdynamo has no _C: drop the source folder from the import path if anything put it there.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _SRC]
for _name in [m for m in sys.modules if m == "cdynamo" or m.startswith("cdynamo.")]:
    if os.path.abspath(getattr(sys.modules[_name], "__file__", "") or "").startswith(_SRC + os.sep):
        del sys.modules[_name]

import cdynamo  # noqa: E402
import vision_shim  # noqa: E402,F401  (before anything imports torchvision: timm, transformers)
import tiers  # noqa: E402

if os.path.abspath(cdynamo.__file__).startswith(_SRC + os.sep):
    raise RuntimeError(f"tests must import the installed cdynamo, got {cdynamo.__file__}; run bash scripts/setup.sh")


@pytest.fixture
def cdynamo_reset():
    """Drops every compiled frame before and after the test (used through pytestmark by the test files)."""
    cdynamo.reset()
    yield
    cdynamo.reset()


@pytest.fixture
def cdynamo_and_dynamo_reset():
    """cdynamo_reset, and torch._dynamo's caches too (files that compare with torch.compile)."""
    import torch._dynamo
    cdynamo.reset()
    torch._dynamo.reset()
    yield
    cdynamo.reset()
    torch._dynamo.reset()


# A test that hangs (e.g. a deadlock in the frame hook) dumps every thread's stack and ends the run, so it
# fails instead of eating CI's time. Only a hang guard, never a measure: far above the slowest test seen on a slow,
# loaded machine (a model-zoo test of a minute or two); a test that runs longer by design says so with its own
# timeout_s mark. CDYNAMO_TEST_TIMEOUT=0 turns this off (e.g. for gdb).
_TIMEOUT = float(os.environ.get("CDYNAMO_TEST_TIMEOUT", "900"))
_stderr = None


def pytest_configure(config):
    global _stderr
    config.addinivalue_line("markers", "timeout_s(seconds): this test's own hang limit (it runs long by design)")
    config.addinivalue_line("markers", "full_tier: runs only in the full test tier (CDYNAMO_TEST_TIER, tiers.py)")
    if _TIMEOUT > 0 and _stderr is None:  # capture is suspended here: fd 2 is the real stderr
        _stderr = os.fdopen(os.dup(2), "w")


# The longest files start first (scripts/test.sh runs files on two workers: what starts last decides the wall time).
_LONG_FIRST = ("test_fuzz.py", "test_fuzz_modules.py", "test_hf_zoo.py", "test_timm_zoo.py", "test_hf_more.py",
               "test_model_zoo.py", "test_crawled_modules.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(_LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order kept otherwise
    if tiers.TIER == "full":
        return
    skip = pytest.mark.skip(reason="full tier only (CDYNAMO_TEST_TIER=slice: CI runs it on its first interpreter)")
    for item in items:
        if tiers.full_tier_only(item.path.name, item.nodeid, item.get_closest_marker("full_tier") is not None):
            item.add_marker(skip)


def pytest_report_header(config):
    return f"cdynamo test tier: {tiers.TIER}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _TIMEOUT > 0:
        # A test with its own time budget (the fuzz runs) says how long it may take: always past its budget.
        own = item.get_closest_marker("timeout_s")
        limit = max(_TIMEOUT, float(own.args[0])) if own else _TIMEOUT
        faulthandler.dump_traceback_later(limit, exit=True, file=_stderr or sys.__stderr__)
    try:
        yield
    finally:
        if _TIMEOUT > 0:
            faulthandler.cancel_dump_traceback_later()


def pytest_unconfigure(config):
    global _stderr
    if _stderr is not None:
        _stderr.close()
        _stderr = None
