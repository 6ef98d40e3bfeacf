# _autograd.py — owns the graph-node callable for a custom torch.autograd.Function's apply.
"""A graph node cannot name ``MyFunction.apply`` directly: torch.fx prints a target whose ``__module__``
starts with ``torch.`` as a torch path (``torch.autograd.function.apply``), which does not exist. The node
calls a ``FunctionApply`` holding the class instead; autograd records the custom backward at run time,
and aot_autograd traces through it (forward and backward) like any Python code."""


class FunctionApply:
    """``FunctionApply(MyFunction)(*args)`` is ``MyFunction.apply(*args)``."""

    def __init__(self, fn_cls):
        self.fn_cls = fn_cls
        self.__name__ = f"{fn_cls.__name__}_apply"
        self.__qualname__ = f"{fn_cls.__qualname__}.apply"

    def __call__(self, *args):
        return self.fn_cls.apply(*args)

    def __repr__(self):
        return f"{self.fn_cls.__qualname__}.apply"
