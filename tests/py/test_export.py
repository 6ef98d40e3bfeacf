# test_export.py — owns cdynamo.export's contract (inputs, output structure, attributes, aten_graph, errors), each case compared with torch._dynamo.export and eager.
import operator
import os

import pytest
import torch
import torch._dynamo
import torch.utils._pytree as pytree

import cdynamo
from cdynamo.exc import Unsupported
from versions import without_carets

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")

HERE = os.path.basename(__file__)


def _placeholders(gm):
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _assert_same(actual, expected):
    """Same pytree structure (container types, dict keys in order, tuple vs list) and equal leaves."""
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    assert a_spec == e_spec, f"structure differs:\n{a_spec}\nvs\n{e_spec}"
    for a, e in zip(a_leaves, e_leaves):
        assert type(a) is type(e), (a, e)
        if isinstance(a, torch.Tensor):
            assert a.shape == e.shape and a.dtype == e.dtype, (a, e)
            torch.testing.assert_close(a, e)
        else:
            assert a == e, (a, e)


def _fresh(value):
    """Inputs with the same structure, shapes and dtypes but new values (an input passed twice stays one object)."""
    seen = {}

    def new(t):
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) not in seen:
            seen[id(t)] = torch.randn_like(t) if t.is_floating_point() else t.clone()
        return seen[id(t)]

    return pytree.tree_map(new, value)


def check(f, *args, **kwargs):
    """Export f with cdynamo and torch._dynamo; both graph modules, called like f and (when every input is a
    leaf) with the flat inputs, on these and on fresh inputs, must give eager's output structure and values."""
    cd_gm, cd_guards = cdynamo.export(f, *args, **kwargs)
    td_gm = torch._dynamo.export(f)(*args, **kwargs).graph_module
    assert isinstance(cd_gm, torch.fx.GraphModule)
    flat = pytree.tree_flatten((args, kwargs))[0]
    assert len(_placeholders(cd_gm)) == len(_placeholders(td_gm)) == len(flat)
    for a, k in ((args, kwargs), _fresh((args, kwargs))):
        expected = f(*a, **k)
        _assert_same(td_gm(*a, **k), expected)
        _assert_same(cd_gm(*a, **k), expected)
        flat_a = pytree.tree_flatten((a, k))[0]
        if len(flat_a) == len(a) + len(k):  # every input is a leaf: forward(*flat) is forward(*args, **kwargs)
            _assert_same(td_gm(*flat_a), expected)
            _assert_same(cd_gm(*flat_a), expected)
    return cd_gm, cd_guards, td_gm


# ---------------------------------------------------------------- output structure

def test_tuple_output():
    def f(x, y):
        return x.sin(), y.cos()

    check(f, torch.randn(3), torch.randn(3))


def test_list_output():
    def f(x, y):
        return [x + y, x * y]

    check(f, torch.randn(3), torch.randn(3))


def test_dict_output_keeps_key_order():
    def f(x, y):
        return {"z": x - y, "a": x + y}

    check(f, torch.randn(3), torch.randn(3))


def test_nested_output():
    def f(x, y):
        return {"a": (x.sin(), [y.cos(), {"z": x * y}]), "b": [(x + 1,)]}

    check(f, torch.randn(2, 3), torch.randn(2, 3))


def test_single_tensor_output_is_not_wrapped():
    def f(x):
        return x.sin() + 1

    gm, _, _ = check(f, torch.randn(3))
    assert isinstance(gm(torch.randn(3)), torch.Tensor)


def test_non_tensor_leaves_and_constants_in_output():
    def f(x, n):
        return x.sin() * n, n, 3, "s", None, 2.5, True, torch.float32, (x.cos(), [7])

    check(f, torch.randn(3), 2)


def test_shape_in_output_is_a_constant():
    def f(x):
        return x.sin(), x.shape[0], x.size(1)

    check(f, torch.randn(2, 5))


def test_output_is_an_input():
    def f(x, y):
        return x, y.sin(), [y]

    gm, _, _ = check(f, torch.randn(3), torch.randn(3))
    x, y = torch.randn(3), torch.randn(3)
    out = gm(x, y)
    assert out[0] is x and out[2][0] is y  # the input object itself, as in eager


def test_input_passed_twice():
    def f(x, y):
        return x + y, y, x * 2

    x = torch.randn(3)
    gm, _, _ = check(f, x, x)
    a, b = torch.randn(3), torch.randn(3)  # the graph is specialized to one tensor; torch's uses the last input
    torch.testing.assert_close(gm(a, b)[0], torch._dynamo.export(f)(x, x).graph_module(a, b)[0])


def test_reordered_outputs():
    def f(x, y):
        a = x.sin()
        b = y.cos()
        c = a + b
        return c, b, y, a, x

    check(f, torch.randn(3), torch.randn(3))


def test_unused_input():
    def f(x, y, z):
        return x.sin()

    gm, _, _ = check(f, torch.randn(3), torch.randn(2), torch.randn(4))
    assert len(_placeholders(gm)) == 3 and len(_placeholders(gm)[1].users) == 0


def test_kwargs_inputs():
    def f(x, *, scale, bias=None):
        return x * scale + bias, {"scale": scale}

    x, s, b = torch.randn(3), torch.randn(3), torch.randn(3)
    gm, _, _ = check(f, x, scale=s, bias=b)
    torch.testing.assert_close(gm(x, s, b)[0], x * s + b)  # flat: args, then kwargs in the order given
    torch.testing.assert_close(gm(x, bias=b, scale=s)[0], x * s + b)


def test_nested_inputs_take_fs_structure():
    def f(xs, d):
        return xs[0] + d["k"], [xs[1], d["k"].cos()]

    a, b, c = torch.randn(3), torch.randn(3), torch.randn(3)
    gm, _, _ = check(f, [a, b], {"k": c})
    assert len(_placeholders(gm)) == 3


def test_non_tensor_input_is_specialized():
    def f(x, n):
        return x * n

    gm, _, td_gm = check(f, torch.randn(3), 3)
    x = torch.randn(3)
    torch.testing.assert_close(gm(x, 3), x * 3)
    # both bake n into the graph (guarded): another n is not seen by the graph
    torch.testing.assert_close(gm(x, 5), td_gm(x, 5))


# ---------------------------------------------------------------- parameters, buffers, free tensors

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.full((3,), 2.0))

    def forward(self, x):
        return {"y": self.lin(x) * self.scale, "w": self.lin.weight}


def test_module_parameters_and_buffers_are_attributes():
    m = Net()
    x = torch.randn(2, 4)
    gm, _, td_gm = check(m, x)
    assert len(_placeholders(gm)) == 1
    params = dict(gm.named_parameters())
    buffers = dict(gm.named_buffers())
    assert len(params) == len(dict(td_gm.named_parameters())) == 2
    assert len(buffers) == len(dict(td_gm.named_buffers())) == 1
    assert {id(p) for p in params.values()} == {id(m.lin.weight), id(m.lin.bias)}  # shared, as in torch
    assert next(iter(buffers.values())) is m.scale
    assert set(gm.meta["dynamo_flat_name_to_original_fqn"].values()) == {"lin.weight", "lin.bias", "scale"}
    assert gm(x)["w"] is m.lin.weight
    with torch.no_grad():
        m.lin.weight.add_(1.0)
    _assert_same(gm(x), m(x))
    _assert_same(td_gm(x), m(x))


def test_module_backward_through_exported_graph():
    m = Net()
    x = torch.randn(2, 4)
    gm, _ = cdynamo.export(m, x)
    gm(x)["y"].sum().backward()
    expected = torch.autograd.grad(m(x)["y"].sum(), m.lin.weight)[0]
    torch.testing.assert_close(m.lin.weight.grad, expected)


G = torch.randn(3)
LIN = torch.nn.Linear(3, 3)


def test_global_tensor_and_closure_module_become_attributes():
    def f(x):
        return LIN(x) + G, G

    gm, _, td_gm = check(f, torch.randn(2, 3))
    assert len(_placeholders(gm)) == 1
    assert len(dict(gm.named_parameters())) == len(dict(td_gm.named_parameters())) == 2
    assert len(dict(gm.named_buffers())) == len(dict(td_gm.named_buffers())) == 1


# ---------------------------------------------------------------- aten_graph

def _aten_ops(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_aten_graph():
    m = Net()
    x = torch.randn(2, 4)
    gm, _ = cdynamo.export(m, x, aten_graph=True)
    td_gm = torch._dynamo.export(m, aten_graph=True)(x).graph_module
    ops = _aten_ops(gm)
    assert ops and all(isinstance(t, torch._ops.OpOverload) and t.namespace == "aten" for t in ops), ops
    assert {str(t) for t in ops} == {str(t) for t in _aten_ops(td_gm)}
    assert len(_placeholders(gm)) == len(_placeholders(td_gm)) == 1
    _assert_same(gm(x), m(x))
    _assert_same(gm(x), td_gm(x))


def test_aten_graph_keeps_output_structure_and_inputs():
    def f(x, y, unused):
        return {"b": [y, x.sin() + y], "n": 3}, x

    args = torch.randn(3), torch.randn(3), torch.randn(2)
    gm, _ = cdynamo.export(f, *args, aten_graph=True)
    td_gm = torch._dynamo.export(f, aten_graph=True)(*args).graph_module
    assert len(_placeholders(gm)) == len(_placeholders(td_gm)) == 3
    for a in (args, _fresh(args)):
        _assert_same(gm(*a), f(*a))
        _assert_same(td_gm(*a), f(*a))


def test_aten_graph_with_decomposition_table():
    from torch._decomp import get_decompositions

    def f(x):
        return torch.nn.functional.silu(x) * 2

    x = torch.randn(4)
    decomp = get_decompositions([torch.ops.aten.silu])
    plain, _ = cdynamo.export(f, x, aten_graph=True)
    assert torch.ops.aten.silu.default in _aten_ops(plain)
    gm, _ = cdynamo.export(f, x, aten_graph=True, decomposition_table=decomp)
    td_gm = torch._dynamo.export(f, aten_graph=True, decomposition_table=decomp)(x).graph_module
    assert torch.ops.aten.silu.default not in _aten_ops(gm)
    assert {str(t) for t in _aten_ops(gm)} == {str(t) for t in _aten_ops(td_gm)}
    _assert_same(gm(x), f(x))


@pytest.mark.parametrize("mode", ["fake", "symbolic"])
def test_aten_graph_tracing_modes(mode):
    def f(x, y):
        return (x @ y).relu(), [y]

    x, y = torch.randn(2, 3), torch.randn(3, 4)
    gm, _ = cdynamo.export(f, x, y, aten_graph=True, tracing_mode=mode)
    assert all(t.namespace == "aten" for t in _aten_ops(gm) if isinstance(t, torch._ops.OpOverload))
    _assert_same(gm(x, y), f(x, y))


def test_aten_options_without_aten_graph_raise():
    def f(x):
        return x.sin()

    x = torch.randn(3)
    with pytest.raises(ValueError, match="aten_graph=True"):
        cdynamo.export(f, x, decomposition_table={})
    with pytest.raises(ValueError, match="aten_graph=True"):
        cdynamo.export(f, x, tracing_mode="symbolic")
    with pytest.raises(ValueError, match="tracing_mode"):
        cdynamo.export(f, x, aten_graph=True, tracing_mode="bogus")
    with pytest.raises(TypeError, match="decomposition_table"):
        cdynamo.export(f, x, aten_graph=True, decomposition_table=[torch.ops.aten.sin])
    with pytest.raises(AssertionError, match="aten_graph"):  # torch: an AssertionError for the same call
        torch._dynamo.export(f, decomposition_table={})(x)


# ---------------------------------------------------------------- errors, guards, forms

def broken(x):
    y = x.sin()
    if y.sum() > 0:  # data-dependent branch: a graph break
        return y
    return -y


def test_graph_break_raises_unsupported_with_location():
    line = broken.__code__.co_firstlineno + 2
    with pytest.raises(Unsupported) as err:
        cdynamo.export(broken, torch.randn(3))
    assert f"{HERE}:{line}" in str(err.value), str(err.value)
    with pytest.raises(torch._dynamo.exc.Unsupported):  # torch raises too
        torch._dynamo.export(broken)(torch.randn(3))


def test_graph_break_call_raises_unsupported_with_location():
    def f(x):
        y = x.sin()
        cdynamo.graph_break()
        return y.cos()

    with pytest.raises(Unsupported) as err:
        cdynamo.export(f, torch.randn(3))
    assert f"{HERE}:{f.__code__.co_firstlineno + 2}" in str(err.value), str(err.value)


def test_no_graph_raises_unsupported_naming_the_function():
    def identity(x):
        return x

    with pytest.raises(Unsupported, match=f"exactly one graph from .*identity .*{HERE}:"):
        cdynamo.export(identity, torch.randn(2))
    # torch._dynamo builds a graph without ops here (a known difference, docs/python_api.md)
    gm = torch._dynamo.export(identity)(torch.randn(2)).graph_module
    assert len(_placeholders(gm)) == 1


def test_input_that_is_not_flattenable_raises():
    class Box:
        def __init__(self, t):
            self.t = t

    def f(x, box):
        return x + box.t

    with pytest.raises(Unsupported, match="input 1 .*Box"):
        cdynamo.export(f, torch.randn(3), Box(torch.randn(3)))
    with pytest.raises(torch._dynamo.exc.UserError):  # torch: a UserError (a RuntimeError, as Unsupported is)
        torch._dynamo.export(f)(torch.randn(3), Box(torch.randn(3)))


def test_guards_returned():
    def f(x, y):
        return x.sin() + y

    gm, guards = cdynamo.export(f, torch.randn(3), torch.randn(3))
    assert guards and all(isinstance(g, str) for g in guards)
    assert any("'x'" in g and "TENSOR_MATCH" in g for g in guards), guards
    assert any("'y'" in g and "TENSOR_MATCH" in g for g in guards), guards
    assert len(torch._dynamo.export(f)(torch.randn(3), torch.randn(3)).guards) > 0


def test_curried_form_and_export_result_fields():
    def f(x):
        return x.sin(), x.cos()

    x = torch.randn(3)
    res = cdynamo.export(f)(x)
    td_res = torch._dynamo.export(f)(x)
    assert isinstance(res, cdynamo.ExportResult) and type(td_res).__name__ == "ExportResult"
    assert res._fields == td_res._fields == ("graph_module", "guards")
    gm, guards = res
    assert gm is res.graph_module and guards is res.guards
    _assert_same(gm(x), f(x))


def test_export_leaves_nothing_compiled_behind():
    from cdynamo.testing import CompileCounter

    def f(x):
        return x.sin()

    cdynamo.export(f, torch.randn(3))
    cnt = CompileCounter()
    cdynamo.optimize(cnt)(f)(torch.randn(3))
    assert cnt.frame_count == 1  # compiled afresh: export's capture is not reused


def test_optimized_wrappers_are_unwrapped():
    from cdynamo.testing import CompileCounter

    def f(x):
        return x.sin(), [x.cos()]

    x = torch.randn(3)
    cnt = CompileCounter()
    for wrapped in (cdynamo.optimize(cnt)(f), torch.compile(f, backend="eager")):
        gm, _ = cdynamo.export(wrapped, x)
        _assert_same(gm(x), f(x))
    m = Net()
    gm, _ = cdynamo.export(cdynamo.optimize(cnt)(m), torch.randn(2, 4))
    assert len(dict(gm.named_parameters())) == 2
    assert cnt.frame_count == 0  # the wrappers' own backend never ran


def _helper_op(x):
    return x.sigmoid()  # the inlined callee's own line


def _traced_for_meta(x):
    y = x.relu()
    return _helper_op(y) + 1


def _inner_fn(x):
    return torch.relu(x) + 1


def _middle_fn(x):
    y = _inner_fn(x)
    return y * 2


def _nested_fn(x):
    a = torch.sin(x)
    return _middle_fn(a).sum(-1)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


def _transpose_helper(x):
    return x.transpose(0, 1)


class _Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([_Block(), _Block()])
        self.norm = torch.nn.LayerNorm(4)
        self.head = _Block()

    def scaled(self, x):  # a method calling a module-level helper
        return _transpose_helper(x) * 0.5

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        x = self.head(self.norm(x))
        return self.scaled(x).sum(-1)


class _Twice(torch.nn.Module):
    """One submodule called twice: torch._dynamo keys the second call's scope with an "@1" suffix."""

    def __init__(self):
        super().__init__()
        self.block = _Block()

    def forward(self, x):
        return self.block(self.block(x)).cos()


def _op_nodes(gm):
    return [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]


def _target_key(t):
    return t if isinstance(t, (str, type)) else getattr(t, "__name__", repr(t))


def _assert_meta_like_dynamo(gm, dgm):
    """Node by node (ops and attributes in graph order): stack_trace equal as text, nn_module_stack equal
    (keys, qualified paths, classes, order), source_fn_stack with the same targets; its names are the nodes'
    names as created (torch._dynamo renames a node after the local it is stored into; its source_fn_stack keeps
    the name the node was created with, which is cdynamo's node name)."""
    ops, dops = _op_nodes(gm), _op_nodes(dgm)
    assert [n.op for n in ops] == [d.op for d in dops]
    for n, d in zip(ops, dops):
        ours, theirs = without_carets(n.meta.get("stack_trace")), d.meta.get("stack_trace")
        assert ours == theirs, (n.name, ours, theirs)
        assert list(n.meta.get("nn_module_stack", {}).items()) == list(d.meta.get("nn_module_stack", {}).items()), n.name
        assert "nn_module_stack" in n.meta or "nn_module_stack" not in d.meta, n.name
        got = [(name, _target_key(t)) for name, t in n.meta["source_fn_stack"]]
        want = [(name, _target_key(t)) for name, t in d.meta["source_fn_stack"]]
        assert got == want, (n.name, got, want)
    attrs = {n.target: n for n in gm.graph.nodes if n.op == "get_attr"}
    dattrs = [d for d in dgm.graph.nodes if d.op == "get_attr"]
    for d in dattrs:  # torch's names L__self___layers_0_lin_weight; cdynamo's layers_0_lin_weight
        n = attrs[d.target.replace("L__self___", "")]
        assert without_carets(n.meta.get("stack_trace")) == d.meta.get("stack_trace"), n.name
        assert n.meta.get("nn_module_stack") == d.meta.get("nn_module_stack"), n.name
        assert "source_fn_stack" not in n.meta


def test_stack_trace_lists_every_inlined_frame_like_dynamo():
    """meta["stack_trace"] holds the whole inline stack, outermost first, in torch.fx's format (caret lines
    included), text for text what torch._dynamo.export writes; source_fn_stack names each op."""
    x = torch.randn(3, 2)
    gm, _ = cdynamo.export(_nested_fn, x)
    dgm, _ = torch._dynamo.export(_nested_fn)(x)
    _assert_meta_like_dynamo(gm, dgm)
    relu = next(n for n in gm.graph.nodes if n.target is torch.relu)
    frames = [line for line in relu.meta["stack_trace"].splitlines() if line.startswith("  File ")]
    assert [f.rsplit(" in ", 1)[1] for f in frames] == ["_nested_fn", "_middle_fn", "_inner_fn"]
    assert relu.meta["source_fn_stack"] == [("relu", torch.relu)]
    assert all("nn_module_stack" not in n.meta for n in gm.graph.nodes)  # no module called: no key, as torch


def test_module_hierarchy_meta_like_dynamo():
    """A ModuleList of blocks, a LayerNorm, a method calling a module-level helper: nn_module_stack (keys
    str(id(module)), paths like "L['self'].layers.0", classes) and source_fn_stack (a torch.nn layer's ops name
    the layer's class) as torch._dynamo.export writes them, on ops and on the parameters' get_attr nodes."""
    m = _Stack()
    x = torch.randn(2, 4)
    gm, _ = cdynamo.export(m, x)
    dgm, _ = torch._dynamo.export(m)(x)
    _assert_meta_like_dynamo(gm, dgm)
    lin = next(n for n in gm.graph.nodes if n.target is torch._C._nn.linear)
    assert lin.meta["nn_module_stack"] == {
        str(id(m.layers[0])): ("L['self'].layers.0", _Block),
        str(id(m.layers[0].lin)): ("L['self'].layers.0.lin", torch.nn.Linear)}
    assert lin.meta["source_fn_stack"] == [(lin.name, torch.nn.Linear)]
    tr = next(n for n in gm.graph.nodes if n.target == "transpose")
    assert tr.meta["stack_trace"].count("  File ") == 3  # forward, scaled, _transpose_helper
    assert "nn_module_stack" not in tr.meta


def test_module_called_twice_meta_like_dynamo():
    m = _Twice()
    x = torch.randn(2, 4)
    gm, _ = cdynamo.export(m, x)
    dgm, _ = torch._dynamo.export(m)(x)
    _assert_meta_like_dynamo(gm, dgm)
    keys = [list(n.meta["nn_module_stack"]) for n in _op_nodes(gm) if "nn_module_stack" in n.meta]
    assert keys[0][0] == str(id(m.block)) and keys[-1][0] == f"{id(m.block)}@1"


def _countdown(x, n):
    if n == 0:
        return x.cos()
    return _countdown(x, n - 1)


def _recursive_fn(x):
    return _countdown(x, 5)


def test_recursive_inline_stack_trace_like_dynamo():
    """Inlined recursion: more than 3 frames in a row on one line are collapsed into "[Previous line repeated 2
    more times]", as traceback (and so torch._dynamo) writes them."""
    x = torch.randn(3)
    gm, _ = cdynamo.export(_recursive_fn, x)
    dgm, _ = torch._dynamo.export(_recursive_fn)(x)
    _assert_meta_like_dynamo(gm, dgm)
    assert "[Previous line repeated 2 more times]" in _op_nodes(gm)[0].meta["stack_trace"]


def test_compile_graphs_carry_node_meta():
    """Backends of optimize()/torch.compile get the same meta on every op node (torch._dynamo sets it on
    compile graphs too); a node without it fails here."""
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    m = _Stack()
    cdynamo.optimize(backend)(m)(torch.randn(2, 4))
    (gm,) = seen
    ops = _op_nodes(gm)
    assert len(ops) >= 10
    for n in ops:
        assert "stack_trace" in n.meta and "source_fn_stack" in n.meta, n.name
        assert n.meta["stack_trace"].startswith(f'  File "{__file__}", line ')
    # ops made inside a module call (the blocks' linear and relu, the norm) carry the module stack; forward's own
    # ops and the helper's do not
    inside = [n.target for n in ops if "nn_module_stack" in n.meta]
    assert len(inside) == 7 and [n.target for n in ops if n.target not in inside] == ["transpose", operator.mul, "sum"]
    for n in gm.graph.nodes:
        if n.op == "placeholder" and n.name.endswith("weight"):
            assert n.meta["nn_module_stack"] and n.meta["stack_trace"]


def test_nodes_carry_the_users_stack_trace_like_dynamo():
    """Every op node's meta["stack_trace"] names the file, line, function, source line and caret line of each
    frame that made it (the frame calling an inlined callee, then the callee), as torch._dynamo.export's do;
    export's placeholders and output carry none (as torch's)."""
    x = torch.randn(3)
    gm, _ = cdynamo.export(_traced_for_meta, x)
    dgm, _ = torch._dynamo.export(_traced_for_meta)(x)
    _assert_meta_like_dynamo(gm, dgm)
    ops = _op_nodes(gm)
    assert len(ops) == 3
    assert "in _helper_op" in ops[1].meta["stack_trace"] and "x.sigmoid()" in ops[1].meta["stack_trace"]
    assert ops[1].meta["stack_trace"].index("in _traced_for_meta") < ops[1].meta["stack_trace"].index("in _helper_op")
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output"):
            assert "stack_trace" not in n.meta


def test_backends_marked_as_not_reading_meta_get_graphs_without_it():
    """A backend marked ``_cdynamo_node_meta = False`` (the built-in eager backend) gets graphs without node meta
    (a cheaper first call); explain's recorded graphs still carry it."""
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    backend._cdynamo_node_meta = False
    cdynamo.optimize(backend)(_nested_fn)(torch.randn(3, 2))
    (gm,) = seen
    assert all(k not in n.meta for n in gm.graph.nodes for k in ("stack_trace", "source_fn_stack"))
    assert cdynamo.backends.lookup_backend("eager")._cdynamo_node_meta is False
    cdynamo.reset()
    out = cdynamo.explain(_nested_fn)(torch.randn(3, 2))
    assert all("stack_trace" in n.meta for n in _op_nodes(out.graphs[0]))


def test_aten_graph_keeps_node_meta_like_dynamo():
    """aten_graph=True: every ATen node keeps the meta of the node it was lowered from, as torch._dynamo's."""
    m = _Stack()
    x = torch.randn(2, 4)
    gm, _ = cdynamo.export(m, x, aten_graph=True)
    dgm, _ = torch._dynamo.export(m, aten_graph=True)(x)
    ops = [n for n in gm.graph.nodes if n.op == "call_function"]
    dops = [n for n in dgm.graph.nodes if n.op == "call_function"]
    assert [n.target for n in ops] == [d.target for d in dops]
    for n, d in zip(ops, dops):
        assert without_carets(n.meta["stack_trace"]) == d.meta["stack_trace"], n.name
        assert n.meta.get("nn_module_stack") == d.meta.get("nn_module_stack"), n.name
        assert [_target_key(t) for _, t in n.meta["source_fn_stack"]] == \
            [_target_key(t) for _, t in d.meta["source_fn_stack"]], n.name
