# test_guard_tree.py — owns tests of the guard tree (issue 29): one guard failure per accessor kind and per
# nn.Module mutation, each compared with eager and counted (a memoized subtree must still see every change), and
# the tree printer.
import io

import pytest
import torch

import cdynamo
from cdynamo import _C, _logging
from guard_checks import compiled, same
from versions import REFERENCE_PINNED


pytestmark = pytest.mark.usefixtures("cdynamo_reset")


def run_twice(opt, fn, *args):
    """Two calls (the second checks the guards with memos filled), each equal to eager."""
    for _ in range(2):
        same(opt(*args), fn(*args))


def dynamo_frames(fn, calls):
    """torch._dynamo's compile count for the same calls (calls: list of zero-argument callables that call it)."""
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter as DC
    torch._dynamo.reset()
    c = DC()
    opt = torch.compile(fn, backend=c, dynamic=False)
    try:
        for call in calls:
            call(opt)
    finally:
        torch._dynamo.reset()
    return c.frame_count


# --- accessor kinds ----------------------------------------------------------------------------------------------


def test_frame_local_tensor():
    def f(x):
        return x * 2

    opt, cnt = compiled(f)
    run_twice(opt, f, torch.randn(3))
    run_twice(opt, f, torch.randn(3, dtype=torch.float64))
    assert cnt.frame_count == 2


class Holder:
    def __init__(self, k):
        self.k = k


def test_attribute_of_object():
    def f(x, h):
        return x * h.k

    h = Holder(2)
    opt, cnt = compiled(f)
    x = torch.randn(3)
    run_twice(opt, f, x, h)
    h.k = 3  # the instance dict changes: the memoized attribute is read again
    run_twice(opt, f, x, h)
    assert cnt.frame_count == 2
    h.k = 2
    run_twice(opt, f, x, h)
    assert cnt.frame_count == 2
    assert cnt.frame_count == dynamo_frames(f, [lambda o: o(x, Holder(2)), lambda o: o(x, Holder(3))])


def test_attribute_shadowed_by_class_descriptor():
    # The class changes (a data descriptor appears): the instance dict does not, the attribute read does.
    class H:
        def __init__(self):
            self.k = 2

    def f(x, h):
        return x * h.k

    h = H()
    opt, cnt = compiled(f)
    x = torch.randn(3)
    run_twice(opt, f, x, h)
    H.k = property(lambda self: 5)
    run_twice(opt, f, x, h)
    assert cnt.frame_count == 2


def test_type_of_object_changes():
    class A:
        def __init__(self):
            self.k = 2

        def scale(self):
            return self.k

    class B(A):
        def scale(self):
            return self.k + 10

    def f(x, a):
        return x * a.scale()

    a = A()
    opt, cnt = compiled(f)
    x = torch.randn(3)
    run_twice(opt, f, x, a)
    a.__class__ = B  # same instance dict, another class
    run_twice(opt, f, x, a)
    assert cnt.frame_count == 2


PRETEND = [Holder]


class Proxy:
    """Reports another class through __getattribute__ (as mocks and proxies do)."""

    def __getattribute__(self, name):
        if name == "__class__":
            return PRETEND[0]
        return object.__getattribute__(self, name)


def test_class_reported_by_getattribute_override():
    def f(x, p):
        if p.__class__ is Holder:
            return x + 1
        return x - 1

    p = Proxy()
    opt, cnt = compiled(f)
    x = torch.randn(3)
    run_twice(opt, f, x, p)
    PRETEND[0] = Proxy  # no dict of p or of its class changes
    try:
        run_twice(opt, f, x, p)
    finally:
        PRETEND[0] = Holder
    run_twice(opt, f, x, p)


class Remapped:
    """A class with a Python __getattribute__ that remaps names, as transformers' configs do."""

    attribute_map = {"width": "hidden"}

    def __init__(self):
        self.hidden = 3
        self.flag = True

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


def remapped_fn(x, cfg):
    y = x * cfg.width
    if cfg.flag:
        y = y + 1
    if hasattr(cfg, "extra"):
        y = y + cfg.extra
    return y + getattr(cfg, "bias", 0)


def getattribute_calls(call):
    """How many times a Python __getattribute__ runs during call()."""
    import sys
    n = [0]

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "__getattribute__":
            n[0] += 1
    sys.setprofile(prof)
    try:
        call()
    finally:
        sys.setprofile(None)
    return n[0]


def test_getattribute_override_is_traced_and_its_guards_run_no_python():
    cfg = Remapped()
    opt, cnt = compiled(remapped_fn)
    x = torch.randn(3)
    run_twice(opt, remapped_fn, x, cfg)
    assert cnt.frame_count == 1
    # Eager runs the override for every read; the cached call checks what it read (instance dict items, the class's
    # attribute_map contents) without calling it.
    assert getattribute_calls(lambda: remapped_fn(x, cfg)) >= 4
    assert getattribute_calls(lambda: opt(x, cfg)) == 0
    assert cnt.frame_count == 1


@pytest.mark.parametrize("change", ["instance_value", "attribute_added", "default_added", "map_changed",
                                    "override_replaced"])
def test_getattribute_override_reads_are_guarded(change):
    cfg = Remapped()
    opt, cnt = compiled(remapped_fn)
    x = torch.randn(3)
    run_twice(opt, remapped_fn, x, cfg)
    saved_map, saved_ga = dict(Remapped.attribute_map), Remapped.__dict__["__getattribute__"]
    try:
        if change == "instance_value":
            cfg.hidden = 5
        elif change == "attribute_added":
            cfg.extra = 10
        elif change == "default_added":
            cfg.bias = 100
        elif change == "map_changed":
            Remapped.attribute_map["width"] = "other"
            cfg.other = 7
        else:
            def plain(self, key):
                if key == "width":
                    return 11
                return object.__getattribute__(self, key)
            Remapped.__getattribute__ = plain
        run_twice(opt, remapped_fn, x, cfg)
        assert cnt.frame_count == 2
    finally:
        Remapped.attribute_map.clear()
        Remapped.attribute_map.update(saved_map)
        Remapped.__getattribute__ = saved_ga


def test_type_of_object_whose_getattribute_reports_another_class():
    # type(p) is the real class whatever p.__class__ reports: guarded as such, the guard passes on the next call.
    def f(x, p):
        if type(p) is Proxy:
            return x + 1
        return x - 1

    p = Proxy()
    opt, cnt = compiled(f)
    x = torch.randn(3)
    for _ in range(3):
        same(opt(x, p), f(x, p))
    assert cnt.frame_count == 1
    assert dynamo_frames(f, [lambda o: o(x, p)] * 3) == 1


def test_dict_item_of_argument():
    def f(x, cfg):
        return x * cfg["scale"]

    cfg = {"scale": 2}
    opt, cnt = compiled(f)
    x = torch.randn(3)
    run_twice(opt, f, x, cfg)
    cfg["scale"] = 4
    run_twice(opt, f, x, cfg)
    assert cnt.frame_count == 2


def test_dict_key_added_to_argument():
    def f(x, cfg):
        return x * len(cfg)

    cfg = {"a": 1}
    opt, cnt = compiled(f)
    x = torch.randn(3)
    run_twice(opt, f, x, cfg)
    cfg["b"] = 2
    run_twice(opt, f, x, cfg)
    assert cnt.frame_count == 2


class _Plain:
    pass


@pytest.mark.parametrize("owner", [_Plain, torch.nn.Module])
def test_item_of_instance_dict_written_by_attribute_store(owner):
    # An object's materialized __dict__ passed as an argument; the object's attribute stores change its items.
    # On 3.13 that dict shares the object's inline values and such a store leaves its version unchanged: a memo
    # keyed on the version handed the graph the old tensor (and read a freed one once the old was dropped).
    def f(x, d):
        return x + d["t"]

    obj = owner()
    obj.t = torch.ones(2)
    opt, cnt = compiled(f)
    x = torch.zeros(1)
    d = obj.__dict__
    run_twice(opt, f, x, d)
    kept = obj.t
    obj.t = torch.full((2,), 5.0)  # same metadata: the guards pass, the new value must be the graph's input
    assert torch.equal(opt(x, d), f(x, d))
    obj.t = torch.full((3,), 7.0)  # other shape: recompiles
    run_twice(opt, f, x, d)
    del kept
    obj.t = torch.full((3,), 9.0)  # the previous value is freed
    assert torch.equal(opt(x, d), f(x, d))
    assert cnt.frame_count == 2


@pytest.mark.parametrize("kind", [list, tuple])
def test_getitem_of_sequence(kind):
    def f(xs):
        return xs[0] + xs[1]

    opt, cnt = compiled(f)
    a, b = torch.randn(3), torch.randn(3)
    run_twice(opt, f, kind([a, b]))
    run_twice(opt, f, kind([a, b.double()]))
    assert cnt.frame_count == 2


def test_list_item_replaced_in_place():
    def f(xs):
        return xs[0] * 2

    xs = [torch.randn(3)]
    opt, cnt = compiled(f)
    run_twice(opt, f, xs)
    xs[0] = torch.randn(4)
    run_twice(opt, f, xs)
    assert cnt.frame_count == 2


SCALE = 2


def global_fn(x):
    return x * SCALE


def test_global_changes():
    global SCALE
    opt, cnt = compiled(global_fn)
    x = torch.randn(3)
    try:
        run_twice(opt, global_fn, x)
        SCALE = 3
        run_twice(opt, global_fn, x)
        assert cnt.frame_count == 2
    finally:
        SCALE = 2


def builtin_fn(x):
    return x * abs(-2)


def test_builtin_shadowed_by_global():
    g = builtin_fn.__globals__
    opt, cnt = compiled(builtin_fn)
    x = torch.randn(3)
    run_twice(opt, builtin_fn, x)
    g["abs"] = lambda v: 7
    try:
        run_twice(opt, builtin_fn, x)
    finally:
        del g["abs"]
    run_twice(opt, builtin_fn, x)
    assert cnt.frame_count == 2


def test_closure_cell_changes():
    k = 2

    def f(x):
        return x * k

    opt, cnt = compiled(f)
    x = torch.randn(3)
    run_twice(opt, f, x)
    k = 5  # noqa: F841 - read through f's cell
    run_twice(opt, f, x)
    assert cnt.frame_count == 2


def make_scaler(k):
    def scale(x):
        return x * k
    return scale


SCALER = make_scaler(2)


def calls_scaler(x):
    return SCALER(x)


def test_cell_of_inlined_function_changes():
    # global 'SCALER'.__closure__[0].cell_contents: a function's closure (proven with the function), a cell's
    # contents (read on every check).
    opt, cnt = compiled(calls_scaler)
    x = torch.randn(3)
    run_twice(opt, calls_scaler, x)
    SCALER.__closure__[0].cell_contents = 3
    try:
        run_twice(opt, calls_scaler, x)
        assert cnt.frame_count == 2
    finally:
        SCALER.__closure__[0].cell_contents = 2
    run_twice(opt, calls_scaler, x)
    assert cnt.frame_count == 2


def test_code_of_inlined_function_changes():
    def other(x):
        return x - 1

    old = SCALER.__code__
    opt, cnt = compiled(calls_scaler)
    x = torch.randn(3)
    run_twice(opt, calls_scaler, x)
    SCALER.__code__ = make_scaler(5).__code__  # same free variables, the cell still holds 2
    try:
        run_twice(opt, calls_scaler, x)
    finally:
        SCALER.__code__ = old
    run_twice(opt, calls_scaler, x)
    assert cnt.frame_count <= 3


# --- nn.Module mutations -----------------------------------------------------------------------------------------


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.ln = torch.nn.LayerNorm(4)
        self.register_buffer("buf", torch.ones(4))

    def forward(self, x):
        y = self.ln(self.fc(x)) + self.buf
        if self.training:
            y = y * 2
        if hasattr(self, "extra"):
            y = y + self.extra
        return x + y


class Net(torch.nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.layers = torch.nn.ModuleList(Block() for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def module_case():
    torch.manual_seed(0)
    m = Net()
    opt, cnt = compiled(m)
    x = torch.randn(2, 4)
    with torch.no_grad():
        run_twice(opt, m, x)
    return m, opt, cnt, x


def check(m, opt, x):
    with torch.no_grad():
        run_twice(opt, m, x)


def test_module_unchanged_compiles_once():
    m, opt, cnt, x = module_case()
    for _ in range(3):
        check(m, opt, x)
    assert cnt.frame_count == 1


def test_module_parameter_replaced():
    m, opt, cnt, x = module_case()
    m.layers[1].fc.weight = torch.nn.Parameter(torch.randn(4, 4))
    check(m, opt, x)
    m.layers[2].fc.bias = torch.nn.Parameter(torch.randn(4, dtype=torch.float64).float()[:4])
    check(m, opt, x)
    assert cnt.frame_count <= 3


def test_module_parameter_replaced_by_other_shape():
    m, opt, cnt, x = module_case()
    m.layers[1].fc.bias = torch.nn.Parameter(torch.randn(1))  # broadcasts: a new shape
    check(m, opt, x)
    assert cnt.frame_count == 2


def test_module_requires_grad_flipped():
    # No dict changes: the parameter's own metadata does.
    m, opt, cnt, x = module_case()
    m.layers[2].fc.weight.requires_grad_(False)
    check(m, opt, x)  # the no-grad entry, its memos warm: TENSOR_MATCH still runs
    assert cnt.frame_count == 2
    for _ in range(3):
        out = opt(x)
        same(out, m(x))
        assert out.requires_grad
    assert cnt.frame_count == 3
    for p in m.parameters():
        p.requires_grad_(False)
    out = opt(x)
    same(out, m(x))
    assert not out.requires_grad
    assert cnt.frame_count == 4


def test_module_hook_added():
    m, opt, cnt, x = module_case()
    h = m.layers[1].ln.register_forward_hook(lambda mod, inp, out: out * 3)
    check(m, opt, x)
    n = cnt.frame_count
    assert n >= 2
    h.remove()
    check(m, opt, x)
    pre = m.layers[0].register_forward_pre_hook(lambda mod, inp: (inp[0] * 0.5,))
    check(m, opt, x)
    pre.remove()
    check(m, opt, x)


def test_module_submodule_swapped():
    m, opt, cnt, x = module_case()
    torch.manual_seed(1)
    m.layers[1] = Block()
    check(m, opt, x)
    m.layers[2].ln = torch.nn.Identity()
    check(m, opt, x)
    assert cnt.frame_count >= 2


def test_module_training_toggled():
    m, opt, cnt, x = module_case()
    m.eval()
    check(m, opt, x)
    assert cnt.frame_count == 2
    m.layers[1].train()
    check(m, opt, x)
    assert cnt.frame_count == 3


def test_module_buffer_resized_in_place():
    m, opt, cnt, x = module_case()
    m.layers[1].buf.resize_(1)  # the same tensor object: only its sizes change
    check(m, opt, x)
    assert cnt.frame_count == 2


def test_module_parameter_set_in_place():
    m, opt, cnt, x = module_case()
    with torch.no_grad():
        m.layers[0].fc.weight.set_(torch.randn(4, 4).t())  # the same object, other strides
    check(m, opt, x)
    assert cnt.frame_count == 2


def test_module_parameters_start_sharing_storage():
    # .data assignment: the same parameter objects, in the same dicts, now view one storage.
    m, opt, cnt, x = module_case()
    m.layers[1].fc.weight.data = m.layers[0].fc.weight.data
    check(m, opt, x)
    assert cnt.frame_count == 2  # NO_STORAGE_ALIASING over the parameters fails: compiled again
    with torch.no_grad():
        m.layers[0].fc.weight.add_(1.0)  # both layers see it, as in eager
    check(m, opt, x)


def test_module_dict_key_added():
    m, opt, cnt, x = module_case()
    m.layers[1].extra = 5.0  # a new instance-dict key read through hasattr
    check(m, opt, x)
    assert cnt.frame_count == 2
    m.layers.append(Block())  # a new _modules key
    check(m, opt, x)
    assert cnt.frame_count == 3
    del m.layers[1].extra
    check(m, opt, x)


def test_module_buffer_named_like_a_missing_attribute_after_lists():
    # NO_HASATTR('extra') on a module is proven by its instance dict and its _parameters/_buffers/_modules dicts.
    m, opt, cnt, x = module_case()
    for _ in range(2):
        check(m, opt, x)
    m.layers[1].register_buffer("extra", torch.full((4,), 0.5))
    check(m, opt, x)
    assert cnt.frame_count == 2
    m.layers[2].add_module("extra", torch.nn.Identity())
    with torch.no_grad():
        with pytest.raises(TypeError):
            m(x)  # eager: y + Identity() fails
        with pytest.raises(TypeError):
            opt(x)


def test_module_class_swapped():
    class Twice(Block):
        def forward(self, x):
            return super().forward(x) * 2

    m, opt, cnt, x = module_case()
    m.layers[1].__class__ = Twice
    check(m, opt, x)
    assert cnt.frame_count == 2


def test_deep_stack_mutation_found_at_depth():
    torch.manual_seed(0)
    m = Net(32)
    opt, cnt = compiled(m)
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(3):
            run_twice(opt, m, x)
        m.layers[31].ln.bias.requires_grad_(False)
        run_twice(opt, m, x)
        m.layers[17].fc.weight = torch.nn.Parameter(torch.randn(4, 4, dtype=torch.float64))
        with pytest.raises(RuntimeError):
            m(x)
        with pytest.raises(RuntimeError):
            opt(x)
    assert cnt.frame_count >= 2


# --- replay lists: a passing subtree's checks flattened (guard_replay.cpp); warm calls build them first ---------


class _Relu(torch.nn.Module):  # reads no attribute of its own: nothing below its node in the tree
    def forward(self, x):
        return x.relu()


class _Tanh(torch.nn.Module):
    def forward(self, x):
        return x.tanh()


class _Opts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.act = _Relu()
        self.opts = {}

    def forward(self, x):
        y = self.act(self.fc(x))
        if "scale" in self.opts:
            y = y * 3
        return x + y


class _OptsNet(torch.nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.layers = torch.nn.ModuleList(_Opts() for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _replayed_case():
    torch.manual_seed(0)
    m = _OptsNet()
    opt, cnt = compiled(m)
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(4):  # the second call builds the lists, the later ones run them
            same(opt(x), m(x))
    assert cnt.frame_count == 1
    return m, opt, cnt, x


def test_replayed_subtree_sees_class_of_a_leaf_module_swapped():
    # act has a TYPE_MATCH and no attribute read below it: only the list's type check can see the swap.
    m, opt, cnt, x = _replayed_case()
    m.layers[2].act.__class__ = _Tanh
    check(m, opt, x)
    assert cnt.frame_count == 2
    m.layers[1].act.__class__ = _Tanh
    if REFERENCE_PINNED:  # torch 2.11's torch._dynamo keeps its graph (1 frame) after the swap
        assert dynamo_frames(m, [lambda o: o(x), lambda o: (setattr(m.layers[1].act, "__class__", _Relu), o(x))]) == 2


def test_replayed_subtree_sees_key_added_to_dict_attribute():
    # `"scale" in self.opts` on an empty dict: a DICT_KEYS with no item below it (only its own version proves it).
    m, opt, cnt, x = _replayed_case()
    m.layers[3].opts["scale"] = 1
    check(m, opt, x)
    assert cnt.frame_count == 2
    del m.layers[3].opts["scale"]
    check(m, opt, x)
    assert cnt.frame_count == 2  # the first entry's guards hold again


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.scale = 3.0

    def forward(self, x):
        y = self.fc(x)
        if hasattr(self, "scale"):  # HASATTR, proven in a list by the class version and the instance dict
            y = y * 2
        return x + y


def test_replayed_hasattr_sees_attribute_deleted_and_class_property():
    torch.manual_seed(0)
    m = torch.nn.Sequential(*(_Scaled() for _ in range(3)))
    opt, cnt = compiled(m)
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(4):
            same(opt(x), m(x))
        del m[1].scale
        check(m, opt, x)
        assert cnt.frame_count == 2
        m[1].scale = 1.0
        check(m, opt, x)
        assert cnt.frame_count == 2

        def missing(self):
            raise AttributeError("scale")
        del m[0].scale, m[1].scale, m[2].scale
        _Scaled.scale = property(missing)  # hasattr is now False through the class
        try:
            check(m, opt, x)
        finally:
            del _Scaled.scale


class _Cfg:
    pass


class _Gated(torch.nn.Module):
    gate = False  # a class-level default read through the instance (no stamp of its own)

    def __init__(self, cfg):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.cfg = cfg

    def forward(self, x):
        y = self.fc(x)
        if self.gate:
            y = y * 2
        if getattr(self.cfg, "extra", None) is not None:
            y = y + 1
        return x + y


def test_replayed_class_default_and_class_attribute_added():
    torch.manual_seed(0)
    cfg = _Cfg()
    m = torch.nn.Sequential(*(_Gated(cfg) for _ in range(3)))
    opt, cnt = compiled(m)
    x = torch.randn(2, 4)
    try:
        with torch.no_grad():
            for _ in range(4):
                same(opt(x), m(x))
            m[1].gate = True  # the instance now shadows the class default
            check(m, opt, x)
            assert cnt.frame_count == 2
            del m[1].gate
            _Gated.gate = True  # the class default itself
            check(m, opt, x)
            assert cnt.frame_count == 3
            _Cfg.extra = 1.0  # the config's class gains the attribute getattr looked for
            check(m, opt, x)
            assert cnt.frame_count == 4
    finally:
        _Gated.gate = False
        if hasattr(_Cfg, "extra"):
            del _Cfg.extra


def _closing_over(act):
    def g(x):
        return act(x) + 1
    return g


_closed_act = _Relu()
_closed_fn = _closing_over(_closed_act)


def test_replayed_closure_cell_sees_class_of_the_object_it_holds_swapped():
    # The cell's contents carry two guards (its identity and its class): both are listed, not one for the other.
    def f(x):
        return _closed_fn(x) * 2

    opt, cnt = compiled(f)
    x = torch.randn(4)
    try:
        for _ in range(4):
            same(opt(x), f(x))
        _closed_act.__class__ = _Tanh
        for _ in range(2):
            same(opt(x), f(x))
        assert cnt.frame_count == 2
    finally:
        _closed_act.__class__ = _Relu


def _mutations(m):
    """(mutation, whether a compiled entry's guards must fail) on a warm _OptsNet, in order."""
    return [
        (lambda: m.layers[0].fc.weight.requires_grad_(False), True),
        (lambda: setattr(m.layers[1].fc, "bias", torch.nn.Parameter(torch.randn(4))), False),  # a new input
        (lambda: m.layers[2].register_forward_hook(lambda mod, inp, out: out * 2), True),
        (lambda: m.layers[3].train(False), False),  # its instance dict changes; nothing read there did
        (lambda: m.layers.__setitem__(3, _Opts()), False),  # same class and metadata: new parameter inputs
    ]


def run_mutations(opt, m, x, counter):
    counts = []
    with torch.no_grad():
        for _ in range(4):
            same(opt(x), m(x))
        for mutate, _ in _mutations(m):
            mutate()
            for _ in range(3):
                same(opt(x), m(x))
            counts.append(counter())
    return counts


def test_replayed_subtree_sees_every_module_mutation():
    torch.manual_seed(0)
    m = _OptsNet()
    opt, cnt = compiled(m)
    counts = run_mutations(opt, m, torch.randn(2, 4), lambda: cnt.frame_count)
    expected, n = [], 1
    for _, fails in _mutations(m):
        n += fails
        expected.append(n)
    assert counts == expected

    if not REFERENCE_PINNED:
        return  # torch._dynamo's counts below are those of the pinned torch
    import torch._dynamo as dynamo
    from torch._dynamo.testing import CompileCounter as DC
    dynamo.reset()
    torch.manual_seed(0)
    m2 = _OptsNet()
    dc = DC()
    try:
        # torch._dynamo skips hook guards by default (skip_nnmodule_hook_guards): a hook added later is not run.
        with dynamo.config.patch(skip_nnmodule_hook_guards=False):
            dyn = run_mutations(torch.compile(m2, backend=dc, dynamic=False), m2, torch.randn(2, 4),
                                lambda: dc.frame_count)
    finally:
        dynamo.reset()
    assert dyn[-1] == counts[-1]


# --- printer -----------------------------------------------------------------------------------------------------


def test_guard_log_prints_tree_indented_by_source():
    m = Net(2)
    buf = io.StringIO()
    _logging.enable("guards", stream=buf)
    try:
        with torch.no_grad():
            cdynamo.optimize("eager")(m)(torch.randn(2, 4))
    finally:
        _logging.disable()
    text = buf.getvalue()
    assert "GUARDS:" in text and "GUARD TREE:" in text
    tree = text.split("GUARD TREE:\n", 1)[1].splitlines()
    # The module is a root; its _modules under it, 'layers' under that, and so on, two spaces a level.
    root = next(i for i, line in enumerate(tree) if line.strip().startswith("local '_cdynamo_module'"))
    depth = lambda line: len(line) - len(line.lstrip(" "))  # noqa: E731
    base = depth(tree[root])
    below = [line for line in tree[root + 1:] if depth(line) > base]
    assert any(line.strip().startswith("._modules") and depth(line) == base + 2 for line in below)
    assert any(line.strip().startswith("['layers']") for line in below)
    assert any("TENSOR_MATCH" in line and line.strip().startswith("['weight']") for line in below)
    # Every guard of the flat list appears once in the tree.
    assert sum("TENSOR_MATCH" in line for line in tree) == text.split("GUARD TREE:")[0].count("TENSOR_MATCH")


def test_testing_guard_set_tree():
    g = _C._testing.GuardSet(["x", "m"])
    g.add_tensor_match(("attr", "m", "weight"), torch.randn(2))
    g.add_type_match("m", torch.nn.Linear(2, 2))
    text = g.tree()
    assert text.splitlines()[0].startswith("local 'm': TYPE_MATCH")
    assert text.splitlines()[1] == "  .weight: TENSOR_MATCH"


def test_tree_drops_an_object_guarded_identical_to_itself():
    """T5's layer norms read `self.weight` twice in a way that guards `w is w` (DUPLICATE_INPUT over two equal
    source paths): the flat list keeps it for reasons, the tree drops it (one node, fetched once: always true)."""
    class LN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(4))

        def forward(self, x):
            if self.weight.dtype in [torch.float16, torch.bfloat16]:
                x = x.to(self.weight.dtype)
            return self.weight * x

    m = LN()
    buf = io.StringIO()
    _logging.enable("guards", stream=buf)
    try:
        with torch.no_grad():
            opt = cdynamo.optimize("eager")(m)
            x = torch.randn(4)
            same(opt(x), m(x))
    finally:
        _logging.disable()
    flat, tree = buf.getvalue().split("GUARD TREE:", 1)
    assert "DUPLICATE_INPUT" in flat
    assert "DUPLICATE_INPUT" not in tree
    with torch.no_grad():
        m.weight = torch.nn.Parameter(torch.full((4,), 2.0, dtype=torch.float64))
        same(opt(x), m(x))


# --- class roots: the guards on a class checked once per call, not once per instance ---------------------------


class _Blk(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x).relu()


def _blk_forward_doubled(self, x):
    return self.fc(x).relu() * 2


class _Deep(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = torch.nn.ModuleList(_Blk() for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _guard_log(opt, *args):
    buf = io.StringIO()
    _logging.enable("guards", stream=buf)
    try:
        opt(*args)
    finally:
        _logging.disable()
    flat, tree = buf.getvalue().split("GUARD TREE:", 1)
    return flat, tree


def test_class_guards_are_checked_once_per_class():
    # Each layer's `type(layer).forward` guard reads the same class: the tree checks it once under one class root
    # (the flat list keeps one line per layer for reasons), and the TYPE_MATCH on each layer ties it to that class.
    torch.manual_seed(0)
    m = _Deep(5)
    opt, cnt = compiled(m)
    x = torch.randn(2, 4)
    flat, tree = _guard_log(opt, x)
    assert flat.count("._modules['layers']._modules['") and \
        sum(".__class__.forward FUNCTION_MATCH" in line and "._modules['fc']" not in line and "['layers']._modules" in line
            for line in flat.splitlines()) == 5
    assert sum(line.strip().startswith("class _Blk ") for line in tree.splitlines()) == 1
    assert sum("TYPE_MATCH" in line for line in tree.splitlines() if "['layers']._modules" not in line) >= 1
    run_twice(opt, m, x)
    assert cnt.frame_count == 1


def test_class_root_sees_a_patched_forward_and_a_changed_class():
    torch.manual_seed(0)
    m = _Deep(4)
    opt, cnt = compiled(m)
    x = torch.randn(2, 4)
    run_twice(opt, m, x)
    old = _Blk.forward
    try:
        _Blk.forward = _blk_forward_doubled  # every layer's forward changes: the class root's guard fails
        run_twice(opt, m, x)
        assert cnt.frame_count == 2
    finally:
        _Blk.forward = old
    run_twice(opt, m, x)
    assert cnt.frame_count == 2  # the first entry again

    class Doubled(_Blk):
        forward = _blk_forward_doubled

    m.layers[2].__class__ = Doubled  # one layer's class: its TYPE_MATCH fails; the others' class root still holds
    run_twice(opt, m, x)
    assert cnt.frame_count == 3
    m.layers[2].__class__ = _Blk
    run_twice(opt, m, x)
    assert cnt.frame_count == 3


def test_class_root_fails_when_the_class_stops_reading_its_own_type():
    # A class that later gets a `__getattribute__` of its own may answer anything for x.__class__: the class root
    # fails rather than assume type(x) (a recompile), and results still equal eager.
    torch.manual_seed(0)

    class Blk(_Blk):
        pass

    m = _Deep(3)
    for i in range(3):
        m.layers[i].__class__ = Blk
    opt, cnt = compiled(m)
    x = torch.randn(2, 4)
    run_twice(opt, m, x)
    Blk.__getattribute__ = lambda self, name: object.__getattribute__(self, name)
    try:
        run_twice(opt, m, x)
        assert cnt.frame_count == 2
    finally:
        del Blk.__getattribute__
