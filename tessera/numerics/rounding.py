"""Rounding float64 values into a storage format, nearest-even or stochastically.

All functions take float64 arrays holding the exact values to convert (every
Tessera float format and every integer up to 2**53 is exact in float64) and return
an array of the target numpy dtype. Rounding is a single correctly-rounded step
from the float64 value; see docs/NUMERICS.md for each format's overflow and NaN
rules.

Stochastic rounding takes one uint32 random word per element: a value ``x`` with
representable neighbours ``lo < x < hi`` goes to ``hi`` when
``word < (x - lo) / (hi - lo) * 2**32``, so it rounds up with probability
``(x - lo) / (hi - lo)`` (to within ``2**-32``) and the expected result is ``x``.
Rounding acts on magnitudes, so for negative values "up" means away from zero.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tessera.numerics.formats import OVERFLOW_SATURATE, float_format, is_narrow_float

_TWO32 = float(2**32)


def _round_up(
    a: np.ndarray, lo: np.ndarray, hi: np.ndarray, lo_is_odd: np.ndarray, u32: np.ndarray | None
) -> np.ndarray:
    """Whether each magnitude ``lo <= a < hi`` goes to ``hi`` (nearest-even or stochastic)."""
    inexact = a != lo
    if u32 is None:
        d_lo = a - lo
        d_hi = hi - a
        up = (d_hi < d_lo) | ((d_hi == d_lo) & lo_is_odd)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            p = np.minimum((a - lo) / (hi - lo), 1.0)
        up = u32.astype(np.float64) < p * _TWO32
    return up & inexact


def round_narrow_float(
    x: np.ndarray, np_dtype: np.dtype, *, saturate: bool = False, u32: np.ndarray | None = None
) -> np.ndarray:
    """Round float64 ``x`` to a float format of at most 16 bits, by its encoding table."""
    fmt = float_format(np.dtype(np_dtype))
    x = np.asarray(x, dtype=np.float64)
    shape = x.shape
    x = x.reshape(-1)
    mags = fmt.magnitudes
    n = len(mags)
    finite = np.isfinite(x)
    negative = np.signbit(x)
    a = np.where(finite, np.abs(x), 0.0)
    if saturate:
        a = np.minimum(a, fmt.max_finite)
    i = np.searchsorted(mags, a, side="right") - 1
    lo = mags[i]
    hi = np.where(i + 1 < n, mags[np.minimum(i + 1, n - 1)], fmt.max_finite + fmt.max_ulp)
    up = _round_up(a, lo, hi, (i & 1) == 1, None if u32 is None else u32.reshape(-1))
    enc = i + up
    if fmt.overflow == OVERFLOW_SATURATE:
        enc = np.minimum(enc, n - 1)
    # Otherwise encoding n is the first non-finite one: Inf (bf16, fp16, e5m2) or NaN (e4m3fn).
    enc = enc | np.where(negative, fmt.sign_bit, 0)
    out = fmt.from_encodings(enc)
    if not finite.all():
        special = x[~finite]
        if saturate:
            special = np.where(np.isinf(special), np.copysign(fmt.max_finite, special), special)
        with np.errstate(invalid="ignore", over="ignore"):
            out[~finite] = special.astype(np.float32).astype(fmt.np_dtype)
    return out.reshape(shape)


def _nextafter32(v: np.ndarray, toward: float) -> np.ndarray:
    return np.nextafter(v.astype(np.float32), np.float32(toward))


def round_float32(
    x: np.ndarray, *, saturate: bool = False, u32: np.ndarray | None = None
) -> np.ndarray:
    """Round float64 ``x`` to float32 (IEEE binary32: overflow to Inf unless ``saturate``)."""
    x = np.asarray(x, dtype=np.float64)
    fmax = float(np.finfo(np.float32).max)
    if saturate:
        x = np.clip(x, -fmax, fmax)
    if u32 is None:
        with np.errstate(over="ignore"):
            return x.astype(np.float32)
    finite = np.isfinite(x)
    a = np.where(finite, np.abs(x), 0.0)
    with np.errstate(over="ignore"):
        r = a.astype(np.float32)
    lo32 = np.where(r.astype(np.float64) > a, _nextafter32(r, 0.0), r)
    lo32 = np.where(np.isinf(lo32), np.float32(fmax), lo32)
    hi32 = _nextafter32(lo32, np.inf)
    lo = lo32.astype(np.float64)
    hi = np.where(np.isinf(hi32), 2.0**128, hi32.astype(np.float64))
    odd = (lo32.view(np.uint32) & 1) == 1
    up = _round_up(a, lo, hi, odd, u32.reshape(x.shape))
    mag = np.where(up, hi32, lo32)
    if saturate:
        mag = np.minimum(mag, np.float32(fmax))
    out = np.where(finite, np.copysign(mag, x).astype(np.float32), x.astype(np.float32))
    return out.astype(np.float32)


def round_float64(
    x: np.ndarray, *, saturate: bool = False, u32: np.ndarray | None = None
) -> np.ndarray:
    """float64 to float64: the identity, with ``saturate`` clamping Inf to the finite max."""
    x = np.array(x, dtype=np.float64)
    if saturate:
        fmax = float(np.finfo(np.float64).max)
        x = np.clip(x, -fmax, fmax)
    return x


def round_integer(
    x: np.ndarray, np_dtype: np.dtype, *, u32: np.ndarray | None = None
) -> np.ndarray:
    """Round float64 ``x`` to an integer dtype, clamping to its range; NaN becomes 0.

    This is the behaviour of PTX ``cvt.rni.sNN.f32`` (integer conversions always
    saturate), so it is the rule whether or not the policy says ``@saturate``.
    """
    dt = np.dtype(np_dtype)
    info = np.iinfo(dt)
    x = np.asarray(x, dtype=np.float64)
    nan = np.isnan(x)
    x = np.where(nan, 0.0, x)
    if u32 is None:
        r = np.rint(x)
    else:
        lo = np.floor(x)
        up = _round_up(x, lo, lo + 1.0, np.zeros(x.shape, bool), u32.reshape(x.shape))
        r = lo + up
    r = np.clip(r, float(info.min), float(info.max))
    if dt.itemsize == 8:
        # float(2**63 - 1) rounds to 2**63: clamp again after conversion.
        big = r >= 2.0**63
        out = np.where(big, 0, r).astype(dt)
        out[big] = info.max
        return out
    return r.astype(dt)


def round_to(
    x: np.ndarray, np_dtype: np.dtype, *, saturate: bool = False, u32: np.ndarray | None = None
) -> np.ndarray:
    """Round float64 ``x`` into ``np_dtype`` (any Tessera storage dtype)."""
    dt = np.dtype(np_dtype)
    if dt == np.bool_:
        return np.asarray(x) != 0
    if dt.kind in "iu":
        return round_integer(x, dt, u32=u32)
    if dt == np.float64:
        return round_float64(x, saturate=saturate)
    if dt == np.float32:
        return round_float32(x, saturate=saturate, u32=u32)
    if is_narrow_float(dt):
        return round_narrow_float(x, dt, saturate=saturate, u32=u32)
    raise TypeError(f"cannot round to {dt}")


def finfo(np_dtype: np.dtype) -> ml_dtypes.finfo:
    """Float limits of a numpy or ml_dtypes float type."""
    return ml_dtypes.finfo(np.dtype(np_dtype))
