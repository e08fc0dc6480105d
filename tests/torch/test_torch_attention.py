"""Attention through ``torch.compile(backend="tessera")``: the flash forward keeps its
log-sum-exp and the backward becomes ``tgraph.flash_attention_bwd``; gradients match
eager torch in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tessera.torch as tt
from tessera.torch import attention, rules_nn


def _grads(fn, *xs):
    xs = [x.detach().clone().requires_grad_() for x in xs]
    out = fn(*xs)
    g = torch.Generator().manual_seed(7)
    go = torch.randn(out.shape, dtype=torch.float64, generator=g).to(out.dtype)
    (out * go).sum().backward()
    return out.detach(), [x.grad for x in xs]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq, sk, kv_heads", [(6, 6, 4), (5, 9, 2)])
def test_flash_backward_runs_in_tessera_from_the_saved_log_sum_exp(
    monkeypatch, causal, sq, sk, kv_heads
):
    torch._dynamo.reset()
    eager_calls = []
    real = attention.attention_backward
    monkeypatch.setattr(attention, "attention_backward",
                        lambda *a: eager_calls.append(1) or real(*a))
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, sq, 8, dtype=torch.float64, generator=g)
    k = torch.randn(2, kv_heads, sk, 8, dtype=torch.float64, generator=g)
    v = torch.randn(2, kv_heads, sk, 8, dtype=torch.float64, generator=g)

    def f(q, k, v):
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=0.4, enable_gqa=kv_heads != 4
        ) * 2.0

    want, want_grads = _grads(f, q, k, v)
    got, got_grads = _grads(tt.compile(f), q, k, v)
    rep = tt.last_report()
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    if eager_calls:  # e.g. torch picked a kernel whose backward Tessera does not read
        pytest.fail(f"the attention backward ran in torch: {rep}")
    assert rep.graph_breaks == 0, rep


def test_log_sum_exp_layouts_that_do_not_fit_are_recomputed() -> None:
    q = torch.zeros(2, 3, 5, 8)
    assert attention._lse_fits(q, torch.zeros(2, 3, 5))
    assert not attention._lse_fits(q, torch.zeros(2, 3, 32))  # padded (memory-efficient)
    assert not attention._lse_fits(q, torch.zeros(2, 3, 5, dtype=torch.float64))
    assert attention._lse_fits(q.double(), torch.zeros(2, 3, 5, dtype=torch.float64))


def test_memory_efficient_and_cudnn_log_sum_exps_are_cut_to_rows(monkeypatch) -> None:
    """The padded (memory-efficient) and [..., Sq, 1] (cuDNN) log-sum-exps reach the fused
    backward as [..., Sq]; with a bias both recompute instead."""
    aten = torch.ops.aten
    seen = []
    monkeypatch.setattr(attention, "sdpa_backward",
                        lambda go, q, k, v, o, lse, c, s: seen.append(tuple(lse.shape))
                        or (q, k, v))
    q = k = v = o = go = torch.randn(2, 3, 5, 8)
    eff = attention.ATTENTION_BACKWARDS[aten._scaled_dot_product_efficient_attention_backward.default]
    cud = attention.ATTENTION_BACKWARDS[aten._scaled_dot_product_cudnn_attention_backward.default]
    none = torch.empty(0)
    eff(go, q, k, v, None, o, torch.randn(2, 3, 32), none, none, 0.0, [True] * 3 + [False])
    cud(go, q, k, v, o, torch.randn(2, 3, 5, 1), none, none, None, none, none, 5, 5, 0.0, False)
    assert seen == [(2, 3, 5), (2, 3, 5)]
    bias = torch.randn(2, 1, 5, 5)
    eff(go, q, k, v, bias, o, torch.randn(2, 3, 32), none, none, 0.0, [True] * 3 + [False])
    cud(go, q, k, v, o, torch.randn(2, 3, 5, 1), none, none, bias, none, none, 5, 5, 0.0, False)
    assert len(seen) == 2


@pytest.mark.parametrize("mask_form", ["causal_float", "causal_bool", "input_bool"])
def test_masked_attention_trains_through_tessera(monkeypatch, mask_form):
    """A mask built in the graph from ``arange`` (as ``transformers`` does under
    ``torch.compile``) is recognized as causal at trace time: fused kernels forward and
    backward; a mask that is an input (unknown at trace time) takes the recomputation
    from the log-sum-exp. Both match eager torch in float64, with no eager backward."""
    torch._dynamo.reset()
    eager_calls = []
    real = attention.attention_backward
    monkeypatch.setattr(attention, "attention_backward",
                        lambda *a: eager_calls.append(1) or real(*a))
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 4, 7, 8, dtype=torch.float64, generator=g) for _ in range(3))
    keep_in = torch.rand(2, 1, 7, 7, generator=g) > 0.3
    keep_in[..., 0] = True  # every row keeps a key

    def f(q, k, v):
        s = q.shape[-2]
        causal = torch.arange(s)[None, :] <= torch.arange(s)[:, None]
        if mask_form == "causal_float":
            mask = torch.where(causal, 0.0, float("-inf")).to(q.dtype)[None, None]
        elif mask_form == "causal_bool":
            mask = causal[None, None].expand(q.shape[0], 1, s, s)
        else:
            mask = keep_in
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)

    fused = []
    real_bwd = rules_nn.flash_attention_bwd
    monkeypatch.setattr(rules_nn, "flash_attention_bwd",
                        lambda *a, **kw: fused.append(kw["causal"]) or real_bwd(*a, **kw))
    want, want_grads = _grads(f, q, k, v)
    got, got_grads = _grads(tt.compile(f), q, k, v)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    assert not eager_calls, tt.last_report()
    # the causal masks are found at trace time: the fused causal backward runs
    assert fused == ([] if mask_form == "input_bool" else [True])


def test_classify_mask() -> None:
    from tessera.torch.static_values import classify_mask

    tril = np.arange(5)[:, None] >= np.arange(5)[None, :]
    assert classify_mask(tril[None, None], 5, 5) == "causal"
    assert classify_mask(np.where(tril, 0.0, -np.inf), 5, 5) == "causal"
    assert classify_mask(np.ones((2, 1, 5, 5), bool), 5, 5) == "none"
    assert classify_mask(np.zeros((1, 5)), 5, 5) == "none"  # broadcast rows
    # transformers' additive masks: the dtype's lowest value
    assert classify_mask(np.where(tril, 0.0, np.finfo(np.float32).min), 5, 5) == "causal"
    assert classify_mask(np.where(tril, 0.0, -65504.0), 5, 5) == "causal"
    assert classify_mask(np.where(tril, 0.0, -1e4), 5, 5) is None  # a finite penalty
    assert classify_mask(tril.T, 5, 5) is None
    bad = np.broadcast_to(tril, (2, 5, 5)).copy()
    bad[1, 4, 0] = False  # one batch differs
    assert classify_mask(bad, 5, 5) is None


def test_bf16_additive_mask_of_the_lowest_value_is_causal(monkeypatch):
    """``transformers``' own mask: bf16, 0 and ``finfo(bf16).min``, built from arange."""
    torch._dynamo.reset()
    fused = []
    real_bwd = rules_nn.flash_attention_bwd
    monkeypatch.setattr(rules_nn, "flash_attention_bwd",
                        lambda *a, **kw: fused.append(kw["causal"]) or real_bwd(*a, **kw))
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 9, 16, generator=g).bfloat16() for _ in range(3))

    def f(q, k, v):
        s = q.shape[-2]
        keep = torch.arange(s)[None, :] <= torch.arange(s)[:, None]
        mask = torch.where(keep, 0.0, torch.finfo(torch.bfloat16).min).to(q.dtype)[None, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    want, want_grads = _grads(f, *(x.double() for x in (q, k, v)))
    got, got_grads = _grads(tt.compile(f), q, k, v)
    for a, b in zip((got, *got_grads), (want, *want_grads)):
        assert ((a.double() - b).abs().max() / b.abs().max()).item() < 3e-2
    assert fused == [True]


def test_random_values_are_never_taken_for_constants() -> None:
    """A mask drawn at random (a dropout mask) changes every call: the joint-graph check
    must not evaluate it once and keep the result."""
    graph = torch.fx.Graph()
    rand = graph.call_function(torch.ops.aten.rand.default, ([4, 4],))
    keep = graph.call_function(torch.ops.aten.ge.Scalar, (rand, 0.0))
    ar = graph.call_function(torch.ops.aten.arange.default, (4,))
    with pytest.raises(LookupError):
        attention._constant(keep, {}, [64])
    assert attention._constant(ar, {}, [64]).tolist() == [0, 1, 2, 3]
