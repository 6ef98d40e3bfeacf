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


def plan(gm, example_inputs):
    """None when nothing to do; else ("eager", None) or ("rewrite", [(view_index, base_index), ...]). Fake examples
    (dynamic shapes) never get "rewrite": the as_strided sizes of a dropped view would be symbols no graph input
    carries (aot_autograd raises "is not tracked with proxy"), so such a graph runs as captured."""
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
        if dynamic or base is None or any(example_inputs[i].dtype != example_inputs[base].dtype for i in g):
            return ("eager", None)
        pairs.extend((i, base) for i in g if i != base)
    return ("rewrite", sorted(pairs)) if pairs else None


def rewrite(gm, example_inputs, pairs):
    """A copy of ``gm`` whose placeholders named by ``pairs`` are as_strided views of their base placeholder, the
    example inputs for it, and the (index, size, stride, offset) of each dropped view for the call-time check."""
    new = copy.deepcopy(gm)
    placeholders = [n for n in new.graph.nodes if n.op == "placeholder"]
    last = placeholders[-1]
    checks = []
    for i, b in pairs:
        v = example_inputs[i]
        size, stride, offset = tuple(v.shape), tuple(v.stride()), v.storage_offset()
        with new.graph.inserting_after(last):
            view = new.graph.call_function(torch.as_strided, (placeholders[b], size, stride, offset))
        view.meta.update(placeholders[i].meta)
        placeholders[i].replace_all_uses_with(view)
        new.graph.erase_node(placeholders[i])
        last = view
        checks.append((i, b, size, stride, offset))
    new.graph.lint()
    new.recompile()
    dropped = {i for i, _ in pairs}
    kept = [i for i in range(len(example_inputs)) if i not in dropped]
    return new, [example_inputs[i] for i in kept], kept, checks


def wrap(compiled, gm, kept, checks):
    """The callable the frame calls with every original input: the compiled graph on the kept inputs while each
    dropped view is where it was at compile time, else ``gm`` (the captured graph) as it is."""
    def call(*args):
        for i, b, size, stride, offset in checks:
            v, base = args[i], args[b]
            if (v.storage_offset() != offset or tuple(v.stride()) != stride or tuple(v.shape) != size
                    or v.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
                    or not _covers_storage(base)):
                return gm.forward(*args)
        return compiled(*[args[i] for i in kept])
    call._cdynamo_dealiased = True
    return call
