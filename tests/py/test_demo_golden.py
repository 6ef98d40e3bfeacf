# test_demo_golden.py — owns the golden test of the demo's printed bytecode (original, rewritten and continuation
# code of toy and bar), one expected section per CPython version in tests/golden/demo_bytecode.txt.
"""The bytecode cdynamo prints for `python -m cdynamo.demo` must stay as recorded for this Python version.

After an intended change, rewrite this version's section with
    CDYNAMO_UPDATE_GOLDEN=1 python -m pytest tests/py/test_demo_golden.py
(once per Python version) and review the diff.
"""
import os
import re
import subprocess
import sys

import pytest

GOLDEN = os.path.join(os.path.dirname(__file__), os.pardir, "golden", "demo_bytecode.txt")
VERSION = "%d.%d" % sys.version_info[:2]
HEADER = re.compile(r"^==== python (\d+\.\d+) ====$")


def _demo_bytecode():
    out = subprocess.run([sys.executable, "-m", "cdynamo.demo"], cwd="/", capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    text = out.stdout + out.stderr
    # The demo writes its examples to a fresh temporary directory: name it the same every run.
    text = re.sub(r"\S*/cdynamo-demo-[^/\s]+/", "<tmp>/", text)
    blocks, keep = [], False
    for line in text.splitlines():
        if line.startswith("[cdynamo:"):
            keep = line.startswith("[cdynamo:bytecode]")
        if keep:
            blocks.append(line.rstrip())
    return "\n".join(blocks).strip() + "\n"


def _read_sections():
    sections, current = {}, None
    if not os.path.exists(GOLDEN):
        return sections
    with open(GOLDEN) as f:
        for line in f:
            m = HEADER.match(line.rstrip("\n"))
            if m:
                current = m.group(1)
                sections[current] = []
            elif current is not None:
                sections[current].append(line)
    return {v: "".join(lines).strip() + "\n" for v, lines in sections.items()}


def _write_sections(sections):
    with open(GOLDEN, "w") as f:
        f.write("# demo_bytecode.txt — the bytecode `python -m cdynamo.demo` prints, per CPython version "
                "(tests/py/test_demo_golden.py; CDYNAMO_UPDATE_GOLDEN=1 rewrites the running version's section).\n")
        for v in sorted(sections, key=lambda s: tuple(int(p) for p in s.split("."))):
            f.write(f"==== python {v} ====\n{sections[v]}\n")


def test_demo_bytecode_matches_this_versions_golden_section():
    got = _demo_bytecode()
    sections = _read_sections()
    if os.environ.get("CDYNAMO_UPDATE_GOLDEN"):
        sections[VERSION] = got
        _write_sections(sections)
        pytest.skip(f"rewrote the python {VERSION} section of {GOLDEN}")
    assert VERSION in sections, f"no python {VERSION} section in {GOLDEN} (CDYNAMO_UPDATE_GOLDEN=1 writes it)"
    assert got == sections[VERSION]
