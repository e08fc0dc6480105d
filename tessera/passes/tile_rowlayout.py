"""The layout of a row shared by the row kernels (:mod:`tile_rowwise`,
:mod:`tile_rowstream`, :mod:`tile_rowreduce`): 16-byte chunks of a row, the scalar
edges of ragged rows, and folding a lane's values.

A row of ``n`` elements of ``eb`` bytes is read in chunks of ``w = 16 / eb`` elements
(:func:`row_width`). When ``n`` is a multiple of ``w`` every chunk is aligned. A
*ragged* row (``n % w != 0``, such as a vocabulary of 50257) keeps 16-byte chunks
starting at the row's first aligned element, with the elements before it and after the
last whole chunk read one at a time (:class:`Edges`). Short ragged rows (fewer than
:data:`RAGGED_MIN_CHUNKS` chunks) take the largest width dividing ``n`` instead.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.dialects import arith
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, VectorType, f32
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

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
    mask: SSAValue | None, col_ok: SSAValue | None, vector: bool, raw: bool = False,
) -> Piece:
    """Read ``width`` elements (a vector) or one element of ``ref[*lead, col]`` as f32
    (in ``ref``'s element type with ``raw``)."""
    idx = [e.index(i) for i in (*lead, col)]
    if vector:
        v = e.op(tt.LoadVectorOp(ref, idx, width, mask))
        vals = [e.extract(v, j) for j in range(width)]
    else:
        vals = [e.op(tt.LoadOp(ref, idx, mask))]
    if not raw:
        vals = [e.convert(x, f32) for x in vals]
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


def rows_of(shape: Sequence[int]) -> int:
    """Rows of a tensor of ``shape`` (the product of all but the last dimension)."""
    n = 1
    for d in shape[:-1]:
        n *= d
    return n


def norm_params_ok(
    op: g.NormOp | g.LayerNormBwdOp | g.RMSNormBwdOp,
) -> bool:
    """The weight and bias (when present) have an element type the row kernels read."""
    b = op.bias if isinstance(op, g.LayerNormOp | g.LayerNormFwdOp) else None
    return all(p is None or elem_bytes(g.elem_of(p)) is not None for p in (op.weight, b))


@dataclass(frozen=True)
class NormBwdRefs:
    """The kernel arguments of a norm gradient (``tgraph.layernorm_bwd`` /
    ``rmsnorm_bwd``), by role: ``dx, dy, x, [mean], rstd, [weight], [residual]``."""

    out: SSAValue
    dy: SSAValue
    x: SSAValue
    mean: SSAValue | None
    rstd: SSAValue
    weight: SSAValue | None
    residual: SSAValue | None


def norm_bwd_args(
    lw: _FunctionLowering, op: g.LayerNormBwdOp | g.RMSNormBwdOp
) -> tuple[SSAValue, list[SSAValue], Callable[[Sequence[SSAValue]], NormBwdRefs]]:
    """The result buffer of a norm gradient op, its kernel's host arguments, and the
    function naming the kernel's arguments by role."""
    ln = isinstance(op, g.LayerNormBwdOp)
    out = lw.alloc(op.result.type)
    opt = [v for v in (op.weight, op.residual) if v is not None]
    stats = [op.mean, op.rstd] if isinstance(op, g.LayerNormBwdOp) else [op.rstd]
    host = [out, lw.mem(op.dy), lw.mem(op.input), *(lw.mem(v) for v in [*stats, *opt])]

    def refs(args: Sequence[SSAValue]) -> NormBwdRefs:
        rest = iter(args[3 + len(stats):])
        return NormBwdRefs(
            args[0], args[1], args[2], args[3] if ln else None, args[2 + len(stats)],
            next(rest) if op.weight is not None else None,
            next(rest) if op.residual is not None else None)

    return out, host, refs
