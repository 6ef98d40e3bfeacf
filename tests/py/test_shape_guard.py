# test_shape_guard.py — owns tests of SHAPE_ENV guards from Python: lowering torch ShapeEnv expressions
# (cdynamo._shape_lower) checked against sympy on random integers, TENSOR_MATCH with dynamic dimensions, and
# the guards' failure reasons, through _C._testing.GuardSet (guards without a frame).
import random

import pytest
import sympy
import torch
import torch.nn.functional as F
from torch._dynamo.source import LocalSource
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
from torch.utils._sympy import functions as SF

from cdynamo._C import _testing
from cdynamo._shape_lower import lower


# --- guards of a real ShapeEnv ----------------------------------------------------------------------------

# Tensor programs whose size arithmetic makes a ShapeEnv record guards: (input shapes, body on fake tensors).
PROGRAMS = {
    "view_flat": ([(6, 4), (24,)], lambda x, y: x.view(-1) + y),
    "reshape": ([(6, 4)], lambda x: x.reshape(2, -1)),
    "slice_half": ([(6, 4)], lambda x: x[: x.shape[0] // 2]),
    "cat_view": ([(6, 4), (5, 4)], lambda x, y: torch.cat([x, y]).view(-1, 2)),
    "chunk": ([(9,)], lambda x: x.chunk(4)),
    "split": ([(11, 4)], lambda x: torch.split(x, 3)),
    "mod_branch": ([(10,)], lambda x: x.view(-1, 5) if x.shape[0] % 5 == 0 else x),
    "compare": ([(10, 3)], lambda x: x[:1] if x.shape[0] > x.shape[1] * 2 else x),
    "max_min": ([(10,), (7,)], lambda a, b: torch.empty(max(a.shape[0], b.shape[0]) - min(a.shape[0], b.shape[0]))),
    "pow": ([(4,)], lambda x: x[:1] if x.shape[0] ** 2 > 10 else x),
    "conv": ([(1, 3, 17, 19)], lambda x: F.conv2d(x, torch.empty(4, 3, 3, 3), stride=2, padding=1)),
    "pool": ([(1, 3, 17, 19)], lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True)),
    "strided_slice": ([(12, 5)], lambda x: x[1::3].contiguous().view(-1)),
    "expand": ([(3, 1)], lambda x: x.expand(3, x.shape[0] * 2)),
    "narrow": ([(13,)], lambda x: x.narrow(0, 2, x.shape[0] - 3)),
    "transpose_view": ([(8, 8)], lambda x: x.view(4, -1).t().reshape(-1)[: x.shape[1] * 3]),
    "and_ne": ([(8,), (9,)], lambda a, b: a if (a.shape[0] > 2 and a.shape[0] != b.shape[0]) else b),
}


def shape_env_guards(shapes, body):
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    fakes = [
        mode.from_tensor(
            torch.empty(s),
            static_shapes=False,
            source=LocalSource(f"x{i}"),
            symbolic_context=StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * len(s)),
        )
        for i, s in enumerate(shapes)
    ]
    with mode:
        body(*fakes)
    return [g.expr for g in env.guards], {s: int(v) for s, v in env.backed_var_to_val.items()}


@pytest.fixture(scope="module")
def env_exprs():
    """(program name, guard expression, the sizes it was traced with) of every guard PROGRAMS record."""
    out = []
    for name, (shapes, body) in PROGRAMS.items():
        exprs, hints = shape_env_guards(shapes, body)
        assert exprs, name
        out += [(name, e, hints) for e in exprs]
    return out


def sympy_truth(expr, values):
    """bool(expr) with the symbols replaced; None when sympy cannot decide; 'error' on ZeroDivisionError."""
    try:
        r = expr.xreplace({s: sympy.Integer(v) for s, v in values.items()})
    except ZeroDivisionError:
        return "error"
    except AssertionError:  # torch's Mod asserts non-negative literal operands
        return None
    if r in (sympy.true, sympy.false):
        return bool(r)
    return None


def guard_of(expr, symbols):
    """A GuardSet over locals named like `symbols`, one Int slot each, checking the lowering of `expr`."""
    names = [str(s) for s in symbols]
    program = lower(expr, {s: i for i, s in enumerate(symbols)})
    assert program is not None, f"not lowered: {expr} ({sympy.srepr(expr)})"
    g = _testing.GuardSet(names)
    g.add_shape_env([(n, "int", 0) for n in names], [program], None, [str(expr)])
    return g


def check_against_sympy(expr, rng, samples, lo, hi):
    symbols = sorted(expr.free_symbols, key=str)
    g = guard_of(expr, symbols)
    compared = 0
    for _ in range(samples):
        values = {s: rng.randint(lo, hi) for s in symbols}
        want = sympy_truth(expr, values)
        if want is None or (want == "error" and expr.has(sympy.And, sympy.Or)):
            continue  # undecided; or sympy divided by zero in an operand Python's and / or (and the guard) skip
        ok, why = g.check([values[s] for s in symbols])
        if "integer overflow" in why:  # sympy's ints are unbounded; the guard refuses past int64
            continue
        # sympy's division by zero fails the guard too
        assert ok == (want is True), (expr, values, want, why)
        compared += 1
    return compared


def test_every_shape_env_guard_is_lowered_and_agrees_with_sympy(env_exprs):
    rng = random.Random(14)
    compared = 0
    classes = set()
    for name, expr, hints in env_exprs:
        classes |= {type(n) for n in sympy.preorder_traversal(expr)}
        compared += check_against_sympy(expr, rng, 40, 0, 40)
        # and it holds for the sizes it was traced with
        symbols = sorted(expr.free_symbols, key=str)
        ok, why = guard_of(expr, symbols).check([hints[s] for s in symbols])
        assert ok, (name, expr, why)
    assert compared > 1000
    # what torch 2.13's ShapeEnv produced for these programs (a change here means new node kinds to look at)
    assert {SF.FloorDiv, SF.Mod, sympy.Eq, sympy.Ne, sympy.Mul, sympy.Add, sympy.Pow, sympy.Or} <= classes


# --- random expressions over every lowered node kind -------------------------------------------------------

S = sympy.symbols("a b c", integer=True)


def random_int_expr(rng, depth):
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(S) if rng.random() < 0.7 else sympy.Integer(rng.randint(-6, 6))
    sub = lambda: random_int_expr(rng, depth - 1)  # noqa: E731
    kind = rng.randrange(13)
    if kind == 0:
        return sympy.Add(sub(), sub())
    if kind == 1:
        return sympy.Mul(sub(), sub())
    if kind == 2:
        return SF.FloorDiv(sub(), sub())
    if kind == 3:
        return SF.CleanDiv(sub(), sub())
    if kind == 4:
        return SF.PythonMod(sub(), sub())
    if kind == 5:
        return sympy.Mod(sub(), sub())
    if kind == 6:
        return SF.Max(sub(), sub())
    if kind == 7:
        return SF.Min(sub(), sub(), sub())
    if kind == 8:
        return sympy.Abs(sub())
    if kind == 9:
        return sympy.Pow(sub(), sympy.Integer(rng.randint(0, 3)))
    if kind == 10:
        return SF.PowByNatural(sub(), sympy.Integer(rng.randint(0, 3)))
    if kind == 11:
        return -sub()
    return sympy.Max(sub(), sub())


def random_bool_expr(rng, depth):
    if depth > 0 and rng.random() < 0.3:
        sub = lambda: random_bool_expr(rng, depth - 1)  # noqa: E731
        kind = rng.randrange(3)
        if kind == 0:
            return sympy.And(sub(), sub())
        if kind == 1:
            return sympy.Or(sub(), sub())
        return sympy.Not(sub())
    rel = rng.choice([sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge])
    return rel(random_int_expr(rng, depth), random_int_expr(rng, depth))


def test_random_expressions_agree_with_sympy():
    rng = random.Random(2024)
    compared = built = 0
    while built < 250:
        try:
            expr = random_bool_expr(rng, 3)
        except (ZeroDivisionError, AssertionError, TypeError):
            continue  # sympy evaluated a literal division by zero (or a negative torch Mod) while building
        if expr in (sympy.true, sympy.false) or not expr.free_symbols:
            continue
        built += 1
        compared += check_against_sympy(expr, rng, 12, -12, 12)
    assert compared > 1500


def test_lowered_shapes():
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    slots = {s0: 0, s1: 1}
    assert lower(SF.FloorDiv(s0, 2) <= s0, slots) == ("le", ("floordiv", ("slot", 0), ("int", 2)), ("slot", 0))
    assert lower(sympy.Eq(SF.Mod(s0, 4), 0), slots) == ("eq", ("mod", ("slot", 0), ("int", 4)), ("int", 0))
    assert lower(sympy.Ne(s0, s1), slots) == ("ne", ("slot", 0), ("slot", 1))
    assert lower(s0**2 > 10, slots) == ("gt", ("pow", ("slot", 0), ("int", 2)), ("int", 10))
    assert lower(sympy.true, slots) == ("bool", True)
    assert lower(sympy.false, slots) == ("bool", False)
    assert lower(sympy.Not(sympy.Eq(s0, 3)), slots) in (("ne", ("slot", 0), ("int", 3)), ("not", ("eq", ("slot", 0), ("int", 3))))
    assert lower(SF.Identity(s1), slots) == ("slot", 1)
    # not lowered: the caller checks these in the fallback
    assert lower(sympy.Rational(1, 2) * s0 > 3, slots) is None
    assert lower(sympy.Float(1.5) * s0 > 3, slots) is None
    assert lower(sympy.Eq(s0 ** sympy.Integer(-1), s1, evaluate=False), slots) is None
    assert lower(sympy.Integer(2) ** s1 > s0, slots) is None
    assert lower(sympy.Eq(s0, 2**64), slots) is None
    assert lower(sympy.Eq(s0, sympy.Symbol("u0", integer=True)), slots) is None
    assert lower(sympy.Eq(sympy.Function("f")(s0), 1), slots) is None
    assert lower(sympy.Eq(SF.OpaqueUnaryFn_sqrt(s0), 2), slots) is None
    assert lower(s0 < sympy.oo, slots) in (None, ("bool", True))


# --- the guards themselves --------------------------------------------------------------------------------


def test_tensor_match_dynamic_dim_passes_any_size_static_dim_still_fails():
    ex = torch.randn(4, 3)
    g = _testing.GuardSet(["x"])
    g.add_tensor_match("x", ex, dynamic_sizes=0b01, dynamic_strides=0b00)
    assert g.describe() == ["local 'x' TENSOR_MATCH (dynamic sizes [0])"]
    for n in (1, 2, 4, 17, 1000):
        assert g.check([torch.randn(n, 3)]) == (True, "")
    ok, why = g.check([torch.randn(4, 5)])
    assert not ok
    assert why == "local 'x' TENSOR_MATCH (dynamic sizes [0]): size mismatch at index 1: expected [?, 3], actual [4, 5]"
    ok, why = g.check([torch.randn(4, 3, 1)])
    assert why.endswith("ndim mismatch: expected 2, actual 3")
    ok, why = g.check([torch.randn(4, 3, dtype=torch.float64)])
    assert why.endswith("dtype mismatch: expected Float, actual Double")
    ok, why = g.check([torch.randn(3, 8)[:, ::2][:, :3]])  # size [3, 3], stride [8, 2]: stride 0 is static
    assert why.endswith("stride mismatch at index 0: expected [3, 1], actual [8, 2]")

    static = _testing.GuardSet(["x"])
    static.add_tensor_match("x", ex)
    assert static.describe() == ["local 'x' TENSOR_MATCH"]
    assert static.check([ex]) == (True, "")
    assert static.check([torch.randn(5, 3)]) == (
        False,
        "local 'x' TENSOR_MATCH: size mismatch at index 0: expected [4, 3], actual [5, 3]",
    )

    # a source without a fast form (an attribute) goes through the full check only
    class Holder:
        pass

    held = _testing.GuardSet(["m"])
    held.add_tensor_match(("attr", "m", "w"), ex, dynamic_sizes=1)
    h = Holder()
    for n in (1, 4, 9):
        h.w = torch.randn(n, 3)
        assert held.check([h]) == (True, "")
    h.w = torch.randn(7, 2)
    assert held.check([h]) == (
        False, "local 'm'.w TENSOR_MATCH (dynamic sizes [0]): size mismatch at index 1: expected [?, 3], actual [7, 2]")

    both = _testing.GuardSet(["x"])
    both.add_tensor_match("x", ex, dynamic_sizes=0b11, dynamic_strides=0b01)
    assert both.check([torch.randn(9, 7)]) == (True, "")


def test_shape_env_failure_text_and_tensor_items():
    x = torch.randn(6, 4)
    g = _testing.GuardSet(["x", "xs"])
    g.add_tensor_match("x", x, dynamic_sizes=1)
    g.add_tensor_match(("item", "xs", 0), x, dynamic_sizes=1)
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    slots = [("x", "size", 0), (("item", "xs", 0), "size", 0)]
    exprs = [sympy.Le(2, s0), sympy.Eq(s0, s1)]
    g.add_shape_env(slots, [lower(e, {s0: 0, s1: 1}) for e in exprs], None,
                    ["2 <= L['x'].size()[0]", "Eq(L['x'].size()[0], L['xs'][0].size()[0])"])
    assert g.describe()[2:] == ["SHAPE_ENV: 2 <= L['x'].size()[0]", "SHAPE_ENV: Eq(L['x'].size()[0], L['xs'][0].size()[0])"]
    assert g.check([torch.randn(9, 4), (torch.randn(9, 4),)]) == (True, "")
    assert g.check([torch.randn(1, 4), [torch.randn(1, 4)]]) == (
        False, "SHAPE_ENV: 2 <= L['x'].size()[0] failed (L['x'].size()[0] = 1)")
    assert g.check([torch.randn(3, 4), [torch.randn(5, 4)]]) == (
        False, "SHAPE_ENV: Eq(L['x'].size()[0], L['xs'][0].size()[0]) failed (L['x'].size()[0] = 3, L['xs'][0].size()[0] = 5)")


def test_fallback_checks_what_was_not_lowered():
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    exprs = [sympy.Ge(s0, 2), sympy.Rational(1, 3) * s0 > sympy.Rational(5, 2)]
    programs = [lower(e, {s0: 0}) for e in exprs]
    assert programs[1] is None
    calls = []

    def fallback(values):
        calls.append(values)
        return bool(exprs[1].xreplace({s0: values[0]}))

    g = _testing.GuardSet(["n"])
    g.add_shape_env([("n", "int", 0)], [programs[0]], fallback, [str(exprs[0]), str(exprs[1])])
    assert g.check([8]) == (True, "")
    assert g.check([7]) == (False, "SHAPE_ENV: s0/3 > 5/2 failed (L['n'] = 7)")
    assert g.check([1]) == (False, "SHAPE_ENV: s0 >= 2 failed (L['n'] = 1)")
    assert calls and all(type(v) is list and type(v[0]) is int for v in calls)


def test_malformed_programs_raise_value_error():
    g = _testing.GuardSet(["n"])
    slots = [("n", "int", 0)]
    for program, words in [
        (("frobnicate", ("slot", 0)), "unknown operator 'frobnicate'"),
        (("eq", ("slot", 0)), "'eq' takes 2 operands, got 1"),
        (("slot", 3), "slot index out of range"),
        (("int", 1.5), "constant must be an int"),
        ([1, 2], "expected a tuple"),
    ]:
        with pytest.raises(ValueError, match="SHAPE_ENV program 0") as info:
            g.add_shape_env(slots, [program], None, ["t"])
        assert words in str(info.value)
    with pytest.raises(ValueError, match="fallback must be None or callable"):
        g.add_shape_env(slots, [], 3, [])
    with pytest.raises(ValueError, match="one text per program"):
        g.add_shape_env(slots, [("bool", True)], None, [])
    assert len(g) == 0
