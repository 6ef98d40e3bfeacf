# test_api_parity_12.py — owns issue 12's assume_constant_result, skip / disable(recursive=False), the error policy
# (suppress_errors, BackendCompilerFailed, InternalError) and torch.jit helpers, each compared with torch._dynamo.
import warnings

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
from cdynamo import config
from cdynamo.exc import BackendCompilerFailed, CdynamoWarning, InternalError, Unsupported
from cdynamo.testing import CompileCounter, EagerAndRecordGraphs
from graph_counts import compiled, dynamo_graphs

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


@pytest.fixture(autouse=True)
def _config_restored():
    saved = config.to_dict()
    yield
    for k, v in saved.items():
        setattr(config, k, v)


def _ops(graphs):
    return [n.target for g in graphs for n in g.graph.nodes if n.op in ("call_function", "call_method")]


# ---------------------------------------------------------------- assume_constant_result

def test_assume_constant_result_returns_fn_and_calls_through_outside_a_trace():
    def f(a):
        return a + 1

    assert cdynamo.assume_constant_result(f) is f and f(1) == 2
    assert getattr(f, "_dynamo_marked_constant") is True  # torch._dynamo's mark: read by both


@pytest.mark.parametrize("mark", [cdynamo.assume_constant_result, torch._dynamo.assume_constant_result])
def test_assume_constant_result_is_made_once_while_tracing_like_dynamo(mark):
    calls = []

    @mark
    def const_fn(n, s):
        calls.append(n)
        return torch.full([n], s)

    def fn(b):
        c = const_fn(b.size(0), 13)
        return b * 2 + c

    x = torch.randn(4)
    expected = x * 2 + 13
    opt, cnt = compiled(fn)
    for _ in range(3):
        torch.testing.assert_close(opt(x), expected)
    assert (cnt.frame_count, cnt.op_count, len(calls)) == (1, 2, 1)  # no full() in the graph: a constant
    calls.clear()
    theirs = torch._dynamo.testing.CompileCounter()
    opt_d = torch.compile(fn, backend=theirs)
    for _ in range(3):
        torch.testing.assert_close(opt_d(x), expected)
    assert (theirs.frame_count, theirs.op_count, len(calls)) == (1, 2, 1)


def test_assume_constant_result_is_not_guarded_like_dynamo():
    state = {"scale": 2.0}

    @cdynamo.assume_constant_result
    def scale():
        return state["scale"]

    def fn(x):
        return x * scale()

    x = torch.ones(2)
    opt, cnt = compiled(fn)
    opt_d = torch.compile(fn, backend="eager")
    assert torch.equal(opt(x), x * 2) and torch.equal(opt_d(x), x * 2)
    state["scale"] = 5.0  # the promise is broken: both keep the traced value (an inlined call would recompile)
    assert torch.equal(opt(x), x * 2) and torch.equal(opt_d(x), x * 2)
    assert cnt.frame_count == 1 and torch.equal(fn(x), x * 5)


def test_assume_constant_result_tensor_of_the_frame_and_method_on_a_module():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        @cdynamo.assume_constant_result
        def mask(self, x):
            return (x > 0).nonzero()  # data-dependent shape: not traceable, fine as a constant

        def forward(self, x):
            return self.lin(x).sum() + self.mask(x).sum()

    m = M()
    x = torch.randn(5, 3)
    rec = EagerAndRecordGraphs()
    torch.testing.assert_close(cdynamo.optimize(rec)(m)(x), m(x))
    assert len(rec.graphs) == 1 and torch.nonzero not in _ops(rec.graphs)
    assert "nonzero" not in str(_ops(rec.graphs))


def test_assume_constant_result_in_export_is_a_graph_attribute_like_dynamo():
    @cdynamo.assume_constant_result
    def table():
        return torch.arange(4.0)

    def fn(x):
        return x + table()

    x = torch.randn(4)
    gm, _ = cdynamo.export(fn, x)
    torch.testing.assert_close(gm(x), x + torch.arange(4.0))
    assert [n.op for n in gm.graph.nodes].count("get_attr") == 1
    theirs, _ = torch._dynamo.export(fn)(x)
    assert [n.op for n in theirs.graph.nodes].count("get_attr") == 1


def test_assume_constant_result_on_a_computed_tensor_breaks_the_graph():
    @cdynamo.assume_constant_result
    def first(t):
        return t[0].item()

    def fn(x):
        y = x * 2
        return y + first(y)

    x = torch.randn(3)
    opt, cnt = compiled(fn)
    torch.testing.assert_close(opt(x), fn(x))  # not known while tracing: the call runs as Python
    reasons = [r.reason for r in cdynamo.explain(fn)(x).break_reasons]
    assert "tensor computed by the graph" in reasons[0], reasons
    with pytest.raises(Unsupported, match="assume_constant_result"):
        cdynamo.optimize("eager", nopython=True)(fn)(x)


# ---------------------------------------------------------------- skip / disable(recursive=False)

def _inner(x):
    return x.sin()


def _body(x):
    y = x + 1  # not captured: this frame runs as Python
    return _inner(y) * 3  # _inner's frame is captured


def _caller(x):
    return _wrapped(x.cos()) - 1


_wrapped = None


def _graphs_of(wrapper, x):
    global _wrapped
    _wrapped = wrapper
    rec = EagerAndRecordGraphs()
    torch.testing.assert_close(cdynamo.optimize(rec)(_caller)(x), _caller(x))
    return rec.graphs


@pytest.mark.parametrize("make", [lambda f: cdynamo.disable(f, recursive=False),
                                  lambda f: cdynamo.disable(recursive=False)(f),
                                  lambda f: torch._dynamo.disable(f, recursive=False),
                                  lambda f: torch.compiler.disable(f, recursive=False)])
def test_disable_non_recursive_runs_the_frame_as_python_and_compiles_its_callees(make):
    x = torch.randn(3)
    graphs = _graphs_of(make(_body), x)
    ops = _ops(graphs)
    # caller before the call, _inner, caller after it; _body's own add and mul are not in any graph.
    assert len(graphs) == 3
    assert "cos" in ops and "sin" in ops and ops.count(__import__("operator").sub) == 1
    assert __import__("operator").add not in ops and __import__("operator").mul not in ops
    global _wrapped
    _wrapped = torch._dynamo.disable(_body, recursive=False)
    assert dynamo_graphs(_caller, x) == 3


def test_disable_non_recursive_called_directly_under_optimize():
    nr = cdynamo.disable(_body, recursive=False)
    rec = EagerAndRecordGraphs()
    x = torch.randn(3)
    torch.testing.assert_close(cdynamo.optimize(rec)(nr)(x), _body(x))
    assert len(rec.graphs) == 1 and _ops(rec.graphs) == ["sin"]  # only _inner
    torch.testing.assert_close(nr(x), _body(x))  # outside a compiled region: just the call


def test_disable_non_recursive_under_fullgraph_is_unsupported_like_dynamo():
    global _wrapped
    x = torch.randn(3)
    _wrapped = cdynamo.disable(_body, recursive=False)
    with pytest.raises(Unsupported, match="disable"):
        cdynamo.compile(_caller, backend="eager", fullgraph=True)(x)
    _wrapped = torch._dynamo.disable(_body, recursive=False)
    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch.compile(_caller, backend="eager", fullgraph=True)(x)


def _skipped_body(x):
    return _inner(x + 1) * 3


def test_skip_marks_the_code_like_dynamo_skip():
    assert cdynamo.skip(_skipped_body) is _skipped_body and cdynamo.skip() is cdynamo.skip
    x = torch.randn(3)
    graphs = _graphs_of(_skipped_body, x)
    assert len(graphs) == 3 and __import__("operator").add not in _ops(graphs)
    cdynamo.reset()  # the mark outlives reset()
    rec = EagerAndRecordGraphs()
    torch.testing.assert_close(cdynamo.optimize(rec)(_skipped_body)(x), _skipped_body(x))
    assert _ops(rec.graphs) == ["sin"]

    def theirs(x):
        return x.sin() + 1

    def call_theirs(x):
        return theirs(x.cos()) - 1

    torch._dynamo.decorators.skip(theirs)  # torch._dynamo's skip, honoured by cdynamo too
    rec = EagerAndRecordGraphs()
    torch.testing.assert_close(cdynamo.optimize(rec)(call_theirs)(x), call_theirs(x))
    assert len(rec.graphs) == 2 and "sin" not in _ops(rec.graphs)
    assert dynamo_graphs(call_theirs, x) == 2


def test_skip_under_nopython_is_a_clear_error():
    def fn(x):
        return _skipped_body(x)

    cdynamo.skip(_skipped_body)
    with pytest.raises(Unsupported, match=r"_skipped_body.*marked skip(.|\n)*test_api_parity_12.py:\d+"):
        cdynamo.optimize("eager", nopython=True)(fn)(torch.randn(2))


# ---------------------------------------------------------------- error policy

def _boom(gm, example_inputs):
    raise ValueError("backend said no")


def _plus_one(x):
    return x.sin() + 1


def test_backend_failure_raises_by_default_like_torch_compile():
    x = torch.randn(3)
    with pytest.raises(BackendCompilerFailed, match="backend said no") as info:
        cdynamo.optimize(_boom)(_plus_one)(x)
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="backend said no"):
        torch.compile(_plus_one, backend=_boom)(x)


def test_suppress_errors_runs_as_python_with_one_warning_like_dynamo():
    x = torch.randn(3)
    config.suppress_errors = True
    opt = cdynamo.optimize(_boom)(_plus_one)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(opt(x), _plus_one(x))
    mine = [str(m.message) for m in w if issubclass(m.category, CdynamoWarning)]
    assert len(mine) == 1 and "backend said no" in mine[0] and "_plus_one" in mine[0], mine
    with torch._dynamo.config.patch(suppress_errors=True):
        torch.testing.assert_close(torch.compile(_plus_one, backend=_boom)(x), _plus_one(x))


def test_suppress_errors_does_not_apply_under_fullgraph():
    config.suppress_errors = True
    with pytest.raises(BackendCompilerFailed, match="backend said no"):
        cdynamo.compile(_plus_one, backend=_boom, fullgraph=True)(torch.randn(3))


@pytest.fixture
def broken_internals():
    # An error inside cdynamo's compile path (here: the graph's error policy, read for every graph), put in through the
    # services object the C++ core calls (cdynamo._services), reinstalled whole afterwards.
    from cdynamo import _core, _services

    def broken(*args):
        raise KeyError("internal bug for the test")

    services = _services.Services()
    services.graph_error_policy = broken
    _core.C().set_services(services)
    try:
        yield
    finally:
        _services.install(_core.C())


@pytest.mark.usefixtures("broken_internals")
def test_internal_error_falls_back_with_one_warning_and_the_right_result():
    opt = cdynamo.optimize("eager")(_plus_one)
    x = torch.randn(3)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(2):
            torch.testing.assert_close(opt(x), _plus_one(x))
    mine = [str(m.message) for m in w if issubclass(m.category, CdynamoWarning)]
    assert len(mine) == 1 and "internal error" in mine[0] and "internal bug for the test" in mine[0], mine


@pytest.mark.usefixtures("broken_internals")
@pytest.mark.parametrize("suppress", [False, True])
def test_internal_error_under_fullgraph_raises_internal_error(suppress):
    config.suppress_errors = suppress
    with pytest.raises(InternalError, match=r"_plus_one \(.*test_api_parity_12.py:\d+\).*internal bug") as info:
        cdynamo.compile(_plus_one, backend="eager", fullgraph=True)(torch.randn(3))
    assert isinstance(info.value.__cause__, KeyError)


# ---------------------------------------------------------------- torch.jit helpers

@torch.jit.script_if_tracing
def _scripted_if_tracing(x):
    return x * 3


@torch.jit.ignore
def _ignored(x):
    return x + 2


@torch.jit.unused
def _unused(x):
    return x - 1


def _jit_helpers(x, maybe):
    y = x * 100 if torch.jit.is_scripting() else x.sin()
    if torch.jit.is_tracing():
        y = y * 100
    y = torch.jit.annotate(torch.Tensor, y)
    y = torch.jit._unwrap_optional(y) + torch.jit._unwrap_optional(maybe)
    return _unused(_ignored(_scripted_if_tracing(y)))


def test_jit_helpers_trace_without_breaks_like_dynamo():
    x, m = torch.randn(3), torch.randn(3)
    opt, cnt = compiled(_jit_helpers, CompileCounter())
    torch.testing.assert_close(opt(x, m), _jit_helpers(x, m))
    theirs = torch._dynamo.testing.CompileCounter()
    torch.testing.assert_close(torch.compile(_jit_helpers, backend=theirs)(x, m), _jit_helpers(x, m))
    assert (cnt.frame_count, cnt.op_count) == (theirs.frame_count, theirs.op_count) == (1, 5)
    cdynamo.optimize("eager", nopython=True)(_jit_helpers)(x, m)


def test_jit_isinstance_of_a_class_is_traced():
    def fn(x, y):
        a = x.sin()
        return a + 1 if torch.jit.isinstance(y, torch.Tensor) else a - 1

    x = torch.randn(3)
    for y in (x, 3):
        opt, cnt = compiled(fn)
        torch.testing.assert_close(opt(x, y), fn(x, y))
        assert cnt.frame_count == 1
        cdynamo.reset()
    assert dynamo_graphs(fn, x, x) == 2  # torch._dynamo refuses torch.jit.isinstance: a graph break


def test_jit_unwrap_optional_of_none_raises_as_in_eager():
    opt = cdynamo.optimize("eager")(_jit_helpers)
    with pytest.raises(AssertionError, match="Unwrapping null optional"):
        opt(torch.randn(3), None)


def test_jit_trace_inside_a_compiled_function_runs_as_python_like_dynamo():
    lin = torch.nn.Linear(3, 3)
    traced = []

    def fn(x):
        y = x.cos()
        t = torch.jit.trace(lin, (y,))
        traced.append(t)
        return t(y) * 2

    x = torch.randn(2, 3)
    opt, cnt = compiled(fn)
    torch.testing.assert_close(opt(x), lin(x.cos()) * 2)
    assert isinstance(traced[-1], torch.jit.ScriptModule)  # torch.jit.trace really ran
    assert cnt.frame_count == dynamo_graphs(fn, x) == 2
    with pytest.raises(Unsupported, match="trace"):
        cdynamo.optimize("eager", nopython=True)(fn)(x)


# ---------------------------------------------------------------- user objects made in the frame (nopython)

def _both(fn, *args):
    """(cdynamo CompileCounter, torch._dynamo CompileCounter) after fn(*args) under nopython, results compared."""
    import tape_autograd as ta

    ours, theirs = CompileCounter(), torch._dynamo.testing.CompileCounter()
    ta.clear()
    expected = fn(*args)
    expected_tape = [(s.ins, s.out) for s in ta.tape]
    for opt in (cdynamo.optimize(ours, nopython=True)(fn), torch._dynamo.optimize(theirs, nopython=True)(fn)):
        ta.clear()
        got = opt(*args)
        torch.testing.assert_close(got, expected)
        assert [(s.ins, s.out) for s in ta.tape] == expected_tape
    return ours, theirs


@pytest.mark.parametrize("name", ["forward_only", "forward_and_backward"])
def test_tape_autograd_compiles_as_one_graph_like_dynamo(name):
    import tape_autograd as ta

    x, w = torch.randn(6), torch.randn(6)
    ours, theirs = _both(getattr(ta, name), x, w)
    assert (ours.frame_count, ours.op_count) == (theirs.frame_count, theirs.op_count)
    assert ours.frame_count == 1
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    ((xr * wr).tanh() * 2.0 + xr).sum().backward()
    if name == "forward_and_backward":  # the Python autograd agrees with torch's
        _, gx, gw = cdynamo.optimize("eager", nopython=True)(ta.forward_and_backward)(x, w)
        torch.testing.assert_close((gx, gw), (xr.grad, wr.grad))


def test_tape_left_by_a_compiled_forward_backpropagates_in_python():
    # The closures the compiled forward stored on the global tape are rebuilt after the graph, with cells holding
    # the rebuilt objects: running them eagerly gives torch's gradients.
    import tape_autograd as ta

    x, w = torch.randn(4), torch.randn(4)
    opt, cnt = compiled(ta.loss_of, CompileCounter())
    ta.clear()
    loss = cdynamo.optimize(cnt, nopython=True)(ta.loss_of)(x, w)
    assert isinstance(loss, ta.Node) and cnt.frame_count == 1
    assert all(callable(s.backward) for s in ta.tape) and len(ta.tape) == 5 and ta._counter == 5
    wrt = [ta.Node(x, "x"), ta.Node(w, "w")]
    gx, gw = ta.gradients(loss, wrt)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    ((xr * wr).tanh() * 2.0 + xr).sum().backward()
    torch.testing.assert_close((gx.data, gw.data), (xr.grad, wr.grad))
    grad_fn, cnt2 = compiled(ta.gradients, CompileCounter())  # the tape of real closures, inlined
    gx2, gw2 = cdynamo.optimize(cnt2, nopython=True)(ta.gradients)(loss, wrt)
    torch.testing.assert_close((gx2.data, gw2.data), (xr.grad, wr.grad))
    assert cnt2.frame_count == 1


class _Vec:
    def __init__(self, v):
        self.v = v

    def __add__(self, other):
        if not isinstance(other, _Vec):
            return NotImplemented
        return _Vec(self.v + other.v)

    def __radd__(self, other):
        return _Vec(self.v + other)

    def __iadd__(self, other):
        self.v = self.v + other.v
        return self

    def __matmul__(self, other):
        return (self.v * other.v).sum()


def test_operators_of_user_objects_made_in_the_frame():
    def fn(x, y):
        a, b = _Vec(x), _Vec(y)
        c = a + b          # __add__
        d = 1.5 + c        # float's add returns NotImplemented: __radd__
        d += a             # __iadd__, in place on d
        return d.v

    x, y = torch.randn(3), torch.randn(3)
    ours, theirs = CompileCounter(), torch._dynamo.testing.CompileCounter()
    torch.testing.assert_close(cdynamo.optimize(ours, nopython=True)(fn)(x, y), fn(x, y))
    torch.testing.assert_close(torch._dynamo.optimize(theirs, nopython=True)(fn)(x, y), fn(x, y))
    assert (ours.frame_count, ours.op_count) == (theirs.frame_count, theirs.op_count) == (1, 3)

    def dot(x, y):
        return _Vec(x) @ _Vec(y)  # __matmul__ (torch._dynamo: "Failed to trace builtin operator matmul")

    torch.testing.assert_close(cdynamo.optimize("eager", nopython=True)(dot)(x, y), dot(x, y))

    def mixed(x):
        return _Vec(x) + 2  # __add__ answers NotImplemented and int has no __radd__ for _Vec: TypeError

    with pytest.raises(TypeError):
        mixed(x)
    with pytest.raises(TypeError):
        cdynamo.optimize("eager")(mixed)(x)


def test_closures_made_in_the_frame_share_their_cells_after_the_graph():
    def make(x):
        total = x.sum()

        def add(t):
            nonlocal total
            total = total + t
            return total

        def read():
            return total

        return add, read

    x = torch.randn(3)
    add, read = cdynamo.optimize("eager", nopython=True)(make)(x)
    torch.testing.assert_close(read(), x.sum())
    add(torch.ones(()))
    torch.testing.assert_close(read(), x.sum() + 1)  # one cell shared by both functions, as in eager
    assert add.__qualname__ == "test_closures_made_in_the_frame_share_their_cells_after_the_graph.<locals>.make.<locals>.add"


# ---------------------------------------------------------------- profiler record_function (torch.optim's step wrapper)
def _profiled(x):
    with torch.autograd.profiler.record_function("block") as r:
        y = x.sin() * 2
    return y + (1 if r is not None else 0)


def _profiled_with_break(x):
    with torch.profiler.record_function("block"):
        a = x.sin()
        print("inside", a.shape)  # a graph break inside the block
        b = a.cos()
    return b + 1


def test_record_function_block_is_traced_and_not_recorded_like_dynamo():
    import contextlib
    import io
    x = torch.randn(4)
    fn, cnt = compiled(_profiled)
    torch.testing.assert_close(fn(x), _profiled(x))
    assert (cnt.frame_count, cnt.op_count) == (1, 3)
    assert dynamo_graphs(_profiled, x) == 1
    # nothing of it reaches the profiler, as torch._dynamo ignores the range
    with torch.profiler.profile() as prof:
        fn(x)
    assert "block" not in {e.name for e in prof.events()}
    fn2, cnt2 = compiled(_profiled_with_break)
    out, ref = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out):
        got = fn2(x)
    with contextlib.redirect_stdout(ref):
        want = _profiled_with_break(x)
    torch.testing.assert_close(got, want)
    assert out.getvalue() == ref.getvalue()
    assert cnt2.frame_count == dynamo_graphs(_profiled_with_break, x) == 2


def test_record_function_named_by_an_argument():
    def f(x, name):
        with torch.autograd.profiler.record_function(name + "!"):
            return x + 1

    fn, cnt = compiled(f)
    torch.testing.assert_close(fn(torch.ones(2), "n"), torch.ones(2) + 1)
    assert cnt.frame_count == 1


def _null_contexts(x, on):
    import contextlib
    with contextlib.nullcontext():
        y = x.sin()
    with (torch.no_grad() if on else contextlib.nullcontext(7)) as v:
        z = y * (2 if v is None else v)
    return z


@pytest.mark.parametrize("on", [False, True])
def test_nullcontext_blocks_are_traced_like_dynamo(on):
    # transformers' maybe_autocast() returns nullcontext() (5.17's rotary embeddings: llama-family models 4 -> 1 graph)
    x = torch.randn(3)
    fn, cnt = compiled(_null_contexts)
    torch.testing.assert_close(fn(x, on), _null_contexts(x, on))
    assert cnt.frame_count == dynamo_graphs(_null_contexts, x, on) == 1
