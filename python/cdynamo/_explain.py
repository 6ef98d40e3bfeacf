# _explain.py — owns explain() (graphs, breaks, guards, compile times of one run) and the recorded run export() uses.
import dataclasses
import torch

from . import _callback, _format, _regions, config
from .eval_frame import OptimizedModule, _CallbackContext, reset


@dataclasses.dataclass
class BreakReason:
    reason: str
    filename: str = "?"
    lineno: object = "?"
    line: str = ""

    @property
    def hint(self):
        r = self.reason.lower()
        if any(w in r for w in ("jump", "bool", "branch", "control flow", "data-dependent", "__bool__")):
            return ("data-dependent control flow on a tensor: use torch.where / torch.cond, or move the "
                    "branch out of the compiled function")
        if "graph_break" in r:
            return "an explicit cdynamo.graph_break() call"
        if "disable" in r or "skip" in r:
            return "a call to a function marked cdynamo.disable or skipped by cdynamo"
        return "this construct is not supported inside a graph; it runs as plain Python between graphs"

    def __str__(self):
        text = f"{self.reason}\n      at {self.filename}:{self.lineno}"
        if self.line:
            text += f"\n        {self.line.strip()}"
        return text + f"\n      Hint: {self.hint}"


class _Recorder:
    """Collects what the C++ hook reports through a Callback during one explain/export run."""

    def __init__(self):
        self.graphs = []
        self.graph_infos = []
        self.frames = []        # on_compiled infos
        self.recompiles = []
        self.fallbacks = []
        self.break_reasons = []
        self.regions = []       # per graph: the regions its regional compilation uses (or [])
        self.region_plans = []  # per graph: how it is cut ("whole graph: <why>", ...; None: no repeated calls)

    def backend(self, gm, example_inputs):
        return gm.forward

    def on_graph(self, gm, example_inputs, info, seconds):
        self.graphs.append(gm)
        self.graph_infos.append(dict(info))
        regions, text = _regions.explain(gm, example_inputs)
        self.regions.append(regions)
        self.region_plans.append(text)

    def on_compiled(self, info):
        self.frames.append(dict(info))
        self._add_breaks(info.get("break_reasons"))

    def on_recompile(self, info):
        self.recompiles.append(dict(info))

    def on_fallback(self, info):
        self.fallbacks.append(dict(info))
        if info.get("kind") == "unsupported":
            breaks = info.get("break_reasons") or [{"reason": info.get("reason", "?"),
                                                    "filename": info.get("co_filename", "?"),
                                                    "lineno": info.get("co_firstlineno", "?")}]
            self._add_breaks(breaks)

    def _add_breaks(self, breaks):
        for b in breaks or ():
            self.break_reasons.append(BreakReason(str(b.get("reason", "?")), str(b.get("filename", "?")),
                                                  b.get("lineno", "?"), str(b.get("line") or "")))

    def guards(self):
        out = []
        for f in self.frames:
            out.extend(str(g) for g in f.get("guards") or ())
        return out


@dataclasses.dataclass
class ExplainOutput:
    graphs: list
    graph_count: int
    graph_break_count: int
    break_reasons: list
    op_count: int
    ops_per_graph: list
    out_guards: list
    compile_times: dict
    fallbacks: list
    regions: list = dataclasses.field(default_factory=list)  # per graph: [{"cls", "paths", "calls"}] (_regions)
    region_plans: list = dataclasses.field(default_factory=list)  # per graph: the cut's summary, or None
    region_policy: str = ""  # config.compile_regions when explain() ran, in words

    def __iter__(self):
        """The legacy 6-tuple: explanation, out_guards, graphs, ops_per_graph, break_reasons, verbose."""
        summary = (f"Dynamo produced {self.graph_count} graphs with {self.graph_break_count} graph breaks "
                   f"and {self.op_count} ops")
        return iter((summary, self.out_guards, self.graphs, self.ops_per_graph, self.break_reasons, str(self)))

    def __str__(self):
        lines = [f"Graph Count: {self.graph_count}", f"Graph Break Count: {self.graph_break_count}",
                 f"Op Count: {self.op_count}"]
        if self.break_reasons:
            lines.append("Break Reasons:")
            for i, b in enumerate(self.break_reasons, 1):
                lines.append(f"  Break Reason {i}:\n    Reason: {b}")
        if self.fallbacks:
            lines.append("Frames run as plain Python:")
            for f in self.fallbacks:
                lines.append(f"  {f.get('co_name')} ({f.get('co_filename')}:{f.get('co_firstlineno')}) "
                             f"[{f.get('kind')}]: {_first_line(f.get('reason', ''))}")
        lines.extend(_region_lines(self.regions, self.region_plans, self.region_policy))
        lines.append("Ops per Graph:")
        for i, ops in enumerate(self.ops_per_graph, 1):
            lines.append(f"  Ops {i}:")
            lines.extend(f"    {_target_name(op)}" for op in ops)
        lines.append("Out Guards:")
        lines.extend(f"  - {g}" for g in self.out_guards)
        if self.compile_times:
            lines.append("Compile Times (s):")
            lines.extend(f"  {name}: {', '.join(f'{t:.4f}' for t in ts)}" for name, ts in self.compile_times.items())
        return "\n".join(lines)


def _region_policy():
    """config.compile_regions now, in words (explain() cuts its graphs as this setting would)."""
    words = {None: "the automatic policy, as for inductor", True: "one region per layer, for every backend",
             False: "off"}.get(config.compile_regions, "?")
    return f"config.compile_regions={config.compile_regions}: {words}"


def _region_lines(regions, plans, policy):
    """The "Repeated Regions" section: each graph with repeated module calls as config.compile_regions cut it for a
    backend compiling by region (None: the automatic policy of inductor), or "whole graph" and why."""
    if not any(p is not None for p in plans):
        return []
    lines = [f"Repeated Regions ({policy}):"]
    for i, (graph_regions, text) in enumerate(zip(regions, plans), 1):
        if text is None:
            continue
        lines.append(f"  Graph {i}: {text}")
        for r in graph_regions:
            lines.append(f"    {r['cls']} x{r['calls']} ({r['paths'][0]} ... {r['paths'][-1]})")
    return lines


def _target_name(target):
    """torch.abs, operator.add, or a method name: what a person reads in a graph listing."""
    if isinstance(target, str):
        return f"Tensor.{target}"
    mod = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if not name:
        return repr(target)
    mod = {"_operator": "operator"}.get(mod, mod)
    if name.startswith("_VariableFunctionsClass."):  # torch.abs and the other C-bound torch functions
        mod, name = "torch", name.split(".", 1)[1]
    return f"{mod}.{name}" if mod else name


def _first_line(text):
    lines = str(text).strip().splitlines()
    return lines[0] if lines else ""


def _ops(gm):
    return [n.target for n in gm.graph.nodes if n.op in _format.OP_KINDS]


def _output(rec):
    times = {}
    for f in rec.frames:
        times.setdefault(f.get("co_name", "?"), []).append(float(f.get("compile_time_s", 0.0)))
    ops = [_ops(gm) for gm in rec.graphs]
    return ExplainOutput(graphs=list(rec.graphs), graph_count=len(rec.graphs),
                         graph_break_count=len(rec.break_reasons), break_reasons=list(rec.break_reasons),
                         op_count=sum(len(o) for o in ops), ops_per_graph=ops, out_guards=rec.guards(),
                         compile_times=times, fallbacks=list(rec.fallbacks), regions=list(rec.regions),
                         region_plans=list(rec.region_plans),
                         region_policy=_region_policy())


def _run_recorded(fn, args, kwargs, nopython, rec=None):
    rec = _Recorder() if rec is None else rec
    cb = _callback.Callback(rec.backend, nopython=nopython, recorder=rec, backend_name="eager")
    ctx = _CallbackContext(cb)
    wrapped = OptimizedModule(fn, ctx) if isinstance(fn, torch.nn.Module) else ctx(fn)
    reset()  # cached frames would not report their graphs
    try:
        result = wrapped(*args, **kwargs)
    finally:
        reset()  # nothing compiled for explain/export is reused by later optimize() calls
    return rec, result


def explain(fn, *args, **kwargs):
    """``explain(fn)(*args)`` or ``explain(fn, *args)``: run fn once with capture and report the graphs,
    graph breaks (reason, file:line, hint), guards and compile times as an ExplainOutput."""
    if not callable(fn):
        raise TypeError(f"explain expects a callable, got {type(fn).__name__} {fn!r}")

    def inner(*a, **k):
        rec, _ = _run_recorded(fn, a, k, nopython=False)
        return _output(rec)

    if args or kwargs:
        return inner(*args, **kwargs)
    return inner
