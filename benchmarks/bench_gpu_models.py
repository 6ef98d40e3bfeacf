# GPU per-call time of real-width library models (timm resnet50 / ViT-B, HF BERT / GPT-2 / T5 / Llama) under inductor,
# mode="default" and mode="reduce-overhead" (CUDA graphs), outputs kept alive as a user's loop keeps them:
# eager vs torch.compile vs cdynamo.compile, interleaved rounds in one process; GPT-2 decode (batch 1, 1 token).
"""Usage (GPU machine): python benchmarks/bench_gpu_models.py [--models resnet50,gpt2] [--modes reduce-overhead]
[--train] [--quick]. Random weights, models built from configs (no downloads). A row's ratio is dynamo/cdynamo
(> 1: cdynamo faster). Each compiled callable keeps its last KEEP outputs alive, as a training or generation loop
keeps losses and logits."""
import argparse
import sys
import time

import torch
import torch._dynamo

try:
    from . import common as C
except ImportError:  # run as a script
    import common as C

KEEP = 4  # outputs kept alive per callable (a user's loop holding the last few results)


def _hf(cfg_cls, model_cls, batch, seq, **cfg):
    def build():
        import transformers
        config = getattr(transformers, cfg_cls)(**cfg)
        model = getattr(transformers, model_cls)(config)
        vocab = config.vocab_size
        ids = torch.randint(0, vocab, (batch, seq))
        if model_cls.startswith("T5"):
            return model, (ids,), {"decoder_input_ids": ids[:, : max(1, seq // 2)]}
        return model, (ids,), {}
    return build


def _timm(name, batch, size):
    def build():
        sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/tests/py")
        import vision_shim  # noqa: F401  (torchvision's Python part without its C++ extension)
        import timm
        return timm.create_model(name, pretrained=False), (torch.randn(batch, 3, size, size),), {}
    return build


MODELS = {
    "resnet50": _timm("resnet50", 32, 224),
    "vit_base": _timm("vit_base_patch16_224", 16, 224),
    "bert": _hf("BertConfig", "BertModel", 8, 256),
    "gpt2": _hf("GPT2Config", "GPT2LMHeadModel", 8, 256),
    "t5": _hf("T5Config", "T5Model", 8, 256, d_model=512, d_ff=2048, num_layers=6, num_heads=8),
    "llama": _hf("LlamaConfig", "LlamaForCausalLM", 4, 256, hidden_size=1024, intermediate_size=2816,
                 num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16, vocab_size=32000),
    "gpt2_decode": _hf("GPT2Config", "GPT2LMHeadModel", 1, 1),
}


def _first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict) or hasattr(out, "values"):
        return _first_tensor(next(iter(out.values())))
    return _first_tensor(out[0])


def _keeping(fn, train, kwargs):
    kept = []

    def call(*args):
        if train:
            out = fn(*args, **kwargs)
            loss = _first_tensor(out).float().mean()
            loss.backward()
            kept.append(loss.detach())
        else:
            kept.append(fn(*args, **kwargs))
        del kept[:-KEEP]
    return call


def _per_call_ms(fns, args, number, repeat):
    res = {k: [] for k in fns}
    for _ in range(repeat):
        for k, f in fns.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(number):
                f(*args)
            torch.cuda.synchronize()
            res[k].append((time.perf_counter() - t0) / number * 1e3)
    return {k: C.median(v) for k, v in res.items()}


def run(models, modes, train=False, quick=False):
    C.setup()
    cd, err = C.load_cdynamo()
    if cd is None:
        raise SystemExit(f"cdynamo does not load: {err}")
    number, repeat = (5, 3) if quick else (20, 7)
    what = "training step" if train else "inference"
    tables = {m: C.Table(f"GPU {what}, inductor mode={m!r}, last {KEEP} outputs kept (median of interleaved rounds)",
                         "ms per call") for m in modes}
    first = C.Table(f"GPU first call ({what}: compile + run)", "s")
    for name in models:
        torch.manual_seed(0)
        model, args, kwargs = MODELS[name]()
        model = model.cuda()
        model.train(train)
        args = tuple(a.cuda() for a in args)
        kwargs = {k: v.cuda() for k, v in kwargs.items()}
        for mode in modes:
            torch._dynamo.reset()
            cd.reset()
            ctx = torch.enable_grad() if train else torch.no_grad()
            with ctx:
                t0 = time.perf_counter()
                dm = torch.compile(model, mode=mode)
                dm(*args, **kwargs)
                torch.cuda.synchronize()
                d_first = time.perf_counter() - t0
                t0 = time.perf_counter()
                cm = cd.compile(model, mode=mode)
                cm(*args, **kwargs)
                torch.cuda.synchronize()
                c_first = time.perf_counter() - t0
                fns = {k: _keeping(f, train, kwargs) for k, f in (("eager", model), ("dynamo", dm), ("cdynamo", cm))}
                for _ in range(3):  # past warm-up and CUDA-graph recording
                    for f in fns.values():
                        f(*args)
                ms = _per_call_ms(fns, args, number, repeat)
                if train:
                    model.zero_grad(set_to_none=True)
            rat = ms["dynamo"] / ms["cdynamo"]
            tables[mode].add(name, ms["eager"], ms["dynamo"], ms["cdynamo"], rat, ">= 1x", C.status(rat >= 1.0))
            first.add(f"{name} ({mode})", None, d_first, c_first, d_first / c_first, "-", "")
            print(f"[bench] {name} {mode} {what}: eager {ms['eager']:.3f} dynamo {ms['dynamo']:.3f} "
                  f"cdynamo {ms['cdynamo']:.3f} ms ({rat:.3f}x); first call {d_first:.1f} / {c_first:.1f} s",
                  flush=True)
        del model
        torch.cuda.empty_cache()
    out = list(tables.values()) + [first]
    for t in out:
        t.note(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; {C.machine_info()}")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet50,vit_base,bert,gpt2,t5,llama,gpt2_decode")
    p.add_argument("--modes", default="default,reduce-overhead")
    p.add_argument("--train", action="store_true")
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return
    for t in run(a.models.split(","), a.modes.split(","), a.train, a.quick):
        t.print()


if __name__ == "__main__":
    main()
