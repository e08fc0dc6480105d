"""The torchvision shim of the timm tests (tests/torch/torchvision_shim.py): its frozen
batch norm against torch's batch norm in eval mode, eager and through Tessera, and
``import_timm`` leaving no stand-in module behind."""

from __future__ import annotations

import copy
import sys

import pytest
import torch
import torch.nn.functional as F

import tessera.torch as tt
from tests.torch.torchvision_shim import FrozenBatchNorm2d, import_timm


def _frozen(c: int, eps: float) -> FrozenBatchNorm2d:
    bn = FrozenBatchNorm2d(c, eps=eps).double()
    bn.weight.uniform_(0.5, 2.0)
    bn.bias.uniform_(-1.0, 1.0)
    bn.running_mean.uniform_(-1.0, 1.0)
    bn.running_var.uniform_(0.1, 3.0)
    return bn


@pytest.mark.parametrize("eps", [1e-5, 1e-3])
def test_frozen_batch_norm_is_eval_batch_norm(eps):
    torch.manual_seed(0)
    bn = _frozen(5, eps)
    x = torch.randn(3, 5, 4, 6, dtype=torch.float64)
    ref = F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias,
                       training=False, eps=eps)
    torch.testing.assert_close(bn(x), ref, rtol=1e-12, atol=1e-12)
    assert not list(bn.parameters()) and len(dict(bn.named_buffers())) == 4


def test_frozen_batch_norm_through_tessera_with_input_gradient():
    torch._dynamo.reset()
    torch.manual_seed(1)
    bn = _frozen(4, 1e-5)
    x = torch.randn(2, 4, 3, 3, dtype=torch.float64, requires_grad=True)
    out = tt.compile(bn)(x)
    (out * out).sum().backward()
    gx = x.grad.clone()
    x.grad = None
    ref = bn(x)
    (ref * ref).sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gx, x.grad, rtol=1e-12, atol=1e-12)
    assert not tt.last_report().fallback_ops
    torch._dynamo.reset()


def test_frozen_batch_norm_loads_a_batch_norm_checkpoint():
    bn = torch.nn.BatchNorm2d(3).double()
    bn.running_mean.uniform_(-1.0, 1.0)
    frozen = FrozenBatchNorm2d(3).double()
    frozen.load_state_dict(bn.state_dict())  # num_batches_tracked dropped
    torch.testing.assert_close(frozen.running_mean, bn.running_mean)


def test_import_timm_leaves_no_stand_in_module():
    try:
        timm = import_timm()
    except ImportError as e:
        pytest.skip(f"timm is not importable here ({e})")
    mods = [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]
    assert all(getattr(sys.modules[n], "__file__", None) for n in mods), mods
    model = timm.create_model("resnet18", pretrained=False, num_classes=3).eval()
    frozen = timm.layers.freeze_batch_norm_2d(copy.deepcopy(model))
    assert type(frozen.bn1).__name__ == "FrozenBatchNorm2d"
    x = torch.randn(1, 3, 16, 16)
    torch.testing.assert_close(frozen(x), model(x), rtol=1e-5, atol=1e-5)
