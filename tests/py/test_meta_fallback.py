# test_meta_fallback.py — owns the tests of shape propagation for aten ops without a meta kernel (python/cdynamo/_meta_fallback.py, called from csrc/interp/calls.cpp): such ops stay in the graph, ops with data-dependent outputs, mutating ops and library ops still break, compared with eager and torch._dynamo.
import pytest
import torch

import cdynamo
from cdynamo import _meta_fallback
from graph_counts import eager_cdynamo_dynamo

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


def test_aten_op_without_meta_kernel_stays_in_the_graph():
    # aten::_add_relu.Scalar has CPU/CUDA kernels and no Meta kernel on torch 2.13.
    op = torch.ops.aten._add_relu.Scalar
    with pytest.raises(NotImplementedError):
        op(torch.empty(2, device="meta"), 1.0)

    def f(x):
        y = op(x * 2, -0.5)
        return y.t() + 1, y.shape

    x = torch.randn(4, 8)
    ref, got, cnt, dcnt = eager_cdynamo_dynamo(f, x)
    torch.testing.assert_close(got[0], ref[0])
    assert got[1] == ref[1]
    assert cnt.frame_count == 1 == dcnt.frame_count
    assert cnt.op_count == dcnt.op_count == 4
    assert not cdynamo.explain(f, x).break_reasons


@pytest.mark.parametrize("op", ["bincount", "masked_select"])
def test_data_dependent_output_shape_still_breaks(op):
    def f(x):
        y = x.abs() + 1
        z = torch.bincount(y.long()) if op == "bincount" else torch.masked_select(y, y > 1.5)
        return z * 2

    x = torch.tensor([0.5, 1.7, 2.2, 3.9])
    ref, got, cnt, dcnt = eager_cdynamo_dynamo(f, x)
    torch.testing.assert_close(got, ref)
    reasons = [b.reason for b in cdynamo.explain(f, x).break_reasons]
    assert any("data-dependent output" in r for r in reasons), reasons
    assert cnt.frame_count == 2


def test_fallback_refuses_mutating_and_library_ops():
    m = torch.empty(3, device="meta")
    with pytest.raises(_meta_fallback.Refused, match="mutates"):
        _meta_fallback.run(torch.ops.aten.add_.Tensor, (m, m), {}, "cpu")
    lib = torch.library.Library("cdynamo_test_mf", "FRAGMENT")
    lib.define("noisy(Tensor x) -> Tensor")
    calls = []

    def noisy(x):
        calls.append(1)
        return x + 1

    lib.impl("noisy", noisy, "CPU")
    with pytest.raises(_meta_fallback.Refused, match="not an aten operator"):
        _meta_fallback.run(torch.ops.cdynamo_test_mf.noisy.default, (m,), {}, "cpu")
    assert calls == []  # the library's kernel never ran at trace time

    def f(x):
        return torch.ops.cdynamo_test_mf.noisy(x * 2) + 1

    x = torch.randn(3)
    torch.testing.assert_close(cdynamo.optimize("eager")(f)(x), x * 2 + 2)
    assert calls == [1]


def test_fallback_answers_meta_tensors_with_the_kernels_metadata():
    m = torch.empty(4, 8, device="meta").t()
    out = _meta_fallback.run(torch.ops.aten._add_relu.Scalar, (m, 1.0), {}, "cpu")
    assert out.device.type == "meta" and out.shape == (8, 4) and out.dtype == torch.float32
    assert out.stride() == torch._add_relu(torch.zeros(4, 8).t(), 1.0).stride()
