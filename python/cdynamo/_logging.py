# _logging.py — owns CDYNAMO_LOGS parsing, programmatic enable/disable, and the log record formats.
"""Log kinds: graph, guards, bytecode, graph_breaks, recompiles, regions ("all" or "+all" = every kind).

``CDYNAMO_LOGS=graph,guards`` in the environment at import, or ``cdynamo._logging.enable("graph")``.
Records go to sys.stderr (looked up at write time) unless ``set_stream`` chose another stream.
"""
import os
import sys
import warnings

KINDS = ("graph", "guards", "bytecode", "graph_breaks", "recompiles", "regions")

_enabled = set()
_stream = None


def parse(spec):
    """The set of kinds named by a CDYNAMO_LOGS-style string; ValueError on an unknown name."""
    kinds = set()
    for raw in (spec or "").split(","):
        name = raw.strip().lstrip("+").strip()
        if not name:
            continue
        if name == "all":
            kinds.update(KINDS)
        elif name in KINDS:
            kinds.add(name)
        else:
            raise ValueError(f"unknown cdynamo log kind {name!r}; valid: all, {', '.join(KINDS)}")
    return kinds


def _names(kinds):
    out = set()
    for k in kinds or ("all",):
        if not isinstance(k, str):
            raise TypeError(f"log kinds are strings, got {type(k).__name__}")
        out |= parse(k)
    return out


def enable(*kinds, stream=None):
    """Turn on the given log kinds (all when none given); optionally send records to ``stream``."""
    _enabled.update(_names(kinds))
    if stream is not None:
        set_stream(stream)


def disable(*kinds):
    """Turn off the given log kinds (all when none given)."""
    _enabled.difference_update(_names(kinds))


def enabled():
    return set(_enabled)


def is_enabled(kind):
    return kind in _enabled


def set_stream(stream):
    """Write records to ``stream`` (None: sys.stderr at the time of writing)."""
    global _stream
    _stream = stream


def emit(kind, text):
    if kind not in _enabled:
        return
    out = _stream if _stream is not None else sys.stderr
    out.write(f"[cdynamo:{kind}] {text.rstrip()}\n\n")
    out.flush()


# ---- record formats (what the seeds print) ----

def format_graph(info, gm=None):
    from . import _format

    table = info.get("graph_tabular") or (_format.graph_tabular(gm) if gm is not None else "")
    key = _format.code_key(gm) if gm is not None else ""
    head = f"{info.get('name', '__compiled_fn')} {key}".rstrip()
    return f"{head}\n{table}"


def _where(info):
    return f"{info.get('co_name', '?')} {info.get('co_filename', '?')} {info.get('co_firstlineno', '?')}"


def format_bytecode(info):
    parts = [f"ORIGINAL BYTECODE {_where(info)}", info.get("original_bytecode", "").rstrip(), "",
             f"MODIFIED BYTECODE {_where(info)}", info.get("modified_bytecode", "").rstrip()]
    for name, text in info.get("resume_bytecode") or ():
        parts += ["", f"RESUME FUNCTION {name}", str(text).rstrip()]
    return "\n".join(parts)


def format_guards(guards, tree=None):
    """The guard list, then (when given) the guard tree: one line per source, indented under the source it is
    read from, with the guards checked on it."""
    text = "\n".join(["GUARDS:"] + [f" - {g}" for g in guards])
    if tree:
        text += "\nGUARD TREE:\n" + "\n".join(f"  {line}" for line in tree.rstrip("\n").split("\n"))
    return text


def format_break(reason):
    where = f"{reason.get('filename', '?')}:{reason.get('lineno', '?')}"
    text = f"Graph break: {reason.get('reason', '?')}\n  at {where}"
    if reason.get("line"):
        text += f"\n    {str(reason['line']).strip()}"
    return text


def format_recompile(info):
    return (f"Recompiling function {info.get('co_name', '?')} in "
            f"{info.get('co_filename', '?')}:{info.get('co_firstlineno', '?')}\n"
            f"    triggered by the following guard failure:\n    - {info.get('reason', '?')}")


def _init_from_env():
    for item in os.environ.get("CDYNAMO_LOGS", "").split(","):
        try:
            _enabled.update(parse(item))
        except ValueError as e:  # a typo must not break `import cdynamo`
            warnings.warn(f"CDYNAMO_LOGS: {e}", stacklevel=2)


_init_from_env()
