# test_weak_dynamic.py — owns maybe_mark_dynamic's contract (a weak mark): the dimension is symbolic, and a trace
# that needs it static specialises it without error, as under torch._dynamo; mark_dynamic's strict mark raises.
import pytest
import torch
import torch._dynamo

import cdynamo
from cdynamo.testing import CompileCounter

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


def _branch_on_size(x):
    if x.shape[0] == 4:  # specialises the size
        return x * 2
    return x - 1


def _sum_rows(x):
    return x.sum(0) + x.shape[0]


def test_weak_mark_that_the_trace_specialises_compiles_as_torch_dynamo():
    x = torch.randn(4, 3)
    cdynamo.maybe_mark_dynamic(x, 0)
    torch.testing.assert_close(cdynamo.optimize("eager")(_branch_on_size)(x), _branch_on_size(x))
    y = torch.randn(4, 3)
    torch._dynamo.maybe_mark_dynamic(y, 0)
    torch.testing.assert_close(torch.compile(_branch_on_size, backend="eager")(y), _branch_on_size(y))


def test_strict_mark_that_the_trace_specialises_raises_as_torch_dynamo():
    x = torch.randn(4, 3)
    cdynamo.mark_dynamic(x, 0)
    with pytest.raises(Exception, match="specialised|specialized|marked dynamic"):
        cdynamo.optimize("eager")(_branch_on_size)(x)
    y = torch.randn(4, 3)
    torch._dynamo.mark_dynamic(y, 0)
    with pytest.raises(Exception):
        torch.compile(_branch_on_size, backend="eager")(y)


def test_weak_mark_stays_symbolic_when_the_trace_allows():
    cnt = CompileCounter()
    opt = cdynamo.optimize(cnt)(_sum_rows)
    for n in (4, 5, 6):
        x = torch.randn(n, 3)
        cdynamo.maybe_mark_dynamic(x, 0)
        torch.testing.assert_close(opt(x), _sum_rows(x))
    assert cnt.frame_count == 1  # one dynamic graph serves every size
