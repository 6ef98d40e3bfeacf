# arch_metrics.py — measures the architecture targets of docs/architecture.md: longest C++ functions, public members
# of the interpreter's state classes (Tracer, Frame, Trace, TraceOptions, Output), cycles among csrc/ folders and among
# python/cdynamo modules, by-name imports from C++.
import argparse
import ast
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTAINER = re.compile(r"\b(namespace|class|struct|union|enum)\b|extern\s+\"C\"")


def _strip(text):
    """C++ text with comments, string and char literals blanked (newlines kept, so line numbers hold)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """(name, first line, line count) of every function body in a C++ file (lambdas count with their function)."""
    text = _strip(open(path, encoding="utf-8").read())
    stack, found, last = [], [], 0
    for i, c in enumerate(text):
        if c == "{":
            header = text[last:i]
            in_function = any(kind == "function" for kind, _, _ in stack)
            if in_function:
                kind = "block"
            elif CONTAINER.search(header) and "(" not in header.split("{")[-1].split(")")[0] or (
                    CONTAINER.search(header) and not header.rstrip().endswith((")", "const", "override", "noexcept"))):
                kind = "container"
            elif "(" in header and "=" not in header.split("(")[0]:
                kind = "function"
            else:
                kind = "block"
            name = ""
            if kind == "function":
                m = re.search(r"([~\w:<>]+)\s*\([^()]*(\([^()]*\)[^()]*)*\)[^()]*$", header)
                name = m.group(1) if m else header.strip().split("\n")[-1][:40]
            stack.append((kind, text.count("\n", 0, i) + 1, name))
            last = i + 1
        elif c == "}":
            if stack:
                kind, line, name = stack.pop()
                if kind == "function":
                    found.append((name, line, text.count("\n", 0, i) + 1 - line + 1))
            last = i + 1
        elif c == ";":
            last = i + 1
    return found


def cpp_files():
    for folder, _, names in os.walk(os.path.join(ROOT, "csrc")):
        for name in sorted(names):
            if name.endswith((".cpp", ".h")):
                yield os.path.join(folder, name)


def longest_functions(limit):
    rows = []
    for path in cpp_files():
        for name, line, count in functions(path):
            rows.append((count, os.path.relpath(path, ROOT), line, name))
    rows.sort(reverse=True)
    return rows[:limit], sum(1 for r in rows if r[0] > 150)


def folder_graph():
    """Edges folder -> folder from #include "..." lines of csrc/."""
    edges = {}
    for path in cpp_files():
        here = os.path.basename(os.path.dirname(path))
        for line in open(path, encoding="utf-8"):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            target = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
            if not os.path.exists(target):
                target = os.path.join(ROOT, "csrc", m.group(1))
            there = os.path.basename(os.path.dirname(target))
            if there != here and os.path.dirname(os.path.dirname(target)) == os.path.join(ROOT, "csrc"):
                edges.setdefault(here, set()).add(there)
    return edges


def python_graph(lazy):
    """Edges module -> module among python/cdynamo (module level only, or also function-level if ``lazy``)."""
    base = os.path.join(ROOT, "python", "cdynamo")
    edges = {}
    for folder, _, names in os.walk(base):
        for name in names:
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, name), base)[:-3].replace(os.sep, ".")
            mod = rel[:-len(".__init__")] if rel.endswith("__init__") else rel
            mod = "" if mod == "__init__" else mod
            pkg = mod if name == "__init__.py" else mod.rpartition(".")[0]
            tree = ast.parse(open(os.path.join(folder, name), encoding="utf-8").read())
            nodes = ast.walk(tree) if lazy else tree.body
            for node in nodes:
                for target in _imported(node, pkg):
                    if target != mod:
                        edges.setdefault(mod or "cdynamo", set()).add(target or "cdynamo")
    return edges


def _imported(node, pkg):
    if isinstance(node, ast.ImportFrom):
        if node.level:
            parts = pkg.split(".") if pkg else []
            base = parts[:len(parts) - node.level + 1] if node.level > 1 else parts
            prefix = ".".join(base + ([node.module] if node.module else []))
        elif node.module and node.module.startswith("cdynamo"):
            prefix = node.module[len("cdynamo."):] if node.module != "cdynamo" else ""
        else:
            return []
        if node.module:
            return [prefix]
        return [".".join(filter(None, [prefix, a.name])) for a in node.names]
    if isinstance(node, ast.Import):
        return [a.name[len("cdynamo."):] for a in node.names if a.name.startswith("cdynamo.")]
    if isinstance(node, (ast.If, ast.Try)):  # module-level conditional imports count
        out = []
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                out += _imported(child, pkg)
        return out
    return []


def cycles(edges):
    """Strongly connected components with more than one member (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


# The interpreter's state classes (docs/architecture.md "Structure of the core": at most 12 public members each).
TRACER_LIKE = ["interp/tracer.h:Tracer", "interp/frame.h:Frame", "interp/trace.h:Trace", "interp/trace.h:TraceOptions",
               "interp/output.h:Output"]


def public_members(header, cls):
    """Public data members and methods of ``cls`` in ``header`` (declarations at the class's top level)."""
    text = _strip(open(header, encoding="utf-8").read())
    m = re.search(r"\b(class|struct)\s+%s\b[^;{]*\{" % cls, text)
    if not m:
        return None
    access = "public" if m.group(1) == "struct" else "private"
    depth, i, decl, count = 1, m.end(), "", 0
    while depth and i < len(text):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 1 and access == "public" and "(" in decl:
                count += 1
                decl = ""
        elif depth == 1:
            decl += c
            label = re.search(r"\b(public|private|protected)\s*:\s*$", decl)
            if label:
                access, decl = label.group(1), ""
            elif c == ";":
                if access == "public" and decl.strip(" ;\n") and not re.match(r"\s*(using|friend|static_assert)\b",
                                                                             decl):
                    count += 1
                decl = ""
        i += 1
    return count


def cpp_imports():
    """Python modules the C++ core imports by name."""
    found = []
    for path in cpp_files():
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            for m in re.finditer(r'(?:PyImport_ImportModule|module_::import|import_module|loaded_module)\s*\(\s*"([\w.]+)"', line):
                found.append((m.group(1), os.path.relpath(path, ROOT), n))
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--classes", default=",".join(TRACER_LIKE))
    args = ap.parse_args()
    rows, over = longest_functions(args.top)
    print(f"## longest functions in csrc/ ({over} over 150 lines)")
    for count, path, line, name in rows:
        print(f"{count:5d}  {path}:{line}  {name}")
    print("\n## public members")
    for spec in args.classes.split(","):
        path, cls = spec.split(":")
        print(f"{cls:20s} {public_members(os.path.join(ROOT, 'csrc', path), cls)}")
    fg = folder_graph()
    print("\n## csrc folder includes")
    for k in sorted(fg):
        print(f"{k:9s} -> {', '.join(sorted(fg[k]))}")
    print("cycles:", cycles(fg) or "none")
    print("\n## python/cdynamo import cycles")
    print("module level:", cycles(python_graph(False)) or "none")
    print("with function-level imports:", cycles(python_graph(True)) or "none")
    print("\n## Python modules imported by name from C++")
    for mod, path, line in cpp_imports():
        print(f"{mod:28s} {path}:{line}")


if __name__ == "__main__":
    main()
