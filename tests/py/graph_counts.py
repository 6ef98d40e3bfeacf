# graph_counts.py — owns the helpers behaviour tests share to count graphs: a function compiled by cdynamo
# with a counting backend, the graphs torch._dynamo makes for the same call, and both beside eager.
import torch

import cdynamo
from cdynamo.testing import CompileCounter


def compiled(fn, backend=None):
    """(cdynamo-optimized fn, the CompileCounter or backend it compiles with)."""
    cnt = backend or CompileCounter()
    return cdynamo.optimize(cnt)(fn), cnt


def dynamo_graphs(fn, *args):
    """Graphs torch._dynamo compiles for fn(*args), from a reset cache (left reset)."""
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter as DC
    torch._dynamo.reset()
    c = DC()
    torch.compile(fn, backend=c)(*args)
    torch._dynamo.reset()
    return c.frame_count


def eager_cdynamo_dynamo(fn, *args):
    """(eager result, cdynamo's result, cdynamo's CompileCounter, torch._dynamo's CompileCounter) for fn(*args)."""
    import torch._dynamo.testing
    ref = fn(*args)
    got, cnt = compiled(fn)
    got = got(*args)
    dcnt = torch._dynamo.testing.CompileCounter()
    torch.compile(fn, backend=dcnt)(*args)
    return ref, got, cnt, dcnt
