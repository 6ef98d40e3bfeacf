# test_model_outputs.py — owns the tests of transformers ModelOutput objects made in a trace (Record values): construction, reads by attribute / key / index / slice and dict methods, the object rebuilt where it reaches Python, compared with eager and torch._dynamo.
"""ModelOutput is an OrderedDict subclass and a dataclass whose __init__ / __post_init__ / __setattr__ use
dataclasses.fields and super().__setitem__. cdynamo models the object by its fields instead of tracing that
code (as a dict it holds the fields that are not None, in field order) and makes the real object, with the
same field values, where it reaches Python (returned, stored, live at a graph break)."""
import dataclasses
from typing import Optional

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter

transformers = pytest.importorskip("transformers")
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPast, BaseModelOutputWithPooling  # noqa: E402
from transformers.utils import ModelOutput  # noqa: E402

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")
# The cache field: `cache` from transformers 5.2x on (past_key_values= renamed onto it), `past_key_values` before.
CACHE = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"


def _same(a, b):
    """Equal results: ModelOutputs by type, keys and values; tensors exactly."""
    assert type(a) is type(b)
    if isinstance(a, ModelOutput):
        assert list(a.keys()) == list(b.keys())
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name))
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        assert a == b


def _graphs(fn, *args):
    cnt = CompileCounter()
    got = cdynamo.optimize(cnt)(fn)(*args)
    dcnt = torch._dynamo.testing.CompileCounter()
    torch.compile(fn, backend=dcnt)(*args)
    return got, cnt.frame_count, dcnt.frame_count


def test_made_read_and_returned_in_one_graph():
    def fn(x):
        h = x.relu()
        out = BaseModelOutput(last_hidden_state=h, hidden_states=(h, h * 2))
        pooled = BaseModelOutputWithPooling(last_hidden_state=out[0] + 1, pooler_output=out.last_hidden_state.sum(0))
        return pooled, out.to_tuple()[1][1], out["last_hidden_state"], len(out), out.get("attentions", 5)

    x = torch.randn(3, 4)
    got, graphs, dgraphs = _graphs(fn, x)
    _same(got, fn(x))
    assert graphs == dgraphs == 1


def test_none_fields_are_not_keys():
    def fn(x):
        out = BaseModelOutputWithPast(last_hidden_state=x * 2, **{CACHE: None}, hidden_states=None, attentions=(x,))
        return (out.to_tuple(), out[1], out[-1], out[0:2], list(out.keys()), tuple(out.values()),
                [k for k, _ in out.items()], "hidden_states" in out, "attentions" in out, out.hidden_states,
                out.get("hidden_states"), len(out))

    x = torch.randn(4)
    got, graphs, _ = _graphs(fn, x)
    _same(got, fn(x))
    assert graphs == 1


@pytest.mark.skipif(CACHE != "cache", reason=f"transformers {transformers.__version__} has no cache field (5.2x "
                    "renamed past_key_values onto it)")
def test_old_cache_names():
    # The metaclass wrapper renames past_key_values= to cache=; the property and the key read it back.
    class Cache:
        pass

    def fn(x, cache):
        out = BaseModelOutputWithPast(last_hidden_state=x + 1, past_key_values=cache)
        return out, out.past_key_values is cache, out["past_key_values"] is cache, out.cache is cache

    x, cache = torch.randn(2), Cache()
    got = cdynamo.optimize("eager")(fn)(x, cache)
    ref = fn(x, cache)
    assert got[1:] == ref[1:] == (True, True, True)
    assert got[0].cache is cache and list(got[0].keys()) == list(ref[0].keys())


@dataclasses.dataclass
class OutputWithOwnPastField(ModelOutput):
    last_hidden_state: Optional[torch.Tensor] = None
    past_key_values: Optional[object] = None


@dataclasses.dataclass
class OldStyleOutput(ModelOutput):
    """As transformers <= 5.1x makes it: the dataclass __init__ itself (no renaming wrapper), `past_key_values` a
    field of its own."""
    last_hidden_state: Optional[torch.Tensor] = None
    past_key_values: Optional[object] = None


type.__setattr__(OldStyleOutput, "__init__", getattr(OldStyleOutput.__init__, "__wrapped__", OldStyleOutput.__init__))


def test_a_past_key_values_field_of_its_own_is_not_renamed():
    # transformers 5.17 (the GPU machine's) made BERT 4 graphs: the trace renamed past_key_values= to cache=.
    def fn(x):
        out = OldStyleOutput(last_hidden_state=x + 1, past_key_values=None)
        return out, out["last_hidden_state"], out.past_key_values

    x = torch.randn(2)
    got, graphs, dgraphs = _graphs(fn, x)
    _same(got, fn(x))
    assert graphs == dgraphs == 1


def test_the_renaming_wrapper_renames_even_onto_a_missing_cache_field():
    # transformers 5.2x's wrapper renames past_key_values= to cache= whatever the fields: eager raises TypeError.
    if not hasattr(OutputWithOwnPastField.__init__, "__wrapped__"):
        pytest.skip("this transformers has no renaming __init__ wrapper")

    def fn(x):
        return OutputWithOwnPastField(last_hidden_state=x + 1, past_key_values=None)

    with pytest.raises(TypeError):
        fn(torch.randn(2))
    with pytest.raises(TypeError):
        cdynamo.optimize("eager")(fn)(torch.randn(2))


def test_live_across_a_graph_break_and_shared():
    class Holder:
        pass

    def fn(x, holder):
        out = BaseModelOutput(last_hidden_state=x.sin(), attentions=(x.cos(),))
        holder.last = out
        print("graph break")
        return out.last_hidden_state + out.attentions[0], out

    x = torch.randn(5)
    h_ref, h_got = Holder(), Holder()
    ref = fn(x, h_ref)
    cnt = CompileCounter()
    got = cdynamo.optimize(cnt)(fn)(x, h_got)
    _same(got, ref)
    _same(h_got.last, h_ref.last)
    assert h_got.last is got[1]  # one object, stored and returned, as in eager
    assert cnt.frame_count == 2


def test_passed_to_a_function_and_indexed():
    def head(o):
        return o[0] * 2, o.to_tuple()[1:]

    def fn(x):
        out = BaseModelOutput(last_hidden_state=x - 1, hidden_states=(x, x + 1))
        a, rest = head(out)
        return a, rest, out

    x = torch.randn(3)
    got, graphs, dgraphs = _graphs(fn, x)
    _same(got, fn(x))
    assert graphs == dgraphs == 1


def test_fresh_objects_in_fields_do_not_recompile():
    # A cache made anew on each call and put in a field is only moved: guarded by type, not identity.
    class Cache:
        def __init__(self):
            self.seen = 0

    def fn(x):
        cache = Cache()
        out = BaseModelOutputWithPast(last_hidden_state=x * 3, **{CACHE: cache})
        return out[0], out.to_tuple()[0], out

    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(fn)
    for i in range(6):
        x = torch.randn(4)
        got, ref = opt(x), fn(x)
        torch.testing.assert_close(got[0], ref[0])
        assert type(getattr(got[2], CACHE)) is Cache
    assert cnt.frame_count == 1


def test_missing_key_raises_as_eager():
    def fn(x):
        out = BaseModelOutput(last_hidden_state=x + 1)
        return out["hidden_states"]

    with pytest.raises(KeyError, match="hidden_states"):
        cdynamo.optimize("eager")(fn)(torch.randn(2))
    with pytest.raises(IndexError):
        cdynamo.optimize("eager")(lambda x: BaseModelOutput(last_hidden_state=x)[3])(torch.randn(2))


@dataclasses.dataclass
class OverridingOutput(ModelOutput):
    logits: Optional[torch.Tensor] = None
    extra: Optional[torch.Tensor] = None

    def __getitem__(self, k):  # not ModelOutput's: the object is not modelled, the frame still equals eager
        return super().__getitem__(k) * 10 if k == "logits" else super().__getitem__(k)


@dataclasses.dataclass
class PlainOutput(ModelOutput):
    logits: Optional[torch.Tensor] = None
    extra: Optional[torch.Tensor] = None


def test_subclass_overriding_a_method_is_not_modelled():
    def fn(x):
        out = OverridingOutput(logits=x + 1)
        return out["logits"]

    x = torch.randn(3)
    torch.testing.assert_close(cdynamo.optimize("eager")(fn)(x), fn(x))


def test_user_defined_output_class_and_lone_non_tensor_field():
    def fn(x):
        a = PlainOutput(logits=x.exp(), extra=None)
        b = PlainOutput(logits=[("logits", x), ("extra", x + 1)])  # __post_init__'s iterator form
        return a, b

    x = torch.randn(2)
    got, ref = cdynamo.optimize("eager")(fn)(x), fn(x)
    _same(got[0], ref[0])
    assert list(got[1].keys()) == list(ref[1].keys()) == ["logits", "extra"]
    torch.testing.assert_close(got[1].extra, ref[1].extra)


def _same_state(a, b):
    """Equal objects down to their state: attribute dict (names, order, values) and dict items in order."""
    assert type(a) is type(b)
    assert list(vars(a)) == list(vars(b))
    assert list(a.keys()) == list(b.keys())
    for k in vars(a):
        x, y = vars(a)[k], vars(b)[k]
        _same(x, y)
        if x is not None:
            assert a[k] is x  # the dict item is the attribute's object


@pytest.mark.parametrize("fast", [True, False])
def test_rebuilt_output_state_equals_eager(fast, monkeypatch):
    """The returned ModelOutput is made without running its __init__ (cls.__new__, then the fields) where
    transformers keeps its set of classes registered as pytree nodes and the class is in it; otherwise (here: the
    registry is not a set) its own __init__ runs. Either way its attribute dict and dict items, in order, are
    eager's, and it flattens as a pytree node."""
    import transformers.utils.generic as generic
    from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions as Out

    def fn(x):
        return Out(last_hidden_state=x + 1, hidden_states=None, attentions=(x * 2,), cross_attentions=None)

    if not fast:
        monkeypatch.setattr(generic, "_registered_model_output_types", list(generic._registered_model_output_types))
    post_inits = []
    original = ModelOutput.__post_init__

    def counted(self):
        post_inits.append(1)
        original(self)
    monkeypatch.setattr(ModelOutput, "__post_init__", counted)
    x = torch.randn(2, 3)
    got = cdynamo.optimize("eager")(fn)(x)
    assert len(post_inits) == (0 if fast else 1)
    ref = fn(x)
    _same_state(got, ref)
    leaves, spec = torch.utils._pytree.tree_flatten(got)
    assert len(leaves) == 2 and list(torch.utils._pytree.tree_unflatten(leaves, spec).keys()) == list(ref.keys())
