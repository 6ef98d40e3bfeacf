# test_dead_code.py — owns the dead-code pass (issue 31 item 7): dead pure nodes leave the graph, as torch._dynamo
# drops them; effects, random draws and writes stay however dead.
import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


def _dead_reads(x, emb):
    unused = emb[:, :, -1]          # BART's dead inputs_embeds[:, :, -1]
    also = unused.float().sum() * 2  # a dead chain: every link goes
    return torch.sin(x) + 1


def _dead_effects(x, buf):
    buf.add_(1)                     # writes an input: stays
    torch.manual_seed(0)            # a break (not in the graph), kept as Python
    noise = torch.rand(3)           # draws: stays, so later draws are eager's
    x.size()
    return x * 2, torch.rand(3)


def _ops(fn, *args, **kw):
    import torch._dynamo.testing
    cnt = CompileCounter()
    cdynamo.optimize(cnt, **kw)(fn)(*args)
    dcnt = torch._dynamo.testing.CompileCounter()
    torch.compile(fn, backend=dcnt)(*args)
    return cnt.op_count, dcnt.op_count


def test_dead_reads_leave_the_graph_as_in_torch_dynamo():
    x, emb = torch.randn(3), torch.randn(2, 3, 4)
    mine, theirs = _ops(_dead_reads, x, emb)
    # sin, add; torch._dynamo keeps the dead method calls (float, sum) and what they read: 6
    assert mine == 2 and theirs >= mine, (mine, theirs)
    with cdynamo.config.patch(dead_code_elimination=False):
        cdynamo.reset()
        cnt = CompileCounter()
        cdynamo.optimize(cnt)(_dead_reads)(x, emb)
        assert cnt.op_count == 6  # getitem, float, sum, mul, sin, add: kept when the pass is off


def test_writes_and_random_draws_stay_and_match_eager():
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(_dead_effects)
    x = torch.randn(3)
    b1, b2 = torch.zeros(3), torch.zeros(3)
    torch.manual_seed(1)
    got = opt(x, b1)
    torch.manual_seed(1)
    want = _dead_effects(x, b2)
    torch.testing.assert_close(b1, b2)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.rand(3), (torch.manual_seed(0), torch.rand(3), torch.rand(3), torch.rand(3))[3])


def test_explain_counts_the_ops_that_remain():
    out = cdynamo.explain(_dead_reads)(torch.randn(3), torch.randn(2, 3, 4))
    assert out.op_count == 2, out
