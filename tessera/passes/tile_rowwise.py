"""Register-resident Tile IR kernels for last-axis softmax, rmsnorm and layernorm.

Used by ``lower-graph-to-tile`` for ``tgraph.softmax`` (last axis), ``tgraph.rmsnorm``
and ``tgraph.layernorm`` on bf16, f16 and f32 rows. Every element of a row is read
from global memory once and written once:

* a row of ``n`` elements is cut into chunks of ``w`` elements, ``w`` the largest power
  of two with ``w * bytes <= 16`` that divides ``n`` (so every chunk is aligned to its
  size: ``bf16 x 8`` and ``f32 x 4`` for the usual widths), read with one
  ``ttile.load_vector`` and written with one ``ttile.store_vector``;
* rows of at most :data:`WARP_ROW_LIMIT` elements get one warp each
  (:data:`WARP_ROWS_PER_TILE` rows per tile, ``ttile.reduce scope = warp``); longer
  rows get one tile each, with the fewest lanes (a power of two in
  ``[128, 1024]``) that leave each lane at most :data:`VALUES_PER_LANE_TARGET`
  values (``ttile.reduce scope = group``);
* lane ``l`` holds chunks ``l, l + L, l + 2L, ...`` of its row in registers
  (f32), so the statistics (max and sum of exponentials, mean and variance, mean
  square) and the write pass all work on registers; chunks past the end of the row
  and rows past the last are masked.

Rows that would need more than :data:`MAX_VALUES_PER_LANE` values per lane (more
than 32768 elements), softmax over another axis and other element types are not
handled here: :func:`plan_row` returns ``None`` and the caller uses the strided
kernels of ``lower_graph_to_tile`` instead.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, VectorType, f32
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

WARP_ROW_LIMIT = 1024
"""Rows of at most this many elements are handled by one warp."""

WARP_ROWS_PER_TILE = 4
"""Warps (rows) per tile in the warp-per-row layout."""

VALUES_PER_LANE_TARGET = 16
"""Tile-per-row layout: lanes are added until each holds at most this many values."""

MAX_VALUES_PER_LANE = 32
"""Largest number of row values one lane keeps in registers."""

LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class RowPlan:
    """How a row of ``n`` elements is spread over lanes."""

    n: int
    """Elements per row."""
    width: int
    """Elements per vector access (chunk)."""
    lanes: int
    """Lanes sharing one row (32 for a warp, else the tile's group size)."""
    rows_per_tile: int
    """Rows handled by one tile (one per warp, or 1)."""

    @property
    def chunks(self) -> int:
        return self.n // self.width

    @property
    def per_lane(self) -> int:
        """Chunks held by each lane."""
        return cdiv(self.chunks, self.lanes)

    @property
    def scope(self) -> str:
        return "warp" if self.rows_per_tile > 1 or self.lanes == tt.WARP_SIZE else "group"

    @property
    def group_size(self) -> int:
        return self.lanes * self.rows_per_tile


def _elem_bytes(t: Attribute) -> int | None:
    if isinstance(t, BFloat16Type | Float16Type):
        return 2
    if isinstance(t, Float32Type):
        return 4
    return None


def plan_row(n: int, element_type: Attribute) -> RowPlan | None:
    """The register-resident layout for rows of ``n`` elements of ``element_type``, or
    ``None`` when this module does not handle them (see the module docstring)."""
    eb = _elem_bytes(element_type)
    if eb is None or n < 1:
        return None
    w = 16 // eb
    while n % w:
        w //= 2
    chunks = n // w
    if n <= WARP_ROW_LIMIT:
        plan = RowPlan(n, w, tt.WARP_SIZE, WARP_ROWS_PER_TILE)
    else:
        lanes = 128
        while lanes < tt.MAX_GROUP_SIZE and cdiv(chunks, lanes) * w > VALUES_PER_LANE_TARGET:
            lanes *= 2
        plan = RowPlan(n, w, lanes, 1)
    if plan.per_lane * w > MAX_VALUES_PER_LANE:
        return None
    return plan


@dataclass
class _Row:
    """One lane's share of a row, loaded into f32 registers."""

    values: list[list[SSAValue]]
    """``values[c][j]``: element ``j`` of the lane's chunk ``c``."""
    masks: list[SSAValue | None]
    """Per chunk: ``None`` when statically valid, else an i1 (row and chunk in range)."""
    cols: list[Idx]
    """Per chunk: the column of its first element."""
    col_ok: list[SSAValue | None]
    """Per chunk: the chunk lies inside the row (``None``: always)."""


class _RowKernel:
    """Emits the shared parts of the row kernels for one :class:`RowPlan`."""

    def __init__(self, e: KernelEmitter, plan: RowPlan, rows: int, lead: Sequence[int]):
        self.e = e
        self.plan = plan
        if plan.rows_per_tile > 1:
            self.row: Idx = e.add(e.mul(e.tile_id("x"), plan.rows_per_tile), e.warp_id())
            self.lane: Idx = e.lane_id()
            self.row_ok = e.lt(self.row, rows) if rows % plan.rows_per_tile else None
        else:
            self.row = e.tile_id("x")
            self.lane = e.local_id()
            self.row_ok = None
        self.lead = e.unravel(self.row, lead) if lead else []

    def load(self, x: SSAValue) -> _Row:
        e, p = self.e, self.plan
        values, masks, cols, col_ok = [], [], [], []
        for c in range(p.per_lane):
            chunk = e.add(self.lane, c * p.lanes)
            inside = None if (c + 1) * p.lanes <= p.chunks else e.lt(chunk, p.chunks)
            ok = e.and_(self.row_ok, inside)
            col = e.mul(chunk, p.width)
            v = e.op(tt.LoadVectorOp(x, [e.index(i) for i in (*self.lead, col)], p.width, ok))
            values.append([e.convert(e.extract(v, j), f32) for j in range(p.width)])
            masks.append(ok)
            cols.append(col)
            col_ok.append(inside)
        return _Row(values, masks, cols, col_ok)

    def param(self, ref: SSAValue, r: _Row, c: int) -> list[SSAValue]:
        """Chunk ``c``'s columns of a 1-D parameter (weight, bias) as f32."""
        e, p = self.e, self.plan
        v = e.op(tt.LoadVectorOp(ref, [e.index(r.cols[c])], p.width, r.col_ok[c]))
        return [e.convert(e.extract(v, j), f32) for j in range(p.width)]

    def reduce(self, r: _Row, kind: str, term) -> SSAValue:
        """``kind`` over the row of ``term(value)``; masked chunks contribute the identity."""
        e = self.e
        ident = -pymath.inf if kind == "max" else 0.0
        acc: SSAValue | None = None
        for c, chunk in enumerate(r.values):
            part: SSAValue | None = None
            for x in chunk:
                t = term(x)
                part = t if part is None else _combine(e, kind, part, t)
            assert part is not None
            if r.masks[c] is not None:
                part = e.vselect(r.masks[c], part, e.const(ident, f32))
            acc = part if acc is None else _combine(e, kind, acc, part)
        assert acc is not None
        return e.op(tt.ReduceOp(acc, kind, self.plan.scope))

    def store(self, out: SSAValue, r: _Row, ys: list[list[SSAValue]], et: Attribute) -> None:
        e, p = self.e, self.plan
        for c, chunk in enumerate(ys):
            v = e.const(0.0, VectorType(et, [p.width]))
            for j, y in enumerate(chunk):
                v = e.insert(e.convert(y, et), v, j)
            idx = [e.index(i) for i in (*self.lead, r.cols[c])]
            e.emit(tt.StoreVectorOp(v, out, idx, r.masks[c]))


def _combine(e: KernelEmitter, kind: str, a: SSAValue, b: SSAValue) -> SSAValue:
    return e.fmax(a, b) if kind == "max" else e.fadd(a, b)


def _rows(shape: Sequence[int]) -> int:
    n = 1
    for d in shape[:-1]:
        n *= d
    return n


def lower_logsumexp(lw: _FunctionLowering, op: g.LogSumExpOp) -> None:
    """``tgraph.logsumexp``: one tile per output element (its slice strided over the lanes),
    two passes over the slice: ``m = max x``, then ``s = sum exp(x - m)``; the result is
    ``m + log s`` with ``m`` taken as 0 where it is infinite (so an all ``-inf`` or empty
    slice gives ``-inf`` and a ``+inf`` element ``+inf``, as torch). Computed in f32 (f64
    for f64 tensors), so no term overflows: every ``exp`` argument is at most 0."""
    from tessera.passes.lower_graph_to_tile import _accum_type
    from tessera.passes.lower_graph_to_tile import _Row as _Slice

    t = g.elem_of(op.input)
    acc_t = _accum_type(t, op)
    row = _Slice(g.shape_of(op.input), op.axis_list())
    out = lw.alloc(op.result.type)
    keep = op.keepdims is not None
    group, _ = row.group()

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, x = args
        o = e.tile_id("x")
        lane = e.local_id()

        def load(ie: KernelEmitter, idx: list[Idx], ok: SSAValue) -> SSAValue:
            return ie.convert(ie.load(x, idx, mask=ok), acc_t)

        m = lw.row_reduce(e, row, o, lane, "max", acc_t, load)
        inf = e.op(arith.CmpfOp(e.op(math.AbsFOp(m)), e.const(pymath.inf, acc_t), "oeq"))
        m = e.vselect(inf, e.const(0.0, acc_t), m)
        s = lw.row_reduce(
            e, row, o, lane, "sum", acc_t, lambda ie, idx, ok: ie.exp(ie.fsub(load(ie, idx, ok), m))
        )
        y = e.fadd(e.op(math.LogOp(s)), m)
        oidx = e.unravel(o, row.kept)
        if keep:
            it = iter(oidx)
            oidx = [0 if k in row.axes else next(it) for k in range(len(row.shape))]
        e.store(e.convert(y, t), o_ref, oidx, mask=e.eq(lane, 0))

    lw.kernel("logsumexp", [out, lw.mem(op.input)], group, [prod(row.kept), 1, 1], build)
    lw.env[op.result] = out


def lower_softmax(lw: _FunctionLowering, op: g.SoftmaxOp) -> None:
    """``tgraph.softmax``: the register kernel for last-axis softmax on rows
    :func:`plan_row` accepts, else the strided three-pass kernel."""
    shape = g.shape_of(op.input)
    et = g.elem_of(op.input)
    last = op.axis.value.data % len(shape) == len(shape) - 1 if shape else False
    plan = plan_row(shape[-1], et) if last and _rows(shape) > 0 else None
    if plan is None:
        lw.lower_softmax(op)
        return
    rows = _rows(shape)
    out = lw.alloc(op.result.type)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, x = args
        k = _RowKernel(e, plan, rows, shape[:-1])
        r = k.load(x)
        m = k.reduce(r, "max", lambda v: v)
        # exp(x - m) = exp2(x * log2e - m * log2e)
        neg = e.fmul(m, e.const(-LOG2E, f32))
        log2e = e.const(LOG2E, f32)
        ex = [
            [e.op(math.Exp2Op(e.op(math.FmaOp(v, log2e, neg)))) for v in chunk]
            for chunk in r.values
        ]
        s = k.reduce(_Row(ex, r.masks, r.cols, r.col_ok), "sum", lambda v: v)
        inv = e.fdiv(e.const(1.0, f32), s)
        k.store(o_ref, r, [[e.fmul(v, inv) for v in chunk] for chunk in ex], et)

    lw.kernel("softmax", [out, lw.mem(op.input)], plan.group_size, _grid(plan, rows), build)
    lw.env[op.result] = out


def lower_norm(lw: _FunctionLowering, op: g.RMSNormOp | g.LayerNormOp) -> None:
    """``tgraph.rmsnorm`` / ``tgraph.layernorm``: the register kernel on rows
    :func:`plan_row` accepts, else the strided kernel."""
    shape = g.shape_of(op.input)
    et = g.elem_of(op.input)
    w = op.weight
    b = op.bias if isinstance(op, g.LayerNormOp) else None
    params_ok = all(
        p is None or _elem_bytes(g.elem_of(p)) is not None for p in (w, b)
    )
    plan = plan_row(shape[-1], et) if shape and _rows(shape) > 0 and params_ok else None
    if plan is None:
        lw.lower_norm(op)
        return
    rows = _rows(shape)
    n = shape[-1]
    eps = op.eps.value.data
    is_ln = isinstance(op, g.LayerNormOp)
    out = lw.alloc(op.result.type)
    host_args = [out, lw.mem(op.input)]
    if w is not None:
        host_args.append(lw.mem(w))
    if b is not None:
        host_args.append(lw.mem(b))

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, x = args[0], args[1]
        w_ref = args[2] if w is not None else None
        b_ref = args[-1] if b is not None else None
        k = _RowKernel(e, plan, rows, shape[:-1])
        r = k.load(x)
        inv_n = e.const(1.0 / n, f32)
        mean: SSAValue | None = None
        if is_ln:
            mean = e.fmul(k.reduce(r, "sum", lambda v: v), inv_n)
            xs = [[e.fsub(v, mean) for v in chunk] for chunk in r.values]
        else:
            xs = r.values
        sq = k.reduce(_Row(xs, r.masks, r.cols, r.col_ok), "sum", lambda v: e.fmul(v, v))
        inv = e.rsqrt(e.fadd(e.fmul(sq, inv_n), e.const(eps, f32)))
        ys = []
        for c, chunk in enumerate(xs):
            y = [e.fmul(v, inv) for v in chunk]
            if w_ref is not None:
                y = [e.fmul(v, p) for v, p in zip(y, k.param(w_ref, r, c))]
            if b_ref is not None:
                y = [e.fadd(v, p) for v, p in zip(y, k.param(b_ref, r, c))]
            ys.append(y)
        k.store(o_ref, r, ys, et)

    lw.kernel(
        op.name.split(".")[1], host_args, plan.group_size, _grid(plan, rows), build
    )
    lw.env[op.result] = out


def _grid(plan: RowPlan, rows: int) -> list[int]:
    return [cdiv(rows, plan.rows_per_tile), 1, 1]
