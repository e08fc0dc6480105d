"""``ts.spmm_transpose`` and ``ts.sddmm`` (the adjoints of ``ts.spmm``, public since the
sparse kernels of tessera/passes/tile_sparse.py): traced through ``ts.jit`` and run on the
CPU reference against float64 numpy, and their shape errors."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera import op
from tessera.frontend.errors import ShapeError

RNG = np.random.default_rng(11)


def csr(m: int, k: int):
    counts = RNG.integers(0, 4, size=m)
    counts[1] = 0
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    indices = RNG.integers(0, k, size=int(indptr[-1])).astype(np.int32)
    return indptr, indices, np.repeat(np.arange(m), counts)


def test_spmm_transpose_and_sddmm_match_numpy():
    m, k, n = 9, 7, 5
    ip, ix, rows = csr(m, k)
    v = RNG.uniform(-2, 2, ix.size)
    d, e = RNG.uniform(-2, 2, (m, n)), RNG.uniform(-2, 2, (k, n))
    a = np.zeros((m, k))
    np.add.at(a, (rows, ix), v)
    got = ts.jit(lambda p, i, x, y: ts.spmm_transpose(p, i, x, y, sparse_shape=(m, k)))(
        ip, ix, v, d)
    np.testing.assert_allclose(np.asarray(got), a.T @ d, rtol=1e-13, atol=1e-13)
    got = ts.jit(lambda p, i, x, y: op.sddmm(p, i, x, y, sparse_shape=(m, k)))(ip, ix, d, e)
    np.testing.assert_allclose(np.asarray(got), np.sum(d[rows] * e[ix], axis=1), rtol=1e-13)


def test_sparse_shape_errors():
    ip, ix, _ = csr(4, 3)
    d = np.zeros((4, 2))
    with pytest.raises(ShapeError, match=r"spmm_transpose: dense has shape \[4, 2\], "
                                         r"expected \[5, N\]"):
        ts.jit(lambda p, i, x, y: ts.spmm_transpose(p, i, x, y, (5, 3)))(
            ip, ix, np.zeros(ix.size), d)
    with pytest.raises(ShapeError, match=r"sddmm: lhs \[4, 2\] and rhs \[3, 5\] must be "
                                         r"\[4, N\] and \[3, N\]"):
        ts.jit(lambda p, i, x, y: ts.sddmm(p, i, x, y, (4, 3)))(ip, ix, d, np.zeros((3, 5)))
    with pytest.raises(ShapeError, match="sddmm sparse_shape must be"):
        ts.jit(lambda p, i, x, y: ts.sddmm(p, i, x, y, (4,)))(ip, ix, d, np.zeros((3, 2)))


def test_sparse_costs():
    """The profiler counts 2·nnz·N for each of the three products."""
    from xdsl.parser import Parser

    from tessera.ir import graph as g
    from tessera.profiler.costs import flops
    from tests.passes.test_lower_graph_to_tile import context
    from tests.passes.test_lower_sparse import spmm_text, transpose_text

    for text in (spmm_text("f32", 3, 4, 5, 6), spmm_text("f32", 3, 4, 5, 6, op="sddmm"),
                 transpose_text("f32", 3, 4, 5, 6)):
        mod = Parser(context(), text).parse_module()
        (op,) = [o for o in mod.walk() if isinstance(o, g.SpMMOp | g.SDDMMOp |
                                                      g.SpMMTransposeOp)]
        assert flops(op) == 2 * 6 * 5
