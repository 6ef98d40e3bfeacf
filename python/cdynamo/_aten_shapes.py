# _aten_shapes.py — owns the output metadata of aten ops with no C++ Meta kernel whose Python one imports sympy or torch._dynamo.
"""Why: torch's Python meta kernels for these ops call ``torch._check`` (which imports
``torch.fx.experimental.symbolic_shapes`` and sympy) or run through ``out_wrapper`` / ``_disable_dynamo``
wrappers (which import torch._dynamo and torch._inductor), and ATen has no C++ Meta kernel for them to run
instead: a conv or norm model's first trace would import about a second of modules. Each function here
computes what torch's own meta kernel computes (same sizes, strides, dtype; checked against it in
tests/py/test_cold_start.py), for static shapes, all-meta plain tensors and the common argument forms only;
anything else, and every argument torch's kernel would reject, gives NotImplemented: the caller then dispatches
as before and torch's kernel computes the result or raises its own error.

- convolution: ``calc_conv_nd_return_shape`` of torch/_meta_registrations.py (the output is contiguous there).
- native_batch_norm: torch's own decomposition (``native_batch_norm_helper``, what its meta kernel runs),
  without the wrappers around it; its aten calls come back to cdynamo's mode.
- var_mean.correction: the reduced shape, contiguous; var real, mean of the input's dtype.
- _adaptive_avg_pool2d: the output size in place of the last two, in the input's suggested memory format.
- index_select: the input's sizes with index.numel() at dim, contiguous (embedding's lookup).
- where.self_out (scaled_dot_product_attention's _safe_softmax writes its result back with it): `out` itself,
  when it already has the broadcast shape and the promoted dtype (torch's out_wrapper then neither resizes it nor
  refuses its dtype).

Outputs are made with torch.empty(..., device="meta") (ATen's C++ Meta kernel), not Tensor.new_empty, whose
meta kernel is a Python reference.
"""
import torch

aten = torch.ops.aten


def _plain_meta(*tensors):
    """Every tensor a plain strided meta tensor with int sizes and strides (None allowed)."""
    for t in tensors:
        if t is None:
            continue
        if type(t) is not torch.Tensor or t.device.type != "meta" or t.layout != torch.strided:
            return False
        if not all(type(s) is int for s in t.shape) or not all(type(s) is int for s in t.stride()):
            return False
    return True


def _empty(shape, dtype):
    """A contiguous meta tensor: what Tensor.new_empty of a meta tensor gives."""
    return torch.empty(shape, dtype=dtype, device="meta")


def _expand(v, n):
    """An int or a one-element list as n values; a longer list as is; None when malformed."""
    if type(v) is int:
        return [v] * n
    if not isinstance(v, (list, tuple)) or not all(type(x) is int for x in v):
        return None
    if len(v) == 1:
        return [v[0]] * n
    return list(v) if len(v) >= n else None


def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if not _plain_meta(input, weight, bias) or type(groups) is not int or type(transposed) is not bool:
        return NotImplemented
    dims, kernel = list(input.shape[2:]), list(weight.shape[2:])
    n = len(dims)
    if n == 0 or len(kernel) < n or weight.dim() < 2:
        return NotImplemented
    if transposed:
        out_channels = groups * weight.shape[1]
    else:
        out_channels = weight.shape[0]
        if weight.shape[1] * groups != input.shape[1]:
            return NotImplemented
    stride, padding, dilation = _expand(stride, n), _expand(padding, n), _expand(dilation, n)
    if stride is None or padding is None or dilation is None or 0 in stride:
        return NotImplemented
    out_pad = output_padding if transposed else None
    if out_pad:  # torch's test: an empty output_padding takes the forward formula
        out_pad = _expand(out_pad, n)
        if out_pad is None:
            return NotImplemented
    if not transposed and not all(dims[i] + 2 * padding[i] >= dilation[i] * (kernel[i] - 1) + 1 for i in range(n)):
        return NotImplemented
    shape = [input.shape[0], out_channels]
    for i in range(n):
        if out_pad:
            shape.append((dims[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (kernel[i] - 1) + out_pad[i] + 1)
        else:
            shape.append((dims[i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1)
    if not any(x > 0 for x in shape[2:]):  # torch's check on a device without cuDNN (meta)
        return NotImplemented
    if input.shape[1] == 0:
        shape[1] = 0
    return _empty(shape, input.dtype)


def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    if not _plain_meta(input, weight, bias, running_mean, running_var) or input.dim() < 2:
        return NotImplemented
    try:
        from torch._decomp.decompositions import native_batch_norm_helper
    except ImportError:
        return NotImplemented
    if not training and (running_mean is None or running_var is None):
        return NotImplemented  # the helper's own error: the usual dispatch raises it
    out, save_mean, save_rstd, _, _ = native_batch_norm_helper(
        input, weight, bias, running_mean, running_var, training, momentum, eps, False)
    return out, save_mean, save_rstd


def var_mean(input, dim=None, *, correction=None, keepdim=False):
    if not _plain_meta(input) or input.dim() == 0 or input.dtype.is_complex or not input.dtype.is_floating_point:
        return NotImplemented
    nd = input.dim()
    if dim is None:
        dims = set(range(nd))
    else:
        if not isinstance(dim, (list, tuple)) or not dim or not all(type(d) is int and -nd <= d < nd for d in dim):
            return NotImplemented
        dims = {d % nd for d in dim}
        if len(dims) != len(dim):
            return NotImplemented
    if keepdim:
        shape = [1 if i in dims else s for i, s in enumerate(input.shape)]
    else:
        shape = [s for i, s in enumerate(input.shape) if i not in dims]
    return _empty(shape, input.dtype), _empty(shape, input.dtype)


def _strides_like_channels_last(shape, strides):
    """torch._prims_common.are_strides_like_channels_last_or_false for int sizes and strides."""
    order = {4: (1, 3, 2, 0), 5: (1, 4, 3, 2, 0)}.get(len(shape))
    if order is None or strides[1] == 0:
        return False
    least = 0
    for d in order:
        if shape[d] == 0 or strides[d] < least or (d == 0 and least == strides[1]):
            return False
        least = strides[d] * shape[d]
    return True


def adaptive_avg_pool2d(input, output_size):
    if not _plain_meta(input) or input.dim() not in (3, 4):
        return NotImplemented
    if not isinstance(output_size, (list, tuple)) or len(output_size) != 2 or \
            not all(type(x) is int for x in output_size):
        return NotImplemented
    fmt = torch.channels_last if _strides_like_channels_last(input.shape, input.stride()) else torch.contiguous_format
    return torch.empty(tuple(input.shape[:-2]) + tuple(output_size), dtype=input.dtype, device="meta",
                       memory_format=fmt)


def index_select(input, dim, index):
    if not _plain_meta(input, index) or type(dim) is not int or input.dim() == 0 or index.dim() > 1:
        return NotImplemented
    if index.dtype not in (torch.int64, torch.int32) or not -input.dim() <= dim < input.dim():
        return NotImplemented
    shape = list(input.shape)
    shape[dim] = index.numel()
    return _empty(shape, input.dtype)


def _broadcast(*shapes):
    """The broadcast of int shapes, or None where they do not broadcast."""
    n = max(len(s) for s in shapes)
    out = []
    for i in range(n):
        sizes = {s[len(s) - n + i] for s in shapes if len(s) - n + i >= 0} - {1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return out


def where_out(condition, input, other, *, out):
    if not _plain_meta(condition, input, other, out) or condition.dtype != torch.bool:
        return NotImplemented
    shape = _broadcast(tuple(condition.shape), tuple(input.shape), tuple(other.shape))
    if shape is None or shape != list(out.shape) or torch.result_type(input, other) != out.dtype:
        return NotImplemented  # torch's kernel resizes `out` (with a warning) or raises: as before
    return out


# OpOverload -> (function, whether its own aten calls must come back to the mode)
SHAPES = {
    aten.convolution.default: (convolution, False),
    aten.native_batch_norm.default: (native_batch_norm, True),
    aten.var_mean.correction: (var_mean, False),
    aten._adaptive_avg_pool2d.default: (adaptive_avg_pool2d, False),
    aten.index_select.default: (index_select, False),
    aten.where.self_out: (where_out, False),
}
