"""Tensors of no elements through the whole lowering: ops whose results are empty launch
nothing, a sum over an empty axis or a matmul contracting no terms is a constant of the
shapes (``algebraic-simplify``'s ``fold-empty``), a program of only such ops has no
kernels, and what has no value (a max over nothing) is a located error. Each case runs
the lowered program on the Tile IR interpreter against the reference interpreter and
numpy, and prints its PTX (the GPU path: ``tests/gpu/test_empty_gpu.py``)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera.errors import TesseraError
from tessera.passes.emit_ptx import NO_KERNELS_PTX
from tessera.runtime.tile_interpreter import run_host

RNG = np.random.default_rng(5)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    "unary of empty": (lambda x: ts.cos(x) * 2.0, [(1, 0, 3)],
                       lambda x: np.cos(x) * 2.0),
    "broadcast to empty": (lambda x, b: x + b, [(0, 3), (3,)], lambda x, b: x + b),
    "reshape of empty": (lambda x: ts.reshape(x, (0, 25)), [(0, 1, 5, 5)],
                         lambda x: x.reshape(0, 25)),
    "matmul contracting nothing": (lambda a, w, b: ts.matmul(a, w) + b, [(4, 0), (0, 5), (5,)],
                                   lambda a, w, b: a @ w + b),
    "sum over an empty axis": (lambda x: ts.sum(x, axis=1), [(4, 0)], lambda x: x.sum(1)),
    "mean over an empty axis": (lambda x: ts.mean(x, axis=0), [(0, 3)],
                                lambda x: np.full(3, np.nan, np.float32)),
    "concat with empty": (lambda a, b: ts.concat([a, b, a], axis=0), [(0, 3), (2, 3)],
                          lambda a, b: np.concatenate([a, b, a])),
    "empty batch matmul": (lambda a, w: ts.matmul(a, w), [(0, 4), (4, 6)], lambda a, w: a @ w),
}


@pytest.mark.parametrize("name", list(CASES))
def test_empty_tensors_lower_and_run(name):
    fn, shapes, ref = CASES[name]
    args = [_f32(*s) for s in shapes]
    f = ts.jit(fn)
    got = f(*args)
    want = ref(*args)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert got.shape == want.shape
    spec = f._last
    (lowered,) = run_host(spec.ir("tile"), spec.name, args)
    np.testing.assert_allclose(lowered, want, rtol=1e-6, atol=1e-6)
    assert lowered.shape == want.shape
    # a program whose result is empty launches nothing
    assert (spec.ir("ptx") == NO_KERNELS_PTX) == (want.size == 0)


def test_max_over_nothing_is_a_located_error():
    f = ts.jit(lambda x: ts.max(x, axis=1))
    with pytest.raises(TesseraError, match=r"over an empty axis.*test_empty_tensors.py:\d+"):
        f(np.zeros((4, 0), np.float32))
