"""Rules the ``transformers`` decoders need beyond the core layers: rotary embeddings
(``sin``/``cos``), token embeddings and their backward (``index_put`` with
``accumulate=True``), against eager torch on fresh random inputs, with the report saying
nothing fell back."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import tessera.torch as tt


def _train_step(model: nn.Module, *inputs: torch.Tensor):
    ref_model = copy.deepcopy(model)
    out = tt.compile(model)(*inputs)
    ref = ref_model(*inputs)
    out.double().pow(2).sum().backward()
    ref.double().pow(2).sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for (n, p), (_, q) in zip(model.named_parameters(), ref_model.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-5, msg=n)


class _Rotary(nn.Module):
    """A LLaMA-style rotary embedding of a projection, positions up to ``seq``."""

    def __init__(self, dim: int = 16, base: float = 10000.0):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("inv", 1.0 / base ** (torch.arange(0, dim, 2).float() / dim))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        ang = pos[:, None].float() * self.inv[None, :]
        emb = torch.cat([ang, ang], -1)
        q = self.proj(x)
        half = q.shape[-1] // 2
        rot = torch.cat([-q[..., half:], q[..., :half]], -1)
        return q * emb.cos() + rot * emb.sin()


def test_rotary_embedding_at_large_positions_has_no_graph_break():
    torch.manual_seed(0)
    pos = torch.randint(0, 20000, (12,))  # angles of thousands of radians
    _train_step(_Rotary(), torch.randn(12, 16), pos)
    rep = tt.last_report()
    assert not rep.fallback_ops and not any(g.runtime_fallbacks for g in rep.graphs), str(rep)


def test_sin_cos_in_float64_and_their_gradients():
    x = (torch.rand(5, 7, dtype=torch.float64) - 0.5) * 2e4
    w = nn.Parameter(torch.randn(7, dtype=torch.float64))
    out = tt.compile(lambda t: torch.sin(t * w) * torch.cos(t) + torch.cos(w))(x)
    out.sum().backward()
    g = w.grad.clone()
    w.grad = None
    ref = torch.sin(x * w) * torch.cos(x) + torch.cos(w)
    ref.sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g, w.grad, rtol=1e-9, atol=1e-9)
    assert not tt.last_report().fallback_ops


class _Embed(nn.Module):
    def __init__(self, vocab: int = 11, dim: int = 6, padding_idx: int | None = None):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=padding_idx)
        self.fc = nn.Linear(dim, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(self.emb(ids)).tanh()


@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=str)
def test_embedding_and_its_backward_with_repeated_ids(padding_idx, dtype):
    torch.manual_seed(0)
    ids = torch.tensor([[1, 2, 2, 10], [0, 2, 1, 1], [5, 5, 5, 2]], dtype=dtype)  # repeats
    _train_step(_Embed(padding_idx=padding_idx), ids)
    rep = tt.last_report()
    assert not rep.fallback_ops, str(rep)
    assert sum(g.tessera_calls for g in rep.graphs) >= 2  # the forward and the backward


def test_embedding_index_outside_the_table_is_nan_not_a_value():
    emb = nn.Embedding(5, 3)
    with torch.no_grad():
        out = tt.compile(emb)(torch.tensor([0, 4, 5]))
    assert torch.isnan(out[2]).all() and not torch.isnan(out[:2]).any()


def test_index_put_accumulate_with_negative_and_outside_indices():
    x = torch.randn(6, 2, 3)
    v = torch.randn(4, 2, 3)

    def f(x, idx, v):
        return torch.index_put(x, (idx,), v, accumulate=True) * 2.0

    idx = torch.tensor([1, -1, 1, 0])  # -1 is the last row, as in torch
    got = tt.compile(f)(x, idx, v)
    torch.testing.assert_close(got, f(x, idx, v), rtol=1e-6, atol=1e-6)
    assert not tt.last_report().fallback_ops
    torch._dynamo.reset()
    bad = tt.compile(f)(x, torch.tensor([1, 6, 0, 0]), v)  # torch raises
    assert torch.isnan(bad).all()


def test_index_put_accumulate_with_several_index_tensors():
    """``x[:, i, j] += v``: index tensors at consecutive dims, broadcast together, with
    repeated pairs (they add up), negative ones; one outside its own dim (though the pair
    read as one flat index would land inside) makes the result NaN."""
    torch.manual_seed(3)
    x = torch.randn(2, 5, 4, 3, dtype=torch.float64)
    v = torch.randn(2, 3, 6, 3, dtype=torch.float64)

    def f(x, i, j, v):
        return torch.ops.aten.index_put(x, [None, i, j], v, True) * 2.0

    i = torch.tensor([[1], [-1], [1]])  # [3, 1]
    j = torch.tensor([0, 3, 3, -4, 2, 0])  # [6]: (1, 0) and (1, 3) repeat
    torch.testing.assert_close(tt.compile(f)(x, i, j, v), f(x, i, j, v), rtol=1e-12, atol=1e-12)
    assert not tt.last_report().fallback_ops
    torch._dynamo.reset()
    bad = tt.compile(f)(x, i, torch.tensor([0, 4, 3, 1, 2, 0]), v)  # 4 is outside dim 2
    assert torch.isnan(bad).all()


def test_bilinear_interpolate_gradient_and_pair_indexing_backward():
    """The backwards of a bilinear upsampling (SegFormer's head) and of picking one row
    per batch element (CLIP's pooled token): ``index_put`` with two index tensors."""
    torch.manual_seed(4)
    x = torch.randn(2, 3, 5, 7, dtype=torch.float64, requires_grad=True)
    h = torch.randn(2, 6, 4, dtype=torch.float64, requires_grad=True)
    pick = torch.tensor([5, 2])

    def f(x, h):
        up = torch.nn.functional.interpolate(x, size=(9, 12), mode="bilinear",
                                             align_corners=False)
        return up.pow(2).sum() + h[torch.arange(2), pick].pow(3).sum()

    out = tt.compile(f)(x, h)
    out.backward()
    got = (x.grad.clone(), h.grad.clone())
    x.grad = h.grad = None
    f(x, h).backward()
    torch.testing.assert_close(got, (x.grad, h.grad), rtol=1e-12, atol=1e-12)
    rep = tt.last_report()
    assert not any("index_put" in k for k in rep.fallback_ops), str(rep)


def test_index_put_without_accumulate_stays_in_torch():
    def f(x, idx, v):
        return torch.index_put(x, (idx,), v) + 1.0

    x, v, idx = torch.randn(5, 2), torch.randn(2, 2), torch.tensor([3, 1])
    torch.testing.assert_close(tt.compile(f)(x, idx, v), f(x, idx, v))
    rep = tt.last_report()
    assert rep.fallback_ops["aten.index_put.default"] == 1
    reason = next(g.fallback_reasons["aten.index_put.default"] for g in rep.graphs
                  if "aten.index_put.default" in g.fallback_reasons)
    assert "accumulate=False" in reason


def test_index_put_past_the_one_hot_limit_stays_in_torch(monkeypatch):
    """A table x positions product past ``ONEHOT_LIMIT`` (GPT-2's embedding backward at
    full size would be a 1.6 GB one-hot matrix) is left to torch, counted, with why."""
    from tessera.torch import rules_index

    monkeypatch.setattr(rules_index, "ONEHOT_LIMIT", 23)

    def f(x, idx, v):
        return torch.index_put(x, (idx,), v, accumulate=True) * 2.0

    x, v, idx = torch.randn(6, 2), torch.randn(4, 2), torch.tensor([1, 5, 1, 0])
    torch.testing.assert_close(tt.compile(f)(x, idx, v), f(x, idx, v))
    rep = tt.last_report()
    assert rep.fallback_ops["aten.index_put.default"] == 1
    reason = next(g.fallback_reasons["aten.index_put.default"] for g in rep.graphs
                  if "aten.index_put.default" in g.fallback_reasons)
    assert "one-hot" in reason


@pytest.mark.parametrize("start,end,step", [(0, None, 2), (1, None, 2), (1, 7, 3), (2, 3, 4)])
def test_strided_slice_and_its_backward(start, end, step):
    """GPT-J's interleaved rotary takes ``x[..., ::2]`` and ``x[..., 1::2]``: the backward
    of a strided slice is a strided ``slice_scatter``."""
    torch.manual_seed(0)
    lin = nn.Linear(4, 8)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            h = self.lin(x)
            return h[..., start:end:step].sin() * 3.0

    _train_step(M(), torch.randn(3, 4))
    rep = tt.last_report()
    assert not rep.fallback_ops and not any(g.runtime_fallbacks for g in rep.graphs), str(rep)


def _no_fallbacks() -> None:
    rep = tt.last_report()
    assert not rep.fallback_ops and not any(g.runtime_fallbacks for g in rep.graphs), str(rep)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumsum_of_masks_and_floats(dim):
    """OPT and RoBERTa number positions by a cumulative sum of the attention mask."""
    mask = (torch.rand(3, 37) > 0.3).long()
    w = nn.Parameter(torch.randn(37))

    def f(m, x):
        pos = torch.cumsum(m, dim=dim) * m
        return pos.float() + torch.cumsum(x * w, dim=dim)

    x = torch.randn(3, 37)
    got = tt.compile(f)(mask, x)
    torch.testing.assert_close(got, f(mask, x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.cumsum(mask, dim=dim) * mask,
                               (got - torch.cumsum(x * w, dim=dim)).round().long())
    _no_fallbacks()
    got.sum().backward()  # the backward of a cumsum is a flipped cumsum
    g = w.grad.clone()
    w.grad = None
    f(mask, x).sum().backward()
    torch.testing.assert_close(g, w.grad, rtol=1e-5, atol=1e-5)


def test_repeat_copy_and_index_by_one_tensor():
    """GPT-J and BLOOM ``repeat``; T5 and BART shift the labels right with a slice
    assignment (``copy``); Falcon picks heads with ``x[:, :, [k]]``."""
    torch.manual_seed(0)
    lin = nn.Linear(5, 12)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x, ids):
            h = self.lin(x).view(2, 3, 4)  # [2, 3, 4]
            r = h.repeat(2, 1, 3)  # [4, 3, 12]
            shifted = ids.new_zeros(ids.shape)
            shifted[:, 1:] = ids[:, :-1].clone()
            picked = h[:, :, torch.tensor([3, -1, 0])]  # [2, 3, 3]
            rows = h[torch.tensor([[1, 0], [1, 1]])]  # [2, 2, 3, 4]
            return (r.sum(-1, keepdim=True)[:2, :, :1] * shifted[:, :1, None].float()
                    + picked.sum(-1, keepdim=True) + rows.sum(0)[..., :1])

    _train_step(M(), torch.randn(2, 5), torch.randint(0, 9, (2, 3)))
    _no_fallbacks()


def test_fully_masked_query_rows_give_zeros_as_torch():
    """A left-padded sequence's padding queries see no key: torch's fused attention gives
    them a zero output (and gradient) where a softmax would give NaN, which the next
    layer's attention would then spread to every query of the sequence."""
    torch.manual_seed(0)
    proj = nn.Linear(8, 8)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = proj

        def forward(self, x, keep):
            q = self.proj(x).view(2, 5, 2, 4).transpose(1, 2)
            bias = torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
            o = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=bias)
            return torch.nn.functional.scaled_dot_product_attention(o, o, o) * 2.0

    keep = torch.ones(2, 1, 5, 5, dtype=torch.bool).tril()
    keep[0, :, :, :2] = False  # row 0 left-padded by two: queries 0 and 1 see nothing
    keep[0, :, 0, 0] = keep[0, :, 1, 1] = False
    _train_step(M(), torch.randn(2, 5, 8), keep)
    _no_fallbacks()


def test_index_by_several_tensors_and_a_bool_mask():
    """``transformers`` builds its padding masks as ``mask[batch_idx, kv_idx]`` from
    ``arange``s: a bool tensor picked at indices the trace knows."""

    def f(x, pad):
        b = torch.arange(2)[:, None, None]
        kv = torch.arange(6)[None, None, :]
        keep = pad[b, kv]  # [2, 1, 6] bool
        rows = x[torch.tensor([[1], [0]]), torch.tensor([2, -1, 0])]  # [2, 3, 4]
        return torch.where(keep, x[:, :1, :1].expand(2, 1, 6), 0.0).sum(-1, keepdim=True) + rows

    x = torch.randn(2, 6, 4)
    pad = torch.rand(2, 6) > 0.3
    torch.testing.assert_close(tt.compile(f)(x, pad), f(x, pad))
    _no_fallbacks()


def test_a_bool_tensor_at_unknown_indices_runs_in_torch():
    def f(pad, i):
        return pad[i, i].float() * 3.0

    pad, i = torch.rand(4, 4) > 0.5, torch.tensor([3, 0, 1])
    torch.testing.assert_close(tt.compile(f)(pad, i), f(pad, i))
    rep = tt.last_report()
    assert any("not known in range" in r for g in rep.graphs for r in g.runtime_fallbacks.values())


def test_cumsum_backward_flips_and_index_select():
    w = nn.Parameter(torch.randn(5))
    x = torch.randn(3, 5)
    idx = torch.tensor([4, 0, 0, 2])

    def f(x):
        return torch.cumsum(x * w, 1).flip(0) + torch.index_select(x * w, 1, idx).sum(-1, True)

    out = tt.compile(f)(x)
    out.pow(2).sum().backward()
    g = w.grad.clone()
    w.grad = None
    ref = f(x)
    ref.pow(2).sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g, w.grad, rtol=1e-5, atol=1e-5)
    _no_fallbacks()


def test_argmax_of_a_masked_0d_tensor():
    """``masked.argmax`` of a 0-d tensor: a 0-d select viewed as ``[1]`` (fuse-elementwise
    moved the view above the select and typed it wrongly: a verifier error)."""

    def f(x, m):
        return torch.where(m, x, torch.tensor(float("-inf"))).reshape(1).exp().argmax()

    for m in (torch.tensor(True), torch.tensor(False)):
        x = torch.tensor(-8.5)
        assert torch.equal(tt.compile(f)(x, m), f(x, m))
    _no_fallbacks()


@pytest.mark.parametrize("idx", [torch.tensor([0]), torch.tensor(0)])
def test_index_select_of_a_0d_tensor_is_0d(idx):
    """torch reads a 0-d tensor as one element: ``index_select(x, 0, [0])`` is ``x``, 0-d
    (it crashed the translation)."""
    x = torch.tensor(2.5)

    def f(x, i):
        return torch.index_select(x * 2, 0, i)

    out = tt.compile(f)(x, idx)
    assert out.shape == () and out.item() == 5.0
    _no_fallbacks()


@pytest.mark.parametrize("fn,dim,keepdim", [(torch.argmax, None, False),
                                            (torch.argmin, None, True), (torch.argmax, 1, True),
                                            (torch.argmin, -1, False)])
def test_argmax_argmin_first_extreme_and_nan(fn, dim, keepdim):
    """Ties give the first position, a NaN counts as the extreme (its first position),
    float and integer inputs (CLIP pools the token at ``(ids == eos).int().argmax(-1)``)."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randint(0, 3, (4, 7, 5), generator=gen).double()
    x[1, 3, 2] = x[2, 5, 0] = x[2, 1, 0] = float("nan")

    def f(t):
        return fn(t, dim=dim, keepdim=keepdim) + 1

    for t in (x, x.float(), x.nan_to_num().int()):
        torch._dynamo.reset()
        got, want = tt.compile(f)(t), f(t)
        assert got.shape == want.shape and torch.equal(got, want), (t.dtype, got, want)
        assert not tt.last_report().fallback_ops


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_add_with_short_indices_and_gather_backward(dim):
    """``scatter_add`` with indices shorter than the input and the source off the dim
    (repeated indices add up), an index outside the dim giving NaN, and ``gather``'s
    backward (DeBERTa's relative attention) being one."""
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(4, 5, 6, dtype=torch.float64, generator=gen)
    src = torch.randn(4, 5, 6, dtype=torch.float64, generator=gen)
    d = dim % 3
    idx = torch.randint(0, x.shape[d], (3, 4, 5), generator=gen)

    def f(x, i, s):
        return torch.scatter_add(x, dim, i, s) * 2

    torch.testing.assert_close(tt.compile(f)(x, idx, src), f(x, idx, src), rtol=1e-12,
                               atol=1e-12)
    assert not tt.last_report().fallback_ops
    bad = idx.clone()
    bad[0, 0, 0] = x.shape[d]
    assert torch.isnan(tt.compile(f)(x, bad, src)).all()
    torch._dynamo.reset()
    w = x.clone().requires_grad_()

    def g(w, i):
        return torch.gather(w, dim, i).pow(2).sum()

    tt.compile(g)(w, idx).backward()
    got, w.grad = w.grad, None
    g(w, idx).backward()
    torch.testing.assert_close(got, w.grad, rtol=1e-12, atol=1e-12)
    assert not tt.last_report().fallback_ops, str(tt.last_report())


@pytest.mark.parametrize("fn,dim,keepdim", [(torch.max, 0, False), (torch.max, 1, True),
                                            (torch.min, -1, False)])
def test_max_min_along_a_dim_values_indices_and_gradient(fn, dim, keepdim):
    """``torch.max(x, dim)``: the first extreme's index and its value (NaN first), float
    and integer inputs, and the gradient to the picked element (Switch Transformers'
    router takes the max probability and its expert)."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randint(0, 3, (4, 7, 5), generator=gen).double()
    x[1, 3, 2] = x[2, 5, 0] = x[2, 1, 0] = float("nan")

    def f(t):
        v, i = fn(t, dim=dim, keepdim=keepdim)
        return v * 2, i + 1

    for t in (x, x.nan_to_num().long()):
        torch._dynamo.reset()
        (gv, gi), (wv, wi) = tt.compile(f)(t), f(t)
        assert torch.equal(gi, wi) and gv.shape == wv.shape
        assert torch.equal(gv.nan_to_num(7.0), wv.nan_to_num(7.0))
        assert not tt.last_report().fallback_ops
    torch._dynamo.reset()
    w = torch.randn(4, 7, 5, dtype=torch.float64, generator=gen, requires_grad=True)

    def g(w):
        return fn(w, dim=dim, keepdim=keepdim).values.pow(2).sum()

    tt.compile(g)(w).backward()
    got, w.grad = w.grad, None
    g(w).backward()
    torch.testing.assert_close(got, w.grad, rtol=0, atol=0)
    assert not tt.last_report().fallback_ops
