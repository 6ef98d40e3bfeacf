# test_architecture.py — checks the structure rules of docs/architecture.md "Structure of the core" on the source tree
# (scripts/arch_metrics.py): no import cycle among python/cdynamo modules or csrc/ folders, no cdynamo module imported
# by name from C++, no C++ function over 150 lines, at most 12 public members in each interpreter state class.
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "arch_metrics.py")

pytestmark = pytest.mark.skipif(not os.path.exists(SCRIPT), reason="needs the source tree")


@pytest.fixture(scope="module")
def metrics():
    spec = importlib.util.spec_from_file_location("arch_metrics", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_python_import_graph_is_a_dag(metrics):
    assert metrics.cycles(metrics.python_graph(lazy=False)) == []
    # Function-level imports too: a lazy import from a lower module to a higher one is still a cycle.
    assert metrics.cycles(metrics.python_graph(lazy=True)) == []


def test_cycle_finder_finds_a_cycle(metrics):
    # The check above cannot pass vacuously: the same finder reports a planted cycle.
    assert metrics.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_csrc_folders_have_no_include_cycle(metrics):
    graph = metrics.folder_graph()
    assert "interp" in graph and "hook" in graph  # the scan found the folders
    assert metrics.cycles(graph) == []


def test_cpp_core_imports_no_cdynamo_module_by_name(metrics):
    found = [(m, where) for m, where, _ in metrics.cpp_imports() if m == "cdynamo" or m.startswith("cdynamo.")]
    assert found == [], "use interp::services() (csrc/interp/services.h) instead"
    # The scan itself sees by-name imports (of other modules).
    assert any(m == "torch" for m, _, _ in metrics.cpp_imports())


def test_no_cpp_function_over_150_lines(metrics):
    rows, over = metrics.longest_functions(5)
    assert rows and rows[0][0] > 50  # the scan found function bodies
    assert over == 0, f"functions over 150 lines: {[r for r in rows if r[0] > 150]}"


def test_tracer_like_classes_have_few_public_members(metrics):
    for spec in metrics.TRACER_LIKE:
        path, cls = spec.split(":")
        count = metrics.public_members(os.path.join(ROOT, "csrc", path), cls)
        assert count is not None, f"{cls} not found in csrc/{path}"
        assert 0 < count <= 12, f"{cls} has {count} public members"
