# test_typing_validators.py — owns the model-free checks of strict-dataclass validation in the trace: typing forms as constants, typing.get_origin/get_args, dicts keyed by typing objects, try/except in inlined functions, and AttributeError from super().__getattribute__ of a missing attribute.
"""Each construct is compared with eager and with torch._dynamo (graph and op counts where torch._dynamo makes one
graph), and its guards are checked: changing what was validated recompiles or still gives eager's answer."""
import copy
import typing
from typing import Literal, Optional, Union

import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter
from versions import REFERENCE_PINNED
from graph_counts import eager_cdynamo_dynamo

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


def _one_graph_like_dynamo(fn, *args):
    """fn(*args) under cdynamo equals eager, in one graph with torch._dynamo's op count."""
    ref, got, cnt, dcnt = eager_cdynamo_dynamo(fn, *args)
    torch.testing.assert_close(got, ref)
    assert cnt.frame_count == 1
    if REFERENCE_PINNED:  # torch 2.11's torch._dynamo splits the strict dataclass's validated __setattr__ in 2
        assert dcnt.frame_count == 1 and cnt.op_count == dcnt.op_count


# --- typing.get_origin / get_args, typing forms as constants --------------------------------------------------

HINTS = {"a": Optional[int], "b": Union[int, str], "c": Literal["x", "y"], "d": typing.List[int], "e": int | None}


def origins(x):
    out = x.sin()  # an op before the construct: a graph break would split the graph
    for name in ("a", "b", "c", "d", "e"):
        hint = HINTS[name]
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if origin is Union:
            out = out + len(args)
        elif origin is Literal:
            out = out * len(args)
        elif origin is list:
            out = out - 1
        else:
            out = out + 100
    return out


def test_get_origin_get_args_fold():
    x = torch.randn(3)
    _one_graph_like_dynamo(origins, x)


def test_typing_form_guarded_by_identity():
    x = torch.randn(3)
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(origins)
    torch.testing.assert_close(opt(x), origins(x))
    saved = HINTS["b"]
    try:
        HINTS["b"] = typing.List[str]  # origin list: a different branch
        torch.testing.assert_close(opt(x), origins(x))
        assert cnt.frame_count == 2
    finally:
        HINTS["b"] = saved


# --- a dict keyed by typing objects ---------------------------------------------------------------------------

def _on_union(x, args):
    return x + len(args)


def _on_list(x, args):
    return x * 2


DISPATCH = {Union: _on_union, list: _on_list, Literal: _on_union}


def dispatch(x, hint):
    x = x.sin()
    f = DISPATCH.get(typing.get_origin(hint))
    if f is None:
        return x - 1
    return f(x, typing.get_args(hint))


@pytest.mark.parametrize("hint", [Optional[int], typing.List[int], int, Literal[1, 2, 3]])
def test_dict_keyed_by_typing_objects(hint):
    x = torch.randn(3)
    _one_graph_like_dynamo(dispatch, x, hint)


def test_typing_keyed_dict_guarded():
    x = torch.randn(3)
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(dispatch)
    torch.testing.assert_close(opt(x, Optional[int]), dispatch(x, Optional[int]))
    try:
        DISPATCH[Union] = _on_list  # a value of the table changed
        torch.testing.assert_close(opt(x, Optional[int]), dispatch(x, Optional[int]))
        assert cnt.frame_count == 2
        del DISPATCH[list]  # a key went away
        torch.testing.assert_close(opt(x, typing.List[int]), dispatch(x, typing.List[int]))
    finally:
        DISPATCH[Union] = _on_union
        DISPATCH[list] = _on_list


# --- try/except inside inlined functions ----------------------------------------------------------------------

def check_simple(name, value, expected):
    if not isinstance(value, expected):
        raise TypeError(f"Field '{name}' expected {expected.__name__}, got {type(value).__name__}")


def check_union(name, value, members):
    errors = []
    for t in members:
        try:
            check_simple(name, value, t)
            return len(errors)
        except TypeError as e:
            errors.append(str(e))
    raise TypeError(f"Field '{name}' doesn't match any type: {'; '.join(errors)}")


def union_user(x, value):
    x = x.sin()
    n = check_union("f", value, (str, float, int))
    return x + n


def test_try_except_type_error_in_inlined_function():
    x = torch.randn(3)
    _one_graph_like_dynamo(union_user, x, 3)


def test_try_except_all_members_fail_raises_as_eager():
    x = torch.randn(3)
    with pytest.raises(TypeError, match="doesn't match any type") as want:
        union_user(x, [1])
    with pytest.raises(TypeError, match="doesn't match any type") as got:
        cdynamo.optimize(CompileCounter())(union_user)(x, [1])
    assert str(got.value) == str(want.value)


def test_try_except_guard_on_validated_value():
    x = torch.randn(3)
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(union_user)
    torch.testing.assert_close(opt(x, 3), union_user(x, 3))  # int: two members failed first
    torch.testing.assert_close(opt(x, "s"), union_user(x, "s"))  # str: matched first
    torch.testing.assert_close(opt(x, 2.5), union_user(x, 2.5))
    assert cnt.frame_count == 3


def handler_mutates(x, log):
    def inner(v):
        log.append("before")
        if v < 0:
            raise ValueError("negative")
        log.append("after")
        return v

    try:
        r = inner(-1)
    except ValueError as e:
        log.append(str(e))
        r = 0
    return x + r


def test_mutations_before_a_handled_raise_happen():
    # The inlined callee is the trace's; handler_mutates is the traced frame, whose own try the trace does not
    # enter: it runs as Python, still correct.
    def outer(x, log):
        return handler_mutates(x, log) * 2

    x = torch.randn(3)
    want, got = [], []
    ref = outer(x, want)
    out = cdynamo.optimize(CompileCounter())(outer)(x, got)
    torch.testing.assert_close(out, ref)
    assert got == want == ["before", "negative"]


# --- a strict dataclass whose __setattr__ validates through typing --------------------------------------------

def _validate(name, value, hint):
    origin = typing.get_origin(hint)
    validator = VALIDATORS.get(origin)
    if hint is typing.Any:
        return
    if validator is not None:
        validator(name, value, typing.get_args(hint))
    elif isinstance(hint, type):
        check_simple(name, value, hint)
    else:
        raise TypeError(f"unsupported {hint}")


def _validate_union(name, value, args):
    for t in args:
        try:
            _validate(name, value, t)
            return
        except TypeError:
            pass
    raise TypeError(f"Field '{name}' matches no member of {args}")


def _validate_literal(name, value, args):
    if value not in args:
        raise TypeError(f"Field '{name}' expected one of {args}")


VALIDATORS = {Union: _validate_union, Literal: _validate_literal}


class _PlainConfig:
    def __setattr__(self, name, value):
        super().__setattr__(name, value)


_original_setattr = _PlainConfig.__setattr__


def _field_validator(name, hint):
    def validator(value):
        _validate(name, value, hint)

    return validator


class StrictConfig(_PlainConfig):
    """A class whose __setattr__ runs per-field type validators first (as huggingface_hub's @strict)."""

    __validators__ = {
        "hidden": [_field_validator("hidden", int)],
        "act": [_field_validator("act", Literal["relu", "gelu"])],
        "scale": [_field_validator("scale", Optional[float])],
    }

    def __init__(self, hidden=4, act="relu", scale=None):
        self.hidden = hidden
        self.act = act
        self.scale = scale

    def __setattr__(self, name, value):
        for validator in self.__validators__.get(name, []):
            try:
                validator(value)
            except (ValueError, TypeError) as e:
                raise ValueError(f"invalid {name}") from e
        _original_setattr(self, name, value)


CFG = StrictConfig()


def configure(x):
    x = x.sin()
    c = copy.deepcopy(CFG)  # as transformers' get_text_config: a copy, written through the validators
    c.hidden = CFG.hidden * 2
    c.act = CFG.act
    c.scale = CFG.scale
    y = x * c.hidden
    if c.scale is not None:
        y = y * c.scale
    return torch.relu(y) if c.act == "relu" else torch.nn.functional.gelu(y)


def test_strict_dataclass_setattr_validates():
    x = torch.randn(3)
    _one_graph_like_dynamo(configure, x)


def test_strict_dataclass_guard_on_config():
    x = torch.randn(3)
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(configure)
    torch.testing.assert_close(opt(x), configure(x))
    try:
        CFG.scale = 0.5  # Optional[float]: now the float member matches
        torch.testing.assert_close(opt(x), configure(x))
        object.__setattr__(CFG, "act", "tanh")  # bypasses validation: the traced validation must now fail
        with pytest.raises(ValueError, match="invalid act"):
            configure(x)
        with pytest.raises(ValueError, match="invalid act"):
            opt(x)
    finally:
        object.__setattr__(CFG, "act", "relu")
        object.__setattr__(CFG, "scale", None)


# --- a missing attribute read through super().__getattribute__ in a __getattribute__ override -----------------

class Base:
    pass


class MappedConfig(Base):
    attribute_map = {"width": "hidden"}

    def __init__(self):
        self.hidden = 8

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


MCFG = MappedConfig()


def read_missing(x):
    x = x.sin()
    cache = getattr(MCFG, "use_cache", True)
    if hasattr(MCFG, "missing"):
        x = x + 100
    if cache:
        x = x * MCFG.width
    return x + 1


def try_missing(x):
    x = x.sin()
    return x * lookup_or_default(MCFG)


def lookup_or_default(cfg):
    try:
        return mapped_attr(cfg, "use_cache")
    except AttributeError:
        return 3


def mapped_attr(cfg, name):
    return MappedConfig.__getattribute__(cfg, name)


@pytest.mark.parametrize("fn", [read_missing, try_missing])
def test_missing_attribute_through_getattribute_override(fn):
    x = torch.randn(3)
    _one_graph_like_dynamo(fn, x)


@pytest.mark.parametrize("fn", [read_missing, try_missing])
def test_missing_attribute_guarded(fn):
    x = torch.randn(3)
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(fn)
    torch.testing.assert_close(opt(x), fn(x))
    try:
        MCFG.use_cache = False  # on the instance: the absence was guarded
        torch.testing.assert_close(opt(x), fn(x))
        assert cnt.frame_count == 2
        del MCFG.use_cache
        MappedConfig.use_cache = False  # on the class (the entry reading use_cache == False may serve it)
        torch.testing.assert_close(opt(x), fn(x))
        n = cnt.frame_count
    finally:
        MCFG.__dict__.pop("use_cache", None)
        if "use_cache" in MappedConfig.__dict__:
            del MappedConfig.use_cache
    torch.testing.assert_close(opt(x), fn(x))
    assert cnt.frame_count == n  # the first entry again


# --- the caught exception object stays in the trace -------------------------------------------------------------

def _negative_raises(v):
    if v < 0:
        raise ValueError("negative")
    return v


def _caught(v):
    try:
        return _negative_raises(v)
    except ValueError as e:
        return e


def returns_caught(x):
    return x + 1, _caught(-1)


def test_caught_exception_is_new_per_call():
    # Python makes a new exception object per call: one made while tracing must not be handed back (shared).
    x = torch.randn(3)
    opt = cdynamo.optimize(CompileCounter())(returns_caught)
    a, b = opt(x), opt(x)
    torch.testing.assert_close(a[0], x + 1)
    assert type(a[1]) is ValueError and str(a[1]) == "negative"
    assert a[1] is not b[1]
