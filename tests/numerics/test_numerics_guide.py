"""The guide's numerics examples (mixed_precision_gemm, numerically_stable_softmax) on the CPU
path of ``ts.jit``, checked against float64 references with bounds from the formats' epsilons."""


import importlib.util
from pathlib import Path
from types import ModuleType

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera import accum
from tessera.frontend.errors import TesseraTypeError
from tessera.numerics import cast_array

U32 = 2.0**-24  # unit roundoff of float32
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` (the front end's copy of a guide example)."""
    path = EXAMPLES / f"{name}.py"
    if not path.exists():
        pytest.skip(f"examples/{name}.py is missing")
    spec = importlib.util.spec_from_file_location(f"guide_example_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def unit_roundoff(d: ts.DType) -> float:
    return float(ml_dtypes.finfo(d.np_dtype).eps) / 2


def underflow_error(d: ts.DType) -> float:
    """Largest absolute rounding error below the smallest normal: half a subnormal step."""
    return float(ml_dtypes.finfo(d.np_dtype).smallest_subnormal) / 2


def make_gemm(d: ts.DType):  # noqa: ANN201 - a jitted function
    @ts.jit
    def mixed_precision_gemm(
        A: ts.Tensor["M", "K", d @ accum(ts.f32)],  # noqa: N803, F821
        B: ts.Tensor["K", "N", d @ accum(ts.f32)],  # noqa: N803, F821
    ) -> ts.Tensor["M", "N", ts.f32]:  # noqa: F821
        """Narrow inputs, FP32 accumulation and output."""
        return ts.gemm(A, B)

    return mixed_precision_gemm


@pytest.mark.parametrize(
    ("d", "spread"),
    [(ts.fp8_e4m3, 1.0), (ts.fp8_e5m2, 1.0), (ts.fp6_e2m3, 0.5), (ts.fp6_e3m2, 1.0),
     (ts.bf16, 1.0)],
    ids=lambda v: getattr(v, "name", str(v)),
)
def test_mixed_precision_gemm_error_bound(d: ts.DType, spread: float) -> None:
    check_gemm(make_gemm(d), d, spread)


def test_guide_example_mixed_precision_gemm() -> None:
    check_gemm(load_example("mixed_precision_gemm").mixed_precision_gemm, ts.fp8_e4m3, 1.0)


def check_gemm(gemm: ts.CompiledFunction, d: ts.DType, spread: float) -> None:
    """Run ``gemm`` on inputs rounded to ``d`` and check it against float64 references."""
    m, k, n = 24, 64, 16
    rng = np.random.default_rng(17)
    a = rng.standard_normal((m, k)) * spread
    b = rng.standard_normal((k, n)) * spread
    a_q, b_q = cast_array(a, d), cast_array(b, d)
    c = gemm(a_q, b_q)
    assert c.dtype == np.float32 and c.shape == (m, n)
    a_h, b_h = a_q.astype(np.float64), b_q.astype(np.float64)
    assert np.isfinite(a_h).all() and np.isfinite(b_h).all()

    # 1. Accumulation: f32 sums of exact products, |error| <= gamma_K |A^||B^| + u32 |C|.
    exact = a_h @ b_h
    gamma = k * U32 / (1 - k * U32)
    acc_bound = gamma * (np.abs(a_h) @ np.abs(b_h)) + U32 * np.abs(exact)
    assert (np.abs(c - exact) <= acc_bound).all()

    # 2. Against the unrounded float64 product: each input rounding contributes
    #    |x^ - x| <= u |x| + eta (u = eps/2 of the format, eta = half a subnormal step).
    u, eta = unit_roundoff(d), underflow_error(d)
    ref = a @ b
    in_bound = (u * np.abs(a) + eta) @ np.abs(b_h) + np.abs(a) @ (u * np.abs(b) + eta)
    err = np.abs(c - ref)
    assert (err <= in_bound + acc_bound).all()
    # The inputs really were rounded: the error is far above what f32 alone would give.
    assert err.max() > 100 * acc_bound.max()


def test_gemm_rejects_unconverted_inputs() -> None:
    a = np.ones((2, 2), np.float32)
    with pytest.raises(TesseraTypeError, match="convert it before the call"):
        make_gemm(ts.fp8_e4m3)(a, a)


@ts.jit
def numerically_stable_softmax(
    x: ts.Tensor["B", "S", ts.bf16],  # noqa: F821
) -> ts.Tensor["B", "S", ts.bf16]:  # noqa: F821
    """Numerically stable softmax with explicit precision control."""
    x_f32 = ts.cast(x, ts.f32)
    x_max = ts.max(x_f32, axis=-1, keepdims=True)
    exp_x = ts.exp(x_f32 - x_max)
    sum_exp = ts.sum(exp_x, axis=-1, keepdims=True)
    softmax = exp_x / (sum_exp + 1e-10)
    return ts.cast(softmax, ts.bf16)


@pytest.mark.parametrize("source", ["test", "example"])
@pytest.mark.parametrize("scale", [1.0, 30.0, 1e4])
def test_numerically_stable_softmax_error_bound(scale: float, source: str) -> None:
    """bf16 output of an f32 computation: |y - ref| <= (u_bf16 + c S u32) ref + bf16 underflow."""
    softmax = (
        numerically_stable_softmax
        if source == "test"
        else load_example("stable_softmax").numerically_stable_softmax
    )
    b, s = 6, 96
    rng = np.random.default_rng(3)
    x = cast_array(rng.standard_normal((b, s)) * scale, ts.bf16)  # large scales: no overflow
    y = softmax(x)
    assert y.dtype == ts.bf16.np_dtype and y.shape == (b, s)
    xf = x.astype(np.float64)
    z = np.exp(xf - xf.max(axis=-1, keepdims=True))
    ref = z / z.sum(axis=-1, keepdims=True)
    yh = y.astype(np.float64)
    assert np.isfinite(yh).all()
    # f32: exp (a few ulps), the subtraction, the S-term sum and the division; +1e-10 is
    # relative 1e-10 at most since the sum is >= 1.
    f32_rel = (s + 8) * U32 + 1e-10
    bound = (unit_roundoff(ts.bf16) + f32_rel) * ref + underflow_error(ts.bf16) + 1e-45
    assert (np.abs(yh - ref) <= bound).all()
    # Rows sum to one within the output rounding.
    assert np.allclose(yh.sum(axis=-1), 1.0, atol=s * unit_roundoff(ts.bf16))
    if scale == 1.0:
        # The result really is bf16: some element sits well away from the f32 value.
        assert (np.abs(yh - ref) > 2.0**-12 * ref).any()


def test_stochastic_cast_in_jit_matches_cast_array() -> None:
    @ts.jit
    def to_bf16_sr(
        x: ts.Tensor["N", ts.f32],  # noqa: F821
    ) -> ts.Tensor["N", ts.bf16 @ ts.stochastic_round]:  # noqa: F821
        return ts.cast(x, ts.bf16 @ ts.stochastic_round, seed=11)

    x = np.full(20_000, 1.0 + 2.0**-9, dtype=np.float32)  # a quarter of the bf16 step above 1
    y = to_bf16_sr(x)
    assert np.array_equal(
        y.view(np.uint16), cast_array(x, ts.bf16 @ ts.stochastic_round, seed=11).view(np.uint16)
    )
    assert np.array_equal(y.view(np.uint16), to_bf16_sr(x).view(np.uint16))
    ups = (y.astype(np.float64) > 1.0).mean()
    assert abs(ups - 0.25) < 5 * np.sqrt(0.25 * 0.75 / x.size)
