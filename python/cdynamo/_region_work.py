# _region_work.py — owns regional compilation's automatic policy: a layer's estimated device time, and how many
# consecutive layers one region must hold so that the cost of calling a compiled segment stays a small part of it.
"""Why: each segment of a graph cut by region is one more call of a compiled callable (inductor's runtime wrapper,
aot_autograd's function), about 20 µs on a CPU and 40 µs with CUDA launches; GPT-2 decoding one token on an H100
ran at 0.82-0.89x of torch.compile's speed with its 12 layers as 14 segments. A cut pays for itself when the layer's
own work is large beside that cost (prefill, training, real batch sizes) and hurts when it is not (decoding).

A segment that gradients flow through costs more than one call: it is an autograd node, with aot_autograd's
forward wrappers, the engine's node and aot_autograd's backward wrappers; HF GPT-2 of 12 layers trained on this CPU
(width 64, 2x32 tokens) took ~85 µs more per step for each segment (14 segments against 8 and 6), against ~20 µs
for an inference call.

The estimate is deliberately simple and deterministic (no timing): per layer, the larger of its matmul-like flops
over a throughput and the bytes it reads from outside the layer (weights, activations) over a bandwidth, times 3 when
gradients flow (backward). Layers are grouped k at a time, k the smallest divisor of the run's length whose group
has ``config.regions_min_work`` segment calls' worth of work (training segment calls when gradients flow); a run
that cannot make ``config.regions_min_calls`` such groups is not cut (the graph compiles whole if no run is)."""
import math
import operator

import torch

from . import _logging, config

# One compiled-segment call and the device's speed, per device type (the numbers the estimate is scaled by; GPU:
# an H100's GPT-2 decode, 13 extra segments cost ~0.5 ms; CPU: bench_regions' steady state, where one torch thread
# ran a GPT-2 / Llama layer of width 64 over 2x32 tokens in 1.5-2x less time than 20 GFLOP/s gave).
_SEGMENT_CALL_S = {"cuda": 40e-6, "cpu": 20e-6}
_GRAD_CALLS = 4  # a segment gradients flow through, in inference calls (see the module docstring)
_FLOPS = {"cuda": 50e12, "cpu": 35e9}
_BYTES = {"cuda": 2e12, "cpu": 20e9}
_DEFAULT = "cpu"

_MATMUL = {"matmul", "mm", "bmm", "__matmul__"}
_ADD_MATMUL = {"addmm", "baddbmm", "addbmm"}
_CONV = {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "_convolution",
         "convolution"}


def _hint(d):
    """An int for a size: a symbolic size's example value (1 when it has none)."""
    if isinstance(d, torch.SymInt):
        h = d.node.hint
        return int(h) if h is not None else 1
    return int(d)


def _numel(t):
    return math.prod(_hint(d) for d in t.shape)


def _tensors(args):
    out = []
    torch.fx.node.map_aggregate(args, lambda a: out.append(a) if isinstance(a, torch.fx.Node) else None)
    return out


def _name(n):
    t = n.target
    if t is operator.matmul:
        return "__matmul__"
    return t if isinstance(t, str) else getattr(t, "__name__", "")


def _flops(n, out, values):
    """Multiply-adds times 2 of a matmul-like node (its output's size times its inner dimension); other nodes: one per
    output element."""
    name = _name(n)
    args = [values.get(a) for a in _tensors(n.args)]
    args = [a for a in args if isinstance(a, torch.Tensor)]
    size = _numel(out)
    if name == "linear" and len(args) >= 2:
        return 2 * size * _hint(args[1].shape[-1])
    if name in _MATMUL and args and args[0].dim() >= 1:
        return 2 * size * _hint(args[0].shape[-1])
    if name in _ADD_MATMUL and len(args) >= 2 and args[1].dim() >= 1:
        return 2 * size * _hint(args[1].shape[-1])
    if name in _CONV and len(args) >= 2 and args[1].dim() >= 1:
        w = args[1]
        return 2 * size * (_numel(w) // max(1, _hint(w.shape[0])))
    if name == "scaled_dot_product_attention" and len(args) >= 2 and args[1].dim() >= 2:
        return 4 * size * _hint(args[1].shape[-2])
    return size


def layer_seconds(nodes, values):
    """(estimated seconds of one run of ``nodes``, device type): see the module docstring."""
    seconds, dev, _ = layer_cost(nodes, values)
    return seconds, dev


def segment_call_seconds(dev, grad):
    """The estimated cost of one segment in a call on device type ``dev``; ``grad``: gradients flow through it
    (forward and backward, one autograd node)."""
    return _SEGMENT_CALL_S[dev] * (_GRAD_CALLS if grad else 1)


def layer_cost(nodes, values):
    """(estimated seconds of one run of ``nodes``, device type, whether gradients flow through them)."""
    inside = set(nodes)
    flops, read, seen = 0, 0, set()
    device, grad = None, False
    for n in nodes:
        out = values.get(n)
        if isinstance(out, torch.Tensor):
            flops += _flops(n, out, values)
            device = device or out.device.type
            grad = grad or out.requires_grad
        for a in _tensors((n.args, n.kwargs)):
            v = values.get(a)
            if a in inside or a in seen or not isinstance(v, torch.Tensor):
                continue
            seen.add(a)
            read += _numel(v) * v.element_size()
            device = device or v.device.type
    dev = device if device in _FLOPS else _DEFAULT
    seconds = max(flops / _FLOPS[dev], read / _BYTES[dev])
    grad = grad and torch.is_grad_enabled()
    return seconds * (3 if grad else 1), dev, grad


def _runs(spans):
    """Consecutive spans of one class under one parent (find_calls' groups), in graph order."""
    runs = []
    for s in spans:
        parent = s[2].rsplit(".", 1)[0]
        if runs and runs[-1][-1][3] is s[3] and runs[-1][-1][2].rsplit(".", 1)[0] == parent:
            runs[-1].append(s)
        else:
            runs.append([s])
    return runs


def _merged(group):
    first, last = group[0], group[-1]
    return (first[0], last[1], f"{first[2]}-{last[2].rsplit('.', 1)[-1]}", first[3], len(group))


def group_by_work(nodes, spans, values, min_calls):
    """(spans, None): ``spans`` with each run's layers grouped k at a time (a grouped span carries k as its fifth
    item); ([], reason) when no run's layers can make ``min_calls`` regions of enough work."""
    out, notes = [], []
    for run in _runs(spans):
        a, b = run[0][0], run[0][1]
        seconds, dev, grad = layer_cost(nodes[a:b], values)
        need = config.regions_min_work * segment_call_seconds(dev, grad)
        k_min = 1 if seconds >= need else math.ceil(need / max(seconds, 1e-12))
        k = next((d for d in range(k_min, len(run) + 1) if len(run) % d == 0), len(run))
        notes.append(f"{run[0][3].__name__}: ~{seconds * 1e6:.1f} us per layer on {dev}"
                     f"{' with backward' if grad else ''}, grouped {k} at a time")
        if len(run) // k < min_calls:
            continue
        out.extend(run if k == 1 else [_merged(run[i:i + k]) for i in range(0, len(run), k)])
    if not out:
        return [], "layers too small to pay for a cut each (" + "; ".join(notes) + ")"
    _logging.emit("regions", "automatic policy: " + "; ".join(notes))
    return out, None
