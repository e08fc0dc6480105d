"""Exact descriptions of Tessera's narrow float formats, built from their bit patterns.

For every float format of at most 16 bits (bf16, fp16, fp8 e4m3/e5m2, fp6 e2m3/e3m2,
fp4 e2m1) a :class:`FloatFormat` lists the non-negative finite values in encoding
order (encoding ``i`` has value ``magnitudes[i]``; consecutive encodings are
consecutive values, so the parity of ``i`` is the parity of the last mantissa bit),
plus the sign bit, the largest finite value and what the format does on overflow.
The tables come from ml_dtypes / numpy by viewing each bit pattern as the format, so
they are exact by construction.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import ml_dtypes
import numpy as np

# What a rounded magnitude beyond the largest finite value becomes.
OVERFLOW_NAN = "nan"  # float8_e4m3fn: no infinity, overflow is NaN
OVERFLOW_INF = "inf"  # IEEE-like formats: bf16, fp16, float8_e5m2
OVERFLOW_SATURATE = "saturate"  # fp6 / fp4: no Inf or NaN; ml_dtypes clamps to +-max


@dataclass(frozen=True, eq=False)
class FloatFormat:
    """One narrow float format, described by its table of non-negative finite values."""

    np_dtype: np.dtype
    bits: int  # significant bits of the encoding (6 for fp6, 4 for fp4)
    container: np.dtype  # unsigned integer type holding one encoding
    magnitudes: np.ndarray  # float64, increasing; index == encoding
    overflow: str  # OVERFLOW_NAN, OVERFLOW_INF or OVERFLOW_SATURATE

    @property
    def sign_bit(self) -> int:
        """The sign bit of an encoding."""
        return 1 << (self.bits - 1)

    @property
    def max_finite(self) -> float:
        """The largest finite value."""
        return float(self.magnitudes[-1])

    @property
    def max_ulp(self) -> float:
        """The spacing of the binade holding the largest finite value.

        A virtual value ``max_finite + max_ulp`` (encoding ``len(magnitudes)``, odd
        or even as the encoding count says) stands for "overflowed" in rounding.
        """
        return float(self.magnitudes[-1] - self.magnitudes[-2])

    @property
    def has_nan(self) -> bool:
        return self.overflow != OVERFLOW_SATURATE

    def from_encodings(self, enc: np.ndarray) -> np.ndarray:
        """View integer encodings (sign bit included) as this format."""
        return enc.astype(self.container).view(self.np_dtype)


def _bits_of(dtype: np.dtype) -> int:
    name = dtype.name
    if name.startswith("float6"):
        return 6
    if name.startswith("float4"):
        return 4
    return dtype.itemsize * 8


@functools.cache
def float_format(np_dtype: np.dtype) -> FloatFormat:
    """The :class:`FloatFormat` of a float numpy / ml_dtypes dtype of at most 16 bits."""
    dt = np.dtype(np_dtype)
    if not is_narrow_float(dt):
        raise TypeError(f"no narrow float format for {dt}")
    bits = _bits_of(dt)
    container = np.dtype(np.uint8 if dt.itemsize == 1 else np.uint16)
    positive = np.arange(1 << (bits - 1), dtype=container)
    with np.errstate(invalid="ignore"):
        values = positive.view(dt).astype(np.float64)
    finite = np.isfinite(values)
    # Non-finite encodings (NaN, Inf) sit at the top of the positive range.
    n_finite = int(np.argmin(finite)) if not finite.all() else len(values)
    if not finite[:n_finite].all() or finite[n_finite:].any():
        raise TypeError(f"{dt}: non-finite encodings are not at the top of the range")
    mags = values[:n_finite]
    if not (np.diff(mags) > 0).all():
        raise TypeError(f"{dt}: encodings are not monotonic")
    if finite.all():
        overflow = OVERFLOW_SATURATE
    elif np.isinf(values[n_finite]):
        overflow = OVERFLOW_INF
    else:
        overflow = OVERFLOW_NAN
    mags.setflags(write=False)
    return FloatFormat(dt, bits, container, mags, overflow)


def _is_ml_float(dt: np.dtype) -> bool:
    try:
        ml_dtypes.finfo(dt)
    except (TypeError, ValueError):
        return False
    return True


def is_narrow_float(dt: np.dtype) -> bool:
    """True for float dtypes of at most 16 bits (handled through a :class:`FloatFormat`)."""
    dt = np.dtype(dt)
    if dt.itemsize > 2:
        return False
    return dt.kind == "f" or _is_ml_float(dt)
