"""Real models through ``torch.compile(backend="tessera")`` on the CPU reference.

GPT-2, LLaMA, BERT and a Mixtral-style MoE from ``transformers``, ResNet-50 and
ViT-B/16 from ``timm``, and a dozen more ``transformers`` architectures
(``MORE_MODELS``: Phi, GPT-NeoX, Gemma2, Falcon, GPT-J, OPT, BLOOM, T5, BART,
DeBERTa-v2, Whisper, DistilBERT), at tiny configurations with random weights (no download). Each test runs one training step and compares the forward output
and every parameter's gradient with eager torch, then checks which ops fell
back to torch. Needs the ``models`` extra (``pip install -e .[models]``);
skipped without it.
"""

from __future__ import annotations

import importlib

import pytest
import torch

import tessera.torch as tt
from tests.torch.torch_models import MODELS, MORE_MODELS, compare_training_step, params
from tests.torch.torchvision_shim import import_timm


def _need(module: str) -> None:
    try:  # timm through the torchvision shim when no torchvision loads beside torch
        import_timm() if module == "timm" else importlib.import_module(module)
    except ImportError as e:
        pytest.skip(f"{module} is not importable here ({e}); install tessera[models]")


# ops each model leaves to torch, and why: Tessera has no sort, top-k or histogram and no
# rounding division; it writes index_put only accumulating (the MoE's routing writes) and scatters one index per
# position only (the MoE's top-2 routing scatters two)
EXPECTED_FALLBACKS: dict[str, set[str]] = {
    "gpt2": set(),
    "llama": set(),
    "bert": set(),
    "mixtral": {"aten.scatter.src", "aten.index_put.default", "aten.topk.default",
                "aten.sort.default", "aten.index.Tensor", "aten.histc.default",
                "aten.cumsum.default", "aten.empty_permuted.default", "aten.div.Tensor_mode"},
    "resnet50": set(),
    "vit_b16": set(),
    **{name: set() for name in MORE_MODELS},
}

PACKAGE = {"gpt2": "transformers", "llama": "transformers", "bert": "transformers",
           "mixtral": "transformers", "resnet50": "timm", "vit_b16": "timm",
           **{name: "transformers" for name in MORE_MODELS}}
BUILDERS = {**MODELS, **MORE_MODELS}


SLOW = {"whisper"}
"""Run only with ``TESSERA_SLOW_MODEL_TESTS=1`` (its 1-D convolutions are covered by
tests/torch/test_conv_backward.py, its encoder-decoder by T5's and BART's)."""


@pytest.mark.parametrize("name", params(list(BUILDERS), SLOW))
def test_training_step_matches_eager(name):
    _need(PACKAGE[name])
    torch.manual_seed(0)
    model, inputs = BUILDERS[name]("tiny")
    model.train()
    if name == "resnet50":  # batch norm over 2 images of 1x1 pixels late in the net:
        model, inputs = model.double(), {"x": inputs["x"].double()}  # compare in float64
    fwd, grad = compare_training_step(model, inputs, tt.compile)
    tol = 1e-8 if name == "resnet50" else 1e-5
    assert fwd < tol, f"{name} forward error {fwd:.3g}"
    assert grad < tol, f"{name} gradient error {grad:.3g}"
    rep = tt.last_report()
    assert set(rep.fallback_ops) <= EXPECTED_FALLBACKS[name], str(rep)
    assert not rep.runtime_fallbacks, str(rep)
    assert rep.tessera_ops > 0.9 * rep.aten_ops, str(rep)


def test_gpt2_dynamic_sequence_lengths_share_one_graph():
    """With dynamic=True dynamo compiles one symbolic graph for every sequence length;
    Tessera specializes its Graph IR per concrete length, and results stay right."""
    _need("transformers")
    torch.manual_seed(0)
    model, _ = MODELS["gpt2"]("tiny")
    model.eval()
    compiled = tt.compile(model, dynamic=True)
    with torch.no_grad():
        for seq in (8, 13, 21):
            ids = torch.randint(0, 128, (2, seq))
            out = compiled(input_ids=ids).logits
            torch.testing.assert_close(out, model(input_ids=ids).logits, rtol=1e-5, atol=1e-5)
    rep = tt.last_report()
    assert len(rep.graphs) == 1, str(rep)
    assert rep.graphs[0].tessera_calls == 3 * rep.graphs[0].partitions
    assert not rep.fallback_ops, str(rep)


@pytest.mark.parametrize("name", ["llama"])
def test_padded_batch_training_step_matches_eager(name):
    """A batch with an attention mask, left padding in one row and right padding in the
    other: the padding queries of a left-padded causal row see no key at all."""
    _need("transformers")
    torch.manual_seed(0)
    model, inputs = BUILDERS[name]("tiny")
    model.train()
    mask = torch.ones_like(inputs["input_ids"])
    mask[0, :3] = 0
    mask[1, -2:] = 0
    fwd, grad = compare_training_step(model, {**inputs, "attention_mask": mask}, tt.compile)
    assert fwd < 1e-5 and grad < 1e-5, (fwd, grad)
    rep = tt.last_report()
    assert not rep.fallback_ops and not any(g.runtime_fallbacks for g in rep.graphs), str(rep)
