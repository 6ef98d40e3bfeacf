# backends/builtin.py — owns the built-in backends: eager, aot_eager (functorch AOT with no-op compilers), inductor.
from .registry import register_backend


@register_backend(name="eager")
def eager(gm, example_inputs):
    """Runs the captured graph as is."""
    return gm.forward


eager._cdynamo_node_meta = False  # reads no node meta: the graphs it gets are made without (a cheaper first call)


def _boxed_nop(gm, example_inputs):
    from torch._functorch.aot_autograd import make_boxed_func

    from .. import _core

    # The backward graph runs later, from autograd, where capture is on: its frame is the backend's code,
    # never the user's, so it is marked skip (the forward's runs under the graph call, with capture off).
    _core.C().mark_skip(gm.forward.__code__)
    return make_boxed_func(gm.forward)


@register_backend(name="aot_eager")
def aot_eager(gm, example_inputs):
    """AOT autograd traces forward and backward graphs; both run without further compilation."""
    from torch._functorch.aot_autograd import aot_module_simplified

    return aot_module_simplified(gm, example_inputs, fw_compiler=_boxed_nop, bw_compiler=_boxed_nop)


@register_backend(name="inductor")
def inductor(gm, example_inputs, config_patches=None):
    """TorchInductor's compile_fx (C++/OpenMP kernels on CPU)."""
    from torch._inductor.compile_fx import compile_fx

    if config_patches:
        return compile_fx(gm, example_inputs, config_patches=config_patches)
    return compile_fx(gm, example_inputs)
