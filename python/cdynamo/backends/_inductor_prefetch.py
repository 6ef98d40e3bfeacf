# backends/_inductor_prefetch.py — owns overlapping inductor's once-per-process CPU probes with the rest of its import, and
# reusing their answer across the processes of one boot of one machine.
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

A warm process skips the probes: their answer (which of the ISAs the CPU reports pass inductor's build-and-load
check) is kept in ``<inductor cache dir>/cdynamo/vec_isa.json`` under a fingerprint of everything it depends on:
this boot of this machine (Linux's boot id), the CPU's ISA flags, the interpreter, torch (version and library
directory) and the C++ compiler (inductor's own dry-compile fingerprint: compiler version, torch version). When the
last probing process found every reported ISA good, a process with the same fingerprint builds inductor's ISA list
with ``config.cpp.vec_isa_ok = True`` (inductor's own switch that takes each reported ISA as good without the
probe), in the probe thread, which gives the same list; the ISA-specific extra checks (AVX512-BF16, AMX) still run
(on this VM: 6 probe children instead of 10). The switch is set only while the thread builds that list (the main
thread, importing ``compile_fx``, compiles nothing until it joins the thread). Any other answer, a
fingerprint that differs, a user's own ``vec_isa_ok`` or a non-x86 Linux CPU: the probes run as before.

The threads import nothing: the modules they call into are imported by the main thread first (an import running
in two threads at once can meet torch's circular imports and fail). An error in a thread is dropped: inductor
then calls the same functions itself, as it would have without this.
"""
import hashlib
import json
import os
import sys
import threading

_thread = None
_VERDICT = "vec_isa.json"


def _probe(path, fingerprint):
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        if path is not None and _reuse(path, fingerprint):
            return
        pick_vec_isa()
        if path is not None:
            _save(path, fingerprint)
    except Exception:  # noqa: BLE001 - inductor repeats the call and reports its own error
        pass


def _candidates():
    """The ISAs the CPU reports, each taken as good (inductor's list with vec_isa_ok=True, not cached)."""
    from torch._inductor import config
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    with config.patch({"cpp.vec_isa_ok": True}):
        return [str(isa) for isa in valid_vec_isa_list.__wrapped__()]


def _fingerprint():
    """What the probes' answer depends on, hashed; None where the answer is not kept (not an x86 Linux CPU, no boot
    id, vec_isa_ok set by the user)."""
    import platform

    import torch
    from torch._inductor import config
    from torch._inductor.cpu_vec_isa import _get_isa_dry_compile_fingerprint, x86_isa_checker

    if sys.platform != "linux" or platform.machine() != "x86_64" or config.cpp.vec_isa_ok is not None:
        return None
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        return None
    parts = [boot, sorted(x86_isa_checker()), sys.executable, torch.__version__, os.path.dirname(torch.__file__),
             _get_isa_dry_compile_fingerprint(""), os.environ.get("LD_LIBRARY_PATH", "")]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _verdict_path():
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return os.path.join(cache_dir(), "cdynamo", _VERDICT)


def _save(path, fingerprint):
    """Keeps the probes' answer when every reported ISA passed (the only answer a later process reuses)."""
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    valid = [str(isa) for isa in valid_vec_isa_list()]
    if not valid or valid != _candidates():
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"fingerprint": fingerprint, "valid": valid}, f)
    os.replace(tmp, path)


def _reuse(path, fingerprint):
    """Builds inductor's ISA list without the probes when the kept answer applies; True when it did."""
    from torch._inductor import config
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    try:
        with open(path) as f:
            kept = json.load(f)
    except (OSError, ValueError):
        return False
    if not isinstance(kept, dict) or kept.get("fingerprint") != fingerprint or kept.get("valid") != _candidates():
        return False
    if valid_vec_isa_list.cache_info().currsize:
        return False  # inductor has its answer already
    with config.patch({"cpp.vec_isa_ok": True}):
        got = [str(isa) for isa in valid_vec_isa_list()]
    return got == kept["valid"]


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
    path = fingerprint = None
    try:
        fingerprint = _fingerprint()
        path = None if fingerprint is None else _verdict_path()
    except Exception:  # noqa: BLE001 - the probes run as before
        path = None
    _thread = threading.Thread(target=_probe, args=(path, fingerprint), name="cdynamo-inductor-probe", daemon=True)
    _thread.start()
    prefetch = getattr(torch._inductor.codecache.torch_key, "prefetch", None)  # torch >= 2.12
    if prefetch is not None:
        prefetch()


def wait():
    """Returns once the probes started by ``start`` are done (at once when none were started)."""
    if _thread is not None:
        _thread.join()
