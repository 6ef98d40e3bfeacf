# _callback.py — owns the Callback object the C++ frame hook calls (compile_graph, on_compiled, on_recompile,
# on_fallback), the Python-side counters (this module's and cdynamo.utils'), and the once-per-code fallback warnings.
import collections
import sys
import time
import warnings

from . import _core, _dealias, _dynamic, _logging, _trace, _verify, config, utils
from .exc import BackendCompilerFailed, CdynamoWarning

GuardFail = collections.namedtuple("GuardFail", ["reason", "orig_code"])

# Python-side counters; cleared by cdynamo.reset() (cdynamo.utils.counters, the public ones, are not).
counters = collections.Counter()
_warned = set()

_FALLBACK_WHAT = {
    "internal": "internal error",
    "backend": "backend failed",
    "recompile_limit": "recompile limit reached",
}


def clear_state():
    _trace.reset()
    counters.clear()
    _warned.clear()
    utils.reset_compile_times()


def _first_line(text):
    text = str(text).strip()
    return text.splitlines()[0] if text else ""


def _mark_static_inputs(gm, indices):
    """Marks the placeholders of an nn.Module's parameters and buffers (``indices``, from the C++ side) as
    torch._dynamo marks them, ``meta['tensor_dict']['_dynamo_static_input_type'] = 'unguarded'``: inductor's CUDA
    graphs then read them in place (recording again if one moves) instead of copying them on every call."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i in indices:
        if 0 <= i < len(placeholders):
            placeholders[i].meta.setdefault("tensor_dict", {})["_dynamo_static_input_type"] = "unguarded"


def _regions_wanted(backend):
    """Whether a backend's graphs are compiled by region (_regions.py): ``config.compile_regions`` True (any
    backend), False (none), None (the backends marked ``_cdynamo_regions = True``: inductor and
    compile(mode=/options=))."""
    flag = config.compile_regions
    return bool(getattr(backend, "_cdynamo_regions", False)) if flag is None else flag


class Callback:
    """What the C++ hook calls while a thread runs inside an optimized callable.

    ``backend`` is a resolved backend callable; ``recorder`` (optional) gets every event (explain/export).
    """

    def __init__(self, backend, *, nopython=False, guard_fail_fn=None, dynamic=None, recorder=None,
                 backend_name=None):
        self.backend = backend
        self.nopython = bool(nopython)
        self.guard_fail_fn = guard_fail_fn
        self.dynamic = dynamic
        self.recorder = recorder
        self.backend_name = backend_name or getattr(backend, "__name__", type(backend).__name__)

    def __repr__(self):
        return f"<cdynamo Callback backend={self.backend_name!r} nopython={self.nopython}>"

    @property
    def wants_text(self):
        """Whether the C++ side should print graphs, bytecode and guards for this compile (for explain/export
        recorders and the graph/bytecode/guards logs); skipped otherwise, as it costs more than the rest."""
        return (self.recorder is not None or any(_logging.is_enabled(k) for k in ("graph", "bytecode", "guards"))
                or _trace.enabled())

    @property
    def wants_node_meta(self):
        """Whether graphs get node meta (stack_trace, nn_module_stack, source_fn_stack): always for explain/export
        recorders; for a backend unless it is marked ``_cdynamo_node_meta = False`` (the built-in eager backend,
        which reads none of it)."""
        return (self.recorder is not None or getattr(self.backend, "_cdynamo_node_meta", True) is not False
                or config.compile_regions is True)  # regions are found from nn_module_stack

    # -- called by C++ --

    def compile_graph(self, gm, example_inputs, info):
        _core.refresh_disable_codes()  # torch._dynamo may have been imported since optimize()
        if _logging.is_enabled("graph"):
            _logging.emit("graph", _logging.format_graph(info, gm))
        if config.dead_code_elimination:
            from . import _dead_code  # on first compile (import cdynamo stays cheap)
            removed = _dead_code.eliminate(gm)
            if removed:
                info["op_count"] = max(0, int(info.get("op_count", 0) or 0) - removed)
                info.pop("graph_tabular", None)  # the graph log prints gm as it is now
                info.pop("graph_readable", None)
        if info.get("static_inputs") and self.wants_node_meta:
            _mark_static_inputs(gm, info["static_inputs"])
        # Read before the backend runs: it may rewrite gm.
        verify = config.verify_correctness and not _dynamic.has_fake(example_inputs)
        reference = _verify.eager_reference(gm, example_inputs) if verify else None
        _trace.on_graph(info, gm)
        t0 = time.perf_counter()
        try:
            context = _trace.compile_context(info.get("code"))
            if context is None:
                compiled = self._compile(gm, example_inputs, info)
            else:
                with context:
                    compiled = self._compile(gm, example_inputs, info)
        except Exception as e:
            counters["backend_failures"] += 1
            raise BackendCompilerFailed(self.backend_name, e) from e
        utils.record_compile_time("call_user_compiler", time.perf_counter() - t0)
        if not callable(compiled):
            err = TypeError(f"backend returned {type(compiled).__name__}, expected a callable")
            counters["backend_failures"] += 1
            raise BackendCompilerFailed(self.backend_name, err)
        floats = _dynamic.float_input_positions(example_inputs)
        if floats:  # float arguments the graph takes as 0-d tensors, as torch._dynamo passes them
            compiled = _dynamic.floats_as_tensors(compiled, floats)
        if reference is not None:
            try:
                _verify.check(compiled, example_inputs, reference, self.backend_name)
            except Exception as e:
                counters["backend_failures"] += 1
                raise BackendCompilerFailed(self.backend_name, e) from e
        counters["graphs"] += 1
        utils.counters["stats"]["unique_graphs"] += 1
        utils.counters["stats"]["calls_captured"] += int(info.get("op_count", 0) or 0)
        if self.recorder is not None:
            self.recorder.on_graph(gm, example_inputs, info, time.perf_counter() - t0)
        return compiled

    def _compile(self, gm, example_inputs, info):
        """The backend's callable for ``gm``: inside a DDP forward, one per DDP gradient bucket (_ddp.py); else by
        region when the policy wants it and the graph has repeated module calls (_regions.py; each distinct segment
        goes through ``_call_backend``); else the whole graph."""
        # _ddp and _regions are imported only where they may apply (torch.distributed initialized; a backend or
        # config that asks for regions), so an eager compile imports neither.
        if "torch.distributed" in sys.modules and sys.modules["torch.distributed"].is_available() \
                and sys.modules["torch.distributed"].is_initialized():
            from . import _ddp
            ddp = _ddp.active_module()
            if ddp is not None:
                return _ddp.compile_split(ddp, gm, example_inputs, info.get("static_inputs"), self._call_backend,
                                          utils.counters["stats"])
        if _regions_wanted(self.backend):
            from . import _regions
            compiled = _regions.compile_regions(gm, example_inputs, self._call_backend,
                                                by_work=config.compile_regions is None,
                                                batch=getattr(self.backend, "_cdynamo_compile_batch", None))
            if compiled is not None:
                return compiled
        return self._call_backend(gm, example_inputs)

    def _call_backend(self, gm, example_inputs):
        """The backend's callable for ``gm``; a graph that changes an input sharing its storage with another input
        goes through ``_dealias`` first (aot_autograd's synthetic-base path is wrong on torch 2.13)."""
        if _dynamic.has_fake(example_inputs):
            _dynamic.drop_dead_sym_nodes(gm)  # before the plan: it maps placeholders to example inputs
        todo = _dealias.plan(gm, example_inputs)
        if todo is None:
            return self._backend_or_captured(gm, list(example_inputs))
        kind, pairs = todo
        utils.counters["stats"][f"aliased_input_mutation_{kind}"] += 1
        if kind == "eager":
            _logging.emit("graph_breaks", "graph runs as captured, not compiled by the backend: it changes an input "
                          "that shares its storage with another input and no input covers that storage")
            return gm.forward
        new, inputs, kept, checks = _dealias.rewrite(gm, example_inputs, pairs)
        return _dealias.wrap(self._backend_or_captured(new, inputs), gm, kept, checks)

    def _backend_or_captured(self, gm, example_inputs):
        """``self.backend(gm, example_inputs)``; when aot_autograd cannot turn a float input's item() uses into
        tensor ops it asks for a restart with that float specialised, which only torch._dynamo's own loop does:
        the graph then runs as captured (``gm.forward``, counted and logged)."""
        try:
            return self.backend(gm, example_inputs)
        except Exception as e:
            if type(e).__name__ != "TensorifyScalarRestartAnalysis" or \
                    not _dynamic.float_input_positions(example_inputs):
                raise
        utils.counters["stats"]["float_input_not_tensorified"] += 1
        _logging.emit("graph_breaks", "graph runs as captured, not compiled by the backend: a float input's "
                      "uses could not be made tensor ops (TensorifyScalarRestartAnalysis)")
        return gm.forward

    def on_compiled(self, info):
        _trace.on_compiled(info)
        counters["frames"] += 1
        utils.counters["frames"]["total"] += 1
        utils.counters["frames"]["ok"] += 1
        for reason in info.get("break_reasons") or ():
            utils.counters["graph_break"][str(reason.get("reason", "?"))] += 1
        for kind in info.get("restarts") or ():  # traces started again before this one (interp/restart.h)
            utils.counters["restarts"][kind] += 1
        if "compile_time_s" in info:
            utils.record_compile_time("translate", info["compile_time_s"])
        if _logging.is_enabled("bytecode"):
            _logging.emit("bytecode", _logging.format_bytecode(info))
        if _logging.is_enabled("guards"):
            _logging.emit("guards", _logging.format_guards(info.get("guards") or (), info.get("guard_tree")))
        for reason in info.get("break_reasons") or ():
            _logging.emit("graph_breaks", _logging.format_break(reason))
        if self.recorder is not None:
            self.recorder.on_compiled(info)

    def on_recompile(self, info):
        _trace.on_recompile(info)
        counters["recompiles"] += 1
        utils.counters["recompiles"][str(info.get("reason", "?"))] += 1
        _logging.emit("recompiles", _logging.format_recompile(info))
        if self.recorder is not None:
            self.recorder.on_recompile(info)
        if self.guard_fail_fn is not None:
            self.guard_fail_fn(GuardFail(info.get("reason", ""), info.get("code")))

    def on_fallback(self, info):
        _trace.on_fallback(info)
        kind = info.get("kind", "internal")
        counters[f"fallback_{kind}"] += 1
        utils.counters["frames"]["total"] += 1  # tried, not ok: the frame runs as Python
        if self.recorder is not None:
            self.recorder.on_fallback(info)
        if kind == "unsupported":
            reasons = info.get("break_reasons") or [{
                "reason": info.get("reason", "?"), "filename": info.get("co_filename", "?"),
                "lineno": info.get("co_firstlineno", "?"), "line": ""}]
            for reason in reasons:
                utils.counters["unimplemented"][str(reason.get("reason", "?"))] += 1
                _logging.emit("graph_breaks", _logging.format_break(reason))
            return
        _logging.emit("graph_breaks", f"{_FALLBACK_WHAT.get(kind, kind)}: {info.get('reason', '?')}")
        key = (info.get("co_filename"), info.get("co_firstlineno"), info.get("co_name"), kind)
        if key in _warned:
            return
        _warned.add(key)
        what = _FALLBACK_WHAT.get(kind, kind)
        reason = str(info.get("reason", "")).strip() if config.verbose else _first_line(info.get("reason", ""))
        for prefix in (what + ":", kind.replace("_", " ") + ":"):
            if reason.startswith(prefix):  # the C++ reason may repeat what the message already says
                reason = reason[len(prefix):].strip()
        filename = str(info.get("co_filename", "?"))
        lineno = info.get("co_firstlineno", 0)
        lineno = lineno if isinstance(lineno, int) else 0
        msg = (f"cdynamo: {what} in {info.get('co_name', '?')} "
               f"({filename}:{lineno}): {reason}; running as plain Python")
        warnings.warn_explicit(msg, CdynamoWarning, filename, lineno, module="cdynamo")
