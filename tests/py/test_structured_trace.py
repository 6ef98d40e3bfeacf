# test_structured_trace.py — owns TORCH_TRACE / CDYNAMO_TRACE: cdynamo's compile events in torch's structured-trace
# format, under torch._dynamo-style compile ids, and tlparse's report of them (issue 35 item 1).
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent("""
    import torch, cdynamo
    def f(x):
        y = torch.sin(x)
        print("break")
        return y * 2
    g = cdynamo.optimize(BACKEND)(f)
    for n in (3, 4):
        x = torch.randn(n)
        torch.testing.assert_close(g(x), f(x))
""")


def _run(tmp_path, env_var, backend="'eager'"):
    trace = tmp_path / "trace"
    env = dict(os.environ)
    env.pop("TORCH_TRACE", None)
    env.pop("CDYNAMO_TRACE", None)
    env[env_var] = str(trace)
    out = subprocess.run([sys.executable, "-c", _SCRIPT.replace("BACKEND", backend)], capture_output=True,
                         text=True, env=env, cwd=str(tmp_path), timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    files = list(trace.iterdir())
    assert len(files) == 1, files
    return files[0]


def _events(path):
    """(event name, metadata, compile id or None) of each line of a structured trace."""
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("\t") or not line.strip():
            continue  # a payload line
        head, _, body = line.partition("] ")
        record = json.loads(body)
        name = next(k for k in record if k not in ("frame_id", "frame_compile_id", "attempt", "has_payload",
                                                   "stack", "rank"))
        cid = f"{record['frame_id']}/{record['frame_compile_id']}" if "frame_id" in record else None
        out.append((name, record[name], cid))
    return out


def _by_id(events):
    ids = {}
    for name, meta, cid in events:
        if cid is not None:
            label = meta["name"] if name == "artifact" else name
            ids.setdefault(cid, []).append(label)
    return ids


@pytest.mark.parametrize("env_var", ["TORCH_TRACE", "CDYNAMO_TRACE"])
def test_compile_ids_and_artifacts_of_a_break_at_two_shapes(tmp_path, env_var):
    ids = _by_id(_events(_run(tmp_path, env_var)))
    # f at each shape (0/0, 0/1) and its continuation (a new code object per compile of f: frames 1 and 2)
    assert sorted(ids) == ["0/0", "0/1", "1/0", "2/0"], ids
    for cid, labels in ids.items():
        for kind in ("dynamo_start", "dynamo_output_graph", "dynamo_cpp_guards_str", "compilation_metrics"):
            assert kind in labels, (cid, labels)
        assert any(label.endswith("_ORIGINAL_BYTECODE") for label in labels), (cid, labels)
        assert any(label.endswith("_MODIFIED_BYTECODE") for label in labels), (cid, labels)
    assert "dynamo_graph_break_reason" in ids["0/0"] and "dynamo_graph_break_reason" in ids["0/1"]
    assert "recompile_reasons" in ids["0/1"] and "recompile_reasons" not in ids["0/0"]


def test_no_trace_without_a_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_TRACE", "CDYNAMO_TRACE")}
    code = "import torch, cdynamo, cdynamo._trace as t; cdynamo.optimize('eager')(torch.sin)(torch.ones(2)); " \
           "print(t.enabled())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0 and out.stdout.split()[-1] == "False", out.stderr[-2000:]


def test_inductor_artifacts_land_under_the_graphs_compile_id(tmp_path):
    ids = _by_id(_events(_run(tmp_path, "TORCH_TRACE", backend="'inductor'")))
    assert "inductor_output_code" in ids["0/0"], ids["0/0"]
    assert "inductor_output_code" in ids["1/0"], ids["1/0"]


def test_tlparse_renders_every_cdynamo_line(tmp_path):
    beside = os.path.join(os.path.dirname(sys.executable), "tlparse")  # pip puts it beside the interpreter
    tlparse = beside if os.path.exists(beside) else shutil.which("tlparse")
    if tlparse is None:
        pytest.skip("tlparse is not installed (scripts/setup.sh installs tlparse==0.4.3 from PyPI)")
    trace = _run(tmp_path, "TORCH_TRACE")
    out_dir = tmp_path / "report"
    out = subprocess.run([tlparse, str(trace), "-o", str(out_dir), "--no-browser"], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    # Lines tlparse does not know are torch's own (its ShapeEnv's create_symbol), never cdynamo's events.
    unknown = out.stdout + out.stderr
    assert "Unknown fields" not in unknown or "create_symbol" in unknown.split("Unknown fields")[1], unknown
    for cid in ("0_0", "0_1", "1_0", "2_0"):
        d = out_dir / f"-_{cid}_-"
        names = sorted(p.name for p in d.iterdir())
        for kind in ("dynamo_output_graph", "dynamo_cpp_guards_str", "compilation_metrics", "ORIGINAL_BYTECODE",
                     "MODIFIED_BYTECODE"):
            assert any(kind in n for n in names), (cid, names)
    index = (out_dir / "index.html").read_text()
    for cid in ("[0/0]", "[0/1]", "[1/0]", "[2/0]"):
        assert cid in index, cid
