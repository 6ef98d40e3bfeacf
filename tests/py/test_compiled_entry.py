# test_compiled_entry.py — owns what a compiled call's entry tells inductor, as torch.compile's does: a new
# CUDA-graph generation per entry, and the module parameters / buffers marked as static inputs.
import pytest
import torch

import cdynamo

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


def _f(x):
    return torch.sin(x) + 1


def _generation():
    from torch._dynamo.mutation_guard import GenerationTracker
    return GenerationTracker.generation


def test_each_compiled_entry_starts_a_generation_as_torch_compile():
    # The counter's only reader is inductor's CUDA-graph trees: cdynamo ticks it once their module is loaded.
    import torch._inductor.cudagraph_trees  # noqa: F401
    x = torch.randn(3)
    ref = torch.compile(_f, backend="eager")
    ref(x)
    g = _generation()
    ref(x)
    ref(x)
    dynamo_step = (_generation() - g) / 2
    opt = cdynamo.optimize("eager")(_f)
    opt(x)
    g = _generation()
    for _ in range(3):
        torch.testing.assert_close(opt(x), _f(x))
    assert (_generation() - g) / 3 == dynamo_step == 1
    g = _generation()
    cdynamo.disable(_f)(x)  # capture off: not a compiled invocation
    assert _generation() == g


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.bn = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.lin(x)).relu()


def _static_indices(compile_model, monkeypatch):
    """The static input indices inductor's forward compile gets for _Net (the ones its CUDA graphs read in place)."""
    import torch._inductor.compile_fx as cfx
    seen = []
    real = cfx.get_static_input_idxs

    def recording(num_fixed):
        out = real(num_fixed)
        seen.append(list(out))
        return out

    monkeypatch.setattr(cfx, "get_static_input_idxs", recording)
    import torch._inductor.config as inductor_config
    # a cache hit skips the compile that reads the static indices
    monkeypatch.setattr(inductor_config, "fx_graph_cache", False)
    import torch._functorch.config as functorch_config
    if hasattr(functorch_config, "enable_autograd_cache"):
        monkeypatch.setattr(functorch_config, "enable_autograd_cache", False)
    m = _Net().eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(compile_model(m)(x), m(x))
    assert len(seen) == 1, seen
    return seen[0]


def test_inductor_gets_parameters_and_buffers_as_static_inputs_as_torch_compile(monkeypatch):
    mine = _static_indices(lambda m: cdynamo.compile(m, backend="inductor"), monkeypatch)
    theirs = _static_indices(lambda m: torch.compile(m, backend="inductor"), monkeypatch)
    # 2 parameters of lin, 2 of bn, bn's running_mean / running_var (num_batches_tracked is not read in eval)
    assert len(mine) == len(theirs) == 6, (mine, theirs)


def test_module_tensors_are_marked_static_in_the_graph_given_to_a_backend():
    seen = {}

    def backend(gm, example_inputs):
        seen["static"] = [n.name for n in gm.graph.find_nodes(op="placeholder")
                          if n.meta.get("tensor_dict", {}).get("_dynamo_static_input_type")]
        seen["all"] = [n.name for n in gm.graph.find_nodes(op="placeholder")]
        return gm.forward

    m = _Net().eval()
    x = torch.randn(2, 4)
    torch.testing.assert_close(cdynamo.optimize(backend)(m)(x), m(x))
    assert len(seen["all"]) == 7 and len(seen["static"]) == 6, seen
    assert seen["all"][0] not in seen["static"]  # the user's input is not static
