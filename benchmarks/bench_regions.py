# bench_regions.py — owns the regional-compilation benchmark (issue 33): inductor first call (inference and one training
# step) of HF Llama / GPT-2 in fresh processes, cdynamo (repeated layers compiled once) vs torch.compile, and the
# steady-state per-call time of both compiled models side by side in one process.
"""Usage:
    python benchmarks/bench_regions.py [--models llama8,llama16,gpt2] [--width 64] [--seq 32] [--batch 2]
        [--device cpu|cuda] [--mode default|reduce-overhead] [--repeats 1] [--skip-train] [--skip-steady]

Every first-call sample is a fresh interpreter with TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 and an empty
TORCHINDUCTOR_CACHE_DIR; cdynamo and torch.compile runs alternate. The time starts after the model is built and one
eager call ran (kernels and libraries loaded for both alike), and ends when the first compiled call (inference) or
the first forward + backward (training) returns. `dynamo/cdynamo` > 1: cdynamo's first call is faster.
Steady state: one process compiles cdynamo (regions on, the default for inductor) and torch.compile, then times
calls in interleaved rounds (median of rounds); `cdynamo/dynamo` < 1.10 is the target. cdynamo's outputs are
checked against torch.compile's (inference) in the same process. `--width 768 --layers 12 --device cuda` gives
GPT-2 small at real width on a GPU (`--models gpt2 --width 768 --heads 12 --seq 512`).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def build(model, layers, width, heads, vocab):
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "py"))
    import vision_shim  # noqa: F401  (torchvision's Python part without its C++ extension, before transformers)
    import transformers
    if model == "llama":
        cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=width, intermediate_size=width * 2,
                                       num_hidden_layers=layers, num_attention_heads=heads,
                                       num_key_value_heads=heads, max_position_embeddings=4096)
        return transformers.LlamaForCausalLM(cfg)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_embd=width, n_layer=layers, n_head=heads, n_positions=4096)
    return transformers.GPT2LMHeadModel(cfg)


def _setup(args):
    import warnings
    warnings.simplefilter("ignore")
    import logging
    logging.getLogger("transformers").setLevel(logging.ERROR)
    import torch
    torch.manual_seed(0)
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    model = build(args.model, args.layers, args.width, args.heads, args.vocab).to(args.device)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), device=args.device)
    if args.train:
        model.train()
        for m in model.modules():  # equal work for both: no random numbers
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
    else:
        model.eval()
    return torch, model, ids


def _compile(torch, model, frontend, mode):
    kw = {} if mode == "default" else {"mode": mode}
    if frontend == "dynamo":
        return torch.compile(model, **kw)
    import cdynamo
    if frontend == "cdynamo_whole":
        cdynamo.config.compile_regions = False
    return cdynamo.compile(model, **kw)


def _step(torch, fn, ids, train):
    if train:
        out = fn(input_ids=ids).logits
        out.float().pow(2).mean().backward()
        return out.detach()
    with torch.no_grad():
        return fn(input_ids=ids).logits


def _sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def child_first(args):
    torch, model, ids = _setup(args)
    _step(torch, model, ids, args.train)  # eager: loads kernels for both frontends alike
    model.zero_grad(set_to_none=True)
    if args.warm_inductor:  # inductor's one-time start (imports, compile workers, compiler checks) out of the time
        import torch._dynamo
        torch.compile(lambda x: x.sin() + 1)(torch.randn(4, device=args.device))
        torch._dynamo.reset()
    _sync(torch, args.device)
    t0 = time.perf_counter()
    fn = _compile(torch, model, args.frontend, args.mode)
    _step(torch, fn, ids, args.train)
    _sync(torch, args.device)
    first = time.perf_counter() - t0
    extra = {}
    if args.frontend.startswith("cdynamo"):
        from cdynamo import utils
        extra = {k: v for k, v in utils.counters["stats"].items() if k.startswith("region")}
    print(json.dumps({"first_s": first, **extra}))


def child_steady(args):
    torch, model, ids = _setup(args)
    fns = {"dynamo": _compile(torch, model, "dynamo", args.mode), "cdynamo": _compile(torch, model, "cdynamo",
                                                                                         args.mode)}
    outs = {k: _step(torch, f, ids, args.train) for k, f in fns.items()}
    if not args.train:
        torch.testing.assert_close(outs["cdynamo"], outs["dynamo"], atol=1e-3, rtol=1e-3)
    for f in fns.values():  # warm up (CUDA graphs record on later calls)
        for _ in range(3):
            _step(torch, f, ids, args.train)
    times = {k: [] for k in fns}
    for _ in range(args.rounds):
        for k, f in fns.items():
            _sync(torch, args.device)
            t0 = time.perf_counter()
            for _ in range(args.number):
                _step(torch, f, ids, args.train)
            _sync(torch, args.device)
            times[k].append((time.perf_counter() - t0) / args.number)
    print(json.dumps({k: statistics.median(v) for k, v in times.items()}))


def _run_child(args, extra):
    env = dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1", PYTHONWARNINGS="ignore")
    with tempfile.TemporaryDirectory() as cache:
        env["TORCHINDUCTOR_CACHE_DIR"] = cache
        env["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
        cmd = [sys.executable, os.path.abspath(__file__), *extra]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if p.returncode != 0:
        raise RuntimeError(f"child failed ({' '.join(extra)}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


MODEL_SPECS = {"llama8": ("llama", 8), "llama16": ("llama", 16), "gpt2": ("gpt2", 12)}


def _common(args, model, layers):
    return ["--model", model, "--layers", str(layers), "--width", str(args.width), "--heads", str(args.heads),
            "--seq", str(args.seq), "--batch", str(args.batch), "--vocab", str(args.vocab), "--device", args.device,
            "--mode", args.mode, "--threads", str(args.threads)] + (["--warm-inductor"] if args.warm_inductor else [])


def main(args):
    import torch
    print(f"torch {torch.__version__}, device {args.device}, mode {args.mode}, width {args.width}, heads "
          f"{args.heads}, seq {args.seq}, batch {args.batch}, threads {args.threads}, load avg "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    for name in args.models.split(","):
        model, layers = MODEL_SPECS.get(name, (name.rstrip("0123456789"), int("".join(c for c in name if c.isdigit()) or 12)))
        if args.layers:
            layers = args.layers
        common = _common(args, model, layers)
        steps = [s for s in args.steps.split(",") if not (args.skip_train and s == "train")]
        for train in [s == "train" for s in steps]:
            flag = ["--train"] if train else []
            frontends = ("cdynamo", "dynamo", "cdynamo_whole") if args.whole else ("cdynamo", "dynamo")
            samples = {fe: [] for fe in frontends}
            info = {}
            for _ in range(args.repeats):
                for fe in frontends:
                    r = _run_child(args, ["--child", "first", "--frontend", fe, *common, *flag])
                    samples[fe].append(r.pop("first_s"))
                    info.update(r)
            d, c = statistics.median(samples["dynamo"]), statistics.median(samples["cdynamo"])
            row = {"model": f"{model}{layers}", "step": "train" if train else "infer", "dynamo_first_s": d,
                   "cdynamo_first_s": c, "first_ratio": d / c, "regions": info, "samples": samples}
            if args.whole:
                row["cdynamo_whole_first_s"] = statistics.median(samples["cdynamo_whole"])
            if not args.skip_steady:
                s = _run_child(args, ["--child", "steady", *common, *flag, "--rounds", str(args.rounds),
                                      "--number", str(args.number)])
                row.update(dynamo_call_ms=s["dynamo"] * 1e3, cdynamo_call_ms=s["cdynamo"] * 1e3,
                           steady_ratio=s["cdynamo"] / s["dynamo"])
            rows.append(row)
            print(_fmt(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def _fmt(r):
    text = (f"{r['model']:>8} {r['step']:>5}: first call torch.compile {r['dynamo_first_s']:.1f} s, cdynamo "
            f"{r['cdynamo_first_s']:.1f} s, dynamo/cdynamo {r['first_ratio']:.2f}x")
    if "steady_ratio" in r:
        text += (f"; per call torch.compile {r['dynamo_call_ms']:.2f} ms, cdynamo {r['cdynamo_call_ms']:.2f} ms, "
                 f"cdynamo/dynamo {r['steady_ratio']:.3f}")
    if "cdynamo_whole_first_s" in r:
        text += f" (cdynamo whole graph {r['cdynamo_whole_first_s']:.1f} s)"
    reg = r.get("regions") or {}
    if reg:
        text += (f"; cdynamo compiled {reg.get('region_compiles', 0)} of {reg.get('region_segments', 0)} "
                 f"segments")
    return text


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="llama8,llama16,gpt2")
    p.add_argument("--layers", type=int, default=0, help="override each model's layer count")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--mode", default="default", choices=["default", "reduce-overhead", "max-autotune"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=1, help="fresh processes per frontend and case")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--number", type=int, default=20)
    p.add_argument("--timeout", type=int, default=3600)
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--steps", default="infer,train", help="infer, train or both")
    p.add_argument("--skip-steady", action="store_true")
    p.add_argument("--warm-inductor", action="store_true", help="start inductor (a tiny torch.compile) before timing")
    p.add_argument("--whole", action="store_true", help="also time cdynamo with config.compile_regions=False")
    p.add_argument("--json")
    # child-process arguments
    p.add_argument("--child", choices=["first", "steady"])
    p.add_argument("--frontend", choices=["cdynamo", "dynamo", "cdynamo_whole"])
    p.add_argument("--model", default="llama")
    p.add_argument("--train", action="store_true")
    return p.parse_args(argv)


if __name__ == "__main__":
    a = parse()
    if a.child == "first":
        child_first(a)
    elif a.child == "steady":
        child_steady(a)
    else:
        main(a)
