# test_graph_errors.py — owns the tests of a compiled graph that raises while it runs: the frame reruns as Python when the failed call changed nothing (side effects, input writes and RNG then match eager), never when it did.
"""A graph that raises at run time (``x[5:].max()`` on an empty slice) has not run the Python side effects
traced before the failing op: they are written after the graph returns. Eager has run them. When the failed
call changed no input and drew no random number (or they were put back), the frame runs as plain Python
from its start, which gives eager's side effects and eager's exception. Fuzz bugs 6 and 7."""
import traceback
import types
import warnings

import pytest
import torch
import torch._dynamo.testing
import torch.fx

import cdynamo
from cdynamo import _graph_call
from cdynamo.testing import CompileCounter, CompileCounterWithBackend

pytestmark = pytest.mark.usefixtures("cdynamo_reset")

BACKENDS = ["eager", "aot_eager"]
G = 0
GL = []


class Box:
    pass


def _outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except RuntimeError as e:
        return ("raised", str(e).splitlines()[0])


def side_effects(x, lst, box):
    global G
    G = G + 1
    lst.append(x.size(0))
    box.c = x.sum()
    GL.append(len(lst))
    return x[5:].max()


def bump():
    global G
    G = G + 10


def inlined_effect(x):
    bump()
    return x[5:].max()


@pytest.mark.parametrize("backend", BACKENDS)
def test_side_effects_before_failing_op_happen(backend):
    global G
    ref = []
    for compiled in (False, True):
        G = 0
        GL.clear()
        lst, box = [], Box()
        fn = cdynamo.optimize(backend)(side_effects) if compiled else side_effects
        outs = [_outcome(fn, torch.ones(2, 3), lst, box) for _ in range(3)]
        ref.append((outs, G, list(GL), lst, float(box.c)))
    assert ref[1] == ref[0]
    assert ref[0][1] == 3 and ref[0][3] == [2, 2, 2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_effect_of_inlined_function_happens(backend):
    global G
    G = 0
    with pytest.raises(RuntimeError):
        cdynamo.optimize(backend)(inlined_effect)(torch.ones(2, 3))
    assert G == 10


def mutate_then_fail(x):
    x.add_(1)
    return x[5:].max()


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_write_before_failing_op_happens_once(backend):
    # aot_eager writes input mutations back at the end of the graph (lost when it raises: the frame reruns);
    # eager runs x.add_ before the failing op (the version moved: no rerun, or x would be 3).
    x = torch.ones(2, 3)
    with pytest.raises(RuntimeError):
        cdynamo.optimize(backend)(mutate_then_fail)(x)
    assert torch.equal(x, torch.full((2, 3), 2.0))


def effect_write_then_fail(x, y, lst):
    lst.append(1)
    x[0].add_(1)      # through a view of x
    z = y * 2
    z.add_(1)         # a fresh tensor: y is not copied
    return x[5:].max() + z.sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_write_with_side_effects_is_put_back_and_rerun(backend):
    # backend eager writes x before the failing op: x is copied before the call and put back, the frame
    # reruns, and both the write and the append happen once.
    x, y, lst = torch.ones(2, 3), torch.ones(2, 3), []
    with pytest.raises(RuntimeError):
        cdynamo.optimize(backend)(effect_write_then_fail)(x, y, lst)
    assert lst == [1]
    assert torch.equal(x, torch.tensor([[2.0] * 3, [1.0] * 3])) and torch.equal(y, torch.ones(2, 3))


def test_snapshot_only_written_inputs_of_frames_with_effects():
    effect_write_then_fail(torch.ones(6, 3), torch.ones(6, 3), [])
    cdynamo.optimize("eager")(effect_write_then_fail)(torch.ones(6, 3), torch.ones(6, 3), [])
    cdynamo.optimize("eager")(mutate_then_fail)(torch.ones(6, 3))
    masks = {v._snapshot_mask for k, v in globals().items() if k.startswith("__compiled_fn_")}
    assert masks == {b"\x01\x00", None}  # x copied, y not; no copy without Python side effects


def test_inference_tensor_write_is_not_rerun():
    # An inference tensor has no version counter: a write cannot be seen, so the error propagates as it is.
    with torch.inference_mode():
        x = torch.ones(2, 3)
        with pytest.raises(RuntimeError):
            cdynamo.optimize("eager")(mutate_then_fail)(x)
    assert torch.equal(x, torch.full((2, 3), 2.0))


def dropout_then_fail(x, lst):
    lst.append(1)
    y = torch.nn.functional.dropout(x, 0.5)
    return y[5:].max()


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_numbers_drawn_once(backend):
    draws = []
    for fn in (dropout_then_fail, cdynamo.optimize(backend)(dropout_then_fail)):
        torch.manual_seed(0)
        lst = []
        with pytest.raises(RuntimeError):
            fn(torch.ones(4, 3), lst)
        draws.append((torch.rand(3).tolist(), lst))
    assert draws[1] == draws[0]


def fail_after_break(x, lst):
    lst.append("a")
    y = x + 1
    print("break")
    lst.append("b")
    return y[5:].max()


def test_continuation_reruns_only_itself(capsys):
    lst = []
    with pytest.raises(RuntimeError):
        cdynamo.optimize("eager")(fail_after_break)(torch.ones(2, 3), lst)
    assert lst == ["a", "b"]
    assert capsys.readouterr().out == "break\n"


def inner_fails(x, lst):
    lst.append("inner")
    return x[5:].max()


def outer(x, lst):
    lst.append("outer")
    y = x * 2
    print("break")
    try:
        return inner_fails(y, lst)
    except RuntimeError:
        lst.append("caught")
        return y.sum()


def test_nested_frame_error_caught_by_caller(capsys):
    ref, got = [], []
    r1 = outer(torch.ones(2, 3), ref)
    r2 = cdynamo.optimize("eager")(outer)(torch.ones(2, 3), got)
    assert torch.equal(r1, r2) and got == ref == ["outer", "inner", "caught"]


def test_traceback_names_the_users_line():
    with pytest.raises(RuntimeError) as info:
        cdynamo.optimize("eager")(side_effects)(torch.ones(2, 3), [], Box())
    last = traceback.extract_tb(info.value.__traceback__)[-1]
    assert last.name == "side_effects" and "x[5:].max()" in last.line


def append_then_fail(x, lst):
    lst.append(1)
    return x[5:].max()


def test_later_calls_stay_compiled():
    cnt = CompileCounter()
    fn = cdynamo.optimize(cnt)(append_then_fail)
    for _ in range(3):
        lst = []
        with pytest.raises(RuntimeError):
            fn(torch.ones(2, 3), lst)
        assert lst == [1]
    lst = []
    assert fn(torch.ones(6, 3), lst) == 1.0 and lst == [1]
    assert cnt.frame_count == 2  # one graph per shape, none for the reruns


def test_broken_backend_warns_once_and_gives_eager_result():
    def backend(gm, example_inputs):
        def run(*args):
            raise ValueError("kernel failed")
        return run

    fn = cdynamo.optimize(backend)(lambda x: x * 2 + 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [fn(torch.ones(3)) for _ in range(3)]
    assert all(torch.equal(o, torch.full((3,), 3.0)) for o in outs)
    msgs = [str(w.message) for w in caught if "backend may be broken" in str(w.message)]
    assert len(msgs) == 1 and "kernel failed" in msgs[0]


def test_base_exception_from_graph_is_not_rerun():
    calls = []

    def backend(gm, example_inputs):
        def run(*args):
            raise KeyboardInterrupt
        return run

    def f(x):
        calls.append(1)
        return x * 2

    with pytest.raises(KeyboardInterrupt):
        cdynamo.optimize(backend)(f)(torch.ones(3))
    assert calls == []  # the append is staged after the graph, and the frame did not rerun


# ---- the policy read from the graph -----------------------------------------------------------------------

def _policy(fn, *args):
    cnt = CompileCounterWithBackend("eager")
    cdynamo.optimize(cnt)(fn)(*args)
    (gm,) = cnt.graphs
    return _graph_call.error_policy(gm)


@pytest.mark.parametrize("fn,policy,rng", [
    (lambda x: (x * 2).sum(), _graph_call.CLEAN, False),
    (lambda x: x.add_(1) * 2, _graph_call.CHECK_VERSIONS, False),
    (lambda x: torch.relu_(x) + 1, _graph_call.CHECK_VERSIONS, False),
    (lambda x: torch.nn.functional.relu(x, inplace=True) + 1, _graph_call.CHECK_VERSIONS, False),
    # torch.nn.functional's dropouts and activations write only with inplace=True; dropouts draw only while
    # training with p > 0 (an eval-mode model's graph is clean and saves no RNG state per call).
    (lambda x: torch.nn.functional.dropout(x, 0.5) + 1, _graph_call.CLEAN, True),
    (lambda x: torch.nn.functional.dropout(x, 0.5, True, True) + 1, _graph_call.CHECK_VERSIONS, True),
    (lambda x: torch.nn.functional.dropout(x, 0.5, training=False) + 1, _graph_call.CLEAN, False),
    (lambda x: torch.nn.functional.dropout(x, 0.0, True) + 1, _graph_call.CLEAN, False),
    (lambda x: torch.nn.functional.dropout2d(x[None], 0.5, False, inplace=True) + 1, _graph_call.CHECK_VERSIONS,
     False),
    (lambda x: torch.nn.functional.alpha_dropout(x, 0.5) + 1, _graph_call.CLEAN, False),
    (lambda x: torch.nn.functional.alpha_dropout(x, 0.5, True) + 1, _graph_call.CLEAN, True),
    (lambda x: torch.nn.functional.relu(x) + 1, _graph_call.CLEAN, False),
    (lambda x: torch.nn.functional.leaky_relu(x, 0.2, True) + 1, _graph_call.CHECK_VERSIONS, False),
    (lambda x: torch.nn.functional.rrelu(x) + 1, _graph_call.CLEAN, False),
    (lambda x: torch.nn.functional.rrelu(x, training=True) + 1, _graph_call.CLEAN, True),
    (lambda x: torch.nn.functional.scaled_dot_product_attention(x[None], x[None], x[None]) + 1,
     _graph_call.CLEAN, False),
    (lambda x: torch.nn.functional.scaled_dot_product_attention(x[None], x[None], x[None], dropout_p=0.1) + 1,
     _graph_call.CLEAN, True),
    (lambda x: torch.dropout(x, 0.5, False) + 1, _graph_call.CHECK_VERSIONS, True),  # not refined: conservative
    (lambda x: x + torch.rand(3), _graph_call.CLEAN, True),
    # Running stats made in the graph: the writes reach no input, so a failed call changed nothing.
    (lambda x: torch.nn.functional.batch_norm(x, torch.zeros(3), torch.ones(3), training=True) + 1,
     _graph_call.CLEAN, False),
    # Running stats that are views of the input: written through them.
    (lambda x: torch.nn.functional.batch_norm(x, x[0].clone()[None][0], x[1], training=True) + 1,
     _graph_call.CHECK_VERSIONS, False),
    (lambda x: x.clone().add_(1) * 2, _graph_call.CLEAN, False),
])
def test_error_policy(fn, policy, rng):
    got, save, restore, _ = _policy(fn, torch.ones(2, 3))
    assert got == policy
    assert (save is not None) == rng and (restore is not None) == rng


def test_setitem_graph_checks_versions():
    def f(x):
        x[0] = 5
        return x * 2
    assert _policy(f, torch.ones(2, 3))[0] == _graph_call.CHECK_VERSIONS


def test_explicit_generator_propagates():
    g = torch.Generator().manual_seed(0)
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    r = graph.call_function(torch.rand, (3,), {"generator": g})
    graph.output(graph.call_function(torch.add, (x, r)))
    gm = types.SimpleNamespace(graph=graph)  # fx cannot print a Generator constant as code
    assert _graph_call.error_policy(gm)[0] == _graph_call.PROPAGATE


def test_graph_call_is_installed_with_policy():
    fn = cdynamo.optimize("eager")(mutate_then_fail)
    fn(torch.ones(6, 3))
    calls = [v for k, v in globals().items() if k.startswith("__compiled_fn_")]
    assert calls and all(isinstance(c, cdynamo._C.GraphCall) for c in calls)
    assert {c._error_policy for c in calls} == {_graph_call.CHECK_VERSIONS}


def test_tensor_ops_in_try_blocks_join_the_graph_when_failure_is_clean():
    # transformers' capture_outputs wrapper: `try: out = forward(...) finally: reset()`. The graph writes no
    # input, so a failed call reruns the frame as Python, whose handler runs: the ops go into one graph.
    log = []

    def fn(x, n):
        try:
            y = x.sin() * 2
            z = y[n:].max()  # raises at run time when n >= len(x): shape propagation cannot see it here
        except RuntimeError:
            log.append("handled")
            z = y.sum()
        finally:
            log.append("finally")
        return z + 1

    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(fn)
    x = torch.randn(4)
    torch.testing.assert_close(opt(x, 1), fn(x, 1))
    assert cnt.frame_count == 1
    dcnt = torch._dynamo.testing.CompileCounter()
    torch.compile(fn, backend=dcnt)(x, 1)
    assert dcnt.frame_count == 1
    log.clear()
    ref = fn(torch.randn(4), 9)
    eager_log = list(log)
    log.clear()
    got = opt(torch.randn(4), 9)  # y[9:] is empty: max() raises inside the compiled graph
    assert log == eager_log == ["handled", "finally"]
    assert got.shape == ref.shape


def test_tensor_ops_in_try_blocks_stay_out_of_writing_graphs():
    # The graph writes its input: a failed call could not rerun, so the handler would be skipped. The ops
    # inside the try block run as Python and the handler sees the error, as in eager.
    def fn(x, n):
        x.add_(1)
        try:
            z = x[n:].max()
        except RuntimeError:
            z = x.sum() * 0
        return z

    x_ref, x_got = torch.zeros(4), torch.zeros(4)
    ref = fn(x_ref, 9)
    got = cdynamo.optimize("eager")(fn)(x_got, 9)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(x_got, x_ref)
