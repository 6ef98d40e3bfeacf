# _format.py — owns the plain-text tables (no tabulate dependency) for FX graphs and explain output.


def table(headers, rows):
    """Left-aligned columns separated by two spaces, a dashed rule under the headers (tabulate 'simple')."""
    cols = [list(map(str, headers))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(headers))]

    def line(cells):
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    out = [line(cols[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cols[1:]]
    return "\n".join(out)


def graph_tabular(gm):
    """The torch.fx graph of ``gm`` (a GraphModule or a Graph) as opcode/name/target/args/kwargs rows."""
    graph = getattr(gm, "graph", gm)
    rows = [(n.op, n.name, n.target, n.args, n.kwargs) for n in graph.nodes]
    return table(("opcode", "name", "target", "args", "kwargs"), rows)


OP_KINDS = ("call_function", "call_method", "call_module")


def op_count(gm):
    """Number of call_function/call_method/call_module nodes."""
    graph = getattr(gm, "graph", gm)
    return sum(1 for n in graph.nodes if n.op in OP_KINDS)


def code_key(gm):
    """The '<eval_with_key>.N' file name torch.fx gave the generated forward, or ''."""
    code = getattr(getattr(gm, "forward", None), "__code__", None)
    return code.co_filename if code is not None else ""
