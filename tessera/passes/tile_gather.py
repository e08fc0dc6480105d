"""Tile IR kernel for ``tgraph.take_along_axis`` (a gather by integer indices).

One lane per result element (the indices' shape): the lane reads its index, checks it
against the gathered axis and reads the input element it names. An index outside
``[0, n)`` reads nothing and gives NaN (the op's definition; torch would raise), so a
bad index can never read another tensor's memory. Reads of the input are scattered
along the axis, one element per lane; the index reads and result writes are coalesced.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType, i64
from xdsl.ir import SSAValue

from tessera.ir import graph as g
from tessera.passes.tile_builder import KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

GATHER_GROUP = 256
"""Lanes per tile of the gather kernel."""


def lower_take_along_axis(lw: _FunctionLowering, op: g.TakeAlongAxisOp) -> None:
    """``tgraph.take_along_axis``: the kernel described in the module docstring."""
    shape = list(g.shape_of(op.result))
    ax = op.axis_index()
    n = g.shape_of(op.input)[ax]
    et = g.elem_of(op.result)
    total = prod(shape)
    out = lw.alloc(op.result.type)
    lw.env[op.result] = out

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o, x, ix = args
        lin = e.linear_id()
        ok = e.lt(lin, total)
        idx = e.unravel(lin, shape)
        j = e.convert(e.load(ix, idx, mask=ok), i64)
        inside = e.op(arith.AndIOp(
            e.op(arith.CmpiOp(j, e.const(0, i64), "sge")),
            e.op(arith.CmpiOp(j, e.const(n, i64), "slt")),
        ))
        safe = e.op(arith.IndexCastOp(e.op(arith.SelectOp(inside, j, e.const(0, i64))), IndexType()))
        src = [safe if d == ax else i for d, i in enumerate(idx)]
        nan = e.const(float("nan"), et)
        v = e.load(x, src, mask=e.and_(ok, inside), other=nan)
        e.store(v, o, idx, mask=ok)

    lw.kernel("take_along_axis", [out, lw.mem(op.input), lw.mem(op.indices)], GATHER_GROUP,
              [cdiv(total, GATHER_GROUP), 1, 1], build)


def register(registry: object) -> None:
    """Register this module's lowering in the Tile IR lowering registry."""
    registry.register(g.TakeAlongAxisOp)(lower_take_along_axis)  # type: ignore[attr-defined]
