# test_global_state.py — owns the tests that every piece of global state a graph depends on is guarded:
# toggling it between calls recompiles or gives eager's result, with every backend (issue 10 item 17), and the
# dispatch-mode stack query torch.nn asks (issue 13).
import contextlib

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

import cdynamo
from cdynamo.testing import CompileCounterWithBackend

pytestmark = pytest.mark.usefixtures("cdynamo_reset")


def matmul_add(x, w):
    return (x @ w) + torch.ones(2, 2)


class AddOne(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out + 1 if func is torch.Tensor.__matmul__ else out


def fingerprint(t):
    return (t.dtype, t.requires_grad, t.is_inference(), t.detach().float())


# name -> (state A, state B): context-manager factories. Calls run under A, then B, then A again.
STATES = {
    "grad_mode": (torch.enable_grad, torch.no_grad),
    "inference_mode": (contextlib.nullcontext, torch.inference_mode),
    "autocast_enabled": (contextlib.nullcontext, lambda: torch.autocast("cpu", dtype=torch.bfloat16)),
    "autocast_dtype": (lambda: torch.autocast("cpu", dtype=torch.bfloat16),
                       lambda: torch.autocast("cpu", dtype=torch.float16)),
    "default_dtype": (contextlib.nullcontext, lambda: _default_dtype(torch.float64)),
    "torch_function_mode": (contextlib.nullcontext, AddOne),
}


@contextlib.contextmanager
def _setting(get, set_, value):
    """A global torch setting changed for the block, then restored."""
    old = get()
    set_(value)
    try:
        yield
    finally:
        set_(old)


def _default_dtype(dtype):
    return _setting(torch.get_default_dtype, torch.set_default_dtype, dtype)


def _deterministic(on):
    return _setting(torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms, on)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("state", sorted(STATES))
def test_toggling_global_state_gives_eager_results(state, backend):
    if backend == "inductor" and state in ("autocast_dtype", "default_dtype", "torch_function_mode"):
        pytest.skip("inductor is slow to compile on CPU: covered by eager/aot_eager and the other states")
    a, b = STATES[state]
    cnt = CompileCounterWithBackend(backend)
    opt = cdynamo.optimize(cnt)(matmul_add)
    torch.manual_seed(0)
    x = torch.randn(2, 3, requires_grad=True)
    w = torch.randn(3, 2)
    for ctx in (a, b, a):
        with ctx():
            ref = matmul_add(x, w)
            got = opt(x, w)
        assert fingerprint(got)[:3] == fingerprint(ref)[:3], state
        torch.testing.assert_close(fingerprint(got)[3], fingerprint(ref)[3], atol=2e-2, rtol=2e-2)


def test_deterministic_algorithms_toggle_recompiles():
    cnt = CompileCounterWithBackend("eager")
    opt = cdynamo.optimize(cnt)(matmul_add)
    x, w = torch.randn(2, 3), torch.randn(3, 2)
    opt(x, w)
    with _deterministic(True):
        torch.testing.assert_close(opt(x, w), matmul_add(x, w))
    assert cnt.frame_count == 2
    opt(x, w)
    assert cnt.frame_count == 2  # the first entry fits again


def test_disable_torch_function_toggle_recompiles():
    cnt = CompileCounterWithBackend("eager")
    opt = cdynamo.optimize(cnt)(matmul_add)
    x, w = torch.randn(2, 3), torch.randn(3, 2)
    opt(x, w)
    with torch._C.DisableTorchFunction():
        torch.testing.assert_close(opt(x, w), matmul_add(x, w))
    assert cnt.frame_count == 2


def test_global_state_guards_are_listed():
    def fn(x):
        return x + 1

    text = str(cdynamo.explain(fn)(torch.randn(2)))
    assert "GLOBAL_STATE" in text and "AUTOCAST" in text and "GRAD_MODE" in text


class PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def on_dispatch_stack(x):
    # torch.nn's _is_make_fx_tracing() (MultiheadAttention on torch 2.11) asks for this stack.
    if len(_get_current_dispatch_mode_stack()) == 0:
        return x + 1
    return x - 1


def test_dispatch_mode_stack_query_folds_under_fullgraph():
    """torch._dynamo (torch 2.13) raises here under fullgraph (`_len_torch_dispatch_stack` returns an int); cdynamo
    folds the empty stack, which torch 2.11's MultiheadAttention needs (`_is_make_fx_tracing`)."""
    x = torch.ones(3)
    cnt = CompileCounterWithBackend("eager")
    torch.testing.assert_close(cdynamo.optimize(cnt, nopython=True)(on_dispatch_stack)(x), on_dispatch_stack(x))
    assert (cnt.frame_count, cnt.op_count) == (1, 1)


def test_dispatch_mode_stack_change_recompiles():
    cnt = CompileCounterWithBackend("eager")
    opt = cdynamo.optimize(cnt)(on_dispatch_stack)
    x = torch.ones(3)
    torch.testing.assert_close(opt(x), x + 1)
    with PassThrough():
        torch.testing.assert_close(opt(x), x - 1)  # eager's answer: the stack is not empty here
    torch.testing.assert_close(opt(x), x + 1)
    assert cnt.frame_count == 2  # the entry made under the mode has the query as a break; the first fits again


def test_dispatch_mode_stack_guard_fails_with_its_reason():
    """With no tensor input (TENSOR_MATCH would see the Python dispatch key first) GLOBAL_STATE tells."""
    def make():
        return torch.ones(2) * (1 + len(_get_current_dispatch_mode_stack()))

    reasons = []
    cnt = CompileCounterWithBackend("eager")
    opt = cdynamo.optimize(cnt, guard_fail_fn=lambda f: reasons.append(f.reason))(make)
    torch.testing.assert_close(opt(), make())
    with PassThrough():
        torch.testing.assert_close(opt(), make())
    assert any("dispatch mode stack changed" in r for r in reasons), reasons
