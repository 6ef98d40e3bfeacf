# test_explain_regions.py — owns explain()'s report of regional compilation (issue 33): each graph's regions as the
# current config.compile_regions cuts it (None: the automatic policy's grouping, or "whole graph" and why), checked
# against what the compile itself does (its `regions` log and the segments the backend receives).
import io
import sys

import pytest
import torch

import cdynamo
from cdynamo import _logging, config
from cdynamo.testing import CompileCounterWithBackend

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from test_regions import _layer_cost, _model, _x  # noqa: E402  (the small Block stack of the regions tests)

pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")


def _compiled(model, **patch):
    """(backend compiles, regions log) of one call compiled by region where the policy `patch` says (aot_eager with
    compile_regions None stands for inductor: the automatic policy applies to backends marked for regions)."""
    stream = io.StringIO()
    _logging.enable("regions", stream=stream)
    cnt = CompileCounterWithBackend("aot_eager")
    cnt._cdynamo_regions = True
    try:
        with config.patch(**patch):
            cdynamo.optimize(cnt)(model)(_x())
    finally:
        _logging.disable("regions")
        _logging.set_stream(None)
    return cnt.frame_count, stream.getvalue()


def test_the_automatic_policy_that_keeps_the_graph_whole_is_reported_whole():
    model = _model(n=4)
    out = cdynamo.explain(model)(_x())  # default config: compile_regions None, regions_min_work 10
    assert out.regions == [[]]
    assert out.region_plans[0].startswith("whole graph: layers too small to pay for a cut each")
    assert "Graph 1: whole graph" in str(out) and "compile_regions=None" in str(out)
    compiles, log = _compiled(model)
    assert compiles == 1 and "graph compiled whole" in log  # what the compile does: one graph, not 3 segments


def test_the_automatic_policy_grouping_is_reported_as_compiled():
    work = 1.5 * _layer_cost(16, 3, 5)  # a Block holds 2/3 of the work asked: 2 Blocks a region
    model = _model(n=6)
    with config.patch(regions_min_work=work):
        out = cdynamo.explain(model)(_x())
    assert [[(r["cls"], r["calls"]) for r in g] for g in out.regions] == [[("Block (2 layers)", 3)]]
    assert out.region_plans == ["cut into 5 segments, 3 compiled"]
    assert "Block (2 layers) x3" in str(out)
    compiles, log = _compiled(model, regions_min_work=work)
    assert compiles == 3 and "region Block (2 layers): 3 calls" in log


def test_compile_regions_true_reports_one_region_per_layer_and_false_none():
    model = _model(n=4)
    with config.patch(compile_regions=True):
        on = cdynamo.explain(model)(_x())
    assert [[(r["cls"], r["calls"]) for r in g] for g in on.regions] == [[("Block", 4)]]
    assert on.region_plans == ["cut into 6 segments, 3 compiled"]
    with config.patch(compile_regions=False):
        off = cdynamo.explain(model)(_x())
    assert off.regions == [[]] and off.region_plans == ["whole graph: config.compile_regions is False"]


def test_graphs_without_repeated_calls_report_nothing():
    out = cdynamo.explain(lambda x: (x + 1).relu())(torch.randn(3))
    assert out.region_plans == [None] and "Repeated Regions" not in str(out)
