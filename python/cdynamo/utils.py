# utils.py — owns the tooling counters (torch._dynamo.utils.counters) and compile_times(), fed by _callback's events.
"""Counters and compile times for tools, named as in ``torch._dynamo.utils``.

``counters`` is a ``defaultdict(Counter)`` updated from the events the C++ hook reports:

- ``counters["frames"]["total"]``: frames cdynamo tried to compile (a continuation is a frame of its own);
  ``counters["frames"]["ok"]``: those that compiled (a frame that falls back to Python is not ok);
- ``counters["graph_break"][reason]``: graph breaks by reason;
- ``counters["unimplemented"][reason]``: constructs that made a whole frame run as Python;
- ``counters["recompiles"][reason]``: recompiles by the guard that failed first;
- ``counters["stats"]["unique_graphs"]`` / ``["calls_captured"]``: graphs compiled and their call nodes.

Like torch._dynamo, ``cdynamo.reset()`` does not clear ``counters`` (call ``counters.clear()``); it clears the
compile times.
"""
import collections

counters = collections.defaultdict(collections.Counter)

# phase -> seconds of each compile: "translate" (one frame: trace, guards, backend, codegen) and
# "call_user_compiler" (the backend alone).
compilation_time_metrics = {}


def record_compile_time(phase, seconds):
    compilation_time_metrics.setdefault(phase, []).append(float(seconds))


def reset_compile_times():
    compilation_time_metrics.clear()


def compile_times(repr="str", aggregate=False):  # noqa: A002 - torch._dynamo.utils.compile_times' signature
    """Compile times per phase, as torch._dynamo.utils.compile_times.

    ``repr="str"``: a printable table (``Function, Runtimes (s)`` then one row per phase, laid out by the
    ``tabulate`` package where it is installed, as torch._dynamo's is); ``repr="csv"``:
    ``(headers, values)``; any other ``repr``: None. ``aggregate=True`` sums the compiles of a phase into one
    value, else every compile's time is listed.
    """

    def fmt(values, item):
        if aggregate:
            return item(sum(values))
        return ", ".join(map(item, values))

    if repr == "str":
        rows = [(k, fmt(v, lambda x: f"{x:.4f}")) for k, v in compilation_time_metrics.items()]
        headers = ("Function", "Runtimes (s)")
        try:
            import tabulate
        except ImportError:
            table = "\n".join(", ".join(map(str, row)) for row in [headers, *rows])
        else:
            table = tabulate.tabulate(rows, headers=headers)
        return "cdynamo compilation metrics:\n" + table
    if repr == "csv":
        return list(compilation_time_metrics), [fmt(v, lambda x: f"{x:.6f}")
                                                 for v in compilation_time_metrics.values()]
    return None
