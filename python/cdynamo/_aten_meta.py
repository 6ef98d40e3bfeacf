# _aten_meta.py — owns the dispatch mode under which the tracer propagates shapes on meta tensors: each aten op
# runs ATen's C++ Meta kernel where torch shadows it with a Python one (cdynamo._C.call_aten_meta).
"""Why: `import torch` registers Python meta kernels (torch/_meta_registrations.py, references from torch._refs
and torch._decomp) over ATen's own C++ Meta kernels for about 640 aten ops. The Python ones import sympy
(torch._check) and torch._dynamo with torch._inductor (torch._disable_dynamo wrappers): about a second before
the first graph of a fresh process. ATen's C++ Meta kernel computes the same output metadata (the structured
kernel's meta function, which the CPU kernel itself runs); an op whose only C++ kernel for Meta is a composite one
(CompositeExplicitAutograd: convolution, native_layer_norm, embedding, ...) runs that, as the dispatcher would
without the Python registration, its own aten calls coming back to this mode. A pointwise op with per-device kernels only (relu, where,
hardtanh) runs its CPU kernel on zeros of the same metadata (its output metadata never depends on values).
convolution, native_batch_norm and var_mean (no C++ Meta kernel; Python ones that import sympy) get their
metadata from cdynamo._aten_shapes. Other ops without a C++ kernel for Meta (_adaptive_avg_pool2d, ...), tensors
that are not all meta, and calls made under a user's own dispatch mode dispatch exactly as before.
"""
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torch.utils._pytree import tree_flatten as _tree_flatten, tree_unflatten as _tree_unflatten

from ._aten_shapes import SHAPES as _SHAPES
from ._core import C


class _AtenMetaMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls):
        # torch wraps a mode's __torch_dispatch__ in torch._disable_dynamo (importing torch._dynamo on its first
        # call) unless this is False; torch._dynamo never traces this mode: cdynamo enters it only while tracing.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        kind = _kinds.get(func)
        if kind is None:
            kind = _kinds[func] = _kind_of(func)
        if kind == 1:  # ATen's C++ Meta kernel
            r = _call(func, args, kwargs)
        elif kind == 2:  # a composite kernel: the aten ops it calls come back here
            with _AtenMetaMode():
                r = _call(func, args, kwargs)
        elif kind == 3:  # pointwise with CPU kernels only (relu, where, hardtanh, ...)
            r = _pointwise_on_zeros(func, args, kwargs)
        elif kind == 4:  # no C++ Meta kernel, a Python one that imports sympy: cdynamo._aten_shapes
            fn, reenter = _SHAPES[func]
            if reenter:
                with _AtenMetaMode():
                    r = fn(*args, **kwargs)
            else:
                r = fn(*args, **kwargs)
        else:
            return func(*args, **kwargs)
        if r is NotImplemented:  # not all tensors meta, or the kernel refused: as before
            return func(*args, **kwargs)
        return r


_ZEROS_LIMIT = 1 << 20  # elements of meta operands a pointwise op may run on as zeros
_kinds = {}  # OpOverload -> aten_meta_kind (ops live as long as the process)
_call = C().call_aten_meta
_kind = C().aten_meta_kind
_stack_len = torch._C._len_torch_dispatch_stack


def _kind_of(func):
    if func in _SHAPES:
        return 4
    kind = _kind(func)
    if (kind == 0 and func.namespace == "aten" and torch.Tag.pointwise in func.tags
            and torch.Tag.nondeterministic_seeded not in func.tags and not func._schema.is_mutable
            and all(r.alias_info is None for r in func._schema.returns)):
        return 3
    return kind


def _pointwise_on_zeros(func, args, kwargs):
    """A pointwise op whose only kernels are per device (no C++ Meta kernel, no composite one): its CPU kernel
    run on zeros of the meta arguments' metadata, the result's metadata back as meta tensors. A pointwise kernel's
    output metadata follows from its operands' (TensorIterator), never from their values; it draws no random
    numbers (seeded ops are not taken) and changes no argument. NotImplemented where anything differs."""
    flat, spec = _tree_flatten((args, kwargs))
    real = []
    metas = [a for a in flat if isinstance(a, torch.Tensor) and a.device.type == "meta"]
    if not metas or sum(a.numel() for a in metas) > _ZEROS_LIMIT:
        return NotImplemented  # (large operands: the Python meta kernel, rather than memory for zeros)
    for a in flat:
        if isinstance(a, torch.Tensor):
            if type(a) is not torch.Tensor or a.layout != torch.strided:
                return NotImplemented
            if a.device.type == "meta":
                a = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype).zero_()
            elif not (a.device.type == "cpu" and a.dim() == 0):
                return NotImplemented
        real.append(a)
    rargs, rkwargs = _tree_unflatten(real, spec)
    try:
        out = func(*rargs, **rkwargs)
    except Exception:  # noqa: BLE001 - the usual dispatch raises what it always raised
        return NotImplemented
    if type(out) is not torch.Tensor or out.layout != torch.strided:
        return NotImplemented
    return torch.empty_strided(out.shape, out.stride(), dtype=out.dtype, device="meta")


def run(fn, args, kwargs):
    """fn(*args, **kwargs) with meta tensors, under the mode (not under a mode of the user's: as before)."""
    if _stack_len():
        return fn(*args, **kwargs)
    with _AtenMetaMode():
        return fn(*args, **kwargs)
