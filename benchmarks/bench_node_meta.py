# Cost of node meta (stack_trace, nn_module_stack, source_fn_stack) on the first call: a BERT-depth model (12 layers) and a 1000-op chain, first call (process CPU time) under a backend that receives the meta, meta written vs not (interleaved, same process).
import statistics
import sys
import time
import warnings

import torch

try:
    from . import common as C
except ImportError:  # run as a script
    import common as C


def _bert12():
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "py"))
    import vision_shim  # noqa: F401  (transformers' model classes import torchvision when it is installed)
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=12, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=128)
    model = BertModel(cfg).eval()
    ids = torch.randint(0, 512, (1, 32), generator=torch.Generator().manual_seed(0))
    return model, (ids,)


def _chain(n):
    ops = ["x = torch.sin(x)", "x = x * 1.01", "x = x + y", "x = x.tanh()"]
    src = "def chain(x, y):\n" + "".join(f"    {ops[i % len(ops)]}\n" for i in range(n)) + "    return x\n"
    ns = {"torch": torch}
    exec(compile(src, "<bench_node_meta_chain>", "exec"), ns)
    return ns["chain"], (torch.randn(8), torch.randn(8))


def _first_call_ms(cdynamo, target, args):
    """CPU time of the process (ms) for one first call: less disturbed than wall time on a shared machine (the
    call does no I/O and torch runs on one thread)."""
    backend = C.CountingBackend()
    cdynamo.reset()
    t0 = time.process_time_ns()
    with torch.no_grad():
        cdynamo.optimize(backend)(target)(*args)
    return (time.process_time_ns() - t0) / 1e6, backend


def _meta_counts(cdynamo, target, args):
    """Nodes of the graphs and distinct stack_trace texts among them (each distinct stack is formatted once)."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    cdynamo.reset()
    with torch.no_grad():
        cdynamo.optimize(keep)(target)(*args)
    nodes = [n for gm in graphs for n in gm.graph.nodes]
    return len(nodes), len({n.meta.get("stack_trace") for n in nodes} - {None})


def run(quick=False):
    C.setup()
    warnings.simplefilter("ignore")
    import cdynamo
    switch = getattr(cdynamo._C._testing, "set_node_meta", None)  # absent before node meta was made switchable
    cases = [("chain 1000 ops", *_chain(1000))]
    try:
        cases.insert(0, ("BERT 12 layers", *_bert12()))
    except ImportError:
        pass
    rounds = 5 if quick else 15
    results = []
    for label, target, args in cases:
        modes = [True, False] if switch else [True]
        times = {m: [] for m in modes}
        for m in modes:  # warm-up: imports, linecache, meta caches
            if switch:
                switch(m)
            _first_call_ms(cdynamo, target, args)
        ops = None
        for _ in range(rounds):
            for m in modes:
                if switch:
                    switch(m)
                ms, be = _first_call_ms(cdynamo, target, args)
                times[m].append(ms)
                ops = be.ops
        if switch:
            switch(True)
        on = statistics.median(times[True])
        off = statistics.median(times[False]) if switch else None
        ratio = on / off if off else None
        nodes, stacks = _meta_counts(cdynamo, target, args)
        print(f"{label:18s} ops={ops:5d} nodes={nodes:5d} distinct stack traces={stacks:5d}  meta {on:8.1f} ms" + (f"  no meta {off:8.1f} ms  ratio {ratio:.3f}" if off else "")
              + f"  (rounds: {' '.join(f'{x:.0f}' for x in times[True])})", flush=True)
        results.append(dict(case=label, meta_ms=on, no_meta_ms=off, ratio=ratio, ops=ops, nodes=nodes,
                            distinct_stack_traces=stacks))
    return results


if __name__ == "__main__":
    C.setup()
    print(C.machine_info(), "(times: process CPU ms, median)")
    run(quick="--quick" in sys.argv)
