# other_module_helpers.py — owns helpers imported by test_modules.py to test inlining across modules:
# a function reading this module's globals (guarded through this module's dict).
import torch

SCALE = 2.0


def scaled_relu(x):
    return torch.relu(x) * SCALE

CALLS = 0


def counted_double(x):
    global CALLS
    CALLS += 1  # a global of this module, assigned from an inlined call
    return x * 2
