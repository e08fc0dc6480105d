"""Reductions to few outputs over many elements (a loss's ``mean`` over a whole
activation, a sum over the last axes of a few rows): the reduced elements of each
output are cut into chunks on several tiles.

Used by ``lower-graph-to-tile``'s ``reduce_kernel`` (plain and fused reductions) when
the outputs are fewer than :data:`MIN_TILES` and each has at least
:data:`MIN_ELEMENTS` reduced elements, and the column kernels of :mod:`tile_colreduce`
do not apply. The generic kernel gives each output one tile: a ``mean`` over
``128 x 768 x 14 x 14`` elements ran on 128 lanes, 150,000 loads each in a row.

* kernel 1, grid ``[outputs, P, 1]``, ``GROUP`` lanes: tile ``(o, p)`` combines the
  reduced elements ``p * chunk .. (p + 1) * chunk - 1`` of output ``o``, lanes
  ``GROUP`` apart (neighbouring lanes, neighbouring reduced elements), then over the
  tile (``ttile.reduce``, a fixed butterfly); lane 0 writes the accumulator-typed
  partial ``[o, p]`` (with ``P = 1``, the result);
* kernel 2 (``P > 1``), grid ``[ceil(outputs / GROUP), 1, 1]``: lane ``o`` combines the
  ``P`` partials in order, divides a mean by the count and rounds once.

``P`` gives about :data:`TARGET_TILES` tiles in all, each lane at least
:data:`MIN_ITERS` elements. The combination order is fixed (deterministic). The reduced
index is 32-bit arithmetic (the reduced elements of one output are below ``2**31``).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv
from tessera.passes.tile_colreduce import Combine, Value
from tessera.passes.tile_datamove import I32Index

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

GROUP = 256
"""Lanes per tile."""
MIN_TILES = 264
"""Outputs from this many on (two tiles per H100 SM) keep one tile each."""
MIN_ELEMENTS = 16 * GROUP
"""Fewer reduced elements per output keep the generic kernel."""
MIN_ITERS = 8
"""The fewest elements one lane combines in kernel 1."""
TARGET_TILES = 1056
"""About the tiles of kernel 1 (eight per H100 SM)."""


def chunks(outputs: int, elements: int) -> int:
    """``P``: the chunks each output's ``elements`` reduced elements are cut into."""
    return max(1, min(cdiv(elements, GROUP * MIN_ITERS), cdiv(TARGET_TILES, outputs)))


def applies(shape: Sequence[int], axes: Sequence[int]) -> bool:
    """Whether a reduction of ``shape`` over ``axes`` is split here."""
    red = prod(shape[k] for k in axes)
    outputs = prod(d for k, d in enumerate(shape) if k not in axes)
    return 0 < outputs < MIN_TILES and MIN_ELEMENTS <= red < 2**31


def lower(
    lw: _FunctionLowering, op: g.ReductionOp, tag: str, inputs: Sequence[SSAValue],
    value: Value, kind: str, acc_t: Attribute, init: float | int, combine: Combine,
) -> SSAValue:
    """Emit the split reduction of ``op`` (see the module docstring) reading the host
    buffers ``inputs`` through ``value``; returns the result's buffer."""
    shape = list(g.shape_of(op.input))
    axes = sorted(op.axis_list())
    kept_dims = [d for k, d in enumerate(shape) if k not in axes]
    red_dims = [shape[k] for k in axes]
    outputs, elements = prod(kept_dims), prod(red_dims)
    p = chunks(outputs, elements)
    chunk = cdiv(elements, p)
    p = cdiv(elements, chunk)
    mean = isinstance(op, g.MeanOp)
    rt = g.elem_of(op.result)
    out = lw.alloc(op.result.type)
    keep = op.keepdims is not None

    def out_index(kept: list[Idx]) -> list[Idx]:
        if not keep:
            return kept
        it = iter(kept)
        return [0 if k in axes else next(it) for k in range(len(shape))]

    def finish(e: KernelEmitter, acc: SSAValue) -> SSAValue:
        if mean:
            acc = e.fdiv(acc, e.const(float(elements), acc_t))
        return e.convert(acc, rt)

    def partial_kernel(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, ins = args[0], args[1:]
        o = e.tile_id("x")
        kept = e.unravel(o, kept_dims) if kept_dims else []
        ix = I32Index(e)
        lane = ix.of(e.local_id())
        r0 = ix.add(ix.mul(ix.of(e.tile_id("y")), chunk), lane) if p > 1 else lane

        def step(ie: KernelEmitter, k: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
            jx = I32Index(ie)
            off = jx.add(jx.mul(jx.of(k), GROUP), lane)  # within the chunk
            r = jx.add(r0, jx.mul(jx.of(k), GROUP))
            valid = jx.lt(off, chunk)
            if elements % chunk:
                valid = ie.and_(valid, jx.lt(r, elements))
            red = iter([jx.to_index(i) for i in jx.unravel(r, red_dims)])
            ki = iter(kept)
            idx = [next(red) if a in axes else next(ki) for a in range(len(shape))]
            v = value(ie, ins, idx, valid)
            v = ie.vselect(valid, v, ie.const(init, acc_t))
            return [combine(ie, c[0], v)]

        (acc,) = e.for_(0, cdiv(chunk, GROUP), 1, [e.const(init, acc_t)], step)
        total = e.op(tt.ReduceOp(acc, kind, "group"))
        first = e.eq(e.local_id(), 0)
        if p == 1:
            e.store(finish(e, total), o_ref, out_index(kept), mask=first)
        else:
            e.store(total, o_ref, [o, e.tile_id("y")], mask=first)

    def final_kernel(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, part = args
        ix = I32Index(e)
        o = ix.add(ix.mul(ix.of(e.tile_id("x")), GROUP), ix.of(e.local_id()))
        ok = ix.lt(o, outputs)
        oi = ix.to_index(o)
        kept = [ix.to_index(i) for i in ix.unravel(o, kept_dims)] if kept_dims else []

        def step(ie: KernelEmitter, k: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
            return [combine(ie, c[0], ie.load(part, [oi, k], mask=ok))]

        (acc,) = e.for_(0, p, 1, [e.const(init, acc_t)], step)
        e.store(finish(e, acc), o_ref, out_index(kept), mask=ok)

    if p == 1:
        lw.kernel(tag, [out, *inputs], GROUP, [outputs, 1, 1], partial_kernel)
        return out
    part = lw.alloc(TensorType(acc_t, [outputs, p]))
    lw.kernel(tag, [part, *inputs], GROUP, [outputs, p, 1], partial_kernel)
    lw.kernel(f"{tag}_combine", [out, part], GROUP, [cdiv(outputs, GROUP), 1, 1], final_kernel)
    return out
