# _dealias.py — owns graphs whose tensor inputs share a storage and one of them is changed in place: the backend gets
# one input per storage (the others made from it in the graph with as_strided), or the graph runs as captured.
"""Why: aot_autograd (aot_eager, inductor, any AOT backend) handles "an input that aliases another input is mutated"
with synthetic bases, and on torch 2.13 that path maps an output that aliases another output's intermediate base to
the wrong index (``create_synthetic_base_metadata``): the output is silently wrong or compilation raises (module fuzz
seed 3616: ``x`` and ``v1 = x[0]`` both inputs, ``v1.mul_(2)``, then ``attn`` and ``attn.detach()`` both outputs).

What: when the graph changes (through any chain of ops) a placeholder that shares its storage with another
placeholder, and one member of that storage group is a dense tensor covering its whole storage (offset 0,
contiguous, every byte), the backend gets a graph where the other members are ``torch.as_strided(base, size,
stride, offset)`` of it and are no longer inputs. Mutations then reach the base as a plain input mutation. The
call wrapper checks that each dropped view still sits where it sat at compile time (the frame's guards check
sizes, strides and which inputs share a storage, not offsets) and otherwise runs the graph as captured.
Where no member covers its storage, the graph runs as captured (not compiled by the backend): correct, slower.
"""
import copy
import operator

import torch

# Call targets (operator / torch functions) that change their first argument in place.
_INPLACE_FUNCTIONS = {
    operator.setitem, operator.iadd, operator.iand, operator.ifloordiv, operator.ilshift, operator.imatmul,
    operator.imod, operator.imul, operator.ior, operator.ipow, operator.irshift, operator.isub,
    operator.itruediv, operator.ixor,
}


def _name_mutates(name):
    return (name.endswith("_") and not name.endswith("__")) or name == "__setitem__"


def _mutates(node):
    """Whether ``node`` may change its first tensor argument in place (over-approximated: names ending in
    ``_``, ``operator.i*``/``setitem``, ``inplace=True``, ``out=``)."""
    if node.op not in ("call_method", "call_function"):
        return False
    if node.kwargs.get("inplace") is True or "out" in node.kwargs:
        return True
    if node.op == "call_method":
        return _name_mutates(str(node.target))
    if node.target in _INPLACE_FUNCTIONS:
        return True
    return _name_mutates(getattr(node.target, "__name__", ""))


def _roots(node, seen=None):
    """Placeholders ``node`` may be a view of: its first argument followed back (over-approximated: any op may
    return a view of its first argument)."""
    seen = set() if seen is None else seen
    if isinstance(node, (tuple, list)):  # a list argument (torch._foreach_*_) or a tuple's getitem
        return [r for a in node for r in _roots(a, seen)]
    out = []
    while isinstance(node, torch.fx.Node) and node not in seen:
        seen.add(node)
        if node.op == "placeholder":
            out.append(node)
            break
        nxt = node.args[0] if node.args else None
        if isinstance(nxt, (tuple, list)):
            out.extend(_roots(nxt, seen))
            break
        node = nxt
    return out


def _storage_key(t):
    """What tells ``t``'s storage apart: its device and data pointer; for a fake tensor (a dynamic-shape graph's
    example) the storage object itself (fakes of views share their base's fake storage; their data pointer is 0)."""
    from torch._subclasses.fake_tensor import FakeTensor
    try:
        if isinstance(t, FakeTensor):
            return ("fake", t.untyped_storage()._cdata)
        return (t.device, t.untyped_storage().data_ptr())
    except Exception:  # noqa: BLE001 - no storage (sparse, subclass): never grouped
        return None


def _covers_storage(t):
    return (t.layout is torch.strided and t.storage_offset() == 0 and t.is_contiguous()
            and t.numel() * t.element_size() == t.untyped_storage().nbytes())


def _geometry(t):
    """(sizes, strides, offset) of ``t``: ints, and for a fake tensor of a dynamic graph SymInts."""
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


def _plain_geometry(t):
    """Whether each size, stride and the offset of ``t`` is an int or a SymInt that is one symbol (one value the call
    can pass as a graph input, as torch._dynamo passes sizes: a SymInt placeholder per symbol)."""
    sizes, strides, offset = _geometry(t)
    for v in sizes + strides + (offset,):
        if isinstance(v, torch.SymInt):
            import sympy
            if not isinstance(v.node.expr, sympy.Symbol):
                return False
        elif not isinstance(v, int):
            return False
    return True


def plan(gm, example_inputs):
    """None when nothing to do; else ("eager", None) or ("rewrite", [(view_index, base_index), ...]). With fake
    examples (dynamic shapes) a dropped view's symbolic sizes, strides and offset become SymInt inputs of the
    rewritten graph (each a symbol of its own: otherwise aot_autograd raises "is not tracked with proxy", and the
    graph runs as captured)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs) or len(example_inputs) < 2:
        return None
    groups = {}
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor) and x.layout is torch.strided and x.numel() > 0:
            key = _storage_key(x)
            if key is not None and key[1] != 0:
                groups.setdefault(key, []).append(i)
    shared = [g for g in groups.values() if len(g) > 1]
    if not shared:
        return None
    index = {p: i for i, p in enumerate(placeholders)}
    mutated = set()
    for node in gm.graph.nodes:
        if _mutates(node):
            mutated.update(index[r] for r in _roots(node.args[0] if node.args else None))
    dynamic = any(k[0] == "fake" for k in groups)
    pairs = []
    for g in shared:
        if not mutated.intersection(g):
            continue
        base = next((i for i in g if _covers_storage(example_inputs[i])), None)
        if base is None or any(example_inputs[i].dtype != example_inputs[base].dtype for i in g):
            return ("eager", None)
        if dynamic and not all(_plain_geometry(example_inputs[i]) for i in g if i != base):
            return ("eager", None)
        pairs.extend((i, base) for i in g if i != base)
    return ("rewrite", sorted(pairs)) if pairs else None


def rewrite(gm, example_inputs, pairs):
    """A copy of ``gm`` whose placeholders named by ``pairs`` are as_strided views of their base placeholder, the
    example inputs for it, and the (index, size, stride, offset) of each dropped view for the call-time check. A
    symbolic size, stride or offset of a dropped view is a SymInt input of the copy (one per symbol, after the
    kept inputs), read from the view at each call: ``kept`` then ends with ("sym", view index, "size" | "stride" |
    "offset", dim) items, and ``checks`` holds None in its place."""
    new = copy.deepcopy(gm)
    placeholders = [n for n in new.graph.nodes if n.op == "placeholder"]
    last = last_placeholder = placeholders[-1]
    checks = []
    sym_inputs, sym_nodes, sym_examples = [], {}, []

    def node_of(value, i, kind, dim):
        nonlocal last, last_placeholder
        if not isinstance(value, torch.SymInt):
            return value
        expr = value.node.expr
        if expr not in sym_nodes:
            with new.graph.inserting_after(last_placeholder):  # placeholders stay before the views
                p = new.graph.placeholder(f"sym_{len(sym_nodes)}")
            p.meta["example_value"] = p.meta["val"] = value
            if last is last_placeholder:
                last = p
            last_placeholder = sym_nodes[expr] = p
            sym_inputs.append(("sym", i, kind, dim))
            sym_examples.append(value)
        return sym_nodes[expr]

    for i, b in pairs:
        v = example_inputs[i]
        size, stride, offset = _geometry(v)
        size = tuple(node_of(x, i, "size", d) for d, x in enumerate(size))
        stride = tuple(node_of(x, i, "stride", d) for d, x in enumerate(stride))
        offset = node_of(offset, i, "offset", 0)
        with new.graph.inserting_after(last):
            view = new.graph.call_function(torch.as_strided, (placeholders[b], size, stride, offset))
        view.meta.update(placeholders[i].meta)
        placeholders[i].replace_all_uses_with(view)
        new.graph.erase_node(placeholders[i])
        last = view
        plain = lambda xs: tuple(None if isinstance(x, torch.fx.Node) else x for x in xs)  # noqa: E731
        checks.append((i, b, plain(size), plain(stride), None if isinstance(offset, torch.fx.Node) else offset))
    new.graph.lint()
    new.recompile()
    dropped = {i for i, _ in pairs}
    kept = [i for i in range(len(example_inputs)) if i not in dropped]
    return new, [example_inputs[i] for i in kept] + sym_examples, kept + sym_inputs, checks


def wrap(compiled, gm, kept, checks):
    """The callable the frame calls with every original input: the compiled graph on the kept inputs while each
    dropped view is where it was at compile time, else ``gm`` (the captured graph) as it is."""
    def same(now, then):  # None: symbolic, passed as an input
        return len(now) == len(then) and all(t is None or n == t for n, t in zip(now, then))

    def read(args, k):
        if isinstance(k, int):
            return args[k]
        _, i, kind, dim = k
        v = args[i]
        return v.shape[dim] if kind == "size" else v.stride()[dim] if kind == "stride" else v.storage_offset()

    def call(*args):
        for i, b, size, stride, offset in checks:
            v, base = args[i], args[b]
            if ((offset is not None and v.storage_offset() != offset) or not same(v.stride(), stride)
                    or not same(v.shape, size)
                    or v.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
                    or not _covers_storage(base)):
                return gm.forward(*args)
        return compiled(*[read(args, k) for k in kept])
    call._cdynamo_dealiased = True
    return call
