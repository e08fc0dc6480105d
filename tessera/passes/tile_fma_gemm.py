"""One tile of an FMA GEMM over operands staged in shared memory, and the launch schedule,
for the blocked factorizations' updates (``tile_cholesky_blocked``, ``tile_triangular_blocked``).

A tile of :data:`LANES` lanes (16 x 16) computes a ``tile``-square block of ``C = A B``
(``tile`` 64 or 128): lane ``(ty, tx)`` holds the rows ``4 ty + x`` and the columns
``4 tx + y`` (``x, y < 4``) of each 64 x 64 quarter of the block, 16 or 64 sums. The
reduction runs in chunks of ``chunk`` indices: each chunk stages ``A[r, k]`` and
``B[k, c]`` transposed into two ``[chunk, tile + w]`` shared-memory buffers (rows 16-byte
aligned, ``w`` elements of padding), then every lane reads its rows and columns of each
``k`` as 16-byte vectors (sixteen lanes read 256 contiguous bytes) and accumulates its
sums, in order of ``k``: deterministic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from xdsl.dialects import math
from xdsl.dialects.builtin import f64
from xdsl.ir import Attribute, SSAValue

from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

TILE = 64
"""Rows and columns of a tile's output block, unless a caller asks for 128."""

LANES = 256
"""Lanes of a tile (16 x 16)."""

Stage = Callable[[KernelEmitter, Idx, Idx, Idx], SSAValue]
"""``stage(c, kc, i, k)``: the operand's element for output row (or column) ``i`` of the
block and reduction index ``kc + k``."""

Build = Callable[[KernelEmitter, list[SSAValue]], None]


def micro(e: KernelEmitter, lid: Idx, tile: int = TILE) -> tuple[list[Idx], list[Idx]]:
    """The rows and the columns of the block that lane ``lid`` holds sums of."""
    assert tile in (64, 128), tile
    ty4, tx4 = e.mul(e.div(lid, 16), 4), e.mul(e.rem(lid, 16), 4)
    rows = [e.add(ty4, q + x) for q in range(0, tile, 64) for x in range(4)]
    cols = [e.add(tx4, q + y) for q in range(0, tile, 64) for y in range(4)]
    return rows, cols


def fma_tile(
    e: KernelEmitter, et: Attribute, lid: Idx, chunk: int, k0: Idx, chunks: Idx,
    stage_a: Stage, stage_b: Stage, *, tile: int = TILE, a_along_k: bool = True,
    b_along_k: bool = True,
) -> list[tuple[Idx, Idx, SSAValue]]:
    """``(i, j, sum_k A[i, k] B[k, j])`` for each row ``i`` and column ``j`` of the block
    that lane ``lid`` holds (:func:`micro`), over ``k`` in ``[k0, k0 + chunk * chunks)``.

    ``*_along_k``: adjacent lanes stage adjacent ``k`` (an operand contiguous along the
    reduction reads coalesced), else adjacent rows/columns of the block."""
    assert (tile * chunk) % LANES == 0
    vw = 16 // (8 if et == f64 else 4)  # elements per 16-byte vector
    sa = e.op(tt.AllocSharedOp([chunk, tile + vw], et))
    sb = e.op(tt.AllocSharedOp([chunk, tile + vw], et))
    rows, cols = micro(e, lid, tile)
    nr = len(rows)
    zero = e.const(0.0, et)

    def quads(d: KernelEmitter, ref: SSAValue, k: SSAValue, at: list[Idx]) -> list[SSAValue]:
        vals = []
        for first in at[::4]:
            for h in range(4 // vw):
                v = d.op(tt.LoadVectorOp(ref, [k, d.index(d.add(first, h * vw))], vw))
                vals += [d.extract(v, x) for x in range(vw)]
        return vals

    per = tile * chunk // LANES

    def coords(c: KernelEmitter, u: int, along: bool) -> tuple[Idx, Idx]:
        q = c.add(c.mul(u, LANES), lid)
        return (c.div(q, chunk), c.rem(q, chunk)) if along else (c.rem(q, tile), c.div(q, tile))

    def fetch(c: KernelEmitter, kc: Idx) -> list[SSAValue]:
        """This lane's operand elements of the chunk from ``kc``, in :func:`place` order.
        (Loading the next chunk into registers before the current chunk's products, and
        unrolling the loop over ``k``, were measured: neither was faster.)"""
        vals = []
        for u in range(per):
            for stage, along in ((stage_a, a_along_k), (stage_b, b_along_k)):
                i, k = coords(c, u, along)
                vals.append(stage(c, kc, i, k))
        return vals

    def place(c: KernelEmitter, vals: list[SSAValue]) -> None:
        """Store :func:`fetch`'s elements into the staging buffers, transposed."""
        it = iter(vals)
        for u in range(per):
            for sref, along in ((sa, a_along_k), (sb, b_along_k)):
                i, k = coords(c, u, along)
                c.store(next(it), sref, [k, i])

    def kstep(d: KernelEmitter, k: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
        a = quads(d, sa, k, rows)
        b = quads(d, sb, k, cols)
        return [d.op(math.FmaOp(a[x], b[y], acc[nr * x + y]))
                for x in range(nr) for y in range(nr)]

    def step(c: KernelEmitter, ch: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
        place(c, fetch(c, c.add(k0, c.mul(ch, chunk))))
        c.barrier()
        acc = c.for_(0, chunk, 1, acc, kstep)
        c.barrier()  # the next chunk overwrites the staged operands
        return acc

    sums = e.for_(0, chunks, 1, [zero] * (nr * nr), step)
    return [(rows[x], cols[y], sums[nr * x + y]) for x in range(nr) for y in range(nr)]


# --------------------------------------------------------------------------- schedules


COPY_LANES = 256
"""Lanes of a copy tile; each copies :data:`COPY_PER_LANE` elements."""

COPY_PER_LANE = 8


def copy_tiles(total: int) -> int:
    """Copy tiles for ``total`` elements of one matrix."""
    return -(-total // (COPY_LANES * COPY_PER_LANE))


def copy_positions(e: KernelEmitter, tiles: int) -> tuple[Idx, list[Idx]]:
    """The matrix of this copy tile and the flat positions of its lane's elements (of
    ``tiles`` tiles per matrix; positions past the matrix are the caller's to mask)."""
    t = e.tile_id()
    b, c = e.div(t, tiles), e.rem(t, tiles)
    lid = e.local_id()
    return b, [e.add(e.mul(e.add(e.mul(c, COPY_PER_LANE), u), COPY_LANES), lid)
               for u in range(COPY_PER_LANE)]


def panel_width(block: int, panel: int) -> int:
    """``panel`` rounded down to a multiple of ``block``, at least one block."""
    return max(block, panel // block * block)


def panel_schedule(n: int, block: int, panel: int) -> list[tuple[int, ...]]:
    """The steps of a right-looking blocked algorithm over ``n`` rows (or columns) in
    blocks of ``block`` grouped into panels of ``panel`` (rounded to a multiple of
    ``block``, at least one block): ``(k,)`` for block ``k``, then ``(k0, chunks, base,
    end)`` for an update of ``[base, end)`` by the ``chunks * block`` indices from
    ``k0``: the panel's rows after each block but its last (an inner update, one chunk),
    and everything after each panel but the last (the trailing update, the panel's
    chunks)."""
    pw = panel_width(block, panel)
    steps: list[tuple[int, ...]] = []
    for p0 in range(0, n, pw):
        pend = min(n, p0 + pw)
        for k in range(p0 // block, -(-pend // block)):
            steps.append((k,))
            if (k + 1) * block < pend:
                steps.append((k * block, 1, (k + 1) * block, pend))
        if pend < n:
            steps.append((p0, (pend - p0) // block, pend, n))
    return steps


class Launches:
    """Kernels by tag: the first launch of a tag creates its kernel, later ones launch
    it again with other host arguments."""

    def __init__(self, lw: _FunctionLowering):
        self.lw = lw
        self.names: dict[str, str] = {}

    def __call__(self, tag: str, lanes: int, grid: int, build: Build,
                 args: list[SSAValue]) -> None:
        if tag in self.names:
            self.lw.launch(self.names[tag], args, [grid, 1, 1])
            return
        name = self.lw.kernel(tag, args, lanes, [grid, 1, 1], build)
        assert name is not None, f"{tag}: an empty grid"
        self.names[tag] = name
