"""One tile of an f32 GEMM on the tensor cores at f32 accuracy (3xTF32), for the blocked
Cholesky factor's updates (``tile_cholesky_blocked``).

Same contract as :func:`tile_fma_gemm.fma_tile` (a :data:`TILE`-square block of ``C =
A B`` over operands the caller stages element by element, returned as ``(row, col,
sum)`` triples), computed with the m16n8k8 tf32 ``ttile.mma``:

* Each operand ``x`` is split into ``hi = tf32(x)`` and ``lo = tf32(x - hi)``
  (:func:`split`, round to nearest on the bits), and each product is ``a_lo b_hi + a_hi
  b_lo + a_hi b_hi``, the small terms first: three tensor-core products, an error of
  about ``2^-22`` of ``|a| |b|`` per term (``a_lo b_lo`` and the rounding of ``lo`` are
  what is left out), against ``2^-24`` for an f32 FMA. That is the 3xTF32 method.
* A chunk of ``chunk`` reduction indices of each operand is staged as ``[TILE, chunk +
  PAD]`` in shared memory (row ``i`` of the block, then ``k``): the warps of a tile
  split the block 2x2 (128 lanes, 32x32 each) or 4x2 (256 lanes, 16x32 each).
* Within 16 indices, the mma's ``k`` of lane ``(g, t)`` (``t = lane % 4``) is permuted
  so that a lane's four indices are adjacent: logical ``t + 4h`` of step ``s`` is
  physical ``4t + 2s + h`` (the same for A and B, so the sum is unchanged). Each lane
  then reads its fragments of two steps as one 16-byte vector per row; with rows
  :data:`PAD` elements apart, the 8 lanes of each vector phase hit distinct banks.

Every sum runs in a fixed order (chunks, then steps, then the three products):
deterministic.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith
from xdsl.dialects.builtin import VectorType, f32, i32
from xdsl.ir import SSAValue

from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter
from tessera.passes.tile_fma_gemm import Stage

Copy = Callable[[KernelEmitter, SSAValue, list[Idx], Idx, Idx, Idx], None]
"""``copy(c, sref, dst, kc, i, k)``: start copying an operand's elements (see mma_tile)."""

TILE = 64
"""Rows and columns of a tile's output block."""

LANES = 128
"""Lanes of a tile unless a caller asks for 256 (the warps then take 16 rows each)."""

PAD = 16
"""Elements of padding per staged row: rows ``chunk + PAD`` apart, ``= 16 (mod 32)``
words, so two rows' 16-byte vectors fall in opposite halves of the banks."""

_ROUND = 0x1000
_MASK = -0x2000  # 0xFFFFE000: sign, exponent and the 10 mantissa bits of tf32


def tf32(e: KernelEmitter, x: SSAValue) -> SSAValue:
    """``x`` rounded to the nearest tf32 (ties away from zero), as an f32."""
    bits = e.op(arith.BitcastOp(x, i32))
    r = e.op(arith.AndIOp(e.op(arith.AddiOp(bits, e.const(_ROUND, i32))), e.const(_MASK, i32)))
    return e.op(arith.BitcastOp(r, f32))


def split(e: KernelEmitter, x: SSAValue) -> tuple[SSAValue, SSAValue]:
    """``(hi, lo)``: ``hi = tf32(x)``, ``lo = tf32(x - hi)`` (``x - hi`` is exact)."""
    hi = tf32(e, x)
    return hi, tf32(e, e.fsub(x, hi))


def mma_tile(
    e: KernelEmitter, lid: Idx, chunk: int, k0: Idx, chunks: Idx, stage_a: Stage,
    stage_b: Stage, *, lanes: int = LANES, tile: int = TILE, prefetch: bool = False,
    a_along_k: bool = True, b_along_k: bool = True,
    copies: tuple[Copy, Copy] | None = None, vec: int = 4,
) -> list[tuple[Idx, Idx, SSAValue]]:
    """``(i, j, sum_k A[i, k] B[k, j])`` for the entries of a ``tile``-square block lane
    ``lid`` holds, over ``k`` in ``[k0, k0 + chunk * chunks)``, f32 operands (see the
    module docstring).

    ``stage_*(c, kc, i, k)`` returns the operand's element for row (column of B) ``i`` of
    the block and reduction index ``kc + k``; ``*_along_k``: adjacent lanes stage adjacent
    ``k`` (an operand contiguous along the reduction reads coalesced), else adjacent
    rows. The ``lanes // 32`` warps split the block ``lanes // 64`` down and 2 across.
    ``prefetch``: each chunk's loads are issued before the previous chunk's products
    (held in registers meanwhile), so their latency overlaps the tensor cores. All
    ``lanes`` lanes must call it together (it has barriers and warp-wide mmas).

    ``copies`` (both operands contiguous along ``k``; ``stage_*`` are then unused): each
    ``copy(c, sref, dst, kc, i, k)`` starts a ``ttile.copy_async`` of the operand's ``vec``
    elements from ``(i, kc + k)`` to ``sref[*dst]``; the chunks are double-buffered in
    shared memory, the next one copied while the tensor cores work on this one.
    """
    assert lanes in (128, 256) and tile in (64, 128), (lanes, tile)
    assert chunk % 16 == 0 and (tile * chunk) % lanes == 0, chunk
    warps_m = lanes // 64  # 2 or 4 warps down the block, 2 across
    wrows, wcols = tile // warps_m, tile // 2
    mi_n, ni_n = wrows // 16, wcols // 8  # m16 and n8 fragments per warp
    bufs = [2] if copies else []
    sa = e.op(tt.AllocSharedOp([*bufs, tile, chunk + PAD], f32, alignment=16))
    sb = e.op(tt.AllocSharedOp([*bufs, tile, chunk + PAD], f32, alignment=16))
    warp, lane = e.div(lid, 32), e.rem(lid, 32)
    g, t4 = e.div(lane, 4), e.mul(e.rem(lane, 4), 4)
    wr, wc = e.mul(e.div(warp, 2), wrows), e.mul(e.rem(warp, 2), wcols)
    per = tile * chunk // lanes

    # element u of a lane is q = u * lanes + lid of the chunk, at (q / chunk, q % chunk)
    # along k, else (q % tile, q / tile); lanes is a multiple of both, so u only adds a
    # constant to the lane's own position
    assert lanes % chunk == 0 and lanes % tile == 0, (lanes, chunk, tile)
    along_at = (e.div(lid, chunk), e.rem(lid, chunk))
    across_at = (e.rem(lid, tile), e.div(lid, tile))

    def coords(c: KernelEmitter, u: int, along: bool) -> tuple[Idx, Idx]:
        if along:
            return c.add(along_at[0], u * (lanes // chunk)), along_at[1]
        return across_at[0], c.add(across_at[1], u * (lanes // tile))

    operands = ((stage_a, a_along_k, sa), (stage_b, b_along_k, sb))

    def loads(c: KernelEmitter, kc: Idx) -> list[SSAValue]:
        """This lane's elements of the chunk from ``kc``."""
        return [fn(c, kc, *coords(c, u, along)) for u in range(per) for fn, along, _ in operands]

    def stores(c: KernelEmitter, vals: list[SSAValue]) -> None:
        it = iter(vals)
        for u in range(per):
            for _, along, sref in operands:
                c.store(next(it), sref, [*coords(c, u, along)])

    def stage(c: KernelEmitter, kc: Idx) -> None:
        """All loads first, then the stores (each element's position computed once)."""
        vals = [(i, k, fn(c, kc, i, k)) for u in range(per) for fn, along, _ in operands
                for i, k in [coords(c, u, along)]]
        it = iter(vals)
        for _ in range(per):
            for _, _, sref in operands:
                i, k, v = next(it)
                c.store(v, sref, [i, k])

    def quad(c: KernelEmitter, ref: SSAValue, r: Idx, p: int,
             buf: list[Idx]) -> list[tuple[SSAValue, ...]]:
        """Row ``r``'s four physical indices of this lane at ``p + 4t``, split."""
        at = [c.index(x) for x in (*buf, r, c.add(t4, p))]
        v = c.op(tt.LoadVectorOp(ref, at, 4))
        return [split(c, c.extract(v, x)) for x in range(4)]

    def frag(c: KernelEmitter, parts: list[SSAValue]) -> SSAValue:
        vec = c.const(0.0, VectorType(f32, [len(parts)]))
        for x, p in enumerate(parts):
            vec = c.insert(p, vec, x)
        return vec

    def group(c: KernelEmitter, p: int, acc: list[SSAValue],
              buf: list[Idx]) -> list[SSAValue]:
        """The two k8 steps of the 16 indices from ``p``."""
        acc = list(acc)
        a_rows = []
        for mi in range(mi_n):
            r = c.add(wr, c.add(g, 16 * mi))
            a_rows.append((quad(c, sa, r, p, buf), quad(c, sa, c.add(r, 8), p, buf)))
        b_cols = [quad(c, sb, c.add(wc, c.add(g, 8 * ni)), p, buf) for ni in range(ni_n)]
        for s in range(2):
            # logical k = t + 4h of step s is physical 4t + 2s + h
            afr = [[frag(c, [top[2 * s][w], bot[2 * s][w], top[2 * s + 1][w], bot[2 * s + 1][w]])
                    for w in (0, 1)] for top, bot in a_rows]
            bfr = [[frag(c, [col[2 * s][w], col[2 * s + 1][w]]) for w in (0, 1)]
                   for col in b_cols]
            for mi in range(mi_n):
                (ahi, alo) = afr[mi]
                for ni in range(ni_n):
                    (bhi, blo) = bfr[ni]
                    j = mi * ni_n + ni
                    for x, y in ((alo, bhi), (ahi, blo), (ahi, bhi)):
                        acc[j] = c.op(tt.MmaOp(x, y, acc[j]))
        return acc

    nacc = mi_n * ni_n

    def products(c: KernelEmitter, acc: list[SSAValue], buf: list[Idx] = ()) -> list[SSAValue]:
        c.barrier()
        for p in range(0, chunk, 16):
            acc = group(c, p, acc, list(buf))
        c.barrier()  # the next chunk overwrites the staged operands
        return acc

    cv = chunk // vec  # copies per staged row
    assert vec in (1, 2, 4) and chunk % vec == 0 and lanes % cv == 0, (vec, chunk)
    per_copy = tile * cv // lanes
    copy_at = (e.div(lid, cv), e.mul(e.rem(lid, cv), vec))

    def start(c: KernelEmitter, kc: Idx, buf: Idx) -> None:
        """Start this lane's copies of the chunk from ``kc`` into buffer ``buf``."""
        assert copies is not None
        for u in range(per_copy):
            i, k = c.add(copy_at[0], u * (lanes // cv)), copy_at[1]
            for fn, sref in zip(copies, (sa, sb), strict=True):
                fn(c, sref, [buf, i, k], kc, i, k)
        c.emit(tt.CommitGroupOp())

    def step_async(c: KernelEmitter, ch: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
        # the next chunk (the last one again on the last step) into the other buffer,
        # then wait for this one: at most the group just started still in flight
        nxt = c.min(c.add(ch, 1), c.sub(chunks, 1))
        start(c, c.add(k0, c.mul(nxt, chunk)), c.rem(c.add(ch, 1), 2))
        c.emit(tt.WaitGroupOp(1))
        return products(c, acc, [c.rem(ch, 2)])

    def step(c: KernelEmitter, ch: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
        stage(c, c.add(k0, c.mul(ch, chunk)))
        return products(c, acc)

    def step_prefetched(c: KernelEmitter, ch: SSAValue, carried: list[SSAValue]) -> list[SSAValue]:
        acc, vals = carried[:nacc], carried[nacc:]
        stores(c, vals)
        # the next chunk's loads (the last chunk again on the last step: no masks)
        nxt = loads(c, c.add(k0, c.mul(c.min(c.add(ch, 1), c.sub(chunks, 1)), chunk)))
        return [*products(c, acc), *nxt]

    zero = e.const(0.0, VectorType(f32, [4]))
    if copies:
        start(e, k0, 0)
        accs = e.for_(0, chunks, 1, [zero] * nacc, step_async)
        e.emit(tt.WaitGroupOp(0))
    elif prefetch:
        accs = e.for_(0, chunks, 1, [zero] * nacc + loads(e, k0), step_prefetched)[:nacc]
    else:
        accs = e.for_(0, chunks, 1, [zero] * nacc, step)
    out = []
    for mi in range(mi_n):
        for ni in range(ni_n):
            acc = accs[mi * ni_n + ni]
            for x in range(4):
                dr, dc = tt.mma_c_coords(0, x)  # lane (g, t): (g + dr, 2t + dc)
                row = e.add(wr, e.add(g, 16 * mi + dr))
                col = e.add(wc, e.add(e.div(t4, 2), 8 * ni + dc))
                out.append((row, col, e.extract(acc, x)))
    return out
