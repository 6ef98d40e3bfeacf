# _compare.py — owns `same`, the recursive comparison of results (tensors allclose) shared by config.verify_correctness
# and cdynamo.testing (a leaf module: both import it, it imports neither).
import math

import torch


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
