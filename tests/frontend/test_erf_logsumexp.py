"""``ts.erf`` and ``ts.logsumexp``, the ops added by docs/ARCHITECTURE.md's add-an-op recipe.

Each concern is checked where it lives: the Graph IR ops (round trip, verifiers), the
front-end functions (shapes, dtypes, errors), the reference interpreter and the lowered
kernels (on the Tile IR interpreter) against torch in float64 on fresh random inputs,
the adjoints against ``torch.autograd``, the cost and sharding entries, the PTX through
ptxas, and the f32 erf approximation the PTX computes, instruction by instruction in
numpy, to about 1 ulp.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

import tessera as ts
from tessera.ir import graph as g
from tessera.passes.emit_ptx import emit_ptx, kernels
from tessera.passes.lower_tile_to_target import LowerTileToTargetPass
from tessera.passes.lower_tile_to_target.math_ops import ERF_LOG2_ERFC, ERF_ONE, ERF_SMALL
from tessera.passes.pipelines import default_context
from tessera.passes.shard_propagation import MeshInfo, Sharding, decide, uneven_dims
from tessera.profiler.costs import flops
from tessera.runtime import ptxas
from tessera.runtime.graph_interpreter import run_function
from tessera.runtime.tile_interpreter import run_host
from tests.passes.test_lower_graph_to_tile import context, f64, lower


def _rng() -> np.random.Generator:
    return np.random.default_rng()  # fresh inputs each run


def _parse(text: str):
    m = Parser(context(), text).parse_module()
    m.verify()
    return m


PROGRAM = """
func.func @f(%x: tensor<5x37xf32>) -> (tensor<5x37xf32>, tensor<5xf32>, tensor<1x37xf32>) {
  %e = tgraph.erf %x : (tensor<5x37xf32>) -> tensor<5x37xf32>
  %l = tgraph.logsumexp %x axes = [1] : (tensor<5x37xf32>) -> tensor<5xf32>
  %k = tgraph.logsumexp %x axes = [0] keepdims : (tensor<5x37xf32>) -> tensor<1x37xf32>
  func.return %e, %l, %k : tensor<5x37xf32>, tensor<5xf32>, tensor<1x37xf32>
}
"""


# --------------------------------------------------------------------------- Graph IR


def test_round_trip() -> None:
    m = _parse(PROGRAM)
    assert _parse(str(m)).is_structurally_equivalent(m)
    assert "tgraph.logsumexp %x axes = [0] keepdims" in str(m)
    ops = [type(o) for o in m.walk()]
    assert g.ErfOp in ops and g.LogSumExpOp in ops
    assert g.ErfOp in g.FUSIBLE_UNARY_OPS


@pytest.mark.parametrize(
    "body, message",
    [
        ("%r = tgraph.erf %x : (tensor<4xi32>) -> tensor<4xi32>",
         "tgraph.erf: needs a floating-point operand, got i32"),
        ("%r = tgraph.logsumexp %x axes = [0] : (tensor<4xi32>) -> tensor<i32>",
         "tgraph.logsumexp: needs a floating-point operand, got i32"),
    ],
)
def test_invalid_element_type(body: str, message: str) -> None:
    text = f"func.func @f(%x: tensor<4xi32>) {{\n  {body}\n  func.return\n}}"
    with pytest.raises(VerifyException, match=message):
        _parse(text)


@pytest.mark.parametrize(
    "axes, rtype, message",
    [
        ("[2]", "tensor<4xf32>", r"tgraph.logsumexp: axis 2 out of range for rank 2"),
        ("[1]", "tensor<3xf32>", r"tgraph.logsumexp: result has shape \[3\], expected \[4\]"),
        ("[1, 1]", "tensor<4xf32>", r"tgraph.logsumexp: repeated axis"),
    ],
)
def test_invalid_logsumexp_shapes(axes: str, rtype: str, message: str) -> None:
    text = (
        "func.func @f(%x: tensor<4x6xf32>) {\n"
        f"  %r = tgraph.logsumexp %x axes = {axes} : (tensor<4x6xf32>) -> {rtype}\n"
        "  func.return\n}"
    )
    with pytest.raises(VerifyException, match=message):
        _parse(text)


# --------------------------------------------------------------------------- front end


def test_front_end_shapes_and_dtypes() -> None:
    @ts.jit
    def f(x: ts.Tensor["N", "M", ts.f32], i: ts.Tensor["N", ts.int32]):  # noqa: F821, UP037
        return (ts.erf(x), ts.logsumexp(x, 1), ts.logsumexp(x, (0, 1), keepdim=True),
                ts.erf(i), ts.logsumexp(i, 0))

    x = _rng().standard_normal((3, 4)).astype(np.float32)
    i = np.array([1, -2, 3], np.int32)
    e, l1, l2, ei, li = f(x, i)
    assert e.shape == (3, 4) and l1.shape == (3,) and l2.shape == (1, 1)
    assert ei.dtype == np.float32 and li.dtype == np.float32 and li.shape == ()
    assert ts.erf(0.5) == pytest.approx(math.erf(0.5))  # Python numbers fold at trace time


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x: ts.logsumexp(x, ()), "logsumexp: dim must be an int or a non-empty tuple"),
        (lambda x: ts.logsumexp(x, 2), "logsumexp: axis 2 out of range"),
        (lambda x: ts.logsumexp(x, (0, 0)), r"logsumexp: repeated axis"),
        (lambda x: ts.erf("a"), "erf: expected a tensor, got str"),
    ],
)
def test_front_end_errors_are_located(call, message: str) -> None:
    @ts.jit
    def f(x: ts.Tensor[3, 4, ts.f32]):
        return call(x)

    with pytest.raises(ts.TesseraError, match=message) as err:
        f(np.ones((3, 4), np.float32))
    assert "test_erf_logsumexp.py:" in str(err.value)


# --------------------------------------------------------------------------- numerics


def _torch64(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(x.astype(np.float64))


def _close(got: np.ndarray, want: torch.Tensor, rtol: float) -> None:
    w = want.numpy()
    assert got.shape == w.shape
    np.testing.assert_allclose(f64(got), w, rtol=rtol, atol=rtol, equal_nan=True)


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-6), (np.float64, 1e-14)])
def test_reference_interpreter_against_torch_float64(dtype, rtol) -> None:
    rng = _rng()
    x = (rng.standard_normal((4, 6, 5)) * 3).astype(dtype)
    x[0, 0, :] = -np.inf  # a slice of -inf: logsumexp is -inf
    x[1, 2, 3] = np.inf  # a +inf element: +inf

    @ts.jit
    def f(x: ts.Tensor["A", "B", "C"]):  # noqa: F821, UP037
        return (ts.erf(x), ts.logsumexp(x, -1), ts.logsumexp(x, (0, 2), keepdim=True),
                ts.logsumexp(x, (0, 1, 2)))

    e, l1, l2, l3 = f(x)
    t = _torch64(x)
    _close(e, torch.erf(t), rtol)
    _close(l1, torch.logsumexp(t, -1), rtol)
    _close(l2, torch.logsumexp(t, (0, 2), keepdim=True), rtol)
    _close(l3, torch.logsumexp(t, (0, 1, 2)), rtol)
    assert l1[0, 0] == -np.inf and l1[1, 2] == np.inf


def test_empty_slice_gives_minus_inf() -> None:
    @ts.jit
    def f(x: ts.Tensor[3, 0, ts.f32]):
        return ts.logsumexp(x, 1)

    np.testing.assert_array_equal(f(np.zeros((3, 0), np.float32)), np.full(3, -np.inf))


def test_lowered_kernels_against_torch_float64() -> None:
    rng = _rng()
    x = (rng.standard_normal((5, 37)) * 4).astype(np.float32)
    x[1, :] = -np.inf
    x[2, 5] = np.inf
    x[3, 7] = np.nan
    x[0, 0] = 120.0  # exp(x) alone would overflow f32: the max is subtracted first
    got = run_host(lower(PROGRAM), "f", [x.copy()])
    want = run_function(_parse(PROGRAM), "f", [x.copy()])
    t = _torch64(x)
    # the Tile IR interpreter computes math.erf exactly; the PTX approximation is
    # checked by test_erf_f32_approximation_is_within_2_ulp
    _close(got[0], torch.erf(t), 1e-6)
    _close(got[1], torch.logsumexp(t, 1), 2e-6)
    _close(got[2], torch.logsumexp(t, 0, keepdim=True), 2e-6)
    for a, b in zip(got, want):  # atol: log-sum-exps near 0 (a rounding of values near 1)
        np.testing.assert_allclose(f64(a), f64(b), rtol=2e-6, atol=5e-7, equal_nan=True)


def test_erf_fuses_with_its_neighbours() -> None:
    @ts.jit
    def f(x: ts.Tensor[7, 9, ts.f32]):
        return ts.erf(x * 0.5) + 1.0

    x = _rng().standard_normal((7, 9)).astype(np.float32)
    assert "tgraph.fused" in f.inspect_ir("graph")
    _close(f(x), torch.erf(_torch64(x) * 0.5) + 1.0, 1e-6)


# --------------------------------------------------------------------------- gradients


def test_gradients_against_torch_autograd() -> None:
    rng = _rng()
    x = rng.standard_normal((3, 5, 4))

    def loss(x: ts.Tensor[3, 5, 4, ts.f64]):
        a = ts.logsumexp(x, 1) * ts.logsumexp(ts.erf(x), 1)
        return ts.sum(a) + ts.sum(ts.logsumexp(ts.erf(x) * 2.0, (0, 2), keepdim=True) * x)

    got = ts.grad(loss)(x)
    t = torch.from_numpy(x).requires_grad_()
    a = torch.logsumexp(t, 1) * torch.logsumexp(torch.erf(t), 1)
    ref = a.sum() + (torch.logsumexp(torch.erf(t) * 2.0, (0, 2), keepdim=True) * t).sum()
    ref.backward()
    np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- cost, sharding


def test_cost_and_sharding_entries() -> None:
    m = _parse(PROGRAM)
    erf, lse, lse_keep = [o for o in m.walk() if o.dialect_name() == "tgraph"]
    assert flops(erf) == 5 * 37
    assert flops(lse) == 4 * 5 * 37 + 2 * 5
    mesh = MeshInfo({"dp": 5, "tp": 37})
    # kept dims stay split, the reduced one is gathered, a pending sum is done first
    dec = decide(lse, [Sharding((("dp",), ("tp",)), ("x",))], mesh)
    assert dec.operands == [Sharding((("dp",), ()))] and dec.results == [Sharding((("dp",),))]
    dec = decide(lse_keep, [Sharding((("dp",), ("tp",)))], mesh)
    assert dec.operands == [Sharding(((), ("tp",)))] and dec.results == [Sharding(((), ("tp",)))]
    assert uneven_dims(lse) == ([{0}], [{0}])
    dec = decide(erf, [Sharding((("dp",), ()))], mesh)
    assert dec.results == [Sharding((("dp",), ()))]


# --------------------------------------------------------------------------- PTX


def test_ptx_passes_ptxas() -> None:
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found (set TESSERA_PTXAS or install nvidia-cuda-nvcc)")
    m = lower(PROGRAM)
    LowerTileToTargetPass().apply(default_context(), m)
    ptx = emit_ptx(m)
    assert len(kernels(m)) == 3
    assert "setp.nan.f32" in ptx and "min.f32" in ptx and "ex2.approx.f32" in ptx
    # one accurate log per logsumexp (no lg2.approx: its absolute error near 1)
    assert "lg2.approx.f32" not in ptx and ptx.count("1068827891") == 2
    ptxas.check(ptx)


def _f32(v) -> np.ndarray:
    return np.asarray(v, dtype=np.float32)


def _fma(a, b, c) -> np.ndarray:
    """``fma.rn.f32``: the float64 product of two floats is exact."""
    return (f64(a) * f64(b) + f64(c)).astype(np.float32)


def _horner(coeffs, t) -> np.ndarray:
    p = np.full_like(t, np.float32(coeffs[-1]))
    for c in reversed(coeffs[:-1]):
        p = _fma(p, t, np.full_like(t, np.float32(c)))
    return p


def _erf_as_lowered(x: np.ndarray) -> np.ndarray:
    """The instructions of ``math.erf``'s lowering, in f32 (``ex2`` taken exact)."""
    ax = np.abs(x)
    small = _fma(x, _horner(ERF_SMALL, _f32(x * x)), x)
    q = _horner(ERF_LOG2_ERFC, np.minimum(ax, np.float32(ERF_ONE)))
    big = np.copysign(_f32(np.float32(1) - np.exp2(f64(q)).astype(np.float32)), x)
    return np.where(np.isnan(x), x, np.where(ax < 1, small, big))


def test_erf_f32_approximation_is_within_2_ulp() -> None:
    rng = _rng()
    x = np.concatenate([
        rng.uniform(-5, 5, 200_000),
        rng.uniform(-1, 1, 50_000) * 10.0 ** rng.uniform(-30, 0, 50_000),
        [0.9999999, 1.0, 1.0000001, ERF_ONE, 3.93, 10.0],
    ]).astype(np.float32)
    x = np.concatenate([x, -x])
    got = _erf_as_lowered(x)
    want = np.vectorize(math.erf)(f64(x))
    ulp = np.spacing(np.abs(want.astype(np.float32))).astype(np.float64)
    assert float(np.max(np.abs(f64(got) - want) / ulp)) <= 2.0
    special = _erf_as_lowered(_f32([np.inf, -np.inf, np.nan, 0.0, -0.0]))
    assert list(special[:2]) == [1.0, -1.0] and np.isnan(special[2])
    assert np.signbit(special[4]) and not np.signbit(special[3])
