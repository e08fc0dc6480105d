"""Reductions that keep the last axis (``tgraph.sum`` / ``max`` / ``min`` / ``mean`` over
leading or middle axes, alone or at the end of a fused body): column reductions.

Used by ``lower-graph-to-tile``'s ``reduce_kernel`` when the input's last axis is kept
and the kept elements are at least :data:`MIN_COLUMNS` (a bias gradient, ``sum`` over
the rows of ``[tokens, features]``). The generic kernel gives each output element a
tile whose lanes stride over the reduced elements, ``C`` elements apart: each lane's
load wastes most of its 32-byte sector, and ``C`` tiles of serial loops are too few
when ``C`` is small. Here lanes run along the kept elements instead (neighbouring lanes
read neighbouring addresses) and the reduced elements are cut into ``P`` chunks:

* kernel 1, grid ``[ceil(C / GROUP), P, 1]``: lane ``c`` of chunk ``p`` combines the
  reduced elements ``p * chunk .. (p + 1) * chunk - 1`` of column ``c`` in order;
  with ``P = 1`` it writes the result, else an accumulator-typed partial ``[P, C]``;
* kernel 2 (``P > 1``), grid ``[ceil(C / GROUP), 1, 1]``: lane ``c`` combines the ``P``
  partials of column ``c`` in order, divides a mean by the count and rounds once.

``P`` gives about :data:`TARGET_LANES` lanes in all, with chunks of at least
:data:`MIN_CHUNK` elements. The order of the combination is fixed (deterministic); it
differs from the reference interpreter's, so sums agree to rounding. Index arithmetic
is 32-bit (the reduced and kept extents are below ``2**31``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv
from tessera.passes.tile_datamove import I32Index

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

GROUP = 256
"""Lanes per tile (one column each)."""
MIN_COLUMNS = 32
"""Fewer kept elements than this keep the generic kernel (a warp would idle)."""
MIN_CHUNK = 32
"""The fewest reduced elements of one lane's chunk."""
TARGET_LANES = 1 << 17
"""About the lanes of kernel 1: enough to cover an H100 (132 SMs x 2048 lanes / 2)."""

Value = Callable[[KernelEmitter, list[SSAValue], list[Idx], SSAValue], SSAValue]
"""``value(e, input_refs, index, valid)``: the accumulator-typed element at ``index``."""
Combine = Callable[[KernelEmitter, SSAValue, SSAValue], SSAValue]


def chunks(rows: int, cols: int) -> int:
    """``P``: how many chunks the ``rows`` reduced elements of each column are cut into."""
    want = max(1, TARGET_LANES // max(cols, 1))
    return max(1, min(want, rows // MIN_CHUNK))


def applies(shape: Sequence[int], axes: Sequence[int]) -> bool:
    """Whether a reduction of ``shape`` over ``axes`` is a column reduction here."""
    r = len(shape)
    if not shape or (r - 1) in axes or not axes:
        return False
    kept = prod(d for k, d in enumerate(shape) if k not in axes)
    red = prod(shape[k] for k in axes)
    return kept >= MIN_COLUMNS and 0 < red and kept * max(red, 1) < 2**31


def lower(
    lw: _FunctionLowering, op: g.ReductionOp, tag: str, inputs: Sequence[SSAValue],
    value: Value, kind: str, acc_t: Attribute, init: float | int, combine: Combine,
) -> SSAValue:
    """Emit the column reduction of ``op`` (see the module docstring) reading the host
    buffers ``inputs`` through ``value``; returns the result's buffer."""
    shape = list(g.shape_of(op.input))
    axes = sorted(op.axis_list())
    kept_dims = [d for k, d in enumerate(shape) if k not in axes]
    red_dims = [shape[k] for k in axes]
    cols, rows = prod(kept_dims), prod(red_dims)
    p = chunks(rows, cols)
    chunk = cdiv(rows, p)
    p = cdiv(rows, chunk)
    mean = isinstance(op, g.MeanOp)
    rt = g.elem_of(op.result)
    out = lw.alloc(op.result.type)
    out_shape = list(g.shape_of(op.result))
    keep = op.keepdims is not None

    def full_index(e: KernelEmitter, kept: list[Idx], red: list[Idx]) -> list[Idx]:
        ki, ri = iter(kept), iter(red)
        return [next(ri) if k in axes else next(ki) for k in range(len(shape))]

    def out_index(kept: list[Idx]) -> list[Idx]:
        if not keep:
            return kept
        it = iter(kept)
        return [0 if k in axes else next(it) for k in range(len(shape))]

    def finish(e: KernelEmitter, acc: SSAValue) -> SSAValue:
        if mean:
            acc = e.fdiv(acc, e.const(float(rows), acc_t))
        return e.convert(acc, rt)

    def column(e: KernelEmitter) -> tuple[I32Index, Idx, SSAValue, list[Idx]]:
        ix = I32Index(e)
        c = ix.add(ix.mul(ix.of(e.tile_id("x")), GROUP), ix.of(e.local_id()))
        ok = ix.lt(c, cols)
        kept = [ix.to_index(i) for i in ix.unravel(c, kept_dims)]
        return ix, c, ok, kept

    def partial_kernel(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, ins = args[0], args[1:]
        ix, _, ok, kept = column(e)
        r0 = ix.mul(ix.of(e.tile_id("y")), chunk) if p > 1 else 0

        def step(ie: KernelEmitter, k: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
            jx = I32Index(ie)
            r = jx.add(r0, jx.of(k))
            valid = ie.and_(ok, jx.lt(r, rows)) if rows % chunk else ok
            red = [jx.to_index(i) for i in jx.unravel(r, red_dims)]
            v = value(ie, ins, full_index(ie, kept, red), valid)
            v = ie.vselect(valid, v, ie.const(init, acc_t))
            return [combine(ie, c[0], v)]

        (acc,) = e.for_(0, chunk, 1, [e.const(init, acc_t)], step)
        if p == 1:
            e.store(finish(e, acc), o_ref, out_index(kept), mask=ok)
        else:
            e.store(acc, o_ref, [e.tile_id("y"), *kept], mask=ok)

    def final_kernel(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, part = args
        _, _, ok, kept = column(e)

        def step(ie: KernelEmitter, k: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
            return [combine(ie, c[0], ie.load(part, [k, *kept], mask=ok))]

        (acc,) = e.for_(0, p, 1, [e.const(init, acc_t)], step)
        e.store(finish(e, acc), o_ref, out_index(kept), mask=ok)

    assert len(out_index(kept_dims)) == len(out_shape)
    tiles = cdiv(cols, GROUP)
    if p == 1:
        lw.kernel(tag, [out, *inputs], GROUP, [tiles, 1, 1], partial_kernel)
        return out
    part = lw.alloc(TensorType(acc_t, [p, *kept_dims]))
    lw.kernel(tag, [part, *inputs], GROUP, [tiles, p, 1], partial_kernel)
    lw.kernel(f"{tag}_combine", [out, part], GROUP, [tiles, 1, 1], final_kernel)
    return out
