# test_autocast_objects.py — owns the state of the object of `with torch.autocast(...) as ac` split by graph breaks
# (issue 31 residue): the `ac` the continuations and the caller see carries what eager's __enter__ recorded on it (prev,
# prev_fastdtype, prev_cache_enabled) besides its identity (test_library_constructs.py); against eager and
# torch._dynamo on the same torch.
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


def make(graph_break):
    def f(x):
        held = []
        with torch.autocast("cpu", dtype=torch.bfloat16) as ac:
            held.append(ac)
            y = x @ x
            graph_break()
            scale = 2.0 if ac.fast_dtype is torch.bfloat16 else 3.0  # read in the continuation
            z = (y @ y).float() * scale
        return z, ac, held[0] is ac

    return f


def state(ac):
    return {k: v for k, v in vars(ac).items()}


def _outer(fn, x):
    with torch.autocast("cpu", dtype=torch.float16, cache_enabled=False):  # the state the block records as prev*
        return fn(x)


@pytest.mark.parametrize("outer", [False, True], ids=["plain", "inside_another_autocast"])
def test_the_object_after_a_break_is_as_eagers_enter_left_it(outer):
    x = torch.randn(4, 4)
    call = _outer if outer else (lambda fn, a: fn(a))
    z_eager, ac_eager, same_eager = call(make(lambda: None), x)
    assert "prev" in vars(ac_eager)
    mine = CompileCounter()
    z, ac, same = call(cdynamo.optimize(mine)(make(cdynamo.graph_break)), x)
    torch.testing.assert_close(z, z_eager)
    assert same and same_eager and type(ac) is type(ac_eager)
    assert state(ac) == state(ac_eager)  # prev, prev_fastdtype, prev_cache_enabled as eager's __enter__ set them
    assert mine.frame_count == 2


def test_torch_dynamo_graph_count_on_the_same_program():
    # torch 2.13's torch._dynamo hands the continuation None for `ac` (its `ac.fast_dtype` raises AttributeError);
    # cdynamo runs it as eager does, with as many graphs as torch._dynamo makes before failing.
    x = torch.randn(4, 4)
    theirs = torch._dynamo.testing.CompileCounter()
    try:
        z, ac, _ = torch.compile(make(torch._dynamo.graph_break), backend=theirs)(x)
        torch.testing.assert_close(z, make(lambda: None)(x)[0])
    except AttributeError:
        pass
    mine = CompileCounter()
    cdynamo.optimize(mine)(make(cdynamo.graph_break))(x)
    assert mine.frame_count >= theirs.frame_count
