# test_trace_rules.py — owns the tests of which files are captured and inlined: installed packages are user
# code wherever they are installed (site-packages under the stdlib directory included), torch, the stdlib,
# cdynamo and the documented third-party skip list are not.
import importlib
import os
import shutil
import sys
import sysconfig

import pytest
import torch
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter

pytestmark = pytest.mark.usefixtures("cdynamo_reset")

PKG = "cdynamo_site_probe_pkg"


@pytest.fixture
def site_package():
    """A package installed into the interpreter's own site-packages (under the stdlib dir with pyenv)."""
    root = os.path.join(sysconfig.get_paths()["purelib"], PKG)
    if not os.access(os.path.dirname(root), os.W_OK):
        pytest.skip("site-packages is not writable")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "__init__.py"), "w") as f:
        f.write("import torch\n\ndef block(x):\n    h = torch.relu(x)\n    return h * 2 + 1\n\n"
                "def model(x):\n    return block(x).sum(-1)\n")
    importlib.invalidate_caches()
    sys.modules.pop(PKG, None)
    try:
        yield importlib.import_module(PKG)
    finally:
        sys.modules.pop(PKG, None)
        shutil.rmtree(root, ignore_errors=True)


def test_site_packages_under_the_stdlib_dir_is_user_code(site_package):
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    # The case the issue names: on this interpreter site-packages lies inside the stdlib directory.
    nested = os.path.realpath(site_package.__file__).startswith(stdlib + os.sep)
    cnt = CompileCounter()
    x = torch.randn(3, 4)
    out = cdynamo.optimize(cnt)(site_package.model)(x)
    torch.testing.assert_close(out, site_package.model(x))
    assert cnt.frame_count == 1 and cnt.op_count == 4, (nested, cnt.frame_count, cnt.op_count)


def test_library_called_from_user_code_is_inlined(site_package):
    def fn(x):
        return site_package.block(x) - 1

    cnt = CompileCounter()
    x = torch.randn(5)
    torch.testing.assert_close(cdynamo.optimize(cnt)(fn)(x), fn(x))
    assert cnt.frame_count == 1 and cnt.op_count == 4


def test_stdlib_and_skip_list_frames_are_not_captured():
    import json

    import numpy

    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(json.dumps)
    assert opt({"a": 1}) == '{"a": 1}'
    # numpy is on the skip list: its Python frames run as they are.
    assert cdynamo.optimize(cnt)(numpy.atleast_1d)(3).shape == (1,)
    assert cnt.frame_count == 0


# ---- torch.compiler.disable and is_compiling ------------------------------------------------------------

def test_torch_compiler_disable_is_honoured():
    import torch._dynamo

    calls = []

    @torch.compiler.disable
    def eager_only(x):
        calls.append(torch.compiler.is_compiling())
        return x.sin()

    @torch._dynamo.disable
    def also_eager(x):
        return x.cos()

    def fn(x):
        return eager_only(x) + also_eager(x) + 1

    cnt = CompileCounter()
    x = torch.randn(4)
    torch.testing.assert_close(cdynamo.optimize(cnt)(fn)(x), fn(x))
    assert calls == [False, False]  # ran as Python (not traced), eager then compiled
    # Only fn's own additions are captured: the disabled functions are not graphs of their own.
    assert cnt.op_count <= 2, cnt.op_count


def test_is_compiling_is_true_while_tracing():
    def fn(x):
        if torch.compiler.is_compiling():
            return x + 1
        return x - 1

    x = torch.randn(3)
    torch.testing.assert_close(cdynamo.optimize("eager")(fn)(x), x + 1)
    torch.testing.assert_close(fn(x), x - 1)


def test_torch_assert_on_known_condition_is_no_op():
    # timm's PatchEmbed: `_assert(H == self.img_size[0], msg)` on a guarded size: one graph, as torch._dynamo.
    from torch import _assert

    def fn(x):
        _assert(x.shape[0] == 4, "rows")
        torch._assert(condition=x.shape[1] == 3, message="cols")
        return x.relu() + 1

    cnt = CompileCounter()
    x = torch.randn(4, 3)
    torch.testing.assert_close(cdynamo.optimize(cnt)(fn)(x), fn(x))
    assert (cnt.frame_count, cnt.op_count) == (1, 2)
    dcnt = torch._dynamo.testing.CompileCounter()
    torch.compile(fn, backend=dcnt)(x)
    assert dcnt.frame_count == 1


def test_torch_assert_failing_raises_as_eager():
    def fn(x):
        y = x * 2
        torch._assert(x.shape[0] == 5, "need five rows")
        return y

    with pytest.raises(AssertionError, match="need five rows"):
        cdynamo.optimize("eager")(fn)(torch.randn(4))
    with pytest.raises(AssertionError, match="need five rows"):
        cdynamo.optimize("eager", nopython=False)(fn)(torch.randn(4))
