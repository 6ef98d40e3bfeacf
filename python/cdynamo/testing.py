# testing.py — owns helpers for tests: counting/recording backends and a recursive result comparison.
import math

import torch

from . import _format
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


def same(ref, res, tol=1e-4, equal_nan=False):
    """Recursively compare tensors (allclose with ``tol``), sequences, dicts and scalars."""
    if isinstance(ref, (list, tuple, torch.Size)):
        if not isinstance(res, (list, tuple, torch.Size)) or len(ref) != len(res):
            return False
        return all(same(a, b, tol, equal_nan) for a, b in zip(ref, res))
    if isinstance(ref, dict):
        if not isinstance(res, dict) or set(ref) != set(res):
            return False
        return all(same(ref[k], res[k], tol, equal_nan) for k in ref)
    if isinstance(ref, torch.Tensor):
        if not isinstance(res, torch.Tensor):
            return False
        if ref.shape != res.shape or ref.dtype != res.dtype or ref.device != res.device:
            return False
        if ref.is_floating_point() or ref.is_complex():
            return torch.allclose(ref, res, atol=tol, rtol=tol, equal_nan=equal_nan)
        return torch.equal(ref, res)
    if isinstance(ref, float) and isinstance(res, (int, float)):
        if math.isnan(ref):
            return equal_nan and math.isnan(res)
        return math.isclose(ref, res, rel_tol=tol, abs_tol=tol)
    return type(ref) is type(res) and ref == res
