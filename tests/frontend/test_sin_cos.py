"""``ts.sin`` and ``ts.cos`` (``tgraph.sin`` / ``tgraph.cos``), by docs/ARCHITECTURE.md's
add-an-op recipe.

The Graph IR ops (round trip, verifiers), the front-end functions, the reference
interpreter and the lowered kernels (on the Tile IR interpreter) against torch in
float64 on fresh random inputs, the adjoints against ``torch.autograd``, fusion, the PTX
through ptxas, and the kernels' argument reduction and polynomials instruction by
instruction in numpy: within 2 f32 ulps of the float64 sine and cosine over
``|x| <= 1e4`` (rotary angles reach thousands of radians), and beyond.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

import tessera as ts
from tessera.ir import graph as g
from tessera.passes.emit_ptx import emit_ptx
from tessera.passes.lower_tile_to_target import LowerTileToTargetPass
from tessera.passes.lower_tile_to_target.math_ops import (
    COS_F32,
    COS_F64,
    PIO2_F32,
    PIO2_F64,
    SIN_DOMAIN,
    SIN_F32,
    SIN_F64,
    SIN_FAST_F32,
    TWO_OVER_PI,
)
from tessera.passes.pipelines import default_context
from tessera.runtime import ptxas
from tessera.runtime.graph_interpreter import run_function
from tessera.runtime.tile_interpreter import run_host
from tests.passes.test_lower_graph_to_tile import context, lower


def _rng() -> np.random.Generator:
    return np.random.default_rng()  # fresh inputs each run


PROGRAM = """
func.func @f(%x: tensor<5x37xf32>, %y: tensor<9xf64>, %h: tensor<6xbf16>)
    -> (tensor<5x37xf32>, tensor<5x37xf32>, tensor<9xf64>, tensor<9xf64>, tensor<6xbf16>) {
  %s = tgraph.sin %x : (tensor<5x37xf32>) -> tensor<5x37xf32>
  %c = tgraph.cos %x : (tensor<5x37xf32>) -> tensor<5x37xf32>
  %sy = tgraph.sin %y : (tensor<9xf64>) -> tensor<9xf64>
  %cy = tgraph.cos %y : (tensor<9xf64>) -> tensor<9xf64>
  %ch = tgraph.cos %h : (tensor<6xbf16>) -> tensor<6xbf16>
  func.return %s, %c, %sy, %cy, %ch
      : tensor<5x37xf32>, tensor<5x37xf32>, tensor<9xf64>, tensor<9xf64>, tensor<6xbf16>
}
"""


def _parse(text: str):
    m = Parser(context(), text).parse_module()
    m.verify()
    return m


def _inputs() -> list[np.ndarray]:
    import ml_dtypes

    rng = _rng()
    x = (rng.uniform(-1, 1, (5, 37)) * 10.0 ** rng.uniform(-3, 4, (5, 37))).astype(np.float32)
    x[0, :4] = [0.0, -0.0, 3e5, -2e6]  # 3e5 and -2e6 take the f64 reduction
    y = rng.uniform(-1e4, 1e4, 9)
    h = rng.uniform(-50, 50, 6).astype(ml_dtypes.bfloat16)
    return [x, y, h]


def _want(x: np.ndarray, y: np.ndarray, h: np.ndarray) -> list[np.ndarray]:
    x64, h64 = x.astype(np.float64), h.astype(np.float64)
    return [np.sin(x64), np.cos(x64), np.sin(y), np.cos(y), np.cos(h64)]


# --------------------------------------------------------------------------- Graph IR


def test_round_trip_and_registration() -> None:
    m = _parse(PROGRAM)
    assert _parse(str(m)).is_structurally_equivalent(m)
    assert g.SinOp in g.GRAPH_OPS and g.CosOp in g.GRAPH_OPS
    assert g.SinOp in g.FUSIBLE_UNARY_OPS and g.CosOp in g.FUSIBLE_UNARY_OPS


@pytest.mark.parametrize(
    "text,message",
    [
        ("%r = tgraph.sin %x : (tensor<4xi32>) -> tensor<4xi32>",
         "tgraph.sin: needs a floating-point operand, got i32"),
        ("%r = tgraph.cos %x : (tensor<4xi32>) -> tensor<4xi32>",
         "tgraph.cos: needs a floating-point operand, got i32"),
    ],
)
def test_verifier_messages(text: str, message: str) -> None:
    src = f"func.func @f(%x: tensor<4xi32>) {{\n  {text}\n  func.return\n}}"
    with pytest.raises(VerifyException, match=message):
        _parse(src)


# --------------------------------------------------------------------------- front end


def test_front_end_dtypes_and_folding() -> None:
    @ts.jit
    def f(x: ts.Tensor[4, ts.f64], i: ts.Tensor[4, ts.i32]):
        return ts.sin(x), ts.cos(i)

    x = _rng().standard_normal(4)
    i = np.arange(4, dtype=np.int32) * 1000
    s, c = f(x, i)
    assert s.dtype == np.float64 and c.dtype == np.float32  # integers are taken as f32
    np.testing.assert_allclose(s, np.sin(x), rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(c, np.cos(i.astype(np.float32)), rtol=1e-6, atol=1e-6)
    assert ts.sin(0.5) == pytest.approx(math.sin(0.5))  # Python numbers fold at trace time
    assert ts.cos(0.5) == pytest.approx(math.cos(0.5))


def test_bad_argument_is_a_located_error() -> None:
    @ts.jit
    def f(x: ts.Tensor[3, ts.f32]):
        return ts.sin("a") + x

    with pytest.raises(ts.TesseraTypeError, match="sin: expected a tensor, got str"):
        f(np.zeros(3, np.float32))


def test_numpy_ufuncs_on_traced_tensors() -> None:
    @ts.jit
    def f(x: ts.Tensor[6, ts.f32]):
        return np.sin(x) * np.cos(x)

    x = _rng().uniform(-20, 20, 6).astype(np.float32)
    np.testing.assert_allclose(f(x), np.sin(x.astype(np.float64)) * np.cos(x.astype(np.float64)),
                               rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- execution


def test_interpreter_and_lowered_kernels_against_float64() -> None:
    ins = _inputs()
    want = _want(*ins)
    ref = run_function(_parse(PROGRAM), "f", [a.copy() for a in ins])
    got = run_host(lower(PROGRAM), "f", [a.copy() for a in ins])
    tol = [2e-7, 2e-7, 1e-15, 1e-15, 8e-3]  # absolute, results are at most 1
    for results in (ref, got):
        for r, w, t in zip(results, want, tol):
            np.testing.assert_allclose(r.astype(np.float64), w, rtol=0, atol=t)


def test_sin_cos_fuse_with_their_neighbours() -> None:
    @ts.jit
    def f(x: ts.Tensor[7, 9, ts.f32]):
        return ts.sin(x * 0.5) * ts.cos(x) + 1.0

    x = _rng().uniform(-100, 100, (7, 9)).astype(np.float32)
    ir = f.inspect_ir("graph")
    assert "tgraph.fused" in ir and "tgraph.sin" in ir and "tgraph.cos" in ir
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(f(x), np.sin(x64 * 0.5) * np.cos(x64) + 1.0, rtol=0, atol=1e-6)


def test_gradients_against_torch_autograd() -> None:
    x = _rng().uniform(-30, 30, (3, 5))

    def loss(x: ts.Tensor[3, 5, ts.f64]):
        return ts.sum(ts.sin(x) * ts.cos(x * 2.0) + ts.cos(ts.sin(x)))

    got = ts.grad(loss)(x)
    t = torch.from_numpy(x).requires_grad_()
    (torch.sin(t) * torch.cos(t * 2.0) + torch.cos(torch.sin(t))).sum().backward()
    np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_ptx_passes_ptxas() -> None:
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found (set TESSERA_PTXAS or install nvidia-cuda-nvcc)")
    m = lower(PROGRAM)
    LowerTileToTargetPass().apply(default_context(), m)
    ptx = emit_ptx(m)
    assert "sin.approx" not in ptx and "cos.approx" not in ptx
    assert "cvt.rni.f32.f32" in ptx and "cvt.rni.f64.f64" in ptx
    ptxas.check(ptx)


# --------------------------------------------------------------------------- the PTX's arithmetic


def _fma32(a, b, c) -> np.ndarray:
    """``fma.rn.f32``: the float64 product of two floats is exact."""
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(np.float32)


def _fma64(a, b, c) -> np.ndarray:
    """``fma.rn.f64``, exactly (rational arithmetic, one rounding)."""
    a, b, c = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (a, b, c)))
    out = [
        float(Fraction(p) * Fraction(q) + Fraction(r)) if np.isfinite([p, q, r]).all() else p * q + r
        for p, q, r in zip(a.ravel(), b.ravel(), c.ravel())
    ]
    return np.asarray(out, np.float64).reshape(a.shape)


def _horner(coeffs, t, fma, dt) -> np.ndarray:
    p = np.full_like(t, dt(coeffs[-1]))
    for c in reversed(coeffs[:-1]):
        p = fma(p, t, np.full_like(t, dt(c)))
    return p


def _reduce_f64(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    k = np.rint(x * TWO_OVER_PI)
    r = _fma64(-k, PIO2_F64[0], x)
    for c in PIO2_F64[1:]:
        r = _fma64(-k, c, r)
    m = _fma64(np.floor(k * 0.25), -4.0, k)
    return r, k, np.where(np.isfinite(m), m, 0).astype(np.int64)


def _finish(x, r, k, q, cos: bool, fma, dt) -> np.ndarray:
    r = np.where(k == 0, x, r)
    q = q + (1 if cos else 0)
    r2 = (r * r).astype(dt)
    s = fma((r2 * r).astype(dt), _horner(SIN_F32 if dt is np.float32 else SIN_F64, r2, fma, dt), r)
    c0 = fma(r2, dt(-0.5), dt(1.0))
    c = fma((r2 * r2).astype(dt), _horner(COS_F32 if dt is np.float32 else COS_F64, r2, fma, dt), c0)
    v = np.where(q & 1, c, s)
    v = np.where(q & 2, -v, v)
    if not cos:
        v = np.where(x == 0, x, v)
    return np.where(np.abs(x) > SIN_DOMAIN, dt(np.nan), v).astype(dt)


def _sin_cos_f32_as_lowered(x: np.ndarray, cos: bool) -> np.ndarray:
    """The instructions of ``math.sin`` / ``math.cos``'s f32 lowering, in numpy."""
    x = np.asarray(x, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        k = np.rint((np.float64(x) * np.float64(np.float32(TWO_OVER_PI))).astype(np.float32))
        r = _fma32(-k, np.float32(PIO2_F32[0]), x)
        for c in PIO2_F32[1:]:
            r = _fma32(-k, np.float32(c), r)
        q = np.where(np.isfinite(k), k, 0).astype(np.int64)
        big = np.abs(x) > SIN_FAST_F32
        if big.any():
            rd, _, m = _reduce_f64(x[big].astype(np.float64))
            r[big], q[big] = rd.astype(np.float32), m
        return _finish(x, r, k, q, cos, _fma32, np.float32)


def _sin_cos_f64_as_lowered(x: np.ndarray, cos: bool) -> np.ndarray:
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        r, k, q = _reduce_f64(x)
        return _finish(x, r, k, q, cos, _fma64, np.float64)


def _ulps(got: np.ndarray, want: np.ndarray, dt) -> float:
    ulp = np.spacing(np.abs(want).astype(dt)).astype(np.float64)
    return float(np.max(np.abs(got.astype(np.float64) - want) / ulp))


@pytest.mark.parametrize("cos", [False, True], ids=["sin", "cos"])
def test_f32_kernel_within_2_ulp(cos: bool) -> None:
    """Max error in f32 ulps of the result against float64 numpy: about 1.5 (torch's
    own f32 CPU result: 0.6), the same at 1e4 radians as near 0."""
    rng = _rng()
    x = np.concatenate([
        rng.uniform(-1e4, 1e4, 200_000),
        rng.uniform(-4, 4, 50_000),
        rng.uniform(-1, 1, 2_000) * 10.0 ** rng.uniform(-30, 0, 2_000),
        rng.uniform(-1e9, 1e9, 500),  # the f64 reduction
        [np.pi / 4, np.pi / 2, np.pi, 1e4 * np.pi, SIN_FAST_F32, 131073.0, 1e12],
    ]).astype(np.float32)
    fn = np.cos if cos else np.sin
    assert _ulps(_sin_cos_f32_as_lowered(x, cos), fn(x.astype(np.float64)), np.float32) <= 2.0


@pytest.mark.parametrize("cos", [False, True], ids=["sin", "cos"])
def test_f64_kernel_within_1_ulp(cos: bool) -> None:
    """The f64 kernel's reduction and polynomials against math.sin/cos rounded (measured:
    at most 1 f64 ulp)."""
    rng = _rng()
    x = np.concatenate([rng.uniform(-1e4, 1e4, 600), rng.uniform(-1e11, 1e11, 200),
                        rng.uniform(-1, 1, 200)])
    fn = math.cos if cos else math.sin
    want = np.array([fn(v) for v in x])  # glibc's sin/cos are correctly rounded or within 1 ulp
    assert _ulps(_sin_cos_f64_as_lowered(x, cos), want, np.float64) <= 2.0


def test_special_values() -> None:
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 2.0**41, -1e30, 1e-30])
    for dt, fn in ((np.float32, _sin_cos_f32_as_lowered), (np.float64, _sin_cos_f64_as_lowered)):
        s = fn(special.astype(dt), False)
        c = fn(special.astype(dt), True)
        assert s[0] == 0 and not np.signbit(s[0]) and s[1] == 0 and np.signbit(s[1])
        assert c[0] == 1 and c[1] == 1
        # NaN, the infinities and arguments beyond SIN_DOMAIN give NaN, never a number
        assert np.isnan(s[2:7]).all() and np.isnan(c[2:7]).all()
        assert s[7] == dt(1e-30) and c[7] == 1


def test_fused_kernels_with_reductions_pass_ptxas() -> None:
    """The f32 kernels branch to the f64 reduction: inside fused kernels with row
    reductions and a softmax (shuffles after the branch) the PTX still assembles."""
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found (set TESSERA_PTXAS or install nvidia-cuda-nvcc)")

    @ts.jit
    def f(x: ts.Tensor[64, 300, ts.f32], y: ts.Tensor[64, 300, ts.bf16]):
        return (ts.sum(ts.sin(x) * ts.cos(ts.cast(y, ts.f32)), 1),
                ts.softmax(ts.cos(x) * 3.0, axis=-1))

    ptx = f.inspect_ir("ptx")
    assert ptx.count("bra L_sincos_reduced") >= 3
    ptxas.check(ptx)


def test_cost_and_sharding_entries() -> None:
    from tessera.passes.shard_propagation import MeshInfo, Sharding, decide
    from tessera.profiler.costs import flops

    m = _parse(PROGRAM)
    s, c = [o for o in m.walk() if isinstance(o, g.SinOp | g.CosOp)][:2]
    assert flops(s) == flops(c) == 5 * 37
    dec = decide(s, [Sharding((("dp",), ()))], MeshInfo({"dp": 5, "tp": 37}))
    assert dec.results == [Sharding((("dp",), ()))]
