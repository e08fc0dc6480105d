"""A ``tgraph.fused`` body closed by a reduction over its trailing dims, and a
``tgraph.fused_reductions`` body with several such reductions, with the row kernels'
layout.

Batch norm's statistics and their gradients reduce each (sample, channel) plane of an
NCHW tensor: ``sum(f(x, ...), [2, 3])`` over rows of ``H * W`` contiguous elements (49
at ResNet-50's last stage). The generic reduction kernel gives each row a tile of 128
lanes reading one element each, so a row of 49 leaves most lanes idle and pays a
group-wide combine. Here the reduced dims are one row of ``n = prod(trailing dims)``
elements, laid out as :func:`tile_rowwise.plan_row` lays out a norm's row: a warp per
row (four rows a tile) up to 1024 elements, a tile per row beyond, 16-byte vector loads
(scalar edges on ragged rows), the body evaluated on each loaded element, the lane's
values folded and combined with ``ttile.reduce`` in a fixed order. With several
reductions (``tgraph.fused_reductions``: batch norm's two backward sums) each element is
read once and every reduction folds its own value of it.

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
EvaluateMany = Callable[[KernelEmitter, list[SSAValue]], list[SSAValue]]


def applies(reds: Sequence[g.ReductionOp], values: Sequence[SSAValue],
            acc_types: Sequence[Attribute]) -> bool:
    """The reductions ``reds`` (of one body, over the same axes of values of one shape)
    of a body whose leaves are ``values`` can be lowered by :func:`lower_many`: the
    conditions of the module docstring."""
    return _layout(reds, values, acc_types) is not None


def _layout(reds: Sequence[g.ReductionOp], values: Sequence[SSAValue],
            acc_types: Sequence[Attribute]) -> tuple[list[int], int, list[bool], object] | None:
    """``(shape, k, full, plan)``: the reduced value's shape, the number of kept leading
    dims, which leaves are full rows, the row plan; None when the conditions fail."""
    red = reds[0]
    shape = list(g.shape_of(red.input))
    axes = sorted(red.axis_list())
    k = len(shape) - len(axes)
    if (
        any(type(r) not in KINDS for r in reds)
        or any(a != f32 for a in acc_types)
        or not axes
        or axes != list(range(k, len(shape)))
        or tile_splitreduce.applies(shape, axes)
    ):
        return None
    n = prod(shape[k:])
    if prod(shape[:k]) < 1 or n < 1:
        return None
    full: list[bool] = []
    for v in values:
        s = list(g.shape_of(v))
        if s == shape:
            if elem_bytes(g.elem_of(v)) is None:
                return None
            full.append(True)
        elif len(s) <= len(shape) and all(d == 1 for d in s[len(s) - len(axes):]):
            full.append(False)  # constant along the reduced dims: one value per row
        else:
            return None
    if not any(full):
        return None
    widest = max((g.elem_of(v) for v, f in zip(values, full) if f), key=elem_bytes)
    plan = plan_row(n, widest)
    if plan is None:
        return None
    return shape, k, full, plan


def lower(
    lw: _FunctionLowering, red: g.ReductionOp, values: Sequence[SSAValue],
    refs: Sequence[SSAValue], evaluate: Evaluate, acc_t: Attribute,
) -> bool:
    """Lower a fused body (``evaluate`` of the body's leaves ``values``, whose buffers are
    ``refs``) closed by ``red`` as row kernels; False (nothing emitted) when the module
    docstring's conditions do not hold."""
    return lower_many(
        lw, [red], values, refs, lambda e, leaves: [evaluate(e, leaves)], [acc_t]
    )


def lower_many(
    lw: _FunctionLowering, reds: Sequence[g.ReductionOp], values: Sequence[SSAValue],
    refs: Sequence[SSAValue], evaluate: EvaluateMany, acc_types: Sequence[Attribute],
) -> bool:
    """Lower the reductions ``reds`` of one body as one row kernel: ``evaluate`` gives the
    value each reduction reduces from the body's leaves ``values`` (buffers ``refs``),
    every leaf is read once per element, and each reduction's result is stored by the
    row's first lane. False (nothing emitted) when :func:`applies` does not hold."""
    from tessera.passes.tile_datamove import reshape_view

    layout = _layout(reds, values, acc_types)
    if layout is None:
        return False
    shape, k, full, plan = layout
    nred = len(shape) - k  # the reduced (trailing) dims
    kept, n = shape[:k], prod(shape[k:])
    rows = prod(kept)
    kinds = [KINDS[type(r)] for r in reds]
    views = [
        reshape_view(lw, r, MemRefType(g.elem_of(v), [rows, n])) if f else r
        for v, r, f in zip(values, refs, full)
    ]
    outs = [lw.alloc(r.result.type) for r in reds]

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_refs, ins = args[:len(reds)], args[len(reds):]
        rk = RowKernel(e, plan, rows, [rows])
        kept_idx = e.unravel(rk.row, kept) if kept else []
        # one value per row for the per-row leaves; the rows' pieces for the full ones
        loaded: list[list[Piece] | SSAValue] = []
        for v, ref, f in zip(values, ins, full):
            if f:
                loaded.append(rk.load(ref, raw=True))
                continue
            s = g.shape_of(v)
            lead = kept_idx[len(kept_idx) - (len(s) - nred):] if len(s) > nred else []
            idx = [i if d != 1 else 0 for i, d in zip(lead, s)] + [0] * (len(s) - len(lead))
            loaded.append(e.load(ref, idx, mask=rk.row_ok))
        first_full = next(p for p, f in zip(loaded, full) if f)
        assert isinstance(first_full, list)
        pieces: list[list[Piece]] = [[] for _ in reds]
        for j, p in enumerate(first_full):
            ys: list[list[SSAValue]] = [[] for _ in reds]
            for c in range(len(p.values)):
                leaves = [x[j].values[c] if isinstance(x, list) else x for x in loaded]
                for i, y in enumerate(evaluate(e, leaves)):
                    ys[i].append(e.convert(y, f32))
            for i in range(len(reds)):
                pieces[i].append(p.like(ys[i]))
        first = e.and_(rk.row_ok, e.eq(rk.lane, 0))
        for red, kind, o_ref, ps in zip(reds, kinds, o_refs, pieces):
            total = rk.reduce(ps, kind, lambda y: y)
            if isinstance(red, g.MeanOp):
                total = e.fmul(total, e.const(1.0 / n, f32))
            keep = red.keepdims is not None
            oidx = [*kept_idx, *([0] * nred)] if keep else list(kept_idx)
            e.store(e.convert(total, g.elem_of(red.result)), o_ref, oidx, mask=first)

    grid = [-(-rows // plan.rows_per_tile), 1, 1]
    lw.kernel("fused_rows", [*outs, *views], plan.group_size, grid, build)
    for r, o in zip(reds, outs):
        lw.env[r.result] = o
    return True


__all__ = ["applies", "lower", "lower_many"]
