# test_deepcopy.py — owns the tests of copy.deepcopy inside compiled code (csrc/interp/deepcopy.cpp): plain-data objects and containers copied in the trace, the copy's reads, writes and __dict__, guards on the original's state, and the cases that must break (tensors), compared with eager and torch._dynamo.
import copy

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


class Cfg:
    """A plain-data config: attributes of constants, a list, a dict with int keys, a nested config."""

    def __init__(self):
        self.hidden = 4
        self.scale = 0.5
        self.act = "relu"
        self.layers = ["full", "sliding"]
        self.id2label = {0: "a", 1: "b"}
        self.sub = Sub()


class Sub:
    def __init__(self):
        self.eps = 1e-5


class Mapped:
    """Like transformers' PreTrainedConfig: names remapped in __getattribute__ / __setattr__."""

    attribute_map = {"num_hidden_layers": "n_layer"}

    def __init__(self):
        self.n_layer = 2
        self.decoder_heads = 3
        self.mult = 2.0

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)

    def __setattr__(self, key, value):
        if key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        super().__setattr__(key, value)

    def as_dict(self):
        return copy.deepcopy(self.__dict__)

    def decoder_view(self):
        c = copy.deepcopy(self)
        for key in c.as_dict():
            if key.startswith("decoder_"):
                value = getattr(c, key)
                delattr(c, key)
                setattr(c, key[len("decoder_"):], value)
        c.num_hidden_layers = c.num_hidden_layers + 1
        return c


def _both(fn, *args):
    """Runs fn eagerly, under cdynamo (counting graphs) and under torch._dynamo; returns the three results."""
    ref = fn(*args)
    cnt = CompileCounter()
    got = cdynamo.optimize(cnt)(fn)(*args)
    dcnt = torch._dynamo.testing.CompileCounter()
    dyn = torch.compile(fn, backend=dcnt)(*args)
    return ref, got, dyn, cnt, dcnt


def test_copy_of_a_plain_config_is_read_in_one_graph():
    cfg = Cfg()

    def f(x, cfg):
        c = copy.deepcopy(cfg)
        c.hidden = c.hidden * 2
        c.layers.append("extra")
        c.id2label[2] = "c"
        y = x * c.hidden * c.scale + c.sub.eps
        return y + len(c.layers) + len(c.id2label), c.act

    x = torch.randn(3)
    ref, got, dyn, cnt, dcnt = _both(f, x, cfg)
    torch.testing.assert_close(got[0], ref[0])
    assert got[1] == ref[1]
    # The original is untouched (the copy's writes stay on the copy).
    assert cfg.hidden == 4 and cfg.layers == ["full", "sliding"] and cfg.id2label == {0: "a", 1: "b"}
    assert cnt.frame_count == 1 and cnt.op_count == dcnt.op_count
    assert len(cdynamo.explain(f, x, cfg).break_reasons) == 0


def test_copy_guards_the_originals_state():
    cfg = Cfg()

    def f(x, cfg):
        c = copy.deepcopy(cfg)
        return x * c.hidden + len(c.layers) + c.sub.eps + len(c.id2label[1])

    cnt = CompileCounter()
    cf = cdynamo.optimize(cnt)(f)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x, cfg), f(x, cfg))
    for change in (lambda: setattr(cfg, "hidden", 7), lambda: cfg.layers.append("x"),
                   lambda: setattr(cfg.sub, "eps", 0.25), lambda: cfg.id2label.update({1: "bbb"})):
        change()
        torch.testing.assert_close(cf(x, cfg), f(x, cfg))
    assert cnt.frame_count == 5  # each change of the state read recompiles


def test_copy_with_getattribute_and_setattr_overrides_remaps_and_deletes():
    cfg = Mapped()

    def f(x, cfg):
        c = cfg.decoder_view()
        names = sorted(c.as_dict())
        return x * c.num_hidden_layers * c.heads * c.mult, names, hasattr(c, "decoder_heads"), getattr(c, "missing", -1)

    x = torch.randn(3)
    ref, got, dyn, cnt, dcnt = _both(f, x, cfg)
    torch.testing.assert_close(got[0], ref[0])
    assert got[1:] == ref[1:] == (["heads", "mult", "n_layer"], False, -1)
    assert cfg.n_layer == 2 and cfg.decoder_heads == 3 and not hasattr(cfg, "heads")
    assert cnt.frame_count == 1 == dcnt.frame_count


def test_dict_view_follows_the_object_after_writes():
    cfg = Mapped()

    def f(x, cfg):
        c = copy.deepcopy(cfg)
        d = c.__dict__
        before = len(d)
        c.extra = 5
        del c.mult
        return x + len(d) * 10 + before, sorted(d)

    x = torch.zeros(2)
    ref, got, dyn, cnt, dcnt = _both(f, x, cfg)
    torch.testing.assert_close(got[0], ref[0])
    assert got[1] == ref[1] == ["decoder_heads", "extra", "n_layer"]


def test_writing_the_dict_view_breaks_and_stays_correct():
    cfg = Cfg()

    def f(x, cfg):
        c = copy.deepcopy(cfg)
        c.__dict__["hidden"] = 9
        return x * c.hidden

    x = torch.ones(2)
    torch.testing.assert_close(cdynamo.optimize("eager")(f)(x, cfg), f(x, cfg))
    assert cfg.hidden == 4


def test_returned_copy_is_a_new_equal_object():
    cfg = Cfg()

    def f(x, cfg):
        c = copy.deepcopy(cfg)
        c.hidden = 8
        return x + 1, c

    x = torch.ones(2)
    ref = f(x, cfg)
    got = cdynamo.optimize("eager")(f)(x, cfg)
    c = got[1]
    assert type(c) is Cfg and c is not cfg and c.sub is not cfg.sub and c.layers is not cfg.layers
    assert c.hidden == 8 and c.layers == cfg.layers and c.id2label == cfg.id2label and c.sub.eps == cfg.sub.eps
    assert sorted(vars(c)) == sorted(vars(ref[1]))


def test_copy_keeps_aliasing_inside_the_object():
    class Pair:
        def __init__(self):
            self.a = [1, 2]
            self.b = self.a

    p = Pair()

    def f(x, p):
        c = copy.deepcopy(p)
        c.a.append(3)
        return x + len(c.b), c.a is c.b

    x = torch.zeros(1)
    ref, got, dyn, cnt, dcnt = _both(f, x, p)
    torch.testing.assert_close(got[0], ref[0])
    assert got[1] is True and p.a == [1, 2]


def test_copy_of_tensors_breaks_like_dynamo():
    def f(x, d):
        c = copy.deepcopy(d)
        c["w"].add_(1)
        return x * c["w"]

    x = torch.ones(2)
    d = {"w": torch.ones(2)}
    ref = f(x, d)
    cnt = CompileCounter()
    got = cdynamo.optimize(cnt)(f)(x, d)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(d["w"], torch.ones(2))  # the original tensor is not written
    reasons = [str(r) for r in cdynamo.explain(f, x, d).break_reasons]
    assert any("copy.deepcopy of a tensor" in r for r in reasons)


def test_copy_of_a_class_with_its_own_deepcopy_breaks():
    class Own:
        def __init__(self):
            self.n = 1
            self.calls = []

        def __deepcopy__(self, memo):
            print("own deepcopy")
            o = Own()
            o.n = self.n + 100
            return o

    o = Own()

    def f(x, o):
        return x + copy.deepcopy(o).n

    x = torch.zeros(1)
    torch.testing.assert_close(cdynamo.optimize("eager")(f)(x, o), f(x, o))
    assert any("deepcopy" in str(r) for r in cdynamo.explain(f, x, o).break_reasons)
