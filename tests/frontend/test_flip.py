"""``ts.flip`` (``tgraph.reverse``) at the front end: its errors and dropped dims (its
values and gradient: the OpInfo suite; its lowering: tests/passes/test_lower_datamove.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera.errors import ShapeError


def test_flip_errors_and_size_one_dims():
    """A repeated or out-of-range dim is a located ShapeError; dims of one
    element are dropped (no op when none is left)."""
    x = np.arange(12, dtype=np.float32).reshape(3, 1, 4)
    with pytest.raises(ShapeError, match="repeat"):
        ts.jit(lambda x: ts.flip(x, (0, -3)))(x)
    with pytest.raises(ShapeError, match="out of range"):
        ts.jit(lambda x: ts.flip(x, (3,)))(x)
    fn = ts.jit(lambda x: ts.flip(x, (1,)) + 0.0)
    np.testing.assert_array_equal(np.asarray(fn(x)), x)
    assert "tgraph.reverse" not in str(fn.specialize(x).ir("traced"))
    np.testing.assert_array_equal(np.asarray(ts.jit(lambda x: ts.flip(x, (0, 1, 2)))(x)),
                                  x[::-1, :, ::-1])
