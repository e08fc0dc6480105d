"""A ``tgraph.fused`` body closed by a reduction over its trailing dims, with the row
kernels' layout.

Batch norm's statistics and their gradients reduce each (sample, channel) plane of an
NCHW tensor: ``sum(f(x, ...), [2, 3])`` over rows of ``H * W`` contiguous elements (49
at ResNet-50's last stage). The generic reduction kernel gives each row a tile of 128
lanes reading one element each, so a row of 49 leaves most lanes idle and pays a
group-wide combine. Here the reduced dims are one row of ``n = prod(trailing dims)``
elements, laid out as :func:`tile_rowwise.plan_row` lays out a norm's row: a warp per
row (four rows a tile) up to 1024 elements, a tile per row beyond, 16-byte vector loads
(scalar edges on ragged rows), the body evaluated on each loaded element, the lane's
values folded and combined with ``ttile.reduce`` in a fixed order.

The body's inputs must be either of the reduced value's full shape (read as rows) or
constant along the reduced dims (a per-row value such as a channel's mean, read once
per row); anything else, element types other than bf16/f16/f32 for the full inputs,
accumulation in a type other than f32, and reductions that ``tile_splitreduce`` splits
(few rows, many elements each) are left to the generic kernels (``lower`` returns
False).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import MemRefType, f32
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.passes import tile_splitreduce
from tessera.passes.tile_builder import KernelEmitter
from tessera.passes.tile_rowlayout import Piece, elem_bytes
from tessera.passes.tile_rowwise import RowKernel, plan_row

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

KINDS = {g.SumOp: "sum", g.MaxOp: "max", g.MinOp: "min", g.MeanOp: "sum"}

Evaluate = Callable[[KernelEmitter, list[SSAValue]], SSAValue]


def lower(
    lw: _FunctionLowering, red: g.ReductionOp, values: Sequence[SSAValue],
    refs: Sequence[SSAValue], evaluate: Evaluate, acc_t: Attribute,
) -> bool:
    """Lower a fused body (``evaluate`` of the body's leaves ``values``, whose buffers are
    ``refs``) closed by ``red`` as row kernels; False (nothing emitted) when the module
    docstring's conditions do not hold."""
    from tessera.passes.tile_datamove import reshape_view

    shape = list(g.shape_of(red.input))
    axes = sorted(red.axis_list())
    k = len(shape) - len(axes)
    if (
        type(red) not in KINDS
        or acc_t != f32
        or not axes
        or axes != list(range(k, len(shape)))
        or tile_splitreduce.applies(shape, axes)
    ):
        return False
    kept, n = shape[:k], prod(shape[k:])
    rows = prod(kept)
    if rows < 1 or n < 1:
        return False
    full: list[bool] = []
    for v in values:
        s = list(g.shape_of(v))
        if s == shape:
            if elem_bytes(g.elem_of(v)) is None:
                return False
            full.append(True)
        elif len(s) <= len(shape) and all(d == 1 for d in s[len(s) - len(axes):]):
            full.append(False)  # constant along the reduced dims: one value per row
        else:
            return False
    if not any(full):
        return False
    widest = max((g.elem_of(v) for v, f in zip(values, full) if f), key=elem_bytes)
    plan = plan_row(n, widest)
    if plan is None:
        return False
    kind = KINDS[type(red)]
    mean = isinstance(red, g.MeanOp)
    keep = red.keepdims is not None
    rt = g.elem_of(red.result)
    views = [
        reshape_view(lw, r, MemRefType(g.elem_of(v), [rows, n])) if f else r
        for v, r, f in zip(values, refs, full)
    ]
    out = lw.alloc(red.result.type)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, ins = args[0], args[1:]
        rk = RowKernel(e, plan, rows, [rows])
        kept_idx = e.unravel(rk.row, kept) if kept else []
        # one value per row for the per-row leaves; the rows' pieces for the full ones
        loaded: list[list[Piece] | SSAValue] = []
        for v, ref, f in zip(values, ins, full):
            if f:
                loaded.append(rk.load(ref, raw=True))
                continue
            s = g.shape_of(v)
            lead = kept_idx[len(kept_idx) - (len(s) - len(axes)):] if len(s) > len(axes) else []
            idx = [i if d != 1 else 0 for i, d in zip(lead, s)] + [0] * (len(s) - len(lead))
            loaded.append(e.load(ref, idx, mask=rk.row_ok))
        layout = next(p for p, f in zip(loaded, full) if f)
        assert isinstance(layout, list)
        pieces = []
        for j, p in enumerate(layout):
            ys = []
            for c in range(len(p.values)):
                leaves = [x[j].values[c] if isinstance(x, list) else x for x in loaded]
                ys.append(e.convert(evaluate(e, leaves), f32))
            pieces.append(p.like(ys))
        total = rk.reduce(pieces, kind, lambda y: y)
        if mean:
            total = e.fmul(total, e.const(1.0 / n, f32))
        first = e.and_(rk.row_ok, e.eq(rk.lane, 0))
        oidx = [*kept_idx, *([0] * len(axes))] if keep else list(kept_idx)
        e.store(e.convert(total, rt), o_ref, oidx, mask=first)

    grid = [-(-rows // plan.rows_per_tile), 1, 1]
    lw.kernel("fused_rows", [out, *views], plan.group_size, grid, build)
    lw.env[red.result] = out
    return True


__all__ = ["lower"]
