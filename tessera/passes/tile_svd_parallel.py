"""Parallel one-sided Jacobi SVD for larger matrices: one tile per column pair (f64), or
per pair of column blocks (f32, the steps of :mod:`tile_svd_blocked`; the init, check,
norm and place kernels below are shared).

Used by :func:`tile_linalg.lower_svd` when ``k = min(m, n)`` exceeds
:data:`PARALLEL_MIN_K` (smaller matrices keep the one-tile-per-matrix kernel). Same
algorithm and results as that kernel (reduced SVD, ``A = U diag(S) Vh``, one-sided
Jacobi/Hestenes on the columns of ``W = A`` or ``A^T``, rotations accumulated in ``V``),
with the pairs ordered so that many are rotated at once:

* ``W`` and ``V`` are kept transposed (``Wt[j, :]`` is column ``j``, contiguous), with
  ``k`` rounded up to an even ``K`` (a padding column of zeros, which never rotates);
  ``V`` is kept in f64 whatever the element type, and each rotation's cosine and sine
  are computed in f64 (rounded to the element type for ``W``), so that ``V`` stays
  orthogonal through the ``K`` rotations per column and sweep (in f32 it drifted past
  1e-5 at 1024 x 1024) and ``W`` stays ``A V`` (rotations computed in f32 gave
  ``|U S Vh - A| / |A|`` of 1.2e-4 at 1024 x 1024 on an H100, 2.5e-5 at 256 x 256 in a
  numpy model, against 2.0e-6 with the f64 rotation);
* a sweep is ``K - 1`` *steps* of the round-robin (chess tournament) ordering: in step
  ``s`` the ``K/2`` pairs are disjoint, position 0 fixed and positions ``1..K-1``
  shifted by ``s``, so together the steps of a sweep visit every pair once. One launch
  of the *step kernel* per step: tile ``(b, j)`` rotates pair ``j`` of matrix ``b``
  (three tile-wide dot products with ``ttile.reduce``, the rotation of the two
  columns of ``Wt`` and of ``Vt``) when ``|w_p . w_q| > tol sqrt(|w_p|^2 |w_q|^2)``,
  ``tol = sqrt(r) eps`` (the rounding noise of an ``r``-term dot product), and
  records that it did in ``flags[b, j]``;
* after each sweep a *check kernel* (one tile per matrix) sets ``done[b]`` when no pair
  of matrix ``b`` rotated and clears the flags; the step kernels of a matrix that is
  done return at once. There are at most :data:`PARALLEL_MAX_SWEEPS` sweeps: the
  host function is a fixed sequence of launches, so every call ends after
  ``PARALLEL_MAX_SWEEPS * K`` launches whatever the input (no GPU loop waits on data);
* then a *norm kernel* writes ``|w_j|`` and a *place kernel* (one tile per column)
  ranks each column by descending norm (ties keep column order) and writes ``S``,
  ``U`` (``w_j / S_j``, 0 where ``S_j = 0``) and ``Vh``.

Work per sweep is ``O(K^2 max(m, n))``; each step reads and writes each column of
``Wt`` and ``Vt`` about twice, so a step costs about one pass over ``W`` and ``V``.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable
from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import Float32Type, Float64Type, IndexType, MemRefType, f32, f64, i32
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

PARALLEL_MIN_K = 48
"""Matrices with ``min(m, n)`` above this take the parallel kernels."""

PARALLEL_MAX_SWEEPS = 18
"""Most sweeps of the parallel kernels (launched unconditionally; a converged matrix
skips the work). A numpy model of these kernels on random f32 matrices converged in 12
sweeps at 256 x 256 and 14 at 1024 x 1024 (about one more per doubling)."""

GROUP = 256
"""Most lanes per tile (fewer for short columns)."""


def unit_roundoff(et: Attribute) -> float:
    """The unit roundoff of f32 or f64 (``2^-23`` / ``2^-52``, as the rotation tests use)."""
    return 2.0**-52 if isinstance(et, Float64Type) else 2.0**-23


def _lanes(n: int) -> int:
    return min(GROUP, max(32, cdiv(n, 32) * 32))


def strided_lanes(e: KernelEmitter, lid: SSAValue, n: int, group: int, body) -> None:
    """``body(e, i, mask)`` for ``i = lid + group * t < n``."""
    if n <= group:
        body(e, lid, None if n == group else e.lt(lid, n))
        return

    def step(b: KernelEmitter, base: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        i = b.index(b.add(base, lid))
        body(b, i, None if n % group == 0 else b.lt(i, n))
        return []

    e.for_(0, n, group, [], step)


def _pos(e: KernelEmitter, i: Idx, s: Idx, n: int) -> Idx:
    """Round-robin position ``i >= 1`` (of ``n``) at step ``s``: positions 1..n-1
    rotate (position 0 stays where it is)."""
    return e.add(e.rem(e.add(e.sub(i, 1), s), n - 1), 1)


def round_robin_pair(e: KernelEmitter, m: Idx, s: Idx, n: int) -> tuple[Idx, Idx]:
    """The members (lower first) of pair ``m`` of ``n`` (even) at step ``s`` of the
    round-robin (chess tournament) ordering: the ``n - 1`` steps of a sweep pair every
    member with every other once, in ``n / 2`` disjoint pairs per step."""
    x = e.select(e.eq(m, 0), 0, _pos(e, e.max(m, 1), s, n))
    y = _pos(e, e.sub(n - 1, m), s, n)
    return e.min(x, y), e.max(x, y)


def lower_svd_parallel(lw: _FunctionLowering, op: g.SVDOp, et: Attribute) -> None:
    """``tgraph.svd`` with the parallel kernels of the module docstring."""
    shape = g.shape_of(op.input)
    *batch, m, n = shape
    k, r, trans = min(m, n), max(m, n), m < n
    from tessera.passes import tile_svd_blocked

    # f32: the blocked steps of tile_svd_blocked (columns padded to an even number of
    # blocks); f64: one column pair per tile (columns padded to an even count)
    blocked = isinstance(et, Float32Type)
    bw = tile_svd_blocked.block_cols(k)
    kk = tile_svd_blocked.padded_cols(k) if blocked else k + (k % 2)
    nb = prod(batch)
    half = kk // 2
    nflags = kk // bw // 2 if blocked else half
    u_out, s_out, vh_out = (lw.alloc(v.type) for v in (op.u, op.s, op.vh))
    wt = lw.alloc(MemRefType(et, [nb, kk, r]))
    # V accumulates about K * sweeps rotations per column: kept in f64 (rotations
    # normalized in f64) so that it stays orthogonal to f64 roundoff
    vet = f64
    vt = lw.alloc(MemRefType(vet, [nb, kk, kk]))
    sn = lw.alloc(MemRefType(et, [nb, kk]))
    flags = lw.alloc(MemRefType(f32, [nb, nflags]))
    done = lw.alloc(MemRefType(f32, [nb]))
    a_ref = lw.mem(op.input)
    gr, gk = _lanes(r), _lanes(kk)
    tol = pymath.sqrt(r) * unit_roundoff(et)

    def mat(e: KernelEmitter, b: Idx) -> list[Idx]:
        """The batch index of matrix ``b`` in the input and outputs."""
        return e.unravel(b, batch) if batch else []

    # ---- init: Wt[j] = column j of A (row j of A for wide A), 0 for the padding;
    # Vt = I; flags = 0, done = 0
    def build_init(e: KernelEmitter, args: list[SSAValue]) -> None:
        wref, vref, fref, dref, aref = args
        t = e.tile_id()
        b, j = e.div(t, kk), e.rem(t, kk)
        bi = mat(e, b)
        lid = e.local_id()
        real = e.lt(j, k)

        def w(c: KernelEmitter, i: SSAValue, ok: SSAValue | None) -> None:
            src = [*bi, j, i] if trans else [*bi, i, j]
            v = c.load(aref, src, mask=c.and_(ok, real))
            c.store(v, wref, [b, j, i], mask=ok)

        def v(c: KernelEmitter, i: SSAValue, ok: SSAValue | None) -> None:
            c.store(c.vselect(c.eq(i, j), c.const(1.0, vet), c.const(0.0, vet)), vref,
                    [b, j, i], mask=ok)

        strided_lanes(e, lid, r, gr, w)
        strided_lanes(e, lid, kk, gr, v)
        lane0 = e.eq(lid, 0)
        e.store(e.const(0.0, f32), fref, [b, e.rem(j, nflags)],
                mask=e.and_(lane0, e.lt(j, nflags)))
        e.store(e.const(0.0, f32), dref, [b], mask=e.and_(lane0, e.eq(j, 0)))

    lw.kernel("svd_init", [wt, vt, flags, done, a_ref], gr, [nb * kk, 1, 1], build_init)

    # ---- one step of a sweep: tile (b, j) rotates pair j
    def build_step(e: KernelEmitter, args: list[SSAValue]) -> None:
        wref, vref, fref, dref, s = args
        t = e.tile_id()
        b, j = e.div(t, half), e.rem(t, half)
        lid = e.local_id()
        zero = e.const(0.0, et)
        p, q = round_robin_pair(e, j, s, kk)
        active = e.op(arith.CmpfOp(e.load(dref, [b]), e.const(0.0, f32), "oeq"))

        def work(c: KernelEmitter) -> list[SSAValue]:
            def dot(d: KernelEmitter, base: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
                i = d.index(d.add(base, lid))
                ok = d.lt(i, r) if r % gr else None
                wp = d.load(wref, [b, p, i], mask=ok)
                wq = d.load(wref, [b, q, i], mask=ok)
                return [d.fadd(acc[0], d.fmul(wp, wp)), d.fadd(acc[1], d.fmul(wq, wq)),
                        d.fadd(acc[2], d.fmul(wp, wq))]

            parts = c.for_(0, r, gr, [zero, zero, zero], dot)
            alpha, beta, gamma = (c.op(tt.ReduceOp(v, "sum", "group")) for v in parts)
            agamma = c.op(math.AbsFOp(gamma))
            rot = c.fgt(agamma, c.fmul(c.const(tol, et), c.sqrt(c.fmul(alpha, beta))))
            # the rotation in f64 (for f32 input, one computed in f32 is not orthogonal
            # to f32 roundoff and its bias grows with every rotation), rounded to the
            # element type for W
            a64, b64, g64 = (c.convert(v, vet) for v in (alpha, beta, gamma))
            one64, zero64 = c.const(1.0, vet), c.const(0.0, vet)
            z = c.fdiv(c.fsub(b64, a64), c.fmul(c.const(2.0, vet), g64))
            sign = c.vselect(c.op(arith.CmpfOp(z, zero64, "oge")), one64, c.const(-1.0, vet))
            az = c.op(math.AbsFOp(z))
            t64 = c.fdiv(sign, c.fadd(az, c.sqrt(c.fadd(one64, c.fmul(z, z)))))
            cs64 = c.fdiv(one64, c.sqrt(c.fadd(one64, c.fmul(t64, t64))))
            sn64 = c.fmul(cs64, t64)
            cs, sn_ = c.convert(cs64, et), c.convert(sn64, et)

            def rotate(d: KernelEmitter) -> list[SSAValue]:
                for ref, length, cc, ss in ((wref, r, cs, sn_), (vref, kk, cs64, sn64)):
                    def body(h: KernelEmitter, i: SSAValue, ok: SSAValue | None, ref=ref,
                             cc=cc, ss=ss) -> None:
                        a = h.load(ref, [b, p, i], mask=ok)
                        bb = h.load(ref, [b, q, i], mask=ok)
                        h.store(h.fsub(h.fmul(cc, a), h.fmul(ss, bb)), ref, [b, p, i], mask=ok)
                        h.store(h.fadd(h.fmul(ss, a), h.fmul(cc, bb)), ref, [b, q, i], mask=ok)

                    strided_lanes(d, lid, length, gr, body)
                d.store(d.const(1.0, f32), fref, [b, j], mask=d.eq(lid, 0))
                return []

            c.if_(rot, rotate)
            return []

        e.if_(active, work)

    # ---- after a sweep: done[b] when no pair rotated; flags cleared
    def build_check(e: KernelEmitter, args: list[SSAValue]) -> None:
        fref, dref = args
        b = e.tile_id()
        lid = e.local_id()

        def acc(c: KernelEmitter, base: SSAValue, a: list[SSAValue]) -> list[SSAValue]:
            i = c.index(c.add(base, lid))
            ok = c.lt(i, nflags)
            f = c.load(fref, [b, i], mask=ok, other=c.const(0.0, f32))
            c.store(c.const(0.0, f32), fref, [b, i], mask=ok)
            return [c.fmax(a[0], f)]

        (mine,) = e.for_(0, nflags, gk, [e.const(0.0, f32)], acc)
        anyrot = e.op(tt.ReduceOp(mine, "max", "group"))
        quiet = e.op(arith.CmpfOp(anyrot, e.const(0.0, f32), "oeq"))
        e.store(e.const(1.0, f32), dref, [b], mask=e.and_(e.eq(lid, 0), quiet))

    if blocked:
        nsteps, launch_step = tile_svd_blocked.block_step_launcher(
            lw, wt, vt, flags, done, nb, kk, r, et, bw)
    else:
        nsteps, launch_step = kk - 1, _pair_step_launcher(lw, build_step, wt, vt, flags, done,
                                                         nb * half, gr)
    check_name: str | None = None
    for _ in range(PARALLEL_MAX_SWEEPS):
        for s in range(nsteps):
            launch_step(s)
        if check_name is None:
            check_name = lw.kernel("svd_check", [flags, done], gk, [nb, 1, 1], build_check)
        else:
            lw.launch(check_name, [flags, done], [nb, 1, 1])

    # ---- norms, then placement in order of descending S
    def build_norm(e: KernelEmitter, args: list[SSAValue]) -> None:
        wref, snref = args
        t = e.tile_id()
        b, j = e.div(t, kk), e.rem(t, kk)
        lid = e.local_id()

        def acc(c: KernelEmitter, base: SSAValue, a: list[SSAValue]) -> list[SSAValue]:
            i = c.index(c.add(base, lid))
            ok = c.lt(i, r) if r % gr else None
            w = c.load(wref, [b, j, i], mask=ok)
            return [c.fadd(a[0], c.fmul(w, w))]

        (part,) = e.for_(0, r, gr, [e.const(0.0, et)], acc)
        tot = e.op(tt.ReduceOp(part, "sum", "group"))
        e.store(e.sqrt(tot), snref, [b, j], mask=e.eq(lid, 0))

    lw.kernel("svd_norm", [wt, sn], gr, [nb * kk, 1, 1], build_norm)

    def build_place(e: KernelEmitter, args: list[SSAValue]) -> None:
        uref, sref, vhref, wref, vref, snref = args
        t = e.tile_id()
        b, j = e.div(t, k), e.rem(t, k)
        bi = mat(e, b)
        lid = e.local_id()
        zero, one = e.const(0.0, et), e.const(1.0, et)
        sj = e.load(snref, [b, j])

        def count(c: KernelEmitter, base: SSAValue, a: list[SSAValue]) -> list[SSAValue]:
            i = c.index(c.add(base, lid))
            ok = c.lt(i, k)
            si = c.load(snref, [b, i], mask=ok)
            before = c.op(arith.OrIOp(c.fgt(si, sj), c.and_(c.feq(si, sj), c.lt(i, j))))
            before = c.and_(ok, before)
            return [c.fadd(a[0], c.convert(before, f32))]

        (mine,) = e.for_(0, k, gr, [e.const(0.0, f32)], count)
        # a count below 2^24: exact in f32
        rank = e.convert(e.convert(e.op(tt.ReduceOp(mine, "sum", "group")), i32), IndexType())
        inv = e.vselect(e.fgt(sj, zero), e.fdiv(one, sj), zero)
        e.store(sj, sref, [*bi, rank], mask=e.eq(lid, 0))

        def left(c: KernelEmitter, i: SSAValue, ok: SSAValue | None) -> None:
            x = c.fmul(c.load(wref, [b, j, i], mask=ok), inv)
            c.store(x, vhref if trans else uref, [*bi, rank, i] if trans else [*bi, i, rank],
                    mask=ok)

        def right(c: KernelEmitter, i: SSAValue, ok: SSAValue | None) -> None:
            x = c.convert(c.load(vref, [b, j, i], mask=ok), et)
            c.store(x, uref if trans else vhref, [*bi, i, rank] if trans else [*bi, rank, i],
                    mask=ok)

        strided_lanes(e, lid, r, gr, left)
        strided_lanes(e, lid, k, gr, right)

    lw.kernel("svd_place", [u_out, s_out, vh_out, wt, vt, sn], gr, [nb * k, 1, 1], build_place)
    lw.env[op.u], lw.env[op.s], lw.env[op.vh] = u_out, s_out, vh_out



def _pair_step_launcher(
    lw: _FunctionLowering, build: Callable[[KernelEmitter, list[SSAValue]], None],
    wt: SSAValue, vt: SSAValue, flags: SSAValue, done: SSAValue, tiles: int, group: int,
) -> Callable[[int], None]:
    """``launch(s)``: step ``s`` of a sweep of the pair kernel ``build``."""
    name: list[str] = []
    steps: dict[int, SSAValue] = {}  # one host constant per step index, reused by sweeps

    def launch(s: int) -> None:
        if s not in steps:
            steps[s] = lw.host_index(s)
        args = [wt, vt, flags, done, steps[s]]
        if not name:
            name.append(lw.kernel("svd_step", args, group, [tiles, 1, 1], build))
        else:
            lw.launch(name[0], args, [tiles, 1, 1])

    return launch
