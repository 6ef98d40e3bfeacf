# _verify.py — owns config.verify_correctness: the captured graph run as is (the eager backend) and the backend's
# compiled graph run on copies of the example inputs, compared, with the RNG put back after each.
import torch

from ._graph_call import restore_rng, save_rng


def clone_input(x):
    """A copy of ``x`` with its sizes, strides and storage offset (compiled code may assume them), sharing
    nothing with it; a leaf with x's requires_grad. Non-tensors are returned as they are."""
    if not isinstance(x, torch.Tensor):
        return x
    with torch.no_grad():
        if x.layout is not torch.strided or x.numel() == 0:
            y = x.clone()
        else:
            # The whole storage range the view reaches, copied: overlapping strides (expand) stay as they are.
            extent = x.storage_offset() + 1 + sum((s - 1) * st for s, st in zip(x.shape, x.stride()))
            y = x.as_strided((extent,), (1,), 0).clone().as_strided(x.shape, x.stride(), x.storage_offset())
    return y.requires_grad_(x.requires_grad)


def eager_reference(gm, example_inputs):
    """``gm`` run as is (what the eager backend runs) on copies of the inputs, before the backend sees ``gm``;
    None when it raises (that call raises at run time too, and nothing can be compared)."""
    state = save_rng()
    try:
        return (gm.forward(*[clone_input(x) for x in example_inputs]),)
    except Exception:  # noqa: BLE001 - an error is the graph's own; the call reproduces it when it runs
        return None
    finally:
        restore_rng(state)


def check(compiled, example_inputs, reference, backend_name):
    """Runs the backend's ``compiled`` on copies of the inputs, drawing the same random numbers as the reference
    did; RuntimeError when the results differ (testing.same: allclose with tol 1e-4)."""
    if reference is None:
        return
    from ._compare import same
    state = save_rng()
    try:
        result = compiled(*[clone_input(x) for x in example_inputs])
    finally:
        restore_rng(state)
    if not same(reference[0], result):
        raise RuntimeError(f"incorrect results of backend {backend_name!r}: the compiled graph's outputs differ "
                           "from the graph's own (eager) outputs on the example inputs "
                           "(cdynamo.config.verify_correctness)")
