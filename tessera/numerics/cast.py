"""``cast_array``: convert a numpy array to a numeric policy's storage dtype.

This is the one conversion routine of the CPU path: the reference interpreter,
constant folding and quantization all call it, so every conversion follows the
same rules (docs/NUMERICS.md):

1. the input is widened exactly to float64 (integers beyond 2**53 round once);
2. multiplied by ``policy.loss_scale`` when set;
3. rounded once to the storage dtype, nearest-even or (``@stochastic_round``)
   stochastically with Philox4x32-10 keyed by ``seed``, element ``i`` (C order)
   drawing counter ``offset + i``;
4. out-of-range values saturate to the finite max under ``@saturate``, otherwise
   follow the format's own overflow rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.ir.dtypes import DType
from tessera.ir.policy import NumericPolicy, as_policy
from tessera.numerics.formats import float_format, is_narrow_float
from tessera.numerics.philox import uniform_bits
from tessera.numerics.rounding import round_to

DEFAULT_SEED = 0


def to_float64(x: Any) -> np.ndarray:
    """``x`` as a float64 array (exact for every Tessera float format and small integers)."""
    arr = np.asarray(x)
    if arr.dtype.kind == "c":
        raise TypeError("cannot convert a complex array to a Tessera storage dtype")
    if arr.dtype.kind not in "biuf" and arr.dtype.kind != "V":
        raise TypeError(f"cannot convert an array of {arr.dtype} to a Tessera storage dtype")
    with np.errstate(invalid="ignore"):
        return arr.astype(np.float64)


def _exact_in_float32(dt: np.dtype) -> bool:
    """True when every value of ``dt`` is exactly a float32 (float <= 32 bits, int <= 16 bits)."""
    if dt.kind in "iub":
        return dt.itemsize <= 2
    return dt.kind in "fV" and dt.itemsize <= 4


def _nearest_from_float32(arr: np.ndarray, target: np.dtype, saturate: bool) -> np.ndarray | None:
    """Nearest-even from float32-exact values to a narrow float: ml_dtypes' (or numpy's) cast.

    For float32 inputs ml_dtypes rounds once, correctly (the tests check it against
    the table-based :func:`round_narrow_float` on every boundary case), so this is
    the same result as the general path, much faster. Returns None for other targets.
    """
    if not is_narrow_float(target):
        return None
    x32 = arr.astype(np.float32)
    if saturate:
        fmax = np.float32(float_format(target).max_finite)
        x32 = np.clip(x32, -fmax, fmax)
    with np.errstate(over="ignore", invalid="ignore"):
        return x32.astype(target)


def cast_array(
    x: np.ndarray,
    policy: NumericPolicy | DType,
    seed: int | None = None,
    offset: int = 0,
) -> np.ndarray:
    """Convert ``x`` to ``policy``'s storage dtype with its scaling, rounding and saturation.

    ``policy`` may be a :class:`NumericPolicy`, a :class:`DType` or any spelling
    ``dtype_of`` accepts. ``seed`` (default 0) and ``offset`` select the random
    stream of stochastic rounding; they are ignored for nearest-even rounding.
    Returns a new array of ``policy.storage.np_dtype`` with the shape of ``x``.
    """
    p = as_policy(policy)
    target = p.storage.np_dtype
    arr = np.asarray(x)
    if arr.dtype == target and p.loss_scale is None and not p.saturate:
        return arr.copy()
    if p.rounding != "stochastic" and p.loss_scale is None and _exact_in_float32(arr.dtype):
        fast = _nearest_from_float32(arr, target, p.saturate)
        if fast is not None:
            return fast
    x64 = to_float64(arr)
    if p.loss_scale is not None:
        x64 = x64 * p.loss_scale
    u32 = None
    if p.rounding == "stochastic" and target.kind != "b" and target != np.float64:
        seed = DEFAULT_SEED if seed is None else seed
        u32 = uniform_bits(x64.size, seed, offset).reshape(x64.shape)
    out = round_to(x64, target, saturate=p.saturate, u32=u32)
    return np.asarray(out, dtype=target).reshape(arr.shape)
