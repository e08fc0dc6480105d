"""``tgraph.take_along_axis`` (torch.gather) and the one-pass streaming ``tgraph.logsumexp``
with its f32 result for 16-bit rows: front end, reference interpreter and the lowered
kernels (Tile IR interpreter) against torch in float64, and ptxas."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from xdsl.parser import Parser

import tessera as ts
from tessera.errors import TesseraError
from tessera.passes.emit_ptx import emit_ptx
from tessera.passes.lower_tile_to_target import LowerTileToTargetPass
from tessera.passes.pipelines import default_context
from tessera.runtime import convert, ptxas
from tessera.runtime.graph_interpreter import run_function
from tessera.runtime.tile_interpreter import run_host
from tests.passes.test_lower_graph_to_tile import context, f64, lower

GATHER = """
func.func @f(%x: tensor<5x37xf32>, %i: tensor<5x2xi64>, %y: tensor<4x3x6xbf16>, %j: tensor<2x3x6xi32>)
    -> (tensor<5x2xf32>, tensor<2x3x6xbf16>) {
  %0 = tgraph.take_along_axis %x, %i axis = 1 : (tensor<5x37xf32>, tensor<5x2xi64>) -> tensor<5x2xf32>
  %1 = tgraph.take_along_axis %y, %j axis = 0 : (tensor<4x3x6xbf16>, tensor<2x3x6xi32>) -> tensor<2x3x6xbf16>
  func.return %0, %1 : tensor<5x2xf32>, tensor<2x3x6xbf16>
}
"""


def _gather_inputs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 37)).astype(np.float32)
    i = rng.integers(0, 37, (5, 2)).astype(np.int64)
    i[1, 0], i[3, 1] = -1, 37  # out of range: NaN
    y = torch.randn(4, 3, 6, dtype=torch.bfloat16)
    j = rng.integers(0, 4, (2, 3, 6)).astype(np.int32)
    j[0, 2, 5] = 4
    return x, i, y, j


def _gather_want(x, i, y, j):
    ok = (i >= 0) & (i < 37)
    w0 = np.where(ok, torch.gather(torch.from_numpy(x).double(), 1,
                                   torch.from_numpy(np.where(ok, i, 0))).numpy(), np.nan)
    okj = (j >= 0) & (j < 4)
    w1 = torch.gather(y.double(), 0, torch.from_numpy(np.where(okj, j, 0).astype(np.int64)))
    return w0, np.where(okj, w1.numpy(), np.nan)


def test_gather_reference_and_lowered_kernel_match_torch_with_nan_out_of_range():
    x, i, y, j = _gather_inputs()
    ya = convert.to_numpy(y)
    w0, w1 = _gather_want(x, i, y, j)
    m = Parser(context(), GATHER).parse_module()
    for got in (run_function(m, "f", [x, i, ya, j]), run_host(lower(GATHER), "f", [x, i, ya, j])):
        np.testing.assert_array_equal(f64(got[0]), w0)
        np.testing.assert_array_equal(f64(got[1]), w1)


def test_front_end_and_its_errors():
    @ts.jit
    def f(x: ts.Tensor[4, 9, ts.f32], i: ts.Tensor[4, 2, ts.i64]):
        return ts.take_along_axis(x, i, -1)

    x = np.random.default_rng(1).standard_normal((4, 9)).astype(np.float32)
    i = np.array([[0, 8], [1, 1], [7, 2], [3, 4]])
    np.testing.assert_array_equal(f(x, i), np.take_along_axis(x, i, 1))
    with pytest.raises(TesseraError, match="need the same rank"):
        ts.jit(lambda x, i: ts.take_along_axis(x, i, 0))(x, i[:, 0])
    with pytest.raises(TesseraError, match="must be int32 or int64"):
        ts.jit(lambda x, i: ts.take_along_axis(x, i, 0))(x, i.astype(np.float32))
    with pytest.raises(TesseraError, match="larger than input"):
        ts.jit(lambda x, i: ts.take_along_axis(x, i, 1))(x, np.zeros((5, 1), np.int64))


LSE = """
func.func @f(%x: tensor<3x1500xbf16>, %y: tensor<2x4x1100xf32>) -> (tensor<3xf32>, tensor<2x4x1xf32>) {
  %0 = tgraph.logsumexp %x axes = [1] : (tensor<3x1500xbf16>) -> tensor<3xf32>
  %1 = tgraph.logsumexp %y axes = [2] keepdims : (tensor<2x4x1100xf32>) -> tensor<2x4x1xf32>
  func.return %0, %1 : tensor<3xf32>, tensor<2x4x1xf32>
}
"""


def test_streaming_logsumexp_matches_torch_float64():
    """One pass over long rows (online max and sum); bf16 rows give an f32 result; a row
    of -inf gives -inf, one with +inf gives +inf, values far from 0 do not overflow."""
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(3, 1500, generator=g) * 4).to(torch.bfloat16)
    x[0, :] = float("-inf")
    x[2, 77] = 200.0
    y = torch.randn(2, 4, 1100, generator=g) * 3
    y[1, 2, 1099] = float("inf")
    m = lower(LSE)
    assert "f_logsumexp_0" in str(m) and "kind = max" in str(m)
    got = run_host(m, "f", [convert.to_numpy(x), y.numpy()])
    want0 = torch.logsumexp(x.double(), 1)
    want1 = torch.logsumexp(y.double(), 2, keepdim=True)
    np.testing.assert_allclose(f64(got[0]), want0.numpy(), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(f64(got[1]), want1.numpy(), rtol=2e-6, atol=2e-6)
    assert got[0].dtype == np.float32


def test_ptx_passes_ptxas():
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found (set TESSERA_PTXAS or install nvidia-cuda-nvcc)")
    for text in (GATHER, LSE):
        m = lower(text)
        LowerTileToTargetPass().apply(default_context(), m)
        ptxas.check(emit_ptx(m))


def test_gradients_against_torch_autograd():
    """take_along_axis's adjoint (a compare-and-sum scatter, zeros off the indices' extent)
    and logsumexp's with an f32 result of bf16 rows."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 7))
    i = rng.integers(0, 7, (3, 5))
    j = rng.integers(0, 4, (6, 7))
    w = rng.standard_normal((3, 5))

    def loss(x: ts.Tensor[4, 7, ts.f64], i: ts.Tensor[3, 5, ts.i64], j: ts.Tensor[6, 7, ts.i64],
             w: ts.Tensor[3, 5, ts.f64]):
        return ts.sum(ts.take_along_axis(x, i, 1) * w) + ts.sum(ts.take_along_axis(x, j, 0) ** 2.0)

    got = ts.grad(loss)(x, i, j, w)
    t = torch.from_numpy(x).requires_grad_()
    ref = (torch.gather(t, 1, torch.from_numpy(i)) * torch.from_numpy(w)).sum() + (
        torch.gather(t, 0, torch.from_numpy(j)) ** 2).sum()
    ref.backward()
    np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-12, atol=1e-12)

    def lse(x: ts.Tensor[3, 5, ts.bf16]):
        return ts.sum(ts.logsumexp(x, 1, wide=True))

    xb = torch.randn(3, 5, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    g = ts.grad(lse)(xb)
    tb = xb.double().requires_grad_()
    torch.logsumexp(tb, 1).sum().backward()
    assert g.dtype == torch.bfloat16
    np.testing.assert_allclose(g.double().numpy(), tb.grad.numpy(), rtol=8e-3, atol=4e-3)
