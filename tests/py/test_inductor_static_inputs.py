# test_inductor_static_inputs.py — owns the test that a static graph reaches inductor with static example inputs (no
# symbol per size made by aot_autograd, size-specialised kernels), results and gradients equal eager.
import pytest
import torch
from torch.fx.experimental import symbolic_shapes

import cdynamo

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x):
        return torch.nn.functional.gelu(self.norm(self.fc(x))).softmax(-1) * x.sum(-1, True)


@pytest.mark.parametrize("train", [False, True])
def test_static_graph_compiles_without_symbols(train, monkeypatch):
    made = []
    create = symbolic_shapes.ShapeEnv.create_symbol

    def counting(self, *args, **kwargs):
        made.append(args[:1])
        return create(self, *args, **kwargs)

    monkeypatch.setattr(symbolic_shapes.ShapeEnv, "create_symbol", counting)
    torch.manual_seed(0)
    model = Net()
    ref = Net()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(4, 6, 8, generator=torch.Generator().manual_seed(0))
    fn = cdynamo.optimize("inductor", dynamic=False)(model)
    with torch.set_grad_enabled(train):
        got, want = fn(x), ref(x)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert made == []  # torch._dynamo hands static graphs to inductor the same way
    if train:
        got.pow(2).sum().backward()
        want.pow(2).sum().backward()
        for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)
