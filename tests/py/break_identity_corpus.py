# break_identity_corpus.py — owns functions whose locals and stack alias each other across graph breaks;
# `probe()` (a graph break) records the identity structure of its caller's locals at every break point.
import sys

import torch

RECORDS = []


def _describe(obj, originals):
    """What identity says about one object: which original argument it is, or its type; tensors by value."""
    for k, o in enumerate(originals):
        if obj is o:
            return ("arg", k)
    if isinstance(obj, torch.Tensor):
        return ("tensor", tuple(obj.shape), obj.detach().clone())
    if isinstance(obj, (list, dict, tuple)):
        return (type(obj).__name__, len(obj))
    return (type(obj).__name__,)


def _snapshot(items, originals):
    """Per item: its description, and the index of the first item that is the same object (identity)."""
    out = []
    for k, (name, obj) in enumerate(items):
        first = next(j for j, (_, o) in enumerate(items) if o is obj)
        out.append((name, first, _describe(obj, originals)))
    return out


def probe():
    """A graph break that records its caller's locals (names of the rewritten code's temporaries skipped)."""
    frame = sys._getframe(1)
    items = sorted((k, v) for k, v in frame.f_locals.items() if not k.startswith("___"))
    RECORDS.append(("locals", frame.f_code.co_name, _snapshot(items, ORIGINALS)))
    return 0


def record(*values):
    """A graph break that records values that sat on the caller's stack while probe() ran."""
    RECORDS.append(("stack", _snapshot([(str(k), v) for k, v in enumerate(values)], ORIGINALS)))
    return 0


ORIGINALS = []


def rebind_arg(x):
    residual = x
    x = torch.relu(x)
    probe()
    return x + residual


def rebind_twice(x):
    r = x
    x = x + 1
    probe()
    x = x * 3
    probe()
    return x + r


def alias_of_intermediate(x):
    t = x * 2
    probe()
    r = t
    t = t * 3
    probe()
    return r


def swap(x, y):
    x, y = y, x
    probe()
    return x - y


def tuple_assign(x):
    r, r2 = x, x
    x = x + 1
    probe()
    return r + r2 + x


def dict_alias(x):
    c = {"k": x}
    x = x * 2 + 1
    probe()
    return c["k"] - x


def list_alias(x, y):
    lst = [x, y, x]
    x = y
    z = y + 1
    probe()
    lst.append(z)
    lst.append(x)
    return lst


def stack_alias(x):
    r = x
    x = x.sin()
    n = record(r, x, probe())
    return x + r + n


def inplace_through_alias(x):
    r = x
    x = x * 2
    probe()
    r.add_(1)
    return x


def deleted_arg(x, y):
    r = x
    del x
    probe()
    return r + y


def in_helper(x):
    r = x
    x = _helper(x)
    return x + r


def _helper(x):
    x = x.cos()
    probe()
    return x


def branch_alias(x):
    r = x
    x = x - 1
    if x.sum() > 0:
        probe()
        return x * r
    probe()
    return x + r


def loop_alias(x):
    acc = x
    for _ in range(3):
        x = x + acc
        probe()
    return x, acc


def returns_arg(x):
    y = x
    z = x + 1
    probe()
    return y, z


def view_alias(x):
    v = x.view(-1)
    x = x + 1
    probe()
    v.mul_(2)
    return v, x


CORPUS = [
    (rebind_arg, 1),
    (rebind_twice, 1),
    (alias_of_intermediate, 1),
    (swap, 2),
    (tuple_assign, 1),
    (dict_alias, 1),
    (list_alias, 2),
    (stack_alias, 1),
    (inplace_through_alias, 1),
    (deleted_arg, 2),
    (in_helper, 1),
    (branch_alias, 1),
    (loop_alias, 1),
    (returns_arg, 1),
    (view_alias, 1),
]
