"""Packing fp4 and fp6 values into bytes, and back.

ml_dtypes stores one fp4 / fp6 value per byte (the code in the low bits). In
memory, and in the GPU kernels that dequantize them, the codes are packed along
the last axis as a little-endian bit stream:

* fp4 (e2m1): two codes per byte; element ``2j`` in bits 0-3 of byte ``j``,
  element ``2j + 1`` in bits 4-7.
* fp6 (e2m3 or e3m2): four codes per three bytes; element ``4j + k`` occupies
  bits ``6k .. 6k + 5`` of the 24-bit little-endian word made of bytes
  ``3j, 3j + 1, 3j + 2``.

A last axis that is not a multiple of the group size is padded with code 0
(+0.0); ``unpack_*`` takes the unpadded length back (default: all packed slots).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from tessera.ir.dtypes import DType, dtype_of

FP4 = np.dtype(ml_dtypes.float4_e2m1fn)
FP6 = (np.dtype(ml_dtypes.float6_e2m3fn), np.dtype(ml_dtypes.float6_e3m2fn))


def _codes(x: np.ndarray, allowed: tuple[np.dtype, ...], what: str) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype not in allowed:
        raise TypeError(
            f"{what} takes an array of {' or '.join(d.name for d in allowed)}, got {x.dtype}; "
            "convert first with tessera.numerics.cast_array"
        )
    if x.ndim == 0:
        raise ValueError(f"{what} needs at least one axis to pack along")
    return x.view(np.uint8)


def _pad_last(codes: np.ndarray, group: int) -> np.ndarray:
    extra = (-codes.shape[-1]) % group
    if extra:
        pad = [(0, 0)] * (codes.ndim - 1) + [(0, extra)]
        codes = np.pad(codes, pad)
    return codes


def _check_count(n: int | None, slots: int, what: str) -> int:
    if n is None:
        return slots
    if not 0 <= n <= slots or slots - n >= (4 if what == "unpack_fp6" else 2):
        raise ValueError(f"{what}: {n} values do not fit {slots} packed slots")
    return n


def pack_fp4(x: np.ndarray) -> np.ndarray:
    """Pack a float4_e2m1fn array two codes per byte along its last axis (uint8 result)."""
    codes = _pad_last(_codes(x, (FP4,), "pack_fp4") & 0x0F, 2)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def unpack_fp4(packed: np.ndarray, n: int | None = None) -> np.ndarray:
    """Unpack bytes made by :func:`pack_fp4` into ``n`` float4_e2m1fn values per row."""
    p = np.asarray(packed)
    if p.dtype != np.uint8:
        raise TypeError(f"unpack_fp4 takes a uint8 array, got {p.dtype}")
    slots = 2 * p.shape[-1]
    n = _check_count(n, slots, "unpack_fp4")
    codes = np.empty(p.shape[:-1] + (slots,), dtype=np.uint8)
    codes[..., 0::2] = p & 0x0F
    codes[..., 1::2] = p >> 4
    return codes[..., :n].view(FP4)


def pack_fp6(x: np.ndarray) -> np.ndarray:
    """Pack a float6 (e2m3 or e3m2) array four codes per three bytes along its last axis."""
    codes = _pad_last(_codes(x, FP6, "pack_fp6") & 0x3F, 4).astype(np.uint32)
    word = codes[..., 0::4] | codes[..., 1::4] << 6 | codes[..., 2::4] << 12 | codes[..., 3::4] << 18
    out = np.empty(word.shape[:-1] + (3 * word.shape[-1],), dtype=np.uint8)
    out[..., 0::3] = word & 0xFF
    out[..., 1::3] = (word >> 8) & 0xFF
    out[..., 2::3] = word >> 16
    return out


def unpack_fp6(packed: np.ndarray, n: int | None = None, dtype: Any = None) -> np.ndarray:
    """Unpack bytes made by :func:`pack_fp6` into ``n`` float6 values per row.

    ``dtype`` picks the format (``ts.fp6_e2m3``, the default, or ``ts.fp6_e3m2``).
    """
    target = FP6[0] if dtype is None else _fp6_dtype(dtype)
    p = np.asarray(packed)
    if p.dtype != np.uint8:
        raise TypeError(f"unpack_fp6 takes a uint8 array, got {p.dtype}")
    if p.shape[-1] % 3:
        raise ValueError(f"unpack_fp6: last axis has {p.shape[-1]} bytes, not a multiple of 3")
    b = p.astype(np.uint32)
    word = b[..., 0::3] | b[..., 1::3] << 8 | b[..., 2::3] << 16
    slots = 4 * word.shape[-1]
    n = _check_count(n, slots, "unpack_fp6")
    codes = np.empty(p.shape[:-1] + (slots,), dtype=np.uint8)
    for k in range(4):
        codes[..., k::4] = (word >> (6 * k)) & 0x3F
    return codes[..., :n].view(target)


def _fp6_dtype(dtype: Any) -> np.dtype:
    d = dtype if isinstance(dtype, DType) else dtype_of(dtype, where="unpack_fp6")
    if d.np_dtype not in FP6:
        raise TypeError(f"unpack_fp6: {d!r} is not an fp6 format (fp6_e2m3 or fp6_e3m2)")
    return d.np_dtype


def packed_nbytes(n: int, bits: int) -> int:
    """Bytes needed for a row of ``n`` values of ``bits`` (4 or 6) once packed."""
    if bits == 4:
        return (n + 1) // 2
    if bits == 6:
        return 3 * ((n + 3) // 4)
    raise ValueError(f"no packing for {bits}-bit values")
