# test_graph_breaks.py — owns the graph-break tests: the seeds' bar example (graphs, ops, continuations),
# the differential corpus of breaking functions (results, printed output, exceptions) and graph counts
# against torch._dynamo.
import contextlib
import copy
import io
import sys

import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter, assert_same

import graph_break_corpus as corpus


# cdynamo.reset() before and after each test (conftest.py).
pytestmark = pytest.mark.usefixtures("cdynamo_reset")


def clone_args(args):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a.detach().clone().requires_grad_(a.requires_grad))
        elif isinstance(a, (list, tuple)):
            out.append(type(a)(clone_args(a)))
        else:
            out.append(copy.copy(a))
    return out


def run_capturing(fn, args):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        result = fn(*args)
    return result, buf.getvalue()


def test_bar_three_graphs_with_expected_op_counts():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    opt = cdynamo.optimize(backend)(corpus.bar)
    a, b = torch.randn(10), torch.randn(10).abs()
    torch.testing.assert_close(opt(a, b), corpus.bar(a, b))
    torch.testing.assert_close(opt(a, -b), corpus.bar(a, -b))
    ops = [sum(1 for n in g.graph.nodes if n.op.startswith("call")) for g in graphs]
    assert len(graphs) == 3
    assert ops[0] == 5
    assert sorted(ops[1:]) == [1, 2]
    first = [n.target for n in graphs[0].graph.nodes if n.op.startswith("call")]
    assert first == [torch.abs, __import__("operator").add, __import__("operator").truediv, "sum",
                     __import__("operator").lt]
    # Repeated calls hit the caches of the frame and both continuations.
    for _ in range(3):
        opt(a, b)
        opt(a, -b)
    assert len(graphs) == 3
    resumes = [k for k in vars(corpus) if k.startswith("__resume_at_")]
    assert len(resumes) == 2


def test_bar_modified_bytecode_calls_two_continuations():
    infos = []
    from cdynamo import _callback

    class Printing(_callback.Callback):
        wants_text = True  # bytecode printouts are made only for logs and recorders (explain)

    cb = Printing(lambda gm, ex: gm.forward)
    original = cb.on_compiled

    def spy(info):
        infos.append(info)
        original(info)

    cb.on_compiled = spy
    prev = cdynamo._C.set_callback(cb)
    try:
        corpus.bar(torch.randn(4), torch.randn(4))
    finally:
        cdynamo._C.set_callback(prev)
    top = [i for i in infos if i["co_name"] == "bar"][0]
    text = top["modified_bytecode"]
    assert "__compiled_fn_" in text
    assert text.count("__resume_at_") == 2
    # The branch on the tensor runs as Python: 3.11 names it POP_JUMP_FORWARD_IF_FALSE, 3.12 POP_JUMP_IF_FALSE.
    assert ("POP_JUMP_FORWARD_IF_FALSE" if sys.version_info < (3, 12) else "POP_JUMP_IF_FALSE") in text
    assert len(top["resume_bytecode"]) == 2
    assert top["break_reasons"] and "tensor" in top["break_reasons"][0]["reason"]


def case_id(case):
    return case[0].__name__


@pytest.mark.parametrize("case", corpus.CASES, ids=[case_id(c) for c in corpus.CASES])
def test_breaking_function_equals_eager(case):
    fn, make_args = case
    torch.manual_seed(0)
    args = make_args()
    expected, expected_out = run_capturing(fn, clone_args(args))
    opt = cdynamo.optimize(CompileCounter())(fn)
    for _ in range(2):  # first call compiles, second runs cached code and continuations
        got, got_out = run_capturing(opt, clone_args(args))
        assert_same(got, expected)
        assert got_out == expected_out


def test_corpus_size():
    assert len(corpus.CASES) >= 60


@pytest.mark.parametrize("case", corpus.RAISING, ids=[case_id(c) for c in corpus.RAISING])
def test_exceptions_match_eager(case):
    fn, make_args = case
    args = make_args()
    with pytest.raises(Exception) as eager:
        run_capturing(fn, clone_args(args))
    opt = cdynamo.optimize("eager")(fn)
    with pytest.raises(Exception) as compiled:
        run_capturing(opt, clone_args(args))
    assert type(compiled.value) is type(eager.value)
    assert str(compiled.value) == str(eager.value)
    # The traceback's innermost user frame is the user's source line.
    tb = compiled.tb
    frames = []
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    assert any(f.endswith("graph_break_corpus.py") for f, _ in frames)


def test_python_side_effects_match():
    corpus.COUNTER = 0
    x = torch.randn(3)
    eager = corpus.global_counter_mutation(x)
    assert corpus.COUNTER == 1
    corpus.COUNTER = 0
    opt = cdynamo.optimize("eager")(corpus.global_counter_mutation)
    got = opt(x)
    assert corpus.COUNTER == 1
    torch.testing.assert_close(got, eager)


DYNAMO_SAMPLE = ["bar", "f1", "print_in_middle", "item_call", "two_breaks", "nested_branches", "early_return",
                 "user_graph_break", "numpy_call_middle", "break_args_passthrough", "chain_of_breaks_in_branch"]


@pytest.mark.parametrize("name", DYNAMO_SAMPLE)
def test_no_more_graphs_than_torch_dynamo(name):
    import torch._dynamo

    fn = getattr(corpus, name)
    make_args = dict((c[0].__name__, c[1]) for c in corpus.CASES)[name]
    args = make_args()

    dyn = CompileCounter()
    torch._dynamo.reset()
    dyn_fn = torch._dynamo.optimize(dyn)(fn) if name != "user_graph_break" else torch._dynamo.optimize(dyn)(
        corpus.user_graph_break_dynamo)
    with contextlib.redirect_stdout(io.StringIO()):
        dyn_fn(*clone_args(args))
    torch._dynamo.reset()

    ours = CompileCounter()
    with contextlib.redirect_stdout(io.StringIO()):
        cdynamo.optimize(ours)(fn)(*clone_args(args))
    assert ours.frame_count <= dyn.frame_count, (ours.frame_count, dyn.frame_count)
    assert ours.frame_count >= 1


def f3(x):
    import scipy.fft

    x = x * 2
    x = scipy.fft.dct(x.numpy())
    x = torch.from_numpy(x)
    x = x * 2
    return x


def test_tutorial_f3_with_scipy_in_the_middle():
    x = torch.randn(5, 5)
    counter = CompileCounter()
    torch.testing.assert_close(cdynamo.optimize(counter)(f3)(x), f3(x))
    assert counter.frame_count == 2  # before and after the scipy call
    torch.testing.assert_close(cdynamo.optimize(counter)(corpus.f1)(x, x), corpus.f1(x, x))
    torch.testing.assert_close(cdynamo.optimize(counter)(corpus.f1)(-x, x), corpus.f1(-x, x))


def test_explain_bar_legacy_tuple_and_summary():
    a, b = torch.randn(10), torch.randn(10)
    explanation, out_guards, graphs, ops_per_graph, break_reasons, verbose = cdynamo.explain(corpus.bar, a, b)
    assert len(graphs) == 2 and len(ops_per_graph) == 2
    assert [len(o) for o in ops_per_graph][0] == 5
    assert len(break_reasons) == 1
    r = break_reasons[0]
    assert r.filename.endswith("graph_break_corpus.py") and "if b.sum() < 0" in r.line
    assert "local 'a' TENSOR_MATCH" in out_guards
    assert "2 graphs with 1 graph breaks" in explanation
    assert "Break Reason 1" in verbose and "Hint:" in verbose and "torch.abs" in verbose
    out = cdynamo.explain(corpus.bar)(a, b)
    assert (out.graph_count, out.graph_break_count, out.op_count) == (2, 1, len(ops_per_graph[0]) + len(ops_per_graph[1]))


@pytest.mark.parametrize("mode", ["nopython", "fullgraph", "export"])
def test_first_break_raises_located_unsupported(mode):
    a, b = torch.randn(10), torch.randn(10)
    with pytest.raises(cdynamo.exc.Unsupported) as err:
        if mode == "nopython":
            cdynamo.optimize("eager", nopython=True)(corpus.bar)(a, b)
        elif mode == "fullgraph":
            cdynamo.compile(corpus.bar, backend="eager", fullgraph=True)(a, b)
        else:
            cdynamo.export(corpus.bar, a, b)
    text = str(err.value)
    line = corpus.bar.__code__.co_firstlineno + 2
    assert f"graph_break_corpus.py:{line}" in text, text
    assert "tensor" in text and "Hint" in text
    assert isinstance(err.value, cdynamo.exc.CdynamoError)


def test_reset_after_the_user_function_is_gone():
    # A continuation's record holds its user code; reset() freeing the cache of a code object whose last
    # owner was that record must not write into the freed code object (it segfaulted).
    import gc

    x = torch.randn(3)
    for _ in range(3):
        src = "def f(x):\n    y = x + 1\n    print('break')\n    return y * 2\n"
        ns = {}
        exec(compile(src, "<reset_gone>", "exec"), ns)
        opt = cdynamo.optimize("eager")(ns.pop("f"))
        with contextlib.redirect_stdout(io.StringIO()):
            torch.testing.assert_close(opt(x), (x + 1) * 2)
            torch.testing.assert_close(opt(x), (x + 1) * 2)
        del opt
        gc.collect()
        # ns (alive) still holds the __resume_at_* function, whose record is the last owner of f's code.
        assert any(k.startswith("__resume_at") for k in ns)
        cdynamo.reset()
        assert not any(k.startswith("__") and k != "__builtins__" for k in ns)
