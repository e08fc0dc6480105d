"""Integer, rounding and small-argument ops through ``torch.compile(backend="tessera")``
on the CPU reference: ``gather`` of integer tensors (BERT's token type ids at its
position ids), whose errors surface as run-time checks, integer arithmetic wrapping
around as torch's does, ``floor``/``ceil``/``trunc``, and ``log1p``/``expm1``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tessera.torch as tt
from tessera.errors import TesseraError


def _gather(x, i):
    return torch.gather(x, 1, i) + 1


@pytest.mark.parametrize("dtype,bound", [(torch.int64, 2**53), (torch.int32, 2**31 - 1)])
def test_integer_gather_is_exact(dtype, bound):
    torch.manual_seed(0)
    x = torch.randint(-bound, bound, (3, 7), dtype=dtype)
    i = torch.randint(-0, 7, (2, 4))  # smaller than x off the gathered dim: its first rows
    out = tt.compile(_gather)(x, i)
    assert out.dtype == dtype and torch.equal(out, _gather(x, i))
    rep = tt.last_report()
    assert not rep.fallback_ops and rep.graphs[0].partitions == 1, str(rep)


def test_integer_gather_index_outside_raises_where_torch_raises():
    x = torch.arange(12).reshape(3, 4)
    f = tt.compile(_gather)
    assert torch.equal(f(x, torch.tensor([[3, 0], [1, 2]])), _gather(x, torch.tensor([[3, 0], [1, 2]])))
    for bad in (4, -1):
        i = torch.tensor([[0, bad], [1, 2]])
        with pytest.raises(RuntimeError):
            _gather(x, i)
        with pytest.raises(TesseraError, match=r"gather.*index outside \[0, 4\)"):
            f(x, i)


def test_int64_gather_beyond_float64_precision_raises():
    x = torch.tensor([[2**53 + 1, 5], [7, -(2**60)]])
    i = torch.tensor([[1], [0]])
    f = tt.compile(_gather)
    with pytest.raises(TesseraError, match="beyond 2\\^53"):
        f(x, i)


def test_bert_token_type_ids_gather_feeds_an_embedding():
    """BERT's embedding: the int64 token type buffer gathered at the position ids."""
    emb = torch.nn.Embedding(2, 5)
    types = torch.zeros(1, 16, dtype=torch.long)
    types[0, 3:9] = 1
    pos = torch.arange(16).unsqueeze(0)

    def f(n):
        t = torch.gather(types.expand(1, -1), 1, pos[:, :n])
        return emb(t.expand(2, n))

    out = tt.compile(f)(11)
    torch.testing.assert_close(out, f(11), rtol=0, atol=0)
    assert not tt.last_report().fallback_ops, str(tt.last_report())


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_arithmetic_wraps_around(dtype):
    info = torch.iinfo(dtype)
    torch.manual_seed(1)
    x = torch.randint(info.min // 2, info.max // 2, (64,), dtype=dtype)
    y = torch.randint(info.min // 2, info.max // 2, (64,), dtype=dtype)

    def f(a, b):
        return a * b, a + b + b, a - b - b

    for got, want in zip(tt.compile(f)(x, y), f(x, y)):
        assert torch.equal(got, want)
    assert not tt.last_report().fallback_ops


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn", [torch.floor, torch.ceil, torch.trunc])
def test_floor_ceil_trunc_match_torch_bit_for_bit(fn, dtype):
    """Halves, signed zeros (``ceil(-0.5)`` is ``-0.0``), values past 2^52 and 2^53,
    infinities and NaN (DeBERTa's log buckets take a ``ceil``); integers unchanged."""
    special = [-2.5, -2.0, -1.7, -0.5, -0.0, 0.0, 0.3, 0.5, 2.7, 1e15 + 0.5, -1e15 - 0.5,
               2.0**52 + 1, -(2.0**53), 4503599627370495.5, 1e300, float("inf"),
               float("-inf"), float("nan")]
    gen = torch.Generator().manual_seed(2)
    x = torch.cat([torch.tensor(special, dtype=torch.float64),
                   torch.randn(500, dtype=torch.float64, generator=gen) * 1000]).to(dtype)

    def f(t):
        return fn(t) * 1

    got, want = tt.compile(f)(x), f(x)
    assert torch.equal(got.isnan(), want.isnan())
    ok = ~want.isnan()
    assert torch.equal(got[ok], want[ok]) and torch.equal(got[ok].signbit(), want[ok].signbit())
    assert not tt.last_report().fallback_ops
    torch._dynamo.reset()
    i = torch.randint(-50, 50, (9,))
    assert torch.equal(tt.compile(f)(i), f(i))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("fn", [torch.log1p, torch.expm1])
def test_log1p_expm1_within_a_few_ulps_of_exact(fn, dtype):
    """Small arguments keep their digits (``log(1 + x)`` in float32 would give 0 below
    2^-24), large ones do not overflow, infinities, NaN, signed zeros and ``log1p(-1)``
    as torch; within 4 ulps in float32 and float64 (2.7 measured in float32: the
    formulas' error over ``log``/``exp``), 1 in bfloat16 (softplus: Mamba,
    RecurrentGemma). The float64 reference is numpy's extended precision."""
    gen = torch.Generator().manual_seed(8)
    scales = (1e-12, 1e-7, 1e-4, 1e-2, 1.0, 30.0)
    x = torch.cat([torch.randn(300, generator=gen) * s for s in scales]
                  + [torch.tensor([0.0, -0.0, -1.0, 1e30, 3e38, float("inf"), float("-inf"),
                                   float("nan"), 88.0, 89.0, -1e-40, 709.0, 710.0, -1e-310,
                                   1e300])])
    if fn is torch.log1p:
        x = torch.where(x < -1, -x, x)
    x = x.to(dtype)

    def f(t):
        return fn(t) * 1

    got, want = tt.compile(f)(x), f(x)
    if dtype == torch.float64:  # the correctly rounded value, from extended precision
        if np.finfo(np.longdouble).eps >= np.finfo(np.float64).eps:
            pytest.skip("no extended precision for a float64 reference")
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            ext = getattr(np, fn.__name__)(x.numpy().astype(np.longdouble))
            exact = torch.from_numpy(ext.astype(np.float64))
    else:
        exact = fn(x.double()).to(dtype).double()  # the correctly rounded value
    fin = exact.isfinite()
    assert torch.equal(got[~fin].nan_to_num(0.0, 1.0, -1.0), want[~fin].nan_to_num(0.0, 1.0, -1.0))
    ulp = torch.finfo(dtype).eps * exact.abs().clamp_min(torch.finfo(dtype).tiny)
    assert ((got.double() - exact).abs() / ulp)[fin].max() <= (1.0 if dtype == torch.bfloat16
                                                              else 4.0)
    assert torch.equal(got[exact == 0].signbit(), want[exact == 0].signbit())
    assert not tt.last_report().fallback_ops
