# test_dict_key_sources.py — owns lookups of a tensor-keyed dict of the frame by a tensor of the frame (issue 31
# residue): the key guarded by its position in the dict and its identity with the input (torch._dynamo's
# ConstDictKeySource), not pinned to one tensor; each against eager and torch._dynamo on the same torch. torch 2.13's
# torch._dynamo guards `list(dict.keys(L['memo']))[0] is L['x']` too, but also ID_MATCHes that key (weakly): one graph
# per new input tensor, where cdynamo compiles once per layout of the dict.
import gc
import weakref

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


def lookup(x, memo):
    return memo[x] * 2 + x


def member(x, memo):
    if x in memo:
        return memo[x] + 1
    return x - 1


def _calls():
    """(x, memo) pairs: new tensors under the same layout, then the key at another position, then a dict without x."""
    out = []
    for _ in range(3):
        x = torch.randn(3)
        out.append((x, {x: torch.randn(3)}))
    x, other = torch.randn(3), torch.randn(3)
    out.append((x, {other: torch.randn(3), x: torch.randn(3)}))  # x's key moved to position 1
    x = torch.randn(3)
    out.append((x, {torch.randn(3): torch.randn(3)}))  # x is no key
    return out


def _run(fn, calls):
    outs = []
    for x, memo in calls:
        try:
            outs.append(fn(x, memo))
        except KeyError:
            outs.append("KeyError")
    return outs


@pytest.mark.parametrize("fn,graphs", [(lookup, 2), (member, 3)], ids=["lookup", "member"])
def test_new_inputs_under_the_same_layout_compile_once_as_torch_dynamo(fn, graphs):
    calls = _calls()
    expected = _run(fn, calls)
    mine = CompileCounter()
    got = _run(cdynamo.optimize(mine)(fn), calls)
    theirs = torch._dynamo.testing.CompileCounter()
    ref = _run(torch.compile(fn, backend=theirs), calls)
    for e, g, r in zip(expected, got, ref):
        if isinstance(e, str):
            assert e == g == r
        else:
            torch.testing.assert_close(g, e)
            torch.testing.assert_close(r, e)
    # Three calls of the first layout share one graph; the moved key (and, for `in`, the missing key) compile again.
    # torch._dynamo: one graph per call (each new key tensor fails its ID_MATCH).
    assert mine.frame_count == graphs and theirs.frame_count >= mine.frame_count, (mine.frame_count, theirs.frame_count)


def test_the_guard_names_the_key_position():
    reasons = []
    opt = cdynamo.optimize(CompileCounter(), guard_fail_fn=reasons.append)(lookup)
    x = torch.randn(3)
    opt(x, {x: torch.randn(3)})
    y, other = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(opt(y, {other: x, y: x}), x * 2 + y)
    text = " ".join(str(getattr(r, "reason", r)) for r in reasons)
    assert "local 'x' is key 0 of local 'memo'" in text, text


class MemoAcrossPrint(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        memo = {x: self.fc(x)}
        print("memo of", len(memo), "input(s)")
        return memo[x].relu() + x


def test_memo_looked_up_after_a_break_does_not_recompile():
    torch.manual_seed(0)
    model = MemoAcrossPrint()
    mine = CompileCounter()
    reasons = []
    opt = cdynamo.optimize(mine, guard_fail_fn=reasons.append)(model)
    theirs = torch._dynamo.testing.CompileCounter()
    ref = torch.compile(model, backend=theirs)
    for _ in range(4):
        x = torch.randn(2, 4)
        torch.testing.assert_close(opt(x), model(x))
        torch.testing.assert_close(ref(x), model(x))
    assert not reasons
    assert mine.frame_count == 2 and theirs.frame_count >= 2  # torch._dynamo: 2, then 1 more per new input


def test_the_cache_entry_does_not_keep_the_first_key_alive():
    opt = cdynamo.optimize(CompileCounter())(lookup)
    x = torch.randn(3)
    memo = {x: torch.randn(3)}
    opt(x, memo)
    alive = weakref.ref(x)
    del x, memo
    gc.collect()
    assert alive() is None


def test_a_dict_subclass_with_its_own_getitem_is_not_looked_up_at_c_level():
    class Doubling(dict):
        def __getitem__(self, k):
            return dict.__getitem__(self, k) * 2

    x = torch.randn(3)
    memo = Doubling({x: torch.ones(3)})
    torch.testing.assert_close(cdynamo.optimize(CompileCounter())(lookup)(x, memo), lookup(x, memo))


def test_a_key_far_into_a_big_dict_is_pinned_and_read_by_hash():
    # Past 16 entries a position would be walked on every check (an optimizer's state keyed by hundreds of
    # parameters): the key is pinned by identity and its item read by a hashed lookup, so a new key recompiles.
    def calls():
        out = []
        for _ in range(2):
            x = torch.randn(3)
            memo = {torch.randn(3): torch.randn(3) for _ in range(19)}
            memo[x] = torch.randn(3)  # position 19
            out.append((x, memo))
        return out

    cases = calls()
    expected = _run(lookup, cases)
    mine = CompileCounter()
    got = _run(cdynamo.optimize(mine)(lookup), cases)
    torch.testing.assert_close(got, expected)
    assert mine.frame_count == 2
    theirs = torch._dynamo.testing.CompileCounter()
    torch.testing.assert_close(_run(torch.compile(lookup, backend=theirs), cases), expected)
    assert theirs.frame_count == 2
