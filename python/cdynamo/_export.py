# _export.py — owns export(): one whole-graph capture rewritten to torch._dynamo.export's signature (f's inputs in, f's output structure out), optionally lowered to ATen.
import collections
import collections.abc
import inspect
import operator
import re

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo

from ._explain import _Recorder, _run_recorded
from .exc import Unsupported

ExportResult = collections.namedtuple("ExportResult", ["graph_module", "guards"])
ExportResult.__doc__ = "What export returns: unpacks as (graph_module, guards), like torch._dynamo's ExportResult."

# Leaves that may be inputs or outputs without being tensors; in the output they are constants of the graph
# (cdynamo specializes on them and guards the values, as torch._dynamo does).
_CONSTANT_TYPES = (int, float, bool, complex, str, bytes, type(None), type(Ellipsis), torch.dtype, torch.device,
                   torch.layout, torch.memory_format)
_TRACING_MODES = ("real", "fake", "symbolic")


class _ExportRecorder(_Recorder):
    """A recorder whose backend also keeps the inputs and outputs of each graph call of the run, so that graph
    inputs can be matched to f's flattened arguments and graph outputs to the leaves of f's result by identity."""

    def __init__(self):
        super().__init__()
        self.calls = []  # (gm, inputs, outputs)

    def backend(self, gm, example_inputs):
        forward = gm.forward

        def capture(*inputs):
            outputs = forward(*inputs)
            self.calls.append((gm, inputs, outputs))
            return outputs

        return capture


def export(f, *args, aten_graph=False, decomposition_table=None, tracing_mode="real", **kwargs):
    """Capture ``f(*args, **kwargs)`` as exactly one graph, as torch._dynamo.export does.

    Returns ``ExportResult(graph_module, guards)`` (a 2-tuple). The graph module's placeholders are the
    flattened inputs ``pytree.tree_flatten((args, kwargs))[0]``; it is called like f (for inputs that are
    tensors or constants: with those flat inputs) and returns f's output structure. ``aten_graph=True`` lowers
    it to ATen ops with make_fx (``decomposition_table`` and ``tracing_mode`` go to make_fx). Anything that is
    not one graph raises ``cdynamo.exc.Unsupported``. ``export(f)`` without inputs returns the function
    ``(*args, **kwargs) -> ExportResult`` (torch's form).
    """
    if not callable(f):
        raise TypeError(f"export expects a callable, got {type(f).__name__} {f!r}")
    _check_options(aten_graph, decomposition_table, tracing_mode)

    def inner(*a, **k):
        return _export(f, a, k, bool(aten_graph), decomposition_table, tracing_mode)

    if args or kwargs:
        return inner(*args, **kwargs)
    return inner


def _check_options(aten_graph, decomposition_table, tracing_mode):
    if not isinstance(tracing_mode, str) or tracing_mode not in _TRACING_MODES:
        raise ValueError(f"export: tracing_mode must be one of {', '.join(map(repr, _TRACING_MODES))}, "
                         f"got {tracing_mode!r}")
    if decomposition_table is not None and not isinstance(decomposition_table, collections.abc.Mapping):
        raise TypeError(f"export: decomposition_table must be a dict of OpOverload -> function, "
                        f"got {type(decomposition_table).__name__}")
    if not aten_graph:
        if decomposition_table is not None:
            raise ValueError("export: decomposition_table applies to the ATen graph only; pass aten_graph=True")
        if tracing_mode != "real":
            raise ValueError(f"export: tracing_mode={tracing_mode!r} applies to the ATen graph only "
                             "(make_fx); pass aten_graph=True")


def _where(f):
    code = getattr(getattr(f, "forward", f), "__code__", None) or getattr(f, "__code__", None)
    name = getattr(f, "__qualname__", None) or type(f).__name__
    if code is None:
        return name
    return f"{name} ({code.co_filename}:{code.co_firstlineno})"


def _innermost(f):
    """The function or module under cdynamo's (or torch._dynamo's) optimize wrappers, as torch's innermost_fn."""
    while True:
        if type(f).__name__ == "OptimizedModule" and hasattr(f, "_orig_mod"):
            f = f._orig_mod
        elif type(f).__name__ == "OptimizedCallable" and hasattr(f, "_fn"):
            f = f._fn
        elif hasattr(f, "_torchdynamo_orig_callable"):
            f = f._torchdynamo_orig_callable
        else:
            return f


def _export(f, args, kwargs, aten_graph, decomposition_table, tracing_mode):
    f = _innermost(f)
    flat_args, in_spec = pytree.tree_flatten((args, kwargs))  # before the run: f may mutate its inputs
    for i, a in enumerate(flat_args):
        if not isinstance(a, (torch.Tensor,) + _CONSTANT_TYPES):
            raise Unsupported(f"export of {_where(f)}: input {i} (after flattening args and kwargs) is a "
                              f"{type(a).__module__}.{type(a).__qualname__}; exported inputs are tensors, "
                              "constants, and lists/tuples/dicts of them (pytree-flattenable)")
    rec = _ExportRecorder()
    _, result = _run_recorded(f, args, kwargs, nopython=True, rec=rec)
    if len(rec.graphs) != 1:
        where = "; ".join(f"{i.get('co_name')} ({i.get('co_filename')}:{i.get('co_firstlineno')})"
                          for i in rec.graph_infos)
        detail = f": {where}" if where else ""
        raise Unsupported(f"export expects exactly one graph from {_where(f)}, captured {len(rec.graphs)}"
                          f"{detail}. Hint: make sure the function contains tensor operations and no graph breaks "
                          "(inner function calls that are not inlined become separate graphs).")
    gm = rec.graphs[0]
    calls = [c for c in rec.calls if c[0] is gm]
    if not calls:
        raise Unsupported(f"export of {_where(f)}: the captured graph was not called while f ran")
    _, graph_inputs, graph_outputs = calls[-1]
    rec.calls.clear()
    flat_gm, out_spec = _flatten_signature(f, gm, flat_args, graph_inputs, graph_outputs, result)
    if aten_graph:
        flat_gm = _to_aten(flat_gm, flat_args, decomposition_table, tracing_mode)
    _set_pytree_codegen(flat_gm, _argument_names(f, args, kwargs), in_spec, out_spec)
    return ExportResult(flat_gm, rec.guards())


def _module_fqns(f):
    """id(tensor) -> its qualified name in f, when f is an nn.Module (parameters and buffers)."""
    if not isinstance(f, torch.nn.Module):
        return {}
    names = {}
    for name, t in list(f.named_parameters(remove_duplicate=False)) + list(f.named_buffers(remove_duplicate=False)):
        names.setdefault(id(t), name)
    return names


class _Attrs:
    """The tensors (and other objects) the exported module keeps as attributes: the graph's parameters, buffers
    and other tensors that are not inputs of f, registered on the root under flat names (as torch does)."""

    def __init__(self, graph, fqns):
        self.graph = graph
        self.fqns = fqns
        self.root = torch.nn.Module()
        self.by_id = {}
        self.flat_to_fqn = {}
        self._taken = set(dir(torch.fx.GraphModule)) | {"graph", "code", "meta", "training", "forward"}

    def _name(self, hint):
        base = re.sub(r"\W", "_", hint) or "attr"
        base = re.sub(r"^_cdynamo_module_", "", base) or "attr"
        if base[0].isdigit():
            base = "_" + base
        name, i = base, 0
        while name in self._taken:
            i += 1
            name = f"{base}_{i}"
        self._taken.add(name)
        return name

    def node(self, value, hint):
        """A get_attr node for value, registered once per object."""
        entry = self.by_id.get(id(value))
        if entry is None:
            fqn = self.fqns.get(id(value))
            name = self._name(fqn if fqn is not None else hint)
            if fqn is not None:
                self.flat_to_fqn[name] = fqn
            if isinstance(value, torch.nn.Parameter):
                self.root.register_parameter(name, value)
            elif isinstance(value, torch.Tensor):
                self.root.register_buffer(name, value)
            elif isinstance(value, torch.nn.Module):
                self.root.add_module(name, value)
            else:
                setattr(self.root, name, value)
            entry = self.by_id[id(value)] = (name, value)  # value kept alive: ids stay unique
        return self.graph.get_attr(entry[0])


def _flatten_signature(f, gm, flat_args, graph_inputs, graph_outputs, result):
    """A GraphModule whose placeholders are flat_args and whose output is the flat list of result's leaves."""
    old = gm.graph
    placeholders = [n for n in old.nodes if n.op == "placeholder"]
    if len(placeholders) != len(graph_inputs):
        raise Unsupported(f"export of {_where(f)}: the graph has {len(placeholders)} inputs but was called with "
                          f"{len(graph_inputs)}")
    arg_index = {}
    for i, a in enumerate(flat_args):  # an input passed twice: the last position wins, as in torch
        if isinstance(a, torch.Tensor):
            arg_index[id(a)] = i
    matched = {}  # placeholder -> flat index
    for p, v in zip(placeholders, graph_inputs):
        if id(v) in arg_index:
            matched[p] = arg_index[id(v)]

    new = torch.fx.Graph()
    names = {}
    for p, i in matched.items():
        names.setdefault(i, p.name)
    new_args = []
    for i, a in enumerate(flat_args):
        node = new.placeholder(names.get(i, f"arg{i}"))
        if isinstance(a, torch.Tensor):
            src = next((p for p, j in matched.items() if j == i), None)
            if src is not None and "example_value" in src.meta:
                node.meta["example_value"] = src.meta["example_value"]
            else:
                node.meta["example_value"] = torch.empty_strided(a.size(), a.stride(), dtype=a.dtype,
                                                                 device="meta", requires_grad=a.requires_grad)
        else:
            node.meta["example_value"] = a
        new_args.append(node)

    attrs = _Attrs(new, _module_fqns(f))
    env = {}
    for p, v in zip(placeholders, graph_inputs):
        if p in matched:
            env[p] = new_args[matched[p]]
        elif isinstance(v, torch.Tensor):  # a parameter, buffer, global or closure tensor: an attribute
            env[p] = attrs.node(v, p.name)
            env[p].meta.update(p.meta)
        else:
            raise Unsupported(f"export of {_where(f)}: graph input {p.name!r} is a {type(v).__name__} that is not "
                              "one of f's inputs")
    out_args = None
    for n in old.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "output":
            out_args = n.args[0]
            continue
        if n.op == "get_attr":
            env[n] = attrs.node(operator.attrgetter(n.target)(gm), n.target)
            env[n].meta.update(n.meta)
            continue
        env[n] = new.node_copy(n, lambda a: env[a])

    single = not isinstance(out_args, (tuple, list))
    out_args = [out_args] if single else list(out_args)
    outs = [graph_outputs] if single else list(graph_outputs)
    if len(outs) != len(out_args):
        raise Unsupported(f"export of {_where(f)}: the graph returned {len(outs)} values, its output node has "
                          f"{len(out_args)}")
    lookup = {}
    for v, a in zip(outs, out_args):
        lookup[id(v)] = torch.fx.map_arg(a, lambda x: env[x])
    for i, a in enumerate(flat_args):  # f's own inputs, also when the graph returns them
        if isinstance(a, torch.Tensor):
            lookup[id(a)] = new_args[i]
    for p, v in zip(placeholders, graph_inputs):
        lookup.setdefault(id(v), env[p])

    flat_out, out_spec = pytree.tree_flatten(result)
    out_nodes = []
    for k, leaf in enumerate(flat_out):
        if id(leaf) in lookup:
            out_nodes.append(lookup[id(leaf)])
        elif isinstance(leaf, _CONSTANT_TYPES):
            out_nodes.append(leaf)
        elif isinstance(leaf, torch.Tensor):  # returned as is, never read by the graph: an attribute
            out_nodes.append(attrs.node(leaf, f"output_{k}"))
        else:
            raise Unsupported(f"export of {_where(f)}: output leaf {k} is a {type(leaf).__module__}."
                              f"{type(leaf).__qualname__}; exported outputs are tensors, constants, and "
                              "lists/tuples/dicts of them (pytree-flattenable)")
    new.output(out_nodes)
    new.lint()
    out = torch.fx.GraphModule(attrs.root, new, class_name="ExportedGraphModule")
    if attrs.flat_to_fqn:
        out.meta["dynamo_flat_name_to_original_fqn"] = dict(attrs.flat_to_fqn)
    return out, out_spec


def _to_aten(flat_gm, flat_args, decomposition_table, tracing_mode):
    from torch.fx.experimental.proxy_tensor import make_fx

    def run_graph(*a):
        with torch.fx.traceback.preserve_node_meta():  # keeps node meta (stack_trace where there is one)
            return torch.fx.Interpreter(flat_gm).run(*a)

    aten = make_fx(run_graph, decomposition_table=decomposition_table, tracing_mode=tracing_mode,
                   _allow_non_fake_inputs=True)(*flat_args)
    if "dynamo_flat_name_to_original_fqn" in flat_gm.meta:
        aten.meta["dynamo_flat_name_to_original_fqn"] = flat_gm.meta["dynamo_flat_name_to_original_fqn"]
    return aten


def _argument_names(f, args, kwargs):
    """forward's parameter names: f's positional parameters for args (``{varargs}_{i}`` past them), then the
    keyword names, as torch._dynamo.export's argument_names."""
    target = f.forward if isinstance(f, torch.nn.Module) else f
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    varargs = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), "args")
    names = [positional[i] if i < len(positional) else f"{varargs}_{i - len(positional)}" for i in range(len(args))]
    return names + list(kwargs)


def _set_pytree_codegen(gm, arg_names, in_spec, out_spec):
    """forward(self, <f's argument names>) flattens its inputs with in_spec and unflattens the outputs with
    out_spec (torch.fx's _PyTreeCodeGen, as torch._dynamo.export)."""
    reserved = set(gm.graph.python_code("self").globals) | {"self", "fx_pytree", "pytree", "torch"}
    safe, seen = [], set()
    for name in arg_names:
        name = re.sub(r"\W", "_", str(name)) or "arg"
        if name[0].isdigit() or name in reserved or name.startswith("__"):
            name = "arg_" + name
        base, i = name, 0
        while name in seen:
            i += 1
            name = f"{base}_{i}"
        seen.add(name)
        safe.append(name)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != in_spec.num_leaves:
        raise Unsupported(f"export: the graph has {len(placeholders)} inputs, f has {in_spec.num_leaves} "
                          "after flattening")
    gm.graph._codegen = _PyTreeCodeGen(_PyTreeInfo(safe, in_spec, out_spec))
    gm.recompile()
