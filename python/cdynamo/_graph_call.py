# _graph_call.py — owns what a failed call of a compiled graph may have changed (inputs written, random numbers drawn), read from its FX graph, and the RNG save/restore around graphs that draw.
"""When a compiled graph raises while it runs, the frame that called it can rerun as plain Python (so the
Python side effects traced before the failing op happen, as in eager) only if the failed call changed
nothing. ``error_policy(gm)`` tells the C++ GraphCall how to know that:

* ``CLEAN``: no node can write a tensor, so a failed call wrote no input;
* ``CHECK_VERSIONS``: some node may write a tensor (in-place method or function, ``out=``, ``inplace=``,
  ``setitem``, batch-norm running statistics, an op whose schema is mutable, an opaque callee): the call
  changed nothing when no tensor argument's version counter moved;
* ``PROPAGATE``: a node draws from an explicit generator, which cannot be put back: the error propagates.

Graphs with random ops also get ``save_rng`` / ``restore_rng``, so a failed call draws no numbers.
"""
import builtins
import math
import operator

import torch

PROPAGATE, CLEAN, CHECK_VERSIONS = 0, 1, 2

_INPLACE_OPERATORS = frozenset(
    [operator.setitem, operator.delitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
     operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor,
     operator.ilshift, operator.irshift, operator.imatmul, operator.iconcat])

# Functions that write a tensor without a trailing underscore, or when given `inplace=True` positionally.
_MAY_WRITE_NAMES = frozenset(
    ["batch_norm", "instance_norm", "native_batch_norm", "_native_batch_norm_legit", "_batch_norm_impl_index",
     "batch_norm_update_stats", "relu", "relu6", "elu", "selu", "celu", "leaky_relu", "hardtanh", "rrelu",
     "threshold", "hardsigmoid", "hardswish", "silu", "mish", "dropout", "dropout1d", "dropout2d", "dropout3d",
     "alpha_dropout", "feature_alpha_dropout", "feature_dropout", "set_", "copy_", "__setitem__"])

_RANDOM_NAMES = frozenset(
    ["rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "bernoulli",
     "multinomial", "normal", "poisson", "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
     "feature_alpha_dropout", "feature_dropout", "native_dropout", "rrelu", "gumbel_softmax",
     "fractional_max_pool2d", "fractional_max_pool3d", "scaled_dot_product_attention",
     "multi_head_attention_forward", "uniform_", "normal_", "bernoulli_", "random_", "exponential_",
     "geometric_", "cauchy_", "log_normal_", "rrelu_", "dropout_", "alpha_dropout_", "feature_alpha_dropout_"])

_PURE_MODULES = ("torch", "math", "operator", "builtins", "_operator")
_PURE_IDS = frozenset(id(v) for m in (builtins, math) for v in vars(m).values() if callable(v))


def _name(target):
    if isinstance(target, str):
        return target
    return getattr(target, "__name__", "") or ""


def _schema_mutable(target):
    schema = getattr(target, "_schema", None)
    return bool(schema is not None and getattr(schema, "is_mutable", False))


# torch.nn.functional functions with an ``inplace`` (and a ``training``) parameter: their positions, and the
# ``training`` default. Such a call writes its input only when ``inplace`` is true, and the dropouts draw
# random numbers only when ``training`` is true (an eval-mode model's dropouts neither write nor draw).
_F_FLAGS = {
    "dropout": (3, 2, True), "dropout1d": (3, 2, True), "dropout2d": (3, 2, True), "dropout3d": (3, 2, True),
    "alpha_dropout": (3, 2, False), "feature_alpha_dropout": (3, 2, False),
    "relu": (1, None, None), "relu6": (1, None, None), "elu": (2, None, None), "selu": (1, None, None),
    "celu": (2, None, None), "leaky_relu": (2, None, None), "hardtanh": (3, None, None),
    "rrelu": (4, 3, False), "threshold": (3, None, None), "hardsigmoid": (1, None, None),
    "hardswish": (1, None, None), "silu": (1, None, None), "mish": (1, None, None)}
_UNKNOWN = object()


def _flag(node, index, keyword, default):
    """A bool argument of ``node`` by position or keyword: its constant value, ``default`` when absent,
    ``_UNKNOWN`` when it is computed in the graph."""
    if index is not None and index < len(node.args):
        v = node.args[index]
    elif keyword in node.kwargs:
        v = node.kwargs[keyword]
    else:
        return default
    return v if isinstance(v, (bool, int, float)) else _UNKNOWN


def _functional_flags(node, name):
    """(writes, draws) for a torch.nn.functional call listed in ``_F_FLAGS``, else None."""
    if node.op != "call_function" or name not in _F_FLAGS:
        return None
    if getattr(node.target, "__module__", None) != "torch.nn.functional" or \
            getattr(torch.nn.functional, name, None) is not node.target:
        return None
    inplace_at, training_at, training_default = _F_FLAGS[name]
    inplace = _flag(node, inplace_at, "inplace", False)
    writes = inplace is _UNKNOWN or bool(inplace)
    draws = False
    if training_at is not None:
        training = _flag(node, training_at, "training", training_default)
        p = _flag(node, 1, "p", 0.5)
        draws = training is _UNKNOWN or (bool(training) and (p is _UNKNOWN or p != 0))
        if name == "rrelu":
            draws = training is _UNKNOWN or bool(training)
    return writes, draws


def _known_write(node, name):
    """A torch op that writes some of its operands (in-place forms, ``out=``, running statistics, ...)."""
    target = node.target
    flags = _functional_flags(node, name)
    if flags is not None:
        return flags[0]
    if node.op == "call_function" and (target in _INPLACE_OPERATORS or _schema_mutable(target)):
        return True
    if name.endswith("_") and not name.endswith("__"):
        return True
    if name in _MAY_WRITE_NAMES:
        return True
    return node.kwargs.get("out") is not None or node.kwargs.get("inplace") is True


def _opaque(node):
    """A callee outside torch (a module call, an allow_in_graph function): it may write what it is given."""
    if node.op == "call_module":
        return True
    if node.op != "call_function":
        return False
    target = node.target
    owner = getattr(target, "__objclass__", None)  # a Tensor method descriptor: its class is torch's
    module = getattr(owner if owner is not None else target, "__module__", None) or ""
    return not module.startswith(_PURE_MODULES) and id(target) not in _PURE_IDS


def _may_write(node, name):
    return _known_write(node, name) or _opaque(node)


def _draws_random(node, name):
    if node.op == "call_module":
        return True
    flags = _functional_flags(node, name)
    if flags is not None:
        return flags[1]
    if name == "scaled_dot_product_attention" and node.op == "call_function":
        p = _flag(node, 4, "dropout_p", 0.0)  # (query, key, value, attn_mask, dropout_p, ...): 0 draws nothing
        return p is _UNKNOWN or p != 0
    return name in _RANDOM_NAMES


# Ops whose result never shares storage with an argument (a write to it cannot reach an input).
_FRESH_NAMES = frozenset(
    ["add", "sub", "mul", "div", "truediv", "floordiv", "mod", "pow", "neg", "matmul", "mm", "bmm", "addmm",
     "linear", "conv1d", "conv2d", "conv3d", "cat", "stack", "clone", "exp", "log", "sin", "cos", "tanh",
     "sigmoid", "softmax", "log_softmax", "sum", "mean", "amax", "amin", "where", "zeros_like", "ones_like",
     "empty_like", "full_like", "rand_like", "randn_like", "zeros", "ones", "empty", "full", "arange", "rand",
     "randn", "abs", "sqrt", "rsqrt", "gelu", "layer_norm", "embedding", "eq", "ne", "lt", "le", "gt", "ge",
     "masked_fill", "cumsum", "prod", "norm", "erf", "baddbmm"])

# For writes that do not go to their first argument: the positions (and keywords) they write.
_WRITTEN_OPERANDS = {"batch_norm": ((1, 2), ("running_mean", "running_var")),
                     "instance_norm": ((1, 2), ("running_mean", "running_var"))}


def _written(node, name):
    """The nodes a writing node may write (a superset)."""
    if node.op == "call_module" or not _known_write(node, name):
        return list(node.all_input_nodes)  # opaque: everything it is given
    if name in _WRITTEN_OPERANDS:
        pos, kw = _WRITTEN_OPERANDS[name]
        out = [node.args[i] for i in pos if i < len(node.args)] + [node.kwargs[k] for k in kw if k in node.kwargs]
    else:
        out = [node.args[0]] if node.args else []
        if node.kwargs.get("out") is not None:
            out.append(node.kwargs["out"])
    flat = []
    for a in out:
        flat.extend(a if isinstance(a, (list, tuple)) else [a])
    return [a for a in flat if hasattr(a, "op")]


def _written_inputs(gm, writers):
    """Indices of the placeholders a call of ``gm`` may write through the nodes ``writers`` (through views and
    unknown ops: a superset)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    index = {n: i for i, n in enumerate(placeholders)}
    hit = set()
    seen = set()
    stack = []
    for node in writers:
        stack.extend(_written(node, _name(node.target)))
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            hit.add(index[n])
        elif n.op in ("call_function", "call_method", "call_module") and _name(n.target) not in _FRESH_NAMES:
            stack.extend(n.all_input_nodes)  # may be a view of its arguments
    return bytes(1 if i in hit else 0 for i in range(len(placeholders)))


def error_policy(gm, has_effects=False):
    """(policy, save_rng, restore_rng, snapshot mask) for the graph module ``gm``.

    ``save_rng``/``restore_rng`` are None for graphs without random ops. The mask (bytes, one per
    placeholder, or None) names the inputs to copy before each call and put back after a failed one, so that
    the frame can still rerun: only for graphs that may write inputs in a frame whose Python side effects
    (``has_effects``) would otherwise be lost. Without such effects a failed in-order write (backend eager)
    is what eager leaves behind, and the error propagates as it is.
    """
    writers = []
    random = False
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module"):
            continue
        if node.kwargs.get("generator") is not None:
            return (PROPAGATE, None, None, None)
        name = _name(node.target)
        if _may_write(node, name):
            writers.append(node)
        random = random or _draws_random(node, name)
    written = _written_inputs(gm, writers) if writers else None
    # Writes that can reach no input (in-place ops on the graph's own intermediates) change nothing of the
    # caller's when the call fails: as clean as no write at all.
    policy = CHECK_VERSIONS if written is not None and any(written) else CLEAN
    mask = written if policy == CHECK_VERSIONS and has_effects else None
    return (policy, save_rng if random else None, restore_rng if random else None, mask)


def save_inputs(mask, args):
    """Copies of the tensor arguments ``mask`` names (None elsewhere)."""
    return [a.detach().clone() if m and isinstance(a, torch.Tensor) else None for m, a in zip(mask, args)]


def restore_inputs(args, copies):
    """Writes the copies back (the version counters move, as eager's own writes move them)."""
    with torch.no_grad():
        for a, c in zip(args, copies):
            if c is not None:
                a.copy_(c)


def save_rng():
    """The state of torch's default CPU generator (and of every CUDA one once CUDA is initialised)."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return (torch.random.default_generator.get_state(), cuda)


def restore_rng(state):
    cpu, cuda = state
    torch.random.default_generator.set_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)
