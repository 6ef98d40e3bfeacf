# backends/builtin.py — owns the built-in backends: eager, aot_eager (functorch AOT with no-op compilers), inductor.
import contextlib

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
    from . import _inductor_prefetch

    _inductor_prefetch.start(example_inputs)  # inductor's per-process CPU probes, beside the import below
    from torch._inductor.compile_fx import compile_fx

    _as_dynamo_graph(gm)
    kwargs = {"config_patches": config_patches} if config_patches else {}
    context = _tracing_context(gm, example_inputs)
    _inductor_prefetch.wait()
    if isinstance(context, contextlib.nullcontext):
        return compile_fx(gm, example_inputs, **kwargs)
    try:
        with context:
            return compile_fx(gm, _static_fakes(example_inputs), **kwargs)
    except Exception:  # noqa: BLE001
        # The context's fake mode cannot run some op of the graph (torch 2.11's CUDA _transformer_encoder_layer_fwd
        # has no fake kernel; without a context aot_autograd's own mode falls back to its real kernel): compile as
        # before, without the caches' context.
        return compile_fx(gm, example_inputs, **kwargs)


inductor._cdynamo_regions = True  # compiled by region by default (config.compile_regions, _regions.py)


@contextlib.contextmanager
def compile_batch():
    """The context regions compile their segments in: kernel builds of one segment overlap the next segment's
    lowering, all awaited before it closes (``_inductor_defer``); each segment's C++ kernels are built in one
    compiler run (``_inductor_kernels``). A training segment's backward is lowered with its forward, inside the
    batch (aot_autograd's ``force_non_lazy_backward_lowering``, the path it takes itself for graphs with symbolic
    sizes saved for backward), so its kernels join the batch too; without it aot_autograd lowers it at the first
    backward call, one segment at a time, each kernel its own build. The same backward graph and inputs are
    lowered either way (aot_autograd keeps them for the lazy lowering)."""
    import torch._functorch.config as functorch_config

    from . import _inductor_defer

    with functorch_config.patch(force_non_lazy_backward_lowering=True), _inductor_defer.deferred():
        yield


inductor._cdynamo_compile_batch = compile_batch


def _static_fakes(example_inputs):
    """The example inputs as fake tensors of the tracing context's fake mode, every size and stride static (as
    torch._dynamo hands a static graph's inputs to its backend). Real inputs would be fakified by aot_autograd with a
    symbol per size (``process_inputs`` asks for dynamic shapes unless a tensor has a symbolic context), and inductor
    would then compile size-generic kernels with sympy in every step: on Llama-8 training 58 symbols, a third of
    the compile's Python time. The graph is static (``_tracing_context`` returns no context otherwise) and cdynamo's
    guards pin its inputs' sizes and strides; inductor asserts them on entry (``assert_size_stride``)."""
    from torch._guards import TracingContext

    mode = TracingContext.get().fake_mode
    return [mode.from_tensor(x, static_shapes=True) for x in example_inputs]


def _tracing_context(gm, example_inputs):
    """torch's tracing context around an inductor compile of a static-shape graph (inference or training), as
    torch.compile has one:
    inductor's FX graph cache and AOTAutograd's cache read the ShapeEnv of its fake mode and bypass themselves
    without one ("No shape env"), so a second process would compile everything again. Its fake mode is a new one
    whose ShapeEnv sees static shapes only. A graph with Python number inputs, with symbolic shapes (its placeholders'
    example values are fake tensors or symbols of cdynamo's own ShapeEnv), or a caller's active context: left as
    they are. A compile that fails under the context is done again without it (``inductor``)."""
    import torch
    from torch._guards import TracingContext, detect_fake_mode, tracing
    from torch._subclasses.fake_tensor import FakeTensor

    if (TracingContext.try_get() is not None or detect_fake_mode(example_inputs) is not None
            or not all(isinstance(x, torch.Tensor) for x in example_inputs)):
        # A Python number input: aot_autograd would make it a symbol cdynamo's graph does not declare
        # (tensorify_python_scalars).
        return contextlib.nullcontext()
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        v = node.meta.get("val", node.meta.get("example_value"))
        if isinstance(v, (FakeTensor, torch.SymInt, torch.SymFloat, torch.SymBool)):
            return contextlib.nullcontext()
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    fake_mode = FakeTensorMode(shape_env=ShapeEnv(), static_shapes=True, allow_non_fake_inputs=True)
    return tracing(TracingContext(fake_mode))  # the inputs become static fakes of this mode (_static_fakes)
