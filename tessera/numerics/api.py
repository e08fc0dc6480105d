"""``ts.round`` and ``ts.abs``: numpy values eagerly, traced tensors through Graph IR.

On numpy arrays and scalars they run at once (:mod:`tessera.numerics.eager`); on
anything else they defer to the front end's operator functions
(:mod:`tessera.frontend.ops`), which emit Graph IR.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.numerics import eager


def _is_numpy_value(x: Any) -> bool:
    return isinstance(x, np.ndarray | np.generic | int | float | list | tuple)


def abs(x: Any) -> Any:  # noqa: A001 - the guide's ts.abs
    """Elementwise absolute value of a numpy array or a traced tensor."""
    if _is_numpy_value(x):
        return eager.unwrap(eager.abs(x))
    from tessera.frontend import ops

    return ops.abs(x)


def round(x: Any) -> Any:  # noqa: A001 - the guide's ts.round
    """Round to the nearest integer, ties to even, keeping the dtype."""
    if _is_numpy_value(x):
        return eager.unwrap(eager.round(x))
    from tessera.frontend import ops

    return ops.round(x)
