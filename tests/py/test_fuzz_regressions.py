# test_fuzz_regressions.py — owns the minimal repros of the bugs the differential fuzzer (tests/fuzz) found, one test per bug.
"""Each test runs a small program eagerly and through cdynamo and compares return values, argument
mutations, globals, printed output and exceptions. Tests of bugs that are not fixed yet are
``xfail(strict=True)``: once the bug is fixed the test XPASSes, fails the suite, and the marker must go.
``test_torch_compile_agrees`` runs the same repros through torch.compile(backend="eager") to show that
torch._dynamo (same torch) matches eager on them. Details and seeds: tests/fuzz/FINDINGS.md.
"""
import contextlib
import io
import logging
import os
import sys
import textwrap
import types

import pytest
import torch

import cdynamo

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.fuzz.run import compare, compare_text, module_state, snap  # noqa: E402
from versions import REFERENCE_PINNED  # noqa: E402

pytestmark = pytest.mark.usefixtures("cdynamo_reset")


def _run(src, make_args, ncalls, wrap):
    # A module of its own, importable by name (torch 2.11's torch._dynamo imports a traced function's module).
    mod = types.ModuleType("fuzz_regression")
    sys.modules["fuzz_regression"] = mod
    ns = mod.__dict__
    exec(compile(textwrap.dedent(src), "<fuzz-regression>", "exec"), ns)
    fn = wrap(ns["f"])
    recs = []
    for i in range(ncalls):
        args = make_args(i)
        buf = io.StringIO()
        out = exc = None
        with contextlib.redirect_stdout(buf):
            try:
                out = fn(*args)
            except Exception as e:  # noqa: BLE001 - the program's exception is part of its behaviour
                exc = e
        glob = {k: ns[k] for k in ("G", "GL") if k in ns}
        if "M" in ns:  # a module of the repro: its parameters, buffers and Python attributes after each call
            glob["M"] = snap(module_state(ns["M"]))
        recs.append({"out": out, "exc": exc, "printed": buf.getvalue(), "args": args, "globals": glob})
    return recs


def _diff(ref, got):
    for i, (a, b) in enumerate(zip(ref, got)):
        if type(a["exc"]) is not type(b["exc"]):
            return f"call {i}: exception {a['exc']!r} vs {b['exc']!r}"
        for key in ("out", "args", "globals"):
            m = compare(a[key], b[key], key)
            if m:
                return f"call {i}: {m}"
        m = compare_text(a["printed"], b["printed"])
        if m:
            return f"call {i}: printed {m}"
    return None


def check(src, make_args, ncalls=1, backend="eager"):
    """Asserts cdynamo (``backend``) behaves like eager on ``f`` in ``src``."""
    ref = _run(src, make_args, ncalls, lambda f: f)
    cdynamo.reset()
    got = _run(src, make_args, ncalls, lambda f: cdynamo.optimize(backend)(f))
    d = _diff(ref, got)
    assert d is None, d


def check_torch_compile(src, make_args, ncalls=1, backend="eager"):
    """None if torch.compile(backend=...) matches eager on ``f``, else the difference."""
    logging.getLogger("torch._dynamo").setLevel(logging.CRITICAL)
    logging.getLogger("torch._subclasses").setLevel(logging.CRITICAL)
    ref = _run(src, make_args, ncalls, lambda f: f)
    torch._dynamo.reset()
    try:
        got = _run(src, make_args, ncalls, lambda f: torch.compile(f, backend=backend))
    finally:
        torch._dynamo.reset()
    return _diff(ref, got)


def ones(*shape):
    return lambda i: [torch.ones(*shape)]


# ------------------------------------------------------------------------------------------------------
# name -> (source, make_args, ncalls, backend). Every entry has a test below and a case of test_torch_compile_agrees.
REPROS = {}

# Bug 1: a method of an object made in the frame writes a class attribute (C.k += 1) and self.t: the writes to
# self (self.t, self.log.append) are lost. Fuzz seeds: every program that calls C(...).step (FINDINGS.md).
REPROS["method_class_attr_write_loses_self_write"] = ("""
class C:
    k = 0
    def __init__(self, t):
        self.t = t
    def step(self, u):
        C.k += 1
        self.t = self.t + u
def f(x):
    c = C(x)
    c.step(x)
    return c.t * 2, C.k
""", ones(2), 2, "eager")


def test_method_class_attr_write_loses_self_write():
    check(*REPROS["method_class_attr_write_loses_self_write"])


# Bug 2: `del` of a local that is not bound (deleted twice, here by a loop) does not raise UnboundLocalError:
# the frame runs on and its side effects happen. Seed 1662.
REPROS["del_unbound_local_does_not_raise"] = ("""
def f(x):
    t = x + 1
    for i in range(2):
        del t
    x.add_(1)
    return x
""", ones(2), 1, "eager")


def test_del_unbound_local_does_not_raise():
    check(*REPROS["del_unbound_local_does_not_raise"])


# Bug 3: an exception raised while a compiled graph runs (here max() of an empty tensor, which tracing lets
# through) inside a try block skips the frame's except / finally handlers. Seeds 210, 765, 1604, 1692.
REPROS["graph_exception_skips_except"] = ("""
import torch
def f(x):
    try:
        y = x[5:].max()
    except RuntimeError:
        y = x * 2
    return y
""", ones(2, 3), 1, "eager")
REPROS["graph_exception_skips_finally"] = ("""
import torch
GL = []
def f(x):
    try:
        y = x[5:].max()
    finally:
        GL.append(1)
        print("finally")
    return y
""", ones(2, 3), 1, "eager")


def test_graph_exception_skips_except():
    check(*REPROS["graph_exception_skips_except"])


def test_graph_exception_skips_finally():
    check(*REPROS["graph_exception_skips_finally"])


# Bug 4: a graph break while the arguments of a method call on an object made in the frame are evaluated
# (x.tolist() inside the call) loses the method's writes to self. Seed 1842.
REPROS["break_in_method_call_args_loses_self_write"] = ("""
import torch
class D:
    def __init__(self, t):
        self.t = t
    def step(self, u):
        self.t = self.t + u
def f(x):
    c = D(x)
    c.step(torch.tensor(x.tolist()))
    return c.t * 2
""", ones(2), 1, "eager")


def test_break_in_method_call_args_loses_self_write():
    check(*REPROS["break_in_method_call_args_loses_self_write"])


# Bug 5 (aot_eager only; torch.compile(backend="aot_eager") does the same): the continuation compiled for
# distinct arguments is reused when the same tensor is passed twice (y is x), and an in-place op on a view of y
# is not seen through x. Seed 1752 (call 3: aliased inputs).
def _aliased(i):
    x = torch.tensor([[1.0, -1.0], [-0.5, 2.0]])
    return [x, x] if i == 1 else [x, x.clone()]


REPROS["aot_eager_aliased_args_view_mutation"] = ("""
def f(x, y):
    w = y.view_as(y)
    print("break")
    w.add_(1)
    return (x > 0).sum()
""", _aliased, 2, "aot_eager")


def test_aot_eager_aliased_args_view_mutation():
    check(*REPROS["aot_eager_aliased_args_view_mutation"])


# Bug 6: an exception raised while a compiled graph runs (max() of an empty tensor, which tracing lets through;
# no try block) discarded the Python side effects traced before it in the same graph: the global write, the
# append to the argument list (and attribute writes on arguments) are replayed only after the graph returns.
# Fixed: a graph that raises without having changed anything makes its frame rerun as Python (graph_call.cpp).
# Seeds 5453, 6464, 7042, 7295.
REPROS["graph_exception_loses_side_effects"] = ("""
G = 0
def f(x, lst):
    global G
    G = G + 1
    lst.append(1)
    return x[5:].max()
""", lambda i: [torch.ones(2, 3), []], 1, "eager")


def test_graph_exception_loses_side_effects():
    check(*REPROS["graph_exception_loses_side_effects"])


# Bug 7 (aot_eager only; backend eager is right): an in-place op on an input followed by an op that raises while
# the graph runs: the functionalized graph writes the mutation back only at its end, so x was left unchanged.
# Fixed as bug 6 (no input's version moved: the frame reruns as Python).
# Seed 6464.
REPROS["aot_eager_graph_exception_loses_input_mutation"] = ("""
def f(x):
    x.add_(1)
    return x[5:].max()
""", ones(2, 3), 1, "aot_eager")


def test_aot_eager_graph_exception_loses_input_mutation():
    check(*REPROS["aot_eager_graph_exception_loses_input_mutation"])


# Bug 8 (aot_eager): `obj.w -= 1` where obj.w is the argument x, after a break, in a graph whose inputs are x and a
# view of x: the in-place result was rebuilt from the graph's output, which aot_eager (synthetic base for the
# aliased inputs) hands back as a new tensor, so obj.w stopped being x. An in-place op's result is its receiver.
# Seeds 11484, 16476 (call 3, aliased arguments).
class _Box:
    pass


def _inplace_on_aliased_input(x, obj):
    t2 = x.reshape(-1).reshape(x.shape)
    k3 = (t2 > 0).sum().item()
    b6 = t2.sort(dim=0)[0]
    obj.w -= 1
    y = obj.w.mul_(2)
    return k3, b6, y


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_inplace_result_on_aliased_input_keeps_identity(backend):
    opt = cdynamo.optimize(backend)(_inplace_on_aliased_input)
    g = torch.Generator().manual_seed(0)
    x, o = torch.randn(3, 2, generator=g), _Box()
    o.w = torch.randn(3, 2, generator=g)
    opt(x, o)
    for fn in (_inplace_on_aliased_input, opt):
        x, o = torch.randn(3, 2, generator=torch.Generator().manual_seed(1)), _Box()
        o.w = x
        k3, b6, y = fn(x, o)
        assert o.w is x and y is x
        torch.testing.assert_close(x, (torch.randn(3, 2, generator=torch.Generator().manual_seed(1)) - 1) * 2)


# Bug 10: a cell variable (captured by a comprehension) deleted in a continuation, then deleted again:
# eager raises UnboundLocalError, the continuation NameError (its copy of the frame's cell is a free variable,
# and CPython names the error by the slot's kind). Fuzz seeds 34058, 44046 (FINDINGS.md). Fixed: the continuation
# checks the cell first (codegen/graph_break.cpp: check_unbound_cells), on 3.11 and 3.12.
REPROS["deleted_cell_in_continuation_raises_name_error"] = ("""
def f(x, lst):
    t1 = x * 2
    t2 = t1 * int(t1[0, 0] > 0)
    t4 = t2
    l8 = [t4 * q for q in range(1)]
    for it in lst:
        del t4
    return l8
""", lambda i: [torch.ones(2, 2), [1, 2]], 1, "eager")


def test_deleted_cell_in_continuation_raises_name_error():
    check(*REPROS["deleted_cell_in_continuation_raises_name_error"])


# The same for a read (LOAD_DEREF) of the deleted cell variable in the continuation.
REPROS["deleted_cell_read_in_continuation"] = ("""
def f(x, lst):
    t1 = x * 2
    t2 = t1 * int(t1[0, 0] > 0)
    t4 = t2
    l8 = [t4 * q for q in range(1)]
    for it in lst:
        if it > 1:
            print(t4)
        del t4
    return l8
""", lambda i: [torch.ones(2, 2), [1, 2]], 1, "eager")


def test_deleted_cell_read_in_continuation():
    check(*REPROS["deleted_cell_read_in_continuation"])


# ------------------------------------------------------------------------------------------------------
# Module-shaped generator (tests/fuzz/gen_modules.py). A global ``M`` of a repro is compared after each call
# (parameters with grads, buffers, Python attributes of every submodule).

# Bug 11: hasattr / getattr(obj, name, default) on an object of the frame after this trace assigned the
# attribute with setattr() (or in a forward pre-hook) answered from the object as it was before the
# trace: the store is replayed only after the graph. Module-fuzz seeds 411, 545, 582.
REPROS["hasattr_after_setattr_in_trace"] = ("""
import torch
class Holder(torch.nn.Module):
    pass
M = Holder()
def f(x):
    if hasattr(M, 'tmp'):
        x = x + M.tmp
        del M.tmp
    else:
        setattr(M, 'tmp', x.sum())
    if hasattr(M, 'tmp'):
        x = x + 100
    M.calls = getattr(M, 'calls', 0) + 1
    M.calls = getattr(M, 'calls', 0) + 1
    return x
""", ones(2), 3, "eager")


def test_hasattr_after_setattr_in_trace():
    check(*REPROS["hasattr_after_setattr_in_trace"])


# Bug 12: a functools.partial made in the trace and alive at a graph break (a local, or held in a list) was
# rebuilt as if it were a function made by MAKE_FUNCTION: the call raised TypeError("_make_function(template,
# cells)") to the user. Module-fuzz seeds 0, 16, 43, 77, 103, 121, 277, 292, 298, 305, 354, 359.
REPROS["partial_made_in_trace_live_at_break"] = ("""
import functools
import torch
torch.manual_seed(0)
M = torch.nn.Linear(2, 2)
def f(x):
    add2 = functools.partial(torch.add, alpha=2)
    lin = functools.partial(M)
    keep = [add2]
    print('brk', add2.keywords)
    y = lin(add2(x, x))
    print('brk again')
    return y, keep[0] is add2, add2.keywords, add2.func is torch.add
""", ones(2), 2, "eager")


def test_partial_made_in_trace_live_at_break():
    check(*REPROS["partial_made_in_trace_live_at_break"])


# Bug 13: `w.data` was traced as w.detach(), which shares w's version counter: an in-place op through it
# (`ln.weight.data[0].fill_(0.1)` after the LayerNorm ran) bumped the parameter's version, and backward
# raised "one of the variables needed for gradient computation has been modified by an inplace operation"
# where eager (whose .data has its own counter) does not. Module-fuzz seed 332.
REPROS["data_write_keeps_version_counter"] = ("""
import torch
torch.manual_seed(0)
M = torch.nn.LayerNorm(3)
def f(x):
    y = M(x)
    M.weight.data[0].fill_(0.1)
    M.bias.data.mul_(0.5)
    y.sum().backward()
    return y.detach(), M.weight._version, M.weight.data._version
""", lambda i: [torch.randn(2, 3, generator=torch.Generator().manual_seed(i))], 2, "eager")


def test_data_write_keeps_version_counter():
    check(*REPROS["data_write_keeps_version_counter"])


# Bug 14: `obj.__dict__` read after an attribute assignment in the same trace (`self.tmp = t` then
# `'tmp' in self.__dict__`) gave the object's real dict, which does not hold the assignment yet (it is
# replayed after the graph). Found with the module-shaped constructs (FINDINGS.md).
REPROS["dunder_dict_after_setattr_in_trace"] = ("""
import torch
class Holder(torch.nn.Module):
    pass
M = Holder()
def f(x):
    M.tmp = x * 2
    d = M.__dict__
    has = 'tmp' in d
    if has:
        x = x + d['tmp']
    return x, has, sorted(k for k in d if not k.startswith('_'))
""", ones(2), 2, "eager")


def test_dunder_dict_after_setattr_in_trace():
    check(*REPROS["dunder_dict_after_setattr_in_trace"])


# Bug 16: an assignment to a module attribute that nn.Module.__setattr__ files in _parameters / _buffers /
# _modules (a new Parameter, a buffer's new value) is replayed after the graph; reading those dicts later in
# the same graph, or walking them with parameters() / buffers() / modules(), gave the old contents ('extra' in
# self._parameters was False). Found by a hand probe of module-shaped constructs, then module-fuzz seed 35.
REPROS["module_dicts_after_setattr_in_trace"] = ("""
import torch
class Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer('running', torch.zeros(2))
        self.steps = 0
M = Holder()
def f(x):
    M.steps += 1
    M.running = M.running * 0.5 + x
    M.extra = torch.nn.Parameter(torch.ones(2) * M.steps)
    n = len(list(M.parameters()))
    return x * M.extra, 'extra' in M._parameters, M._buffers['running'] * 1, sorted(M._parameters), n
""", ones(2), 3, "eager")


def test_module_dicts_after_setattr_in_trace():
    check(*REPROS["module_dicts_after_setattr_in_trace"])


# Bug 15 (open): dict.keys() / values() / items() of a dict are traced as a tuple snapshot of the dict: the
# view's type (print shows ('a', 'b') instead of dict_keys(['a', 'b'])), its comparisons (d.keys() == {'a'}
# is False), its set operations (d.keys() - {'a'} raises TypeError) and its liveness (a key added after
# keys() was called is missing) differ from eager. Found with the module-shaped constructs (FINDINGS.md).
REPROS["dict_view_is_a_tuple_snapshot"] = ("""
import torch
def f(x):
    d = {'a': x, 'b': 1}
    k = d.keys()
    d['c'] = 2
    print(d.items())
    return x + 1, list(k), d.keys() == {'a', 'b', 'c'}, sorted(d.keys() - {'a'}), type(d.values()).__name__
""", ones(2), 1, "eager")


def test_dict_view_is_a_tuple_snapshot():
    check(*REPROS["dict_view_is_a_tuple_snapshot"])


# What torch.compile (same torch, same backend) does on each repro: None where it matches eager.
TORCH_COMPILE_DIFFERS = {
    "del_unbound_local_does_not_raise": "raises InternalTorchDynamoError (KeyError: t), not UnboundLocalError",
    "graph_exception_skips_except": "same bug: the RuntimeError escapes the except",
    "graph_exception_skips_finally": "same bug: finally skipped",
    "aot_eager_aliased_args_view_mutation": "same bug with backend aot_eager",
    "graph_exception_loses_side_effects": "same bug: G and lst unchanged",
    "aot_eager_graph_exception_loses_input_mutation": "same bug with backend aot_eager",
    "deleted_cell_in_continuation_raises_name_error": "same bug: NameError (its resume function's cell is free too)",
}
if sys.version_info < (3, 12):  # 3.12+ inline comprehensions (PEP 709): t4 is no cell there, and torch.compile agrees
    TORCH_COMPILE_DIFFERS["deleted_cell_read_in_continuation"] = (
        "same bug: NameError (its resume function's cell is free too)")


# torch._dynamo before the pinned torch (the GPU machine's 2.11) gets these wrong too.
OLDER_TORCH_COMPILE_DIFFERS = {} if REFERENCE_PINNED else {
    "hasattr_after_setattr_in_trace": "torch < 2.13: InternalTorchDynamoError (AttributeError: module "
                                      "'fuzz_regression' has no attribute 'M')",
    "method_class_attr_write_loses_self_write": "torch < 2.13: the write through self is lost (call 1 returns 2, "
                                                "eager 1)",
}


def _reference_marks(n):
    if n in TORCH_COMPILE_DIFFERS:
        return [pytest.mark.xfail(strict=True, reason="torch.compile: " + TORCH_COMPILE_DIFFERS[n])]
    if n in OLDER_TORCH_COMPILE_DIFFERS:
        return [pytest.mark.xfail(strict=False, reason="torch.compile: " + OLDER_TORCH_COMPILE_DIFFERS[n])]
    return []


@pytest.mark.parametrize("name", [pytest.param(n, marks=_reference_marks(n)) for n in sorted(REPROS)])
def test_torch_compile_agrees(name):
    """torch._dynamo (torch.compile with the repro's backend) on the same repro, for reference."""
    d = check_torch_compile(*REPROS[name])
    assert d is None, d
