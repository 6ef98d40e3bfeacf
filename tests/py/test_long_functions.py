# test_long_functions.py — owns the tests of graph breaks in very long functions: continuations copy a window of the function and tail-call shared chains (issue 10 item 6), and deep chains of breaks never raise RecursionError.
"""A function of N statements with a graph break in each used to make N continuations each holding the rest
of the function (O(N^2) compile time and memory). Continuations of a function over 2,048 instructions now
stop at fixed cut points and tail-call a chain continuation shared by all of them. These tests pin what that
must keep: eager's results, printed output and side effects on long generated functions (branches, loops,
try blocks, conditionally bound and deleted locals around the cuts), the size of every continuation, and no
RecursionError from the nesting of continuations, whatever the recursion limit."""
import random
import sys
import types
import warnings

import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter

pytestmark = pytest.mark.usefixtures("cdynamo_reset")


def _make(src, name):
    ns = {"torch": torch}
    exec(compile(src, f"<{name}>", "exec"), ns)
    return ns[name]


def item_chain(n):
    body = "\n".join(["    t = t + t.sum().item() * 0"] * n)
    return _make(f"def chain_{n}(t):\n{body}\n    return t\n", f"chain_{n}")


# Statement templates of the generated long functions: each keeps `t` a float tensor, `log` a list, `a` a
# local bound on some paths only (read only where bound), `k` a Python int.
_TEMPLATES = [
    "t = t * 0.5 + 1",
    "t = t + t.sum().item() * 0",                       # graph break (.item())
    "log.append(round(t.sum().item(), 3))",             # graph break, side effect
    "print('s', {i}, round(float(t.mean()), 3))",        # graph break, printed output
    "k = k + {i} % 7",
    "a = t * {i}",
    "if t.sum() > 0:\n        t = t - 1\n    else:\n        t = t + 1",   # tensor condition: break
    "if k % 2 == 0:\n        a = t + k\n    t = t + (a.sum() * 0 if k % 2 == 0 else 0)",
    "for j in range(3):\n        t = t + j * 0.1",
    "try:\n        k = k + int('{i}')\n    except ValueError:\n        k = k - 1",   # try range, no tensor op

    "a = t.relu()\n    del a",
    "t = torch.cat([t[1:], t[:1]]) * 0.9",
]


def generated(seed, n):
    rng = random.Random(seed)
    lines = ["def gen(t, log):", "    k = 0"]
    for i in range(n):
        lines.append("    " + rng.choice(_TEMPLATES).format(i=i))
    # A tensor op in a try block (not supported in graphs yet): from here the function runs as Python.
    lines.append("    try:\n        t = t + 1\n    except RuntimeError:\n        t = t - 1")
    lines.append("    return t, k")
    return _make("\n".join(lines) + "\n", "gen")


def _resume_sizes(fn):
    """co_code sizes of every __resume_at_* continuation reachable from fn's globals and their constants."""
    seen, sizes, work = set(), [], []
    for name, v in fn.__globals__.items():
        if name.startswith("__resume_at_") and isinstance(v, types.FunctionType):
            work.append(v.__code__)
    while work:
        c = work.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        sizes.append(len(c.co_code))
        work.extend(k for k in c.co_consts if isinstance(k, types.CodeType) and k.co_name.startswith("__resume"))
    return sizes


def test_long_chain_of_breaks_equals_eager_with_small_continuations():
    fn = item_chain(600)  # ~7,000 instructions: windowed
    x = torch.randn(8)
    cnt = CompileCounter()
    out = cdynamo.optimize(cnt)(fn)(x)
    torch.testing.assert_close(out, fn(x))
    # 600 breaks: 601 graphs, plus one per window end that cut a graph in two.
    assert 601 <= cnt.frame_count <= 601 + 10
    sizes = _resume_sizes(fn)
    assert len(sizes) >= 600
    # Every continuation copies a window (~1,024 instructions, ~7.5 kB with inline caches, and a tail
    # call), not the rest of the function (~53 kB for the first ones).
    assert len(fn.__code__.co_code) > 40_000  # 3.11: ~53 kB; 3.12 (no PRECALL): ~43 kB
    assert max(sizes) < 10_000, max(sizes)
    # Cached: the same graphs run again, nothing recompiles.
    frames = cnt.frame_count
    torch.testing.assert_close(cdynamo.optimize(cnt)(fn)(x), fn(x))
    assert cnt.frame_count == frames


def test_short_functions_keep_whole_continuations():
    fn = item_chain(50)
    x = torch.randn(8)
    cnt = CompileCounter()
    torch.testing.assert_close(cdynamo.optimize(cnt)(fn)(x), fn(x))
    assert cnt.frame_count == 51  # no window ends below 2,048 instructions
    for name, v in fn.__globals__.items():
        if name.startswith("__resume_at_"):
            assert not any(isinstance(k, types.CodeType) for k in v.__code__.co_consts)


@pytest.mark.parametrize("seed", range(6))
def test_generated_long_functions_equal_eager(seed, capsys):
    fn = generated(seed, 260)
    x = torch.randn(6)
    log_e, log_c = [], []
    ref = fn(x.clone(), log_e)
    eager_out = capsys.readouterr().out
    got = cdynamo.optimize("eager")(fn)(x.clone(), log_c)
    compiled_out = capsys.readouterr().out
    torch.testing.assert_close(got[0], ref[0])
    assert got[1] == ref[1]
    assert log_c == log_e
    assert compiled_out == eager_out
    # The function is long enough to be cut, and it was.
    assert len(fn.__code__.co_code) // 2 > 2048
    sizes = _resume_sizes(fn)
    assert sizes and max(sizes) < len(fn.__code__.co_code)
    # A second call runs the cached code with the same results.
    log_c2 = []
    got2 = cdynamo.optimize("eager")(fn)(x.clone(), log_c2)
    capsys.readouterr()
    torch.testing.assert_close(got2[0], ref[0])
    assert log_c2 == log_e


@pytest.mark.parametrize("n,limit", [(1500, 400), (3000, 1000), (1500, 5000)])
def test_deep_chains_of_breaks_never_raise_recursion_error(n, limit):
    # Each break continues in a nested frame; eager runs the function in one. Near the recursion limit the
    # rest of the function runs as Python instead of nesting further (no graph, backend or user call meets
    # the limit).
    fn = item_chain(n)
    x = torch.randn(8)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = cdynamo.optimize("eager")(fn)(x)
            got2 = cdynamo.optimize("eager")(fn)(x)
    finally:
        sys.setrecursionlimit(old)
    torch.testing.assert_close(got, fn(x))
    torch.testing.assert_close(got2, fn(x))
    assert not [w for w in caught if "Recursion" in str(w.message)]


def test_deep_chain_called_from_a_deeper_stack():
    # Compiled at a shallow depth, then called where the compiled chain would pass the limit.
    fn = item_chain(700)
    x = torch.randn(8)
    opt = cdynamo.optimize("eager")(fn)
    opt(x)

    def nest(d):
        return opt(x) if d == 0 else nest(d - 1)

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = nest(350)
    finally:
        sys.setrecursionlimit(old)
    torch.testing.assert_close(got, fn(x))
    assert not [w for w in caught if "Recursion" in str(w.message)]
