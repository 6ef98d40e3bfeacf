# backends/_inductor_prefetch.py — owns overlapping inductor's once-per-process CPU probes with the rest of its import.
"""Why: the first inductor compile of a process that has CPU inputs, cache hit or not, calls
``torch._inductor.cpu_vec_isa.pick_vec_isa()``, which builds (once per cache directory) and then loads, in one
child Python each, a probe library for every vector ISA the CPU reports, one after the other; and it hashes torch's
own sources (``codecache.torch_key()``) for the cache keys. On a warm start that is most of the first call (about
4 s of 7 at a load of 10 on the 2-core VM). Both are functions inductor calls anyway. Here the probes run in a
thread, as inductor runs them, and the hash in torch's own prefetch thread (``torch_key.prefetch()``, made for
this), while the main thread goes on importing ``compile_fx`` and preparing the graph; the probe thread is joined
before ``compile_fx`` runs, so inductor finds the answers in its own per-process caches. What it saves depends on
an idle core: nothing measurable on the saturated 2-core VM (docs/benchmarks.md). Probing the ISAs side by side,
one thread each, was slower there (4.5 s against 3.7 s: the children compete for the two cores), so it is not done.

The threads import nothing: the modules they call into are imported by the main thread first (an import running
in two threads at once can meet torch's circular imports and fail). An error in a thread is dropped: inductor
then calls the same functions itself, as it would have without this.
"""
import threading

_thread = None


def _probe():
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        pick_vec_isa()
    except Exception:  # noqa: BLE001 - inductor repeats the call and reports its own error
        pass


def start(example_inputs):
    """Starts the probes (once per process) when a graph has a CPU tensor input or none at all (inductor's
    C++ backend). Imports what the thread needs first, on the calling thread."""
    global _thread
    if _thread is not None:
        return
    import torch

    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    if tensors and not any(x.device.type == "cpu" for x in tensors):
        return
    try:
        import torch._inductor.codecache  # noqa: F401
        import torch._inductor.cpp_builder  # noqa: F401
        import torch._inductor.cpu_vec_isa  # noqa: F401
        import torch.utils._filelock  # noqa: F401
        import torch.utils.cpp_extension  # noqa: F401  (cpp_builder imports it on its first build)
    except ImportError:
        return
    _thread = threading.Thread(target=_probe, name="cdynamo-inductor-probe", daemon=True)
    _thread.start()
    prefetch = getattr(torch._inductor.codecache.torch_key, "prefetch", None)  # torch >= 2.12
    if prefetch is not None:
        prefetch()


def wait():
    """Returns once the probes started by ``start`` are done (at once when none were started)."""
    if _thread is not None:
        _thread.join()
