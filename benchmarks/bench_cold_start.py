# bench_cold_start.py — owns the cold- and warm-start measurements: first compiled result in a fresh process
# (cdynamo vs torch._dynamo / torch.compile; eager, aot_eager, inductor), `import cdynamo` cost, and a second
# process's first inductor call on warm inductor caches (timm resnet18, an HF BERT with a small config), in
# inference and (--train) training.
"""Every sample is a fresh interpreter; cdynamo and torch runs alternate; the tables show medians.

    python benchmarks/bench_cold_start.py [--repeats N] [--model-repeats M] [--skip-models] [--skip-first] [--train]
        [--backends eager,eager/convnet,eager/attn,eager/hf-gpt2,aot_eager,inductor] [--models resnet18,bert]
        [--warm-repeats N]

Timings start after `import torch` (the frontend's own import is included) and end when the first compiled call
returns. For the warm start, a first process compiles the model with inductor into an empty
TORCHINDUCTOR_CACHE_DIR (cold), a second process does the same on that directory (warm); the FX graph and
AOTAutograd cache hits of the warm process are listed. The machine's load (`os.getloadavg()`) is printed
beside the numbers: other processes make them noisy.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS_PY = os.path.join(os.path.dirname(HERE), "tests", "py")

_FN = """
def fn(x, y):
    a = torch.sin(x)
    b = torch.cos(y)
    return a * b
x, y = torch.randn(64, 64), torch.randn(64, 64)
"""

_CONVNET = """
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(16)
        self.conv2 = torch.nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=4)
        self.ln = torch.nn.LayerNorm(16)
        self.fc = torch.nn.Linear(16, 10)
    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        h = torch.nn.functional.adaptive_avg_pool2d(self.conv2(h), 1).flatten(1)
        return self.fc(self.ln(h))
torch.manual_seed(0)
fn = Net().eval()
x = torch.randn(2, 3, 32, 32)
"""

_HF = f"""
import warnings, logging
warnings.simplefilter("ignore")
sys.path.insert(0, {TESTS_PY!r})
import vision_shim
import transformers
logging.getLogger("transformers").setLevel(logging.ERROR)
from hf_zoo_models import MODELS
torch.manual_seed(0)
fn, make_inputs = MODELS[{{model!r}}]()
fn.eval()
x = make_inputs(0)
t0 = time.perf_counter()  # transformers' own import (which imports torch._dynamo and sympy) is not timed
"""

_ATTN = """
import torch.nn.functional as F
class Attn(torch.nn.Module):  # an HF-style attention block: position ids, causal and padding masks, sdpa, softmax
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.pos = torch.nn.Embedding(16, 16)
        self.qkv = torch.nn.Linear(16, 48)
        self.ln = torch.nn.LayerNorm(16)
        self.out = torch.nn.Linear(16, 50)
    def forward(self, ids, mask):
        b, n = ids.shape
        pos = torch.arange(n, device=ids.device)
        h = self.ln(self.emb(ids) + self.pos(pos)[None])
        q, k, v = self.qkv(h).view(b, n, 3, 2, 8).permute(2, 0, 3, 1, 4).unbind(0)
        causal = torch.ones(n, n, dtype=torch.bool, device=ids.device).tril()
        keep = causal[None, None] & mask[:, None, None, :].bool()
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        s = (q @ k.transpose(-1, -2)) * 8 ** -0.5
        s = torch.where(keep, s, torch.full_like(s, torch.finfo(s.dtype).min))
        a = a + torch.softmax(s, -1) @ v
        return self.out(a.transpose(1, 2).reshape(b, n, 16))
torch.manual_seed(0)
fn = Attn().eval()
x, y = torch.randint(0, 50, (2, 6)), torch.ones(2, 6, dtype=torch.long)
"""

_CHILD = """
import json, os, sys, time, warnings
warnings.simplefilter("ignore")
import torch
t0 = time.perf_counter()
{body}
print("RESULT " + json.dumps(out))
"""

_FIRST = {
    "cdynamo": "import cdynamo\n" + _FN + "r = cdynamo.optimize({backend!r})(fn)(x, y)\n",
    "torch": "import torch._dynamo\n" + _FN + "r = torch.compile(fn, backend={backend!r})(x, y)\n",
}

_FIRST_CONVNET = {
    "cdynamo": "import cdynamo\n" + _CONVNET + "r = cdynamo.optimize({backend!r})(fn)(x)\n",
    "torch": "import torch._dynamo\n" + _CONVNET + "r = torch.compile(fn, backend={backend!r})(x)\n",
}

_IMPORT = {
    "cdynamo": "import cdynamo\n",
    "torch": "import torch._dynamo\n",
}

_MODELS = {
    "resnet18": f"""
sys.path.insert(0, {TESTS_PY!r})
import vision_shim
import timm
torch.manual_seed(0)
model = timm.create_model("resnet18", pretrained=False).eval()
inputs = (torch.randn(1, 3, 64, 64),)
kwargs = {{}}
""",
    "bert": f"""
sys.path.insert(0, {TESTS_PY!r})
import vision_shim
from transformers import BertConfig, BertModel
torch.manual_seed(0)
cfg = BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                 max_position_embeddings=64)
model = BertModel(cfg).eval()
inputs = ()
kwargs = {{"input_ids": torch.randint(0, 512, (1, 16))}}
""",
}

_MODEL_COMPILE = {
    "cdynamo": "import cdynamo\nopt = cdynamo.optimize('inductor')(model)\n",
    "torch": "opt = torch.compile(model)\n",
}

_MODEL_TAIL = """
model.train({train})
t0 = time.perf_counter()
{compile}
with torch.set_grad_enabled({train}):
    r = opt(*inputs, **kwargs)
    if {train}:  # training: the first gradients (the backward graph compiles or loads too)
        (r if isinstance(r, torch.Tensor) else r[0]).float().sum().backward()
first = time.perf_counter() - t0
from torch._dynamo.utils import counters
hits = {{k: dict(v) for k, v in counters.items() if k in ("inductor", "aot_autograd")}}
out = {{"ms": first * 1000, "counters": hits}}
"""


def _child(body, env=None):
    code = _CHILD.format(body=textwrap.indent(textwrap.dedent(body), ""))
    e = dict(os.environ)  # PYTHONPATH is kept: a staged cdynamo (a site dir with _C) is measured as imported there
    if env:
        e.update(env)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=1800,
                       cwd=tempfile.gettempdir())
    if p.returncode != 0:
        raise RuntimeError(p.stdout[-2000:] + p.stderr[-4000:])
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


_FIRST_HF = {
    "cdynamo": "import cdynamo\nwith torch.no_grad():\n    r = cdynamo.optimize({backend!r})(fn)(**x)\n",
    "torch": "import torch._dynamo\nwith torch.no_grad():\n    r = torch.compile(fn, backend={backend!r})(**x)\n",
}


def first_call(frontend, backend, cache_dir):
    if "/hf-" in backend:  # eager/hf-gpt2: a transformers zoo model, timed from after its construction
        name, model = backend.split("/hf-")
        body = _HF.format(model=model) + _FIRST_HF[frontend].format(backend=name)
    elif backend.endswith("/attn"):
        body = _FIRST[frontend].replace(_FN, _ATTN).format(backend=backend.split("/")[0])
    elif backend.endswith("/convnet"):
        body = _FIRST_CONVNET[frontend].format(backend=backend.split("/")[0])
    else:
        body = _FIRST[frontend].format(backend=backend)
    body += \
        "out = {'ms': (time.perf_counter() - t0) * 1000, 'heavy': sorted(m for m in " \
        "('torch._dynamo', 'torch._inductor', 'torch._functorch.aot_autograd', 'sympy') if m in sys.modules)}\n"
    return _child(body, {"TORCHINDUCTOR_CACHE_DIR": cache_dir})


def import_cost(frontend):
    return _child(_IMPORT[frontend] + "out = {'ms': (time.perf_counter() - t0) * 1000}\n")


def model_first(frontend, model, cache_dir, train=False):
    body = _MODELS[model] + _MODEL_TAIL.format(compile=_MODEL_COMPILE[frontend], train=train)
    return _child(body, {"TORCHINDUCTOR_CACHE_DIR": cache_dir})


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


def _load():
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def _first_tables(args):
    rows = {}
    for _ in range(args.repeats):
        for fe in ("cdynamo", "torch"):
            rows.setdefault(("import", fe), []).append(import_cost(fe)["ms"])
    print(f"\nimport cost after `import torch` (median of {args.repeats}, ms): "
          f"import cdynamo {_median(rows[('import', 'cdynamo')]):.1f}, "
          f"import torch._dynamo {_median(rows[('import', 'torch')]):.1f}")

    print(f"\nfirst compiled result after `import torch`, 3-op function (`/convnet`: a conv/bn/ln net; `/attn`: an attention block; `/hf-<name>`: a "
          f"transformers zoo model, timed after transformers' import and the model's construction; median of {args.repeats}, ms; {_load()})")
    print(f"{'backend':14s} {'cdynamo':>10s} {'torch':>10s} {'speedup':>8s}  heavy modules after (cdynamo)")
    for backend in args.backends.split(","):
        heavy = None
        for i in range(args.repeats):
            for fe in ("cdynamo", "torch"):
                # inductor: a fresh cache directory per sample, so every sample compiles (cold)
                d = tempfile.mkdtemp(prefix="cd-cold-")
                try:
                    r = first_call(fe, backend, d)
                finally:
                    shutil.rmtree(d, ignore_errors=True)
                rows.setdefault((backend, fe), []).append(r["ms"])
                if fe == "cdynamo":
                    heavy = r["heavy"]
        c, t = _median(rows[(backend, "cdynamo")]), _median(rows[(backend, "torch")])
        print(f"{backend:14s} {c:10.1f} {t:10.1f} {t / c:7.1f}x  {heavy}", flush=True)


def _warm_repeats(args):
    """One cold compile per frontend and model, then --warm-repeats warm processes per variant, alternating:
    cdynamo, cdynamo without its kept inductor ISA answer (the file removed before each such process), torch.compile."""
    print(f"\ninductor warm first call, {args.warm_repeats} alternating warm processes per variant on one cache "
          f"directory per frontend (ms; {_load()})")
    print(f"{'model':9s} {'variant':22s} {'median':>8s}  samples")
    for model in args.models.split(","):
        dirs = {fe: tempfile.mkdtemp(prefix="cd-warm-") for fe in ("cdynamo", "torch")}
        try:
            for fe in ("cdynamo", "torch"):
                model_first(fe, model, dirs[fe], args.train)
            kept = os.path.join(dirs["cdynamo"], "cdynamo", "vec_isa.json")
            res = {}
            for _ in range(args.warm_repeats):
                for variant in ("cdynamo", "cdynamo, ISA probes", "torch.compile"):
                    fe = "torch" if variant == "torch.compile" else "cdynamo"
                    if variant == "cdynamo, ISA probes" and os.path.exists(kept):
                        os.remove(kept)
                    res.setdefault(variant, []).append(model_first(fe, model, dirs[fe], args.train)["ms"])
            for variant, xs in res.items():
                print(f"{model:9s} {variant:22s} {_median(xs):8.0f}  {[round(x) for x in xs]}", flush=True)
            print(f"{model:9s} warm first call: torch.compile / cdynamo = "
                  f"{_median(res['torch.compile']) / _median(res['cdynamo']):.2f}x", flush=True)
        finally:
            for d in dirs.values():
                shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--model-repeats", type=int, default=1)
    ap.add_argument("--backends", default="eager,eager/convnet,eager/attn,eager/hf-gpt2,eager/hf-llama,aot_eager,inductor")
    ap.add_argument("--skip-models", action="store_true")
    ap.add_argument("--skip-first", action="store_true", help="only the models' cold/warm table")
    ap.add_argument("--train", action="store_true", help="models in training mode: time to the first gradients")
    ap.add_argument("--models", default="resnet18,bert")
    ap.add_argument("--warm-repeats", type=int, default=0,
                    help="instead of the cold/warm table: one cold compile, then N warm processes per variant")
    args = ap.parse_args()
    print(f"# bench_cold_start ({_load()}, python {sys.version.split()[0]})")

    if not args.skip_first:
        _first_tables(args)

    if args.skip_models:
        return
    if args.warm_repeats:
        _warm_repeats(args)
        return
    print(f"\ninductor, a model's first {'gradients' if args.train else 'call'} in a fresh process: cold (empty cache dir) and warm (second process, "
          f"same cache dir); median of {args.model_repeats}, ms; {_load()}")
    print(f"{'model':9s} {'frontend':8s} {'cold':>9s} {'warm':>9s}  warm-process cache counters")
    for model in args.models.split(","):
        res = {}
        for _ in range(args.model_repeats):
            for fe in ("cdynamo", "torch"):
                d = tempfile.mkdtemp(prefix="cd-warm-")
                try:
                    cold = model_first(fe, model, d, args.train)
                    warm = model_first(fe, model, d, args.train)
                finally:
                    shutil.rmtree(d, ignore_errors=True)
                res.setdefault(fe, []).append((cold["ms"], warm["ms"], warm["counters"]))
        for fe in ("cdynamo", "torch"):
            cold = _median([r[0] for r in res[fe]])
            warm = _median([r[1] for r in res[fe]])
            cnt = res[fe][-1][2]
            keep = {f"{g}.{k}": v for g, d in cnt.items() for k, v in d.items() if "hit" in k or "miss" in k}
            print(f"{model:9s} {fe:8s} {cold:9.0f} {warm:9.0f}  {keep}", flush=True)
        ratio = _median([r[1] for r in res["torch"]]) / _median([r[1] for r in res["cdynamo"]])
        print(f"{model:9s} warm first call: torch.compile / cdynamo = {ratio:.2f}x", flush=True)
    print(f"\n({_load()})")


if __name__ == "__main__":
    main()
