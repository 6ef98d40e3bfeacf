# _regions.py — owns regional compilation: finding calls of sibling modules of one class in a captured graph (from
# nn_module_stack), cutting the graph at their edges, and compiling each distinct segment once with the backend.
"""Why: most of an inductor first call is the same transformer layer compiled N times. A graph cut into segments
run in order (``_split``) computes what the graph computes; two segments with equal keys (``_key``: the ops and
their targets, constant arguments, the topology with inputs numbered, and each input's metadata) compute the same
function of their inputs, so one compiled callable serves both (a layer's parameters are inputs of its segment).

Where the graph is cut: at the first and after the last node of each call of sibling modules of one class
(``L['self'].model.layers.0`` ... ``.N-1``) whose nodes are contiguous in graph order. A cut is dropped where a
value that is not a tensor or a symbolic number would cross it. The graph is compiled whole (this module returns
None) when fewer than ``config.regions_min_calls`` calls share a key, when any segment may write one of its inputs
(``_graph_call.error_policy``: aliasing and mutation stay inside one compiled graph), when a node draws from an
explicit generator, changes global state other than grad mode (a cut is made only where the grad mode is the graph's
starting mode) or is opaque (an allow_in_graph callee), or when the graph's values cannot be propagated with fake
tensors.

What a backend receives: one call per distinct segment, ``backend(segment_gm, example_inputs)``, where the
segment's placeholders are the values it reads (parameters and buffers keep their static-input marks, constants are
inputs too) and it returns the tuple of values later segments or the graph's output read. Example inputs are the
real input tensors for the graph's own inputs and zero-filled tensors of the crossing values' metadata (fake
tensors and symbolic sizes in a dynamic-shape graph, as for a whole graph).
"""
import contextlib

import torch

from . import _dynamic, _graph_call, _logging, _split, config, utils
from ._region_work import group_by_work

_STATE_WORDS = ("grad_enabled", "autocast", "inference_mode", "manual_seed", "rng_state", "set_default",
                "_enter", "_exit", "functorch")


# ---- finding the calls ----

def _calls(nodes):
    """Module calls by nn_module_stack key: {key: (depth, parent path, class, path, [positions])}."""
    calls = {}
    for i, n in enumerate(nodes):
        stack = n.meta.get("nn_module_stack")
        if not stack:
            continue
        for depth, (key, (path, cls)) in enumerate(stack.items()):
            entry = calls.get(key)
            if entry is None:
                parent = path.rsplit(".", 1)[0] if "." in path else ""
                entry = calls[key] = (depth, parent, cls, path, [])
            entry[4].append(i)
    return calls


def find_calls(nodes, min_calls):
    """Spans (first, last+1, path, class) of the chosen sibling calls, in graph order: groups of >= ``min_calls``
    contiguous calls of one class under one parent, the groups covering the most nodes first, never overlapping."""
    groups = {}
    for depth, parent, cls, path, pos in _calls(nodes).values():
        if pos[-1] - pos[0] + 1 == len(pos):  # contiguous in graph order
            groups.setdefault((depth, parent, cls), []).append((pos[0], pos[-1] + 1, path, cls))
    chosen = []
    ranked = sorted((g for g in groups.values() if len(g) >= min_calls), key=lambda g: -sum(b - a for a, b, *_ in g))
    for spans in ranked:
        if not any(a < b2 and a2 < b for a, b, *_ in spans for a2, b2, *_ in chosen):
            chosen.extend(spans)
    return sorted(chosen)


# ---- values and keys ----

def _stateful(n):
    name = getattr(n.target, "__name__", str(n.target)) or ""
    return any(w in name for w in _STATE_WORDS)


def _refuse(gm, nodes):
    """Why the graph is not cut at all (None: it may be)."""
    for n in nodes:
        if n.kwargs.get("generator") is not None:
            return "a node draws from an explicit generator"
        if n.op == "call_module" or _graph_call._opaque(n):
            return f"opaque callee {n.target!r}"
    return None


def _state_cuts(nodes):
    """The positions where the global state is what it was at the graph's start (grad mode as set by
    ``_set_grad_enabled`` with a constant, no autocast block open): a segment is compiled under the state at its
    start, so only those positions may be cut. None: a node changes global state in another way."""
    start = grad = torch.is_grad_enabled()
    depth = 0
    ok = []
    for i, n in enumerate(nodes):
        if grad == start and depth == 0:
            ok.append(i)
        name = getattr(n.target, "__name__", str(n.target)) or ""
        if name == "_set_grad_enabled" and len(n.args) == 1 and isinstance(n.args[0], bool) and not n.kwargs:
            grad = n.args[0]
        elif name == "_enter_autocast":
            depth += 1
        elif name == "_exit_autocast":
            depth -= 1
        elif _stateful(n):
            return None
    return set(ok)


def _fake_values(gm, example_inputs):
    """Each node's value with fake tensors (static graphs: a fresh fake mode over the real inputs; the nodes' meta
    examples carry no device). Dynamic graphs: the nodes' own fake example values."""
    if _dynamic.has_fake(example_inputs):
        return _dynamic_values(gm, example_inputs)
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in example_inputs]
    values = {}

    class Prop(torch.fx.Interpreter):
        def run_node(self, n):
            values[n] = out = super().run_node(n)
            return out

    with mode:
        Prop(gm).run(*fakes)
    return values


def _dynamic_values(gm, example_inputs):
    """The nodes' fake example values; a compute node without one (some call_method nodes) is run on its
    arguments' fakes under the graph's fake mode (None where that fails: no cut across it)."""
    from torch._guards import detect_fake_mode

    mode = detect_fake_mode(example_inputs)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values = dict(zip(placeholders, example_inputs))
    for n in gm.graph.nodes:
        if n in values:
            continue
        v = n.meta.get("example_value")
        if v is None and n.op in ("call_function", "call_method") and mode is not None:
            try:
                args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), values.__getitem__)
                with mode:
                    v = (getattr(args[0], n.target)(*args[1:], **kwargs) if n.op == "call_method"
                         else n.target(*args, **kwargs))
            except Exception:  # noqa: BLE001
                v = None
        values[n] = v
    return values


def _crossable(v):
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    return type(v) in (torch.Tensor, torch.nn.Parameter) or type(v).__name__ == "FakeTensor"


def _drop_bad_cuts(nodes, starts, values):
    """The cut positions across which only tensors and symbolic numbers are live."""
    index = {n: i for i, n in enumerate(nodes)}
    bad = set()
    for i, n in enumerate(nodes):
        last = max((index.get(u, len(nodes)) for u in n.users), default=i)
        if last > i and not _crossable(values.get(n)):
            bad.update(range(i + 1, last + 1))
    return [s for s in starts if s not in bad]


def _dim(v):
    if isinstance(v, torch.SymInt):
        known = v.node.maybe_as_int()  # a symbol specialised to a constant is that constant
        return str(v.node.expr) if known is None else int(known)
    return int(v)


def _meta_key(v, static):
    """The metadata of a segment input that its compiled code may depend on."""
    if isinstance(v, torch.Tensor):
        return ("T", tuple(_dim(d) for d in v.shape), tuple(_dim(d) for d in v.stride()), _dim(v.storage_offset()),
                v.dtype, v.device, v.layout, v.requires_grad, static)
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("S", type(v).__name__, str(v.node.expr))
    return ("V", type(v), repr(v))


_PLAIN = (int, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


def _arg_key(a, local, keep):
    if isinstance(a, torch.fx.Node):
        return ("n", local[a])
    if isinstance(a, (tuple, list)):
        return (type(a).__name__, tuple(_arg_key(x, local, keep) for x in a))
    if isinstance(a, dict):
        return ("d", tuple((k, _arg_key(v, local, keep)) for k, v in a.items()))
    if isinstance(a, float):
        return ("f", a.hex())
    if isinstance(a, _PLAIN):
        return (type(a).__name__, a)
    if isinstance(a, slice):
        return ("s", _arg_key((a.start, a.stop, a.step), local, keep))
    if a is Ellipsis:
        return ("...",)
    keep.append(a)  # any other object: by identity (kept alive so that its id is not reused)
    return ("id", type(a).__name__, id(a))


def _target_key(t, keep):
    if isinstance(t, str):
        return t
    keep.append(t)
    return ("id", id(t))


def segment_key(seg, values, static_nodes, keep):
    """The structural key of a segment: equal keys, same function of the inputs."""
    local = {n: i for i, n in enumerate(seg.inputs)}
    parts = [tuple(_meta_key(values[n], n in static_nodes) for n in seg.inputs)]
    refs = [values[n].untyped_storage()._cdata if isinstance(values[n], torch.Tensor) else None for n in seg.inputs]
    # for each input, the first input sharing its storage (itself when none)
    parts.append(tuple(r if r is None else refs.index(r) for r in refs))
    for n in seg.nodes:
        local[n] = len(local)
        parts.append((n.op, _target_key(n.target, keep), _arg_key(n.args, local, keep),
                      _arg_key(n.kwargs, local, keep)))
    parts.append(tuple(local[n] for n in seg.outputs))
    return tuple(parts)


# ---- the plan ----

class Plan:
    """A graph cut for regional compilation: ``segments`` (``_split.Segment``, gm built for the first of each key),
    ``keys`` (one per segment), ``spans`` (the chosen module calls), ``region_of`` (segment index -> span)."""

    def __init__(self, segments, keys, spans, region_of, values):
        self.segments = segments
        self.keys = keys
        self.spans = spans
        self.region_of = region_of
        self.values = values

    def regions(self):
        """[{"cls", "paths", "calls"}] per distinct region key, in graph order."""
        out = {}
        for i, span in self.region_of.items():
            name = span[3].__name__ + (f" ({span[4]} layers)" if len(span) > 4 and span[4] > 1 else "")
            entry = out.setdefault(self.keys[i], {"cls": name, "paths": [], "calls": 0})
            entry["paths"].append(span[2])
            entry["calls"] += 1
        return list(out.values())

    @property
    def compiles(self):
        return len(set(self.keys))


def _static_nodes(gm):
    return {n for n in gm.graph.nodes if n.op == "placeholder"
            and n.meta.get("tensor_dict", {}).get("_dynamo_static_input_type") is not None}


def plan(gm, example_inputs, min_calls=None, by_work=False):
    """(Plan, None) when the graph has >= ``min_calls`` calls of one region worth compiling once, else
    (None, reason). ``by_work``: the automatic policy (``group_by_work``): layers too small to pay for a cut each are
    cut k at a time, or not at all."""
    min_calls = config.regions_min_calls if min_calls is None else min_calls
    nodes = _split.compute_nodes(gm)
    spans = find_calls(nodes, min_calls)
    if not spans:
        return None, "no repeated module calls"
    why = _refuse(gm, nodes)
    if why:
        return None, why
    allowed = _state_cuts(nodes)
    if allowed is None:
        return None, "a node changes global state"
    spans = [s for s in spans if s[0] in allowed and (s[1] in allowed or s[1] == len(nodes))]
    if not spans:
        return None, "the global state differs at every call's edge"
    try:
        values = _fake_values(gm, example_inputs)
    except Exception as e:  # noqa: BLE001  (an op without a fake kernel: compile the graph whole)
        return None, f"fake propagation failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values.update(zip(placeholders, example_inputs))
    if by_work:
        spans, why = group_by_work(nodes, spans, values, min_calls)
        if not spans:
            return None, why
    return _plan_spans(gm, example_inputs, nodes, spans, values, min_calls, False)


def _plan_spans(gm, example_inputs, nodes, spans, values, min_calls, _recut):
    starts = _drop_bad_cuts(nodes, sorted({s for a, b, *_ in spans for s in (a, b)}), values)
    segments = _split.cut(gm, starts)
    keep = []  # objects keyed by identity stay alive while keys are compared
    static = _static_nodes(gm)
    keys = [segment_key(seg, values, static, keep) for seg in segments]
    position = {n: i for i, n in enumerate(nodes)}
    by_start = {a: s for s in spans for a in (s[0],)}
    region_of = {}
    for i, seg in enumerate(segments):
        span = by_start.get(position[seg.nodes[0]])
        if span is not None and position[seg.nodes[-1]] + 1 == span[1]:
            region_of[i] = span
    counts = {}
    for i in region_of:
        counts[keys[i]] = counts.get(keys[i], 0) + 1
    if max(counts.values(), default=0) < min_calls:
        return None, f"no {min_calls} module calls with equal segments"
    reused = {k for k, c in counts.items() if c >= min_calls}
    if len(reused) < len(set(keys[i] for i in region_of)) and not _recut:
        # cut only at the edges of calls that are reused (two single Linear siblings are not worth a cut)
        kept = [s for i, s in region_of.items() if keys[i] in reused]
        return _plan_spans(gm, example_inputs, nodes, kept, values, min_calls, True)
    built = set()
    for seg, key in zip(segments, keys):
        if key in built:
            continue
        built.add(key)
        _split.build(gm, seg, _input_meta)
        if _writes_input(seg.gm):
            return None, "a segment may write one of its inputs"
    return Plan(segments, keys, spans, region_of, values), None


def _writes(n):
    """Whether ``n`` may write one of its operands (call_method: only the in-place forms)."""
    name = _graph_call._name(n.target)
    if n.op == "call_method":
        return (name.endswith("_") and not name.endswith("__")) or name == "__setitem__" or \
            n.kwargs.get("out") is not None
    return _graph_call._known_write(n, name)


def _writes_input(seg_gm):
    writers = [n for n in seg_gm.graph.nodes if n.op in _split.COMPUTE and _writes(n)]
    return bool(writers) and any(_graph_call._written_inputs(seg_gm, writers))


def _input_meta(n):
    v = n.meta.get("example_value")
    return {} if v is None else {"example_value": v}


# ---- compiling ----

def _zeros_like_meta(v):
    """A real zero-filled tensor with ``v``'s size, stride, offset, dtype, device and requires_grad."""
    sizes, strides, offset = tuple(v.shape), tuple(v.stride()), v.storage_offset()
    extent = 0 if 0 in sizes else offset + 1 + sum((s - 1) * st for s, st in zip(sizes, strides))
    base = torch.zeros(extent, dtype=v.dtype, device=v.device)
    t = base.as_strided(sizes, strides, offset)
    return t.detach().requires_grad_() if v.requires_grad else t


def _example_inputs(seg, p, gm, example_inputs):
    dynamic = _dynamic.has_fake(example_inputs)
    fake_mode = None
    if dynamic:
        from torch._guards import detect_fake_mode
        fake_mode = detect_fake_mode(example_inputs)
    out = []
    for n in seg.inputs:
        v = p.values[n]
        if n.op == "get_attr" and dynamic and isinstance(v, torch.Tensor) and fake_mode is not None:
            v = fake_mode.from_tensor(v, static_shapes=True)
        elif n.op in _split.COMPUTE and not dynamic and isinstance(v, torch.Tensor):
            v = _zeros_like_meta(v)
        out.append(v)
    return out


def compile_regions(gm, example_inputs, call_backend, by_work=False, batch=None):
    """The graph compiled by region (a ``_split.SequenceCall``), or None when it is better compiled whole (the
    reason in the ``regions`` log). ``call_backend(gm, example_inputs)`` compiles one segment. ``by_work``: the
    automatic policy (``config.compile_regions`` None), which cuts only where the layers' work hides the cost of a
    segment call (``group_by_work``). ``batch``: the backend's context (a function returning one) that all segment
    compiles run in; everything the compiled callables need is ready when it closes (inductor: kernel builds of one
    segment overlap the next one's lowering, ``backends/_inductor_defer.py``)."""
    if _dynamic.has_fake(example_inputs):
        _dynamic.drop_dead_sym_nodes(gm)
    try:
        p, why = plan(gm, example_inputs, by_work=by_work)
    except Exception as e:  # noqa: BLE001  (an internal error here never fails the compile: the graph goes whole)
        p, why = None, f"internal error while planning: {type(e).__name__}: {e}"
    if p is None:
        if why != "no repeated module calls":
            _logging.emit("regions", f"graph compiled whole: {why}")
        return None
    compiled = {}
    fns = []
    with (batch() if batch is not None else contextlib.nullcontext()):
        for seg, key in zip(p.segments, p.keys):
            fn = compiled.get(key)
            if fn is None:
                fn = compiled[key] = call_backend(seg.gm, _example_inputs(seg, p, gm, example_inputs))
                if not callable(fn):
                    raise TypeError(f"backend returned {type(fn).__name__} for a region segment, expected a "
                                    "callable")
            fns.append(fn)
    stats = utils.counters["stats"]
    stats["region_graphs"] += 1
    stats["region_segments"] += len(p.segments)
    stats["region_compiles"] += p.compiles
    stats["region_reuses"] += len(p.segments) - p.compiles
    _logging.emit("regions", format_plan(p))
    return _split.SequenceCall(gm, p.segments, fns)


def explain(gm, example_inputs):
    """(regions, plan text) of ``gm`` for explain(), as the current ``config.compile_regions`` would cut it for a
    backend that compiles by region (inductor): True, one region per layer; None, the automatic policy's grouping
    (``group_by_work``), or the graph whole. ``regions``: [{"cls", "paths", "calls"}] per distinct region ([] when
    the graph is compiled whole); the text: "whole graph: <why>" or "cut into N segments, M compiled", None without
    repeated module calls."""
    if not find_calls(_split.compute_nodes(gm), config.regions_min_calls):
        return [], None
    if config.compile_regions is False:
        return [], "whole graph: config.compile_regions is False"
    try:
        p, why = plan(gm, list(example_inputs), by_work=config.compile_regions is None)
    except Exception as e:  # noqa: BLE001  (explain reports; it never fails because of this analysis)
        return [], f"whole graph: internal error while planning: {type(e).__name__}: {e}"
    if p is None:
        return [], f"whole graph: {why}"
    return p.regions(), f"cut into {len(p.segments)} segments, {p.compiles} compiled"


def format_plan(p):
    lines = [f"graph cut into {len(p.segments)} segments, {p.compiles} compiled "
             f"({len(p.segments) - p.compiles} reused):"]
    for r in p.regions():
        paths = r["paths"]
        where = paths[0] if len(paths) == 1 else f"{paths[0]} ... {paths[-1]}"
        lines.append(f"  region {r['cls']}: {r['calls']} calls ({where}), compiled once")
    return "\n".join(lines)
