# test_break_identity.py — owns the check that at every graph break each local and stack slot is the same
# object as in eager (identity between locals, to the arguments, and by value), over a corpus of aliasing.
import copy

import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounterWithBackend

import break_identity_corpus as corpus

pytestmark = pytest.mark.usefixtures("cdynamo_reset")


def _inputs(nargs, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, generator=g) for _ in range(nargs)]


def _run(fn, args):
    corpus.ORIGINALS[:] = args
    corpus.RECORDS.clear()
    out = fn(*args)
    records = list(corpus.RECORDS)
    corpus.ORIGINALS[:] = []
    return out, records


def _same_desc(a, b):
    if a[0] == "tensor" and b[0] == "tensor":
        return a[1] == b[1] and torch.equal(a[2], b[2])
    return a == b


def _compare_records(eager, compiled, where):
    assert len(eager) == len(compiled), f"{where}: {len(eager)} break points in eager, {len(compiled)} compiled"
    for k, (e, c) in enumerate(zip(eager, compiled)):
        assert e[0] == c[0], f"{where}: record {k} kind"
        e_slots, c_slots = e[-1], c[-1]
        # Locals dead at a break may be gone from a continuation's frame; every one it has must match.
        e_by_name = {name: (first, desc) for name, first, desc in e_slots}
        e_names = [name for name, _, _ in e_slots]
        c_names = [name for name, _, _ in c_slots]
        assert set(c_names) <= set(e_names), f"{where}: record {k}: extra locals {set(c_names) - set(e_names)}"
        for name, first, desc in c_slots:
            e_first, e_desc = e_by_name[name]
            assert _same_desc(e_desc, desc), f"{where}: record {k}: {name!r} is {desc[:2]}, eager {e_desc[:2]}"
            # Same object as the first slot that holds it, by name (indices differ when names are missing).
            assert e_names[e_first] == c_names[first], (
                f"{where}: record {k}: {name!r} is the same object as {c_names[first]!r}, "
                f"in eager as {e_names[e_first]!r}"
            )


def _compare_outputs(e_out, e_args, c_out, c_args, where):
    e_flat = e_out if isinstance(e_out, (tuple, list)) else [e_out]
    c_flat = c_out if isinstance(c_out, (tuple, list)) else [c_out]
    assert type(e_out) is type(c_out) and len(e_flat) == len(c_flat), where
    for k, (e, c) in enumerate(zip(e_flat, c_flat)):
        e_id = [j for j, a in enumerate(e_args) if e is a]
        c_id = [j for j, a in enumerate(c_args) if c is a]
        assert e_id == c_id, f"{where}: output {k} is argument {c_id}, eager {e_id}"
        assert torch.equal(e, c), f"{where}: output {k} differs"
    for j, (e, c) in enumerate(zip(e_args, c_args)):
        assert torch.equal(e, c), f"{where}: argument {j} mutated differently"


# Frames compiled nowhere today: a break inside a loop makes the whole frame run as Python (issue 11).
RUN_AS_PYTHON = {corpus.loop_alias}


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fn,nargs", corpus.CORPUS, ids=[f.__name__ for f, _ in corpus.CORPUS])
def test_identity_at_every_break(fn, nargs, backend):
    for seed in (0, 1):  # the second call runs the cached code
        args = _inputs(nargs, seed)
        e_args = copy.deepcopy(args)
        c_args = copy.deepcopy(args)
        e_out, e_rec = _run(fn, e_args)
        cnt = CompileCounterWithBackend(backend)
        c_out, c_rec = _run(cdynamo.optimize(cnt)(fn), c_args)
        where = f"{fn.__name__}[{backend}, call {seed}]"
        assert e_rec, f"{where}: the corpus function has no break point"
        if seed == 0 and fn not in RUN_AS_PYTHON:
            assert cnt.frame_count >= 1, f"{where}: nothing was compiled"
        _compare_records(e_rec, c_rec, where)
        _compare_outputs(e_out, e_args, c_out, c_args, where)
