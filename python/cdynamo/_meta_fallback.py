# _meta_fallback.py — owns shape propagation for torch ops that have no meta kernel: the op's real kernel run
# on zero-filled tensors with the example values' metadata, the answer turned back into meta tensors.
"""Called by the tracer (csrc/interp/calls.cpp, run_meta) when an op raised NotImplementedError on meta
tensors. torch's fake tensors fall back the same way for such ops (on torch 2.11,
`_transformer_encoder_layer_fwd` is one). Refused, so that the call stays a graph break:

- ops whose output shape or value depends on the data (tags `dynamic_output_shape`, `data_dependent_output`):
  zeros would give a wrong shape;
- ops that mutate an argument or change its view metadata (mutable schema, `inplace_view`);
- ops outside the `aten` namespace (a library's kernel may have effects: it must not run while tracing);
- outputs that share storage with an input, or are not plain strided tensors (nested, sparse, subclasses).
"""

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

_REFUSED_TAGS = (torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output, torch.Tag.inplace_view)


class Refused(RuntimeError):
    """The op cannot be shape-propagated by running it on zeros."""


class _WatchOps(TorchDispatchMode):
    # Sees the ops the call dispatches (after composite decompositions), not the ones inside their kernels.
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace != "aten":
            # A library's kernel may have effects of its own (counters, prints, I/O): never run at trace time.
            raise Refused(f"{func} is not an aten operator")
        if any(tag in func.tags for tag in _REFUSED_TAGS):
            raise Refused(f"{func} has a data-dependent output")
        if func._schema.is_mutable:
            raise Refused(f"{func} mutates an argument")
        return func(*args, **(kwargs or {}))


def _plain(t):
    return type(t) is torch.Tensor or type(t) is torch.nn.Parameter


def run(fn, args, kwargs, device):
    """fn(*args, **kwargs) with every meta tensor replaced by zeros on `device`; meta tensors back."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    made = []

    def real(t):
        if isinstance(t, torch.Tensor) and t.device.type == "meta":
            if not _plain(t) or t.layout != torch.strided:
                raise Refused("a non-strided or subclass tensor argument")
            r = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device).zero_()
            if t.requires_grad:
                r.requires_grad_(True)
            made.append(r)
            return r
        return t

    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.Tensor):  # a bound tensor method: rebind it to the real receiver
        fn = getattr(real(owner), fn.__name__)
    rargs = tree_map(real, tuple(args))
    rkwargs = tree_map(real, dict(kwargs))
    with _WatchOps():
        out = fn(*rargs, **rkwargs)
    storages = {r.untyped_storage().data_ptr() for r in made if r.numel()}

    def back(o):
        if isinstance(o, torch.Tensor):
            if not _plain(o) or o.layout != torch.strided or o.is_nested:
                raise Refused("the op returned a non-strided or subclass tensor")
            if o.numel() and o.untyped_storage().data_ptr() in storages:
                raise Refused("an output shares storage with an input")
            m = torch.empty_strided(o.shape, o.stride(), dtype=o.dtype, device="meta")
            if o.requires_grad:
                m.requires_grad_(True)
            return m
        return o

    leaves, _ = tree_flatten(out)
    if not any(isinstance(o, torch.Tensor) for o in leaves):
        raise Refused("the op returned no tensor")
    return tree_map(back, out)
