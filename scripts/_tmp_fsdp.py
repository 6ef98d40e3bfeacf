# gpu_ddp.py — owns the distributed training benchmark: GPT-2 small (random weights) with DDP and FSDP2 on every
# local GPU (or gloo CPU ranks), eager vs torch.compile+inductor vs cdynamo+inductor, interleaved rounds.
"""Usage: python scripts/gpu_ddp.py [--nproc N] [--kinds ddp,fsdp2] [--steps S] [--rounds R] [--small] [--fsdp-compile whole|blocks]

Without RANK in the environment it starts N ranks of itself (torchrun's variables; N = the GPUs, or 2 on CPU) on a
free loopback port and waits. Each rank trains GPT2LMHeadModel (12 layers, 768 wide; --small: 2 layers, 64 wide for
a CPU/gloo check) on batch 8x256 per rank with AdamW, one model per mode, all built from the same seed: first
warm-up steps (compiles), then R rounds of S steps per mode, modes interleaved within each round. Rank 0 prints
tokens/s (all ranks), the ratios, graph counts (backend compiles), recompiles, the losses of each mode's first
steps (the same batches for every mode) and, on CUDA, each mode's peak memory per GPU.
"""
import argparse
import os
import socket
import subprocess
import sys
import time

MODES = ("cdynamo",)


def _args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--nproc", type=int, default=0)
    p.add_argument("--kinds", default="ddp,fsdp2")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--small", action="store_true")
    p.add_argument("--fsdp-compile", choices=("whole", "blocks"), default="whole",
                   help="FSDP2: compile the sharded model whole, or each block before sharding it (torchtitan's order)")
    return p.parse_args(argv)


def launch(args):
    import torch
    n = args.nproc or (torch.cuda.device_count() if torch.cuda.is_available() else 2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), PYTHONUNBUFFERED="1")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env=env))
    return max(p.wait() for p in procs)


class Counter:
    """A backend counting the graphs it compiles with inductor (torch.compile's or cdynamo's)."""

    def __init__(self, compile_fn):
        self.compile_fn = compile_fn
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return self.compile_fn(gm, example_inputs)


def _model(args, device):
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "py"))
    import vision_shim  # noqa: F401  (before transformers imports torchvision: its C++ part may not load here)
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=12, n_embd=64, n_head=2) if args.small else GPT2Config(n_layer=12, n_embd=768, n_head=12)
    cfg.resid_pdrop = cfg.embd_pdrop = cfg.attn_pdrop = 0.0  # the same losses in every mode
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).to(device)
    # Named, so loss_function does not call logger.warning_once on every step: cdynamo guards that bound method by
    # identity, made anew on each read, and traced the frame again every step (32 times, then ran it as Python).
    model.loss_type = "ForCausalLM"
    return model, cfg


def _wrap(kind, model, device, compile_block=None):
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.fsdp import fully_shard
    blocks = model.transformer.h
    for i in range(len(blocks)):
        if compile_block is not None:
            blocks[i] = compile_block(blocks[i])
        fully_shard(blocks[i])
    fully_shard(model)
    return model


def _frontend(mode):
    """(wrap a module, the counting backend) for a compiled mode."""
    if mode == "torch.compile":
        import torch
        from torch._inductor.compile_fx import compile_fx
        c = Counter(compile_fx)
        return (lambda m: torch.compile(m, backend=c)), c
    import cdynamo
    from cdynamo.backends.registry import lookup_backend
    c = Counter(lookup_backend("inductor"))
    return cdynamo.optimize(c), c


def _recompiles(mode):
    import torch
    if mode == "torch.compile":
        return sum(torch._dynamo.utils.counters["recompiles"].values())
    if mode == "cdynamo":
        import cdynamo.utils
        return sum(cdynamo.utils.counters["recompiles"].values())
    return 0


class Run:
    """One mode's model, optimizer and compiled callable."""

    def __init__(self, kind, mode, args, device):
        import torch
        self.mode = mode
        self.device = device
        base = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        model, self.cfg = _model(args, device)
        wrap, self.counter = _frontend(mode) if mode != "eager" else (None, None)
        per_block = kind == "fsdp2" and args.fsdp_compile == "blocks"
        self.model = _wrap(kind, model, device, wrap if per_block else None)
        self.call = wrap(self.model) if wrap is not None and not per_block else self.model
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, foreach=True)
        self.base = base
        self.losses = []
        self.peak = 0

    def step(self, ids):
        loss = self.call(input_ids=ids, labels=ids).loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.detach()


def _batch(args, cfg, rank, step, device):
    import torch
    g = torch.Generator().manual_seed(10_000 * step + rank)
    return torch.randint(0, cfg.vocab_size, (args.batch, args.seq), generator=g).to(device)


def _sync(device):
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench(kind, args, rank, world, device):
    import torch
    import torch.distributed as dist
    runs = [Run(kind, mode, args, device) for mode in MODES]
    for i in range(args.warmup):  # compiles; the losses of the first steps are compared
        for r in runs:
            if device.type == "cuda" and i == args.warmup - 1:
                torch.cuda.reset_peak_memory_stats(device)
            r.losses.append(float(r.step(_batch(args, r.cfg, rank, i, device))))
            _sync(device)
            if device.type == "cuda" and i == args.warmup - 1:
                r.peak = torch.cuda.max_memory_allocated(device) - r.base
    graphs_warm = {r.mode: r.counter.graphs if r.counter else 0 for r in runs}
    times = {r.mode: [] for r in runs}
    for rnd in range(args.rounds):
        for r in runs:  # interleaved: every round runs each mode
            ids = _batch(args, r.cfg, rank, 100 + rnd, device)
            dist.barrier()
            _sync(device)
            t0 = time.perf_counter()
            for _ in range(args.steps):
                r.step(ids)
            _sync(device)
            dist.barrier()
            times[r.mode].append(time.perf_counter() - t0)
    if rank == 0:
        _report(kind, args, world, runs, times, graphs_warm, device)


def _report(kind, args, world, runs, times, graphs_warm, device):
    tokens = args.batch * args.seq * args.steps * world
    tps = {m: tokens / sorted(ts)[len(ts) // 2] for m, ts in times.items()}  # median round
    how = f", compiled {args.fsdp_compile}" if kind == "fsdp2" else ""
    print(f"\n== {kind}{how} on {world} x {device.type} ({'small' if args.small else 'GPT-2 small'}), batch "
          f"{args.batch}x{args.seq} per rank, {args.rounds} rounds x {args.steps} steps ==")
    for r in runs:
        g = r.counter.graphs if r.counter else 0
        mem = f", peak {r.peak / 2**30:.2f} GiB/GPU" if device.type == "cuda" else ""
        print(f"{r.mode:>14}: {tps[r.mode]:10.0f} tokens/s  graphs {g} (after warm-up {graphs_warm[r.mode]}), "
              f"recompiles {_recompiles(r.mode)}{mem}; losses {[round(x, 5) for x in r.losses]}")
    e, t, c = tps["eager"], tps["torch.compile"], tps["cdynamo"]
    print(f"ratios: cdynamo/torch.compile {c / t:.3f}, cdynamo/eager {c / e:.3f}, torch.compile/eager {t / e:.3f}")
    ref = runs[0].losses
    for r in runs[1:]:
        diff = max(abs(a - b) / max(abs(b), 1e-9) for a, b in zip(r.losses, ref))
        print(f"max relative loss difference {r.mode} vs eager: {diff:.2e}")


def worker(args):
    import torch
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    try:
        for kind in args.kinds.split(","):
            bench(kind, args, rank, world, device)
            torch._dynamo.reset()
            import cdynamo
            cdynamo.reset()
            if cuda:
                torch.cuda.empty_cache()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    a = _args()
    if "RANK" not in os.environ:
        sys.exit(launch(a))
    worker(a)
