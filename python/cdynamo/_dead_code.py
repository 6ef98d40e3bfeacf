# _dead_code.py — owns the dead-code pass on a captured graph: a pure node whose value nothing uses is dropped.
"""A node is dropped when nothing uses its value and it is known pure: an ``operator`` function (not an
in-place one), or a torch function / tensor method from the short lists below that neither writes a tensor nor
draws random numbers (``_graph_call``'s tests). Anything else stays, however dead: a call with an effect the lists
do not know (a hook, a collective, a grad-mode switch, an opaque callee) is never guessed pure. Placeholders stay
too (the graph's calling convention is the frame's). torch._dynamo drops the same dead reads (BART's unused
``inputs_embeds[:, :, -1]``).
"""
import operator

from . import _graph_call

_PURE_OPERATORS = frozenset([
    operator.getitem, operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
    operator.pow, operator.neg, operator.pos, operator.abs, operator.invert, operator.matmul, operator.eq,
    operator.ne, operator.lt, operator.le, operator.gt, operator.ge, operator.and_, operator.or_, operator.xor,
    operator.not_, operator.lshift, operator.rshift, operator.truth, getattr, len])

# Tensor reads and value-producing ops (the same names as torch functions and as Tensor methods).
_PURE_NAMES = frozenset([
    "size", "dim", "numel", "stride", "storage_offset", "is_contiguous", "contiguous", "view", "view_as", "reshape",
    "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze", "permute", "transpose", "t", "narrow", "select",
    "split", "chunk", "unbind", "expand", "expand_as", "repeat", "__getitem__", "detach", "clone", "float", "half",
    "bfloat16", "double", "int", "long", "bool", "to", "type_as", "cat", "stack", "add", "sub", "mul", "div",
    "truediv", "neg", "matmul", "mm", "bmm", "sum", "mean", "amax", "amin", "max", "min", "softmax", "log_softmax",
    "exp", "log", "sqrt", "rsqrt", "abs", "tanh", "sigmoid", "where", "masked_fill", "eq", "ne", "lt", "le", "gt",
    "ge", "zeros_like", "ones_like", "full_like", "empty_like", "new_zeros", "new_ones", "new_full", "new_empty",
    "arange", "cumsum", "all", "any", "argmax", "argmin"])


def _pure(node):
    if node.op == "call_function" and node.target in _PURE_OPERATORS:
        return True
    if node.op == "call_method":
        name = node.target
    elif node.op == "call_function" and (getattr(node.target, "__module__", "") or "").startswith("torch") \
            and not (node.target.__module__ or "").startswith(("torch.distributed", "torch.cuda", "torch.autograd")):
        name = getattr(node.target, "__name__", "")
    else:
        return False
    return (name in _PURE_NAMES and not _graph_call._known_write(node, name)
            and not _graph_call._draws_random(node, name))


def eliminate(gm):
    """Drops the dead pure nodes of ``gm`` (in place; recompiles it if any went). Returns how many went."""
    graph = gm.graph
    removed = 0
    for node in reversed(list(graph.nodes)):
        if not node.users and node.op in ("call_function", "call_method") and _pure(node):
            graph.erase_node(node)
            removed += 1
    if removed:
        gm.recompile()
    return removed
