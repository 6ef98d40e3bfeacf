# backends/_inductor_defer.py — owns overlapping the kernel builds of several inductor compiles made in a row
# (regional compilation's segments): each graph's wait for its kernels is put off to the end of the batch.
"""Why: inductor's output module for a graph submits its kernels to the compile workers (g++ on CPU, Triton on GPU)
when it is imported and then, still at import, waits for all of them (``async_compile.wait(globals())``: each
future in the module's globals is replaced by its kernel). Regions compile 3 graphs one after another (before the
layers, one layer, after), so the workers build a segment's few kernels while the main thread sits idle, and the
next segment's lowering starts only after. Measured on the 2-core VM, Llama-8 inference, inductor warm, load 2:
8 kernel builds, 5.7 s of worker CPU in 5.8 s of waiting (no overlap), out of a 9.6 s first call.

``deferred()`` is a context for one thread: while it is open, the wait of an output module being imported on that
thread by ``GraphLowering._compile_to_module_lines`` (a fresh compile) or ``CompiledFxGraph.after_deserialization``
(an FX graph cache hit) is recorded instead of run; the recorded waits run, in
order, with inductor's own ``AsyncCompile.wait``, when the context closes (also when it closes on an error, so no
module is left holding futures), on the same thread. Between the two the module's ``call`` is never run: the compiled
callables go back to the caller (``_regions.compile_regions``) only after the context closed, so a kernel is always
the finished build of its own source (futures are keyed by the source's hash, as inductor keys them).

Not deferred (inductor's behaviour exactly): another thread's waits; waits outside an output module's import (the
compile-time autotuning block's scope, kernel benchmark modules); the module of a graph compiled while another
graph is being lowered on the thread (``GraphLowering.run`` open: a benchmark subgraph, compiled and run to choose
an algorithm); AOT and C++-wrapper graphs; GPU graphs while inductor bundles their Triton kernels into the FX graph
cache entry (it collects the ones finished by the end of the compile; with caches off the waits are put off); and every wait while an inductor setting runs code right after it is
compiled (max-autotune's benchmarks, fusion benchmarks, the benchmark harness with bandwidth profiling, autotuning
at compile time). The five patched methods (``AsyncCompile.wait``; ``AsyncCompile.cpp_pybinding``, which hands a
module's C++ kernels to ``_inductor_kernels`` to be built in one compiler run; the two module loaders above; and
``GraphLowering.run``, which counts open lowerings) are installed once, on first use, and call through to inductor's
own code when no context is open on the calling thread. A cache hit goes through the same collection, so a warm
process loads the segment's merged library its cold run built (same kernels, same source, same file).
"""
import contextlib
import threading

_local = threading.local()
_install_lock = threading.Lock()
_installed = False
_original_wait = None  # inductor's own AsyncCompile.wait

# inductor settings under which a compiled module or kernel may run before compile_fx returns
# (benchmark_epilogue_fusion, on by default, acts only on max-autotune's templates)
_RUNS_AT_COMPILE = ("max_autotune", "max_autotune_gemm", "max_autotune_pointwise", "benchmark_fusion",
                    "benchmark_kernel", "cpp_wrapper", "fx_wrapper")


def _runs_at_compile(config):
    if any(getattr(config, name, False) for name in _RUNS_AT_COMPILE):
        return True
    if getattr(config, "benchmark_harness", False) and getattr(config, "profile_bandwidth_output", None):
        return True
    return bool(getattr(config.triton, "autotune_at_compile_time", False))


def _install():
    global _installed, _original_wait
    with _install_lock:
        if _installed:
            return
        from torch._inductor import config
        from torch._inductor.async_compile import AsyncCompile
        from torch._inductor.graph import GraphLowering
        from torch._inductor.output_code import CompiledFxGraph

        wait = AsyncCompile.wait
        to_module = GraphLowering._compile_to_module_lines
        run = GraphLowering.run
        from_cache = CompiledFxGraph.after_deserialization
        pybinding = AsyncCompile.cpp_pybinding

        def collecting_pybinding(self, argtypes, source_code):
            collector = getattr(_local, "collector", None)
            if collector is not None:
                future = collector.add(argtypes, source_code)
                if future is not None:
                    return future
            return pybinding(self, argtypes, source_code)

        def deferring_wait(self, scope):
            collector = getattr(_local, "collector", None)
            if collector is not None:  # the module's kernels are all asked for: start their builds
                _local.collector = None
                collector.submit(AsyncCompile.submit)
            pending = getattr(_local, "pending", None)
            if pending is not None and getattr(_local, "importing", False) and isinstance(scope, dict) \
                    and "__file__" in scope and not _runs_at_compile(config):
                pending.append((self, scope))
                _stats()["deferred_kernel_waits"] += 1
                return None
            return wait(self, scope)

        def importing_window(load):
            """``load`` (one that imports a graph's output module) with the module's import marked."""
            def marked(self, *args, **kwargs):
                if getattr(_local, "pending", None) is None or getattr(_local, "lowering", 0) \
                        or getattr(self, "aot_mode", False) or getattr(self, "cpp_wrapper", False) \
                        or _bundles_gpu_kernels(self):
                    return load(self, *args, **kwargs)
                _local.importing = True
                _local.collector = _collector(config)
                try:
                    return load(self, *args, **kwargs)
                finally:
                    _local.importing = False
                    collector, _local.collector = getattr(_local, "collector", None), None
                    if collector is not None:  # a module that never waited: its kernels are built all the same
                        collector.submit(AsyncCompile.submit)
            return marked

        def counted_run(self, *args):
            _local.lowering = getattr(_local, "lowering", 0) + 1
            try:
                return run(self, *args)
            finally:
                _local.lowering -= 1

        _original_wait = wait
        AsyncCompile.wait = deferring_wait
        AsyncCompile.cpp_pybinding = collecting_pybinding
        GraphLowering._compile_to_module_lines = importing_window(to_module)
        CompiledFxGraph.after_deserialization = importing_window(from_cache)
        GraphLowering.run = counted_run
        _installed = True


def _bundles_gpu_kernels(graph):
    """Whether the FX graph cache entry of ``graph`` (a GraphLowering or CompiledFxGraph) bundles its GPU kernels:
    inductor collects the Triton kernels finished by the end of the compile into the entry, so a put-off wait would
    leave them out (warm processes would build them again)."""
    devices = set(getattr(graph, "device_types", None) or ())
    if devices <= {"cpu"}:
        return False
    from torch._inductor.triton_bundler import TritonBundler

    return TritonBundler.is_enabled()


def _stats():
    from .. import utils

    return utils.counters["stats"]


def _collector(config):
    """A collector of the module's C++ kernels for one build (``_inductor_kernels``), or None: switched off, a
    setting that runs code at compile time, or kernels built in the calling thread (one compile thread)."""
    from torch._inductor.async_compile import get_compile_threads

    from .. import config as cd_config
    from . import _inductor_kernels

    if (not cd_config.merge_cpp_kernels or _runs_at_compile(config) or get_compile_threads() <= 1
            or not _inductor_kernels.available()):
        return None
    return _inductor_kernels.Collector()


@contextlib.contextmanager
def deferred():
    """Inductor compiles made on this thread inside the context wait for their kernels when it closes (see the
    module docstring). Nested contexts join the outermost one."""
    if getattr(_local, "pending", None) is not None:
        yield
        return
    _install()
    wait = _original_wait
    pending = _local.pending = []
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        _local.pending = None
        _local.importing = False
        _local.collector = None
        error = None
        for compiler, scope in pending:  # every module gets its kernels, even after an error
            try:
                wait(compiler, scope)
            except Exception as e:  # noqa: BLE001
                error = error or e
        if error is not None and not failed:
            raise error
