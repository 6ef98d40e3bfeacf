# dist_worker.py — owns one rank of test_distributed.py's gloo runs: DDP and FSDP2 training steps in eager, under
# torch._dynamo and under cdynamo, with what the test compares (parameters, gradients, graph and recompile counts).
"""Run as ``python dist_worker.py RANK WORLD PORT OUT_FILE``; rank 0 writes a pickle of its results to OUT_FILE."""
import contextlib
import os
import pickle
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 3
WIDTH = 512


class Blocks(nn.Module):
    """6 Linear(512) blocks (the issue's model); ``unused`` adds a layer forward never calls, ``gb`` a graph break."""

    def __init__(self, n=6, unused=False, gb=False):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(n))
        self.unused = nn.Linear(WIDTH, WIDTH) if unused else None
        self.gb = gb

    def forward(self, x):
        half = len(self.layers) // 2 if self.gb else len(self.layers)
        for layer in self.layers[:half]:
            x = torch.relu(layer(x))
        if self.gb:
            _graph_break()
        for layer in self.layers[half:]:
            x = torch.relu(layer(x))
        return x


_MODE = ["eager"]


def _graph_break():
    if _MODE[0] == "cdynamo":
        import cdynamo
        cdynamo.graph_break()
    elif _MODE[0] == "dynamo":
        torch._dynamo.graph_break()


class Block(nn.Module):
    """A transformer-like block with user code for its forward (what fully_shard wraps per block)."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return x + torch.relu(self.lin(self.norm(x)))


class Stack(nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(n))
        self.head = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class Counter:
    """A backend counting its graphs and, at run time, the backward graphs aot_autograd made of them (``bw_runs``):
    a DDP gradient hook records ``bw_runs`` when its bucket is all-reduced."""

    def __init__(self, frontend):
        self.frontend = frontend
        self.graphs = 0
        self.bw_runs = 0

    def __call__(self, gm, example_inputs):
        from functorch.compile import make_boxed_func
        from torch._functorch.aot_autograd import aot_module_simplified
        self.graphs += 1

        def fw(g, _):
            self._mark(g)
            return make_boxed_func(g.forward)

        def bw(g, _):
            self._mark(g)
            run = g.forward

            def counted(*args):
                self.bw_runs += 1
                return run(*args)
            return make_boxed_func(counted)
        if self.frontend == "dynamo":  # torch's wrapper: it handles DDPOptimizer's fake first call
            from torch._dynamo.backends.common import aot_autograd
            return aot_autograd(fw_compiler=fw, bw_compiler=bw)(gm, example_inputs)
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw, bw_compiler=bw)

    def _mark(self, g):
        if self.frontend == "cdynamo":
            import cdynamo._core
            cdynamo._core.C().mark_skip(g.forward.__code__)


def _compile(model, mode, counter):
    if mode == "eager":
        return model
    if mode == "dynamo":
        return torch.compile(model, backend=counter)
    import cdynamo
    return cdynamo.optimize(counter)(model)


def _recompiles(mode):
    if mode == "dynamo":
        return sum(torch._dynamo.utils.counters["recompiles"].values())
    if mode == "cdynamo":
        import cdynamo.utils
        return sum(cdynamo.utils.counters["recompiles"].values())
    return 0


def _reset(mode):
    _MODE[0] = mode
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    import cdynamo
    import cdynamo.utils
    cdynamo.reset()
    cdynamo.utils.counters.clear()


def _data(rank, step, n=8):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(n, WIDTH, generator=g), torch.randn(n, WIDTH, generator=g)


def ddp_run(rank, mode, *, off=False, **kw):
    """STEPS SGD steps of DDP(Blocks) compiled by ``mode`` (with optimize_ddp off: ``off``)."""
    if not off:
        return _ddp_steps(rank, mode, **kw)
    import cdynamo
    with cdynamo.config.patch(optimize_ddp=False), torch._dynamo.config.patch(optimize_ddp=False):
        return _ddp_steps(rank, mode, **kw)


def _ddp_steps(rank, mode, *, unused=False, frozen=False, accumulate=False, static_graph=False, gb=False,
               dynamic=False):
    """Final parameters, last gradients, graph and recompile counts, and when each bucket was all-reduced.
    ``dynamic``: the batch grows each step (the second compile has a symbolic batch size: fake example inputs)."""
    _reset(mode)
    torch.manual_seed(0)
    model = Blocks(unused=unused, gb=gb)
    if frozen:
        model.layers[1].requires_grad_(False)
    ddp = DDP(model, bucket_cap_mb=1, find_unused_parameters=unused, static_graph=static_graph)
    hook_marks = []
    counter = Counter(mode)

    def comm_hook(state, bucket):
        hook_marks.append((bucket.index(), counter.bw_runs))
        return allreduce_hook(state, bucket)
    ddp.register_comm_hook(None, comm_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    run = _compile(ddp, mode, counter)
    graphs_after_first = None
    for step in range(STEPS):
        opt.zero_grad()
        hook_marks.clear()
        counter.bw_runs = 0
        if accumulate:
            x, y = _data(rank, step, 16)
            with ddp.no_sync():
                nn.functional.mse_loss(run(x[:8]), y[:8]).backward()
            nn.functional.mse_loss(run(x[8:]), y[8:]).backward()
        else:
            x, y = _data(rank, step, 8 + 4 * step if dynamic else 8)
            nn.functional.mse_loss(run(x), y).backward()
        grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
        opt.step()
        if step == 0:
            graphs_after_first = counter.graphs
    return {"params": [p.detach().clone() for p in model.parameters()], "grads": grads,
            "graphs": counter.graphs, "graphs_after_first": graphs_after_first, "recompiles": _recompiles(mode),
            "hook_marks": list(hook_marks), "bw_runs": counter.bw_runs}


def fsdp_run(rank, mode, *, per_block=False):
    """STEPS AdamW steps of fully_shard(Stack) (each block, then the root), compiled whole or per block after
    sharding (``per_block=True``) or per block before (``"first"``, torchtitan's order: compile, then shard)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    _reset(mode)
    torch.manual_seed(0)
    model = Stack()
    counter = Counter(mode)
    # On CPU with gloo, also on a machine with GPUs (fully_shard's default mesh is on the default accelerator).
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for i, layer in enumerate(model.layers):
        if per_block == "first" and mode != "eager":
            model.layers[i] = _compile(layer, mode, counter)
        fully_shard(model.layers[i], mesh=mesh)
    fully_shard(model, mesh=mesh)
    if per_block == "first":
        run = model
    elif per_block and mode != "eager":
        for i, layer in enumerate(model.layers):
            model.layers[i] = _compile(layer, mode, counter)
        run = model
    else:
        run = _compile(model, mode, counter)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    graphs_after_first = None
    for step in range(STEPS):
        opt.zero_grad()
        x, y = _data(rank, step)
        nn.functional.mse_loss(run(x), y).backward()
        grads = [p.grad.full_tensor().clone() for p in model.parameters()]
        opt.step()
        if step == 0:
            graphs_after_first = counter.graphs
    return {"params": [p.detach().full_tensor().clone() for p in model.parameters()], "grads": grads,
            "graphs": counter.graphs, "graphs_after_first": graphs_after_first, "recompiles": _recompiles(mode)}


def dtensor_run(mode):
    """A function compiled on a DTensor, then called with plain tensors, then with the DTensor again (and the other
    way round): results (as plain tensors) and graph counts; a guard that took one for the other would be wrong."""
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh
    _reset(mode)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    w, x = torch.randn(8, 4), torch.randn(8, 4)
    dw, dx = distribute_tensor(w, mesh, [Shard(0)]), distribute_tensor(x, mesh, [Shard(0)])

    def f(a, b):
        return torch.relu(a * 2 + b).sum(0)
    counter = Counter(mode)
    g = _compile(f, mode, counter) if mode != "eager" else f
    out = []
    for a, b in ((dw, dx), (w, x), (dw, dx), (w, x)):
        r = g(a, b)
        out.append((type(r).__name__, r.full_tensor() if hasattr(r, "full_tensor") else r))
    return {"out": out, "graphs": counter.graphs, "recompiles": _recompiles(mode)}


DDP_CASES = {"plain": {}, "unused": {"unused": True}, "frozen": {"frozen": True}, "accumulate": {"accumulate": True},
             "static_graph": {"static_graph": True}, "graph_break": {"gb": True},
             "optimize_off": {"off": True}, "dynamic": {"dynamic": True}}


def main(rank, world, port, out_file, only=None):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    results = {}
    try:
        for name, kw in DDP_CASES.items():
            if only and f"ddp_{name}" not in only:
                continue
            for mode in ("eager", "dynamo", "cdynamo"):
                results[("ddp", name, mode)] = ddp_run(rank, mode, **kw)
        if not only or "dtensor" in only:
            for mode in ("eager", "dynamo", "cdynamo"):
                results[("dtensor", "mixed", mode)] = dtensor_run(mode)
        for per_block, name in ((False, "whole"), (True, "per_block"), ("first", "compile_then_shard")):
            if only and f"fsdp_{name}" not in only:
                continue
            for mode in ("eager", "dynamo", "cdynamo"):
                results[("fsdp", name, mode)] = fsdp_run(rank, mode, per_block=per_block)
    finally:
        if rank == 0:
            with open(out_file, "wb") as f:
                pickle.dump(results, f)
        dist.destroy_process_group()


if __name__ == "__main__":
    rank, world, port, out_file = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    only = set(sys.argv[5].split(",")) if len(sys.argv) > 5 and sys.argv[5] else None
    with contextlib.suppress(KeyboardInterrupt):
        main(rank, world, port, out_file, only)
