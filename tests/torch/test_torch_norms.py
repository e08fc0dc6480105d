"""Normalizations the wider model sweep met (docs/TORCH.md): batch norm without running
statistics (instance norm, NFNet's weight standardization) and the weight-norm backward
(wav2vec2's positional convolution), decomposed into translated ops; ``sign`` of integers
(DeBERTa's relative positions). Forward and every gradient against eager float64."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tessera.torch as tt


def _step_matches_eager(model: nn.Module, x: torch.Tensor) -> None:
    x = x.detach().requires_grad_()
    out = tt.compile(model)(x)
    out.pow(2).sum().backward()
    got = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    for p in model.parameters():
        p.grad = None
    x.grad = None
    ref = model(x)
    ref.pow(2).sum().backward()
    want = [p.grad for p in model.parameters()] + [x.grad]
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)
    rep = tt.last_report()
    assert not rep.fallback_ops and not rep.runtime_fallbacks, str(rep)


def test_instance_norm_training_step():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.InstanceNorm2d(4, affine=True)).double()
    _step_matches_eager(m, torch.randn(2, 3, 7, 7, dtype=torch.float64))


@pytest.mark.parametrize("dim", [0, 2])
def test_weight_norm_convolution_training_step(dim):
    """wav2vec2's positional convolution: a grouped 1-D convolution whose weight is
    normalized over every dim but the kernel's (dim 2)."""
    torch.manual_seed(1)
    conv = nn.Conv1d(4, 6, 3, padding=1, groups=2).double()
    conv = nn.utils.parametrizations.weight_norm(conv, name="weight", dim=dim)
    _step_matches_eager(conv, torch.randn(2, 4, 9, dtype=torch.float64))


def test_sign_of_integers():
    def f(x):
        return torch.sign(x) * 3 + x

    x = torch.tensor([-7, -1, 0, 1, 9, 0, -(2**40)])
    assert torch.equal(tt.compile(f)(x), f(x))
    assert not tt.last_report().fallback_ops


@pytest.mark.parametrize("fn", [lambda x: torch.softmax(x, 0), lambda x: torch.log_softmax(x, -1),
                                lambda x: torch.nn.functional.softmin(x, 0)])
@pytest.mark.parametrize("value", [2.5, float("nan"), float("-inf")])
def test_softmax_of_a_0d_tensor(fn, value):
    """torch takes a 0-d tensor as one row of one element (the translation raised a
    ShapeError for axis 0 of rank 0); forward and gradient as eager, NaN included."""
    torch._dynamo.reset()
    x = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    out = tt.compile(fn)(x)
    out.backward()
    got = out.detach(), x.grad.clone()
    x.grad = None
    ref = fn(x)
    ref.backward()
    assert out.shape == ()
    torch.testing.assert_close(got[0], ref.detach(), equal_nan=True)
    torch.testing.assert_close(got[1], x.grad, equal_nan=True)
    assert tt.last_report().tessera_ops > 0
