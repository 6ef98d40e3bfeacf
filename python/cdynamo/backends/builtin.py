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


_graph_ids = iter(range(1 << 62))  # graphs given to inductor, in order (stable across processes: cache keys)


def _as_dynamo_graph(gm):
    """Gives ``gm`` what aot_autograd reads from a torch._dynamo graph to find its static inputs (the placeholders
    marked by ``_callback._mark_static_inputs``): ``meta['dynamo_compile_id']``, ``_param_name_to_source`` and a
    ``_dynamo_source`` per placeholder. Without them aot_autograd treats the graph as not captured by a frontend and
    inductor's CUDA graphs copy every parameter into their memory on every call. Best effort: a torch without these
    names compiles the graph unmarked."""
    if "dynamo_compile_id" in gm.meta:
        return
    try:
        from torch._dynamo.source import LocalSource
        from torch._guards import CompileId
    except ImportError:
        return
    n = next(_graph_ids)
    names = [name for name, _ in gm.named_parameters(remove_duplicate=False)]
    names += [name for name, _ in gm.named_buffers(remove_duplicate=False)]
    gm._param_name_to_source = {name: LocalSource(f"__cdynamo_graph_attr_{name}") for name in names}
    for node in gm.graph.find_nodes(op="placeholder"):
        node._dynamo_source = LocalSource(f"__cdynamo_input_{node.name}")
    gm.meta["dynamo_compile_id"] = CompileId(frame_id=n, frame_compile_id=0)


@register_backend(name="inductor")
def inductor(gm, example_inputs, config_patches=None):
    """TorchInductor's compile_fx (C++/OpenMP kernels on CPU)."""
    from torch._inductor.compile_fx import compile_fx

    _as_dynamo_graph(gm)

    if config_patches:
        return compile_fx(gm, example_inputs, config_patches=config_patches)
    return compile_fx(gm, example_inputs)
