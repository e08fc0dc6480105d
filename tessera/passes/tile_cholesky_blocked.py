"""Blocked right-looking Cholesky for larger matrices: many tiles per matrix.

Used by :func:`tile_linalg.lower_cholesky` when ``n`` exceeds :data:`BLOCKED_MIN_N`
(smaller matrices keep the one-tile-per-matrix kernel). Same result as that kernel
(the lower factor ``L``, ``A = L L^T``, upper triangle 0, the upper triangle of ``A``
not read; a pivot that is not positive gives NaN in its column and every later one),
computed in blocks of :data:`BLOCK` columns:

* a *copy kernel* writes the lower triangle of ``A`` into ``L`` (upper triangle 0);
* for each block column ``K`` (``nb = ceil(n / BLOCK)`` of them), three launches:

  1. *diag*: one tile per matrix factors the diagonal block ``L[K, K]`` in shared
     memory (column by column, as the small kernel does; entries past ``n`` act as
     the identity) and writes it back;
  2. *panel* (not for the last block): the rows below, ``L[I, K] = A[I, K]
     L[K, K]^-T``, one lane per row, forward substitution in registers with
     ``L[K, K]`` in shared memory;
  3. *update* (not for the last block): the trailing lower triangle, ``A[I, J] -=
     L[I, K] L[J, K]^T`` for ``J <= I``, a GEMM with a :data:`UPDATE_TILE`-square
     output block per tile (``UPDATE_LANES`` lanes of 4x4 FMA micro-tiles over the two
     ``L[., K]`` panels staged transposed in shared memory); tiles above the block
     diagonal do nothing, and on diagonal blocks only ``j <= i`` is written.

Every element is updated by one lane in order of ``K``, so the result is
deterministic. ``3 nb + 1`` launches per call, a bounded count whatever the input.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith, math
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

BLOCKED_MIN_N = 64
"""Matrices larger than this take the blocked kernels."""

BLOCK = 32
"""Columns per block column."""

UPDATE_TILE = 64
"""Rows and columns of the trailing-update block of one tile."""

UPDATE_LANES = 256
"""Lanes of an update tile (16 x 16, each a 4 x 4 micro-tile)."""

PANEL_LANES = 128
"""Rows (lanes) per panel tile."""

COPY_LANES = 256


def _divmod(e: KernelEmitter, a: Idx, b: SSAValue) -> tuple[SSAValue, SSAValue]:
    """``(a / b, a % b)`` for a runtime ``b``."""
    ai = e.index(a)
    return e.op(arith.DivUIOp(ai, b)), e.op(arith.RemUIOp(ai, b))


def lower_cholesky_blocked(lw: _FunctionLowering, op: g.CholeskyOp, et: Attribute) -> None:
    """``tgraph.cholesky`` with the kernels of the module docstring."""
    shape = g.shape_of(op.input)
    *batch, n, _ = shape
    nbat = prod(batch)
    nb = cdiv(n, BLOCK)
    out = lw.alloc(op.result.type)
    a_ref = lw.mem(op.input)
    b_ = BLOCK
    ut = UPDATE_TILE

    def mat(e: KernelEmitter, b: Idx) -> list[Idx]:
        return e.unravel(b, batch) if batch else []

    # ---- copy the lower triangle
    row_tiles = cdiv(n * n, COPY_LANES * 8)

    def build_copy(e: KernelEmitter, args: list[SSAValue]) -> None:
        lref, aref = args
        t = e.tile_id()
        b, c = e.div(t, row_tiles), e.rem(t, row_tiles)
        bi = mat(e, b)
        lid = e.local_id()
        zero = e.const(0.0, et)
        for u in range(8):
            q = e.add(e.mul(e.add(e.mul(c, 8), u), COPY_LANES), lid)
            ok = e.lt(q, n * n)
            i, j = e.div(q, n), e.rem(q, n)
            v = e.load(aref, [*bi, i, j], mask=e.and_(ok, e.le(j, i)))
            e.store(e.vselect(e.le(j, i), v, zero), lref, [*bi, i, j], mask=ok)

    lw.kernel("cholesky_copy", [out, a_ref], COPY_LANES, [nbat * row_tiles, 1, 1], build_copy)

    # ---- 1. the diagonal block
    def build_diag(e: KernelEmitter, args: list[SSAValue]) -> None:
        lref, kblk, _ = args
        b = e.tile_id()
        bi = mat(e, b)
        lid = e.local_id()
        k0 = e.mul(kblk, b_)
        zero, one = e.const(0.0, et), e.const(1.0, et)
        nan = e.const(float("nan"), et)
        # rows padded by one element: lanes reading a column ``s[j, k]`` hit distinct banks
        s = e.op(tt.AllocSharedOp([b_, b_ + 1], et))
        # lanes cover the b x b block, BLOCK * BLOCK / lanes elements each: adjacent lanes
        # on adjacent elements of a row (a warp reads a row of ``s`` without conflicts)
        per = b_ * b_ // 256
        cells = []
        for u in range(per):
            q = e.add(e.mul(u, 256), lid)
            i, j = e.div(q, b_), e.rem(q, b_)
            gi, gj = e.add(k0, i), e.add(k0, j)
            inside = e.and_(e.lt(gi, n), e.lt(gj, n))
            v = e.load(lref, [*bi, gi, gj], mask=inside)
            ident = e.vselect(e.eq(i, j), one, zero)
            e.store(e.vselect(inside, v, ident), s, [i, j])
            cells.append((i, j, gi, gj, inside))
        e.barrier()

        def column(c: KernelEmitter, k: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            d = c.load(s, [k, k])
            piv = c.vselect(c.fgt(d, zero), c.op(math.SqrtOp(d)), nan)
            inv = c.fdiv(one, piv)
            c.barrier()  # every lane has read the pivot
            for i, j, *_ in cells:
                # column k below the pivot: scaled; the pivot itself: its root
                below = c.and_(c.eq(j, k), c.lt(k, i))
                x = c.load(s, [i, j])
                c.store(c.vselect(c.eq(i, j), piv, c.fmul(x, inv)), s, [i, j],
                        mask=c.op(arith.OrIOp(below, c.and_(c.eq(j, k), c.eq(i, k)))))
            c.barrier()
            for i, j, *_ in cells:
                upd = c.and_(c.lt(k, j), c.le(j, i))
                lik = c.load(s, [i, k])
                ljk = c.load(s, [j, k])
                x = c.load(s, [i, j])
                c.store(c.fsub(x, c.fmul(lik, ljk)), s, [i, j], mask=upd)
            c.barrier()
            return []

        e.for_(0, b_, 1, [], column)
        for i, j, gi, gj, inside in cells:
            e.store(e.load(s, [i, j]), lref, [*bi, gi, gj], mask=e.and_(inside, e.le(j, i)))

    # ---- 2. the panel below the diagonal block
    def build_panel(e: KernelEmitter, args: list[SSAValue]) -> None:
        lref, kblk, ptiles = args
        b, c = _divmod(e, e.tile_id(), ptiles)
        bi = mat(e, b)
        lid = e.local_id()
        k0 = e.mul(kblk, b_)
        s = e.op(tt.AllocSharedOp([b_, b_], et))
        for u in range(b_ * b_ // PANEL_LANES):
            q = e.add(e.mul(lid, b_ * b_ // PANEL_LANES), u)
            i, j = e.div(q, b_), e.rem(q, b_)
            e.store(e.load(lref, [*bi, e.add(k0, i), e.add(k0, j)]), s, [i, j])
        e.barrier()
        row = e.add(e.add(k0, b_), e.add(e.mul(c, PANEL_LANES), lid))
        ok = e.lt(row, n)
        xs: list[SSAValue] = []
        for j in range(b_):
            acc = e.load(lref, [*bi, row, e.add(k0, j)], mask=ok)
            for t_ in range(j):
                acc = e.fsub(acc, e.fmul(xs[t_], e.load(s, [j, t_])))
            xs.append(e.fdiv(acc, e.load(s, [j, j])))
        for j in range(b_):
            e.store(xs[j], lref, [*bi, row, e.add(k0, j)], mask=ok)

    # ---- 3. the trailing update
    def build_update(e: KernelEmitter, args: list[SSAValue]) -> None:
        lref, kblk, tb = args
        b, rest = _divmod(e, e.tile_id(), e.op(arith.MuliOp(tb, tb)))
        bi_, bj_ = _divmod(e, rest, tb)
        bi = mat(e, b)
        lid = e.local_id()
        k0 = e.mul(kblk, b_)
        base = e.add(k0, b_)
        r0, c0 = e.add(base, e.mul(bi_, ut)), e.add(base, e.mul(bj_, ut))
        lower_blk = e.le(bj_, bi_)
        si = e.op(tt.AllocSharedOp([b_, ut + 1], et))
        sj = e.op(tt.AllocSharedOp([b_, ut + 1], et))

        def work(c: KernelEmitter) -> list[SSAValue]:
            # L[r0 + r, k0 + k] -> si[k, r]: lanes read along k (coalesced)
            for u in range(ut * b_ // UPDATE_LANES):
                q = c.add(c.mul(u, UPDATE_LANES), lid)
                r, k = c.div(q, b_), c.rem(q, b_)
                for sref, g0 in ((si, r0), (sj, c0)):
                    gr = c.add(g0, r)
                    v = c.load(lref, [*bi, gr, c.add(k0, k)], mask=c.lt(gr, n))
                    c.store(v, sref, [k, r])
            c.barrier()
            ty, tx = c.div(lid, 16), c.rem(lid, 16)
            zero = c.const(0.0, et)

            def kstep(d: KernelEmitter, k: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
                a = [d.load(si, [k, d.add(ty, 16 * x)]) for x in range(4)]
                bb = [d.load(sj, [k, d.add(tx, 16 * y)]) for y in range(4)]
                return [d.op(math.FmaOp(a[x], bb[y], acc[4 * x + y]))
                        for x in range(4) for y in range(4)]

            acc = c.for_(0, b_, 1, [zero] * 16, kstep)
            for x in range(4):
                gi = c.add(r0, c.add(ty, 16 * x))
                for y in range(4):
                    gj = c.add(c0, c.add(tx, 16 * y))
                    ok = c.and_(c.lt(gi, n), c.le(gj, gi))
                    v = c.load(lref, [*bi, gi, gj], mask=ok)
                    c.store(c.fsub(v, acc[4 * x + y]), lref, [*bi, gi, gj], mask=ok)
            return []

        e.if_(lower_blk, work)

    names: dict[str, str] = {}

    def launch(tag: str, lanes: int, grid: int, build, k: int, tiles: int) -> None:
        args = [out, lw.host_index(k), lw.host_index(tiles)]
        if tag in names:
            lw.launch(names[tag], args, [grid, 1, 1])
            return
        name = lw.kernel(tag, args, lanes, [grid, 1, 1], build)
        assert name is not None
        names[tag] = name

    for k in range(nb):
        launch("cholesky_diag", 256, nbat, build_diag, k, 1)
        rows_below = n - (k + 1) * b_
        if rows_below <= 0:
            continue
        ptiles = cdiv(rows_below, PANEL_LANES)
        launch("cholesky_panel", PANEL_LANES, nbat * ptiles, build_panel, k, ptiles)
        tb = cdiv(rows_below, ut)
        launch("cholesky_update", UPDATE_LANES, nbat * tb * tb, build_update, k, tb)
    lw.env[op.result] = out
