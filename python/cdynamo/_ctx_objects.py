# _ctx_objects.py — owns remaking, after a graph, a torch context object the trace made and entered (`with
# torch.autocast(...) as ac` held across a graph break): the object as eager's __enter__ left it.


def entered(make, attrs):
    """``make()`` (a fresh context object) with the attributes its __enter__ would have recorded (``attrs``: for
    torch.autocast, ``prev``, ``prev_fastdtype`` and ``prev_cache_enabled``, the state before the block, as the trace
    saw it under guards), so that a program reading them after the break sees eager's values."""
    obj = make()
    for name, value in attrs.items():
        setattr(obj, name, value)
    return obj
