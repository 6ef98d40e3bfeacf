# test_leaks.py — owns the memory-stability tests: a million cached calls and repeated recompiles/resets
# must not grow the process's resident memory.
import gc

import torch

import cdynamo


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def small(x, s):
    return x * s + 1


def test_million_cached_calls_do_not_leak():
    cdynamo.reset()
    opt = cdynamo.optimize("eager")(small)
    x = torch.randn(2)
    for _ in range(50_000):  # warm up allocator and caches
        opt(x, 2)
    gc.collect()
    before = rss_kb()
    for _ in range(1_000_000):
        opt(x, 2)
    gc.collect()
    after = rss_kb()
    torch.testing.assert_close(opt(x, 2), small(x, 2))
    # A leak of one small object per call would be ~50+ MB here.
    assert after - before < 8 * 1024, f"RSS grew by {after - before} kB over 1M calls"
    cdynamo.reset()


def test_recompile_and_reset_cycles_do_not_leak():
    def fn(x):
        return torch.cos(x) * 2

    def cycle():
        cdynamo.reset()
        opt = cdynamo.optimize("eager")(fn)
        for n in range(1, 5):
            opt(torch.randn(n))

    for _ in range(20):
        cycle()
    gc.collect()
    before = rss_kb()
    for _ in range(200):
        cycle()
    gc.collect()
    after = rss_kb()
    assert after - before < 16 * 1024, f"RSS grew by {after - before} kB over 200 compile/reset cycles"
    cdynamo.reset()
