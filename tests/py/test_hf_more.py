# test_hf_more.py — owns the checks of transformers model families beyond the zoo (hf_more_models.py): eval output equal to eager, graphs no more than torch._dynamo's, no recompile on a second same-shape call.
"""Each family was first tried as a new user would; what split it (os.environ reads in sdpa_attention, getattr
on None in masking_utils, enumerate over a ModuleList slice) is a regression test in test_library_python.py.
BART's and M2M100's decoders build a DynamicCache whose config.get_text_config(decoder=True) deep-copies a legacy
flat encoder-decoder config and writes the copy through huggingface_hub's strict __setattr__ validators (typing
forms, try/except TypeError per union member): traced, one graph each. Families that still split (GRAPHS_TODAY)
are xfail with today's count, so a change either way fails the test."""
import logging
import warnings

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter

transformers = pytest.importorskip("transformers")
from hf_more_models import MORE  # noqa: E402
from versions import PINNED_TRANSFORMERS, REFERENCE_PINNED, transformers_version  # noqa: E402

logging.getLogger("transformers").setLevel(logging.ERROR)
pytestmark = pytest.mark.usefixtures("cdynamo_and_dynamo_reset")

# torch._dynamo: 1 each.
GRAPHS_TODAY = {}
# Model code of transformers before the pinned 5.24 that cdynamo splits more than torch._dynamo does.
_OLDER_TRANSFORMERS_SPLITS = {
    "funnel": "transformers 5.17's FunnelModel: arange over tensor bounds breaks the graph, and the encoder's "
              "ModelOutput, made before that break, is read with keys()/items() in to_tuple: those methods of a dict "
              "subclass from the frame are not traced (2 graphs more than torch._dynamo)",
}


def _main(out):
    return out["last_hidden_state"] if "last_hidden_state" in out else out["logits"]


@pytest.mark.parametrize("name", sorted(MORE))
def test_eval_graphs_and_equality_against_dynamo(name):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, inputs = MORE[name]()
    model.eval()
    cnt = CompileCounter()
    cm = cdynamo.optimize(cnt)(model)
    with torch.no_grad():
        ref = model(**inputs)
        got = cm(**inputs)
        first = cnt.frame_count
        cm(**inputs)
        dcnt = torch._dynamo.testing.CompileCounter()
        torch.compile(model, backend=dcnt)(**inputs)
    assert type(got) is type(ref) and list(got.keys()) == list(ref.keys())
    torch.testing.assert_close(_main(got), _main(ref), atol=1e-5, rtol=1e-5)
    assert cnt.frame_count == first  # no recompile
    if name in GRAPHS_TODAY:
        assert first == GRAPHS_TODAY[name]
        pytest.xfail(f"{name}: {first} graphs, torch._dynamo {dcnt.frame_count}")
    if name in _OLDER_TRANSFORMERS_SPLITS and transformers_version() < PINNED_TRANSFORMERS:
        pytest.xfail(_OLDER_TRANSFORMERS_SPLITS[name] + f": {first} graphs, torch._dynamo {dcnt.frame_count}")
    assert first <= dcnt.frame_count
    if REFERENCE_PINNED:  # torch 2.11's torch._dynamo splits BART, M2M100 and MT5 in 3-4
        assert dcnt.frame_count == 1


def test_wav2vec2_training_step_equals_eager():
    """Wav2Vec2's positional conv is weight-norm parametrized: its gradients reach weight_g / weight_v."""
    import copy

    import numpy as np
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, inputs = MORE["wav2vec2"]()
    model.train()
    twin = copy.deepcopy(model)
    cm = cdynamo.optimize("eager")(twin)
    results = []
    for m, owner in ((model, model), (cm, twin)):
        torch.manual_seed(1)  # dropout and LayerDrop draw the same in both
        np.random.seed(1)     # SpecAugment's time mask (numpy) too
        loss = m(**inputs)["last_hidden_state"].float().pow(2).mean()
        loss.backward()
        results.append((loss.detach(), {k: p.grad for k, p in owner.named_parameters() if p.grad is not None}))
    (l0, g0), (l1, g1) = results
    torch.testing.assert_close(l1, l0, atol=1e-4, rtol=1e-4)
    assert g1.keys() == g0.keys()
    assert "encoder.pos_conv_embed.conv.parametrizations.weight.original0" in g0
    for k in g0:
        torch.testing.assert_close(g1[k], g0[k], atol=1e-4, rtol=1e-4)
