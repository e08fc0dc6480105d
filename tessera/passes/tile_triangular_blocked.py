"""Blocked triangular solve for larger triangles: many tiles per right-hand side.

Used by :func:`tile_support.lower_triangular_solve` when ``n`` exceeds
:data:`BLOCKED_MIN_N` (smaller triangles keep one lane per column of B). Solves
``T X = B`` with ``T = op(A)``, A ``[..., n, n]``, B ``[..., n, k]``, reading only the
triangle of A the options name, in block rows of :data:`BLOCK` grouped into panels of
:data:`PANEL` rows, as the blocked Cholesky factor does (``tile_cholesky_blocked``):

* When ``T`` is upper triangular, rows are taken from the bottom: row ``i`` of the
  kernels is row ``n - 1 - i`` of ``T``, ``X`` and ``B`` (and column ``j`` of ``T``
  column ``n - 1 - j``), so that ``T`` is lower triangular in the kernels' order.
* a *copy kernel* writes ``B`` into ``X``;
* for each panel, one *panel kernel*: a tile per :data:`PANEL_COLUMNS` columns of ``X``
  (the columns are independent) runs the panel's block rows ``K`` in order, with
  barriers between the steps: ``X[K] = T[K, K]^-1 X[K]`` (``T[K, K]`` staged in shared
  memory, forward substitution, one lane per column, the block's rows in registers),
  then the *inner update* ``X[I] -= T[I, K] X[K]`` of the panel's rows below ``K``, in
  64-row blocks;
* after each panel but the last, the *trailing update* ``X[I] -= T[I, P] X[P]`` of every
  row below it, a GEMM over the panel's :data:`PANEL` rows of ``X``: ``2 * panels``
  launches in all (32 at n = 4096; one per block row and update before).

Both updates are ``tile_fma_gemm`` tiles of :data:`UPDATE_TILE`-square outputs. Every element is updated
by one lane in a fixed order: deterministic. A zero on the diagonal gives inf/NaN.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes import tile_fma_gemm as fg
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

BLOCKED_MIN_N = 64
"""Triangles larger than this take the blocked kernels."""

BLOCK = 32
"""Rows per block row."""

PANEL = 256
"""Rows per panel (a multiple of :data:`BLOCK`): the depth of the trailing update."""

UPDATE_TILE = 64
"""Rows and columns of X per update tile (``tile_fma_gemm``: 64 or 128)."""

PANEL_COLUMNS = fg.TILE
"""Columns of X per panel tile (one lane each in the diagonal solves, one
``tile_fma_gemm`` block wide in the inner updates)."""

PANEL_LANES = fg.LANES



def launch_count(n: int, block: int | None = None, panel: int | None = None) -> int:
    """Launches of the blocked kernels for an ``n x n`` triangle (any batch and k)."""
    b = BLOCK if block is None else block
    p = PANEL if panel is None else panel
    npanels = -(-n // fg.panel_width(b, p))
    return 1 + 2 * npanels - 1


def lower_triangular_solve_blocked(
    lw: _FunctionLowering, op: g.TriangularSolveOp, et: Attribute
) -> None:
    """``tgraph.triangular_solve`` with the kernels of the module docstring."""
    *batch, n, k = g.shape_of(op.b)
    nbat = prod(batch)
    upper, trans = op.upper is not None, op.transpose_a is not None
    forward = upper == trans  # T = op(A) is lower triangular
    b_ = BLOCK
    ut = UPDATE_TILE
    out = lw.alloc(op.result.type)
    a_ref, b_ref = lw.mem(op.a), lw.mem(op.b)

    def mat(e: KernelEmitter, b: Idx) -> list[Idx]:
        return e.unravel(b, batch) if batch else []

    def row(e: KernelEmitter, i: Idx) -> Idx:
        """Row ``i`` of the kernels' order in T, X and B."""
        return i if forward else e.sub(n - 1, i)

    def tri(e: KernelEmitter, aref: SSAValue, bi: list[Idx], i: Idx, j: Idx,
            mask: SSAValue | None) -> SSAValue:
        """``T[i, j]`` in the kernels' order: ``A[i, j]``, or ``A[j, i]`` with transpose."""
        ri, rj = row(e, i), row(e, j)
        return e.load(aref, [*bi, rj, ri] if trans else [*bi, ri, rj], mask=mask)

    def subtract_product(e: KernelEmitter, xref: SSAValue, aref: SSAValue, bi: list[Idx],
                         lid: Idx, k0: Idx, chunks: Idx, r0: Idx, rend: Idx, c0: Idx,
                         tile: int) -> None:
        """``X[I, C] -= T[I, k0:k0 + kw] X[k0:k0 + kw, C]`` for the ``tile``-square block of
        rows ``I`` from ``r0`` (below ``rend``) and columns ``C`` from ``c0``, ``kw =
        chunks * BLOCK``: one ``tile_fma_gemm`` tile."""

        def stage_t(c: KernelEmitter, kc: Idx, i: Idx, j: Idx) -> SSAValue:
            gi, gj = c.add(r0, i), c.add(kc, j)
            return tri(c, aref, bi, gi, gj, c.and_(c.lt(gi, rend), c.lt(gj, n)))

        def stage_x(c: KernelEmitter, kc: Idx, col: Idx, j: Idx) -> SSAValue:
            gj, gc = c.add(kc, j), c.add(c0, col)
            return c.load(xref, [*bi, row(c, gj), gc],
                          mask=c.and_(c.lt(gj, n), c.lt(gc, k)))

        # lanes along A's rows: T's rows (k) unless transposed; X along its columns
        sums = fg.fma_tile(e, et, lid, b_, k0, chunks, stage_t, stage_x, tile=tile,
                           a_along_k=not trans, b_along_k=False)
        for ri, cj, acc in sums:
            gi, gc = e.add(r0, ri), e.add(c0, cj)
            ok = e.and_(e.lt(gi, rend), e.lt(gc, k))
            at = [*bi, row(e, gi), gc]
            e.store(e.fsub(e.load(xref, at, mask=ok), acc), xref, at, mask=ok)

    # ---- X = B
    total = n * k
    copy_tiles = fg.copy_tiles(total)

    def build_copy(e: KernelEmitter, args: list[SSAValue]) -> None:
        xref, bref = args
        b, qs = fg.copy_positions(e, copy_tiles)
        bi = mat(e, b)
        for q in qs:
            ok = e.lt(q, total)
            i, j = e.div(q, k), e.rem(q, k)
            e.store(e.load(bref, [*bi, i, j], mask=ok), xref, [*bi, i, j], mask=ok)

    lw.kernel("trsm_copy", [out, b_ref], fg.COPY_LANES, [nbat * copy_tiles, 1, 1], build_copy)

    # ---- 1. a panel: for each block row K in it, X[K] = T[K, K]^-1 X[K], then
    # X[I] -= T[I, K] X[K] for the panel's rows I below K; one tile per PANEL_COLUMNS
    # columns of X runs the whole panel (the columns are independent), barriers between
    ctiles = cdiv(k, PANEL_COLUMNS)

    def build_panel(e: KernelEmitter, args: list[SSAValue]) -> None:
        xref, aref, pblk, pend = args
        t = e.tile_id()
        b, ct = e.div(t, ctiles), e.rem(t, ctiles)
        bi = mat(e, b)
        lid = e.local_id()
        zero, one = e.const(0.0, et), e.const(1.0, et)
        s = e.op(tt.AllocSharedOp([b_, b_ + 1], et))
        c0 = e.mul(ct, PANEL_COLUMNS)
        col = e.add(c0, lid)
        okc = e.and_(e.lt(lid, PANEL_COLUMNS), e.lt(col, k))
        nblk = e.op(arith.DivUIOp(e.index(e.add(e.sub(pend, e.mul(pblk, b_)), b_ - 1)),
                                  e.index(b_)))

        def block(f: KernelEmitter, kb: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            kblk = f.add(pblk, kb)
            r0 = f.mul(kblk, b_)
            for u in range(b_ * b_ // PANEL_LANES):
                q = f.add(f.mul(u, PANEL_LANES), lid)
                i, j = f.div(q, b_), f.rem(q, b_)
                gi, gj = f.add(r0, i), f.add(r0, j)
                inside = f.and_(f.lt(gi, n), f.le(j, i))
                v = tri(f, aref, bi, gi, gj, inside)
                # rows past n solve the identity; the upper triangle is not read
                pad = f.vselect(f.eq(i, j), one, zero)
                f.store(f.vselect(inside, v, pad), s, [i, j])
            f.barrier()
            # forward substitution, one lane per column, the block's rows in registers
            xs: list[SSAValue] = []
            oks = []
            for i in range(b_):
                gi = f.add(r0, i)
                ok = f.and_(okc, f.lt(gi, n))
                acc = f.load(xref, [*bi, row(f, gi), col], mask=ok)
                for j in range(i):
                    acc = f.fsub(acc, f.fmul(f.load(s, [i, j]), xs[j]))
                xs.append(f.fdiv(acc, f.load(s, [i, i])))
                oks.append((gi, ok))
            for (gi, ok), x in zip(oks, xs, strict=True):
                f.store(x, xref, [*bi, row(f, gi), col], mask=ok)
            f.barrier()  # X[K] is read below; T[K, K] is staged again next block
            base = f.add(r0, b_)
            nrows = f.op(arith.DivUIOp(
                f.index(f.add(f.sub(f.max(pend, base), base), fg.TILE - 1)), f.index(fg.TILE)))

            def rows(h: KernelEmitter, rb: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                subtract_product(h, xref, aref, bi, lid, r0, 1, h.add(base, h.mul(rb, fg.TILE)),
                                 pend, c0, fg.TILE)
                return []

            f.for_(0, nrows, 1, [], rows)
            f.barrier()  # the rows below are the next block's right-hand sides
            return []

        e.for_(0, nblk, 1, [], block)

    # ---- 2. the updates: X[base:rend] -= T[base:rend, k0:k0+kw] X[k0:k0+kw]
    def build_update(e: KernelEmitter, args: list[SSAValue]) -> None:
        xref, aref, k0, chunks, base, rend, tr = args
        tc = cdiv(k, ut)
        # tile = (matrix * tr + row tile) * tc + column tile
        mr, ctile = e.div(e.tile_id(), tc), e.rem(e.tile_id(), tc)
        mi = e.op(arith.DivUIOp(e.index(mr), tr))
        rtile = e.op(arith.RemUIOp(e.index(mr), tr))
        bi = mat(e, mi)
        lid = e.local_id()
        r0, c0 = e.add(base, e.mul(rtile, ut)), e.mul(ctile, ut)

        subtract_product(e, xref, aref, bi, lid, k0, chunks, r0, rend, c0, ut)

    launch = fg.Launches(lw)
    pw = fg.panel_width(b_, PANEL)
    for p0 in range(0, n, pw):
        pend = min(n, p0 + pw)
        launch("trsm_panel", PANEL_LANES, nbat * ctiles, build_panel,
               [out, a_ref, lw.host_index(p0 // b_), lw.host_index(pend)])
        if pend < n:
            tr = cdiv(n - pend, ut)
            args = [out, a_ref, *(lw.host_index(v) for v in (p0, (pend - p0) // b_, pend, n, tr))]
            launch("trsm_update", fg.LANES, nbat * tr * cdiv(k, ut), build_update, args)
    lw.env[op.result] = out
