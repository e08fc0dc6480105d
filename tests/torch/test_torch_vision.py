"""More ``timm`` vision families through ``torch.compile(backend="tessera")`` on the CPU
reference, at tiny configurations with random weights (no download).

ConvNeXt (depthwise 7x7 convolutions, layer norm over NHWC channels), MobileNetV3
(depthwise convolutions, squeeze-excite, hardswish/hardsigmoid, batch norm), DenseNet
(concatenations, average-pooled transitions) and Swin (window attention, ``roll``, a
relative position bias table read by index). Each test runs one training step and
compares the forward output, every parameter's gradient and the batch-norm running
statistics with eager torch, then checks that no op was left to torch. The batch-norm
nets run in float64: over 2 images of a few pixels late in the net, float32 batch
statistics differ between any two summation orders by more than any useful tolerance
(eager NCHW against eager channels-last differs by ~1e-2 for EfficientNet-B0).
MobileNetV3's tolerance is 1e-6 because eager torch's ``hardsigmoid_backward`` on the
CPU multiplies by ``1.0f / 6.0f``, a float32 constant, even in float64.

Needs the ``models`` extra (``pip install -e .[models]``); without a torchvision that
loads beside torch, timm is imported through tests/torch/torchvision_shim.py.
MobileNetV3 and DenseNet run only with ``TESSERA_SLOW_MODEL_TESTS=1``.
"""

from __future__ import annotations

import pytest
import torch

import tessera.torch as tt
from tests.torch.torch_models import VISION_MODELS, params, training_step_errors
from tests.torch.torchvision_shim import import_timm


def _need_timm() -> None:
    try:  # through the torchvision shim when no torchvision loads beside torch
        import_timm()
    except ImportError as e:
        pytest.skip(f"timm is not importable here ({e}); install tessera[models]")


# (dtype, tolerance) per model
SETTINGS = {
    "convnext": (torch.float32, 1e-5),
    "mobilenetv3": (torch.float64, 1e-6),
    "densenet": (torch.float64, 1e-9),
    "swin": (torch.float32, 1e-5),
}


SLOW = {"mobilenetv3", "densenet"}
"""Run only with ``TESSERA_SLOW_MODEL_TESTS=1`` (14 s and 6 s on the 2-core CPU: the
CI suite's time is bounded; the sweep of docs/TORCH.md runs more batch-norm nets)."""


@pytest.mark.parametrize("name", params(list(VISION_MODELS), SLOW))
def test_vision_training_step_matches_eager(name):
    _need_timm()
    torch.manual_seed(0)
    model, inputs = VISION_MODELS[name]("tiny")
    dtype, tol = SETTINGS[name]
    model = model.to(dtype).train()
    inputs = {k: v.to(dtype) for k, v in inputs.items()}
    fwd, grad, bufs = training_step_errors(model, inputs, tt.compile)
    assert fwd < tol, f"{name} forward error {fwd:.3g}"
    assert grad < tol, f"{name} gradient error {grad:.3g}"
    assert bufs < tol, f"{name} running statistics error {bufs:.3g}"
    rep = tt.last_report()
    assert not rep.fallback_ops, str(rep)
    assert not rep.runtime_fallbacks, str(rep)


@pytest.mark.parametrize("name", ["convnext", "swin"])
def test_vision_inference_of_channels_last_images(name):
    _need_timm()
    torch.manual_seed(1)
    model, inputs = VISION_MODELS[name]("tiny")
    model.eval()
    x = inputs["x"].contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        out = tt.compile(model)(x)
        ref = model(x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    rep = tt.last_report()
    assert not rep.fallback_ops and not rep.runtime_fallbacks, str(rep)
