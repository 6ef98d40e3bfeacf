# straight_line_corpus.py — owns the corpus of straight-line functions (with their inputs) that cdynamo must
# capture into exactly one graph and run with results equal to eager.
import math
import operator

import torch
import torch.nn.functional as F


def f32(*shape):
    return torch.randn(*shape)


def f64(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def i64(*shape):
    return torch.randint(-5, 5, shape)


def toy(x):
    a = torch.sin(x)
    b = torch.cos(x)
    return a * b


def add_mul(x, y):
    return (x + y) * (x - y)


def scalar_arith(x):
    return x * 2 + 1 - x / 3


def rsub_rdiv(x):
    return 1 - x, 2 / (x.abs() + 1)


def power(x):
    return x ** 2 + 2 ** x.clamp(-3, 3)


def floordiv_mod(x):
    return x // 2, x % 3


def int_ops(x):
    return (x & 3) | (x ^ 1), x << 1, x >> 1, ~x


def matmul(a, b):
    return a @ b


def unary(x):
    return -x, +x, abs(x)


def compare_ops(x, y):
    return x < y, x <= y, x == y, x != y, x > y, x >= y


def method_chain(x):
    return x.sin().cos().exp().sum()


def method_kwargs(x):
    return x.sum(dim=1, keepdim=True), x.mean(dim=0)


def torch_kwargs(x, y):
    return torch.add(x, y, alpha=2)


def functional(x):
    return F.relu(x) + F.gelu(x) + F.softmax(x, dim=-1)


def functional_kwargs(x):
    return F.leaky_relu(x, negative_slope=0.2)


def reshape_view(x):
    return x.view(-1), x.reshape(2, -1), x.t(), x.transpose(0, 1).contiguous()


def shape_const(x):
    n = x.shape[0]
    m = x.size(1)
    return x.reshape(n * m) + x.dim() + x.numel() + x.ndim


def size_unpack(x):
    a, b = x.shape
    return x.new_zeros(a, b) + x.sum() * a / b


def index_int(x):
    return x[0], x[-1]


def index_slice(x):
    return x[1:3], x[:, ::2], x[..., 0], x[None]


def index_tensor(x, idx):
    return x[idx]


def setitem_local(x):
    y = x.clone()
    y[0] = 0.0
    y[1:3] = y[1:3] * 2
    return y


def inplace_local(x):
    y = x.clone()
    y += 1
    y *= 2
    y.add_(3)
    return y


def inplace_input(x):
    x.mul_(2)
    return x + 1


def tuple_return(x):
    return x.sin(), x.cos()


def list_return(x):
    return [x + 1, x + 2]


def nested_return(x):
    return (x.sin(), [x.cos(), (x.tan(), 3)], "tag", None)


def return_input_too(x):
    return x, x.sin()


def dtype_cast(x):
    return x.to(torch.float64) + 1, x.float(), x.int(), x.type_as(torch.zeros(1, dtype=torch.float64))


def factory_ops(x):
    return x + torch.ones(3) + torch.zeros(3) + torch.full((3,), 2.0) + torch.arange(3)


def factory_dtype(x):
    return x + torch.ones(3, dtype=torch.float64)


def factory_like(x):
    return torch.zeros_like(x) + torch.ones_like(x) * 3 + torch.empty_like(x).fill_(1)


def cat_stack(x, y):
    return torch.cat([x, y], dim=0), torch.stack((x, y)), torch.cat((x, y), 1)


def split_chunk(x):
    a, b = x.chunk(2)
    c, d, e = torch.split(x, [1, 1, 2])
    return a + b, c + d + e.sum()


def max_dim(x):
    values, indices = torch.max(x, dim=1)
    return values * 2, indices


def where_clamp(x):
    return torch.where(x > 0, x, x * 0.1).clamp(min=-0.5, max=0.5)


def reductions(x):
    return x.sum(), x.prod(), x.amax(), x.amin(1), x.std(), x.var(0), x.norm()


def math_consts(x):
    return x * math.pi + math.sqrt(2.0) + math.e


def operator_module(x, y):
    return operator.add(x, y), operator.mul(x, 3)


def scalar_arg(x, s):
    return x * s + s


def float_arg(x, alpha):
    return x.pow(alpha)


def bool_arg(x, flag):
    if flag:
        return x + 1
    return x - 1


def none_arg(x, bias):
    if bias is None:
        return x * 2
    return x * 2 + bias


def str_arg(x, mode):
    if mode == "sum":
        return x.sum()
    return x.mean()


def kwonly(x, *, scale=2.0):
    return x * scale


def defaults(x, y=None, scale=3):
    return x * scale


def varargs(*xs):
    return xs[0] + xs[1]


def varkw(x, **kw):
    return x + 1


def constant_fold(x):
    k = 3 * 4 + 1
    s = (1, 2) + (3,)
    return x * k + len(s) + max(s) + min(2, 5) + abs(-2)


def fstring_const(x):
    name = f"layer{3}"
    return x + len(name)


def tuple_index_const(x):
    t = (1, 2, 3)
    return x * t[1] + t[-1]


def unpack_tuple_arg(pair):
    a, b = pair
    return a * b


def list_arg(xs):
    return xs[0] + xs[1] * xs[2]


def tensor_attrs(x):
    dt = x.dtype
    dev = x.device
    return torch.zeros(2, dtype=dt, device=dev) + x.T.sum()


def is_floating(x):
    if x.is_floating_point():
        return x * 0.5
    return x * 2


def conditional_on_shape(x):
    if x.shape[0] > 2:
        return x[:2]
    return x * 2


def ternary_const(x, n):
    return x * (1 if n > 0 else -1)


def is_none_check(x):
    y = None
    if y is None:
        return x + 1
    return x


def long_chain(x):
    for_ = x
    for_ = for_.sin() + 1
    for_ = for_.cos() * 2
    for_ = torch.tanh(for_) - 0.5
    for_ = torch.sigmoid(for_)
    for_ = F.relu(for_ - 0.5)
    return for_.sum()


def requires_grad_fn(x, w):
    return (x @ w).relu().sum()


def zero_dim(x):
    return x * 2 + x.sum()


def complex_slicing(x):
    return x[1:, :-1] + x[:-1, 1:]


def einsum(a, b):
    return torch.einsum("ij,jk->ik", a, b)


def linear_fn(x, w, b):
    return F.linear(x, w, b)


def softmax_logsm(x):
    return torch.softmax(x, -1) + torch.log_softmax(x, dim=-1)


def masked_fill(x):
    return x.masked_fill(x > 0, 0.0)


def expand_repeat(x):
    return x.unsqueeze(0).expand(3, -1), x.repeat(2), x.unsqueeze(-1).squeeze(-1)


def permute_flatten(x):
    return x.permute(2, 0, 1).flatten(1)


def gather_scatter(x, idx):
    return torch.gather(x, 1, idx)


def cumsum_sort(x):
    return torch.cumsum(x, 0), x.sort()[0]


def type_promotion(x, y):
    return x + y, x * 1.5, y / 2


def builtin_isinstance(x):
    if isinstance(x, torch.Tensor):
        return x + 1
    return x


def swap_assign(x, y):
    x, y = y, x
    return x - y


def multiple_assign(x):
    a = b = x.sin()
    return a + b


def chained_compare_const(x):
    n = 3
    if 0 < n < 5:
        return x + n
    return x


def bool_ops_const(x, a, b):
    if a and not b:
        return x + 1
    if a or b:
        return x + 2
    return x


def mixed_device_arg(x):
    return x.to("cpu") + 1


def global_tensor_use(x):
    return x + GLOBAL_T


GLOBAL_T = torch.ones(3)


def random_ops(x):
    return x + torch.randn(3) * 0 + torch.rand(3) * 0


def bmm_baddbmm(a, b):
    return torch.bmm(a, b), torch.baddbmm(torch.zeros(2, 3, 3), a, b)


def dropout_eval(x):
    return F.dropout(x, p=0.5, training=False)


def layer_norm_fn(x):
    return F.layer_norm(x, (4,))


def conv_fn(x, w):
    return F.conv2d(x, w, padding=1)


def no_grad_block(x):
    y = x * 2
    with torch.no_grad():
        z = y.sin() + 1
    return z * y, z.requires_grad, torch.is_grad_enabled()


def nested_grad_blocks(x):
    with torch.no_grad():
        a = x + 1
        with torch.enable_grad():
            b = a * x
        c = b.cos()
    return a, b, c, a.requires_grad, b.requires_grad


def grad_enabled_folds(x):
    if torch.is_grad_enabled():
        return x + 1
    return x - 1


# (function, args factory, expected op count or None)
CASES = [
    (toy, lambda: (f32(10),), 3),
    (add_mul, lambda: (f32(4), f32(4)), 3),
    (scalar_arith, lambda: (f32(5),), 4),
    (rsub_rdiv, lambda: (f32(5),), None),
    (power, lambda: (f32(5),), None),
    (floordiv_mod, lambda: (i64(5),), 2),
    (int_ops, lambda: (i64(6),), None),
    (matmul, lambda: (f32(3, 4), f32(4, 2)), 1),
    (unary, lambda: (f32(4),), 3),
    (compare_ops, lambda: (f32(4), f32(4)), 6),
    (method_chain, lambda: (f32(4),), 4),
    (method_kwargs, lambda: (f32(3, 4),), 2),
    (torch_kwargs, lambda: (f32(3), f32(3)), 1),
    (functional, lambda: (f32(2, 5),), None),
    (functional_kwargs, lambda: (f32(6),), 1),
    (reshape_view, lambda: (f32(4, 6),), None),
    (shape_const, lambda: (f32(3, 4),), None),
    (size_unpack, lambda: (f32(3, 4),), None),
    (index_int, lambda: (f32(4, 3),), 2),
    (index_slice, lambda: (f32(4, 6),), 4),
    (index_tensor, lambda: (f32(5, 2), torch.tensor([0, 2, 4])), 1),
    (setitem_local, lambda: (f32(5),), None),
    (inplace_local, lambda: (f32(5),), None),
    (tuple_return, lambda: (f32(3),), 2),
    (list_return, lambda: (f32(3),), 2),
    (nested_return, lambda: (f32(3),), 3),
    (return_input_too, lambda: (f32(3),), 1),
    (dtype_cast, lambda: (f32(3),), None),
    (factory_ops, lambda: (f32(3),), None),
    (factory_dtype, lambda: (f32(3),), 2),
    (factory_like, lambda: (f32(3),), None),
    (cat_stack, lambda: (f32(2, 3), f32(2, 3)), 3),
    (split_chunk, lambda: (f32(4, 2),), None),
    (max_dim, lambda: (f32(3, 4),), None),
    (where_clamp, lambda: (f32(8),), None),
    (reductions, lambda: (f32(3, 4),), 7),
    (math_consts, lambda: (f32(3),), None),
    (operator_module, lambda: (f32(3), f32(3)), 2),
    (scalar_arg, lambda: (f32(3), 3), 2),
    (float_arg, lambda: (f32(3).abs(), 0.5), 1),
    (bool_arg, lambda: (f32(3), True), 1),
    (none_arg, lambda: (f32(3), None), 1),
    (str_arg, lambda: (f32(3), "sum"), 1),
    (kwonly, lambda: (f32(3),), 1),
    (defaults, lambda: (f32(3),), 1),
    (varargs, lambda: (f32(3), f32(3)), 1),
    (varkw, lambda: (f32(3),), 1),
    (constant_fold, lambda: (f32(3),), None),
    (fstring_const, lambda: (f32(3),), 1),
    (tuple_index_const, lambda: (f32(3),), 2),
    (unpack_tuple_arg, lambda: ((f32(3), f32(3)),), 1),
    (list_arg, lambda: ([f32(3), f32(3), f32(3)],), 2),
    (tensor_attrs, lambda: (f32(2, 2),), None),
    (is_floating, lambda: (f32(3),), 1),
    (conditional_on_shape, lambda: (f32(4, 2),), 1),
    (ternary_const, lambda: (f32(3), 2), 1),
    (is_none_check, lambda: (f32(3),), 1),
    (long_chain, lambda: (f32(8),), None),
    (requires_grad_fn, lambda: (f32(2, 3), f32(3, 4).requires_grad_()), 3),
    (zero_dim, lambda: (torch.tensor(3.0),), 3),
    (complex_slicing, lambda: (f32(4, 4),), 3),
    (einsum, lambda: (f32(2, 3), f32(3, 4)), 1),
    (linear_fn, lambda: (f32(2, 3), f32(4, 3), f32(4)), 1),
    (softmax_logsm, lambda: (f32(2, 5),), 3),
    (masked_fill, lambda: (f32(6),), 2),
    (expand_repeat, lambda: (f32(3),), None),
    (permute_flatten, lambda: (f32(2, 3, 4),), 2),
    (gather_scatter, lambda: (f32(3, 4), torch.tensor([[0], [1], [3]])), 1),
    (type_promotion, lambda: (i64(3), f32(3)), 3),
    (builtin_isinstance, lambda: (f32(3),), 1),
    (swap_assign, lambda: (f32(3), f32(3)), 1),
    (multiple_assign, lambda: (f32(3),), 2),
    (chained_compare_const, lambda: (f32(3),), 1),
    (bool_ops_const, lambda: (f32(3), True, False), 1),
    (mixed_device_arg, lambda: (f32(3),), None),
    (global_tensor_use, lambda: (f32(3),), 1),
    (bmm_baddbmm, lambda: (f32(2, 3, 4), f32(2, 4, 3)), None),
    (dropout_eval, lambda: (f32(4),), 1),
    (layer_norm_fn, lambda: (f32(2, 4),), 1),
    (conv_fn, lambda: (f32(1, 2, 5, 5), f32(3, 2, 3, 3)), 1),
    (cumsum_sort, lambda: (f32(5),), None),
    (lambda x: x.sin() * 2, lambda: (f64(4),), 2),
    # Grad-mode switches are graph nodes (torch._C._set_grad_enabled), as in torch._dynamo.
    (no_grad_block, lambda: (f32(3).requires_grad_(),), 6),
    (nested_grad_blocks, lambda: (f32(3).requires_grad_(),), 7),
    (grad_enabled_folds, lambda: (f32(3),), 1),
]
