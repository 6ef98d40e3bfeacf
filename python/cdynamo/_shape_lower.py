# _shape_lower.py — owns lowering torch ShapeEnv (sympy) guard expressions into SHAPE_ENV programs (csrc/guards/shape_guard.h).
"""``lower(expr, slot_of)`` turns one sympy expression into the nested-tuple program the C++ SHAPE_ENV guard
compiles, or returns None when some node has no lowering (the caller then checks that expression in the
guard's Python fallback). Nodes lowered: Integer, Symbol (``slot_of[symbol]`` -> ``("slot", i)``), Add, Mul,
Pow with a literal non-negative integer exponent, torch's PowByNatural, FloorDiv (and CleanDiv), Mod,
PythonMod and sympy's Mod (Python semantics: the C++ side's ``mod`` takes the divisor's sign), Max, Min
(torch's and sympy's), Abs, Identity, the six relations, And, Or, Not, and sympy.true / false. Rationals,
floats, infinities, integers outside int64, unknown functions and symbols missing from ``slot_of`` give
None."""

import sympy
from torch.utils._sympy import functions as _F

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# Operators whose operands are lowered in order, by exact node class or a base class (checked in order).
_NARY = (
    (sympy.Add, "add"),
    (sympy.Mul, "mul"),
    (_F.FloorDiv, "floordiv"),  # CleanDiv is a FloorDiv
    (_F.PythonMod, "mod"),
    (_F.Mod, "mod"),  # non-negative operands: equal to Python's %
    (sympy.Mod, "mod"),
    (_F.PowByNatural, "pow"),
    (_F.Max, "max"),
    (_F.Min, "min"),
    (sympy.Max, "max"),
    (sympy.Min, "min"),
    (sympy.Abs, "abs"),
    (sympy.Eq, "eq"),
    (sympy.Ne, "ne"),
    (sympy.StrictLessThan, "lt"),
    (sympy.LessThan, "le"),
    (sympy.StrictGreaterThan, "gt"),
    (sympy.GreaterThan, "ge"),
    (sympy.And, "and"),
    (sympy.Or, "or"),
    (sympy.Not, "not"),
)


class _NotLowered(Exception):
    pass


def lower(expr, slot_of):
    """The SHAPE_ENV program of `expr` (a sympy expression over the symbols of `slot_of`, a dict symbol ->
    slot index), or None if it cannot be lowered."""
    try:
        return _lower(expr, slot_of)
    except (_NotLowered, RecursionError):
        return None


def _int(v):
    v = int(v)
    if not _INT64_MIN <= v <= _INT64_MAX:
        raise _NotLowered
    return ("int", v)


def _lower(e, slot_of):
    if e is sympy.true or e is True:
        return ("bool", True)
    if e is sympy.false or e is False:
        return ("bool", False)
    if isinstance(e, int):
        return _int(e)
    if isinstance(e, sympy.Integer):
        return _int(e)
    if isinstance(e, sympy.Symbol):
        if e not in slot_of:
            raise _NotLowered
        return ("slot", slot_of[e])
    if isinstance(e, _F.Identity):
        return _lower(e.args[0], slot_of)
    if isinstance(e, sympy.Pow):
        base, exp = e.args
        if not isinstance(exp, sympy.Integer) or exp < 0:
            raise _NotLowered
        return ("pow", _lower(base, slot_of), _int(exp))
    for cls, op in _NARY:
        if isinstance(e, cls):
            return (op,) + tuple(_lower(a, slot_of) for a in e.args)
    raise _NotLowered
