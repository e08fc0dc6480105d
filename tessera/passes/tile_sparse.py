"""Tile IR kernel for ``tgraph.spmm`` (CSR sparse ``[M, K]`` times dense ``[K, N]``).

One tile per (sparse row ``m``, block of ``L`` output columns): grid
``[ceil(N / L), M, 1]``, ``L`` = 32, 64 or 128 lanes (the fewest that cover ``N``, at most
128), lane ``l`` owning column ``n = L * tile_id x + l``. Every lane reads the row's
extent ``indptr[m] .. indptr[m + 1]`` and walks the row's nonzeros in storage order
(``scf.for``): ``acc += values[p] * dense[indices[p], n]``, so the lanes of a warp read
consecutive elements of one dense row and the sum has a fixed order (the order of the
CSR arrays), the same as the Graph IR interpreter's. Products and sums are in f32 for
f32/f16/bf16 operands (16-bit values widened exactly) and f64 for f64; the result is
rounded once to the result type.

The kernel never reads out of bounds: the row extent is clamped to ``[0, nnz]`` and a
column index outside ``[0, K)`` reads zero. (The CPU reference rejects such malformed
CSR operands with a ``ValueError``.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.dialects.builtin import (
    IndexType,
)
from xdsl.ir import SSAValue

from tessera.ir import graph as g
from tessera.passes.tile_builder import KernelEmitter, cdiv, compute_type, float_elem

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering


def lanes_for(n: int) -> int:
    """Lanes per tile for ``n`` output columns: 32, 64 or 128."""
    for lanes in (32, 64):
        if n <= lanes:
            return lanes
    return 128


def lower_spmm(lw: _FunctionLowering, op: g.SpMMOp) -> None:
    """``tgraph.spmm``: one lane per output column, nonzeros of the row in CSR order."""

    et = float_elem(op, op.result.type)
    acc_t = compute_type(et)
    m, k = op.sparse_shape.get_values()
    n = g.shape_of(op.dense)[1]
    nnz = g.shape_of(op.indices)[0]
    out = lw.alloc(op.result.type)
    lanes = lanes_for(n)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o, indptr, indices, values, dense = args
        row = e.tile_id("y")
        col = e.add(e.mul(e.tile_id("x"), lanes), e.local_id())
        ok = e.lt(col, n)

        def bound(i: SSAValue | int) -> SSAValue:
            v = e.convert(e.load(indptr, [i]), IndexType())
            return e.index(e.min(e.max(v, 0), nnz))

        start = bound(row)
        end = e.index(e.max(bound(e.add(row, 1)), start))

        def body(b: KernelEmitter, p: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
            kk = b.convert(b.load(indices, [p]), IndexType())
            inside = b.and_(b.and_(ok, b.le(0, kk)), b.lt(kk, k))
            kk = b.select(inside, kk, 0)
            v = b.convert(b.load(values, [p]), acc_t)
            d = b.convert(b.load(dense, [kk, col], mask=inside), acc_t)
            return [b.fadd(acc[0], b.fmul(v, d))]

        zero = e.const(0.0, acc_t)
        (acc,) = e.for_(start, end, 1, [zero], body)
        e.store(e.convert(acc, et), o, [row, col], mask=ok)

    args = [out, *(lw.mem(v) for v in (op.indptr, op.indices, op.values, op.dense))]
    lw.kernel("spmm", args, lanes, [cdiv(n, lanes), m, 1], build)
    lw.env[op.result] = out

