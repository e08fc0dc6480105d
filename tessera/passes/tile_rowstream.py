"""Streaming Tile IR kernels for rows too long to keep in registers.

Used by :mod:`tile_rowwise` for last-axis ``tgraph.softmax``, ``tgraph.rmsnorm`` and
``tgraph.layernorm`` on bf16, f16 and f32 rows that :func:`tile_rowwise.plan_row`
does not take (more than 32768 elements, or ragged rows too long for the registers,
such as 50257 or 151936 elements of bf16). Any width works:

* a row is read in 16-byte chunks (the same alignment rule as the register kernels,
  with scalar edges on ragged rows, :class:`tile_rowwise.Edges`): lane ``l`` of the
  ``L`` lanes handles chunks ``l, l + L, ...``, :data:`STREAM_UNROLL` chunks per loop
  step so that several 16-byte loads are in flight;
* the *statistics pass* folds each lane's chunks into running statistics (softmax:
  the running maximum ``m`` and the sum of ``exp(x - m)``, rescaled when ``m`` grows;
  rmsnorm: the sum of squares; layernorm: the sums of ``x - x0`` and ``(x - x0)^2``,
  ``x0`` the row's first element, which keeps the variance free of cancellation for
  rows far from zero), then the tile combines the lanes' statistics with
  ``ttile.reduce`` (a fixed order: deterministic);
* the *write pass* reads the row again, in reverse order of the chunks, so that the
  most recently read part of the row, still in L2, is read first, and writes the
  result. DRAM sees about one read and one write of each element as long as the rows
  in flight fit in L2: rows longer than ``L2_BUDGET / TARGET_TILES`` bytes (about
  160 KB) get tiles of :data:`WIDE_STREAM_LANES` lanes, one per SM.

A row goes to one tile unless there are fewer rows than :data:`TARGET_TILES`: then it
is split into ``S`` segments of whole loop steps, one tile each (a grid of ``rows * S``
tiles), and the two passes become two kernels: the first writes each segment's
statistics to a scratch buffer ``[rows, S, 2]`` (f32), the second has every tile of
the row combine the ``S`` entries in the same fixed order (so all tiles agree and the
result is deterministic, with no atomics) before writing its segment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import MemRefType, f32
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv
from tessera.passes.tile_rowlayout import (
    LOG2E,
    Edges,
    Piece,
    elem_bytes,
    fold,
    load_param,
    load_piece,
    norm_params_ok,
    row_width,
    rows_of,
    store_piece,
)

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

STREAM_LANES = 512
"""Lanes per streaming tile (two tiles per SM at <= 64 registers)."""

WIDE_STREAM_LANES = 1024
"""Lanes per streaming tile for rows so long that :data:`TARGET_TILES` of them would not
fit in :data:`L2_BUDGET` (one tile per SM: half as many rows in flight, so the write
pass still finds its row in L2)."""

L2_BUDGET = 40 << 20
"""Bytes of rows in flight that the write pass can expect to find in L2 (H100: 50 MB)."""

STREAM_UNROLL = 4
"""16-byte chunks each lane reads per loop step."""

TARGET_TILES = 264
"""Rows are split into segments when there are fewer rows than this (two tiles per SM
of an H100)."""

MIN_SEGMENT_STEPS = 2
"""A segment covers at least this many loop steps."""

NEG_BIG = -3.4028234663852886e38
"""The softmax running maximum before any element: the lowest finite f32, so that
rescaling never computes ``-inf + inf`` (a lane or a segment with no element keeps
``(NEG_BIG, 0)``) and a row of scores masked with ``finfo(f32).min`` still has its own
maximum (the differences from the maximum are taken before the ``log2(e)`` scale)."""


@dataclass(frozen=True)
class StreamPlan:
    """How rows of ``n`` elements are streamed."""

    n: int
    width: int
    """Elements per chunk (16 bytes, or less for short rows)."""
    ragged: bool
    lanes: int
    unroll: int
    segments: int
    """Tiles per row."""
    seg_steps: int
    """Loop steps per segment."""

    @property
    def chunks(self) -> int:
        return self.n // self.width

    @property
    def step(self) -> int:
        """Chunks per loop step of a tile."""
        return self.lanes * self.unroll


def plan_stream(n: int, rows: int, element_type: Attribute) -> StreamPlan | None:
    """The streaming layout for ``rows`` rows of ``n`` elements, or None for element
    types other than bf16, f16 and f32."""
    eb = elem_bytes(element_type)
    if eb is None or n < 1 or rows < 1:
        return None
    w, ragged = row_width(n, eb)
    lanes, unroll = STREAM_LANES, STREAM_UNROLL
    if n * eb * TARGET_TILES > L2_BUDGET:
        lanes = WIDE_STREAM_LANES
    steps = cdiv(cdiv(n // w, lanes), unroll)
    segments = 1
    if rows < TARGET_TILES:
        segments = max(1, min(cdiv(TARGET_TILES, rows), steps // MIN_SEGMENT_STEPS, lanes))
    seg_steps = cdiv(steps, segments)
    segments = cdiv(steps, seg_steps)
    return StreamPlan(n, w, ragged, lanes, unroll, segments, seg_steps)


class StreamTile:
    """One tile's view of its row and segment."""

    def __init__(self, e: KernelEmitter, plan: StreamPlan, lead: Sequence[int]):
        self.e, self.p = e, plan
        t = e.tile_id("x")
        if plan.segments > 1:
            self.row: Idx = e.div(t, plan.segments)
            self.seg: Idx = e.rem(t, plan.segments)
        else:
            self.row, self.seg = t, 0
        self.lane = e.local_id()
        self.lead = e.unravel(self.row, lead) if lead else []
        self.edges = Edges(e, plan.n, plan.width, plan.ragged, self.row, self.lane)
        self.first = e.eq(self.seg, 0) if plan.segments > 1 else None

    def edge(self, x: SSAValue) -> Piece | None:
        """The lane's edge element (ragged rows; read by the first segment only)."""
        ed = self.edges
        if ed.col is None:
            return None
        ok = self.e.and_(self.first, ed.inside)
        return load_piece(self.e, x, self.lead, ed.col, 1, ok, ok, False)

    def stream(
        self,
        x: SSAValue,
        carried: list[SSAValue],
        body: Callable[[KernelEmitter, list[Piece], list[SSAValue]], list[SSAValue]],
        reverse: bool = False,
    ) -> list[SSAValue]:
        """``body(e, pieces, carried) -> carried`` over the segment's loop steps, each
        with the lane's :data:`STREAM_UNROLL` chunks (masked past the row's end)."""
        p, ed = self.p, self.edges
        seg0 = self.e.mul(self.seg, p.seg_steps)

        def one(b: KernelEmitter, s: Idx, c: list[SSAValue]) -> list[SSAValue]:
            if reverse:
                s = b.sub(p.seg_steps - 1, s)
            base = b.mul(b.add(seg0, s), p.step)
            pieces = []
            for u in range(p.unroll):
                chunk = b.add(base, b.add(self.lane, u * p.lanes))
                ok = b.lt(chunk, ed.nb)
                col = ed.chunk_col(b, chunk)
                pieces.append(load_piece(b, x, self.lead, col, p.width, ok, ok, True))
            return body(b, pieces, c)

        if p.seg_steps == 1:
            return one(self.e, 0, carried)
        return self.e.for_(0, p.seg_steps, 1, carried, lambda b, s, c: one(b, s, c))

    def store(self, out: SSAValue, pc: Piece, ys: list[SSAValue], et: Attribute) -> None:
        store_piece(self.e, out, self.lead, pc, ys, et)


def stream_kernels(
    lw: _FunctionLowering,
    tag: str,
    plan: StreamPlan,
    rows: int,
    lead: Sequence[int],
    out: SSAValue,
    ins: list[SSAValue],
    stats: Callable[[KernelEmitter, StreamTile, SSAValue], list[SSAValue]],
    combine: Callable[[KernelEmitter, list[SSAValue], SSAValue | None], list[SSAValue]],
    write: Callable[[KernelEmitter, StreamTile, list[SSAValue], list[SSAValue]], None],
) -> None:
    """Emit the streaming kernel(s).

    ``stats(e, s, x)`` gives the lane's statistics of its share of the segment;
    ``combine(e, lane_stats, valid)`` combines them over the tile (``valid``: the lane's
    statistics count; else the lane holds no entry), every lane getting the result;
    ``write(e, s, refs, combined)`` writes the segment (``refs``: out, then ``ins``)."""
    grid = [rows * plan.segments, 1, 1]
    if plan.segments == 1:
        def build(e: KernelEmitter, args: list[SSAValue]) -> None:
            s = StreamTile(e, plan, lead)
            write(e, s, args, combine(e, stats(e, s, args[1]), None))

        lw.kernel(tag, [out, *ins], plan.lanes, grid, build)
        return
    part = lw.alloc(MemRefType(f32, [rows, plan.segments, 2]))

    def build_stats(e: KernelEmitter, args: list[SSAValue]) -> None:
        pref, x = args[0], args[1]
        s = StreamTile(e, plan, lead)
        st = combine(e, stats(e, s, x), None)
        lane0 = e.eq(s.lane, 0)
        for i, v in enumerate(st):
            e.store(v, pref, [s.row, s.seg, i], lane0)

    def build_write(e: KernelEmitter, args: list[SSAValue]) -> None:
        pref, rest = args[0], args[1:]
        s = StreamTile(e, plan, lead)
        ok = e.lt(s.lane, plan.segments)
        mine = [e.load(pref, [s.row, s.lane, i], ok, e.const(0.0, f32)) for i in range(2)]
        write(e, s, rest, combine(e, mine, ok))

    lw.kernel(f"{tag}_stats", [part, ins[0]], plan.lanes, grid, build_stats)
    lw.kernel(tag, [part, out, *ins], plan.lanes, grid, build_write)


def _exp2(e: KernelEmitter, v: SSAValue) -> SSAValue:
    return e.op(math.Exp2Op(v))


def _online_update(b: KernelEmitter, vals: list[SSAValue], m: SSAValue, s: SSAValue) -> list:
    """Running (max, sum of exp(x - max)) after ``vals`` (masked values are -inf)."""
    mb = vals[0]
    for v in vals[1:]:
        mb = b.fmax(mb, v)
    mn = b.fmax(m, mb)
    l2e = b.const(LOG2E, f32)
    # (m - mn) first: exactly 0 when the maximum did not move; (v - mn) before the scale,
    # since mn log2e overflows for scores near -FLT_MAX (finfo.min masks)
    acc = b.fmul(s, _exp2(b, b.fmul(b.fsub(m, mn), l2e)))
    for v in vals:
        acc = b.fadd(acc, _exp2(b, b.fmul(b.fsub(v, mn), l2e)))
    return [mn, acc]


def _masked(b: KernelEmitter, pieces: Sequence[Piece]) -> list[SSAValue]:
    ninf = b.const(float("-inf"), f32)
    out_: list[SSAValue] = []
    for pc in pieces:
        out_ += [v if pc.mask is None else b.vselect(pc.mask, v, ninf) for v in pc.values]
    return out_


def _online_stats(e: KernelEmitter, s: StreamTile, x: SSAValue) -> list[SSAValue]:
    """The lane's running (max, sum of exp(x - max)) over its share of the segment."""
    m, acc = e.const(NEG_BIG, f32), e.const(0.0, f32)
    edge = s.edge(x)
    if edge is not None:
        m, acc = _online_update(e, _masked(e, [edge]), m, acc)
    return s.stream(x, [m, acc], lambda b, pcs, c: _online_update(b, _masked(b, pcs), *c))


def _online_combine(e: KernelEmitter, st: list[SSAValue], valid: SSAValue | None) -> list:
    """The tile's (max, sum of exp(x - max)) from its lanes' (``valid``: lanes that hold
    an entry)."""
    m, acc = st
    if valid is not None:
        m = e.vselect(valid, m, e.const(NEG_BIG, f32))
    mx = e.op(tt.ReduceOp(m, "max", "group"))
    scaled = e.fmul(acc, _exp2(e, e.fmul(e.fsub(m, mx), e.const(LOG2E, f32))))
    total = e.op(tt.ReduceOp(scaled, "sum", "group"))
    return [mx, total]


def lower_softmax(lw: _FunctionLowering, op: g.SoftmaxOp) -> bool:
    """Last-axis ``tgraph.softmax`` as streaming kernels; False when the element type
    is not handled."""
    shape = g.shape_of(op.input)
    et = g.elem_of(op.input)
    rows = rows_of(shape)
    plan = plan_stream(shape[-1], rows, et)
    if plan is None:
        return False
    out = lw.alloc(op.result.type)
    log2e = LOG2E
    stats, combine = _online_stats, _online_combine

    def write(e: KernelEmitter, s: StreamTile, refs: list[SSAValue], st: list[SSAValue]) -> None:
        o_ref, x = refs
        mx, total = st
        inv = e.fdiv(e.const(1.0, f32), total)

        def ys(b: KernelEmitter, pc: Piece) -> list[SSAValue]:
            l2e = b.const(log2e, f32)
            return [b.fmul(_exp2(b, b.fmul(b.fsub(v, mx), l2e)), inv) for v in pc.values]

        edge = s.edge(x)
        if edge is not None:
            s.store(o_ref, edge, ys(e, edge), et)

        def body(b: KernelEmitter, pcs: list[Piece], c: list[SSAValue]) -> list[SSAValue]:
            for pc in pcs:
                store_piece(b, o_ref, s.lead, pc, ys(b, pc), et)
            return []

        s.stream(x, [], body, reverse=True)

    stream_kernels(lw, "softmax", plan, rows, shape[:-1], out, [lw.mem(op.input)],
             stats, combine, write)
    lw.env[op.result] = out
    return True


LSE_STREAM_MIN = 1024
"""Last-axis ``tgraph.logsumexp`` rows of at least this many elements take the one-pass
streaming kernel (:func:`lower_logsumexp`); shorter ones the strided two-pass kernel."""


def lower_logsumexp(lw: _FunctionLowering, op: g.LogSumExpOp) -> bool:
    """Last-axis ``tgraph.logsumexp`` over long rows in one pass over memory: each lane
    keeps a running ``(max, sum of exp(x - max))`` of its chunks, the tile combines them
    (:func:`_online_combine`) and its first lane writes ``max + log(sum)`` in the result's
    type (which may be wider than the input's: f32 from bf16 logits). A row of ``-inf``
    gives ``-inf``; a row holding ``+inf`` gives ``+inf`` (as torch). False when the op
    is not such a reduction (the caller lowers it)."""
    shape = g.shape_of(op.input)
    if not shape or op.axis_list() != [len(shape) - 1] or shape[-1] < LSE_STREAM_MIN:
        return False
    rows = rows_of(shape)
    plan = plan_stream(shape[-1], rows, g.elem_of(op.input))
    if plan is None:
        return False
    rt = g.elem_of(op.result)
    keep = op.keepdims is not None
    out = lw.alloc(op.result.type)

    def write(e: KernelEmitter, s: StreamTile, refs: list[SSAValue], st: list[SSAValue]) -> None:
        mx, total = st
        inf = e.const(float("inf"), f32)
        y = e.fadd(mx, e.op(math.LogOp(total)))
        y = e.vselect(e.op(arith.CmpfOp(mx, inf, "oeq")), inf, y)
        idx = [*s.lead, 0] if keep else list(s.lead)
        e.store(e.convert(y, rt), refs[0], idx, e.and_(s.first, e.eq(s.lane, 0)))

    stream_kernels(lw, "logsumexp", plan, rows, shape[:-1], out, [lw.mem(op.input)],
                   _online_stats, _online_combine, write)
    lw.env[op.result] = out
    return True


def lower_norm(lw: _FunctionLowering, op: g.RMSNormOp | g.LayerNormOp) -> bool:
    """``tgraph.rmsnorm`` / ``tgraph.layernorm`` as streaming kernels; False when an
    element type is not handled."""
    shape = g.shape_of(op.input)
    et = g.elem_of(op.input)
    rows = rows_of(shape)
    plan = plan_stream(shape[-1], rows, et) if norm_params_ok(op) else None
    if plan is None:
        return False
    n = shape[-1]
    eps = op.eps.value.data
    is_ln = isinstance(op, g.LayerNormOp)
    w = op.weight
    b_ = op.bias if isinstance(op, g.LayerNormOp) else None
    out = lw.alloc(op.result.type)
    ins = [lw.mem(op.input)]
    if w is not None:
        ins.append(lw.mem(w))
    if b_ is not None:
        ins.append(lw.mem(b_))

    def shift(e: KernelEmitter, s: StreamTile, x: SSAValue) -> SSAValue | None:
        """The row's first element (layernorm's shift), read by every lane."""
        if not is_ln:
            return None
        return e.convert(e.load(x, [*s.lead, 0]), f32)

    def sums(e: KernelEmitter, pieces: Sequence[Piece], x0: SSAValue | None) -> list:
        if x0 is not None:
            pieces = [pc.like([e.fsub(v, x0) for v in pc.values]) for pc in pieces]
        s1 = fold(e, pieces, "sum", lambda v: v) if is_ln else e.const(0.0, f32)
        s2 = fold(e, pieces, "sum", lambda v: e.fmul(v, v))
        return [s1, s2]

    def stats(e: KernelEmitter, s: StreamTile, x: SSAValue) -> list[SSAValue]:
        x0 = shift(e, s, x)
        init = [e.const(0.0, f32), e.const(0.0, f32)]
        edge = s.edge(x)
        if edge is not None:
            init = sums(e, [edge], x0)

        def body(b: KernelEmitter, pcs: list[Piece], c: list[SSAValue]) -> list[SSAValue]:
            s1, s2 = sums(b, pcs, x0)
            return [b.fadd(c[0], s1), b.fadd(c[1], s2)]

        return s.stream(x, init, body)

    def combine(e: KernelEmitter, st: list[SSAValue], valid: SSAValue | None) -> list:
        return [e.op(tt.ReduceOp(v, "sum", "group")) for v in st]

    def write(e: KernelEmitter, s: StreamTile, refs: list[SSAValue], st: list[SSAValue]) -> None:
        o_ref, x = refs[0], refs[1]
        w_ref = refs[2] if w is not None else None
        b_ref = refs[-1] if b_ is not None else None
        inv_n = e.const(1.0 / n, f32)
        s1, s2 = (e.fmul(v, inv_n) for v in st)
        if is_ln:
            x0 = shift(e, s, x)
            assert x0 is not None
            var = e.fmax(e.fsub(s2, e.fmul(s1, s1)), e.const(0.0, f32))
            mean = e.fadd(x0, s1)
        else:
            var, mean = s2, None
        inv = e.rsqrt(e.fadd(var, e.const(eps, f32)))

        def ys(b: KernelEmitter, pc: Piece) -> list[SSAValue]:
            vals = [b.fsub(v, mean) for v in pc.values] if mean is not None else pc.values
            y = [b.fmul(v, inv) for v in vals]
            if w_ref is not None:
                y = [b.fmul(v, q) for v, q in zip(y, load_param(b, w_ref, pc, plan.ragged))]
            if b_ref is not None:
                y = [b.fadd(v, q) for v, q in zip(y, load_param(b, b_ref, pc, plan.ragged))]
            return y

        edge = s.edge(x)
        if edge is not None:
            s.store(o_ref, edge, ys(e, edge), et)

        def body(b: KernelEmitter, pcs: list[Piece], c: list[SSAValue]) -> list[SSAValue]:
            for pc in pcs:
                store_piece(b, o_ref, s.lead, pc, ys(b, pc), et)
            return []

        s.stream(x, [], body, reverse=True)

    stream_kernels(lw, op.name.split(".")[1], plan, rows, shape[:-1], out, ins, stats, combine, write)
    lw.env[op.result] = out
    return True
