# _ddp.py — owns config.optimize_ddp: a graph captured inside a DistributedDataParallel forward is split at DDP's
# gradient-bucket boundaries and each piece compiled separately with the user's backend.
"""Why: DDP all-reduces a bucket of gradients as soon as autograd has written all of them. A compiled graph is one
autograd node, so with one graph every gradient is written at the end of its backward and no all-reduce overlaps
the backward's computation. Split where DDP's buckets end (parameters in reverse order of use, ``bucket_cap_mb``
each, the first bucket capped by DDP's first-bucket size), each piece's backward is its own autograd node and a
bucket's all-reduce starts while the earlier pieces' backward still runs, as with torch._dynamo's DDPOptimizer.

cdynamo lifts parameters as placeholders (graph inputs); a placeholder is a bucketed parameter when its example input
is one of the active DDP module's parameters (by identity), requires grad and is not in DDP's ignore list. With
dynamic shapes the examples are fake: a placeholder the C++ side read from a module's ``_parameters`` dict
(``info['static_inputs']``) that requires grad counts then.
"""
import sys

import torch

from . import _logging, config


def active_module():
    """The DistributedDataParallel module whose forward is running (DDP sets it around its inner module's call), or
    None (also when optimize_ddp is off or torch.distributed was never imported)."""
    if not config.optimize_ddp:
        return None
    dist = sys.modules.get("torch.nn.parallel.distributed")
    if dist is None:
        return None
    getter = getattr(dist.DistributedDataParallel, "_get_active_ddp_module", None)
    return getter() if getter is not None else None


def bucket_caps(ddp):
    """(first bucket's cap, every other bucket's cap) in bytes, as DDP's reducer sizes them."""
    cap = int(getattr(ddp, "bucket_bytes_cap", 25 * 1024 * 1024))
    first = getattr(torch.distributed, "_DEFAULT_FIRST_BUCKET_BYTES", cap)
    return min(first, cap), cap


def _ddp_params(ddp):
    """id -> parameter of the parameters DDP reduces (requiring grad, not in its ignore list)."""
    ignored = set(getattr(ddp, "parameters_to_ignore", ()) or ())
    return {id(p): p for name, p in ddp.module.named_parameters()
            if p.requires_grad and name not in ignored and not getattr(p, "_ddp_ignored", False)}


def param_sizes(gm, example_inputs, static_inputs, ddp):
    """placeholder node -> bytes, for the placeholders that are gradients DDP reduces."""
    from torch._subclasses.fake_tensor import FakeTensor

    params = _ddp_params(ddp)
    static = set(static_inputs or ())
    out = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, (node, value) in enumerate(zip(placeholders, example_inputs)):
        if not isinstance(value, torch.Tensor):
            continue
        if isinstance(value, FakeTensor):
            if i not in static or not value.requires_grad:
                continue
        elif id(value) not in params:
            continue
        nbytes = value.numel() * value.element_size()
        if not isinstance(nbytes, int):  # a symbolic size (dynamic=True): its hint, never a guard on it
            nbytes = getattr(nbytes.node, "hint", None)
            if not isinstance(nbytes, int):
                continue
        out[node] = nbytes
    return out


def _has_outside_user(nodes):
    """Whether a value made in ``nodes`` (a bucket, built backwards) is used outside it: a piece needs an output."""
    inside = set(nodes)
    return any(user not in inside for node in nodes for user in node.users)


def assign_buckets(gm, sizes, first_cap, cap):
    """Lists of nodes, in graph order, one per bucket: walking the graph backwards (backward's order), a bucket
    closes once its parameters reach its cap and it has a value used later; a parameter counts in the bucket of its
    last use. A leading bucket with no parameters joins the next one."""
    buckets = [[]]  # buckets[0] is the one being filled (earliest in graph order)
    filled = [0]
    counted = set()
    for node in reversed(gm.graph.nodes):
        if node.op in ("placeholder", "output"):
            continue
        limit = first_cap if len(buckets) == 1 else cap
        if filled[0] >= limit and _has_outside_user(buckets[0]):
            buckets.insert(0, [])
            filled.insert(0, 0)
        for arg in node.all_input_nodes:
            if arg in sizes and arg not in counted:
                counted.add(arg)
                filled[0] += sizes[arg]
        buckets[0].append(node)
    if len(buckets) > 1 and filled[0] == 0:
        buckets[1].extend(buckets.pop(0))
    return [list(reversed(b)) for b in buckets]


def _fake_inputs(example_inputs):
    """The example inputs as fake tensors of one mode (theirs when some already are), to run the pieces on."""
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = detect_fake_mode(example_inputs)
    if mode is None:
        mode = FakeTensorMode(shape_env=ShapeEnv(), static_shapes=True, allow_non_fake_inputs=True)
    values = [mode.from_tensor(x, static_shapes=True) if isinstance(x, torch.Tensor) and not
              isinstance(x, torch._subclasses.fake_tensor.FakeTensor) else x for x in example_inputs]
    return mode, values


class _Piece(torch.nn.Module):
    """A compiled piece: the backend's callable gets a graph whose output is a tuple (aot_autograd needs one); a
    piece that returned one value returns it unwrapped again."""

    def __init__(self, compiled, single):
        super().__init__()
        self.compiled = compiled
        self.single = single

    def forward(self, *args):
        out = self.compiled(*args)
        return out[0] if self.single else out


def _compile_piece(sub, args, compile_fn):
    out = next(n for n in sub.graph.nodes if n.op == "output")
    single = not isinstance(out.args[0], (tuple, list))
    if single:
        out.args = ((out.args[0],),)
        sub.recompile()
    return _Piece(compile_fn(sub, list(args)), single)


def _copy_meta(gm, split):
    """The original nodes' meta (example values, static-input marks, stack traces) onto the pieces' nodes of the
    same name, where the piece lacks a key."""
    by_name = {node.name: node for node in gm.graph.nodes}
    for sub in split.children():
        if not isinstance(sub, torch.fx.GraphModule):
            continue
        for node in sub.graph.nodes:
            orig = by_name.get(node.name)
            if orig is not None and (orig.op == node.op or node.op == "placeholder"):
                for key, value in orig.meta.items():
                    node.meta.setdefault(key, value)


def _split(gm, buckets):
    """``gm`` as a module calling one submodule per bucket (torch.fx split_module)."""
    from torch.fx.passes.split_module import split_module

    part = {node: i for i, nodes in enumerate(buckets) for node in nodes}
    # split_module makes a piece an input of each symbol in its inputs' example values, found through placeholders
    # whose example is that SymInt; cdynamo's dynamic graphs read sizes from their tensors and have none, so the
    # split runs without example values, and the pieces get them back (with the rest of the meta) by node name.
    saved = {node: node.meta.pop("example_value") for node in gm.graph.nodes if "example_value" in node.meta}
    try:
        split = split_module(gm, None, lambda node: part[node])
    finally:
        for node, value in saved.items():
            node.meta["example_value"] = value
    _copy_meta(gm, split)
    return split


def _piece_inputs(split, example_inputs):
    """[(target, piece, its fake example inputs)] in call order: the pieces run on fake tensors, one after another."""
    mode, values = _fake_inputs(example_inputs)
    env, out = {}, []
    placeholders = iter(values)
    allow = mode.allow_non_fake_inputs
    mode.allow_non_fake_inputs = True  # the pieces' constants (get_attr) are real tensors
    try:
        with mode:
            for node in split.graph.nodes:
                if node.op == "placeholder":
                    env[node] = next(placeholders)
                    continue
                if node.op not in ("call_module", "call_function"):  # call_function: getitem of a piece's outputs
                    continue
                args = torch.fx.node.map_arg(node.args, lambda n: env[n])
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
                fn = split.get_submodule(node.target) if node.op == "call_module" else node.target
                env[node] = fn(*args, **kwargs)
                if node.op == "call_module":
                    out.append((node.target, fn, args))
    finally:
        mode.allow_non_fake_inputs = allow
    return out


def compile_split(ddp, gm, example_inputs, static_inputs, compile_fn, stats):
    """``compile_fn(gm, example_inputs)`` once per DDP bucket of ``gm`` (once when it has one bucket); the split
    module, calling the compiled pieces, is the graph's callable. A graph the split or the fake run of its pieces
    cannot handle is compiled whole (correct, without the overlap), with a graph_breaks log line."""
    sizes = param_sizes(gm, example_inputs, static_inputs, ddp)
    first_cap, cap = bucket_caps(ddp)
    buckets = assign_buckets(gm, sizes, first_cap, cap)
    if len(buckets) == 1:
        return compile_fn(gm, example_inputs)
    try:
        split = _split(gm, buckets)
        pieces = _piece_inputs(split, example_inputs)
    except Exception as e:  # noqa: BLE001 - any failure of the split: one graph, as with optimize_ddp off
        stats["ddp_split_failed"] += 1
        _logging.emit("graph_breaks", f"DDP bucket split not done, one graph: {type(e).__name__}: {e}")
        return compile_fn(gm, example_inputs)
    stats["ddp_buckets"] += len(buckets)
    for target, sub, args in pieces:  # outside the fake mode; each before the next: a backend may rewrite its graph
        split.delete_submodule(target)
        split.add_submodule(target, _compile_piece(sub, args, compile_fn))
    split.recompile()
    return split
