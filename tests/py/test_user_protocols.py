# test_user_protocols.py — owns tests of Python protocols on user objects made in the trace (transformers'
# DynamicCache / per-layer config views): ABC classes, len / iteration / `in` through Python dunders, a
# collections.abc.Sequence iterated up to IndexError, `raise` inside inlined functions, `is None` on new
# objects, hasattr on tensors, torch.finfo / iinfo, and `for m in self.layers[:n]`.
from collections.abc import Sequence
import abc

import pytest
import torch

from graph_counts import compiled, dynamo_graphs

pytestmark = pytest.mark.usefixtures("cdynamo_reset")


# ---- classes made in the frame ---------------------------------------------------------------------

class LayerBase(abc.ABC):
    @abc.abstractmethod
    def update(self, x): ...


class Layer(LayerBase):
    def __init__(self):
        self.keys = None

    def update(self, x):
        self.keys = x if self.keys is None else torch.cat([self.keys, x])
        return self.keys


class View(Sequence):
    """A per-layer view as transformers' _PerLayerConfigView: __len__ and a __getitem__ raising IndexError."""

    def __init__(self, scales):
        self.scales = scales

    def __len__(self):
        return len(self.scales)

    def __getitem__(self, i):
        if i < 0:
            i += len(self)
        if i < 0 or i >= len(self):
            raise IndexError("list index out of range")
        return self.scales[i]


class Cache:
    def __init__(self, view):
        self.layers = [Layer() for _ in view]


def abc_layers(x):
    cache = Cache(View((1.0, 2.0, 3.0)))
    out = x
    for layer, s in zip(cache.layers, View((1.0, 2.0, 3.0))):
        out = layer.update(out * s)
    return out, cache is not None, len(cache.layers)


def sequence_protocols(x):
    v = View((2.0, 3.0))
    total = x
    for s in v:
        total = total * s
    return total + len(v), 3.0 in v, list(v), v[-1]


@pytest.mark.parametrize("fn", [abc_layers, sequence_protocols], ids=lambda f: f.__name__)
def test_objects_made_in_the_frame_are_one_graph(fn):
    """ABC classes made in the frame (abc_layers); a Sequence iterated until IndexError (sequence_protocols)."""
    x = torch.randn(4)
    opt, cnt = compiled(fn)
    ref = fn(x)
    got = opt(x)
    torch.testing.assert_close(got[0], ref[0])
    assert got[1:] == ref[1:]
    assert cnt.frame_count == 1 == dynamo_graphs(fn, x)


class NoisyView(View):
    log = []

    def __getitem__(self, i):
        NoisyView.log.append(i)  # a side effect: the items cannot be read ahead of the loop body
        return super().__getitem__(i)


def noisy_iteration(x):
    out = x
    for s in NoisyView((2.0, 3.0)):
        NoisyView.log.append("body")
        out = out * s
    return out


def test_sequence_with_side_effecting_getitem_keeps_eager_order():
    x = torch.randn(4)
    ref = noisy_iteration(x)
    eager_log = list(NoisyView.log)
    NoisyView.log.clear()
    opt, _ = compiled(noisy_iteration)
    torch.testing.assert_close(opt(x), ref)
    assert NoisyView.log == eager_log


# ---- raise inside inlined functions ----------------------------------------------------------------

def check_positive(n):
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    return n


def raises_through(x, n):
    y = x * 2
    return y * check_positive(n)


def test_uncaught_raise_in_inlined_function_propagates_as_in_eager():
    x = torch.randn(3)
    opt, _ = compiled(raises_through)
    torch.testing.assert_close(opt(x, 2), raises_through(x, 2))
    with pytest.raises(ValueError, match="n must be positive, got -1"):
        opt(x, -1)


def caller_with_handler(x, n):
    try:
        m = check_positive(n)
    except ValueError:
        m = 7
    return x * m


def test_raise_caught_by_a_caller_handler_runs_the_handler():
    x = torch.randn(3)
    opt, _ = compiled(caller_with_handler)
    for n in (3, -3):
        torch.testing.assert_close(opt(x, n), caller_with_handler(x, n))


def helper_with_own_handler(n):
    try:
        if n < 0:
            raise KeyError("neg")
        return n
    except KeyError:
        return 100


def own_handler(x, n):
    return x + helper_with_own_handler(n)


def test_raise_inside_the_inlined_functions_own_try_block():
    x = torch.randn(3)
    opt, _ = compiled(own_handler)
    for n in (1, -1):
        torch.testing.assert_close(opt(x, n), own_handler(x, n))


# ---- `is None`, hasattr on tensors, finfo / iinfo ---------------------------------------------------

def new_object_is_not_none(x):
    layer = Layer()
    if layer is None:
        return x - 1
    return x + 1


def test_is_none_on_an_object_made_in_the_frame():
    x = torch.randn(3)
    opt, cnt = compiled(new_object_is_not_none)
    torch.testing.assert_close(opt(x), new_object_is_not_none(x))
    assert cnt.frame_count == 1 == dynamo_graphs(new_object_is_not_none, x)


def tensor_hasattr(x):
    y = x * 2
    return y + (1 if hasattr(x, "tag") else 0) + (10 if hasattr(y, "shape") else 0) + (100 if hasattr(y, "jax") else 0)


def test_hasattr_on_tensors_is_guarded():
    x = torch.randn(3)
    opt, cnt = compiled(tensor_hasattr)
    torch.testing.assert_close(opt(x), tensor_hasattr(x))
    assert cnt.frame_count == 1 == dynamo_graphs(tensor_hasattr, x)
    tagged = torch.randn(3)
    tagged.tag = "t"
    torch.testing.assert_close(opt(tagged), tensor_hasattr(tagged))  # the presence guard fails: recompiled
    assert cnt.frame_count == 2


def dtype_limits(x):
    return x.clamp(torch.finfo(x.dtype).min, torch.finfo(x.dtype).max) + torch.iinfo(torch.int8).max


def test_finfo_and_iinfo_fold():
    x = torch.randn(3)
    opt, cnt = compiled(dtype_limits)
    torch.testing.assert_close(opt(x), dtype_limits(x))
    assert cnt.frame_count == 1 == dynamo_graphs(dtype_limits, x)
    x64 = torch.randn(3, dtype=torch.float64)
    torch.testing.assert_close(opt(x64), dtype_limits(x64))


# ---- slices of module containers ---------------------------------------------------------------------

class Stack(torch.nn.Module):
    def __init__(self, n=4, used=3):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(n))
        self.used = used

    def forward(self, x):
        for layer in self.layers[: self.used]:
            x = layer(x)
        for layer in self.layers[::-2]:
            x = x + layer(x)
        return x, len(self.layers[1:])


def test_iterating_a_module_list_slice_is_one_graph():
    torch.manual_seed(0)
    m = Stack()
    x = torch.randn(2, 4)
    opt, cnt = compiled(m)
    ref = m(x)
    got = opt(x)
    torch.testing.assert_close(got[0], ref[0])
    assert got[1] == ref[1]
    assert cnt.frame_count == 1 == dynamo_graphs(m, x)
    m.used = 2  # the slice bound is read again: the guard on it fails
    torch.testing.assert_close(opt(x)[0], m(x)[0])
