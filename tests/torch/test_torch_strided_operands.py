"""Operands of ops left to torch that need the fake tensor's strides, not only its values.

On CUDA torch's SDPA picks the memory-efficient kernel for an attention bias, pads the
bias's last dim to a multiple of 8 and hands the kernel a slice of it
(``attn_bias.stride(1) = 17 * 24``); the kernel checks that alignment. A Tessera
partition computing the bias returned a fresh contiguous ``[B, H, 17, 17]`` tensor
(``stride(1) = 289``), and BEiT's training step raised "attn_bias is not correctly
aligned". The CPU has no memory-efficient kernel, so these tests register CPU stand-ins
for it (forward and backward, with the CUDA kernel's alignment check) and build the
padded slice as CUDA's SDPA does.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import tessera.torch as tt
from tessera.torch import partition

aten = torch.ops.aten


class _EfficientAttentionOnCpu:
    """CPU kernels for ``_scaled_dot_product_efficient_attention`` and its backward (math
    attention) that raise, as CUDA's do, for a bias whose strides are not multiples of
    4, and record the bias strides they were given."""

    def __init__(self) -> None:
        self.strides: list[tuple[int, ...]] = []
        self.dense_q: list[bool] = []

    def check(self, bias: torch.Tensor | None) -> None:
        if bias is None:
            return
        self.strides.append(tuple(bias.stride()))
        for i in range(bias.dim() - 1):
            if bias.stride(i) % 4:
                raise RuntimeError(f"attn_bias is not correctly aligned: stride({i}) = "
                                   f"{bias.stride(i)}")

    @staticmethod
    def _probs(q, k, bias, scale):
        s = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
        scores = q @ k.transpose(-2, -1) * s
        if bias is not None:
            scores = scores + bias
        return scores, s

    def forward(self, q, k, v, bias, compute_lse, dropout_p=0.0, is_causal=False, *,
                scale=None):
        self.check(bias)
        self.dense_q.append(q.is_contiguous())
        scores, _ = self._probs(q, k, bias, scale)
        lse = torch.logsumexp(scores, -1)
        rows = 32 * math.ceil(q.shape[-2] / 32)  # the kernel's log-sum-exp rows
        seed = torch.zeros((), dtype=torch.int64)
        return (torch.softmax(scores, -1) @ v, F.pad(lse, (0, rows - lse.shape[-1])),
                seed, seed.clone())

    def backward(self, go, q, k, v, bias, out, lse, seed, offset, dropout_p, grad_mask,
                 is_causal=False, *, scale=None):
        self.check(bias)
        scores, s = self._probs(q, k, bias, scale)
        p = torch.softmax(scores, -1)
        dp = go @ v.transpose(-2, -1)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))
        return (ds @ k * s, ds.transpose(-2, -1) @ q * s, p.transpose(-2, -1) @ go,
                ds if grad_mask[3] else None)


@pytest.fixture
def efficient_attention():
    kernels = _EfficientAttentionOnCpu()
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_scaled_dot_product_efficient_attention", kernels.forward, "CPU")
    lib.impl("_scaled_dot_product_efficient_attention_backward", kernels.backward, "CPU")
    yield kernels
    lib._destroy()


def cuda_like_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                   enable_gqa=False):
    """What CUDA's ``scaled_dot_product_attention`` does when it picks the memory-efficient
    kernel for a float mask: pad the bias's last dim to a multiple of 8 and slice it
    (unless its strides are aligned already), expand it to ``[B, H, Sq, Sk]``."""
    bias = attn_mask
    if bias is not None:
        if any(bias.stride(i) % 8 for i in range(bias.dim() - 1)) or bias.stride(-1) != 1:
            n = bias.shape[-1]
            bias = F.pad(bias, (0, 8 - n % 8))[..., :n]
        bias = bias.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    return aten._scaled_dot_product_efficient_attention(
        q, k, v, bias, torch.is_grad_enabled(), dropout_p, is_causal, scale=scale)[0]


@pytest.mark.parametrize("batch_bias", [False, True])
def test_attention_bias_from_a_partition_keeps_the_padded_strides(efficient_attention,
                                                                  batch_bias):
    """A relative position bias (a parameter, so the kernel's backward runs in torch too)
    computed in Tessera, padded and sliced for the memory-efficient kernel: forward and
    backward kernels get the fake tensor's strides (a broadcast batch dim: stride 0), and
    the step matches eager. A dense transposed q is left contiguous (the kernels accept
    it; a copy would cost)."""
    g = torch.Generator().manual_seed(0)
    b, h, s, d = 2, 4, 17, 8
    q, k, v = (torch.randn(b, h, s, d, dtype=torch.float64, generator=g) for _ in range(3))
    rel = torch.randn(h, s, s, dtype=torch.float64, generator=g)
    pad = torch.randn(b, 1, 1, s, dtype=torch.float64, generator=g)

    def fn(q, k, v, rel, pad):
        bias = (rel * 2.0).unsqueeze(0)
        if batch_bias:
            bias = bias + pad
        q = (q.transpose(1, 2) * 1.5).transpose(1, 2)  # dense, not contiguous
        return cuda_like_sdpa(q, k, v, attn_mask=bias) * 3

    def step(f):
        xs = [t.clone().requires_grad_() for t in (q, k, v, rel, pad)]
        out = f(*xs)
        out.backward(torch.ones_like(out))
        return out.detach(), [x.grad for x in xs]

    want, want_grads = step(fn)
    efficient_attention.strides.clear()
    efficient_attention.dense_q.clear()
    got, got_grads = step(tt.compile(fn))
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, w in zip(got_grads, want_grads):
        torch.testing.assert_close(a, w, rtol=1e-12, atol=1e-12)
    aligned = (h * s * 24 if batch_bias else 0, s * 24, 24, 1)
    assert efficient_attention.strides == [aligned, aligned]  # forward, backward
    assert efficient_attention.dense_q == [True]  # a dense q is not copied to the fake's
    rep = tt.last_report()
    assert rep.graphs[0].fallback_ops == {"aten._scaled_dot_product_efficient_attention.default": 1}
    assert all(gr.tessera_calls >= 1 for gr in rep.graphs), str(rep)


_SEEN: list[tuple[int, ...]] = []


@torch.library.custom_op("tessera_test::exact_strides", mutates_args=(),
                         tags=(torch.Tag.needs_exact_strides,))
def _exact_strides(x: torch.Tensor) -> torch.Tensor:
    _SEEN.append(tuple(x.stride()))
    return x * 1.0


@_exact_strides.register_fake
def _exact_strides_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@pytest.mark.parametrize("view", ["transpose", "padded", "expand"])
def test_an_op_tagged_needs_exact_strides_gets_the_fake_strides(view):
    """Any op left to torch that is tagged ``needs_exact_strides`` gets its operands from a
    Tessera partition in the fake tensor's layout: dense but transposed, a slice of a
    padded tensor, a broadcast."""
    x = torch.randn(3, 5, dtype=torch.float64)

    def fn(x):
        y = torch.tanh(x) * 2
        if view == "transpose":
            y = y.t()
        elif view == "padded":
            y = F.pad(y, (0, 3))[:, :5]
        else:
            y = y[:1].expand(4, 5)
        return _exact_strides(y) + 1

    _SEEN.clear()
    want = fn(x)
    expected = _SEEN[-1]
    got = tt.compile(fn)(x)
    torch.testing.assert_close(got, want)
    assert _SEEN[-1] == expected, _SEEN
    assert all(gr.tessera_calls >= 1 for gr in tt.last_report().graphs)


def test_strided_layout():
    """The layouts a fresh storage can reproduce (broadcast dims included), and those it
    cannot (overlapping windows, symbolic sizes are left contiguous)."""
    base = torch.empty(2, 4, 17, 24)
    assert partition.strided_layout(base[..., :17]) == (
        (2, 4, 17, 17), (408 * 4, 408, 24, 1), 0, 2 * 4 * 17 * 24)
    assert partition.strided_layout(base[:1].expand(3, 4, 17, 24))[1] == (0, 408, 24, 1)
    assert partition.strided_layout(torch.empty(10).as_strided((3, 4), (2, 1))) is None
    x = torch.arange(12.0).reshape(3, 4)
    for view in (x.t(), F.pad(x, (0, 4))[:, :4], x[:1].expand(5, 4), x[:, 1:3]):
        layout = partition.strided_layout(view)
        out = partition.with_layout(view.contiguous(), layout)
        assert out.stride() == view.stride() and torch.equal(out, view)


def test_beit_training_step_with_cuda_like_attention(efficient_attention, monkeypatch):
    """BEiT's training step with SDPA as CUDA runs it (the memory-efficient kernel and a
    padded relative position bias): the bias of every layer reaches both kernels aligned,
    and the step matches eager."""
    pytest.importorskip("transformers")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from scripts import transformers_sweep as sweep

    monkeypatch.setattr(F, "scaled_dot_product_attention", cuda_like_sdpa)
    res = sweep.run("beit", "train", "cpu")
    assert res.get("pass"), res
    assert res["fallbacks"] == {"aten._scaled_dot_product_efficient_attention.default": 2,
                                "aten._scaled_dot_product_efficient_attention_backward.default": 2}
    assert efficient_attention.strides and all(
        st[1:] == (17 * 24, 24, 1) for st in efficient_attention.strides), efficient_attention.strides
