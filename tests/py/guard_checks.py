# guard_checks.py — owns the helpers the guard-tree test files share: a function compiled with a compile counter,
# and exact equality with eager.
import torch

import cdynamo
from cdynamo.testing import CompileCounter


def compiled(fn):
    cnt = CompileCounter()
    return cdynamo.optimize(cnt)(fn), cnt


def same(a, b):
    torch.testing.assert_close(a, b, rtol=0, atol=0)
