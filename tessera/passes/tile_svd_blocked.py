"""Blocked steps of the parallel one-sided Jacobi SVD of f32 matrices.

:mod:`tile_svd_parallel` rotates one column pair per tile, so a sweep over ``K`` columns
is ``K - 1`` launches: at 1024 x 1024 the launches, not the flops, set its time. Here the
columns of ``Wt``/``Vt`` are cut into blocks of :func:`block_cols` ``bw`` (``K`` padded to
an even number ``NB`` of blocks with zero columns, which never rotate), and a sweep is
``NB - 1`` launches of the round-robin over *blocks*. Tile ``(b, j)`` of a step takes
block pair ``j`` of matrix ``b``, ``P = 2 bw`` columns of ``W``, and:

1. forms their Gram matrix ``G = Wp^T Wp`` (``P x P``) in f64 in shared memory, the rows
   of ``Wp`` staged :data:`CHUNK` at a time (the f32 products are exact in f64, so ``G``
   is symmetric to the bit and accurate to f64 roundoff);
2. diagonalizes ``G`` by cyclic two-sided Jacobi (round-robin pairs, ``P / 2`` rotations
   at once, at most :data:`INNER_MAX_SWEEPS` sweeps, each rotation in f64 and only where
   ``|G_pq| > tol sqrt(G_pp G_qq)``, the pair kernel's test), accumulating the rotations
   in ``Vb`` (``P x P``, f64): ``G Vb`` is ``Vb diag``, i.e. the columns of ``Wp Vb`` are
   orthogonal to that tolerance. Rotating columns ``p, q`` of ``W`` by ``(c, s)`` maps
   ``G`` to ``J^T G J``, so the two-sided Jacobi of ``G`` is exactly the one-sided
   Jacobi of the block pair's columns, without reading them again;
3. when any rotation happened, ``Wp <- Wp Vb`` and ``Vp <- Vp Vb`` in f64 (``W`` rounded
   back to f32), one lane per row, and records it in ``flags[b, j]``.

A sweep visits every block pair once, so every column pair is orthogonalized in every
sweep, as in the pair kernel; the check kernel after each sweep ends a matrix whose
block pairs all found nothing to rotate. The work per sweep, ``2 K^2 max(m, n)``
multiply-adds for the Gram matrices and as many for the updates, does not depend on
``bw``; ``bw`` trades parallelism (``NB / 2`` tiles) and short inner sweeps against
launches (``NB - 1``).

f64 matrices keep the pair kernel: a Gram matrix in f64 squares the condition number
of f64 data (it does not of f32 data, whose squared condition still fits f64).
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable
from typing import TYPE_CHECKING

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import IndexType, f32, f64, i1, i32
from xdsl.ir import Attribute, SSAValue

from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv
from tessera.passes.tile_svd_parallel import round_robin_pair, unit_roundoff

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

GROUP = 256
"""Lanes per tile."""

CHUNK = 64
"""Rows of the block pair staged in shared memory per step of the Gram product."""

INNER_MAX_SWEEPS = 1
"""Jacobi sweeps over a block pair's Gram matrix per visit (a sweep that rotates nothing
ends them; the outer sweeps carry on what is left). On an H200 at 1024 x 1024 one sweep
took 114 ms, two 138 and four 172, to the same accuracy: the outer sweeps converge as
fast either way, and an inner step (f64 divides and square roots, two barriers) is the
costly part of a visit."""


def block_cols(k: int) -> int:
    """Columns per block: 8. On an H200 at 2048 x 2048, 16 (half the launches, 32 x 32
    Gram matrices, twice the inner steps) took 722 ms against 470 for 8."""
    return 8


def padded_cols(k: int) -> int:
    """``k`` columns padded to an even number of blocks."""
    bw = block_cols(k)
    nb = cdiv(k, bw)
    return (nb + nb % 2) * bw


def block_step_launcher(
    lw: _FunctionLowering, wt: SSAValue, vt: SSAValue, flags: SSAValue, done: SSAValue,
    nbat: int, kp: int, r: int, et: Attribute, bw: int,
) -> tuple[int, Callable[[int], None]]:
    """``(steps per sweep, launch)``: ``launch(s)`` launches the block step ``s`` of a
    sweep over ``wt [nbat, kp, r]`` / ``vt [nbat, kp, kp]`` (f64), setting ``flags[b,
    j]`` (``[nbat, NB / 2]`` f32) where block pair ``j`` rotated; matrices with
    ``done[b] != 0`` are skipped. ``bw`` is the columns per block (``kp`` a multiple
    of ``2 bw``)."""
    nblk = kp // bw
    assert nblk * bw == kp and nblk % 2 == 0, (kp, bw)
    npair = nblk // 2
    p_ = 2 * bw
    per = p_ * p_ // GROUP
    rpl = 2 if p_ <= 16 else 1  # rows per lane of the update (registers: 2 P f64 inputs)
    # rows staged per Gram step: CHUNK, or all of a short column (a multiple of 16, so
    # that the P x chunk tile is whole lanes' loads)
    ch = min(CHUNK, cdiv(r, 16) * 16)
    assert p_ * p_ % GROUP == 0 and p_ * ch % GROUP == 0, p_
    tol = pymath.sqrt(r) * unit_roundoff(et)
    name: list[str] = []
    steps: dict[int, SSAValue] = {}  # one host constant per step index, reused by sweeps

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        wref, vref, fref, dref, s = args
        t = e.tile_id()
        b, j = e.div(t, npair), e.rem(t, npair)
        lid = e.local_id()
        active = e.op(arith.CmpfOp(e.load(dref, [b]), e.const(0.0, f32), "oeq"))

        def work(c: KernelEmitter) -> list[SSAValue]:
            bp, bq = round_robin_pair(c, j, s, nblk)
            p0, q0 = c.mul(bp, bw), c.mul(bq, bw)

            def col(d: KernelEmitter, cc: Idx) -> Idx:
                """Column of ``W``/``V`` of the pair's column ``cc``."""
                if isinstance(cc, int):
                    return d.add(p0, cc) if cc < bw else d.add(q0, cc - bw)
                return d.select(d.lt(cc, bw), d.add(p0, cc), d.add(q0, d.sub(cc, bw)))

            ws = c.op(tt.AllocSharedOp([p_, ch + 1], f64))
            gs = c.op(tt.AllocSharedOp([2, p_, p_], f64))
            vs = c.op(tt.AllocSharedOp([2, p_, p_], f64))
            al = c.op(tt.AllocSharedOp([p_], f64))
            be = c.op(tt.AllocSharedOp([p_], f64))
            pa = c.op(tt.AllocSharedOp([p_], i32))
            zero64, one64 = c.const(0.0, f64), c.const(1.0, f64)
            # every lane owns P * P / GROUP entries of G and Vb
            entries = [c.add(lid, GROUP * u) for u in range(per)]
            rc = [(c.div(q, p_), c.rem(q, p_)) for q in entries]

            # 1. G = Wp^T Wp, CHUNK rows at a time
            def chunk(d: KernelEmitter, base: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
                for u in range(p_ * ch // GROUP):
                    q = d.add(lid, GROUP * u)
                    cc, i = d.div(q, ch), d.rem(q, ch)
                    row = d.add(base, i)
                    ok = d.lt(row, r) if r % ch else None
                    v = d.load(wref, [b, col(d, cc), row], mask=ok,
                               other=None if ok is None else d.const(0.0, et))
                    d.store(d.convert(v, f64), ws, [cc, i])
                d.barrier()
                out = list(acc)
                for i in range(ch):
                    for u, (a, bb) in enumerate(rc):
                        x = d.load(ws, [a, i])
                        y = d.load(ws, [bb, i])
                        out[u] = d.op(math.FmaOp(x, y, out[u]))
                d.barrier()
                return out

            acc = c.for_(0, r, ch, [zero64] * per, chunk)
            for (a, bb), g in zip(rc, acc):
                c.store(g, gs, [0, a, bb])
                c.store(c.vselect(c.eq(a, bb), one64, zero64), vs, [0, a, bb])
            c.barrier()

            # 2. Jacobi sweeps over G, the rotations accumulated in Vb
            half_lane = c.lt(lid, bw)
            tol64 = c.const(tol * tol, f64)

            def step(d: KernelEmitter, st: SSAValue, carried: list[SSAValue]) -> list[SSAValue]:
                par, mine = carried
                nxt = d.sub(1, par)
                p, q = round_robin_pair(d, d.min(lid, bw - 1), st, p_)
                gpp = d.load(gs, [par, p, p])
                gqq = d.load(gs, [par, q, q])
                gpq = d.load(gs, [par, p, q])
                # |G_pq| > tol sqrt(G_pp G_qq), squared (no square root on the way)
                rot = d.and_(half_lane, d.fgt(d.fmul(gpq, gpq),
                                             d.fmul(tol64, d.fmul(gpp, gqq))))
                g = d.vselect(rot, gpq, one64)  # keeps z finite where nothing rotates
                z = d.fdiv(d.fsub(gqq, gpp), d.fmul(d.const(2.0, f64), g))
                sign = d.vselect(d.op(arith.CmpfOp(z, zero64, "oge")), one64,
                                 d.const(-1.0, f64))
                tn = d.fdiv(sign, d.fadd(d.op(math.AbsFOp(z)),
                                         d.sqrt(d.fadd(one64, d.fmul(z, z)))))
                cs = d.vselect(rot, d.fdiv(one64, d.sqrt(d.fadd(one64, d.fmul(tn, tn)))),
                               one64)
                sn = d.vselect(rot, d.fmul(cs, tn), zero64)
                # w_p' = c w_p - s w_q, w_q' = s w_p + c w_q: w_i' = al_i w_i + be_i w_pa_i
                d.store(cs, al, [p], mask=half_lane)
                d.store(cs, al, [q], mask=half_lane)
                d.store(d.op(arith.NegfOp(sn)), be, [p], mask=half_lane)
                d.store(sn, be, [q], mask=half_lane)
                d.store(d.convert(d.index(q), i32), pa, [p], mask=half_lane)
                d.store(d.convert(d.index(p), i32), pa, [q], mask=half_lane)
                d.barrier()
                for a, bb in rc:
                    ai, bi = d.load(al, [a]), d.load(be, [a])
                    aj, bj = d.load(al, [bb]), d.load(be, [bb])
                    pi = d.convert(d.load(pa, [a]), IndexType())
                    pj = d.convert(d.load(pa, [bb]), IndexType())
                    g_ij = d.load(gs, [par, a, bb])
                    g_ipj = d.load(gs, [par, a, pj])
                    g_pij = d.load(gs, [par, pi, bb])
                    g_pipj = d.load(gs, [par, pi, pj])
                    row_i = d.fadd(d.fmul(aj, g_ij), d.fmul(bj, g_ipj))
                    row_p = d.fadd(d.fmul(aj, g_pij), d.fmul(bj, g_pipj))
                    d.store(d.fadd(d.fmul(ai, row_i), d.fmul(bi, row_p)), gs, [nxt, a, bb])
                    v_ij = d.load(vs, [par, a, bb])
                    v_ipj = d.load(vs, [par, a, pj])
                    d.store(d.fadd(d.fmul(aj, v_ij), d.fmul(bj, v_ipj)), vs, [nxt, a, bb])
                d.barrier()
                return [nxt, d.fmax(mine, d.convert(rot, f32))]

            def sweep(d: KernelEmitter, carried: list[SSAValue]) -> list[SSAValue]:
                par, seen = carried[1], carried[2]
                par, mine = d.for_(0, p_ - 1, 1, [par, d.const(0.0, f32)], step)
                anyrot = d.op(tt.ReduceOp(mine, "max", "group"))
                quiet = d.op(arith.CmpfOp(anyrot, d.const(0.0, f32), "oeq"))
                return [quiet, par, d.fmax(seen, anyrot)]

            def sweeps(d: KernelEmitter, _: SSAValue, carried: list[SSAValue]) -> list[SSAValue]:
                return d.if_(carried[0], lambda x: list(carried),
                             lambda x: sweep(x, carried), [i1, IndexType(), f32])

            _, par, seen = c.for_(0, INNER_MAX_SWEEPS, 1,
                                  [c.const(0, i1), c.index(0), c.const(0.0, f32)], sweeps)

            # 3. Wp <- Wp Vb, Vp <- Vp Vb
            def update(d: KernelEmitter) -> list[SSAValue]:
                for ref, length in ((wref, r), (vref, kp)):
                    def rows(h: KernelEmitter, base: SSAValue, _: list[SSAValue], ref=ref,
                             length=length) -> list[SSAValue]:
                        # ``rpl`` rows per lane share each load of Vb
                        idx = [h.index(h.add(base, h.add(lid, GROUP * u))) for u in range(rpl)]
                        oks = [h.lt(i, length) if length % (GROUP * rpl) else None for i in idx]
                        xs = [[h.convert(h.load(ref, [b, col(h, cc), i], mask=ok), f64)
                               for cc in range(p_)] for i, ok in zip(idx, oks)]
                        for jj in range(p_):
                            ys: list[SSAValue] = []
                            for cc in range(p_):
                                vb = h.load(vs, [par, cc, jj])
                                ys = [h.fmul(x[cc], vb) for x in xs] if cc == 0 else [
                                    h.op(math.FmaOp(x[cc], vb, y)) for x, y in zip(xs, ys)]
                            for y, i, ok in zip(ys, idx, oks):
                                h.store(h.convert(y, ref.type.element_type), ref,
                                        [b, col(h, jj), i], mask=ok)
                        return []

                    d.for_(0, length, GROUP * rpl, [], rows)
                d.store(d.const(1.0, f32), fref, [b, j], mask=d.eq(lid, 0))
                return []

            c.if_(c.fgt(seen, c.const(0.0, f32)), update)
            return []

        e.if_(active, work)

    def launch(s: int) -> None:
        if s not in steps:
            steps[s] = lw.host_index(s)
        args = [wt, vt, flags, done, steps[s]]
        if not name:
            name.append(lw.kernel("svd_block_step", args, GROUP, [nbat * npair, 1, 1], build))
        else:
            lw.launch(name[0], args, [nbat * npair, 1, 1])

    return nblk - 1, launch
