"""Blocked right-looking Cholesky for larger matrices: many tiles per matrix.

Used by :func:`tile_linalg.lower_cholesky` when ``n`` exceeds :data:`BLOCKED_MIN_N`
(smaller matrices keep the one-tile-per-matrix kernel). Same result as that kernel
(the lower factor ``L``, ``A = L L^T``, upper triangle 0, the upper triangle of ``A``
not read; a pivot that is not positive gives NaN in its column and every later one),
computed in block columns of :data:`BLOCK` grouped into panels of :data:`PANEL`
columns:

* a *copy kernel* writes the lower triangle of ``A`` into ``L`` (upper triangle 0);
* for each block column ``K`` (``nb = ceil(n / BLOCK)`` of them):

  1. *factor*: ``L[K, K]`` and ``L[I, K] = A[I, K] L[K, K]^-T`` for the rows ``I``
     below the diagonal block, :data:`FACTOR_ROWS` of them per tile, in one launch. A
     tile's lanes each hold one row, the block's :data:`BLOCK` rows first (entries past
     ``n`` act as the identity), staged through shared memory so that reads and writes
     are coalesced. Every tile factors the block itself, left-looking, one barrier per
     column ``k``: every lane reads the block's row ``k`` from shared memory as vectors,
     takes the pivot ``L[k, k]`` from it (:data:`FACTOR_EVERY_PIVOT`) and, below the
     diagonal, its entry of column ``k``, ``(a_k - sum_t x_t L[k, t]) / L[k, k]``. Tile 0 also writes
     ``L[K, K]`` to a scratch buffer (the diagonal block of ``L`` is still read by the
     other tiles).
  2. *inner update* (when the panel has columns right of ``K``): ``A[I, J] -= L[I, K]
     L[J, K]^T`` for the panel's columns ``J`` right of ``K`` and ``J <= I``;

* after each panel but the last, the *trailing update* ``A[I, J] -= L[I, P] L[J, P]^T``
  of the lower triangle right of the panel ``P``, a GEMM over the panel's
  :data:`PANEL` columns (rather than one pass over the trailing matrix per block
  column);
* a *scatter kernel* writes the diagonal blocks from the scratch buffer into ``L``.

Both updates are one kernel, a GEMM tile per 64-square output block: in f32 on the
tensor cores (``tile_mma_gemm``: 3xTF32, f32 accuracy, 128 lanes), in f64 an FMA GEMM
(``tile_fma_gemm``: ``UPDATE_LANES`` lanes of 4x4 micro-tiles, :data:`UPDATE_TILE`
square). Either stages the two ``L`` panels in shared memory :data:`BLOCK` columns at a
time (the tensor-core tile with double-buffered ``copy_async`` when rows are 16-byte
aligned, :data:`MMA_ASYNC`); tiles above the block diagonal do nothing, and on diagonal blocks only ``j <= i``
is written.

Every element is updated by one lane in a fixed order, so the result is deterministic.
``2 + nb + (inner updates) + (panels - 1)`` launches per call, a bounded count whatever
the input (:func:`launch_count`).
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import TensorType, f32, f64, i1
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes import tile_fma_gemm as fg
from tessera.passes import tile_mma_gemm as mg
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

BLOCKED_MIN_N = 64
"""Matrices larger than this take the blocked kernels."""

BLOCK = 32
"""Columns per block column."""

PANEL = 256
"""Columns per panel (a multiple of :data:`BLOCK`): the depth of the trailing update."""

UPDATE_TILE = 64
"""Rows and columns of the update block of one tile (``tile_fma_gemm``: 64 or 128)."""

UPDATE_LANES = fg.LANES

UPDATE_MMA = True
"""f32 updates on the tensor cores at f32 accuracy (``tile_mma_gemm``, 3xTF32, 64-square
blocks); f64 updates, and f32 ones with this off, are FMA tiles of :data:`UPDATE_TILE`."""

MMA_TILE = mg.TILE
"""Rows and columns of a tensor-core update tile's output block (64 or 128)."""

MMA_LANES = mg.LANES
"""Lanes of a tensor-core update tile (128 or 256)."""

MMA_PREFETCH = False
"""Tensor-core updates issue each chunk's loads before the previous chunk's products."""

MMA_ASYNC = True
"""Tensor-core updates with ``n % 4 == 0`` copy the panels with 16-byte
``ttile.copy_async`` ops into two buffers, the next chunk in flight during this one's
products (at other ``n`` a row is not 16-byte aligned, and 4-byte copies measured slower
than loads and stores, which those take)."""

FACTOR_ROWS = 128
"""Rows below the diagonal block per factor tile (one lane each); f64 tiles take
:data:`FACTOR_ROWS_F64`, so that the tile's shared memory stays within 48 KiB."""

FACTOR_ROWS_F64 = 96

FACTOR_EVERY_PIVOT = True
"""Every lane of a factor tile takes column ``k``'s pivot itself, from the block's row
``k`` in shared memory (the same products in the same order as lane ``k``'s running sum
of squares: the same bits), so that no lane waits for lane ``k`` to publish it; off,
lane ``k`` computes it and the others read it after a barrier."""

COPY_LANES = fg.COPY_LANES


def _divmod(e: KernelEmitter, a: Idx, b: SSAValue) -> tuple[SSAValue, SSAValue]:
    """``(a / b, a % b)`` for a runtime ``b``."""
    ai = e.index(a)
    return e.op(arith.DivUIOp(ai, b)), e.op(arith.RemUIOp(ai, b))


def launch_count(n: int, block: int | None = None, panel: int | None = None) -> int:
    """Launches of the blocked kernels for an ``n x n`` matrix (any batch)."""
    b = BLOCK if block is None else block
    return 2 + len(fg.panel_schedule(n, b, PANEL if panel is None else panel))


def lower_cholesky_blocked(lw: _FunctionLowering, op: g.CholeskyOp, et: Attribute) -> None:
    """``tgraph.cholesky`` with the kernels of the module docstring."""
    shape = g.shape_of(op.input)
    *batch, n, _ = shape
    nbat = prod(batch)
    b_ = BLOCK
    pw = PANEL
    nb = cdiv(n, b_)
    mma = UPDATE_MMA and et == f32
    ut, ul = (MMA_TILE, MMA_LANES) if mma else (UPDATE_TILE, UPDATE_LANES)
    fr = FACTOR_ROWS_F64 if et == f64 else FACTOR_ROWS
    vw = 16 // (8 if et == f64 else 4)  # elements per 16-byte vector
    smem = ((b_ + fr) * (b_ + 1) + b_ * (b_ + vw) + b_) * (8 if et == f64 else 4)
    if smem > 48 * 1024:
        raise ValueError(f"tgraph.cholesky: BLOCK {b_} needs {smem} bytes of static shared "
                         "memory per factor tile (48 KiB at most)")
    out = lw.alloc(op.result.type)
    diag = lw.alloc(TensorType(et, [*batch, nb, b_, b_]))
    a_ref = lw.mem(op.input)

    def mat(e: KernelEmitter, b: Idx) -> list[Idx]:
        return e.unravel(b, batch) if batch else []

    # ---- copy the lower triangle
    row_tiles = fg.copy_tiles(n * n)

    def build_copy(e: KernelEmitter, args: list[SSAValue]) -> None:
        lref, aref = args
        b, qs = fg.copy_positions(e, row_tiles)
        bi = mat(e, b)
        zero = e.const(0.0, et)
        for q in qs:
            ok = e.lt(q, n * n)
            i, j = e.div(q, n), e.rem(q, n)
            v = e.load(aref, [*bi, i, j], mask=e.and_(ok, e.le(j, i)))
            e.store(e.vselect(e.le(j, i), v, zero), lref, [*bi, i, j], mask=ok)

    lw.kernel("cholesky_copy", [out, a_ref], COPY_LANES, [nbat * row_tiles, 1, 1], build_copy)

    # ---- 1. the diagonal block and the rows below it, one row per lane
    fl = b_ + fr  # lanes: the block's rows, then this tile's rows below it

    def build_factor(e: KernelEmitter, args: list[SSAValue]) -> None:
        lref, dref, kblk, ftiles = args
        b, c = _divmod(e, e.tile_id(), ftiles)
        bi = mat(e, b)
        lid = e.local_id()
        k0 = e.mul(kblk, b_)
        zero, one = e.const(0.0, et), e.const(1.0, et)
        nan = e.const(float("nan"), et)
        # staging: row r of the block (r < b_) or of the tile's rows (r >= b_), padded by
        # one element so that lanes reading along their own rows hit distinct banks
        st = e.op(tt.AllocSharedOp([fl, b_ + 1], et))
        # the factored rows of the block, rows 16-byte aligned (read as vectors), and the
        # reciprocal of each pivot (when lane k publishes it)
        every = FACTOR_EVERY_PIVOT
        srow = e.op(tt.AllocSharedOp([b_, b_ + vw], et))
        sinv = None if every else e.op(tt.AllocSharedOp([b_], et))

        def grow(f: KernelEmitter, r: Idx) -> Idx:
            return f.add(f.add(k0, r), f.select(f.lt(r, b_), 0, f.mul(c, fr)))

        for u in range(b_):
            q = e.add(e.mul(u, fl), lid)
            r, j = e.div(q, b_), e.rem(q, b_)
            gr, gj = grow(e, r), e.add(k0, j)
            inside = e.and_(e.lt(gr, n), e.lt(gj, n))
            v = e.load(lref, [*bi, gr, gj], mask=inside)
            # entries of the block past n act as the identity, rows past n as zeros
            ident = e.vselect(e.and_(e.lt(r, b_), e.eq(r, j)), one, zero)
            e.store(e.vselect(inside, v, ident), st, [r, j])
        e.barrier()
        a = [e.load(st, [lid, j]) for j in range(b_)]
        # left-looking, column by column: lane k (its row's earlier entries in registers)
        # takes the pivot; after one barrier every lane below it takes its entry of
        # column k from the block's row k, x_k = (a_k - sum_t x_t L[k, t]) / L[k, k]
        xs: list[SSAValue] = []
        sq = zero  # sum of the squares of this row's entries so far
        for k in range(b_):

            def pivot(f: KernelEmitter, k: int = k, sq: SSAValue = sq) -> list[SSAValue]:
                d = f.fsub(a[k], sq)
                piv = f.vselect(f.fgt(d, zero), f.sqrt(d), nan)
                assert sinv is not None
                f.store(piv, srow, [k, k])
                f.store(f.fdiv(one, piv), sinv, [k])
                return []

            if not every:
                e.if_(e.eq(lid, k), pivot)
            if k or not every:
                e.barrier()  # row k of the block (and, without every, its pivot) written
            acc = a[k]
            row = []
            for h in range(0, k, vw):
                v = e.op(tt.LoadVectorOp(srow, [e.index(k), e.index(h)], vw))
                row += [e.extract(v, x) for x in range(vw)]
            for t in range(k):
                acc = e.op(math.FmaOp(e.op(arith.NegfOp(xs[t])), row[t], acc))
            if every:
                # lane k's sum of squares, from its entries in row k, in its order
                sk = zero
                for t in range(k):
                    sk = e.op(math.FmaOp(row[t], row[t], sk))
                d = e.fsub(e.load(st, [k, k]), sk)
                piv = e.vselect(e.fgt(d, zero), e.sqrt(d), nan)
                inv = e.fdiv(one, piv)
            else:
                assert sinv is not None
                piv, inv = e.load(srow, [k, k]), e.load(sinv, [k])
            below = e.lt(k, lid)
            x = e.vselect(below, e.fmul(acc, inv), e.vselect(e.eq(lid, k), piv, zero))
            e.store(x, srow, [lid, k], mask=e.and_(below, e.lt(lid, b_)))
            if not every:
                sq = e.op(math.FmaOp(x, x, sq))
            xs.append(x)
        if every:
            e.barrier()  # every lane has read the diagonal of the staged block
        for j in range(b_):
            e.store(xs[j], st, [lid, j])
        e.barrier()
        for u in range(b_):
            q = e.add(e.mul(u, fl), lid)
            r, j = e.div(q, b_), e.rem(q, b_)
            gr, gj = grow(e, r), e.add(k0, j)
            blk = e.lt(r, b_)
            v = e.load(st, [r, j])
            # the block into the scratch buffer (tile 0), the rows below into L
            e.store(v, dref, [*bi, kblk, r, j], mask=e.and_(blk, e.eq(c, 0)))
            rest = e.and_(e.op(arith.XOrIOp(blk, e.const(1, i1))), e.lt(gr, n))
            e.store(v, lref, [*bi, gr, gj], mask=rest)

    # ---- 2. the updates: A[I, J] -= L[I, k0:k0+kw] L[J, k0:k0+kw]^T over a region
    def build_update(e: KernelEmitter, args: list[SSAValue]) -> None:
        lref, k0, chunks, base, cend, tr, tc = args
        b, rest = _divmod(e, e.tile_id(), e.op(arith.MuliOp(tr, tc)))
        bi_, bj_ = _divmod(e, rest, tc)
        bi = mat(e, b)
        lid = e.local_id()
        r0, c0 = e.add(base, e.mul(bi_, ut)), e.add(base, e.mul(bj_, ut))

        def panel(g0: Idx) -> fg.Stage:
            def stage(c: KernelEmitter, kc: Idx, r: Idx, k: Idx) -> SSAValue:
                gr = c.add(g0, r)
                return c.load(lref, [*bi, gr, c.add(kc, k)], mask=c.lt(gr, n))
            return stage

        vec = 4

        def panel_copy(g0: Idx) -> mg.Copy:
            def copy(c: KernelEmitter, sref: SSAValue, dst: list[Idx], kc: Idx, r: Idx,
                     k: Idx) -> None:
                gr = c.add(g0, r)
                inside = c.lt(gr, n)
                at = [*bi, c.select(inside, gr, 0), c.add(kc, k)]
                c.emit(tt.CopyAsyncOp(sref, [c.index(x) for x in dst], lref,
                                      [c.index(x) for x in at], vec, c.select(inside, vec, 0)))
            return copy

        def work(w: KernelEmitter) -> list[SSAValue]:
            if mma:
                copies = (panel_copy(r0), panel_copy(c0)) if MMA_ASYNC and n % 4 == 0 else None
                sums = mg.mma_tile(w, lid, b_, k0, chunks, panel(r0), panel(c0), lanes=ul,
                                   tile=ut, prefetch=MMA_PREFETCH, copies=copies, vec=vec)
            else:
                sums = fg.fma_tile(w, et, lid, b_, k0, chunks, panel(r0), panel(c0), tile=ut)
            for ri, cj, acc in sums:
                gi, gj = w.add(r0, ri), w.add(c0, cj)
                ok = w.and_(w.and_(w.lt(gi, n), w.lt(gj, cend)), w.le(gj, gi))
                v = w.load(lref, [*bi, gi, gj], mask=ok)
                w.store(w.fsub(v, acc), lref, [*bi, gi, gj], mask=ok)
            return []

        e.if_(e.le(bj_, bi_), work)

    # ---- 3. the diagonal blocks into L
    def build_scatter(e: KernelEmitter, args: list[SSAValue]) -> None:
        lref, dref = args
        b, kblk = e.div(e.tile_id(), nb), e.rem(e.tile_id(), nb)
        bi = mat(e, b)
        lid = e.local_id()
        k0 = e.mul(kblk, b_)
        for u in range(cdiv(b_ * b_, COPY_LANES)):
            q = e.add(e.mul(u, COPY_LANES), lid)
            i, j = e.div(q, b_), e.rem(q, b_)
            gi, gj = e.add(k0, i), e.add(k0, j)
            ok = e.and_(e.and_(e.lt(q, b_ * b_), e.lt(gi, n)), e.le(j, i))
            e.store(e.load(dref, [*bi, kblk, i, j], mask=ok), lref, [*bi, gi, gj], mask=ok)

    launch = fg.Launches(lw)
    for step in fg.panel_schedule(n, b_, pw):
        if len(step) == 1:
            (k,) = step
            ftiles = max(1, cdiv(n - (k + 1) * b_, fr))
            args = [out, diag, lw.host_index(k), lw.host_index(ftiles)]
            launch("cholesky_factor", fl, nbat * ftiles, build_factor, args)
            continue
        k0, chunks, base, cend = step
        tr, tc = cdiv(n - base, ut), cdiv(cend - base, ut)
        args = [out, *(lw.host_index(v) for v in (k0, chunks, base, cend, tr, tc))]
        launch("cholesky_update", ul, nbat * tr * tc, build_update, args)
    lw.kernel("cholesky_scatter", [out, diag], COPY_LANES, [nbat * nb, 1, 1], build_scatter)
    lw.env[op.result] = out
