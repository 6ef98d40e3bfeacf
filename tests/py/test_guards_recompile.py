# test_guards_recompile.py — owns tests that guards pass when they should, fail (and recompile) when they
# should, and that the recompile limit and reset() behave.
import os
import types
import warnings

import pytest
import torch
import torch._dynamo.testing

import cdynamo
from cdynamo import _C
from cdynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def _reset():
    cdynamo.reset()
    old = cdynamo.config.recompile_limit
    yield
    cdynamo.config.recompile_limit = old
    cdynamo.reset()


def add_one(x):
    return torch.sin(x) + 1


def scaled(x, s):
    return x * s


def compiled(fn):
    cnt = CompileCounter()
    return cdynamo.optimize(cnt)(fn), cnt


def test_same_metadata_does_not_recompile():
    opt, cnt = compiled(add_one)
    for _ in range(5):
        x = torch.randn(4)
        torch.testing.assert_close(opt(x), add_one(x))
    assert cnt.frame_count == 1


@pytest.mark.parametrize(
    "second",
    [
        lambda: torch.randn(4, dtype=torch.float64),   # dtype
        lambda: torch.randn(5),                        # shape
        lambda: torch.randn(4, 1),                     # ndim
        lambda: torch.randn(4, requires_grad=True),    # requires_grad
        lambda: torch.randn(8)[::2],                   # strides
    ],
    ids=["dtype", "shape", "ndim", "requires_grad", "strides"],
)
def test_tensor_property_change_recompiles(second):
    opt, cnt = compiled(add_one)
    x = torch.randn(4)
    torch.testing.assert_close(opt(x), add_one(x))
    y = second()
    torch.testing.assert_close(opt(y), add_one(y))
    assert cnt.frame_count == 2
    # Both entries now hit.
    torch.testing.assert_close(opt(x), add_one(x))
    torch.testing.assert_close(opt(y), add_one(y))
    assert cnt.frame_count == 2


def test_scalar_argument_change_recompiles():
    opt, cnt = compiled(scaled)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x, 2), scaled(x, 2))
    torch.testing.assert_close(opt(x, 2), scaled(x, 2))
    assert cnt.frame_count == 1
    torch.testing.assert_close(opt(x, 3), scaled(x, 3))
    assert cnt.frame_count == 2
    torch.testing.assert_close(opt(x, 2.0), scaled(x, 2.0))  # same value, other type
    assert cnt.frame_count == 3


def test_grad_mode_change_recompiles():
    opt, cnt = compiled(add_one)
    x = torch.randn(3, requires_grad=True)
    out = opt(x)
    assert out.requires_grad
    with torch.no_grad():
        out2 = opt(x)
    assert not out2.requires_grad
    assert cnt.frame_count == 2


def test_global_tensor_replacement_recompiles():
    global G
    G = torch.ones(3)

    def uses_global(x):
        return x + G

    opt, cnt = compiled(uses_global)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), x + 1)
    G = torch.full((3,), 5.0)
    torch.testing.assert_close(opt(x), x + 5)  # same metadata: the new global value is read at run time
    G = torch.ones(4)
    with pytest.raises(RuntimeError):
        opt(x)
    G = torch.ones(3, dtype=torch.float64)
    torch.testing.assert_close(opt(x), x + G)
    assert cnt.frame_count == 2


def test_guard_fail_fn_receives_reason():
    reasons = []
    opt = cdynamo.optimize(CompileCounter(), guard_fail_fn=lambda failure: reasons.append(failure))(add_one)
    opt(torch.randn(3))
    opt(torch.randn(3, dtype=torch.float64))
    assert len(reasons) == 1
    text = str(getattr(reasons[0], "reason", reasons[0]))
    assert "local 'x'" in text and "dtype" in text


def test_recompile_limit_falls_back_with_one_warning():
    cdynamo.config.recompile_limit = 2
    opt, cnt = compiled(add_one)
    # automatic dynamic shapes off: each new size is a recompile (with it, the second size compiles a dynamic graph)
    with cdynamo.config.patch(automatic_dynamic_shapes=False), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 7):
            x = torch.randn(n)
            torch.testing.assert_close(opt(x), add_one(x))
    assert cnt.frame_count == 2
    limit_warnings = [w for w in caught if "recompile" in str(w.message)]
    assert len(limit_warnings) == 1
    assert "add_one" in str(limit_warnings[0].message)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x)) + 1


_SCALES = {}


class _PinnedBlock(_Block):
    def forward(self, x):  # id(self) is an identity use: each instance's entry pins its own `self`
        return super().forward(x) * _SCALES.get(id(self), 1.0)


def _per_block_forward(cnt, nblocks, cls=_Block, **patch):
    """Each block's forward compiled as a frame of its own (as FSDP2's hooks make it): (frames, outputs ok)."""
    blocks = [cls() for _ in range(nblocks)]
    fwd = cdynamo.optimize(cnt)(cls.forward)
    x = torch.randn(2, 4)
    with cdynamo.config.patch(**patch), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            for b in blocks:
                torch.testing.assert_close(fwd(b, x), b(x))
    return cnt.frame_count


def test_instances_of_one_module_class_share_one_entry():
    # A frame's `self` module is guarded by its type and what the trace reads from it (its parameters are graph
    # inputs), not by identity, as torch._dynamo's unspecialized modules: 12 blocks, one graph.
    assert _per_block_forward(CompileCounter(), 12) == 1
    blocks = [_Block() for _ in range(3)]
    fwd, cnt = compiled(_Block.forward)
    x = torch.randn(2, 4)
    with torch.no_grad():
        blocks[1].lin.weight.mul_(2)  # each block's own parameters reach the shared graph
        blocks[2].lin = torch.nn.Linear(4, 4, bias=False)  # another structure: a recompile
        for b in blocks:
            torch.testing.assert_close(fwd(b, x), b(x))
    assert cnt.frame_count == 2


def test_recompile_limit_counts_entries_per_pinned_self():
    # torch._dynamo's rule: the limit counts the entries compiled for the objects the frame's locals pin by identity
    # (here `self`, pinned by id(self)), so 12 instances of one class each run compiled; their 12 entries stay under
    # the total limit.
    assert _per_block_forward(CompileCounter(), 12, _PinnedBlock, recompile_limit=8) == 12
    # accumulated_recompile_limit bounds all entries of the code (the rest run as Python, with equal results; the
    # frames they call are still compiled: one more graph, _Block.forward called through super(), shared by all)
    assert _per_block_forward(CompileCounter(), 12, _PinnedBlock, recompile_limit=8,
                              accumulated_recompile_limit=5) == 6
    assert len(_C._testing.cache_entries(_PinnedBlock.forward.__code__)) == 5


def test_recompile_limit_still_bounds_one_instance():
    b = _Block()
    fwd, cnt = compiled(_Block.forward)
    with cdynamo.config.patch(recompile_limit=2, automatic_dynamic_shapes=False), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in range(1, 6):
            x = torch.randn(n, 4)
            torch.testing.assert_close(fwd(b, x), b(x))
    assert cnt.frame_count == 2


class _Cache:
    pass


class _CallLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def __call__(self, *args, **kwargs):  # as transformers' GradientCheckpointingLayer
        return super().__call__(*args, **kwargs)

    def forward(self, x, cache=None):
        return torch.relu(self.lin(x))


def _untraceable_hook(module, args, kwargs):
    os.getpid()  # not traceable: the layer's call runs as Python


def test_frame_run_as_python_keeps_no_guard_of_a_failed_inline():
    # Each layer's __call__ cannot be captured (its super().__call__ runs a hook that is not traceable); the inline
    # attempt read the fresh `cache` object of this call before failing. The entry that runs the frame as Python
    # must not pin it, or every call would find the entry dead and trace the frame again.
    layers = [_CallLayer() for _ in range(3)]
    for layer in layers:
        layer.register_forward_pre_hook(_untraceable_hook, with_kwargs=True)

    def run(x):
        cache = _Cache()
        for layer in layers:
            x = layer(x, cache=cache)
        return x

    opt = cdynamo.optimize("eager")(run)
    x = torch.randn(2, 4)
    cdynamo.utils.counters.clear()
    for _ in range(6):
        torch.testing.assert_close(opt(x), run(x))
    # the layers share their entries (one recompile each for __call__ and forward: the first layer's input needs no
    # grad, the others' do), none per call; on 3.12+ too, where `super().__call__` is LOAD_SUPER_ATTR (which pins
    # nothing, as 3.11's super() call does not).
    assert sum(cdynamo.utils.counters["recompiles"].values()) == 2
    assert len(_C._testing.cache_entries(_CallLayer.__call__.__code__)) == 2


def test_cache_size_limit_alias():
    cdynamo.config.cache_size_limit = 3
    assert cdynamo.config.recompile_limit == 3


def test_reset_frees_cache_entries():
    opt, cnt = compiled(add_one)
    opt(torch.randn(3))
    assert _C.cache_entry_count(add_one.__code__) == 1
    cdynamo.reset()
    assert _C.cache_entry_count(add_one.__code__) == 0
    assert not any(k.startswith("__compiled_fn_") for k in globals())
    opt(torch.randn(3))
    assert cnt.frame_count == 2


def test_aliased_inputs_guarded():
    def fn(a, b):
        a.add_(1)
        return a + b

    opt, cnt = compiled(fn)
    x, y = torch.zeros(3), torch.zeros(3)
    torch.testing.assert_close(opt(x, y), torch.ones(3))
    w = torch.zeros(3)
    w_eager = torch.zeros(3)
    torch.testing.assert_close(opt(w, w), fn(w_eager, w_eager))
    assert cnt.frame_count == 2


CONFIG = {"scale": 2}


def _scaled_by_global_dict(x):
    return x * CONFIG["scale"]


def test_mutable_global_contents_are_never_baked_in():
    # Only the dict's identity could be guarded: its contents must be read at run time, not folded.
    opt = cdynamo.optimize("eager")(_scaled_by_global_dict)
    x = torch.ones(2)
    try:
        torch.testing.assert_close(opt(x), _scaled_by_global_dict(x))
        CONFIG["scale"] = 3
        torch.testing.assert_close(opt(x), _scaled_by_global_dict(x))
        assert opt(x)[0].item() == 3.0
    finally:
        CONFIG["scale"] = 2


def test_builtin_over_iterator_is_not_folded():
    def fn(x):
        pairs = list(enumerate("ab"))
        return x + pairs[1][0] + len(list(zip([1, 2], [3, 4])))

    x = torch.zeros(2)
    opt = cdynamo.optimize("eager")(fn)
    torch.testing.assert_close(opt(x), fn(x))
    torch.testing.assert_close(opt(x), fn(x))


def test_closure_sees_variable_reassigned_after_capture():
    # A function made in the trace captures a snapshot; reassigning the variable afterwards must not
    # give a stale value (the trace stops instead), exactly as eager's live cells.
    def fn(x):
        k = 2
        g = lambda v: v * k  # noqa: E731
        k = 3
        return g(x)

    x = torch.ones(2)
    torch.testing.assert_close(cdynamo.optimize("eager")(fn)(x), fn(x))


def test_comprehensions_and_lambdas_are_one_graph():
    def fn(x, ws):
        s = x.sum()
        ys = [w * s for w in ws]
        d = {i: w + 1 for i, w in enumerate(ws)}
        g = lambda v, k=2: v * k + s  # noqa: E731
        return ys[0] + ys[1], d[1], g(x), [i * 2 for i in range(3)]

    x, ws = torch.randn(3), [torch.randn(3), torch.randn(3)]
    counter = CompileCounter()
    got = cdynamo.optimize(counter)(fn)(x, ws)
    expected = fn(x, ws)
    for a, b in zip(got, expected):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a, b)
        else:
            assert a == b
    assert counter.frame_count == 1


COUNT = 0
LAST = None


def _bump():
    global COUNT
    COUNT = COUNT + 1


def _counting(x):
    global LAST
    _bump()
    y = x * COUNT
    LAST = y
    return y + 1


def test_global_writes_are_replayed_and_read_back():
    global COUNT, LAST
    x = torch.ones(2)
    COUNT, LAST = 0, None
    expected = [_counting(x) for _ in range(3)]
    expected_last = LAST
    COUNT, LAST = 0, None
    opt = cdynamo.optimize(CompileCounter())(_counting)
    got = [opt(x) for _ in range(3)]
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    assert COUNT == 3
    torch.testing.assert_close(LAST, expected_last)


# ---- objects made anew on each call: their type is guarded at once, their identity only once used ------

class Out:
    def __init__(self, v):
        self.v = v


def make_out(x):
    return Out(x)


def pass_through(x, o):
    y = x.sin()
    return y, o            # `o` only moved: no identity guard


def returns_after_break(x):
    o = make_out(x)        # runs as Python (a call that is not inlined here is not needed: o is passed on)
    print("break")
    return x.cos(), o


def test_object_only_moved_is_guarded_by_type():
    opt, cnt = compiled(pass_through)
    x = torch.randn(3)
    for _ in range(4):
        o = Out(1)
        y, o2 = opt(x, o)
        assert o2 is o
    assert cnt.frame_count == 1
    # Another type is another trace.
    opt(x, 5)
    assert cnt.frame_count == 2


def test_result_passed_to_a_continuation_does_not_recompile(capsys):
    opt, cnt = compiled(returns_after_break)
    x = torch.randn(3)
    outs = [opt(x)[1] for _ in range(4)]
    assert len({id(o) for o in outs}) == 4
    assert cnt.frame_count <= 2  # before and after the break, once each


def identity_test(x, a, b):
    if a is b:
        return x + 1
    return x - 1


def test_identity_use_pins_the_objects():
    opt, cnt = compiled(identity_test)
    x = torch.zeros(2)
    o1, o2 = Out(1), Out(2)
    assert torch.equal(opt(x, o1, o2), x - 1)
    assert torch.equal(opt(x, o1, o1), x + 1)   # same type, but `is` used them: a new trace
    assert torch.equal(opt(x, Out(1), Out(1)), x - 1)


def write_then_read(x, a, b):
    a.v = 10
    return x * b.v


def test_write_through_one_object_read_through_another():
    # Objects guarded by type could be the same at run time: reading the attribute written through another
    # object guards their aliasing (NO_ALIASING / SAME_OBJECT), so distinct new objects do not recompile and a
    # call where a is b recompiles and reads the written value, as eager does.
    opt, cnt = compiled(write_then_read)
    x = torch.ones(2)
    a, b = Out(1), Out(2)
    assert torch.equal(opt(x, a, b), x * 2)
    assert torch.equal(opt(x, Out(1), Out(2)), x * 2)   # new distinct objects: no recompile
    assert cnt.frame_count == 1
    c = Out(3)
    assert torch.equal(opt(x, c, c), x * 10) and c.v == 10   # the same object: the aliasing guard fails
    assert cnt.frame_count == 2
    assert torch.equal(opt(x, Out(1), Out(4)), x * 4)
    ex = cdynamo.explain(write_then_read)(x, Out(1), Out(2))
    assert any("ALIASING" in g for g in ex.out_guards)


def attr_read(x, o):
    return x * o.v


def test_attribute_reads_are_guarded_through_their_source():
    opt, cnt = compiled(attr_read)
    x = torch.ones(2)
    assert torch.equal(opt(x, Out(2)), x * 2)
    assert torch.equal(opt(x, Out(3)), x * 3)   # a different value: the attribute's guard fails
    assert torch.equal(opt(x, Out(3)), x * 3)   # a different object with the same value: no recompile
    assert cnt.frame_count == 2


def test_guard_printout_shows_type_match():
    ex = cdynamo.explain(pass_through)(torch.ones(2), Out(1))
    text = "\n".join(str(g) for g in ex.out_guards)
    assert "local 'o' TYPE_MATCH" in text and "local 'o' ID_MATCH" not in text


def _read_v(o):
    return o.v


def through_helper(x, o, holder):
    if o is None:
        return x
    holder.last = o            # the stored value is only moved
    return x * _read_v(o)      # the helper is inlined: its attribute read is guarded, not o's identity


def test_inlined_call_store_and_none_test_do_not_pin_identity():
    opt, cnt = compiled(through_helper)
    x = torch.ones(2)
    h = Out(0)
    for v in (2, 2, 2):
        o = Out(v)
        assert torch.equal(opt(x, o, h), x * v) and h.last is o
    assert cnt.frame_count == 1
    assert torch.equal(opt(x, Out(7), h), x * 7)   # the attribute's own guard fails: recompiles
    assert cnt.frame_count == 2
    assert torch.equal(opt(x, None, h), x)         # no tensor op on that path: no graph


def breaks_on_object_call(x, o):
    y = x + 1
    r = o.v.bit_length()           # a C method of an attribute: breaks; o needs no identity guard for it
    return y * r


def test_break_instruction_pins_nothing():
    opt, cnt = compiled(breaks_on_object_call)
    x = torch.ones(2)
    for _ in range(3):
        assert torch.equal(opt(x, Out(4)), (x + 1) * 3)
    assert cnt.frame_count <= 2


def fill(x, o, *rest, **kw):
    o.v = x * 2                 # writes a fresh object: pinned by nothing
    o.w = o.v + 1               # read back through the same value
    return o


def init_like(x, o):
    return fill(x, *(o,), **{})  # the *args / **kwargs call form ModelOutput.__init__ uses


def test_writes_to_a_fresh_object_each_call_do_not_recompile():
    opt, cnt = compiled(init_like)
    for _ in range(4):
        x = torch.randn(2)
        o = opt(x, Out(0))
        torch.testing.assert_close(o.w, x * 2 + 1)
    assert cnt.frame_count == 1


class _Layer:
    def __init__(self, sliding):
        self.is_sliding = sliding


class _Cache:
    def __init__(self):
        self.layers = [_Layer(True), _Layer(False)]


def cache_flags(x, cache, kwargs):
    flags = [getattr(layer, "is_sliding", False) for layer in cache.layers]
    n = len(cache.layers)
    return x * (sum(flags) + n) if "scale" in kwargs else x


def test_iteration_len_getattr_and_key_tests_do_not_pin_items():
    opt, cnt = compiled(cache_flags)
    x = torch.ones(2)
    for _ in range(3):
        assert torch.equal(opt(x, _Cache(), {"scale": 1}), x * 3)   # a new cache and new layers each call
    assert cnt.frame_count == 1
    c = _Cache()
    c.layers[1].is_sliding = True
    assert torch.equal(opt(x, c, {"scale": 1}), x * 4)             # the attribute's guard catches the change


def test_compiles_for_objects_dying_after_each_call_are_capped():
    # `a is b` pins both objects; fresh ones each call drop the entry (it can never match again) and compile
    # anew: past 4x the recompile limit of such drops the frame runs as Python, with one warning.
    import gc
    opt, cnt = compiled(identity_test)
    x = torch.zeros(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(6 * cdynamo.config.recompile_limit):
            a, b = Out(1), Out(2)
            assert torch.equal(opt(x, a, b), x - 1)
            del a, b
            gc.collect(0)  # the youngest generation: a full collection of a test process costs seconds
    assert 4 * cdynamo.config.recompile_limit <= cnt.frame_count <= 4 * cdynamo.config.recompile_limit + 1
    msgs = [str(w.message) for w in caught if "died after the call" in str(w.message)]
    assert len(msgs) == 1


class _UsesCache(torch.nn.Module):
    def forward(self, x, cache=None, **kwargs):
        flags = all(layer.is_sliding is not None for layer in cache.layers)   # a generator: yields move
        return x * len(cache.layers) if flags else x


class _Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _UsesCache()

    def forward(self, x, cache):
        return self.inner(x, cache=cache, **{"extra": 1})   # a module call: its arguments are only bound


def test_module_call_arguments_and_generator_items_are_not_pinned():
    cnt = CompileCounter()
    m = _Outer()
    opt = cdynamo.optimize(cnt)(m)
    x = torch.ones(2)
    for _ in range(3):
        torch.testing.assert_close(opt(x, _Cache()), x * 2)
    assert cnt.frame_count == 1


# ---- guards of a call that could not be inlined ------------------------------------------------------

class Untraceable:
    def __setattr__(self, k, v):
        super().__setattr__(k, v)  # zero-argument super() of a class with __setattr__: not inlined


def checked_set(obj, value):
    if obj.mode == "strict":  # read (and guarded) by the inlining that then fails at the call below
        value = abs(value)
    obj.__class__.__setattr__(obj, "v", value)


def sets_then_computes(x, obj):
    y = x * 2
    checked_set(obj, -1.5)
    return y + 1


def test_a_call_that_breaks_is_not_guarded_on_what_it_read():
    """The call runs as Python at the break, so what its failed inlining read (`obj.mode`) is not guarded:
    changing it does not recompile the frame (the first trace is redone with the break at the call)."""
    opt, counter = compiled(sets_then_computes)
    x = torch.randn(3)
    obj, ref = Untraceable(), Untraceable()
    for mode in ["strict", "loose", "strict", "loose"]:
        obj.mode = ref.mode = mode
        torch.testing.assert_close(opt(x, obj), sets_then_computes(x, ref))
        assert obj.v == ref.v
    assert counter.frame_count == 2  # the graph before the break and the continuation's, compiled once



@pytest.mark.parametrize("way", ["instance", "parameter", "buffer", "module", "class", "property"])
def test_module_hasattr_guard_sees_every_way_an_attribute_appears(way):
    # hasattr(self, name) on an nn.Module is guarded; the guard decides absence at C level as
    # Module.__getattr__ would (instance dict, _parameters, _buffers, _modules, the class).
    class M(torch.nn.Module):
        def forward(self, x):
            if hasattr(self, "extra"):
                return x + 1
            return x - 1

    m = M()
    cnt = CompileCounter()
    cm = cdynamo.optimize(cnt)(m)
    x = torch.zeros(2)
    torch.testing.assert_close(cm(x), x - 1)
    torch.testing.assert_close(cm(x), x - 1)
    if way == "instance":
        m.extra = 3
    elif way == "parameter":
        m.register_parameter("extra", torch.nn.Parameter(torch.ones(1)))
    elif way == "buffer":
        m.register_buffer("extra", torch.ones(1))
    elif way == "module":
        m.add_module("extra", torch.nn.Identity())
    elif way == "class":
        M.extra = 1
    else:  # a property that raises AttributeError: hasattr is False in eager too
        M.extra = property(lambda self: self.missing_thing)
    torch.testing.assert_close(cm(x), m(x))
    assert cnt.frame_count == (1 if way == "property" else 2)  # the raising property leaves hasattr False
    if way in ("instance", "parameter", "buffer", "module"):
        delattr(m, "extra")
        torch.testing.assert_close(cm(x), x - 1)


def _make_scale(k):
    def scale(t):
        return t * k + _OFFSET
    return scale


def _make_shift(k):
    def shift(t):
        return t - k
    return shift


_OFFSET = 1.0


def _apply(x, fn):
    return fn(x).sum()


def test_closure_made_anew_each_call_compiles_once():
    # A closure passed down on every call (transformers' mask functions): guarded by its code, globals and cells,
    # not by its identity (which is new on every call and dies after it: every call compiled again).
    opt, cnt = compiled(_apply)
    x = torch.randn(4)
    for _ in range(6):
        f = _make_scale(2.0)
        torch.testing.assert_close(opt(x, f), _apply(x, f))
    assert cnt.frame_count == 1
    # what the closure does still decides: another cell value, other code, other globals
    for f in (_make_scale(3.0), _make_shift(2.0),
              types.FunctionType(_make_scale(2.0).__code__, {"_OFFSET": 100.0}, "scale", None,
                                 _make_scale(2.0).__closure__)):
        torch.testing.assert_close(opt(x, f), _apply(x, f))
    assert cnt.frame_count == 4
    f = _make_scale(2.0)
    f.__code__ = _make_shift(5.0).__code__  # code replaced in place: the shift entry, with this cell
    torch.testing.assert_close(opt(x, f), _apply(x, f))


def test_closure_identity_used_in_trace_is_pinned():
    seen = {}

    def count(x, fn):
        seen[fn] = seen.get(fn, 0) + 1
        return x * seen[fn]

    opt, cnt = compiled(count)
    x = torch.randn(3)
    a, b = _make_scale(1.0), _make_scale(1.0)
    for fn, times in ((a, 1), (a, 2), (b, 1), (a, 3), (b, 2)):
        torch.testing.assert_close(opt(x, fn), x * times)


def test_kwargs_value_read_by_key_is_not_pinned():
    # kwargs.get('dtype') looks a key up: the other values' identities decide nothing, so an object made anew per call
    # among them (transformers passes `config` and a fresh object through **kwargs) must not recompile every call.
    def f(x, **kwargs):
        return x + (1 if kwargs.get("dtype") is torch.float32 else 0)

    opt, cnt = compiled(f)
    x = torch.randn(4)
    for _ in range(4):
        torch.testing.assert_close(opt(x, dtype=torch.float32, extra=object()), f(x, dtype=torch.float32))
    assert cnt.frame_count == 1
    torch.testing.assert_close(opt(x, dtype=torch.float64, extra=object()), f(x, dtype=torch.float64))
    assert cnt.frame_count == 2


def test_kwargs_values_compared_stay_pinned():
    marker = object()

    def f(x, **kwargs):
        return x + sum(1 for v in kwargs.values() if v is marker)

    opt, cnt = compiled(f)
    x = torch.randn(4)
    for extra in (marker, object(), marker):
        torch.testing.assert_close(opt(x, a=extra), f(x, a=extra))


class _Holder:
    def __init__(self, sliding):
        if sliding:
            self.is_sliding = True


def test_hasattr_does_not_pin_an_object_made_anew_each_call():
    # transformers' create_causal_mask asks hasattr(past_key_values, 'is_sliding') of the cache object made for each
    # forward: the answer is guarded (HASATTR / NO_HASATTR), the object's identity is not used.
    def f(x, cache):
        return x + 1 if hasattr(cache, "is_sliding") else x - 1

    opt, cnt = compiled(f)
    x = torch.randn(3)
    for _ in range(4):
        h = _Holder(True)
        torch.testing.assert_close(opt(x, h), f(x, h))
    assert cnt.frame_count == 1
    h = _Holder(False)
    torch.testing.assert_close(opt(x, h), f(x, h))
    assert cnt.frame_count == 2


class _FwdInner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) * 2


class _FwdOuter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _FwdInner()

    def forward(self, x):
        return torch.relu(self.inner(x)) + 1


@pytest.mark.parametrize("hooked", [False, True])
def test_instance_level_forward_is_called_like_eager(hooked):
    """`module.forward = f` on the instance (accelerate's hooks set one) is what Module._call_impl calls: a second
    instance with one, or the same instance given one after the compile, fails NO_HOOKS (or, with hooks, the
    __dict__ key guard) and gets eager's result; the call with one runs as Python. torch._dynamo recompiles too."""
    outers = [_FwdOuter(), _FwdOuter()]
    if hooked:
        for o in outers:
            o.inner.register_forward_hook(lambda mod, args, out: out + 0.5)
    fwd, cnt = compiled(_FwdOuter.forward)
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(fwd(outers[0], x), outers[0](x))
        outers[1].inner.forward = lambda y: y * 1000  # another instance with its own forward
        torch.testing.assert_close(fwd(outers[1], x), outers[1](x))
        outers[0].inner.forward = lambda y: y - 7  # the compiled instance given one afterwards
        torch.testing.assert_close(fwd(outers[0], x), outers[0](x))
        del outers[0].inner.forward
        torch.testing.assert_close(fwd(outers[0], x), outers[0](x))
    assert cnt.frame_count >= 1


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _FwdInner()
        self.scale = 2.0
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.inner(x)) * self.scale


def _set_scale(m):
    m.scale = 3.0


def _train(m):
    m.train()


def _hook(m):
    m.inner.register_forward_hook(lambda mod, args, out: out + 100)


def _swap_submodule(m):
    m.inner.lin = torch.nn.Identity()


class _FwdInner2(_FwdInner):
    def forward(self, x):
        return self.lin(x) * 7


def _swap_class(m):
    m.inner.__class__ = _FwdInner2


def _param_to_buffer(m):
    w = m.inner.lin.weight
    del m.inner.lin.weight
    m.inner.lin.register_buffer("weight", w.detach() * 3)


def _no_bias(m):
    m.inner.lin.bias = None


def _frozen(m):
    m.inner.lin.weight.requires_grad_(False)


@pytest.mark.parametrize("change", [_set_scale, _train, _hook, _swap_submodule, _swap_class, _param_to_buffer,
                                    _no_bias, _frozen], ids=lambda f: f.__name__.strip("_"))
def test_second_instance_that_differs_recompiles(change):
    """Two instances of one module class share an entry only while everything the trace read from the first holds
    for the second: each difference below is a guard failure, a second graph and eager's result."""
    a, b = _Scaled(), _Scaled()
    for m in (a, b):
        m.eval()
    change(b)
    fwd, cnt = compiled(_Scaled.forward)
    x = torch.randn(2, 4)
    for m in (a, b, a, b):
        torch.manual_seed(0)
        got = fwd(m, x)
        torch.manual_seed(0)
        torch.testing.assert_close(got, m(x))
    assert cnt.frame_count == 2


class _IdxBlock(_Block):
    def __init__(self, idx):
        super().__init__()
        self.idx = idx

    def forward(self, x):  # an int attribute (as GPT-2 attention's layer_idx): each block needs an entry of its own
        return torch.relu(self.lin(x)) + self.idx


def test_recompile_limit_counts_per_self_instance_when_not_pinned():
    # The blocks' `self` is not pinned, yet each block fails the others' EQUALS_MATCH on `idx`: the limit counts the
    # entries compiled for each instance, so all 12 run compiled (torch._dynamo stops after 8 and runs the rest as
    # Python), and accumulated_recompile_limit still bounds them all.
    blocks = [_IdxBlock(i) for i in range(12)]
    x = torch.randn(2, 4)
    for total, graphs in ((256, 12), (5, 5)):
        cdynamo.reset()
        fwd, cnt = compiled(_IdxBlock.forward)
        with cdynamo.config.patch(recompile_limit=8, accumulated_recompile_limit=total), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(2):
                for b in blocks:
                    torch.testing.assert_close(fwd(b, x), b(x))
        assert cnt.frame_count == graphs


# ---- modules wrapped one by one ------------------------------------------------------------------------

class _IdxLayer(torch.nn.Module):
    def __init__(self, idx=0):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.idx = idx

    def forward(self, x):
        return torch.relu(self.fc(x)) + self.idx


def test_instances_wrapped_one_by_one_share_one_compile():
    # compile(layer) for each layer of a model (the manual "regional compilation", FSDP2's per-block compile): the
    # instances of one class share their compiled entry as under torch.compile, whose cache lives on forward's code.
    torch.manual_seed(0)
    layers = [_IdxLayer() for _ in range(6)]
    x = torch.randn(2, 4)
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)
    ref_cnt = torch._dynamo.testing.CompileCounter()
    for layer in layers:
        got = opt(layer)(x)
        ref = torch.compile(layer, backend=ref_cnt)(x)
        torch.testing.assert_close(got, layer(x))
        torch.testing.assert_close(ref, layer(x))
    assert ref_cnt.frame_count == 1
    assert cnt.frame_count == ref_cnt.frame_count
    # Each instance's own parameters are read: replacing one layer's weight changes only its result.
    with torch.no_grad():
        layers[3].fc.weight.mul_(2)
    for layer in layers:
        torch.testing.assert_close(opt(layer)(x), layer(x))
    assert cnt.frame_count == 1


def test_instances_that_need_their_own_entry_each_get_the_recompile_limit():
    # Each layer reads its own `idx` (GPT-2's blocks read their layer_idx): one entry per instance, and each
    # instance counts against its own recompile limit, so none of 10 layers runs as Python under a limit of 3.
    cdynamo.config.recompile_limit = 3
    torch.manual_seed(0)
    layers = [_IdxLayer(i) for i in range(10)]
    x = torch.randn(2, 4)
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)
    for layer in layers:
        torch.testing.assert_close(opt(layer)(x), layer(x))
    assert cnt.frame_count == 10
    for layer in layers:  # cached now
        torch.testing.assert_close(opt(layer)(x), layer(x))
    assert cnt.frame_count == 10
