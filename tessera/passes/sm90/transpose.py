"""A K-major copy of an operand for the tensor-core formats that have no MN-major form.

fp8 wgmma reads both operands K-major only. An fp8 ``A`` stored ``K x M`` or ``B``
stored ``K x N`` (the row-major ``x @ w`` form) is first copied into a ``[rows, K]``
buffer by :func:`transpose_2d`, a shared-memory tiled transpose: one ``32 x 32`` tile
per CTA of 256 lanes, read along the source rows and written along the destination
rows (both coalesced). The copy moves ``2 * K * rows`` bytes, small next to the
product's ``2 * M * N * K`` FLOPs for the shapes the GEMM kernel is for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, SSAValue

from tessera.ir import tile as tl
from tessera.passes.tile_builder import KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

TILE = 32
GROUP = 256


def transpose_2d(lw: _FunctionLowering, src: SSAValue, rows: int, cols: int,
                 et: Attribute, rows_p: int = 0) -> SSAValue:
    """A new ``[cols, rows_p]`` buffer holding the transpose of the ``[rows, cols]`` ``src``,
    zero in the columns ``rows..rows_p`` (``rows_p``: ``rows`` unless given, e.g. rounded
    up to a 16-byte TMA row)."""
    rows_p = rows_p or rows
    if rows_p < rows:
        raise ValueError(f"transpose_2d: padded rows {rows_p} < {rows}")
    dst = lw.alloc(TensorType(et, [cols, rows_p]))

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        out, inp = args
        lane = e.local_id()
        ty, tx = e.div(lane, TILE), e.rem(lane, TILE)
        c0 = e.mul(e.tile_id("x"), TILE)
        r0 = e.mul(e.tile_id("y"), TILE)
        tile = e.op(tl.AllocSharedOp([TILE, TILE + 1], et))
        step = GROUP // TILE
        for i in range(TILE // step):
            r = e.add(r0, e.add(ty, step * i))
            c = e.add(c0, tx)
            ok = e.and_(e.lt(r, rows), e.lt(c, cols))
            v = e.load(inp, [e.select(ok, r, 0), e.select(ok, c, 0)], mask=ok,
                       other=e.const(0.0, et))
            e.store(v, tile, [e.add(ty, step * i), tx])
        e.barrier()
        for i in range(TILE // step):
            c = e.add(c0, e.add(ty, step * i))
            r = e.add(r0, tx)
            ok = e.and_(e.lt(c, cols), e.lt(r, rows_p))
            e.store(e.load(tile, [tx, e.add(ty, step * i)]), out, [c, r], mask=ok)

    lw.kernel("transpose", [dst, src], GROUP, [cdiv(cols, TILE), cdiv(rows_p, TILE), 1], build)
    return dst
