# _trace.py — owns cdynamo's structured trace: with TORCH_TRACE (or CDYNAMO_TRACE) set, the compile events that
# torch's trace format carries (and tlparse renders), under torch._dynamo's compile ids.
"""Each code object cdynamo compiles is a frame (``frame_id``, in order of first compile; a ``__resume_at_*``
continuation is a frame of its own, as torch._dynamo numbers them) and each compile of it a ``frame_compile_id``:
compile id ``"<frame>/<compile>"``. Per compile: ``dynamo_start`` (the user stack), the original and modified
bytecode, ``dynamo_output_graph``, the guards (``dynamo_cpp_guards_str``), graph-break reasons
(``dynamo_graph_break_reason``), recompile reasons (``recompile_reasons``) and ``compilation_metrics``. The
backend runs under a torch CompileContext with the same id, so inductor's own artifacts of that graph land under
it. Events go through ``torch._logging.trace_structured`` (torch's format and files); nothing is written, and
this module imports nothing heavy, unless a trace directory is set.
"""
import os
import threading
import traceback

from . import _logging

_lock = threading.Lock()
_frames = {}        # code object -> frame id
_compiles = {}      # code object -> compiles so far (finished)
_open = {}          # code object -> (compile id, started): the compile under way
_recompile_reasons = {}  # code object -> reasons of the coming recompile
_enabled = None


def enabled():
    """True when a trace directory is set (TORCH_TRACE, or CDYNAMO_TRACE as its alias)."""
    global _enabled
    if _enabled is None:
        _enabled = _setup()
    return _enabled


def _setup():
    alias = os.environ.get("CDYNAMO_TRACE")
    if alias and not os.environ.get("TORCH_TRACE"):
        # torch read TORCH_TRACE at import and made its (lazy, still closed) trace handler without a directory:
        # give it the alias's, as if TORCH_TRACE had been set.
        import torch._logging._internal as internal
        os.environ["TORCH_TRACE"] = alias
        handler = internal.LOG_TRACE_HANDLER
        if handler is None or getattr(handler, "stream", None) is not None:
            return False
        handler.root_dir = alias
        if handler not in internal.trace_log.handlers:
            internal.trace_log.addHandler(handler)
    return bool(os.environ.get("TORCH_TRACE"))


def reset():
    """cdynamo.reset(): frame numbering goes on (ids stay unique in one trace), the open compiles are dropped."""
    with _lock:
        _open.clear()
        _recompile_reasons.clear()


def _compile_id(code, start=True):
    from torch._guards import CompileId
    with _lock:
        if code in _open:
            return _open[code]
        if not start:
            return None
        frame = _frames.setdefault(code, len(_frames))
        cid = CompileId(frame_id=frame, frame_compile_id=_compiles.get(code, 0))
        _open[code] = cid
    _emit("dynamo_start", cid, {"stack": _stack()})
    reasons = _recompile_reasons.pop(code, None)
    if reasons:
        _emit("artifact", cid, {"name": "recompile_reasons", "encoding": "json"}, reasons)
    return cid


def _finish(code):
    with _lock:
        cid = _open.pop(code, None)
        if cid is not None:
            _compiles[code] = _compiles.get(code, 0) + 1
    return cid


def _stack():
    from torch._logging import structured
    frames = [f for f in traceback.extract_stack()[:-3] if not f.filename.startswith(os.path.dirname(__file__))]
    return structured.from_traceback(frames)


def _emit(name, cid, metadata, payload=None):
    from torch._logging import trace_structured
    trace_structured(name, lambda: metadata, payload_fn=lambda: payload, compile_id=cid)


def compile_context(code):
    """A torch CompileContext for the backend call of a graph of ``code`` (its compile's id): inductor's artifacts
    of that graph then carry the same id. None when tracing is off."""
    if not enabled():
        return None
    from torch._guards import CompileContext, compile_context
    return compile_context(CompileContext(_compile_id(code)))


def on_graph(info, gm):
    if not enabled():
        return
    cid = _compile_id(info.get("code"))
    sizes = {}
    for node in gm.graph.nodes:
        v = node.meta.get("example_value")
        if hasattr(v, "shape"):
            sizes[node.name] = [int(s) if isinstance(s, int) else str(s) for s in v.shape]
    _emit("dynamo_output_graph", cid, {"sizes": sizes}, gm.print_readable(print_output=False))


def on_compiled(info):
    if not enabled():
        return
    code = info.get("code")
    cid = _compile_id(code)
    name = info.get("co_name", "?")
    for kind in ("original", "modified"):
        text = info.get(f"{kind}_bytecode")
        if text:
            _emit("artifact", cid, {"name": f"{name}_{kind.upper()}_BYTECODE", "encoding": "string"}, text)
    for reason in info.get("break_reasons") or ():
        _emit("artifact", cid, {"name": "dynamo_graph_break_reason", "encoding": "string"},
              _logging.format_break(reason))
    guards = info.get("guards") or []
    _emit("dynamo_cpp_guards_str", cid, {}, "\n".join(["TREE_GUARD_MANAGER:"] + [f"+- {g}" for g in guards]))
    _metrics(cid, info, guard_count=len(guards), graph_count=info.get("graph_count", 0))
    _finish(code)


def on_fallback(info):
    if not enabled() or info.get("code") is None:
        return
    code = info["code"]
    cid = _compile_id(code)
    _metrics(cid, info, fail_type=info.get("kind", "internal"), fail_reason=str(info.get("reason", "")))
    _finish(code)


def on_recompile(info):
    if not enabled() or info.get("code") is None:
        return
    with _lock:
        _recompile_reasons.setdefault(info["code"], []).append(str(info.get("reason", "?")))


def _metrics(cid, info, **extra):
    m = {"compile_id": f"{cid.frame_id}/{cid.frame_compile_id}", "co_name": info.get("co_name"),
         "co_filename": info.get("co_filename"), "co_firstlineno": info.get("co_firstlineno"),
         "cache_size": cid.frame_compile_id, "frame_key": str(cid.frame_id + 1),
         "entire_frame_compile_time_s": info.get("compile_time_s"), "frontend": "cdynamo"}
    m.update(extra)
    _emit("compilation_metrics", cid, m)
