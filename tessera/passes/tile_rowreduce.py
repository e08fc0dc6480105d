"""Last-axis ``tgraph.sum`` / ``max`` / ``min`` / ``mean`` on bf16, f16 and f32 rows with
the row kernels' layouts.

Used by ``lower-graph-to-tile`` for reductions over exactly the last axis (``keepdims``
or not; a 1-D input is one row). Each row is read once with 16-byte vector loads:

* rows that :func:`tile_rowwise.plan_row` takes are held in registers (one warp per
  row up to 1024 elements, else one tile per row), folded per lane and combined with
  ``ttile.reduce``;
* longer rows stream (:mod:`tile_rowstream`): one tile per row, or, with few rows,
  segments of a row on several tiles whose results a second kernel combines in a
  fixed order.

Values accumulate in f32 (the mean divides the f32 sum by ``n``) and are rounded to the
element type once; the combination order is fixed, so the result is deterministic.
Other reductions (other axes, several axes, integer or f64 elements) return False and
keep the strided kernel of ``lower_graph_to_tile``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.dialects.builtin import f32
from xdsl.ir import SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter
from tessera.passes.tile_rowlayout import IDENTITY, Piece, combine, fold, rows_of
from tessera.passes.tile_rowstream import StreamTile, plan_stream, stream_kernels
from tessera.passes.tile_rowwise import RowKernel, plan_row

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

KINDS = {g.SumOp: "sum", g.MaxOp: "max", g.MinOp: "min", g.MeanOp: "sum"}


def lower_reduction(lw: _FunctionLowering, op: g.ReductionOp) -> bool:
    """Lower ``op`` with the row kernels when it reduces the last axis of bf16/f16/f32
    rows; False (nothing emitted) otherwise."""
    shape = g.shape_of(op.input)
    et = g.elem_of(op.input)
    rt = g.elem_of(op.result)  # the stored type (a policy may ask for a wider one)
    if not shape or op.axis_list() != [len(shape) - 1] or type(op) not in KINDS:
        return False
    rows, n = rows_of(shape), shape[-1]
    if rows < 1 or n < 1:
        return False
    kind = KINDS[type(op)]
    keep = op.keepdims is not None
    mean = isinstance(op, g.MeanOp)
    plan = plan_row(n, et)
    splan = plan_stream(n, rows, et) if plan is None else None
    if plan is None and splan is None:
        return False
    out = lw.alloc(op.result.type)
    lead = shape[:-1]

    def finish(e: KernelEmitter, total: SSAValue) -> SSAValue:
        if mean:
            total = e.fmul(total, e.const(1.0 / n, f32))
        return e.convert(total, rt)

    def out_index(lead_idx: list[Idx]) -> list[Idx]:
        return [*lead_idx, 0] if keep else list(lead_idx)

    if plan is not None:
        def build(e: KernelEmitter, args: list[SSAValue]) -> None:
            o_ref, x = args
            k = RowKernel(e, plan, rows, lead)
            total = k.reduce(k.load(x), kind, lambda v: v)
            first = e.and_(k.row_ok, e.eq(k.lane, 0))
            e.store(finish(e, total), o_ref, out_index(k.lead), first)

        grid = [-(-rows // plan.rows_per_tile), 1, 1]
        lw.kernel(op.name.split(".")[1], [out, lw.mem(op.input)], plan.group_size, grid, build)
        lw.env[op.result] = out
        return True
    assert splan is not None

    def stats(e: KernelEmitter, s: StreamTile, x: SSAValue) -> list[SSAValue]:
        acc = e.const(IDENTITY[kind], f32)
        edge = s.edge(x)
        if edge is not None:
            acc = fold(e, [edge], kind, lambda v: v)

        def body(b: KernelEmitter, pcs: list[Piece], c: list[SSAValue]) -> list[SSAValue]:
            return [combine(b, kind, c[0], fold(b, pcs, kind, lambda v: v))]

        # the second statistic is unused (the split kernels' scratch holds two)
        return [*s.stream(x, [acc], body), e.const(0.0, f32)]

    def combine_tile(e: KernelEmitter, st: list[SSAValue], valid: SSAValue | None) -> list:
        v = st[0]
        if valid is not None:
            v = e.vselect(valid, v, e.const(IDENTITY[kind], f32))
        return [e.op(tt.ReduceOp(v, kind, "group")), st[1]]

    def write(e: KernelEmitter, s: StreamTile, refs: list[SSAValue], st: list[SSAValue]) -> None:
        first = e.and_(s.first, e.eq(s.lane, 0))
        e.store(finish(e, st[0]), refs[0], out_index(s.lead), first)

    stream_kernels(lw, op.name.split(".")[1], splan, rows, lead, out, [lw.mem(op.input)],
             stats, combine_tile, write)
    lw.env[op.result] = out
    return True
