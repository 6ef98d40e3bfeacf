# test_guard_proofs.py — owns tests of what the guard tree proves without a walk (issue 29): an instance's
# `__dict__`, class values read through an instance, class attributes under a metaclass other than `type`, a class's
# `__mro__` and `__name__`, a property's fget, a function's `__defaults__` items, a code object's attributes, and the
# subtree below an ID_MATCH. Each case runs enough calls for the replay lists to be built, then changes exactly what
# the proof relies on, and must give eager's result (recompiling where torch._dynamo does).
import abc

import pytest
import torch

from guard_checks import compiled, same

CALLS = 4  # lists are built from the second passing check on; the later calls run them


pytestmark = pytest.mark.usefixtures("cdynamo_reset")


def settle(opt, fn, *args):
    for _ in range(CALLS):
        same(opt(*args), fn(*args))


# --- an instance's __dict__ and class values read through it (transformers' config pattern) ---------------------


class _Config:
    attribute_map = {"width": "hidden"}

    def __init__(self):
        self.hidden = 3
        self.flag = True

    def __getattribute__(self, key):
        if key != "attribute_map" and key in object.__getattribute__(self, "attribute_map"):
            key = object.__getattribute__(self, "attribute_map")[key]
        return object.__getattribute__(self, key)


def _use_config(x, cfg):
    return x * cfg.width if cfg.flag else x - 1


@pytest.mark.parametrize("change", ["dict_replaced", "dict_item", "map_in_place", "map_rebound", "map_shadowed"])
def test_config_dict_and_class_map_changes_are_seen(change):
    cfg = _Config()
    x = torch.randn(4)
    opt, cnt = compiled(_use_config)
    settle(opt, _use_config, x, cfg)
    assert cnt.frame_count == 1
    saved = dict(_Config.attribute_map)
    try:
        if change == "dict_replaced":
            object.__setattr__(cfg, "__dict__", {"hidden": 5, "flag": True})
        elif change == "dict_item":
            cfg.hidden = 7
        elif change == "map_in_place":
            cfg.other = 11
            _Config.attribute_map["width"] = "other"
        elif change == "map_rebound":
            cfg.other = 13
            _Config.attribute_map = {"width": "other"}
        else:
            cfg.other = 17
            object.__getattribute__(cfg, "__dict__")["attribute_map"] = {"width": "other"}
        for _ in range(2):
            same(opt(x, cfg), _use_config(x, cfg))
        assert cnt.frame_count == 2
    finally:
        _Config.attribute_map = saved


# --- class attributes under metaclasses ---------------------------------------------------------------------------


class _Registry(abc.ABC):
    scale = 2.0

    def pick(self, x):
        return x * self.scale


_REGISTRY = type("_ConcreteRegistry", (_Registry,), {})()


def _use_registry(x):
    return type(_REGISTRY).pick(_REGISTRY, x) + type(_REGISTRY).scale


def test_abc_class_method_replaced_is_seen():
    x = torch.randn(4)
    opt, cnt = compiled(_use_registry)
    settle(opt, _use_registry, x)
    old = _Registry.pick
    try:
        _Registry.pick = lambda self, x: x - self.scale
        same(opt(x), _use_registry(x))
        _Registry.scale = 5.0
        same(opt(x), _use_registry(x))
    finally:
        _Registry.pick = old
        _Registry.scale = 2.0
    assert cnt.frame_count == 3


class _Meta(type):
    def __getattr__(cls, name):  # runs only for a missing attribute
        return 100.0


class _WithMeta(metaclass=_Meta):
    value = 1.0


def _use_meta_class(x):
    return x + _WithMeta.value


def test_metaclass_getattr_answers_a_deleted_class_attribute():
    x = torch.randn(4)
    opt, cnt = compiled(_use_meta_class)
    settle(opt, _use_meta_class, x)
    try:
        del _WithMeta.value  # now the metaclass's __getattr__ answers
        same(opt(x), _use_meta_class(x))
    finally:
        _WithMeta.value = 1.0
    same(opt(x), _use_meta_class(x))


def test_metaclass_data_descriptor_added_after_lists_is_seen():
    x = torch.randn(4)
    opt, cnt = compiled(_use_meta_class)
    settle(opt, _use_meta_class, x)
    try:
        _Meta.value = property(lambda cls: -3.0)  # on the metaclass: the class's version does not change, and it wins
        same(opt(x), _use_meta_class(x))
    finally:
        del _Meta.value
    same(opt(x), _use_meta_class(x))


# --- __mro__, __name__, a property's fget ------------------------------------------------------------------------


class _BaseA(torch.nn.Module):
    def forward(self, x):
        return x + 1


class _BaseB(torch.nn.Module):
    def forward(self, x):
        return x * 3


class _Child(_BaseA):
    def forward(self, x):
        return super().forward(x) * 2


def test_bases_reassigned_after_lists_is_seen():
    m = _Child()
    x = torch.randn(4)
    opt, cnt = compiled(m)
    settle(opt, m, x)
    try:
        _Child.__bases__ = (_BaseB,)
        same(opt(x), m(x))
    finally:
        _Child.__bases__ = (_BaseA,)
    same(opt(x), m(x))


class _Named:
    pass


def _use_class_name(x, obj):
    return x + 1 if type(obj).__name__ == "_Named" else x - 1


def test_class_renamed_after_lists_is_seen():
    obj = _Named()
    x = torch.randn(4)
    opt, cnt = compiled(_use_class_name)
    settle(opt, _use_class_name, x, obj)
    try:
        # type's __name__ descriptor set directly: no class version change (type.__setattr__ would make one)
        type.__dict__["__name__"].__set__(_Named, "Renamed")
        same(opt(x, obj), _use_class_name(x, obj))
    finally:
        _Named.__name__ = "_Named"
    same(opt(x, obj), _use_class_name(x, obj))
    assert cnt.frame_count >= 2


class _WithProperty:
    def __init__(self):
        self.k = 2.0

    @property
    def factor(self):
        return self.k


def _use_property(x, obj):
    return x * obj.factor


def test_property_reinitialized_in_place_is_seen():
    obj = _WithProperty()
    x = torch.randn(4)
    opt, cnt = compiled(_use_property)
    settle(opt, _use_property, x, obj)
    prop = vars(_WithProperty)["factor"]
    old = prop.fget
    try:
        prop.__init__(lambda self: -self.k)  # the same property object, a new fget
        # expected from the new fget itself: CPython 3.12's specialized LOAD_ATTR keeps calling the fget it cached
        # for the class's version, so eager code already run (this test's _use_property) may still see the old one
        same(opt(x, obj), x * prop.fget(obj))
    finally:
        prop.__init__(old)
    same(opt(x, obj), _use_property(x, obj))
    assert cnt.frame_count >= 2


# --- __defaults__ items, code objects, the subtree below an ID_MATCH ---------------------------------------------


def _helper(x, scale=2.0, mode=None):
    return x * scale if mode is None else x - scale


def _use_defaults(x):
    return _helper(x)


@pytest.mark.parametrize("change", ["number", "object", "tuple_rebound"])
def test_function_defaults_changed_after_lists_are_seen(change):
    x = torch.randn(4)
    opt, cnt = compiled(_use_defaults)
    settle(opt, _use_defaults, x)
    old = _helper.__defaults__
    try:
        if change == "number":
            _helper.__defaults__ = (5.0, None)
        elif change == "object":
            _helper.__defaults__ = (2.0, "other")
        else:
            _helper.__defaults__ = tuple(old)  # an equal new tuple: no recompile needed, the same result
        same(opt(x), _use_defaults(x))
    finally:
        _helper.__defaults__ = old
    same(opt(x), _use_defaults(x))


def _make_wrapped(inner):
    def wrapper(x, **kwargs):
        return inner(x, **kwargs)
    return wrapper


def _double(x, *, k=1):
    return x * 2 * k


def _negate(x, *, k=1):
    return -x * k


def test_closure_cell_function_code_swapped_after_lists_is_seen():
    inner = _make_wrapped(_double)
    x = torch.randn(4)
    opt, cnt = compiled(inner)
    for _ in range(CALLS):
        same(opt(x, k=3), inner(x, k=3))
    old = _double.__code__
    try:
        _double.__code__ = _negate.__code__
        same(opt(x, k=3), inner(x, k=3))
    finally:
        _double.__code__ = old
    same(opt(x, k=3), inner(x, k=3))
    assert cnt.frame_count >= 2


def _make_rebindable():
    fn = _double

    def wrapper(x):
        return fn(x)

    def rebind(g):
        nonlocal fn
        fn = g
    return wrapper, rebind


def test_closure_cell_rebound_below_id_match_is_seen():
    wrapper, rebind = _make_rebindable()
    x = torch.randn(4)
    opt, cnt = compiled(wrapper)
    settle(opt, wrapper, x)
    rebind(_negate)
    same(opt(x), wrapper(x))
    rebind(_double)
    same(opt(x), wrapper(x))
    assert cnt.frame_count == 2


def test_dict_argument_changed_in_place_between_calls_is_seen():
    def f(x, d):
        return x * d["a"] if "b" not in d else x - d["a"]

    d = {"a": 2.0}
    x = torch.randn(4)
    opt, cnt = compiled(f)
    settle(opt, f, x, d)
    d["b"] = 1
    same(opt(x, d), f(x, d))
    del d["b"]
    d["a"] = 4.0
    same(opt(x, d), f(x, d))


def _make_top(inner):
    def top(x):
        return inner(x) + 1
    return top


def test_cell_of_a_function_proven_by_id_match_rebound_is_seen():
    # top's cell holds `inner` (an ID_MATCH proves it); inner's own cell is read below that proof
    inner, rebind = _make_rebindable()
    top = _make_top(inner)
    x = torch.randn(4)
    opt, cnt = compiled(top)
    settle(opt, top, x)
    rebind(_negate)
    same(opt(x), top(x))
    rebind(_double)
    same(opt(x), top(x))
    assert cnt.frame_count == 2


def _scaled(x, *, k=2.0):
    return x * k


def _use_kwdefaults(x):
    return _scaled(x)


def test_keyword_only_default_changed_in_place_is_seen():
    x = torch.randn(4)
    opt, cnt = compiled(_use_kwdefaults)
    settle(opt, _use_kwdefaults, x)
    try:
        _scaled.__kwdefaults__["k"] = 5.0
        same(opt(x), _use_kwdefaults(x))
        _scaled.__kwdefaults__ = {"k": 7.0}
        same(opt(x), _use_kwdefaults(x))
    finally:
        _scaled.__kwdefaults__ = {"k": 2.0}
    same(opt(x), _use_kwdefaults(x))
