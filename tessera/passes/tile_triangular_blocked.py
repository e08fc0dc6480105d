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
* for each block row ``K``: *diag*, ``X[K] = T[K, K]^-1 X[K]``: each tile stages
  ``T[K, K]`` in shared memory and runs forward substitution on 128 columns of ``X``
  (one lane per column, the block's rows in registers); then, inside the panel, an
  *inner update* ``X[I] -= T[I, K] X[K]`` of the panel's rows below ``K``;
* after each panel but the last, the *trailing update* ``X[I] -= T[I, P] X[P]`` of every
  row below it, a GEMM over the panel's :data:`PANEL` rows of ``X``.

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

DIAG_COLUMNS = 128
"""Columns of X per diag tile (one lane each)."""

COPY_LANES = 256


def launch_count(n: int, block: int | None = None, panel: int | None = None) -> int:
    """Launches of the blocked kernels for an ``n x n`` triangle (any batch and k)."""
    b = BLOCK if block is None else block
    return 1 + len(fg.panel_schedule(n, b, PANEL if panel is None else panel))


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

    # ---- X = B
    total = n * k
    copy_tiles = cdiv(total, COPY_LANES * 8)

    def build_copy(e: KernelEmitter, args: list[SSAValue]) -> None:
        xref, bref = args
        t = e.tile_id()
        b, c = e.div(t, copy_tiles), e.rem(t, copy_tiles)
        bi = mat(e, b)
        lid = e.local_id()
        for u in range(8):
            q = e.add(e.mul(e.add(e.mul(c, 8), u), COPY_LANES), lid)
            ok = e.lt(q, total)
            i, j = e.div(q, k), e.rem(q, k)
            e.store(e.load(bref, [*bi, i, j], mask=ok), xref, [*bi, i, j], mask=ok)

    lw.kernel("trsm_copy", [out, b_ref], COPY_LANES, [nbat * copy_tiles, 1, 1], build_copy)

    # ---- 1. a block row: X[K] = T[K, K]^-1 X[K]
    ctiles = cdiv(k, DIAG_COLUMNS)

    def build_diag(e: KernelEmitter, args: list[SSAValue]) -> None:
        xref, aref, kblk = args
        t = e.tile_id()
        b, ct = e.div(t, ctiles), e.rem(t, ctiles)
        bi = mat(e, b)
        lid = e.local_id()
        r0 = e.mul(kblk, b_)
        zero, one = e.const(0.0, et), e.const(1.0, et)
        s = e.op(tt.AllocSharedOp([b_, b_ + 1], et))
        for u in range(b_ * b_ // DIAG_COLUMNS):
            q = e.add(e.mul(u, DIAG_COLUMNS), lid)
            i, j = e.div(q, b_), e.rem(q, b_)
            gi, gj = e.add(r0, i), e.add(r0, j)
            inside = e.and_(e.lt(gi, n), e.le(j, i))
            v = tri(e, aref, bi, gi, gj, inside)
            # rows past n solve the identity; the upper triangle is not read
            pad = e.vselect(e.eq(i, j), one, zero)
            e.store(e.vselect(inside, v, pad), s, [i, j])
        e.barrier()
        col = e.add(e.mul(ct, DIAG_COLUMNS), lid)
        okc = e.lt(col, k)
        xs: list[SSAValue] = []
        oks = []
        for i in range(b_):
            gi = e.add(r0, i)
            ok = e.and_(okc, e.lt(gi, n))
            acc = e.load(xref, [*bi, row(e, gi), col], mask=ok)
            for j in range(i):
                acc = e.fsub(acc, e.fmul(e.load(s, [i, j]), xs[j]))
            xs.append(e.fdiv(acc, e.load(s, [i, i])))
            oks.append((gi, ok))
        for (gi, ok), x in zip(oks, xs, strict=True):
            e.store(x, xref, [*bi, row(e, gi), col], mask=ok)

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

        def stage_t(c: KernelEmitter, kc: Idx, i: Idx, j: Idx) -> SSAValue:
            gi, gj = c.add(r0, i), c.add(kc, j)
            return tri(c, aref, bi, gi, gj, c.and_(c.lt(gi, rend), c.lt(gj, n)))

        def stage_x(c: KernelEmitter, kc: Idx, col: Idx, j: Idx) -> SSAValue:
            gj, gc = c.add(kc, j), c.add(c0, col)
            return c.load(xref, [*bi, row(c, gj), gc], mask=c.and_(c.lt(gj, n), c.lt(gc, k)))

        # lanes along A's rows: T's rows (k) unless transposed; X along its columns
        sums = fg.fma_tile(e, et, lid, b_, k0, chunks, stage_t, stage_x, tile=ut,
                           a_along_k=not trans, b_along_k=False)
        for ri, cj, acc in sums:
            gi, gc = e.add(r0, ri), e.add(c0, cj)
            ok = e.and_(e.lt(gi, rend), e.lt(gc, k))
            at = [*bi, row(e, gi), gc]
            e.store(e.fsub(e.load(xref, at, mask=ok), acc), xref, at, mask=ok)

    launch = fg.Launches(lw)
    for step in fg.panel_schedule(n, b_, PANEL):
        if len(step) == 1:
            launch("trsm_diag", DIAG_COLUMNS, nbat * ctiles, build_diag,
                   [out, a_ref, lw.host_index(step[0])])
            continue
        k0, chunks, base, rend = step
        tr = cdiv(rend - base, ut)
        args = [out, a_ref, *(lw.host_index(v) for v in (k0, chunks, base, rend, tr))]
        launch("trsm_update", fg.LANES, nbat * tr * cdiv(k, ut), build_update, args)
    lw.env[op.result] = out
