"""cast_array's nearest-even rounding against ml_dtypes and an exact rational reference."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.numerics import cast_array
from tessera.numerics.rounding import round_narrow_float
from tests.numerics.test_numerics_reference import (
    NARROW_FLOATS,
    SMALL_FLOATS,
    all_codes,
    codes_of,
    finfo,
    grid_round,
    ref_nearest,
)


def ml_cast(x: np.ndarray, d: ts.DType) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(x).astype(d.np_dtype)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal encodings, except that any two NaNs (payloads are not significant) compare equal."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    with np.errstate(invalid="ignore"):
        nan_a = np.isnan(a.astype(np.float32))
        nan_b = np.isnan(b.astype(np.float32))
    same = codes_of(a) == codes_of(b)
    return bool(np.array_equal(nan_a, nan_b) and (same | nan_a).all())


@pytest.mark.parametrize("d", NARROW_FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("src", [np.float32, np.float64])
def test_every_encoding_round_trips(d: ts.DType, src: type) -> None:
    """Each of the 2**bits encodings, widened and cast back, keeps its exact bits."""
    codes = all_codes(d)
    with np.errstate(invalid="ignore", over="ignore"):
        wide = codes.astype(src)
    out = cast_array(wide, d)
    finite = np.isfinite(wide)
    assert np.array_equal(codes_of(out)[finite], codes_of(codes)[finite])
    # Non-finite encodings (Inf, NaN) come back exactly as ml_dtypes converts them.
    with np.errstate(invalid="ignore"):
        assert same_bits(out[~finite], ml_cast(wide[~finite].astype(np.float32), d))


def _boundary_values(d: ts.DType) -> np.ndarray:
    """Representable values, midpoints between neighbours, and their float32 neighbours."""
    codes = all_codes(d)
    with np.errstate(invalid="ignore"):
        v = np.unique(codes.astype(np.float64))
    v = v[np.isfinite(v)]
    mids = (v[:-1] + v[1:]) / 2
    fi = finfo(d)
    fmax = float(fi.max)
    top_ulp = fmax - float(np.sort(np.abs(v))[-2])
    extra = np.array(
        [fmax + top_ulp / 2, fmax + top_ulp, 2 * fmax, 1e30, float(fi.smallest_subnormal) / 2]
    )
    with np.errstate(over="ignore"):
        pts = np.concatenate([v, mids, extra, -extra]).astype(np.float32)
    up = np.nextafter(pts, np.float32(np.inf))
    down = np.nextafter(pts, np.float32(-np.inf))
    return np.concatenate([pts, up, down, [np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0]]).astype(
        np.float32
    )


@pytest.mark.parametrize("d", NARROW_FLOATS, ids=lambda d: d.name)
def test_float32_inputs_match_ml_dtypes_bitwise(d: ts.DType) -> None:
    """Ties, values just around them, overflow boundaries, Inf and NaN: same bits as ml_dtypes.

    Both paths: cast_array (which uses ml_dtypes' cast for float32 inputs) and the
    table-based rounding it uses for float64 inputs and stochastic rounding.
    """
    x = _boundary_values(d)
    assert same_bits(cast_array(x, d), ml_cast(x, d))
    with np.errstate(invalid="ignore"):  # float32 signalling NaNs set "invalid" when widened
        x64 = x.astype(np.float64)
    assert same_bits(round_narrow_float(x64, d.np_dtype), ml_cast(x, d))
    # Saturation, both paths: clamp first, then the same rounding.
    fmax = np.float32(finfo(d).max)
    clamped = ml_cast(np.clip(x, -fmax, fmax), d)
    assert same_bits(cast_array(x, d @ ts.saturate), clamped)
    assert same_bits(
        round_narrow_float(x64, d.np_dtype, saturate=True), clamped
    )


@pytest.mark.parametrize("d", NARROW_FLOATS, ids=lambda d: d.name)
def test_random_float32_bit_patterns_match_ml_dtypes(d: ts.DType) -> None:
    rng = np.random.default_rng(1234)
    x = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    assert same_bits(cast_array(x, d), ml_cast(x, d))
    with np.errstate(invalid="ignore"):  # float32 signalling NaNs set "invalid" when widened
        x64 = x.astype(np.float64)
    assert same_bits(round_narrow_float(x64, d.np_dtype), ml_cast(x, d))


@pytest.mark.parametrize("d", NARROW_FLOATS, ids=lambda d: d.name)
def test_float64_inputs_are_rounded_once(d: ts.DType) -> None:
    """float64 values are rounded directly (no detour through float32), per the exact reference."""
    rng = np.random.default_rng(7)
    fi = finfo(d)
    lo_exp = math.log2(float(fi.smallest_subnormal)) - 2
    hi_exp = math.log2(float(fi.max)) + 1
    mags = 2.0 ** rng.uniform(lo_exp, hi_exp, 3000)
    signs = rng.choice([-1.0, 1.0], 3000)
    # Midpoints nudged by far less than a float32 ulp: the cases double rounding gets wrong.
    v = all_codes(d).astype(np.float64) if d.bits <= 8 else np.array([1.0, 3.0])
    v = np.unique(v[np.isfinite(v)])
    mids = (v[:-1] + v[1:]) / 2
    nudged = np.concatenate([mids * (1 + 2.0**-40), mids * (1 - 2.0**-40)])
    x = np.concatenate([mags * signs, nudged, -nudged])
    out = cast_array(x, d).astype(np.float64)
    ref = np.array([ref_nearest(float(t), d) for t in x])
    assert np.array_equal(out, ref, equal_nan=True)
    assert np.array_equal(np.signbit(out), np.signbit(ref))


def test_float64_just_above_a_midpoint_rounds_once() -> None:
    """1 + 2**-4 + 2**-40 lies above the e4m3 midpoint 1.0625: it rounds up to 1.125.

    Through float32 it would become the tie 1.0625 and round to even (1.0), as
    ml_dtypes before 0.7 converted float64; Tessera rounds the exact value once.
    """
    x = np.array([1 + 2**-4 + 2**-40])
    assert cast_array(x, ts.fp8_e4m3).astype(np.float64)[0] == 1.125
    via_f32 = x.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)[0]
    assert via_f32 == 1.0  # the double rounding this avoids


@pytest.mark.parametrize(
    ("d", "x", "expect"),
    [
        (ts.fp8_e4m3, 464.0, 448.0),  # tie between 448 and the (NaN) next code: to even, 448
        (ts.fp8_e4m3, 464.001, math.nan),
        (ts.fp8_e4m3, math.inf, math.nan),
        (ts.fp8_e5m2, 61439.0, 57344.0),
        (ts.fp8_e5m2, 61440.0, math.inf),  # tie: 57344 has an odd code, goes to Inf
        (ts.fp16, 65519.0, 65504.0),
        (ts.fp16, 65520.0, math.inf),
        (ts.bf16, 3.39e38, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)),
        (ts.bf16, 3.4e38, math.inf),  # above max + ulp/2 = 3.3961e38
        (ts.fp6_e2m3, 7.75, 7.5),
        (ts.fp6_e2m3, 1e9, 7.5),
        (ts.fp6_e2m3, -math.inf, -7.5),
        (ts.fp6_e3m2, 30.0, 28.0),
        (ts.fp4_e2m1, 5.0, 4.0),  # tie between 4 (even code) and 6
        (ts.fp4_e2m1, 7.0, 6.0),
        (ts.fp4_e2m1, 0.25, 0.0),  # tie between 0 and 0.5: to even, 0
        (ts.fp4_e2m1, 0.2500001, 0.5),
    ],
)
def test_overflow_and_tie_rules(d: ts.DType, x: float, expect: float) -> None:
    for sign in (1.0, -1.0):
        got = float(cast_array(np.array([sign * x]), d).astype(np.float64)[0])
        want = sign * expect
        if math.isnan(want):
            assert math.isnan(got)
        else:
            assert got == want and math.copysign(1, got) == math.copysign(1, want)
        assert got == pytest.approx(ref_nearest(sign * x, d), nan_ok=True)


@pytest.mark.parametrize("d", NARROW_FLOATS, ids=lambda d: d.name)
def test_saturate_clamps_to_finite_max(d: ts.DType) -> None:
    fmax = float(finfo(d).max)
    x = np.array([fmax * 1.01, fmax * 4, fmax * 1.5, np.inf, -np.inf, -fmax * 3, 1.0, np.nan])
    out = cast_array(x, d @ ts.saturate).astype(np.float64)
    assert np.array_equal(out[:6], [fmax, fmax, fmax, fmax, -fmax, -fmax])
    assert out[6] == 1.0
    # NaN stays NaN where the format has one; fp6/fp4 have none and follow ml_dtypes.
    assert same_bits(cast_array(x[7:], d @ ts.saturate), ml_cast(x[7:].astype(np.float32), d))


@pytest.mark.parametrize("d", SMALL_FLOATS, ids=lambda d: d.name)
def test_nan_to_formats_without_nan_follows_ml_dtypes(d: ts.DType) -> None:
    x = np.array([np.nan, -np.nan], dtype=np.float32)
    assert same_bits(cast_array(x, d), ml_cast(x, d))


def test_int8_rounds_to_nearest_even_and_clamps() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 126.5, 127.5, 300.0, -128.5, -1e9, np.nan, np.inf])
    out = cast_array(x, ts.int8)
    assert out.dtype == np.int8
    assert out.tolist() == [0, 2, 2, 0, -2, 126, 127, 127, -128, -128, 0, 127]


def test_integer_inputs_convert_exactly_then_round() -> None:
    x = np.array([3, 17, -17, 1000, 2**40], dtype=np.int64)
    out = cast_array(x, ts.fp8_e4m3).astype(np.float64)
    # 17 is a tie between 16 and 18 (spacing 2): to the even code, 16.
    assert out.tolist()[:3] == [3.0, 16.0, -16.0]
    assert math.isnan(out[3]) and math.isnan(out[4])
    assert cast_array(np.array([True, False]), ts.bf16).astype(np.float64).tolist() == [1.0, 0.0]


def test_float32_and_float64_targets() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal(1000) * 10.0 ** rng.integers(-50, 50, 1000)
    with np.errstate(over="ignore"):
        assert np.array_equal(cast_array(x, ts.f32), x.astype(np.float32))
    big = np.array([1e39, -1e39, np.inf])
    assert np.isinf(cast_array(big, ts.f32)).all()
    fmax32 = np.finfo(np.float32).max
    assert np.array_equal(cast_array(big, ts.f32 @ ts.saturate), [fmax32, -fmax32, fmax32])
    assert np.array_equal(cast_array(x, ts.f64), x)


@pytest.mark.parametrize("d", [ts.fp8_e4m3, ts.fp6_e3m2], ids=lambda d: d.name)
def test_loss_scale_multiplies_before_rounding(d: ts.DType) -> None:
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(500) * 0.01).astype(np.float32)
    scaled = cast_array(x, d @ ts.loss_scale(128.0))
    assert same_bits(scaled, cast_array(x.astype(np.float64) * 128.0, d))
    # With a loss scale the tiny values keep more significant bits.
    err_scaled = np.abs(scaled.astype(np.float64) / 128.0 - x).mean()
    err_plain = np.abs(cast_array(x, d).astype(np.float64) - x).mean()
    assert err_scaled < err_plain


def test_shapes_dtypes_and_policies() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
    for d in NARROW_FLOATS + (ts.int8, ts.f32, ts.int32, ts.bool_):
        out = cast_array(x, d)
        assert out.shape == x.shape and out.dtype == d.np_dtype
    assert cast_array(np.float32(2.5), ts.fp4).shape == ()
    p = ts.fp8_e4m3 @ ts.accum(ts.f32)
    assert same_bits(cast_array(x, p), cast_array(x, ts.fp8_e4m3))
    assert same_bits(cast_array(x, "bf16"), ml_cast(x, ts.bf16))
    with pytest.raises(TypeError):
        cast_array(np.array([1 + 2j]), ts.bf16)


def test_cast_between_narrow_formats() -> None:
    """fp8 -> fp4 rounds the exact fp8 value once, like ml_dtypes does through float32."""
    codes = all_codes(ts.fp8_e5m2)
    assert same_bits(cast_array(codes, ts.fp4), ml_cast(codes.astype(np.float32), ts.fp4))
    assert same_bits(cast_array(codes, ts.fp8_e5m2), codes)


@settings(max_examples=100, deadline=None)
@given(v=st.floats(allow_nan=False, allow_infinity=False, width=64), seed=st.integers(0, 2**64 - 1))
def test_any_float64_rounds_like_the_reference(v: float, seed: int) -> None:
    """Property: for every format, nearest-even equals the exact reference, and stochastic
    rounding lands on one of the two reference neighbours (or overflows like nearest does)."""
    for d in NARROW_FLOATS:
        got = float(cast_array(np.array([v]), d).astype(np.float64)[0])
        want = ref_nearest(v, d)
        assert got == want or (math.isnan(got) and math.isnan(want))
        sr = float(cast_array(np.array([v]), d @ ts.stochastic_round, seed=seed)[0])
        lo, hi = grid_round(v, d)
        fmax = Fraction(float(finfo(d).max))
        if not math.isfinite(sr):
            # Only values whose upper neighbour lies beyond the finite range overflow.
            assert hi > fmax
        elif hi <= fmax:
            assert Fraction(abs(sr)) in (lo, hi)
        else:
            # Beyond the finite range: max (fp6 / fp4 saturate), or lo when it is finite.
            assert Fraction(abs(sr)) in (min(lo, fmax), fmax)
