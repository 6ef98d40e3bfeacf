# test_import_hooks.py — owns compiling while a Python-level builtins.__import__ override is installed (a user's import
# tracer): the frame hook must not import anything itself, or the override's frame reaches the hook again (a crash).
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import builtins, sys, torch, cdynamo
    orig = builtins.__import__
    seen = []
    def traced_import(name, *args, **kwargs):
        seen.append(name)
        return orig(name, *args, **kwargs)
    def fn(x):
        return torch.nn.functional.layer_norm(x, (3,)) * 2
    opt = cdynamo.optimize("eager")(fn)
    builtins.__import__ = traced_import
    try:
        x = torch.randn(2, 3)
        torch.testing.assert_close(opt(x), fn(x))
        torch.testing.assert_close(opt(x), fn(x))
    finally:
        builtins.__import__ = orig
    print("OK", cdynamo.utils.counters["frames"]["ok"] >= 1)
""")


def test_compile_under_a_python_import_override_does_not_recurse():
    # In a subprocess: the failure this guards against was an endless recursion ending in a segfault.
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("OK True"), r.stdout[-500:]
