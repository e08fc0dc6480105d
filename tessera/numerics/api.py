"""``ts.round`` and ``ts.abs``: numpy values eagerly, traced tensors through Graph IR."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from tessera.numerics import eager


def _is_numpy_value(x: Any) -> bool:
    return isinstance(x, np.ndarray | np.generic | int | float | list | tuple)


def abs(x: Any) -> Any:  # noqa: A001 - the guide's ts.abs
    """Elementwise absolute value of a numpy array or a traced tensor."""
    if _is_numpy_value(x):
        return eager.unwrap(eager.abs(x))
    return builtins.abs(x)


def round(x: Any) -> Any:  # noqa: A001 - the guide's ts.round
    """Round to the nearest integer, ties to even, keeping the dtype.

    Numpy values only for now: Graph IR has no rounding op yet, so a traced tensor
    raises TypeError (convert with ``x.astype(ts.int32)``, which rounds to nearest-even).
    """
    if _is_numpy_value(x):
        return eager.unwrap(eager.round(x))
    raise TypeError(
        "ts.round: Graph IR has no round op yet; inside @ts.jit use x.astype(ts.int32) "
        "(nearest-even) and cast back"
    )
