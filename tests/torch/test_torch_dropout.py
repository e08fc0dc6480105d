"""Dropout in training through ``torch.compile(backend="tessera")``.

``native_dropout`` and ``bernoulli.p`` become a uniform draw that reads only sizes (run by
torch's generator) and translated elementwise ops (``tessera.torch.dropout``), so the
partitions around a dropout merge into one. The tests check the report (one forward
partition, only the draw in torch, the backward all in Tessera), the values (the kept
ones scaled by exactly ``1 / (1 - p)``, the dropped fraction near ``p``), the gradient
(the same mask and scale), fresh masks each call and ``torch.manual_seed``
reproducibility, eval mode, dynamic shapes, ``Dropout2d``, a drop-path, and a tiny
GPT-2 with its default dropouts.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tessera.torch as tt

DRAW = "aten.rand.default"


class _Block(nn.Module):
    """Linear, GELU, dropout, linear; returns the dropout's output too."""

    def __init__(self, p: float = 0.1):
        super().__init__()
        self.fc1 = nn.Linear(64, 64)
        self.drop = nn.Dropout(p)
        self.fc2 = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.drop(F.gelu(self.fc1(x)))
        return d, self.fc2(d)


def _only_draws_in_torch(rep: tt.Report, draws: int) -> None:
    """One partition per graph; the forward leaves only ``draws`` draws to torch."""
    fw = [g for g in rep.graphs if g.kind == "forward"]
    bw = [g for g in rep.graphs if g.kind == "backward"]
    assert len(fw) == 1 and len(bw) == 1, str(rep)
    assert fw[0].partitions == 1 and dict(fw[0].fallback_ops) == {DRAW: draws}, str(rep)
    assert bw[0].partitions == 1 and not bw[0].fallback_ops, str(rep)
    assert not rep.runtime_fallbacks, str(rep)


def _eager_with_mask(m: _Block, x: torch.Tensor, mask: torch.Tensor, p: float) -> torch.Tensor:
    return m.fc2(F.gelu(m.fc1(x)) * mask * (1.0 / (1.0 - p)))


def test_dropout_block_is_one_partition_with_its_mask_and_gradients():
    torch.manual_seed(0)
    m = _Block(0.1).train()
    x = torch.randn(8, 64, requires_grad=True)
    d, y = tt.compile(m)(x)
    y.sum().backward()
    _only_draws_in_torch(tt.last_report(), 1)
    assert "native_dropout" not in str(tt.last_report())
    mask = d != 0
    got = [x.grad.clone()] + [p.grad.clone() for p in m.parameters()]
    x.grad = None
    m.zero_grad()
    ref = _eager_with_mask(m, x, mask, 0.1)
    ref.sum().backward()
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(got, [x.grad] + [p.grad for p in m.parameters()]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 1.0])
def test_dropped_fraction_and_kept_values(p):
    def f(x):
        return F.dropout(x + 1.0, p, training=True)

    y = tt.compile(f)(torch.zeros(256, 256))
    kept = y != 0
    assert abs(1 - kept.float().mean().item() - p) < 0.01
    assert torch.equal(y[kept], torch.full_like(y[kept], 1.0 / (1.0 - p) if p < 1 else 0.0))
    rep = tt.last_report()
    assert rep.partitions == 1, str(rep)
    assert dict(rep.fallback_ops) == ({DRAW: 1} if 0 < p < 1 else {}), str(rep)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_output_and_gradient_are_exactly_the_masked_scaled_values(dtype):
    """``out = x * mask / (1 - p)`` and ``dx = dout * mask / (1 - p)`` bit for bit (16-bit
    scaled in f32 and rounded once, as torch's kernels do)."""
    p = 0.3
    scale = 1.0 / (1.0 - p)
    opmath = torch.float32 if dtype == torch.bfloat16 else dtype
    torch.manual_seed(1)
    x = torch.randn(32, 48, dtype=dtype, requires_grad=True)
    g = torch.randn(32, 48, dtype=dtype)
    y = tt.compile(lambda t: F.dropout(-t, p, training=True))(x)
    (y * g).sum().backward()
    mask = y != 0
    assert 0.2 < 1 - mask.float().mean().item() < 0.4
    want = (-x.detach()).to(opmath) * mask * scale
    assert torch.equal(y, want.to(dtype))
    assert torch.equal(x.grad, -(g.to(opmath) * mask * scale).to(dtype))
    assert not tt.last_report().runtime_fallbacks


def test_masks_are_fresh_each_call_and_follow_manual_seed():
    c = tt.compile(lambda t: F.dropout(t * 2.0, 0.5, training=True))
    x = torch.randn(64, 64)
    a, b = c(x), c(x)
    assert not torch.equal(a != 0, b != 0)
    torch.manual_seed(123)
    s1 = c(x)
    torch.manual_seed(123)
    s2 = c(x)
    assert torch.equal(s1, s2)
    assert len(tt.last_report().graphs) == 1


def test_eval_mode_is_the_identity():
    torch.manual_seed(0)
    m = _Block(0.5).eval()
    x = torch.randn(8, 64)
    d, y = tt.compile(m)(x)
    ref_d, ref_y = m(x)
    torch.testing.assert_close(d, ref_d, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y, ref_y, rtol=1e-5, atol=1e-5)
    rep = tt.last_report()
    assert rep.partitions == len(rep.graphs) and not rep.fallback_ops, str(rep)


def test_dynamic_batch_sizes():
    torch.manual_seed(0)
    m = _Block(0.2).train()
    c = tt.compile(m, dynamic=True)
    for batch in (8, 5):
        x = torch.randn(batch, 64, requires_grad=True)
        d, y = c(x)
        y.sum().backward()
        mask = d != 0
        dx = x.grad.clone()
        x.grad = None
        _eager_with_mask(m, x, mask, 0.2).sum().backward()
        torch.testing.assert_close(dx, x.grad, rtol=1e-5, atol=1e-5)
    _only_draws_in_torch(tt.last_report(), 1)


def _drop_path(x: torch.Tensor, keep: float) -> torch.Tensor:
    """timm's ``drop_path``: one Bernoulli draw per sample, scaled by ``1 / keep``."""
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    r = x.new_empty(shape).bernoulli_(keep)
    r.div_(keep)
    return x * r


def test_dropout2d_and_drop_path_masks():
    """``Dropout2d`` drops whole channels and a drop-path whole samples: both
    ``bernoulli_`` on a new tensor, drawn in torch without splitting the partition."""
    drop2d = nn.Dropout2d(0.25).train()

    def f(x):
        h = x + 1.0
        return drop2d(h), _drop_path(h, 0.75)

    a, b = tt.compile(f)(torch.zeros(64, 64, 2, 2))
    for y, dims in ((a, (2, 3)), (b, (1, 2, 3))):
        planes = y.amax(dims)
        assert torch.equal(y.amin(dims), planes)  # each channel / sample all dropped or all kept
        kept = planes != 0
        assert torch.equal(planes[kept], torch.full_like(planes[kept], 1 / 0.75))
        assert abs(kept.float().mean().item() - 0.75) < (0.04 if dims == (2, 3) else 0.2)
    rep = tt.last_report()
    assert rep.partitions == 1 and dict(rep.fallback_ops) == {DRAW: 2}, str(rep)


def test_gpt2_with_default_dropouts_is_one_forward_partition():
    """A tiny GPT-2 in training with its default dropouts (embeddings, residuals,
    attention weights: 0.1): each dropout was a graph break (6 forward partitions for
    the 5 without attention dropout); now only the draws run in torch."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64)
    model = transformers.GPT2LMHeadModel(cfg).train()
    ids = torch.randint(0, 128, (2, 16))
    out = tt.compile(model)(input_ids=ids, labels=ids)
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    rep = tt.last_report()
    model_fw = next(g for g in rep.graphs if g.kind == "forward")
    assert model_fw.partitions == 1 and dict(model_fw.fallback_ops) == {DRAW: 7}, str(rep)
    assert not any(g.fallback_ops for g in rep.graphs if g.kind == "backward"), str(rep)
    assert rep.partitions == len(rep.graphs) and not rep.runtime_fallbacks, str(rep)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.bfloat16, torch.float64])
def test_dropout_backward_takes_torchs_result_dtype(dtype):
    """``native_dropout_backward`` of an integer or bool gradient is in the default float
    dtype, as torch's (the translation kept the integer dtype: a wrong result type)."""
    grad = (torch.arange(12) % 3).to(dtype)
    mask = torch.arange(12) % 2 == 0

    def f(g, m):
        return torch.ops.aten.native_dropout_backward(g, m, 2.0)

    out, ref = tt.compile(f)(grad, mask), f(grad, mask)
    assert out.dtype == ref.dtype
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    assert tt.last_report().tessera_ops > 0
