# python_coverage_corpus.py — owns the "Python coverage" corpus: small model-style functions exercising
# inlining, containers, builtins/stdlib, user objects, globals, Python control flow and tensors in containers,
# with their input factories (CASES) and the module globals they read or write (reset_globals/snapshot).
import collections
import dataclasses
import functools
import math
import operator

import torch


def t(*shape):
    return torch.randn(*shape)


# ---------------------------------------------------------------------------------------------------------
# Module state used by the cases (reset before each run by the tests through reset_globals()).

SCALE = 2.0
OFFSET = 0.5
USE_RELU = True           # a config flag
LAYER_SIZES = (4, 8, 4)
NAMES = ["a", "b", "c"]
ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}

COUNTER = 0
STEP = 0.0
HISTORY = []
REGISTRY = {}
SEEN = set()
LAST_SHAPE = None


def _initial_globals():
    return {
        "COUNTER": 0,
        "STEP": 0.0,
        "HISTORY": [],
        "REGISTRY": {},
        "SEEN": set(),
        "LAST_SHAPE": None,
        "USE_RELU": True,
        "SCALE": 2.0,
    }


MUTABLE_GLOBALS = tuple(_initial_globals())


def reset_globals():
    """Restores every module global a case may write to its initial value."""
    globals().update(_initial_globals())


def snapshot_globals():
    """The current values of the globals the cases may write (a shallow copy of the containers)."""
    g = globals()
    out = {}
    for name in MUTABLE_GLOBALS:
        v = g[name]
        out[name] = type(v)(v) if isinstance(v, (list, dict, set)) else v
    return out


# ---------------------------------------------------------------------------------------------------------
# Helpers (inlined callees, classes).

def helper_add(a, b):
    return a + b


def helper_scale(x, factor=2.0, bias=0.0):
    return x * factor + bias


def helper_varargs(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out


def helper_kwargs(x, **kw):
    for k in sorted(kw):
        x = x * kw[k] if k.startswith("mul") else x + kw[k]
    return x


def helper_kwonly(x, *, alpha, beta=1.0):
    return x * alpha + beta


def helper_mixed(x, y=None, *rest, scale=1.0, **extra):
    out = x * scale
    if y is not None:
        out = out + y
    for r in rest:
        out = out - r
    if "shift" in extra:
        out = out + extra["shift"]
    return out


def helper_nested_outer(x):
    return helper_nested_inner(x) * 2


def helper_nested_inner(x):
    return helper_add(x, 1).sin()


def helper_returns_tuple(x):
    return x.sin(), x.cos()


def helper_recursive_sum(xs):
    if not xs:
        return 0
    return xs[0] + helper_recursive_sum(xs[1:])


def helper_recursive_pow(x, n):
    if n == 0:
        return x
    return helper_recursive_pow(x * 1.5, n - 1)


def factorial(n):
    return 1 if n <= 1 else n * factorial(n - 1)


def make_adder(k):
    def add(x):
        return x + k
    return add


def make_counter():
    count = 0

    def inc():
        nonlocal count
        count += 1
        return count
    return inc


def apply_twice(f, x):
    return f(f(x))


class Linearish:
    """A tiny model-like object: parameters as attributes, methods that compute."""
    bias_init = 0.1
    kind = "linear"

    def __init__(self, w, b):
        self.w = w
        self.b = b
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.w + self.b

    def scaled(self, x, s=2.0):
        return self.forward(x) * s

    @staticmethod
    def act(x):
        return torch.relu(x)

    @classmethod
    def default_bias(cls):
        return cls.bias_init * 2

    @property
    def norm(self):
        return self.w.abs().sum()


class Block(Linearish):
    kind = "block"

    def forward(self, x):
        return self.act(super().forward(x)) + 1


@dataclasses.dataclass
class Config:
    hidden: int = 4
    dropout: float = 0.0
    activation: str = "relu"
    use_bias: bool = True


@dataclasses.dataclass
class Pair:
    left: torch.Tensor
    right: torch.Tensor


Point = collections.namedtuple("Point", ["x", "y"])
Output = collections.namedtuple("Output", ["logits", "loss", "extra"])


class Holder:
    def __init__(self, value=1.0):
        self.value = value
        self.items = []


class Counter3:
    def __init__(self):
        self.n = 0

    def bump(self, k=1):
        self.n += k
        return self.n


# ---------------------------------------------------------------------------------------------------------
# Inlining: positional/keyword/default args, *args/**kwargs, keyword-only, closures and cells, nested
# functions, lambdas, functools.partial, recursion.

def inline_positional(x, y):
    return helper_add(x, y).relu()


def inline_keyword(x, y):
    return helper_add(b=y, a=x) * 2


def inline_default_args(x):
    return helper_scale(x) + helper_scale(x, 3.0)


def inline_default_override_kw(x):
    return helper_scale(x, bias=1.0) - helper_scale(x, factor=0.5, bias=-1.0)


def inline_star_args(x, y, z):
    return helper_varargs(x, y, z).tanh()


def inline_star_args_unpack(x, y):
    parts = [x, y, x * y]
    return helper_varargs(*parts)


def inline_star_kwargs(x):
    return helper_kwargs(x, mul_a=2.0, add_b=1.0)


def inline_star_kwargs_unpack(x):
    opts = {"mul_x": 3.0, "add_y": -1.0}
    return helper_kwargs(x, **opts)


def inline_kwonly(x):
    return helper_kwonly(x, alpha=0.5) + helper_kwonly(x, alpha=2.0, beta=0.0)


def inline_mixed_signature(x, y):
    return helper_mixed(x, y, x, y, scale=2.0, shift=1.0)


def inline_mixed_defaults_only(x):
    return helper_mixed(x)


def inline_nested_calls(x):
    return helper_nested_outer(x) + 1


def inline_returns_tuple(x):
    s, c = helper_returns_tuple(x)
    return s * c


def inline_closure_read(x):
    k = 3.0

    def inner(y):
        return y * k
    return inner(x) + k


def inline_closure_factory(x):
    add2 = make_adder(2.0)
    add_t = make_adder(x)
    return add_t(add2(x))


def inline_nonlocal_write(x):
    total = 0

    def acc(v):
        nonlocal total
        total += v
    acc(1)
    acc(2)
    return x * total


def inline_nonlocal_tensor(x):
    state = x

    def step():
        nonlocal state
        state = state.sin() + 1
    step()
    step()
    return state


def inline_counter_closure(x):
    inc = make_counter()
    inc()
    inc()
    return x + inc()


def inline_lambda(x):
    f = lambda v: v * 2 + 1  # noqa: E731
    return f(x).cos()


def inline_lambda_default(x):
    g = lambda v, s=3: v - s  # noqa: E731
    return g(x) + g(x, 1)


def inline_lambda_capture(x, y):
    h = lambda v: v * y  # noqa: E731
    return h(x) + h(y)


def inline_nested_def_two_levels(x):
    a = 2

    def outer(v):
        b = 3

        def inner(w):
            return w * a + b
        return inner(v) - a
    return outer(x)


def inline_higher_order(x):
    return apply_twice(lambda v: v * 2, x) + apply_twice(torch.sin, x)


def inline_partial(x):
    f = functools.partial(helper_scale, factor=0.25)
    return f(x) + f(x, bias=1.0)


def inline_partial_positional(x, y):
    f = functools.partial(helper_add, x)
    return f(y) * f(x)


def inline_partial_torch(x):
    f = functools.partial(torch.clamp, min=-0.5, max=0.5)
    return f(x) + 1


def inline_recursion_list(x):
    return x * helper_recursive_sum([1, 2, 3, 4])


def inline_recursion_tensor(x):
    return helper_recursive_pow(x, 3)


def inline_recursion_factorial(x):
    return x / factorial(5)


def inline_callable_arg(x, fn):
    return fn(x) + 1


def inline_map_lambda(x, y):
    outs = list(map(lambda v: v.relu(), [x, y]))
    return outs[0] + outs[1]


def inline_sorted_key_lambda(x):
    items = [(3, "c"), (1, "a"), (2, "b")]
    order = sorted(items, key=lambda p: p[0])
    return x * order[0][0] + order[-1][0]


# ---------------------------------------------------------------------------------------------------------
# Containers: tuples, lists, dicts, sets, namedtuples, comprehensions, iteration, mutation.

def tuple_index_slice(x):
    tup = (x, x * 2, x * 3, 4)
    a, b = tup[1:3]
    return a + b + tup[-1] + tup[0]


def tuple_concat_repeat(x):
    tup = (1, 2) + (3,)
    rep = (0.5,) * 3
    return x * sum(tup) + len(rep) + rep[2]


def tuple_in(x):
    tup = ("relu", "gelu")
    return x.relu() if "relu" in tup else x


def tuple_unpack_star(x):
    first, *middle, last = (1, 2, 3, 4, 5)
    return x * first + sum(middle) - last


def tuple_nested_unpack(x):
    (a, b), c = (x, 2), 3
    return a * b + c


def tuple_count_index(x):
    tup = (1, 2, 2, 3)
    return x * tup.count(2) + tup.index(3)


def list_literal_index(x, y):
    lst = [x, y, x + y]
    return lst[0] * lst[-1] + lst[1]


def list_slice(x):
    lst = [1.0, 2.0, 3.0, 4.0, 5.0]
    return x * sum(lst[1:4]) + lst[::2][-1] + lst[::-1][0]


def list_concat_repeat(x):
    lst = [1, 2] + [3]
    lst2 = [0] * 4
    return x * len(lst + lst2) + lst[-1]


def list_append(x):
    outs = []
    outs.append(x.sin())
    outs.append(x.cos())
    return outs[0] + outs[1]


def list_extend_insert(x):
    lst = [1]
    lst.extend([2, 3])
    lst.insert(0, 10)
    return x * lst[0] + lst[-1]


def list_pop_remove(x):
    lst = [1, 2, 3, 4]
    last = lst.pop()
    first = lst.pop(0)
    lst.remove(2)
    return x * last + first + lst[0]


def list_index_count(x):
    lst = ["a", "b", "a"]
    return x * lst.count("a") + lst.index("b")


def list_setitem(x):
    lst = [x, x, x]
    lst[1] = x * 2
    lst[-1] = lst[1] + 1
    return lst[0] + lst[1] + lst[2]


def list_delitem(x):
    lst = [1, 2, 3, 4]
    del lst[1]
    del lst[-1]
    return x * sum(lst)


def list_slice_assign(x):
    lst = [0, 0, 0, 0]
    lst[1:3] = [5, 6]
    return x * lst[1] + lst[2]


def list_sort_reverse(x):
    lst = [3, 1, 2]
    lst.sort()
    lst.reverse()
    return x * lst[0] - lst[-1]


def list_copy_clear(x):
    lst = [1, 2, 3]
    cpy = lst.copy()
    lst.clear()
    return x * len(cpy) + len(lst)


def list_in_not_in(x):
    lst = [1, 2, 3]
    a = 2 in lst
    b = 7 not in lst
    return x * 2 if a and b else x


def list_unpack_star(x, y):
    head, *tail = [x, y, x * y]
    return head + tail[0] * tail[1]


def list_mutate_arg_append(x, lst):
    lst.append(3)
    return x * len(lst)


def list_mutate_arg_tensor(x, lst):
    lst.append(x * 2)
    lst[0] = lst[0] + 1
    return lst[0] + lst[-1]


def list_mutate_arg_pop(x, lst):
    v = lst.pop()
    return x * v


def list_mutate_arg_extend_sort(x, lst):
    lst.extend([0, 9])
    lst.sort()
    return x + lst[0] + lst[-1]


def dict_literal_get(x):
    d = {"scale": 2.0, "shift": 1.0}
    return x * d["scale"] + d.get("shift", 0.0) + d.get("missing", 3.0)


def dict_keys_values_items(x):
    d = {"a": 1, "b": 2, "c": 3}
    ks = list(d.keys())
    vs = list(d.values())
    s = 0
    for k, v in d.items():
        s += v * len(k)
    return x * s + len(ks) + vs[-1]


def dict_update_setdefault(x):
    d = {"a": 1}
    d.update({"b": 2})
    d.update(c=3)
    v = d.setdefault("d", 4)
    w = d.setdefault("a", 100)
    return x * (v + w) + len(d)


def dict_setitem_delitem(x):
    d = {}
    d["x"] = x
    d["y"] = x * 2
    del d["x"]
    return d["y"] + len(d)


def dict_pop(x):
    d = {"a": 1, "b": 2}
    a = d.pop("a")
    c = d.pop("c", 5)
    return x * a + c + len(d)


def dict_in_len(x):
    d = {"relu": 1, "tanh": 2}
    return x * len(d) if "relu" in d and "gelu" not in d else x


def dict_of_tensors_build(x, y):
    d = {"x": x, "y": y}
    d["sum"] = d["x"] + d["y"]
    return d


def dict_iterate_keys(x):
    d = {"one": 1, "two": 2, "three": 3}
    out = x
    for k in d:
        out = out + d[k]
    return out


def dict_constructor(x):
    d = dict(a=1, b=2)
    e = dict([("c", 3)])
    f = dict(zip(["p", "q"], [4, 5]))
    return x * (d["b"] + e["c"] + f["q"])


def dict_mutate_arg(x, d):
    d["out"] = x + 1
    d["count"] = d.get("count", 0) + 1
    return d["out"] * 2


def dict_mutate_arg_pop_update(x, d):
    v = d.pop("a")
    d.update({"z": 26})
    return x * v


def dict_merge_operator(x):
    a = {"p": 1, "q": 2}
    b = {"q": 3}
    c = a | b
    return x * c["q"] + len(c)


def set_ops(x):
    s = {1, 2, 3}
    s.add(4)
    s.discard(1)
    u = s | {10}
    i = s & {2, 3, 99}
    return x * len(u) + len(i) + (3 in s)


def set_from_list(x):
    s = set([1, 1, 2, 3, 3])
    return x * len(s) + max(s)


def set_mutate_arg(x, s):
    s.add("seen")
    s.discard("gone")
    return x + len(s)


def frozenset_in(x):
    allowed = frozenset(["relu", "tanh"])
    return x.tanh() if "tanh" in allowed else x


def namedtuple_build_access(x, y):
    p = Point(x, y)
    return p.x * p.y + p[0]


def namedtuple_unpack(x):
    p = Point(1.0, 2.0)
    a, b = p
    return x * a + b


def namedtuple_replace(x):
    p = Point(1.0, 2.0)
    q = p._replace(y=5.0)
    return x * q.y + q.x


def namedtuple_return(x):
    return Output(logits=x.sin(), loss=x.sum(), extra=(x.cos(), 3))


def namedtuple_arg(p):
    return p.x * 2 + p.y


def list_comprehension(x):
    sq = [i * i for i in range(4)]
    return x * sum(sq)


def list_comprehension_tensors(x):
    outs = [x * i for i in range(3)]
    return outs[0] + outs[1] + outs[2]


def list_comprehension_filter(x):
    vals = [v for v in [1, -2, 3, -4] if v > 0]
    return x * len(vals) + vals[-1]


def dict_comprehension(x):
    d = {k: len(k) for k in ["a", "bb", "ccc"]}
    return x * d["ccc"] + d["a"]


def dict_comprehension_tensors(x):
    d = {f"p{i}": x + i for i in range(3)}
    return d


def set_comprehension(x):
    s = {v % 3 for v in range(10)}
    return x * len(s)


def nested_comprehension(x):
    grid = [[i * j for j in range(3)] for i in range(3)]
    return x * grid[2][2] + sum(sum(row) for row in grid)


def generator_expression_sum(x):
    return x * sum(i for i in range(5))


def iterate_list(x):
    out = x
    for s in [0.5, 1.5, 2.5]:
        out = out * s
    return out


def iterate_tuple_of_tensors(x, y):
    out = 0
    for v in (x, y, x * y):
        out = out + v.sum()
    return out


def iterate_range_step(x):
    out = x
    for i in range(10, 0, -3):
        out = out + i
    return out


def iterate_enumerate(x):
    out = x
    for i, s in enumerate([2.0, 3.0, 4.0]):
        out = out + i * s
    return out


def iterate_enumerate_start(x, y):
    out = x
    for i, v in enumerate([x, y], start=1):
        out = out + v * i
    return out


def iterate_zip(x):
    out = x
    for a, b in zip([1, 2, 3], ["a", "bb", "ccc"]):
        out = out + a * len(b)
    return out


def iterate_zip_tensors(xs, ws):
    total = 0
    for x, w in zip(xs, ws):
        total = total + x * w
    return total


def iterate_reversed(x):
    seq = []
    for v in reversed([1, 2, 3]):
        seq.append(v)
    return x * seq[0] - seq[-1]


def iterate_sorted(x):
    out = []
    for k in sorted({"b": 1, "a": 2, "c": 3}):
        out.append(k)
    return x * len("".join(out)) if out[0] == "a" else x


def iterate_dict_items_tensors(d):
    out = None
    for k, v in d.items():
        out = v if out is None else out + v
    return out


def sorted_reversed_builtins(x):
    a = sorted([3, 1, 2], reverse=True)
    b = list(reversed((1, 2, 3)))
    return x * a[0] + b[0]


def list_of_lists_nested(x):
    m = [[1, 2], [3, 4]]
    m[0].append(5)
    return x * (m[0][-1] + m[1][0])


def tuple_of_shape(x):
    n, d = x.shape
    shape = (d, n)
    return x.t().reshape(shape) * len(shape)


def list_mul_tensors(x):
    pieces = [x] * 3
    return torch.cat(pieces)


def containers_with_none(x):
    opts = [None, x, None]
    vals = [v for v in opts if v is not None]
    return vals[0] + 1


# ---------------------------------------------------------------------------------------------------------
# Builtins and stdlib on known values.

def builtin_len(x):
    return x * len([1, 2, 3]) + len("hello") + len({"a": 1})


def builtin_isinstance(x, n):
    if isinstance(n, int):
        return x + n
    return x - 1


def builtin_isinstance_tuple(x, v):
    if isinstance(v, (list, tuple)):
        return x * len(v)
    return x


def builtin_isinstance_tensor(x, y):
    if isinstance(y, torch.Tensor):
        return x + y
    return x * y


def builtin_issubclass(x):
    return x * 2 if issubclass(Block, Linearish) and not issubclass(int, str) else x


def builtin_type(x, v):
    if type(v) is float:
        return x * v
    return x + 1


def builtin_type_name(x):
    return x * len(type(x).__name__)


def builtin_getattr_hasattr(x, obj):
    scale = getattr(obj, "value", 1.0)
    missing = getattr(obj, "nope", 2.0)
    return x * scale + missing + (1.0 if hasattr(obj, "items") else 0.0)


def builtin_setattr(x, obj):
    setattr(obj, "value", 7.0)
    return x * obj.value


def builtin_callable(x):
    f = torch.sin
    return f(x) if callable(f) and not callable(3) else x


def builtin_min_max(x):
    a = min(3, 1, 2)
    b = max([4, 9, 2])
    c = max(0.5, 2)
    return x * a + b + c


def builtin_min_max_key(x):
    words = ["aaa", "b", "cc"]
    return x * len(max(words, key=len)) + len(min(words, key=len))


def builtin_abs(x):
    return x * abs(-3) + abs(-1.5)


def builtin_sum(x):
    return x * sum([1, 2, 3]) + sum((0.5, 0.25), 1.0)


def builtin_sum_tensors(x, y):
    return sum([x, y, x * y])


def builtin_any_all(x):
    flags = [True, False, True]
    if any(flags) and not all(flags):
        return x + 1
    return x - 1


def builtin_round(x):
    return x * round(2.567, 2) + round(3.5)


def builtin_int_float_bool(x):
    a = int("12") + int(3.9)
    b = float("1.5") + float(2)
    c = bool(0) + bool([1])
    return x * a + b + c


def builtin_str(x):
    s = str(42) + str(1.5)
    return x * len(s)


def builtin_divmod_pow(x):
    q, r = divmod(17, 5)
    return x * q + r + pow(2, 3)


def builtin_range_len(x):
    r = range(2, 12, 3)
    return x * len(r) + r[1]


def builtin_chr_ord(x):
    return x * (ord("c") - ord("a")) + len(chr(65))


def builtin_id_is(x):
    a = [1]
    b = a
    return x + 1 if a is b else x


def math_functions(x):
    return x * math.sqrt(16.0) + math.floor(2.7) + math.ceil(0.2) + math.log(math.e)


def math_constants(x):
    return x * math.pi + math.cos(0.0) + math.isfinite(1.0)


def math_prod_gcd(x):
    return x * math.prod([1, 2, 3]) + math.gcd(12, 8)


def math_from_shape(x):
    return x / math.sqrt(x.shape[-1])


def operator_functions(x):
    a = operator.add(2, 3)
    b = operator.mul(a, 2)
    c = operator.getitem([10, 20, 30], 1)
    return x * b + c + operator.neg(1)


def operator_on_tensors(x, y):
    return operator.add(operator.mul(x, y), operator.truediv(x, 2))


def operator_itemgetter(x):
    g = operator.itemgetter(1)
    return x * g((5, 6, 7))


def operator_attrgetter(x):
    p = Point(3.0, 4.0)
    return x * operator.attrgetter("y")(p)


def string_methods(x):
    name = "Layer_Norm"
    parts = name.lower().split("_")
    ok = name.startswith("Layer") and name.endswith("Norm")
    return x * len(parts) + len(name.replace("_", "")) + ok


def string_join_format(x):
    s = "-".join(["a", "b", "c"])
    t2 = "{}:{}".format("k", 3)
    return x * len(s) + len(t2)


def fstring_constant(x):
    i = 3
    name = f"layer_{i}_{1.5:.1f}"
    return x * len(name) if name == "layer_3_1.5" else x


def fstring_key_lookup(x, y):
    d = {"w0": x, "w1": y}
    out = 0
    for i in range(2):
        out = out + d[f"w{i}"]
    return out


def string_compare_branch(x, mode):
    if mode == "train":
        return x * 2
    elif mode.upper() == "EVAL":
        return x + 1
    return x


def string_strip_in(x):
    s = "  relu  ".strip()
    return x.relu() if s in "relu,tanh" else x


def builtin_print_fstring(x):
    print(f"scale={SCALE} names={len(NAMES)}")
    return x * SCALE


def builtin_enumerate_list(x):
    pairs = list(enumerate("ab"))
    return x * pairs[1][0] + len(pairs)


def builtin_zip_list(x):
    z = list(zip((1, 2), (3, 4)))
    return x * z[1][1]


def builtin_map_filter(x):
    m = list(map(abs, [-1, -2, 3]))
    f = list(filter(lambda v: v > 1, m))
    return x * sum(f)


# ---------------------------------------------------------------------------------------------------------
# Objects: attribute reads/writes, dataclasses, class attributes, methods, objects made inside.

def obj_attr_read(x, m):
    return x * m.w + m.b


def obj_method_call(x, m):
    return m.scaled(x) + m.scaled(x, s=0.5)


def obj_method_mutates(x, m):
    y = m.forward(x)
    return y + m.calls


def obj_class_attr(x, m):
    return x * Linearish.bias_init + len(m.kind) + m.default_bias()


def obj_staticmethod(x, m):
    return m.act(x) + Linearish.act(-x)


def obj_property(x, m):
    return x * m.norm


def obj_subclass_super(x, b):
    return b.forward(x) + len(b.kind)


def obj_attr_write(x, h):
    h.value = h.value * 2
    h.items.append(h.value)
    return x * h.value


def obj_new_attr_write(x, h):
    h.cache = x * 2
    return h.cache + 1


def obj_created_inside(x):
    h = Holder(3.0)
    h.value = h.value + 1
    return x * h.value


def obj_model_created_inside(x):
    m = Linearish(x, 1.0)
    return m.forward(x) * m.calls


def obj_counter_methods(x):
    c = Counter3()
    c.bump()
    c.bump(k=3)
    return x * c.n


def dataclass_read(x, cfg):
    out = x
    if cfg.use_bias:
        out = out + 1
    return out * cfg.hidden + cfg.dropout


def dataclass_created_inside(x):
    cfg = Config(hidden=8, activation="tanh")
    act = ACTIVATIONS[cfg.activation]
    return act(x) * cfg.hidden


def dataclass_replace(x):
    cfg = dataclasses.replace(Config(), hidden=2)
    return x * cfg.hidden


def dataclass_write(x, cfg):
    cfg.hidden = cfg.hidden + 1
    return x * cfg.hidden


def dataclass_tensor_fields(x, y):
    p = Pair(x, y)
    return p.left * p.right


def dataclass_fields_iter(x):
    cfg = Config()
    n = len([f.name for f in dataclasses.fields(cfg)])
    return x * n


def obj_bound_method_var(x, m):
    f = m.scaled
    return f(x, 3.0)


def obj_list_of_objects(x):
    layers = [Linearish(1.0, 0.0), Linearish(2.0, 1.0)]
    for layer in layers:
        x = layer.forward(x)
    return x


def obj_dict_attr(x, h):
    return x * h.__dict__["value"]


# ---------------------------------------------------------------------------------------------------------
# Globals: reads and writes.

def global_read_scale(x):
    return x * SCALE + OFFSET


def global_read_tuple(x):
    out = x
    for n in LAYER_SIZES:
        out = out + n
    return out


def global_read_dict_fn(x):
    return ACTIVATIONS["tanh"](x) + ACTIVATIONS["sigmoid"](x)


def global_config_flag(x):
    if USE_RELU:
        return x.relu()
    return x.tanh()


def global_write_counter(x):
    global COUNTER
    COUNTER = COUNTER + 1
    return x * COUNTER


def global_write_tensor(x):
    global LAST_SHAPE
    LAST_SHAPE = tuple(x.shape)
    return x + len(LAST_SHAPE)


def global_write_float(x):
    global STEP
    STEP += 0.5
    return x * STEP


def global_mutate_list(x):
    HISTORY.append(len(HISTORY))
    return x + len(HISTORY)


def global_mutate_dict(x):
    REGISTRY["x"] = 1
    REGISTRY.setdefault("calls", 0)
    REGISTRY["calls"] += 1
    return x * REGISTRY["calls"]


def global_mutate_set(x):
    SEEN.add("fn")
    return x * len(SEEN)


def global_read_names(x):
    return x * len("".join(NAMES))


# ---------------------------------------------------------------------------------------------------------
# Control flow on Python values known at trace time.

def control_if_elif_else(x, mode):
    if mode == 0:
        y = x + 1
    elif mode == 1:
        y = x * 2
    else:
        y = x - 3
    return y


def control_while_counter(x):
    i = 0
    while i < 4:
        x = x * 1.1
        i += 1
    return x


def control_while_break(x):
    n = 0
    while True:
        n += 1
        x = x + n
        if n >= 3:
            break
    return x


def control_for_continue(x):
    for i in range(6):
        if i % 2:
            continue
        x = x + i
    return x


def control_for_else(x):
    for v in [1, 2, 3]:
        if v == 10:
            break
    else:
        x = x * 2
    return x


def control_nested_loops(x):
    for i in range(2):
        for j in range(3):
            x = x + i * j
    return x


def control_ternary(x, flag):
    return x.sin() if flag else x.cos()


def control_none_check(x, bias=None):
    if bias is None:
        return x * 2
    return x + bias


def control_shape_branch(x):
    if x.shape[0] > 2:
        return x[:2]
    return x


def control_dim_loop(x):
    for d in range(x.dim()):
        x = x.sum(d, keepdim=True) + x
    return x


def control_bool_ops(x, a, b):
    if a and not b:
        return x + 1
    if a or b:
        return x + 2
    return x


def control_chained_compare(x, n):
    if 0 < n <= 5:
        return x * n
    return x


def control_early_return_loop(x):
    for i in range(10):
        if i == 3:
            return x * i
    return x


def control_match_like(x, kind):
    table = {"sin": torch.sin, "cos": torch.cos}
    if kind in table:
        return table[kind](x)
    return x


def control_requires_grad_branch(x):
    if x.requires_grad:
        return x * 2
    return x + 1


def control_dtype_branch(x):
    if x.dtype == torch.float32:
        return x.double()
    return x


# ---------------------------------------------------------------------------------------------------------
# Tensors in containers: lists/tuples/dicts of tensors as arguments, nested outputs.

def tensors_list_arg(xs):
    return torch.stack(xs).sum(0)


def tensors_tuple_arg(xs):
    a, b = xs
    return a @ b


def tensors_dict_arg(d):
    return d["q"] * d["k"] + d["v"]


def tensors_nested_arg(batch):
    (a, b), extra = batch["pair"], batch["extra"]
    return a + b + extra[0]


def tensors_nested_output(x):
    return (x.sin(), [x.cos(), (x.tan(), x + 1)], {"a": x * 2, "b": [x - 1]})


def tensors_list_output(x):
    return [x + i for i in range(3)]


def tensors_dict_output_mixed(x):
    return {"out": x * 2, "n": 3, "name": "model", "shape": tuple(x.shape)}


def tensors_tuple_output_with_none(x):
    return x + 1, None, (x * 2, None)


def tensors_len_of_list_arg(xs):
    return xs[0] * len(xs)


def tensors_list_slice_arg(xs):
    rest = xs[1:]
    return sum(rest) + xs[0]


def tensors_return_input_list(xs):
    xs[0] = xs[0] * 2
    return xs


def tensors_dict_of_lists(d):
    out = {}
    for k, vs in d.items():
        out[k] = torch.cat(vs)
    return out


def tensors_same_tensor_twice(xs):
    return xs[0] + xs[1]


def tensors_scalar_and_list(x, scales):
    return [x * s for s in scales]


def tensors_residual_blocks(x, weights):
    for w in weights:
        x = x + torch.tanh(x @ w)
    return x


# ---------------------------------------------------------------------------------------------------------
# Input factories and the CASES list.

def _lin():
    return Linearish(t(3), t(3))


def _block():
    return Block(t(3), t(3))


def _aliased_list():
    a = t(3)
    return ([a, a],)



# ---------------------------------------------------------------------------------------------------------
# More containers and builtins: frozenset constants, keyed sorting of tensors, generators of tensors,
# map over tensors, partials and namedtuples passed in, two-argument super, hasattr, list/tuple operators.

def frozenset_constant_iter(x):
    out = x
    for k in frozenset({1, 2, 3}):
        out = out + k
    return out * (2 in frozenset({1, 2}))


def sorted_tensors_by_key(x, y, z):
    pairs = [(3, x), (1, y), (2, z)]
    ordered = sorted(pairs, key=lambda p: p[0], reverse=True)
    return ordered[0][1] - ordered[-1][1] * 2


def max_tensor_by_key(xs):
    scores = {0: 0.5, 1: 2.0, 2: 1.0}
    best = max(range(len(xs)), key=lambda i: scores[i])
    return xs[best] * 3


def generator_of_tensors_sum(xs):
    return sum(v * i for i, v in enumerate(xs))


def any_all_generators(x, flags):
    if any(f > 1 for f in flags) and all(f >= 0 for f in flags):
        return x + 1
    return x - 1


def map_tensors_lambda(xs):
    return tuple(map(lambda v: v.relu() + 1, xs))


def filter_constants_then_use(x):
    keep = list(filter(lambda k: k % 2 == 0, range(7)))
    return x * len(keep) + sum(keep)


def partial_arg_call(x, f):
    return f(x) + f(x, scale=0.5)


def _scaled_add(x, bias, scale=1.0):
    return x * scale + bias


def namedtuple_from_frame_fields(p):
    q = p._replace(y=p.y * 2)
    return q.x + q.y, q._asdict()["x"], isinstance(q, Point)


def super_two_arg(x, m):
    return super(Block, m).forward(x) * 2


def hasattr_branch(x, obj):
    if hasattr(obj, "value"):
        x = x * obj.value
    if not hasattr(obj, "missing_attr"):
        x = x + 1
    return x


def list_concat_repeat_tensors(x, y):
    items = [x] + [y] * 2
    items += (x,)
    return sum(items), len(items)


def list_slice_assign_del(xs):
    ys = list(xs)
    ys[1:2] = [xs[0] * 2, xs[1] * 3]
    del ys[0]
    return ys


def dict_arg_mutated_and_returned(d, x):
    d["out"] = x * 2
    d.setdefault("calls", 0)
    d["calls"] = d["calls"] + 1
    return d

CASES = [
    # Inlining
    (inline_positional, lambda: (t(3), t(3))),
    (inline_keyword, lambda: (t(3), t(3))),
    (inline_default_args, lambda: (t(3),)),
    (inline_default_override_kw, lambda: (t(3),)),
    (inline_star_args, lambda: (t(3), t(3), t(3))),
    (inline_star_args_unpack, lambda: (t(3), t(3))),
    (inline_star_kwargs, lambda: (t(3),)),
    (inline_star_kwargs_unpack, lambda: (t(3),)),
    (inline_kwonly, lambda: (t(3),)),
    (inline_mixed_signature, lambda: (t(3), t(3))),
    (inline_mixed_defaults_only, lambda: (t(3),)),
    (inline_nested_calls, lambda: (t(3),)),
    (inline_returns_tuple, lambda: (t(3),)),
    (inline_closure_read, lambda: (t(3),)),
    (inline_closure_factory, lambda: (t(3),)),
    (inline_nonlocal_write, lambda: (t(3),)),
    (inline_nonlocal_tensor, lambda: (t(3),)),
    (inline_counter_closure, lambda: (t(3),)),
    (inline_lambda, lambda: (t(3),)),
    (inline_lambda_default, lambda: (t(3),)),
    (inline_lambda_capture, lambda: (t(3), t(3))),
    (inline_nested_def_two_levels, lambda: (t(3),)),
    (inline_higher_order, lambda: (t(3),)),
    (inline_partial, lambda: (t(3),)),
    (inline_partial_positional, lambda: (t(3), t(3))),
    (inline_partial_torch, lambda: (t(3),)),
    (inline_recursion_list, lambda: (t(3),)),
    (inline_recursion_tensor, lambda: (t(3),)),
    (inline_recursion_factorial, lambda: (t(3),)),
    (inline_callable_arg, lambda: (t(3), torch.relu)),
    (inline_map_lambda, lambda: (t(3), t(3))),
    (inline_sorted_key_lambda, lambda: (t(3),)),
    # Containers
    (tuple_index_slice, lambda: (t(3),)),
    (tuple_concat_repeat, lambda: (t(3),)),
    (tuple_in, lambda: (t(3),)),
    (tuple_unpack_star, lambda: (t(3),)),
    (tuple_nested_unpack, lambda: (t(3),)),
    (tuple_count_index, lambda: (t(3),)),
    (list_literal_index, lambda: (t(3), t(3))),
    (list_slice, lambda: (t(3),)),
    (list_concat_repeat, lambda: (t(3),)),
    (list_append, lambda: (t(3),)),
    (list_extend_insert, lambda: (t(3),)),
    (list_pop_remove, lambda: (t(3),)),
    (list_index_count, lambda: (t(3),)),
    (list_setitem, lambda: (t(3),)),
    (list_delitem, lambda: (t(3),)),
    (list_slice_assign, lambda: (t(3),)),
    (list_sort_reverse, lambda: (t(3),)),
    (list_copy_clear, lambda: (t(3),)),
    (list_in_not_in, lambda: (t(3),)),
    (list_unpack_star, lambda: (t(3), t(3))),
    (list_mutate_arg_append, lambda: (t(3), [1, 2])),
    (list_mutate_arg_tensor, lambda: (t(3), [t(3)])),
    (list_mutate_arg_pop, lambda: (t(3), [1, 2, 3])),
    (list_mutate_arg_extend_sort, lambda: (t(3), [5, 3, 4])),
    (dict_literal_get, lambda: (t(3),)),
    (dict_keys_values_items, lambda: (t(3),)),
    (dict_update_setdefault, lambda: (t(3),)),
    (dict_setitem_delitem, lambda: (t(3),)),
    (dict_pop, lambda: (t(3),)),
    (dict_in_len, lambda: (t(3),)),
    (dict_of_tensors_build, lambda: (t(3), t(3))),
    (dict_iterate_keys, lambda: (t(3),)),
    (dict_constructor, lambda: (t(3),)),
    (dict_mutate_arg, lambda: (t(3), {"count": 1})),
    (dict_mutate_arg_pop_update, lambda: (t(3), {"a": 2, "b": 3})),
    (dict_merge_operator, lambda: (t(3),)),
    (set_ops, lambda: (t(3),)),
    (set_from_list, lambda: (t(3),)),
    (set_mutate_arg, lambda: (t(3), {"gone", "kept"})),
    (frozenset_in, lambda: (t(3),)),
    (namedtuple_build_access, lambda: (t(3), t(3))),
    (namedtuple_unpack, lambda: (t(3),)),
    (namedtuple_replace, lambda: (t(3),)),
    (namedtuple_return, lambda: (t(3),)),
    (namedtuple_arg, lambda: (Point(t(3), t(3)),)),
    (list_comprehension, lambda: (t(3),)),
    (list_comprehension_tensors, lambda: (t(3),)),
    (list_comprehension_filter, lambda: (t(3),)),
    (dict_comprehension, lambda: (t(3),)),
    (dict_comprehension_tensors, lambda: (t(3),)),
    (set_comprehension, lambda: (t(3),)),
    (nested_comprehension, lambda: (t(3),)),
    (generator_expression_sum, lambda: (t(3),)),
    (iterate_list, lambda: (t(3),)),
    (iterate_tuple_of_tensors, lambda: (t(3), t(3))),
    (iterate_range_step, lambda: (t(3),)),
    (iterate_enumerate, lambda: (t(3),)),
    (iterate_enumerate_start, lambda: (t(3), t(3))),
    (iterate_zip, lambda: (t(3),)),
    (iterate_zip_tensors, lambda: ([t(3), t(3)], [t(3), t(3)])),
    (iterate_reversed, lambda: (t(3),)),
    (iterate_sorted, lambda: (t(3),)),
    (iterate_dict_items_tensors, lambda: ({"a": t(3), "b": t(3), "c": t(3)},)),
    (sorted_reversed_builtins, lambda: (t(3),)),
    (list_of_lists_nested, lambda: (t(3),)),
    (tuple_of_shape, lambda: (t(2, 3),)),
    (list_mul_tensors, lambda: (t(3),)),
    (containers_with_none, lambda: (t(3),)),
    # Builtins and stdlib
    (builtin_len, lambda: (t(3),)),
    (builtin_isinstance, lambda: (t(3), 2)),
    (builtin_isinstance_tuple, lambda: (t(3), [1, 2])),
    (builtin_isinstance_tensor, lambda: (t(3), t(3))),
    (builtin_issubclass, lambda: (t(3),)),
    (builtin_type, lambda: (t(3), 1.5)),
    (builtin_type_name, lambda: (t(3),)),
    (builtin_getattr_hasattr, lambda: (t(3), Holder(2.5))),
    (builtin_setattr, lambda: (t(3), Holder(1.0))),
    (builtin_callable, lambda: (t(3),)),
    (builtin_min_max, lambda: (t(3),)),
    (builtin_min_max_key, lambda: (t(3),)),
    (builtin_abs, lambda: (t(3),)),
    (builtin_sum, lambda: (t(3),)),
    (builtin_sum_tensors, lambda: (t(3), t(3))),
    (builtin_any_all, lambda: (t(3),)),
    (builtin_round, lambda: (t(3),)),
    (builtin_int_float_bool, lambda: (t(3),)),
    (builtin_str, lambda: (t(3),)),
    (builtin_divmod_pow, lambda: (t(3),)),
    (builtin_range_len, lambda: (t(3),)),
    (builtin_chr_ord, lambda: (t(3),)),
    (builtin_id_is, lambda: (t(3),)),
    (math_functions, lambda: (t(3),)),
    (math_constants, lambda: (t(3),)),
    (math_prod_gcd, lambda: (t(3),)),
    (math_from_shape, lambda: (t(2, 4),)),
    (operator_functions, lambda: (t(3),)),
    (operator_on_tensors, lambda: (t(3), t(3))),
    (operator_itemgetter, lambda: (t(3),)),
    (operator_attrgetter, lambda: (t(3),)),
    (string_methods, lambda: (t(3),)),
    (string_join_format, lambda: (t(3),)),
    (fstring_constant, lambda: (t(3),)),
    (fstring_key_lookup, lambda: (t(3), t(3))),
    (string_compare_branch, lambda: (t(3), "eval")),
    (string_strip_in, lambda: (t(3),)),
    (builtin_print_fstring, lambda: (t(3),)),
    (builtin_enumerate_list, lambda: (t(3),)),
    (builtin_zip_list, lambda: (t(3),)),
    (builtin_map_filter, lambda: (t(3),)),
    # Objects
    (obj_attr_read, lambda: (t(3), _lin())),
    (obj_method_call, lambda: (t(3), _lin())),
    (obj_method_mutates, lambda: (t(3), _lin())),
    (obj_class_attr, lambda: (t(3), _lin())),
    (obj_staticmethod, lambda: (t(3), _lin())),
    (obj_property, lambda: (t(3), _lin())),
    (obj_subclass_super, lambda: (t(3), _block())),
    (obj_attr_write, lambda: (t(3), Holder(1.5))),
    (obj_new_attr_write, lambda: (t(3), Holder())),
    (obj_created_inside, lambda: (t(3),)),
    (obj_model_created_inside, lambda: (t(3),)),
    (obj_counter_methods, lambda: (t(3),)),
    (dataclass_read, lambda: (t(3), Config(hidden=3, dropout=0.5))),
    (dataclass_created_inside, lambda: (t(3),)),
    (dataclass_replace, lambda: (t(3),)),
    (dataclass_write, lambda: (t(3), Config())),
    (dataclass_tensor_fields, lambda: (t(3), t(3))),
    (dataclass_fields_iter, lambda: (t(3),)),
    (obj_bound_method_var, lambda: (t(3), _lin())),
    (obj_list_of_objects, lambda: (t(3),)),
    (obj_dict_attr, lambda: (t(3), Holder(4.0))),
    # Globals
    (global_read_scale, lambda: (t(3),)),
    (global_read_tuple, lambda: (t(3),)),
    (global_read_dict_fn, lambda: (t(3),)),
    (global_config_flag, lambda: (t(3),)),
    (global_write_counter, lambda: (t(3),)),
    (global_write_tensor, lambda: (t(2, 3),)),
    (global_write_float, lambda: (t(3),)),
    (global_mutate_list, lambda: (t(3),)),
    (global_mutate_dict, lambda: (t(3),)),
    (global_mutate_set, lambda: (t(3),)),
    (global_read_names, lambda: (t(3),)),
    # Control flow on Python values
    (control_if_elif_else, lambda: (t(3), 1)),
    (control_while_counter, lambda: (t(3),)),
    (control_while_break, lambda: (t(3),)),
    (control_for_continue, lambda: (t(3),)),
    (control_for_else, lambda: (t(3),)),
    (control_nested_loops, lambda: (t(3),)),
    (control_ternary, lambda: (t(3), False)),
    (control_none_check, lambda: (t(3),)),
    (control_shape_branch, lambda: (t(4, 2),)),
    (control_dim_loop, lambda: (t(2, 3),)),
    (control_bool_ops, lambda: (t(3), True, False)),
    (control_chained_compare, lambda: (t(3), 4)),
    (control_early_return_loop, lambda: (t(3),)),
    (control_match_like, lambda: (t(3), "cos")),
    (control_requires_grad_branch, lambda: (t(3).requires_grad_(),)),
    (control_dtype_branch, lambda: (t(3),)),
    # Tensors in containers
    (tensors_list_arg, lambda: ([t(3), t(3), t(3)],)),
    (tensors_tuple_arg, lambda: ((t(2, 3), t(3, 2)),)),
    (tensors_dict_arg, lambda: ({"q": t(3), "k": t(3), "v": t(3)},)),
    (tensors_nested_arg, lambda: ({"pair": (t(3), t(3)), "extra": [t(3)]},)),
    (tensors_nested_output, lambda: (t(3),)),
    (tensors_list_output, lambda: (t(3),)),
    (tensors_dict_output_mixed, lambda: (t(2, 3),)),
    (tensors_tuple_output_with_none, lambda: (t(3),)),
    (tensors_len_of_list_arg, lambda: ([t(3), t(3)],)),
    (tensors_list_slice_arg, lambda: ([t(3), t(3), t(3)],)),
    (tensors_return_input_list, lambda: ([t(3), t(3)],)),
    (tensors_dict_of_lists, lambda: ({"a": [t(2), t(2)], "b": [t(3)]},)),
    (tensors_same_tensor_twice, _aliased_list),
    (tensors_scalar_and_list, lambda: (t(3), [0.5, 2.0])),
    (tensors_residual_blocks, lambda: (t(2, 3), [t(3, 3), t(3, 3)])),
    # More containers and builtins
    (frozenset_constant_iter, lambda: (t(3),)),
    (sorted_tensors_by_key, lambda: (t(3), t(3), t(3))),
    (max_tensor_by_key, lambda: ([t(3), t(3), t(3)],)),
    (generator_of_tensors_sum, lambda: ([t(3), t(3), t(3)],)),
    (any_all_generators, lambda: (t(3), [0, 2, 1])),
    (map_tensors_lambda, lambda: ([t(3), t(3)],)),
    (filter_constants_then_use, lambda: (t(3),)),
    (partial_arg_call, lambda: (t(3), functools.partial(_scaled_add, bias=1.0))),
    (namedtuple_from_frame_fields, lambda: (Point(t(3), t(3)),)),
    (super_two_arg, lambda: (t(3), Block(t(3), t(3)))),
    (hasattr_branch, lambda: (t(3), Holder(3.0))),
    (list_concat_repeat_tensors, lambda: (t(3), t(3))),
    (list_slice_assign_del, lambda: ([t(3), t(3), t(3)],)),
    (dict_arg_mutated_and_returned, lambda: ({"calls": 2}, t(3))),
]
