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
  than ``2 w`` in all, :class:`Edges`) are read one element each by the first lanes.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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

RAGGED_MIN_CHUNKS = 4
"""A ragged row (``n`` not a multiple of the 16-byte width) of at least this many
16-byte chunks keeps 16-byte chunks (with scalar edges); a shorter one takes the
largest width dividing ``n``."""

LOG2E = 1.4426950408889634


def elem_bytes(t: Attribute) -> int | None:
    """Bytes of a row element type the row kernels handle (bf16, f16, f32), else None."""
    if isinstance(t, BFloat16Type | Float16Type):
        return 2
    if isinstance(t, Float32Type):
        return 4
    return None


def row_width(n: int, eb: int) -> tuple[int, bool]:
    """``(w, ragged)``: the elements per vector access for rows of ``n`` elements of
    ``eb`` bytes, and whether the row needs scalar edges (``n % w != 0``)."""
    full = 16 // eb
    if n % full == 0:
        return full, False
    if n >= RAGGED_MIN_CHUNKS * full:
        return full, True
    w = full
    while n % w:
        w //= 2
    return w, False


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


class Edges:
    """Where the aligned chunks of row ``row`` (flat offset ``row * n``) start and end.

    For a row that is not ragged, ``head = 0`` and ``nb = n / w`` (Python ints). For a
    ragged row, ``head = (-row * n) mod w`` elements come before the first chunk, ``nb``
    chunks follow, and the ``count = n - nb * w < 2 w`` edge elements (head, then the
    tail after the chunks) are read by lanes ``0 .. count - 1``, one each: lane ``l``
    reads column ``l`` when ``l < head``, else ``l + nb * w``.
    """

    def __init__(self, e: KernelEmitter, n: int, w: int, ragged: bool, row: Idx, lane: Idx):
        self.n, self.w = n, w
        if not ragged:
            self.head: Idx = 0
            self.nb: Idx = n // w
            self.col: Idx | None = None
            self.inside: SSAValue | None = None
            return
        flat_mod = e.rem(e.mul(row, n % w), w)
        self.head = e.rem(e.sub(w, flat_mod), w)
        self.nb = e.div(e.sub(n, self.head), w)
        count = e.sub(n, e.mul(self.nb, w))
        self.inside = e.lt(lane, count)
        self.col = e.select(e.lt(lane, self.head), lane, e.add(lane, e.mul(self.nb, w)))

    def chunk_col(self, e: KernelEmitter, chunk: Idx) -> Idx:
        """The column of the first element of chunk ``chunk``."""
        return e.add(self.head, e.mul(chunk, self.w))


@dataclass
class Piece:
    """Consecutive elements of a row held by one lane: a chunk, or one edge element."""

    values: list[SSAValue]
    """The elements as f32 (``width`` of them for a chunk, one for an edge)."""
    mask: SSAValue | None
    """``None`` when statically valid, else an i1 (row and piece in range)."""
    col: Idx
    """The column of its first element."""
    col_ok: SSAValue | None
    """The piece lies inside the row (``None``: always)."""
    vector: bool
    """Read with ``ttile.load_vector`` (a chunk) rather than ``ttile.load``."""

    def like(self, values: list[SSAValue]) -> Piece:
        return Piece(values, self.mask, self.col, self.col_ok, self.vector)


def load_piece(
    e: KernelEmitter, ref: SSAValue, lead: Sequence[Idx], col: Idx, width: int,
    mask: SSAValue | None, col_ok: SSAValue | None, vector: bool,
) -> Piece:
    """Read ``width`` elements (a vector) or one element of ``ref[*lead, col]`` as f32."""
    idx = [e.index(i) for i in (*lead, col)]
    if vector:
        v = e.op(tt.LoadVectorOp(ref, idx, width, mask))
        vals = [e.convert(e.extract(v, j), f32) for j in range(width)]
    else:
        vals = [e.convert(e.op(tt.LoadOp(ref, idx, mask)), f32)]
    return Piece(vals, mask, col, col_ok, vector)


def store_piece(
    e: KernelEmitter, out: SSAValue, lead: Sequence[Idx], p: Piece, ys: list[SSAValue],
    et: Attribute,
) -> None:
    """Write ``ys`` (f32) over piece ``p`` of ``out``, converted to ``et``."""
    idx = [e.index(i) for i in (*lead, p.col)]
    if not p.vector:
        e.store(e.convert(ys[0], et), out, idx, p.mask)
        return
    v = e.const(0.0, VectorType(et, [len(ys)]))
    for j, y in enumerate(ys):
        v = e.insert(e.convert(y, et), v, j)
    e.emit(tt.StoreVectorOp(v, out, idx, p.mask))


def load_param(e: KernelEmitter, ref: SSAValue, p: Piece, ragged: bool) -> list[SSAValue]:
    """The columns of piece ``p`` of a 1-D parameter (weight, bias) as f32. On a ragged
    row a chunk is not aligned in the parameter: its elements are read one at a time."""
    if not p.vector:
        return load_piece(e, ref, [], p.col, 1, p.col_ok, p.col_ok, False).values
    w = len(p.values)
    if not ragged:
        return load_piece(e, ref, [], p.col, w, p.col_ok, p.col_ok, True).values
    return [
        load_piece(e, ref, [], e.add(p.col, j), 1, p.col_ok, p.col_ok, False).values[0]
        for j in range(w)
    ]


IDENTITY = {"sum": 0.0, "max": -pymath.inf, "min": pymath.inf}
"""The identity of each combining kind."""


def combine(e: KernelEmitter, kind: str, a: SSAValue, b: SSAValue) -> SSAValue:
    """``a kind b`` (sum, max or min) of two f32 values."""
    if kind == "max":
        return e.fmax(a, b)
    if kind == "min":
        return e.op(arith.MinimumfOp(a, b))
    return e.fadd(a, b)


def fold(
    e: KernelEmitter, pieces: Sequence[Piece], kind: str, term: Callable[[SSAValue], SSAValue]
) -> SSAValue:
    """This lane's ``kind`` of ``term(value)`` over ``pieces``; masked pieces give the
    identity."""
    ident = IDENTITY[kind]
    acc: SSAValue | None = None
    for p in pieces:
        part: SSAValue | None = None
        for x in p.values:
            t = term(x)
            part = t if part is None else combine(e, kind, part, t)
        assert part is not None
        if p.mask is not None:
            part = e.vselect(p.mask, part, e.const(ident, f32))
        acc = part if acc is None else combine(e, kind, acc, part)
    assert acc is not None
    return acc


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

    def load(self, x: SSAValue) -> list[Piece]:
        e, p, ed = self.e, self.plan, self.edges
        pieces = []
        # a ragged row may have one chunk fewer than p.chunks
        sure = p.chunks - 1 if p.ragged else p.chunks
        for c in range(p.per_lane):
            chunk = e.add(self.lane, c * p.lanes)
            inside = None if (c + 1) * p.lanes <= sure else e.lt(chunk, ed.nb)
            ok = e.and_(self.row_ok, inside)
            col = ed.chunk_col(e, chunk)
            pieces.append(load_piece(e, x, self.lead, col, p.width, ok, inside, True))
        if ed.col is not None:
            ok = e.and_(self.row_ok, ed.inside)
            pieces.append(load_piece(e, x, self.lead, ed.col, 1, ok, ed.inside, False))
        return pieces

    def reduce(self, pieces: Sequence[Piece], kind: str, term) -> SSAValue:
        """``kind`` over the row of ``term(value)``; masked pieces contribute the identity."""
        acc = fold(self.e, pieces, kind, term)
        return self.e.op(tt.ReduceOp(acc, kind, self.plan.scope))

    def store(self, out: SSAValue, pieces: Sequence[Piece], ys: list[list[SSAValue]],
              et: Attribute) -> None:
        for p, y in zip(pieces, ys):
            store_piece(self.e, out, self.lead, p, y, et)


def rows_of(shape: Sequence[int]) -> int:
    """Rows of a tensor of ``shape`` (the product of all but the last dimension)."""
    n = 1
    for d in shape[:-1]:
        n *= d
    return n


def lower_softmax(lw: _FunctionLowering, op: g.SoftmaxOp) -> None:
    """``tgraph.softmax``: the register kernel for last-axis softmax on rows
    :func:`plan_row` accepts, the streaming kernels on longer rows, else the strided
    three-pass kernel."""
    from tessera.passes import tile_rowstream

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
        # exp(x - m) = exp2(x * log2e - m * log2e)
        neg = e.fmul(m, e.const(-LOG2E, f32))
        log2e = e.const(LOG2E, f32)
        ex = [
            p.like([e.op(math.Exp2Op(e.op(math.FmaOp(v, log2e, neg)))) for v in p.values])
            for p in r
        ]
        s = k.reduce(ex, "sum", lambda v: v)
        inv = e.fdiv(e.const(1.0, f32), s)
        k.store(o_ref, r, [[e.fmul(v, inv) for v in p.values] for p in ex], et)

    lw.kernel("softmax", [out, lw.mem(op.input)], plan.group_size, _grid(plan, rows), build)
    lw.env[op.result] = out


def norm_params_ok(op: g.RMSNormOp | g.LayerNormOp) -> bool:
    """The weight and bias (when present) have an element type the row kernels read."""
    b = op.bias if isinstance(op, g.LayerNormOp) else None
    return all(p is None or elem_bytes(g.elem_of(p)) is not None for p in (op.weight, b))


def lower_norm(lw: _FunctionLowering, op: g.RMSNormOp | g.LayerNormOp) -> None:
    """``tgraph.rmsnorm`` / ``tgraph.layernorm``: the register kernel on rows
    :func:`plan_row` accepts, the streaming kernels on longer rows, else the strided
    kernel."""
    from tessera.passes import tile_rowstream

    shape = g.shape_of(op.input)
    et = g.elem_of(op.input)
    w = op.weight
    b = op.bias if isinstance(op, g.LayerNormOp) else None
    ok = bool(shape) and rows_of(shape) > 0 and norm_params_ok(op)
    plan = plan_row(shape[-1], et) if ok else None
    if plan is None:
        if not (ok and tile_rowstream.lower_norm(lw, op)):
            lw.lower_norm(op)
        return
    rows = rows_of(shape)
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
        k = RowKernel(e, plan, rows, shape[:-1])
        r = k.load(x)
        inv_n = e.const(1.0 / n, f32)
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

    lw.kernel(
        op.name.split(".")[1], host_args, plan.group_size, _grid(plan, rows), build
    )
    lw.env[op.result] = out


def _grid(plan: RowPlan, rows: int) -> list[int]:
    return [cdiv(rows, plan.rows_per_tile), 1, 1]
