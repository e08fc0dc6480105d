"""One-sided Jacobi SVD of small matrices in shared memory: one tile per matrix.

Used by :func:`tile_linalg.lower_svd` for ``k = min(m, n) <= SHARED_MAX_K`` when the
working copies fit in static shared memory (batches of small matrices). Same algorithm
and results as the other SVD kernels (reduced SVD, Hestenes rotations of the columns
of ``W = A`` or ``A^T``, accumulated in ``V``):

* ``W^T`` (``K x r``, ``K`` = ``k`` rounded up to even, a zero padding column) and
  ``V^T`` (``K x K``, f64) live in shared memory;
* a sweep is ``K - 1`` round-robin steps (see :mod:`tile_svd_parallel`); in a step the
  ``K / 2`` disjoint pairs are rotated at once, one warp per pair (dot products with
  ``ttile.reduce scope = warp``, the rotation computed in f64), then a barrier;
* sweeps stop after one without a rotation (a tile-wide ``ttile.reduce``), or after
  :data:`SHARED_MAX_SWEEPS`; then each lane of the first ``k`` computes a column norm
  and its rank (descending, ties in column order), and the tile writes ``S``, ``U``
  (``w_j / S_j``, 0 where ``S_j = 0``) and ``Vh``.
"""

from __future__ import annotations

import math as pymath
from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import Float64Type, IndexType, f32, f64, i1, i32
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import KernelEmitter
from tessera.passes.tile_svd_parallel import round_robin_pair, strided_lanes, unit_roundoff

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

SHARED_MAX_K = 32
"""Largest ``min(m, n)`` for the shared-memory kernel (one warp per pair: 16 warps)."""

SHARED_BYTES = 40 << 10
"""Most shared memory the working copies may take."""

SHARED_MAX_SWEEPS = 30
"""Most sweeps."""


def fits(m: int, n: int, et: Attribute) -> bool:
    """Whether an ``m x n`` matrix of ``et`` takes the shared-memory kernel."""
    k, r = min(m, n), max(m, n)
    kk = k + k % 2
    eb = 8 if isinstance(et, Float64Type) else 4
    return k <= SHARED_MAX_K and kk * r * eb + kk * kk * 8 + 2 * kk * 8 <= SHARED_BYTES


def lower_svd_shared(lw: _FunctionLowering, op: g.SVDOp, et: Attribute) -> None:
    """``tgraph.svd`` with the kernel of the module docstring."""
    shape = g.shape_of(op.input)
    *batch, m, n = shape
    k, r, trans = min(m, n), max(m, n), m < n
    kk = k + k % 2
    half = kk // 2
    group = 32 * half
    u_out, s_out, vh_out = (lw.alloc(v.type) for v in (op.u, op.s, op.vh))
    tol = pymath.sqrt(r) * unit_roundoff(et)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        uref, sref, vhref, aref = args
        b = e.tile_id()
        bi = e.unravel(b, batch) if batch else []
        lid = e.local_id()
        lane, warp = e.lane_id(), e.warp_id()
        w_s = e.op(tt.AllocSharedOp([kk, r], et))
        v_s = e.op(tt.AllocSharedOp([kk, kk], f64))
        sn_s = e.op(tt.AllocSharedOp([kk], et))
        rank_s = e.op(tt.AllocSharedOp([kk], i32))
        zero, one = e.const(0.0, et), e.const(1.0, et)

        # W^T and V^T = I
        def load_w(c: KernelEmitter, t: SSAValue, ok: SSAValue | None) -> None:
            j, i = c.div(t, r), c.rem(t, r)
            real = c.and_(ok, c.lt(j, k))
            v = c.load(aref, [*bi, j, i] if trans else [*bi, i, j], mask=real)
            c.store(c.vselect(c.lt(j, k), v, zero), w_s, [j, i], mask=ok)

        def load_v(c: KernelEmitter, t: SSAValue, ok: SSAValue | None) -> None:
            j, i = c.div(t, kk), c.rem(t, kk)
            c.store(c.vselect(c.eq(i, j), c.const(1.0, f64), c.const(0.0, f64)), v_s, [j, i],
                    mask=ok)

        strided_lanes(e, lid, kk * r, group, load_w)
        strided_lanes(e, lid, kk * kk, group, load_v)
        e.barrier()

        def step(c: KernelEmitter, s: SSAValue, carried: list[SSAValue]) -> list[SSAValue]:
            p, q = round_robin_pair(c, warp, s, kk)
            z0 = c.const(0.0, et)

            def dot(d: KernelEmitter, base: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
                i = d.index(d.add(base, lane))
                ok = d.lt(i, r) if r % 32 else None
                wp = d.load(w_s, [p, i], mask=ok)
                wq = d.load(w_s, [q, i], mask=ok)
                return [d.fadd(acc[0], d.fmul(wp, wp)), d.fadd(acc[1], d.fmul(wq, wq)),
                        d.fadd(acc[2], d.fmul(wp, wq))]

            parts = c.for_(0, r, 32, [z0, z0, z0], dot)
            alpha, beta, gamma = (c.op(tt.ReduceOp(v, "sum", "warp")) for v in parts)
            rot = c.fgt(c.op(math.AbsFOp(gamma)),
                      c.fmul(c.const(tol, et), c.sqrt(c.fmul(alpha, beta))))
            a64, b64, g64 = (c.convert(v, f64) for v in (alpha, beta, gamma))
            one64, zero64 = c.const(1.0, f64), c.const(0.0, f64)
            # gamma = 0 when not rotating: keep z finite
            g64 = c.vselect(rot, g64, one64)
            zz = c.fdiv(c.fsub(b64, a64), c.fmul(c.const(2.0, f64), g64))
            sign = c.vselect(c.op(arith.CmpfOp(zz, zero64, "oge")), one64, c.const(-1.0, f64))
            t64 = c.fdiv(sign, c.fadd(c.op(math.AbsFOp(zz)),
                                      c.sqrt(c.fadd(one64, c.fmul(zz, zz)))))
            cs64 = c.vselect(rot, c.fdiv(one64, c.sqrt(c.fadd(one64, c.fmul(t64, t64)))),
                             one64)
            sn64 = c.vselect(rot, c.fmul(cs64, t64), zero64)
            cs, sn_ = c.convert(cs64, et), c.convert(sn64, et)
            for ref, length, cc, ss in ((w_s, r, cs, sn_), (v_s, kk, cs64, sn64)):
                def body(h: KernelEmitter, base: SSAValue, _: list[SSAValue], ref=ref,
                         length=length, cc=cc, ss=ss) -> list[SSAValue]:
                    i = h.index(h.add(base, lane))
                    ok = h.lt(i, length) if length % 32 else None
                    a = h.load(ref, [p, i], mask=ok)
                    bb = h.load(ref, [q, i], mask=ok)
                    h.store(h.fsub(h.fmul(cc, a), h.fmul(ss, bb)), ref, [p, i], mask=ok)
                    h.store(h.fadd(h.fmul(ss, a), h.fmul(cc, bb)), ref, [q, i], mask=ok)
                    return []

                c.for_(0, length, 32, [], body)
            c.barrier()
            return [c.fmax(carried[0], c.convert(rot, f32))]

        def sweep(c: KernelEmitter) -> list[SSAValue]:
            (mine,) = c.for_(0, kk - 1, 1, [c.const(0.0, f32)], step)
            anyrot = c.op(tt.ReduceOp(mine, "max", "group"))
            return [c.op(arith.CmpfOp(anyrot, c.const(0.0, f32), "oeq"))]

        def sweeps(c: KernelEmitter, _: SSAValue, done: list[SSAValue]) -> list[SSAValue]:
            return c.if_(done[0], lambda t: [t.const(1, i1)], sweep, [i1])

        e.for_(0, SHARED_MAX_SWEEPS, 1, [e.const(0, i1)], sweeps)

        # norms, ranks, then the outputs
        is_col = e.lt(lid, k)

        def norm(c: KernelEmitter, i: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
            w = c.load(w_s, [lid, i], mask=is_col)
            return [c.fadd(acc[0], c.fmul(w, w))]

        (ss,) = e.for_(0, r, 1, [zero], norm)
        sj = e.sqrt(ss)
        e.store(sj, sn_s, [lid], mask=is_col)
        e.barrier()

        def count(c: KernelEmitter, i: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
            si = c.load(sn_s, [i])
            before = c.op(arith.OrIOp(c.fgt(si, sj), c.and_(c.feq(si, sj), c.lt(i, lid))))
            return [c.add(acc[0], c.select(before, 1, 0))]

        (rank,) = e.for_(0, k, 1, [e.index(0)], count)
        e.store(e.convert(rank, i32), rank_s, [lid], mask=is_col)
        e.store(sj, sref, [*bi, rank], mask=is_col)
        e.barrier()

        def write_w(c: KernelEmitter, t: SSAValue, ok: SSAValue | None) -> None:
            j, i = c.div(t, r), c.rem(t, r)
            rk = c.convert(c.load(rank_s, [j], mask=ok), IndexType())
            s_j = c.load(sn_s, [j], mask=ok)
            inv = c.vselect(c.fgt(s_j, zero), c.fdiv(one, s_j), zero)
            x = c.fmul(c.load(w_s, [j, i], mask=ok), inv)
            c.store(x, vhref if trans else uref, [*bi, rk, i] if trans else [*bi, i, rk],
                    mask=ok)

        def write_v(c: KernelEmitter, t: SSAValue, ok: SSAValue | None) -> None:
            j, i = c.div(t, k), c.rem(t, k)
            rk = c.convert(c.load(rank_s, [j], mask=ok), IndexType())
            x = c.convert(c.load(v_s, [j, i], mask=ok), et)
            c.store(x, uref if trans else vhref, [*bi, i, rk] if trans else [*bi, rk, i],
                    mask=ok)

        strided_lanes(e, lid, k * r, group, write_w)
        strided_lanes(e, lid, k * k, group, write_v)

    args = [u_out, s_out, vh_out, lw.mem(op.input)]
    lw.kernel("svd", args, group, [prod(batch), 1, 1], build)
    lw.env[op.u], lw.env[op.s], lw.env[op.vh] = u_out, s_out, vh_out
