"""Independent float64 references for the numerics tests (exact rational arithmetic)."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np

import tessera as ts

NARROW_FLOATS = (ts.bf16, ts.fp16, ts.fp8_e4m3, ts.fp8_e5m2, ts.fp6_e2m3, ts.fp6_e3m2, ts.fp4_e2m1)
SMALL_FLOATS = (ts.fp8_e4m3, ts.fp8_e5m2, ts.fp6_e2m3, ts.fp6_e3m2, ts.fp4_e2m1)

# What each format does with a magnitude that rounds beyond its largest finite value.
OVERFLOW = {
    "bf16": "inf", "fp16": "inf", "fp8_e5m2": "inf", "fp8_e4m3": "nan",
    "fp6_e2m3": "max", "fp6_e3m2": "max", "fp4_e2m1": "max",
}


def finfo(d: ts.DType) -> ml_dtypes.finfo:
    return ml_dtypes.finfo(d.np_dtype)


def all_codes(d: ts.DType) -> np.ndarray:
    """Every encoding of ``d`` as an array of ``d`` (2**bits values)."""
    container = np.uint8 if d.np_dtype.itemsize == 1 else np.uint16
    return np.arange(1 << d.bits, dtype=np.uint32).astype(container).view(d.np_dtype)


def codes_of(a: np.ndarray) -> np.ndarray:
    """The encodings of an array of a <=16-bit format, as uint32."""
    a = np.asarray(a)
    return a.view(np.uint8 if a.itemsize == 1 else np.uint16).astype(np.uint32)


def grid_round(v: float, d: ts.DType, mode: str = "nearest") -> tuple[Fraction, Fraction]:
    """Magnitude neighbours ``lo <= |v| <= hi`` on the format's grid, ignoring the max.

    The grid has ``nmant`` fraction bits in each binade and fixed spacing below
    the smallest normal (subnormals), as for IEEE formats.
    """
    fi = finfo(d)
    a = Fraction(abs(v))
    if a == 0:
        return Fraction(0), Fraction(0)
    _, e2 = math.frexp(abs(v))
    q = max(e2 - 1, int(fi.minexp))
    ulp = Fraction(2) ** (q - int(fi.nmant))
    n = a / ulp
    fl = math.floor(n)
    lo = fl * ulp
    hi = lo if lo == a else (fl + 1) * ulp
    return lo, hi


def ref_nearest(v: float, d: ts.DType, saturate: bool = False) -> float:
    """Round-to-nearest-even of the float64 ``v`` into ``d``, with the format's overflow rule."""
    if math.isnan(v):
        return math.nan
    fi = finfo(d)
    fmax = float(fi.max)
    if math.isinf(v):
        if saturate or OVERFLOW[d.name] == "max":
            return math.copysign(fmax, v)
        return v if OVERFLOW[d.name] == "inf" else math.nan
    lo, hi = grid_round(v, d)
    a = Fraction(abs(v))
    if lo == hi:
        r = lo
    else:
        ulp = hi - lo
        fl = lo / ulp
        d_lo, d_hi = a - lo, hi - a
        r = hi if d_hi < d_lo or (d_hi == d_lo and fl % 2 == 1) else lo
    if r > Fraction(fmax):
        if saturate or OVERFLOW[d.name] == "max":
            r = Fraction(fmax)
        elif OVERFLOW[d.name] == "inf":
            return math.copysign(math.inf, v)
        else:
            return math.copysign(math.nan, v)
    return math.copysign(float(r), v)


def test_reference_agrees_with_ml_dtypes_on_float32_inputs() -> None:
    """The rational reference itself, checked where ml_dtypes rounds once (float32 inputs)."""
    rng = np.random.default_rng(11)
    for d in NARROW_FLOATS:
        fi = finfo(d)
        lo = math.log2(float(fi.smallest_subnormal)) - 1
        hi = math.log2(float(fi.max)) + 0.5
        with np.errstate(over="ignore"):
            x = (2.0 ** rng.uniform(lo, hi, 400) * rng.choice([-1.0, 1.0], 400)).astype(np.float32)
            want = x.astype(d.np_dtype).astype(np.float64)
        got = np.array([ref_nearest(float(t), d) for t in x])
        assert np.array_equal(got, want, equal_nan=True), d
