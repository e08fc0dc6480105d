"""Register-resident Tile IR kernels for last-axis softmax, rmsnorm and layernorm.

Used by ``lower-graph-to-tile`` for ``tgraph.softmax`` (last axis), ``tgraph.rmsnorm``
and ``tgraph.layernorm`` on bf16, f16 and f32 rows. Every element of a row is read
from global memory once and written once:

* a row of ``n`` elements is cut into chunks of ``w`` elements read with one
  ``ttile.load_vector`` and written with one ``ttile.store_vector``. When ``n`` is a
  multiple of the 16-byte width (``bf16 x 8``, ``f32 x 4``), ``w`` is that width and
  every chunk is aligned. Otherwise (*ragged* rows, such as a vocabulary of 50257) the
  chunks still have the 16-byte width but start at the row's first aligned element:
  the ``head`` elements before it and the ``tail`` after the last whole chunk (fewer
  than ``2 w`` in all, :class:`tile_rowlayout.Edges`) are read one element each by the
  first lanes.
  Short ragged rows (under ``4 w``) use the largest width dividing ``n`` instead;
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
than 32768 elements) go to the streaming kernels of :mod:`tile_rowstream`; softmax
over another axis and other element types are not handled here: :func:`plan_row`
returns ``None`` and the caller uses the strided kernels of ``lower_graph_to_tile``.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import MemRefType, f32
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes import tile_rowstream
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv
from tessera.passes.tile_rowlayout import (
    LOG2E,
    Edges,
    Piece,
    elem_bytes,
    fold,
    load_param,
    load_piece,
    norm_bwd_args,
    norm_params_ok,
    row_width,
    rows_of,
    store_piece,
)

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
    ragged: bool = False
    """``n`` is not a multiple of ``width``: chunks start at the row's first aligned
    element and the edges are read one element at a time (see :class:`Edges`)."""

    @property
    def chunks(self) -> int:
        """Whole chunks in a row (at most; a ragged row has this many or one fewer)."""
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


def plan_row(n: int, element_type: Attribute) -> RowPlan | None:
    """The register-resident layout for rows of ``n`` elements of ``element_type``, or
    ``None`` when this module does not handle them (see the module docstring)."""
    eb = elem_bytes(element_type)
    if eb is None or n < 1:
        return None
    w, ragged = row_width(n, eb)
    chunks = n // w
    if n <= WARP_ROW_LIMIT:
        plan = RowPlan(n, w, tt.WARP_SIZE, WARP_ROWS_PER_TILE, ragged)
    else:
        lanes = 128
        while lanes < tt.MAX_GROUP_SIZE and cdiv(chunks, lanes) * w > VALUES_PER_LANE_TARGET:
            lanes *= 2
        plan = RowPlan(n, w, lanes, 1, ragged)
    if plan.per_lane * w > MAX_VALUES_PER_LANE:
        return None
    return plan


class RowKernel:
    """Emits the shared parts of the register row kernels for one :class:`RowPlan`."""

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
        self.edges = Edges(e, plan.n, plan.width, plan.ragged, self.row, self.lane)

    def load(self, x: SSAValue, raw: bool = False) -> list[Piece]:
        """This lane's pieces of the row of ``x`` (as f32; in ``x``'s type with ``raw``)."""
        e, p, ed = self.e, self.plan, self.edges
        pieces = []
        # a ragged row may have one chunk fewer than p.chunks
        sure = p.chunks - 1 if p.ragged else p.chunks
        for c in range(p.per_lane):
            chunk = e.add(self.lane, c * p.lanes)
            inside = None if (c + 1) * p.lanes <= sure else e.lt(chunk, ed.nb)
            ok = e.and_(self.row_ok, inside)
            col = ed.chunk_col(e, chunk)
            pieces.append(load_piece(e, x, self.lead, col, p.width, ok, inside, True, raw))
        if ed.col is not None:
            ok = e.and_(self.row_ok, ed.inside)
            pieces.append(load_piece(e, x, self.lead, ed.col, 1, ok, ed.inside, False, raw))
        return pieces

    def reduce(self, pieces: Sequence[Piece], kind: str, term) -> SSAValue:
        """``kind`` over the row of ``term(value)``; masked pieces contribute the identity."""
        acc = fold(self.e, pieces, kind, term)
        return self.e.op(tt.ReduceOp(acc, kind, self.plan.scope))

    def store(self, out: SSAValue, pieces: Sequence[Piece], ys: list[list[SSAValue]],
              et: Attribute) -> None:
        for p, y in zip(pieces, ys):
            store_piece(self.e, out, self.lead, p, y, et)


def lower_logsumexp(lw: _FunctionLowering, op: g.LogSumExpOp) -> None:
    """``tgraph.logsumexp``: long last-axis rows take the one-pass streaming kernel
    (:func:`tile_rowstream.lower_logsumexp`); otherwise one tile per output element (its
    slice strided over the lanes), two passes over the slice: ``m = max x``, then ``s = sum exp(x - m)``; the result is
    ``m + log s`` with ``m`` taken as 0 where it is infinite (so an all ``-inf`` or empty
    slice gives ``-inf`` and a ``+inf`` element ``+inf``, as torch). Computed in f32 (f64
    for f64 tensors), so no term overflows: every ``exp`` argument is at most 0."""
    from tessera.passes.lower_graph_to_tile import _accum_type
    from tessera.passes.lower_graph_to_tile import _Row as _Slice

    if tile_rowstream.lower_logsumexp(lw, op):  # long last-axis rows: one pass
        return
    t = g.elem_of(op.input)
    rt = g.elem_of(op.result)
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
        e.store(e.convert(y, rt), o_ref, oidx, mask=e.eq(lane, 0))

    lw.kernel("logsumexp", [out, lw.mem(op.input)], group, [prod(row.kept), 1, 1], build)
    lw.env[op.result] = out


def lower_softmax(lw: _FunctionLowering, op: g.SoftmaxOp) -> None:
    """``tgraph.softmax``: the register kernel for last-axis softmax on rows
    :func:`plan_row` accepts, the streaming kernels on longer rows, else the strided
    three-pass kernel."""
    shape = g.shape_of(op.input)
    et = g.elem_of(op.input)
    last = op.axis.value.data % len(shape) == len(shape) - 1 if shape else False
    ok = last and rows_of(shape) > 0
    plan = plan_row(shape[-1], et) if ok else None
    if plan is None:
        if not (ok and tile_rowstream.lower_softmax(lw, op)):
            lw.lower_softmax(op)
        return
    rows = rows_of(shape)
    out = lw.alloc(op.result.type)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, x = args
        k = RowKernel(e, plan, rows, shape[:-1])
        r = k.load(x)
        m = k.reduce(r, "max", lambda v: v)
        # exp(x - m) = exp2((x - m) log2e): the difference first, since m log2e
        # overflows for a row of masked scores near -FLT_MAX (finfo.min masks)
        log2e = e.const(LOG2E, f32)
        ex = [
            p.like([e.op(math.Exp2Op(e.fmul(e.fsub(v, m), log2e))) for v in p.values])
            for p in r
        ]
        s = k.reduce(ex, "sum", lambda v: v)
        inv = e.fdiv(e.const(1.0, f32), s)
        k.store(o_ref, r, [[e.fmul(v, inv) for v in p.values] for p in ex], et)

    lw.kernel("softmax", [out, lw.mem(op.input)], plan.group_size, _grid(plan, rows), build)
    lw.env[op.result] = out


def lower_norm(lw: _FunctionLowering, op: g.NormOp) -> None:
    """``tgraph.rmsnorm`` / ``tgraph.layernorm`` and their training forms
    ``rmsnorm_fwd`` / ``layernorm_fwd``: the register kernel on rows :func:`plan_row`
    accepts, the streaming kernels on longer rows (not for the training forms), else the
    strided kernel. A training form's kernel also stores each row's statistics (the
    first lane of the row): ``rstd``, and ``layernorm_fwd``'s mean."""
    shape = g.shape_of(op.input)
    et = g.elem_of(op.input)
    w = op.weight
    is_ln = isinstance(op, g.LayerNormOp | g.LayerNormFwdOp)
    stats = op.ROW_STATS
    b = op.bias if is_ln else None
    ok = bool(shape) and rows_of(shape) > 0 and norm_params_ok(op)
    plan = plan_row(shape[-1], et) if ok else None
    if plan is None:
        if stats or not (ok and tile_rowstream.lower_norm(lw, op)):
            lw.lower_norm(op)
        return
    rows = rows_of(shape)
    n = shape[-1]
    eps = op.eps.value.data
    out = lw.alloc(op.result.type)
    host_args = [out, lw.mem(op.input)]
    if w is not None:
        host_args.append(lw.mem(w))
    if b is not None:
        host_args.append(lw.mem(b))
    stat_bufs = [lw.alloc(getattr(op, name).type) for name in stats]
    n_params = len(host_args) - 2
    host_args += stat_bufs

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, x = args[0], args[1]
        params = args[2:2 + n_params]
        w_ref = params[0] if w is not None else None
        b_ref = params[-1] if b is not None else None
        k = RowKernel(e, plan, rows, shape[:-1])
        r = k.load(x)
        inv_n = e.const(1.0 / n, f32)
        mean = None
        if is_ln:
            mean = e.fmul(k.reduce(r, "sum", lambda v: v), inv_n)
            xs = [p.like([e.fsub(v, mean) for v in p.values]) for p in r]
        else:
            xs = r
        sq = k.reduce(xs, "sum", lambda v: e.fmul(v, v))
        inv = e.rsqrt(e.fadd(e.fmul(sq, inv_n), e.const(eps, f32)))
        ys = []
        for p in xs:
            y = [e.fmul(v, inv) for v in p.values]
            if w_ref is not None:
                y = [e.fmul(v, q) for v, q in zip(y, load_param(e, w_ref, p, plan.ragged))]
            if b_ref is not None:
                y = [e.fadd(v, q) for v, q in zip(y, load_param(e, b_ref, p, plan.ragged))]
            ys.append(y)
        k.store(o_ref, r, ys, et)
        if stats:
            first = e.and_(k.row_ok, e.eq(k.lane, 0))
            values = {"mean": mean, "rstd": inv}
            for ref, name in zip(args[2 + n_params:], stats):
                e.store(values[name], ref, [*k.lead, 0], mask=first)

    lw.kernel(
        op.name.split(".")[1], host_args, plan.group_size, _grid(plan, rows), build
    )
    lw.env[op.result] = out
    for name, buf in zip(stats, stat_bufs):
        lw.env[getattr(op, name)] = buf


def lower_norm_bwd(lw: _FunctionLowering, op: g.LayerNormBwdOp | g.RMSNormBwdOp) -> None:
    """``tgraph.layernorm_bwd`` / ``tgraph.rmsnorm_bwd``: the register kernel on rows
    :func:`plan_row` accepts (``dy`` and ``x`` read once each, the row's two sums on
    registers, ``dx`` written once, the residual added when there is one), else the
    strided kernel."""
    shape = g.shape_of(op.input)
    et = g.elem_of(op.input)
    ok = bool(shape) and rows_of(shape) > 0 and norm_params_ok(op)
    plan = plan_row(shape[-1], et) if ok else None
    if plan is None:
        lw.lower_norm_bwd(op)
        return
    rows = rows_of(shape)
    n = shape[-1]
    out, host_args, named = norm_bwd_args(lw, op)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        a = named(args)
        o_ref, w_ref, res_ref = a.out, a.weight, a.residual
        k = RowKernel(e, plan, rows, shape[:-1])
        xs, dys = k.load(a.x), k.load(a.dy)
        sidx = [e.index(i) for i in (*k.lead, 0)]
        rstd = e.op(tt.LoadOp(a.rstd, sidx, k.row_ok))
        mean = e.op(tt.LoadOp(a.mean, sidx, k.row_ok)) if a.mean is not None else None
        xhat = [p.like([e.fmul(e.fsub(v, mean) if mean is not None else v, rstd)
                        for v in p.values]) for p in xs]
        gs = [p if w_ref is None else p.like(
            [e.fmul(v, q) for v, q in zip(p.values, load_param(e, w_ref, p, plan.ragged))])
            for p in dys]
        inv_n = e.const(1.0 / n, f32)
        prods = [pg.like([e.fmul(a, b) for a, b in zip(pg.values, px.values)])
                 for pg, px in zip(gs, xhat)]
        m2 = e.fmul(k.reduce(prods, "sum", lambda v: v), inv_n)
        m1 = e.fmul(k.reduce(gs, "sum", lambda v: v), inv_n) if mean is not None else None
        ys = []
        for pg, px in zip(gs, xhat):
            y = [e.fsub(a, e.fmul(b, m2)) for a, b in zip(pg.values, px.values)]
            if m1 is not None:
                y = [e.fsub(v, m1) for v in y]
            ys.append([e.fmul(v, rstd) for v in y])
        if res_ref is not None:  # dx rounded to its type first, as a separate add
            ys = [[e.fadd(e.convert(e.convert(v, et), f32), q) for v, q in zip(y, p.values)]
                  for y, p in zip(ys, k.load(res_ref))]
        k.store(o_ref, xs, ys, et)

    lw.kernel(op.name.split(".")[1], host_args, plan.group_size, _grid(plan, rows), build)
    lw.env[op.result] = out


def lower_row_moments(lw: _FunctionLowering, op: g.RowMomentsOp) -> None:
    """``tgraph.row_moments``: the register kernel reads each row once, folds its sum to
    the mean, then the squared deviations of the values it holds to ``m2``; the row's
    first lane stores both. Rows too long for the registers take the strided kernel
    (:func:`_lower_row_moments_strided`: two passes over the row)."""
    from tessera.passes.tile_datamove import reshape_view

    shape = g.shape_of(op.input)
    kept = list(shape[: len(shape) - op.dims.value.data])
    rows, n = prod(kept), prod(shape[len(kept):])
    plan = plan_row(n, g.elem_of(op.input)) if rows > 0 else None
    if plan is None:
        _lower_row_moments_strided(lw, op)
        return
    x = reshape_view(lw, lw.mem(op.input), MemRefType(g.elem_of(op.input), [rows, n]))
    mean_buf, m2_buf = lw.alloc(op.mean.type), lw.alloc(op.m2.type)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        mean_ref, m2_ref, x_ref = args
        k = RowKernel(e, plan, rows, [rows])
        r = k.load(x_ref)
        mean = e.fmul(k.reduce(r, "sum", lambda v: v), e.const(1.0 / n, f32))
        ds = [p.like([e.fsub(v, mean) for v in p.values]) for p in r]
        m2 = k.reduce(ds, "sum", lambda v: e.fmul(v, v))
        first = e.and_(k.row_ok, e.eq(k.lane, 0))
        idx = e.unravel(k.row, kept) if kept else []
        e.store(mean, mean_ref, idx, mask=first)
        e.store(m2, m2_ref, idx, mask=first)

    lw.kernel("row_moments", [mean_buf, m2_buf, x], plan.group_size, _grid(plan, rows), build)
    lw.env[op.mean] = mean_buf
    lw.env[op.m2] = m2_buf


def _lower_row_moments_strided(lw: _FunctionLowering, op: g.RowMomentsOp) -> None:
    """``tgraph.row_moments`` on rows of any length: a tile per row, its lanes strided over
    the row, the sum for the mean, then a second pass for the squared deviations."""
    from tessera.passes.lower_graph_to_tile import _Row as _Slice

    shape = list(g.shape_of(op.input))
    k = len(shape) - op.dims.value.data
    row = _Slice(shape, list(range(k, len(shape))))
    n = prod(shape[k:])
    mean_buf, m2_buf = lw.alloc(op.mean.type), lw.alloc(op.m2.type)
    group, _ = row.group()

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        mean_ref, m2_ref, x = args
        o = e.tile_id("x")
        lane = e.local_id()

        def load(ie: KernelEmitter, idx: list[Idx], ok: SSAValue) -> SSAValue:
            return ie.convert(ie.load(x, idx, mask=ok), f32)

        mean = e.fmul(lw.row_reduce(e, row, o, lane, "sum", f32, load), e.const(1.0 / n, f32))

        def square(ie: KernelEmitter, idx: list[Idx], ok: SSAValue) -> SSAValue:
            d = ie.fsub(load(ie, idx, ok), mean)
            return ie.fmul(d, d)

        m2 = lw.row_reduce(e, row, o, lane, "sum", f32, square)
        oidx = e.unravel(o, row.kept)
        first = e.eq(lane, 0)
        e.store(mean, mean_ref, oidx, mask=first)
        e.store(m2, m2_ref, oidx, mask=first)

    lw.kernel("row_moments", [mean_buf, m2_buf, lw.mem(op.input)], group,
              [prod(row.kept), 1, 1], build)
    lw.env[op.mean] = mean_buf
    lw.env[op.m2] = m2_buf


def _grid(plan: RowPlan, rows: int) -> list[int]:
    return [cdiv(rows, plan.rows_per_tile), 1, 1]
