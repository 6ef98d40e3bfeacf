# reduce.py — owns shrinking a failing fuzz program (line/block deletion delta reduction) for triage.
"""Shrinks the program of a failing seed while it still fails the same way.

  python -m tests.fuzz.reduce SEED [--backend eager] [--gen modules]

Candidates drop one statement (with its indented block), a helper definition, or turn a tuple return
into one of its items; a candidate is kept when the eager runs stay deterministic and cdynamo still
fails with the same category. Prints the reduced source and the failure.
"""
import argparse
import copy
import sys
import warnings

from .run import check_program


def _blocks(lines):
    """(start, end) of every statement: a line plus the lines indented deeper right after it."""
    out = []
    for i, l in enumerate(lines):
        if not l.strip() or l.lstrip().startswith(("#", "import ", "def f(", "global ")):
            continue
        ind = len(l) - len(l.lstrip())
        j = i + 1
        while j < len(lines) and lines[j].strip() and len(lines[j]) - len(lines[j].lstrip()) > ind:
            j += 1
        out.append((i, j))
    return out


def _return_variants(line):
    s = line.strip()
    if not s.startswith("return (") or not s.endswith(",)"):
        return []
    inner = s[len("return ("):-2]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    ind = line[: len(line) - len(line.lstrip())]
    return [ind + "return " + p for p in parts if p]


def reduce_program(prog, backend="eager", max_checks=600, log=None):
    base = check_program(prog, [backend])
    if base["status"] != "fail":
        return prog, base
    cat = base["fails"][0][1]

    def still_fails(src):
        cand = copy.copy(prog)  # keeps the program's kind (gen_modules programs build their own inputs)
        cand.source = src
        try:
            compile(src, "<cand>", "exec")
        except SyntaxError:
            return None
        r = check_program(cand, [backend])
        if r["status"] == "fail" and r["fails"][0][1] == cat:
            return r
        return None

    lines = prog.source.splitlines()
    best = base
    checks = 0
    changed = True
    while changed and checks < max_checks:
        changed = False
        # biggest blocks first, from the end (later statements depend on earlier ones)
        for (i, j) in sorted(_blocks(lines), key=lambda b: (-(b[1] - b[0]), -b[0])):
            if j > len(lines):
                continue
            cand = lines[:i] + lines[j:]
            checks += 1
            r = still_fails("\n".join(cand) + "\n")
            if r:
                lines, best, changed = cand, r, True
                break
            # a compound statement: try keeping only its body (dedented)
            head = lines[i].strip()
            if head.endswith(":") and not head.startswith(("def ", "class ")) and j - i > 1:
                ind = len(lines[i]) - len(lines[i].lstrip())
                body = [l for l in lines[i + 1:j]
                        if not l.strip().startswith(("else:", "elif", "except", "finally:"))]
                sub = len(lines[i + 1]) - len(lines[i + 1].lstrip()) - ind
                cand = lines[:i] + [l[sub:] if len(l) - len(l.lstrip()) >= sub + ind else l for l in body] + lines[j:]
                checks += 1
                r = still_fails("\n".join(cand) + "\n")
                if r:
                    lines, best, changed = cand, r, True
                    break
        if not changed:
            for k, l in enumerate(lines):
                for v in _return_variants(l):
                    cand = lines[:k] + [v] + lines[k + 1:]
                    checks += 1
                    r = still_fails("\n".join(cand) + "\n")
                    if r:
                        lines, best, changed = cand, r, True
                        break
                if changed:
                    break
        if log:
            log(f"reduce: {len(lines)} lines after {checks} checks")
    src = "\n".join(lines) + "\n"
    out = copy.copy(prog)
    out.source = src
    return out, best


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tests.fuzz.reduce")
    p.add_argument("seeds", type=int, nargs="+")
    p.add_argument("--backend", default="eager")
    p.add_argument("--gen", choices=["flat", "modules"], default="flat", help="the generator of the seeds")
    a = p.parse_args(argv)
    if a.gen == "modules":
        from .gen_modules import generate
    else:
        from .gen import generate
    warnings.simplefilter("ignore")
    for seed in a.seeds:
        prog, res = reduce_program(generate(seed), a.backend)
        print(f"===== seed {seed} args={prog.args} star={prog.star}")
        print(prog.source)
        print("->", res["status"], res["fails"])
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
