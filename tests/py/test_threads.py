# test_threads.py — owns the thread stress test: eight threads calling, compiling and resetting compiled
# functions (with and without graph breaks, eager and aot_eager) must neither crash, deadlock nor give a
# result different from eager.
import os
import random
import threading
import time

import pytest
import torch

import cdynamo

# Iterations per thread: a fixed amount of work, so what the test covers never depends on the machine's speed.
ITERATIONS = int(os.environ.get("CDYNAMO_STRESS_ITERATIONS", "500"))
# Only a hang guard (a deadlock), far above the run's few tens of seconds on a slow machine.
HANG_LIMIT_S = 1200


def with_break(x):
    y = x * 2
    cdynamo.graph_break()
    return y + x


def straight(x):
    return torch.sin(x) + 1


def data_dependent(x):
    if x.sum() > 0:
        return x - 1
    return x + 1


def with_print_and_loop(x):
    acc = x
    for i in range(3):
        acc = acc * 0.5 + i
        if i == 1:
            str(acc.sum().item())  # .item(): a break in the loop
    return acc


FNS = (with_break, straight, data_dependent, with_print_and_loop)


@pytest.mark.timeout_s(HANG_LIMIT_S + 60)
def test_eight_threads_call_compile_and_reset():
    cdynamo.reset()
    errors, calls, resets = [], [0] * 8, [0] * 8  # per thread: no lost updates

    def worker(i):
        rng = random.Random(i)
        backend = "aot_eager" if i % 4 == 3 else "eager"
        opts = [cdynamo.optimize(backend)(f) for f in FNS]
        for _ in range(ITERATIONS):
            if len(errors) >= 10:
                break
            try:
                if i < 2 and rng.random() < 0.05:
                    cdynamo.reset()
                    resets[i] += 1
                    continue
                k = rng.randrange(len(FNS))
                if rng.random() < 0.02:  # a fresh code object: compiles while others run
                    ns = {}
                    exec(f"def fresh(x):\n    return x * {rng.randrange(5)} + torch.cos(x)\n", {"torch": torch}, ns)
                    fn = ns["fresh"]
                    opt = cdynamo.optimize(backend)(fn)
                else:
                    fn, opt = FNS[k], opts[k]
                x = torch.randn(rng.choice([2, 3, 5]))
                got, ref = opt(x), fn(x)
                if not torch.allclose(got, ref):
                    errors.append(f"thread {i}: {fn.__name__} differs from eager")
                calls[i] += 1
            except Exception as e:  # noqa: BLE001 - every failure is reported
                errors.append(f"thread {i}: {type(e).__name__}: {e}"[:300])

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(8)]
    deadline = time.monotonic() + HANG_LIMIT_S
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, deadline - time.monotonic()))
    hung = [i for i, t in enumerate(threads) if t.is_alive()]
    cdynamo.reset()
    assert not hung, f"threads {hung} did not finish (deadlock?)"
    assert not errors, errors
    # every iteration of the non-resetting threads is a call; the two resetting threads reset ~5% of theirs
    assert all(c == ITERATIONS for c in calls[2:]), (calls, resets)
    assert resets[0] > 0 and resets[1] > 0, (calls, resets)
    assert calls[0] + resets[0] == ITERATIONS and calls[1] + resets[1] == ITERATIONS, (calls, resets)
