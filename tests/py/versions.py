# versions.py — owns the versions the tests' reference numbers were taken on (torch 2.13, transformers 5.24) and the checks for another installed reference.
"""The tests compare cdynamo with torch._dynamo of the installed torch. Where torch._dynamo or a library changed
between versions (graph counts, printed formats, dataclass fields), a test compares with the installed reference
where the comparison still means something and names the version where it cannot (the GPU machine has torch 2.11
and transformers 5.17)."""
import re

import torch

PINNED_TORCH = (2, 13)
PINNED_TRANSFORMERS = (5, 24)


def _major_minor(version):
    return tuple(int(p) for p in re.findall(r"\d+", version)[:2])


TORCH = _major_minor(torch.__version__)
# torch._dynamo of the pinned torch (or newer): its graph and op counts are the ones the tests were written against.
REFERENCE_PINNED = TORCH >= PINNED_TORCH


def transformers_version():
    import transformers

    return _major_minor(transformers.__version__)


def reference_note(what):
    """A skip / xfail reason naming the installed versions: `what` differs from the pinned ones there."""
    return f"{what} (torch {torch.__version__}; the tests pin torch {'.'.join(map(str, PINNED_TORCH))})"


_CARETS = re.compile(r"^\s*[\^~]+\s*$")


def without_carets(stack_trace):
    """A formatted stack without the `^^^^` lines under each source line: torch._dynamo prints them from torch 2.13
    on (its frame summaries carry column positions), cdynamo always; older references are compared without."""
    if stack_trace is None or REFERENCE_PINNED:
        return stack_trace
    return "".join(line for line in stack_trace.splitlines(keepends=True) if not _CARETS.match(line))
