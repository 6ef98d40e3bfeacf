# test_inductor_prefetch.py — owns the checks of cdynamo.backends._inductor_prefetch: inductor's CPU vector-ISA answer
# is the one inductor's own probes give, and a later process of the same boot reuses it with fewer probe children.
"""Each case is a fresh interpreter (inductor keeps its ISA answer per process), all on one temporary
TORCHINDUCTOR_CACHE_DIR: the first process builds the probe libraries and keeps the answer, the next ones find them.
The timeout is only a hang guard."""
import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux" or platform.machine() != "x86_64",
                                reason="the kept answer is for x86 Linux CPUs only")

_CHILD = textwrap.dedent("""
    import json, sys
    import torch
    import torch._inductor.cpu_vec_isa as c
    probes = [0]
    if not hasattr(c.VecISA, "_probe_load"):
        print(json.dumps({"skip": "probes are counted through VecISA._probe_load: torch " + torch.__version__
                                  + " has none (2.13 has)"}))
        sys.exit(0)
    load = c.VecISA._probe_load
    def counted(self, path):
        probes[0] += 1
        return load(self, path)
    c.VecISA._probe_load = counted
    if sys.argv[1] == "cdynamo":
        from cdynamo.backends import _inductor_prefetch
        _inductor_prefetch.start([torch.randn(2)])
        _inductor_prefetch.wait()
    isas = c.valid_vec_isa_list()
    print(json.dumps({"probes": probes[0], "valid": [str(i) for i in isas], "picked": str(c.pick_vec_isa()),
                      "bf16": [getattr(i, "_is_avx512_bf16_supported", None) for i in isas]}))
""")


def _child(mode, cache_dir):
    import cdynamo
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache_dir),
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(cdynamo.__file__))))
    p = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    if "skip" in got:
        pytest.skip(got["skip"])
    return got


def test_inductor_isa_answer_reused_across_processes(tmp_path):
    theirs = _child("torch", tmp_path)  # inductor alone (builds the probe libraries)
    first = _child("cdynamo", tmp_path)  # probes as inductor does, keeps the answer
    kept = tmp_path / "cdynamo" / "vec_isa.json"
    answer = {k: theirs[k] for k in ("valid", "picked", "bf16")}
    assert {k: first[k] for k in answer} == answer
    assert first["probes"] == theirs["probes"]
    if not kept.exists():  # some reported ISA failed its probe here: nothing is reused
        assert _child("cdynamo", tmp_path)["probes"] == theirs["probes"]
        return
    second = _child("cdynamo", tmp_path)  # reuses it: the same answer with fewer probe children
    assert {k: second[k] for k in answer} == answer
    assert second["probes"] < theirs["probes"]
    data = json.loads(kept.read_text())
    data["fingerprint"] = "another boot"
    kept.write_text(json.dumps(data))
    third = _child("cdynamo", tmp_path)  # a fingerprint that differs: the probes run as before
    assert {k: third[k] for k in answer} == answer
    assert third["probes"] == theirs["probes"]
