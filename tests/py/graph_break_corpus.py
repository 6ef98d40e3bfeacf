# graph_break_corpus.py — owns functions with graph breaks (data-dependent branches, prints, item(), numpy,
# loops, with/try blocks, nested breaks, early returns, exceptions) and their inputs.
import numpy as np
import torch

import cdynamo


def t(*shape):
    return torch.randn(*shape)


def bar(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def f1(x, y):
    if x.sum() < 0:
        return -y
    return y


def branch_both_sides(x):
    y = x.sin()
    if y.mean() > 0:
        z = y * 2
    else:
        z = y - 2
    return z.cos()


def branch_on_bool_tensor(x):
    if x.max() > 10:
        return x * 0
    return x + 1


def branch_on_tensor_truth(x):
    flag = (x > 0).any()
    if flag:
        return x.relu()
    return x.abs()


def print_in_middle(x):
    y = x * 2
    print("value shape", tuple(y.shape))
    return y + 1


def print_tensor(x):
    y = x + 1
    print(y)
    return y * 2


def item_call(x):
    s = x.sum().item()
    return x * s


def item_in_expression(x):
    return x * x.max().item() + 1


def tolist_call(x):
    values = x.tolist()
    return x + len(values)


def int_of_tensor(x):
    n = int(x.sum().abs()) + 1
    return x * n


def float_of_tensor(x):
    f = float(x.mean())
    return x - f


def numpy_roundtrip(x):
    y = x * 2
    z = torch.from_numpy(np.ascontiguousarray(y.numpy()) + 1)
    return z.sin()


def numpy_call_middle(x):
    a = x.cos()
    m = np.mean(a.numpy())
    return a * float(m)


def two_breaks(x):
    y = x + 1
    print("first")
    y = y * 2
    print("second")
    return y - 1


def break_then_branch(x):
    y = x * 3
    print("checking")
    if y.sum() > 0:
        return y
    return -y


def nested_branches(x, y):
    if x.sum() > 0:
        if y.sum() > 0:
            return x + y
        return x - y
    if y.sum() > 0:
        return y - x
    return -(x + y)


def early_return(x):
    if x.mean() > 0:
        return x
    y = x * 2
    return y + 1


def user_graph_break(x):
    y = x.sin()
    cdynamo.graph_break()
    return y.cos()


def loop_with_break(x):
    for i in range(3):
        x = x + i
        print("iter", i)
    return x


def loop_with_item(x):
    total = 0.0
    for i in range(3):
        total += x[i].item()
    return x * total


def while_data_dependent(x):
    n = 0
    while x.sum() > 0 and n < 5:
        x = x - 1
        n += 1
    return x, n


def try_block_break(x):
    try:
        y = x * 2
        print("in try")
    except ValueError:
        y = x
    return y + 1


def try_except_raises(x):
    try:
        raise ValueError("boom")
    except ValueError as e:
        msg = str(e)
    return x + len(msg)


def with_no_grad(x):
    with torch.no_grad():
        y = x * 2
    return y + 1


def with_no_grad_break(x):
    with torch.no_grad():
        y = x * 2
        print("inside no_grad")
    return y + 1


def exception_in_python_part(x):
    y = x + 1
    if y.sum() > -1000:
        raise RuntimeError("data said no")
    return y


def exception_after_print(x):
    print("about to fail")
    return x.view(7, 7)


def keyword_call_break(x):
    y = x + 1
    print("kw", end="!\n", sep="-")
    return y


def break_with_pending_call(x):
    return torch.add(x, x.sum().item())


def break_in_tuple_build(x):
    return (x + 1, x.mean().item(), x - 1)


def break_args_passthrough(x, y, z):
    a = x + y
    print("sum done")
    return a * z


def scalar_from_tensor_in_branch(x):
    if x.sum().item() > 0:
        return x + 1
    return x - 1


def dict_locals_after_break(x):
    scale = 3
    y = x * scale
    print("scale", scale)
    return y + scale


def unused_local_after_break(x):
    tmp = x * 100
    print("drop tmp")
    return x + 1


def reassign_arg_before_break(x):
    x = x + 1
    print("reassigned")
    return x * 2


def list_input_with_break(xs):
    a = xs[0] + xs[1]
    print("list")
    return a * xs[1]


def string_format_break(x):
    y = x.sum()
    s = "total=%.3f" % y.item()
    return x + len(s)


def global_counter_mutation(x):
    global COUNTER
    COUNTER += 1
    return x + COUNTER


COUNTER = 0


def isinstance_branch(x, y):
    if isinstance(y, int):
        return x + y
    return x * y


def len_of_list_arg(x, xs):
    return x * len(xs)


def chain_of_breaks_in_branch(x):
    y = x * 2
    if y.sum() > 0:
        print("pos")
        y = y + 1
    else:
        print("neg")
        y = y - 1
    return y


def grad_flows_through_break(x, w):
    h = x @ w
    print("hidden")
    return h.relu().sum()


def break_returns_python(x):
    s = x.sum().item()
    return s * 2


def returns_none_after_print(x):
    print(x.shape)


def nonlocal_closure_read(x):
    k = 5

    def inner(v):
        return v * k

    return inner(x)


def assert_on_tensor(x):
    assert x.numel() == 4
    return x + 1


def comprehension_break(x):
    parts = [x * i for i in range(3)]
    return parts[0] + parts[1] + parts[2]


def repr_of_tensor(x):
    s = repr(x)
    return x + (len(s) > 0)


def sum_builtin_over_tensor(x):
    return sum(x) + 1


def deep_stack_break(x):
    return x + (x * 2 + x.sum().item())


def conditional_expression_tensor(x):
    return x * 2 if x.sum() > 0 else x / 2


def break_before_inplace(x):
    y = x.clone()
    print("clone")
    y.add_(1)
    return y


def random_then_break(x):
    y = x + torch.randn(3)
    print("rand")
    return y * 2


CASES = [
    (bar, lambda: (t(10), t(10))),
    (f1, lambda: (t(5), t(5))),
    (branch_both_sides, lambda: (t(6),)),
    (branch_on_bool_tensor, lambda: (t(4),)),
    (branch_on_tensor_truth, lambda: (t(4),)),
    (print_in_middle, lambda: (t(2, 3),)),
    (print_tensor, lambda: (torch.arange(3.0),)),
    (item_call, lambda: (t(4),)),
    (item_in_expression, lambda: (t(4),)),
    (tolist_call, lambda: (t(3),)),
    (int_of_tensor, lambda: (t(3),)),
    (float_of_tensor, lambda: (t(3),)),
    (numpy_roundtrip, lambda: (t(3),)),
    (numpy_call_middle, lambda: (t(4),)),
    (two_breaks, lambda: (t(3),)),
    (break_then_branch, lambda: (t(3),)),
    (nested_branches, lambda: (t(3), t(3))),
    (early_return, lambda: (t(5),)),
    (user_graph_break, lambda: (t(3),)),
    (loop_with_break, lambda: (t(3),)),
    (loop_with_item, lambda: (t(3),)),
    (while_data_dependent, lambda: (t(3).abs() + 0.5,)),
    (try_block_break, lambda: (t(3),)),
    (try_except_raises, lambda: (t(3),)),
    (with_no_grad, lambda: (t(3).requires_grad_(),)),
    (with_no_grad_break, lambda: (t(3).requires_grad_(),)),
    (keyword_call_break, lambda: (t(3),)),
    (break_with_pending_call, lambda: (t(3),)),
    (break_in_tuple_build, lambda: (t(3),)),
    (break_args_passthrough, lambda: (t(3), t(3), t(3))),
    (scalar_from_tensor_in_branch, lambda: (t(3),)),
    (dict_locals_after_break, lambda: (t(3),)),
    (unused_local_after_break, lambda: (t(3),)),
    (reassign_arg_before_break, lambda: (t(3),)),
    (list_input_with_break, lambda: ([t(3), t(3)],)),
    (string_format_break, lambda: (t(3),)),
    (isinstance_branch, lambda: (t(3), 2)),
    (isinstance_branch, lambda: (t(3), 2.5)),
    (len_of_list_arg, lambda: (t(3), [1, 2, 3])),
    (chain_of_breaks_in_branch, lambda: (t(3),)),
    (grad_flows_through_break, lambda: (t(2, 3), t(3, 4).requires_grad_())),
    (break_returns_python, lambda: (t(3),)),
    (returns_none_after_print, lambda: (t(3),)),
    (nonlocal_closure_read, lambda: (t(3),)),
    (assert_on_tensor, lambda: (t(4),)),
    (comprehension_break, lambda: (t(3),)),
    (repr_of_tensor, lambda: (t(3),)),
    (sum_builtin_over_tensor, lambda: (t(3),)),
    (deep_stack_break, lambda: (t(3),)),
    (conditional_expression_tensor, lambda: (t(3),)),
    (break_before_inplace, lambda: (t(3),)),
    (bar, lambda: (t(10), -t(10).abs())),
    (f1, lambda: (-t(5).abs(), t(5))),
    (branch_both_sides, lambda: (-t(6).abs(),)),
    (nested_branches, lambda: (-t(3).abs(), t(3).abs())),
    (nested_branches, lambda: (t(3).abs(), -t(3).abs())),
    (nested_branches, lambda: (-t(3).abs(), -t(3).abs())),
    (early_return, lambda: (-t(5).abs(),)),
    (scalar_from_tensor_in_branch, lambda: (-t(3).abs(),)),
    (conditional_expression_tensor, lambda: (-t(3).abs(),)),
    (chain_of_breaks_in_branch, lambda: (-t(3).abs(),)),
]

# Functions that must raise the same exception compiled and eager.
RAISING = [
    (exception_in_python_part, lambda: (t(3),)),
    (exception_after_print, lambda: (t(3),)),
    (assert_on_tensor, lambda: (t(5),)),
]

# Functions whose effects on Python state must match (global counter).
STATEFUL = [(global_counter_mutation, lambda: (t(3),))]


def user_graph_break_dynamo(x):
    # The same function with torch._dynamo's own break marker, for graph-count comparison.
    y = x.sin()
    torch._dynamo.graph_break()
    return y.cos()
