# testing.py — owns helpers for tests: counting/recording backends and a recursive result comparison.
import math

import torch

from . import _format
from ._compare import same  # noqa: F401  (public here, as torch._dynamo.testing.same)
from .backends.registry import lookup_backend


class CompileCounter:
    """A backend that counts graphs (frame_count) and their call nodes (op_count); runs them eagerly."""

    def __init__(self):
        self.clear()

    def clear(self):
        self.frame_count = 0
        self.op_count = 0

    def __call__(self, gm, example_inputs):
        self.frame_count += 1
        self.op_count += _format.op_count(gm)
        return gm.forward


class CompileCounterWithBackend(CompileCounter):
    """Counts like CompileCounter, then compiles with the named backend."""

    def __init__(self, backend):
        self.backend = backend
        self._fn = lookup_backend(backend)
        self.graphs = []
        super().__init__()

    def clear(self):
        super().clear()
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.frame_count += 1
        self.op_count += _format.op_count(gm)
        self.graphs.append(gm)
        return self._fn(gm, example_inputs)


class EagerAndRecordGraphs:
    """A backend that keeps every GraphModule it gets in ``graphs`` and runs it eagerly."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


def assert_same(res, ref, path="result", equal_nan=True, **tol):
    """Asserts ``res`` equals ``ref`` recursively: the same container types and structure, tensors equal by
    ``torch.testing.assert_close`` (dtype, device, shape, requires_grad's absence of surprises), other values
    of the same type and equal. The AssertionError names the path of the first difference."""
    if isinstance(ref, torch.Tensor):
        assert isinstance(res, torch.Tensor), f"{path}: expected a tensor, got {type(res).__name__}"
        torch.testing.assert_close(res, ref, equal_nan=equal_nan, msg=lambda m: f"{path}: {m}", **tol)
        assert res.requires_grad == ref.requires_grad, f"{path}: requires_grad {res.requires_grad} != eager's"
        return
    assert type(res) is type(ref), f"{path}: type {type(res).__name__} != eager's {type(ref).__name__}"
    if isinstance(ref, (list, tuple)):
        assert len(res) == len(ref), f"{path}: length {len(res)} != eager's {len(ref)}"
        for i, (a, b) in enumerate(zip(res, ref)):
            assert_same(a, b, f"{path}[{i}]", equal_nan, **tol)
    elif isinstance(ref, dict):
        assert list(res) == list(ref), f"{path}: keys {list(res)} != eager's {list(ref)}"
        for k in ref:
            assert_same(res[k], ref[k], f"{path}[{k!r}]", equal_nan, **tol)
    elif isinstance(ref, float) and math.isnan(ref):
        assert equal_nan and math.isnan(res), f"{path}: {res!r} != eager's nan"
    else:
        assert res == ref, f"{path}: {res!r} != eager's {ref!r}"
