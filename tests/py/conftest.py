# conftest.py — owns making pytest use the installed cdynamo (never python/ of the source tree), the
# cdynamo_reset fixture, the per-test hang limit and loading vision_shim before any test imports torchvision.
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
# fails fast instead of eating CI's time budget. CDYNAMO_TEST_TIMEOUT=0 turns this off (e.g. for gdb).
_TIMEOUT = float(os.environ.get("CDYNAMO_TEST_TIMEOUT", "300"))
_stderr = None


def pytest_configure(config):
    global _stderr
    config.addinivalue_line("markers", "timeout_s(seconds): this test's own hang limit, above its time budget")
    if _TIMEOUT > 0 and _stderr is None:  # capture is suspended here: fd 2 is the real stderr
        _stderr = os.fdopen(os.dup(2), "w")


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
