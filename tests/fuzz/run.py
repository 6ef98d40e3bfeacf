# run.py — owns the differential fuzz runner: per seed, exec the generated program, run eager vs cdynamo, compare; batches in subprocesses.
"""Differential fuzz runner for cdynamo.

Per seed: generate the program (gen.py), build inputs deterministically, run it eagerly (twice, to drop
programs that are not deterministic by themselves) and compiled (a fresh ``exec`` so code objects are
new, ``cdynamo.reset()`` first) with each backend, four calls each: the same inputs, new values of the
same shapes, new shapes (and sometimes float64 / other Python argument values), aliased arguments
(``y is x``, ``lst[0] is x``, ...). After every call it
compares the return value (tensors: dtype, shape, values; nested containers; scalars; ``is`` identity
with the arguments), the arguments (tensors, lists, dicts, the ``obj`` attributes), the program's
globals ``G`` / ``GL``, the printed output and the exception (type; message reported).

Seeds run in worker subprocesses (chunks), so a crash or a hang of the interpreter is reported as a
failure of the seed that was running (rerun alone to tell a batch-only crash).

  python -m tests.fuzz.run --start 0 --count 500 [--backends eager,aot_eager] [--aot-every 4]
                           [--time-budget S] [--chunk 100] [-v] [--show SEED] [--gen modules]

``--gen modules`` runs the module-shaped programs of gen_modules.py: they build their own inputs
(``Program.make_inputs``), and the state of their ``MODEL`` (parameters with grads, buffers, Python attributes
of every submodule) and ``CFG`` is compared after every call with ``G`` / ``GL``.

Backends: ``eager``, ``aot_eager`` (cdynamo); ``dynamo`` / ``dynamo_aot`` (torch.compile with backend "eager" /
"aot_eager", for triage).
"""
import argparse
import builtins
import contextlib
import copy
import io
import json
import linecache
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

_HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(_HERE))

# A worker that reports nothing for this long is killed and its running program fails as a hang: a hang guard per
# program (a program takes about a second; a slow, loaded machine several), never a limit on the range.
SEED_TIMEOUT = 300

CATEGORIES = ["crash", "hang", "wrong exception", "internal error", "wrong result", "identity",
              "wrong mutation", "wrong global", "wrong print", "runner error"]


# ---------------------------------------------------------------------------------------------- inputs
class Box:
    """The ``obj`` argument: attribute writes on it are compared."""

    def __init__(self, w, count):
        self.w = w
        self.count = count
        self.hist = []

    def __repr__(self):
        return f"Box({vars(self)})"


def shapes_for(seed):
    r = random.Random(seed * 1000003 + 17)
    def pair():
        a = r.randint(2, 5)
        b = r.choice([v for v in range(2, 7) if v != a])
        return a, b
    s1 = pair()
    s2 = pair()
    while s2 == s1:
        s2 = pair()
    dtype3 = r.choice(["float32", "float32", "float64"])
    return s1, s2, dtype3


NCALLS = 4


def make_inputs(prog, call):
    """Inputs of call ``call``: 0 base; 1 new values, same shapes; 2 new shapes (sometimes float64), other Python
    values and container lengths; 3 base shapes with aliased arguments (y is x, lst[0] is x, d['a'] is x, ...)."""
    if hasattr(prog, "make_inputs"):
        return prog.make_inputs(call)  # gen_modules programs build their own inputs
    import torch
    s1, s2, dt3 = shapes_for(prog.seed)
    shape = s2 if call == 2 else s1
    dtype = getattr(torch, dt3) if call == 2 else torch.float32
    g = torch.Generator().manual_seed(prog.seed * 31 + call)
    T = lambda: (torch.randn(shape, generator=g) * 1.5).to(dtype)
    vals = {
        "x": T(), "y": T(), "n": 3 if call == 2 else 2, "flag": call != 2,
        "lst": [T(), T()] + ([T()] if call == 2 else []), "d": {"a": T(), "b": T()},
        "obj": Box(T(), 2 if call == 2 else 1), "p": T().requires_grad_(),
    }
    if call == 2:
        vals["d"]["c"] = T()
    rest = [T()] if prog.star in ("args", "both") else []
    if call == 3:
        x = vals["x"]
        vals["y"] = x
        vals["lst"][0] = x
        vals["d"]["a"] = x
        vals["obj"].w = x
        rest = [x] if rest else []
    args = [vals[a] for a in prog.args]
    kw = {"scale": 0.5 if call == 2 else 2.0} if prog.star in ("kwargs", "both") else {}
    return args, rest, kw


def alias_signature(objs):
    """For every tensor / list / dict reachable from objs (in a fixed walk order): the first path holding the same object."""
    import torch
    seen, sig = {}, []

    def walk(o, path, depth=0):
        if depth > 4:
            return
        if isinstance(o, (torch.Tensor, list, dict, Box)):
            first = seen.setdefault(id(o), path)
            sig.append((path, first))
            if first != path:
                return
        if isinstance(o, (list, tuple)):
            for i, v in enumerate(o):
                walk(v, f"{path}[{i}]", depth + 1)
        elif isinstance(o, dict):
            for k, v in o.items():
                walk(v, f"{path}[{k!r}]", depth + 1)
        elif isinstance(o, Box):
            for k, v in vars(o).items():
                walk(v, f"{path}.{k}", depth + 1)

    walk(list(objs), "args")
    return [(p, f) for p, f in sig if p != f]


# ---------------------------------------------------------------------------------------------- comparison
# The node name, and where the tensor repr wraps before it (a longer name moves it to a line of its own).
_GRAD_FN = re.compile(r",\s*grad_fn=<\w+>")
_NUM = re.compile(r"(-?(?:\d+\.\d*|\.\d+|\d+)(?:e[+-]?\d+)?|nan|-?inf)")


def compare_text(a, b, rtol=1e-3, atol=2e-4):
    """Printed output: equal text, numbers equal up to a small tolerance (4-digit tensor printing)."""
    if a == b:
        return None
    # autograd node names differ by construction under aot_eager (CompiledFunctionBackward)
    a, b = _GRAD_FN.sub(", grad_fn=<>", a), _GRAD_FN.sub(", grad_fn=<>", b)
    pa, pb = _NUM.split(a), _NUM.split(b)
    if len(pa) != len(pb):
        return _text_diff(a, b)
    for i, (x, y) in enumerate(zip(pa, pb)):
        if i % 2 == 0:
            if x != y:
                return _text_diff(a, b)
        elif x != y:
            try:
                fx, fy = float(x), float(y)
            except ValueError:
                return _text_diff(a, b)
            if not (fx == fy or (math.isnan(fx) and math.isnan(fy)) or abs(fx - fy) <= atol + rtol * abs(fy)):
                return _text_diff(a, b)
    return None


def _text_diff(a, b):
    la, lb = a.splitlines(), b.splitlines()
    for i in range(max(len(la), len(lb))):
        x = la[i] if i < len(la) else "<missing>"
        y = lb[i] if i < len(lb) else "<missing>"
        if x != y:
            return f"line {i}: eager {x[:80]!r} vs compiled {y[:80]!r}"
    return "differs"


# Set while an aot_eager run is compared: aot_autograd's backward returns zeros, not None, for a leaf that
# reaches only outputs the loss does not use (torch.compile(backend="aot_eager") does the same), so a grad
# that eager leaves None may be all zeros.
ZERO_GRAD_IS_NONE = False


def compare(ref, res, path="out"):
    """None if equal, else a short description of the first difference."""
    import numpy as np
    import torch
    if isinstance(ref, torch.Tensor):
        if not isinstance(res, torch.Tensor):
            return f"{path}: tensor vs {type(res).__name__}"
        if ref.dtype != res.dtype:
            return f"{path}: dtype {ref.dtype} vs {res.dtype}"
        if ref.shape != res.shape:
            return f"{path}: shape {tuple(ref.shape)} vs {tuple(res.shape)}"
        if ref.requires_grad != res.requires_grad:
            return f"{path}: requires_grad {ref.requires_grad} vs {res.requires_grad}"
        if (ZERO_GRAD_IS_NONE and ref.is_leaf and ref.grad is None and res.grad is not None
                and not res.grad.detach().any()):
            pass  # aot_autograd: a parameter that only reaches unused outputs gets zeros (torch.compile too)
        elif ref.is_leaf and (ref.grad is None) != (res.grad is None):
            return f"{path}.grad: {'None' if ref.grad is None else 'set'} vs {'None' if res.grad is None else 'set'}"
        if ref.is_leaf and ref.grad is not None:
            m = compare(ref.grad, res.grad, path + ".grad")
            if m:
                return m
        try:
            torch.testing.assert_close(res.detach(), ref.detach(), equal_nan=True, rtol=1e-4, atol=1e-4)
        except AssertionError as e:
            msg = str(e).splitlines()
            return f"{path}: values differ ({' '.join(l.strip() for l in msg[:3])[:160]})"
        return None
    if isinstance(ref, np.ndarray):
        if not isinstance(res, np.ndarray):
            return f"{path}: ndarray vs {type(res).__name__}"
        return compare(torch.from_numpy(ref.copy()), torch.from_numpy(res.copy()), path)
    if (type(ref) is not type(res) and not isinstance(ref, type)
            and type(ref).__qualname__ == type(res).__qualname__ and type(ref).__module__.startswith("fuzzprog_")):
        # the program's own classes (one per exec): tuple / dict subclasses by items, others by __dict__
        if isinstance(ref, tuple) and isinstance(res, tuple):
            return compare(tuple(ref), tuple(res), path)
        if isinstance(ref, dict) and isinstance(res, dict):
            return compare(dict(ref), dict(res), path) or compare(vars(ref), vars(res), path + ".__dict__")
        if hasattr(ref, "__dict__") and hasattr(res, "__dict__"):
            return compare(vars(ref), vars(res), path + ".__dict__")
    if type(ref) is not type(res):
        # namedtuples (torch.return_types) / tuple subclasses must keep their type
        return f"{path}: type {type(ref).__name__} vs {type(res).__name__}"
    if isinstance(ref, (list, tuple)):
        if len(ref) != len(res):
            return f"{path}: len {len(ref)} vs {len(res)}"
        for i, (a, b) in enumerate(zip(ref, res)):
            m = compare(a, b, f"{path}[{i}]")
            if m:
                return m
        return None
    if isinstance(ref, dict):
        if list(ref.keys()) != list(res.keys()):
            return f"{path}: keys {list(ref.keys())} vs {list(res.keys())}"
        for k in ref:
            m = compare(ref[k], res[k], f"{path}[{k!r}]")
            if m:
                return m
        return None
    if isinstance(ref, (set, frozenset)):
        return None if ref == res else f"{path}: {ref} vs {res}"
    if isinstance(ref, float):
        if ref == res or (math.isnan(ref) and math.isnan(res)) or abs(ref - res) <= 1e-4 + 1e-4 * abs(ref):
            return None
        return f"{path}: {ref!r} vs {res!r}"
    if isinstance(ref, Box):
        return compare(vars(ref), vars(res), path + ".__dict__")
    if isinstance(ref, (int, bool, str, type(None), torch.Size, torch.dtype)):
        return None if ref == res else f"{path}: {ref!r} vs {res!r}"
    return None if ref == res else f"{path}: {type(ref).__name__} {ref!r:.60} vs {res!r:.60}"


def identity_map(out, args):
    """Where the result (or its top-level items) *is* one of the arguments: {position: arg index}."""
    m = {}
    items = [("out", out)]
    if isinstance(out, (tuple, list)):
        items += [(f"out[{i}]", o) for i, o in enumerate(out)]
    for pos, o in items:
        for j, a in enumerate(args):
            if o is a:
                m[pos] = j
                break
    return m


# ---------------------------------------------------------------------------------------------- execution
def load(prog, tag):
    """A fresh module namespace holding the program (new code objects on every call)."""
    fname = f"<fuzz-{prog.seed}-{tag}>"
    lines = prog.source.splitlines(True)
    linecache.cache[fname] = (len(prog.source), None, lines, fname)
    ns = {"__name__": f"fuzzprog_{prog.seed}_{tag}", "__builtins__": builtins}
    exec(compile(prog.source, fname, "exec"), ns)
    return ns


def call_once(fn, args, rest, kw):
    buf = io.StringIO()
    out = exc = None
    with contextlib.redirect_stdout(buf):
        try:
            out = fn(*args, *rest, **kw)
        except Exception as e:  # noqa: BLE001 - the program's own exceptions are part of the behaviour
            exc = e
    return out, exc, buf.getvalue()


def snapshot_globals(ns):
    g = {"G": ns.get("G"), "GL": ns.get("GL")}
    if "MODEL" in ns:  # gen_modules programs: the model's state and the config are compared too
        g["MODEL"] = module_state(ns["MODEL"])
        g["CFG"] = ns.get("CFG")
    return g


def module_state(m):
    """Every submodule's parameters (with grads), buffers and public Python attributes, by qualified name."""
    state = {}
    for name, mod in m.named_modules():
        d = {f"param {k}": v for k, v in mod._parameters.items()}
        d.update({f"buffer {k}": v for k, v in mod._buffers.items()})
        d.update({k: v for k, v in vars(mod).items() if not k.startswith("_") and k != "cfg"})
        state[name or "<root>"] = d
    return state


def snap(o, depth=0):
    """A copy of ``o`` that later calls cannot change: tensors cloned (requires_grad and leaf grads kept),
    containers and plain objects rebuilt (deepcopy refuses non-leaf tensors)."""
    import numpy as np
    import torch
    if depth > 8:
        return o
    if isinstance(o, torch.Tensor):
        c = o.detach().clone()
        if o.requires_grad:
            c.requires_grad_()
        if o.is_leaf and o.grad is not None:
            c.grad = o.grad.detach().clone()
        return c
    if isinstance(o, np.ndarray):
        return o.copy()
    if isinstance(o, list):
        return [snap(v, depth + 1) for v in o]
    if isinstance(o, dict):
        if type(o) is not dict:  # OrderedDict subclasses (model outputs) keep their type and attributes
            try:
                c = copy.copy(o)
                for k, v in o.items():
                    dict.__setitem__(c, k, snap(v, depth + 1))
                return c
            except Exception:  # noqa: BLE001
                pass
        return {k: snap(v, depth + 1) for k, v in o.items()}
    if isinstance(o, tuple):
        items = [snap(v, depth + 1) for v in o]
        if type(o) is tuple:
            return tuple(items)
        try:
            return type(o)(items)  # torch.return_types (structseq)
        except TypeError:
            return type(o)(*items)  # namedtuple
    if isinstance(o, (set, frozenset)):
        return type(o)(o)
    if hasattr(o, "__dict__") and not isinstance(o, type) and not callable(o):
        try:
            c = copy.copy(o)
            c.__dict__.update({k: snap(v, depth + 1) for k, v in vars(o).items()})
            return c
        except Exception:  # noqa: BLE001
            return o
    return o


def run_program(prog, fn_factory, ns):
    """Runs the three calls; returns a list of per-call records (all deep-copied so later calls cannot change them)."""
    fn = fn_factory(ns["f"])
    recs = []
    for call in range(NCALLS):
        args, rest, kw = make_inputs(prog, call)
        all_args = args + rest
        out, exc, printed = call_once(fn, args, rest, kw)
        ident = identity_map(out, all_args) if exc is None else {}
        rec = {"out": out, "exc": exc, "printed": printed, "args": all_args, "kw": kw,
               "globals": snapshot_globals(ns), "ident": ident,
               "aliases": alias_signature(all_args + [ns.get("GL"), out])}
        rec = {k: (v if k in ("exc", "ident", "aliases", "printed") else snap(v)) for k, v in rec.items()}
        rec["exc"] = exc
        recs.append(rec)
    return recs


def compare_runs(ref, res, is_cdynamo=True):
    """(category, reason) of the first difference between two lists of call records, or None."""
    import torch
    for call, (a, b) in enumerate(zip(ref, res)):
        where = f"call {call}"
        ea, eb = a["exc"], b["exc"]
        if eb is not None and is_cdynamo and _is_internal(eb) and (ea is None or type(ea) is not type(eb)):
            return "internal error", f"{where}: {type(eb).__name__}: {str(eb)[:200]}"
        if (ea is None) != (eb is None):
            if ea is None:
                return "wrong exception", f"{where}: eager returned, compiled raised {type(eb).__name__}: {str(eb)[:160]}"
            return "wrong exception", f"{where}: eager raised {type(ea).__name__}: {str(ea)[:120]}, compiled did not"
        if ea is not None and not isinstance(eb, type(ea)):
            return "wrong exception", f"{where}: {type(ea).__name__}({str(ea)[:80]}) vs {type(eb).__name__}({str(eb)[:80]})"
        if ea is None:
            m = compare(a["out"], b["out"])
            if m:
                return "wrong result", f"{where}: {m}"
            if a["ident"] != b["ident"]:
                return "identity", f"{where}: result is-argument map {a['ident']} vs {b['ident']}"
        m = compare(a["args"], b["args"], "args")
        if m:
            return "wrong mutation", f"{where}: {m}"
        if a["aliases"] != b["aliases"]:
            return "wrong mutation", f"{where}: aliasing among arguments/result {a['aliases']} vs {b['aliases']}"[:300]
        m = compare(a["globals"], b["globals"], "globals")
        if m:
            return "wrong global", f"{where}: {m}"
        m = compare_text(a["printed"], b["printed"])
        if m:
            return "wrong print", f"{where}: {m}"
    return None


def _is_internal(e):
    mod = type(e).__module__ or ""
    return mod.startswith("cdynamo") or mod.startswith("torch._dynamo")


_cdynamo = None


def _get_cdynamo():
    global _cdynamo
    if _cdynamo is None:
        import cdynamo
        _cdynamo = cdynamo
    return _cdynamo


def backend_factory(name):
    if name.startswith("dynamo"):
        import logging
        import torch
        logging.getLogger("torch._dynamo").setLevel(logging.ERROR)
        tb = "aot_eager" if name == "dynamo_aot" else "eager"
        def fac(f):
            torch._dynamo.reset()
            return torch.compile(f, backend=tb)
        return fac
    cdynamo = _get_cdynamo()
    from cdynamo.testing import CompileCounterWithBackend
    # The fuzzer judges the frontend: a graph the backend cannot compile (aot_autograd refuses some graphs
    # that change a tensor saved for backward, and torch.compile raises BackendCompilerFailed on them too)
    # runs as Python, as before the torch.compile error policy, instead of failing the program.
    cdynamo.config.suppress_errors = True

    def fac(f):
        cdynamo.reset()
        fac.counter = CompileCounterWithBackend(name)  # counts graphs, then compiles with the named backend
        return cdynamo.optimize(fac.counter)(f)
    return fac


def check_seed(seed, backends, verbose=False):
    """Runs one seed; returns a dict: seed, status ('ok', 'fail', 'skip'), and per failing backend the category/reason."""
    return check_program(generator()(seed), backends)


GEN = os.environ.get("CDYNAMO_FUZZ_GEN", "flat")  # "flat" (gen.py) or "modules" (gen_modules.py); --gen sets it


def generator():
    if GEN == "modules":
        from .gen_modules import generate
    else:
        from .gen import generate
    return generate


def check_program(prog, backends):
    """check_seed for a given Program (reduce.py runs shrunk sources through this)."""
    seed = prog.seed
    ident = lambda f: f
    res = {"seed": seed, "status": "ok", "fails": [], "fallbacks": 0, "graphs": 0, "ops": 0}
    try:
        ref = run_program(prog, ident, load(prog, "eagerA"))
        ref2 = run_program(prog, ident, load(prog, "eagerB"))
    except Exception as e:  # noqa: BLE001
        res.update(status="fail", fails=[["runner", "runner error", f"eager: {type(e).__name__}: {e}"[:300]]])
        return res
    if compare_runs(ref, ref2, is_cdynamo=False) is not None:
        res["status"] = "skip"  # the program is not deterministic by itself
        res["why"] = str(compare_runs(ref, ref2, is_cdynamo=False))[:200]
        return res
    for be in backends:
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            fac = backend_factory(be)
            try:
                got = run_program(prog, fac, load(prog, be))
                global ZERO_GRAD_IS_NONE
                ZERO_GRAD_IS_NONE = be in ("aot_eager", "dynamo_aot")
                try:
                    diff = compare_runs(ref, got, is_cdynamo=not be.startswith("dynamo"))
                finally:
                    ZERO_GRAD_IS_NONE = False
                if (diff and be in ("aot_eager", "dynamo_aot") and diff[0] == "wrong exception"
                        and "modified by an inplace operation" in diff[1] and ".data" in prog.source):
                    # aot_autograd writes a graph's in-place change of `w.data` back with w.copy_(...), which
                    # bumps w's version counter where eager's .data does not: backward then refuses what it
                    # saved of w. torch.compile(backend="aot_eager") does the same (FINDINGS.md).
                    res["aot_data_writes"] = res.get("aot_data_writes", 0) + 1
                    diff = None
            except Exception as e:  # noqa: BLE001
                diff = ("runner error", f"{type(e).__name__}: {e}"[:300])
            finally:
                if not be.startswith("dynamo"):
                    _get_cdynamo().reset()
                else:
                    import torch
                    torch._dynamo.reset()
        if getattr(fac, "counter", None) is not None:
            res["graphs"] += fac.counter.frame_count
            res["ops"] += fac.counter.op_count
        res["fallbacks"] += sum(1 for w in ws if "cdynamo" in type(w.message).__name__.lower()
                                or "Cdynamo" in str(w.category))
        # The runner sets suppress_errors, so a backend that refuses a graph is only a warning: kept per seed, so a
        # new backend failure (a graph cdynamo hands over that the backend cannot take) is seen, not hidden.
        failed = [str(w.message) for w in ws if str(w.message).startswith("cdynamo: backend failed in ")]
        if failed:
            res.setdefault("backend_failures", []).extend(f"[{be}] {m}"[:300] for m in failed[:3])
        if diff is not None:
            res["status"] = "fail"
            res["fails"].append([be, diff[0], diff[1]])
    return res


def backends_for(seed, backends, aot_every):
    return [b for b in backends if b != "aot_eager" or seed % max(aot_every, 1) == 0]


# ---------------------------------------------------------------------------------------------- worker
def worker_main(start, count, backends, aot_every, out_path, deadline):
    with open(out_path, "a") as out:
        def put(d):
            out.write(json.dumps(d) + "\n")
            out.flush()
        for seed in range(start, start + count):
            if deadline and time.time() > deadline:
                put({"event": "deadline", "seed": seed})
                break
            put({"event": "start", "seed": seed})
            t0 = time.time()
            try:
                r = check_seed(seed, backends_for(seed, backends, aot_every))
            except BaseException as e:  # noqa: BLE001
                r = {"seed": seed, "status": "fail", "fails": [["runner", "runner error",
                                                                 f"{type(e).__name__}: {e}"[:300]]]}
            r["event"] = "done"
            r["time"] = round(time.time() - t0, 3)
            put(r)


def _spawn(start, count, backends, aot_every, deadline, log, gen=None):
    fd, path = tempfile.mkstemp(prefix="cdynamo-fuzz-", suffix=".jsonl")
    os.close(fd)
    cmd = [sys.executable, "-m", "tests.fuzz.run", "--worker", "--start", str(start), "--count", str(count),
           "--backends", ",".join(backends), "--aot-every", str(aot_every), "--out", path,
           "--deadline", str(deadline or 0)]
    env = dict(os.environ)
    env.setdefault("PYTHONHASHSEED", "0")
    env["CDYNAMO_FUZZ_GEN"] = gen or GEN
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    return proc, path


def _read(path):
    recs = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        recs.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return recs


def run_chunk(start, count, backends, aot_every, deadline, seed_timeout, gen=None):
    """Runs seeds [start, start+count) in one worker; returns (results, next_seed). Crash/hang: the running seed fails."""
    log = tempfile.TemporaryFile(mode="w+")
    proc, path = _spawn(start, count, backends, aot_every, deadline, log, gen)
    last_n, last_t = 0, time.time()
    killed = False
    while proc.poll() is None:
        time.sleep(0.2)
        recs = _read(path)
        if len(recs) != last_n:
            last_n, last_t = len(recs), time.time()
        elif time.time() - last_t > seed_timeout:
            proc.kill()
            proc.wait()
            killed = True
            break
    recs = _read(path)
    os.unlink(path)
    log.seek(0)
    tail = log.read()[-1500:]
    log.close()
    results = [r for r in recs if r.get("event") == "done"]
    done = {r["seed"] for r in results}
    started = [r["seed"] for r in recs if r.get("event") == "start" and r["seed"] not in done]
    stopped = [r["seed"] for r in recs if r.get("event") == "deadline"]
    if started:
        bad = started[-1]
        cat = "hang" if killed else "crash"
        reason = f"worker {'killed after %ss without progress' % seed_timeout if killed else 'exited with %s' % proc.returncode}"
        if not killed:
            lines = [l for l in tail.splitlines() if l.strip()]
            reason += ": " + " | ".join(lines[-4:])[:400]
        results.append({"seed": bad, "status": "fail", "fails": [["?", cat, reason]], "event": "done"})
        return results, bad + 1, True
    if stopped:
        return results, stopped[0], False
    if proc.returncode != 0 and len(results) < count:
        if not recs:  # died before its first seed (e.g. `import cdynamo` failed while it is being reinstalled)
            return [], start, "startup: " + " | ".join(l for l in tail.splitlines() if l.strip())[-300:]
        nxt = start + len(results)
        results.append({"seed": nxt, "status": "fail", "event": "done",
                        "fails": [["?", "crash", f"worker exited with {proc.returncode}: {tail[-400:]}"]]})
        return results, nxt + 1, True
    return results, start + count, False


def install_stamp():
    """mtime of the installed cdynamo extension (without importing it): a change means it was reinstalled."""
    import glob
    import importlib.util
    try:
        spec = importlib.util.find_spec("cdynamo")
        d = os.path.dirname(spec.origin)
        return tuple(sorted((f, os.path.getmtime(f)) for f in glob.glob(os.path.join(d, "_C*"))))
    except Exception:  # noqa: BLE001
        return None


class Summary:
    def __init__(self):
        self.aborted = None
        self.results = {}
        self.elapsed = 0.0
        self.backend_runs = {}

    @property
    def ran(self):
        return len(self.results)

    def failures(self):
        return {s: r for s, r in sorted(self.results.items()) if r["status"] == "fail"}

    def skipped(self):
        return sorted(s for s, r in self.results.items() if r["status"] == "skip")

    def by_category(self):
        cats = {}
        for s, r in self.failures().items():
            for be, cat, _ in r["fails"]:
                cats.setdefault(cat, []).append(s)
        return cats

    def backend_failures(self):
        """Seeds where cdynamo's backend refused a graph (it ran as Python: suppress_errors), and the first message."""
        return {s: r["backend_failures"][0] for s, r in sorted(self.results.items()) if r.get("backend_failures")}

    def check_backend_failures(self, known):
        """Asserts that every seed whose backend refused a graph is in ``known`` (seed -> why), and that every
        ``known`` seed this run reached still refuses (the fixed-range tests share this check)."""
        refused = self.backend_failures()
        new = {s: m for s, m in refused.items() if s not in known}
        assert not new, "backends refused graphs (the frames ran as Python):\n" + "\n".join(
            f"  seed {s}: {m}"[:400] for s, m in new.items())
        accepted = [s for s in known if s in self.results and s not in refused]
        assert not accepted, f"the backend takes these graphs now, remove them from KNOWN_BACKEND_FAILURES: {accepted}"

    def reason(self, seed):
        r = self.results[seed]
        return "; ".join(f"[{be}] {cat}: {why}" for be, cat, why in r["fails"])

    def report(self, verbose=False):
        lines = [f"ABORTED: {self.aborted}"] if self.aborted else []
        lines += [f"fuzz: {self.ran} programs in {self.elapsed:.1f}s; backend runs: "
                 + ", ".join(f"{k}={v}" for k, v in sorted(self.backend_runs.items()))
                 + f"; skipped (nondeterministic eager): {len(self.skipped())}"
                 + f"; failing seeds: {len(self.failures())}"]
        lines.append(f"  graphs compiled: {sum(r.get('graphs', 0) for r in self.results.values())}, "
                     f"graph ops: {sum(r.get('ops', 0) for r in self.results.values())}, "
                     f"programs with no graph: {sum(1 for r in self.results.values() if r.get('graphs', 1) == 0)}")
        fb = sum(r.get("fallbacks", 0) for r in self.results.values())
        if fb:
            lines.append(f"  cdynamo warnings (fallbacks to Python): {fb}")
        bf = self.backend_failures()
        if bf:
            lines.append(f"  backend failures (graph ran as Python): {len(bf)}  seeds {list(bf)[:20]}")
        for cat, seeds in sorted(self.by_category().items()):
            lines.append(f"  {cat}: {len(seeds)}  seeds {seeds[:20]}{' ...' if len(seeds) > 20 else ''}")
        for s in self.failures():
            lines.append(f"  seed {s}: {self.reason(s)}"[:400])
        if verbose:
            for s in self.skipped():
                lines.append(f"  skipped seed {s}: {self.results[s].get('why')}")
        return "\n".join(lines)


def run_seeds(start, count, backends=("eager",), aot_every=1, time_budget=None, chunk=100, seed_timeout=SEED_TIMEOUT,
              confirm_crashes=True, progress=None, max_consecutive_crashes=8, gen=None, jobs=1):
    """Runs seeds in worker subprocesses; stops launching work when time_budget (seconds) is used up (None: the
    range runs whole, however long it takes; only a program that makes no progress for ``seed_timeout`` seconds
    is stopped, and fails as a hang).

    ``jobs`` > 1 splits the range into that many contiguous parts, each run by its own sequence of workers at the
    same time; the summary is the same as one sequence's (results by seed), only sooner on a machine with cores to
    spare. ``gen`` picks the program generator of the workers ("flat" or "modules"; default: this process's GEN).
    A crash right after cdynamo was reinstalled (its extension's mtime changed) or a worker that cannot start
    is retried after a pause; many crashes in a row abort the run (``Summary.aborted``: a broken install)."""
    if jobs > 1 and count > 1:
        return _run_parallel(start, count, jobs, backends=backends, aot_every=aot_every, time_budget=time_budget,
                             chunk=chunk, seed_timeout=seed_timeout, confirm_crashes=confirm_crashes,
                             progress=progress, max_consecutive_crashes=max_consecutive_crashes, gen=gen)
    t0 = time.time()
    deadline = t0 + time_budget if time_budget else 0
    summ = Summary()
    seed, end = start, start + count
    consecutive, env_retries = 0, 0
    while seed < end:
        if deadline and time.time() > deadline:
            break
        n = min(chunk, end - seed)
        stamp = install_stamp()
        results, nxt, crashed = run_chunk(seed, n, backends, aot_every, deadline, seed_timeout, gen)
        if isinstance(crashed, str) or (crashed and install_stamp() != stamp):
            env_retries += 1
            if env_retries > 10:
                summ.aborted = f"workers cannot run: {crashed if isinstance(crashed, str) else 'reinstalled'}"
                break
            for r in (results[:-1] if crashed is True else results):
                summ.results[r["seed"]] = r
            seed = results[-1]["seed"] if crashed is True else nxt
            time.sleep(20)  # cdynamo is being reinstalled: retry the seed that was running
            continue
        for r in results:
            s = r["seed"]
            if crashed and r is results[-1] and confirm_crashes:
                # rerun the culprit alone: a crash that needs the batch's history is still reported
                alone, _, again = run_chunk(s, 1, backends, aot_every, 0, seed_timeout, gen)
                if not again:
                    r["fails"][0][2] += " (passes when run alone: depends on earlier seeds in the worker)"
            summ.results[s] = r
            if r["status"] != "fail" or r["fails"][0][0] != "?":
                for be in backends_for(s, backends, aot_every):
                    summ.backend_runs[be] = summ.backend_runs.get(be, 0) + 1
            if progress:
                progress(r)
        consecutive = consecutive + 1 if crashed else 0
        if consecutive >= max_consecutive_crashes:
            summ.aborted = f"{consecutive} crashes in a row (last seed {results[-1]['seed']}): broken install?"
            break
        seed = nxt
    summ.elapsed = time.time() - t0
    return summ


def _run_parallel(start, count, jobs, **kw):
    """run_seeds over ``jobs`` contiguous parts of [start, start+count), each in a thread of its own driving its
    worker subprocesses; the parts' summaries are merged (an abort in any part aborts the whole)."""
    import threading
    jobs = min(jobs, count)
    bounds = [start + count * j // jobs for j in range(jobs + 1)]
    parts = [None] * jobs
    lock = threading.Lock()
    progress = kw.pop("progress", None)

    def locked_progress(r):
        with lock:
            progress(r)

    def part(j):
        parts[j] = run_seeds(bounds[j], bounds[j + 1] - bounds[j], progress=locked_progress if progress else None,
                             jobs=1, **kw)

    t0 = time.time()
    threads = [threading.Thread(target=part, args=(j,), daemon=True) for j in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    summ = Summary()
    for p in parts:
        if p is None:  # the thread died: report it rather than a short range
            summ.aborted = summ.aborted or "a fuzz driver thread died"
            continue
        summ.aborted = summ.aborted or p.aborted
        summ.results.update(p.results)
        for be, n in p.backend_runs.items():
            summ.backend_runs[be] = summ.backend_runs.get(be, 0) + n
    summ.results = dict(sorted(summ.results.items()))
    summ.elapsed = time.time() - t0
    return summ


# ---------------------------------------------------------------------------------------------- CLI
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tests.fuzz.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--backends", default="eager")
    p.add_argument("--aot-every", type=int, default=1, help="aot_eager only on seeds divisible by this")
    p.add_argument("--time-budget", type=float, default=None)
    p.add_argument("--chunk", type=int, default=100)
    p.add_argument("--seed-timeout", type=float, default=SEED_TIMEOUT)
    p.add_argument("-j", "--jobs", type=int, default=1, help="run the range as this many parallel parts")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--gen", choices=["flat", "modules"], default=None,
                   help="program generator: flat (gen.py, default) or modules (gen_modules.py)")
    p.add_argument("--show", type=int, default=None, help="print the program of a seed and run it in-process")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, default=0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    backends = [b for b in a.backends.split(",") if b]
    global GEN
    if a.gen:
        GEN = a.gen
        os.environ["CDYNAMO_FUZZ_GEN"] = a.gen
    if a.worker:
        worker_main(a.start, a.count, backends, a.aot_every, a.out, a.deadline)
        return 0
    if a.show is not None:
        prog = generator()(a.show)
        print(prog.source)
        print(f"args={prog.args} star={prog.star} shapes={shapes_for(a.show)}")
        print(json.dumps(check_seed(a.show, backends), indent=1))
        return 0
    prog_cb = None
    if a.verbose:
        def prog_cb(r):
            if r["status"] == "fail":
                print(f"FAIL seed {r['seed']}: " + "; ".join(f"[{b}] {c}: {w}" for b, c, w in r["fails"])[:300],
                      flush=True)
    summ = run_seeds(a.start, a.count, backends, a.aot_every, a.time_budget, a.chunk, a.seed_timeout,
                     progress=prog_cb, jobs=a.jobs)
    print(summ.report(verbose=a.verbose))
    return 1 if summ.failures() or summ.aborted else 0


if __name__ == "__main__":
    sys.exit(main())
