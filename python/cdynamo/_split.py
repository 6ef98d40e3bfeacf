# _split.py — owns cutting an FX graph into contiguous segments (each its own GraphModule, graph order kept) and the
# callable that runs compiled segments one after another, passing the values that cross each cut.
"""A cut never reorders anything: segment k holds the graph's compute nodes between two cut positions, in graph
order, and runs after segment k-1. A segment's inputs are the values it reads from outside itself (the graph's
placeholders, its ``get_attr`` constants, nodes of earlier segments), in order of first use; its outputs are the
nodes it makes that a later segment or the graph's output reads, in graph order.
"""
import operator

import torch.fx as fx

COMPUTE = ("call_function", "call_method", "call_module")


class Segment:
    """One contiguous piece of a graph: ``nodes`` (compute nodes of the original graph), ``inputs`` and ``outputs``
    (original nodes), and ``gm`` (a GraphModule taking ``inputs`` and returning the tuple of ``outputs``)."""

    __slots__ = ("nodes", "inputs", "outputs", "gm")

    def __init__(self, nodes, inputs, outputs):
        self.nodes = nodes
        self.inputs = inputs
        self.outputs = outputs
        self.gm = None


def compute_nodes(gm):
    return [n for n in gm.graph.nodes if n.op in COMPUTE]


def _output_node(gm):
    return next(n for n in reversed(gm.graph.nodes) if n.op == "output")


def cut(gm, starts):
    """The segments of ``gm`` whose first compute nodes are at positions ``starts`` (indices into
    ``compute_nodes(gm)``; 0 is implied). Their ``gm`` is not built yet (``build``)."""
    nodes = compute_nodes(gm)
    bounds = sorted({0, *(s for s in starts if 0 < s < len(nodes))}) + [len(nodes)]
    segments = [Segment(nodes[a:b], [], []) for a, b in zip(bounds, bounds[1:]) if b > a]
    owner = {n: i for i, seg in enumerate(segments) for n in seg.nodes}
    for i, seg in enumerate(segments):
        seen = set()
        for n in seg.nodes:
            for a in n.all_input_nodes:
                if owner.get(a) != i and a not in seen:
                    seen.add(a)
                    seg.inputs.append(a)
            if any(owner.get(u) != i for u in n.users):  # a later segment or the graph's output reads it
                seg.outputs.append(n)
    return segments


def crossing(segment):
    """Original nodes whose values cross into ``segment`` from an earlier segment (not placeholders or
    constants)."""
    return [n for n in segment.inputs if n.op in COMPUTE]


def build(gm, segment, input_meta=None):
    """Makes ``segment.gm``. Placeholders of the graph's own placeholders keep their meta (static-input marks,
    example values); others get ``input_meta(node)`` (a dict) when given."""
    graph = fx.Graph()
    env = {}
    for n in segment.inputs:
        p = graph.placeholder(n.name)
        if n.op == "placeholder":
            p.meta = dict(n.meta)
        elif input_meta is not None:
            p.meta = input_meta(n)
        env[n] = p
    for n in segment.nodes:
        env[n] = graph.node_copy(n, env.__getitem__)
    graph.output(tuple(env[n] for n in segment.outputs))
    segment.gm = fx.GraphModule(gm, graph, class_name=f"{type(gm).__name__}Segment")
    return segment.gm


def _getter(slots):
    if not slots:
        return lambda env: ()
    if len(slots) == 1:
        only = slots[0]
        return lambda env: (env[only],)
    return operator.itemgetter(*slots)


class SequenceCall:
    """Runs compiled segments in order on one list of values: the call's arguments, then the constants, then one
    slot per value crossing a cut (dropped after its last reader). Returns what the graph's output node returns."""

    def __init__(self, gm, segments, compiled):
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        slot = {n: i for i, n in enumerate(placeholders)}
        self._n_args = len(placeholders)
        consts = [n for seg in segments for n in seg.inputs if n.op == "get_attr"]
        consts = list(dict.fromkeys(consts))
        self._consts = [_fetch(gm, n.target) for n in consts]
        for n in consts:
            slot[n] = len(slot)
        made = [n for seg in segments for n in seg.outputs]
        for n in made:
            slot[n] = len(slot)
        self._blank = [None] * len(made)
        out = _output_node(gm).args[0]
        finals = set()
        fx.node.map_arg(out, lambda n: finals.add(slot[n]))
        last = {}
        for k, seg in enumerate(segments):
            for n in seg.inputs:
                last[slot[n]] = k
        steps = []
        for k, (seg, fn) in enumerate(zip(segments, compiled)):
            first_made = self._n_args + len(consts)  # arguments and constants are never dropped
            free = tuple(s for s, at in last.items() if at == k and s >= first_made and s not in finals)
            steps.append((fn, _getter([slot[n] for n in seg.inputs]), tuple(slot[n] for n in seg.outputs), free))
        self._steps = steps
        self._out = _output_builder(out, slot)

    def __call__(self, *args):
        env = [*args, *self._consts, *self._blank]
        for fn, get, outs, free in self._steps:
            result = fn(*get(env))
            for j, v in zip(outs, result):
                env[j] = v
            for j in free:
                env[j] = None
        return self._out(env)


def _fetch(gm, target):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _output_builder(out, slot):
    """A function of the value list that rebuilds the graph's output (flat tuples/lists of nodes fast)."""
    if isinstance(out, (tuple, list)) and all(isinstance(a, fx.Node) for a in out):
        get = _getter([slot[a] for a in out])
        if isinstance(out, list):
            return lambda env: list(get(env))
        return get

    def rebuild(env):
        return fx.node.map_arg(out, lambda n: env[slot[n]])
    return rebuild
