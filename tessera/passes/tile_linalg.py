"""Tile IR kernels for ``tgraph.cholesky`` and ``tgraph.svd``: one tile per matrix.

These are the kernels for small matrices; larger ones go to the many-tile kernels of
:mod:`tile_cholesky_blocked` (``n > 64``: blocked, the trailing update as a GEMM) and
:mod:`tile_svd_parallel` (``min(m, n) > 48``: one tile per column pair), and SVDs of
``min(m, n) <= 32`` whose working copies fit in 40 KB to :mod:`tile_svd_shared` (shared
memory, a warp per column pair). The SVD kernel below is left for ``min(m, n)`` of 33 to
48 and for small ``k`` with very long columns.

Both work in global memory (the output or scratch buffers allocated by the host
function), so matrix size is not limited by shared memory; lanes of the tile split
the rows, and barriers order the steps (``bar.sync`` orders global memory for the
tile's lanes too). Matrices of a batch are the tiles of the grid (``grid = [batch,
1, 1]``). f32 and f64 only, computed in the element type, as the CPU reference does.

**Cholesky** (lower factor, ``A = L L^T``), right-looking, one column at a time:
the lower triangle of ``A`` is copied into ``L`` (upper triangle set to 0); for column
``k`` every lane reads the pivot ``d = L[k, k]``, ``L[k, k] = sqrt(d)``, the column below
is divided by it, then the trailing lower triangle is updated,
``L[i, j] -= L[i, k] L[j, k]`` for ``k < j <= i`` (one lane per element, lanes stride
over the ``(n-k-1)^2`` square). Each element is updated in order of ``k``, so the
result is deterministic. ``n^3 / 3`` multiply-adds per matrix, ``3n`` barriers. The
upper triangle of ``A`` is not read. A pivot that is not positive (the matrix is not
positive definite) gives NaN: that column and all later ones are NaN. (The CPU
reference raises ``ValueError`` instead.)

**SVD** (reduced, ``A = U diag(S) Vh``), one-sided Jacobi (Hestenes): with
``m >= n`` the columns of a working copy ``W`` of ``A`` (else of ``A^T``) are
orthogonalized by plane rotations, accumulated in ``V`` (starting at the identity).
Pairs ``(p, q)``, ``p < q``, are visited in row-cyclic order; for each pair the tile
computes ``alpha = |w_p|^2``, ``beta = |w_q|^2``, ``gamma = w_p . w_q`` with
``ttile.reduce`` (fixed order) and, when ``|gamma| > eps sqrt(alpha beta)`` (``eps``
the unit roundoff of the type), rotates by ``t = sign(z) / (|z| + sqrt(1 + z^2))``,
``z = (beta - alpha) / (2 gamma)``. Sweeps stop after one without a rotation, or after
:data:`MAX_SWEEPS`. Then ``S_j = |w_j|``, ``U_j = w_j / S_j`` (0 where ``S_j = 0``), and
columns are placed in order of descending ``S`` (ties keep column order). The signs of
singular vectors are those the rotations produce (LAPACK has no sign convention
either). ``O(sweeps * k^2 * max(m, n))`` work per matrix, ``k = min(m, n)``.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import MemRefType, i1
from xdsl.ir import SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv, f32_or_f64
from tessera.passes.tile_svd_parallel import unit_roundoff

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

MAX_SWEEPS = 30
"""Most Jacobi sweeps per matrix."""

CHOLESKY_GROUP = 256
"""Lanes per Cholesky tile (fewer for small matrices)."""

SVD_GROUP = 128
"""Lanes per SVD tile when a column has more than 32 elements (else one warp)."""

Body = Callable[[KernelEmitter, SSAValue, SSAValue | None], None]




def _strided(
    e: KernelEmitter, lid: SSAValue, lb: Idx, ub: Idx, group: int, body: Body
) -> None:
    """``body(e, i, mask)`` for every ``i = lb + local_id + group*r < ub``; ``lb`` and ``ub``
    may be values (then the loop bounds are dynamic and every step is masked)."""
    if isinstance(lb, int) and isinstance(ub, int):
        count = ub - lb
        if count <= 0:
            return
        if count <= group:
            i = e.add(lid, lb)
            body(e, e.index(i), None if count == group else e.lt(i, ub))
            return

    def step(b: KernelEmitter, base: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        i = b.index(b.add(base, lid))
        exact = isinstance(lb, int) and isinstance(ub, int) and (ub - lb) % group == 0
        body(b, i, None if exact else b.lt(i, ub))
        return []

    e.for_(lb, ub, group, [], step)


def _div(e: KernelEmitter, a: SSAValue, b: SSAValue) -> SSAValue:
    return e.op(arith.DivUIOp(a, b))


def _rem(e: KernelEmitter, a: SSAValue, b: SSAValue) -> SSAValue:
    return e.op(arith.RemUIOp(a, b))


def _batch_index(e: KernelEmitter, batch: list[int]) -> list[Idx]:
    return e.unravel(e.tile_id(), batch) if batch else []


# --------------------------------------------------------------------------- cholesky


def lower_cholesky(lw: _FunctionLowering, op: g.CholeskyOp) -> None:
    """``tgraph.cholesky``: one tile per matrix, see the module docstring."""
    from tessera.passes.tile_cholesky_blocked import BLOCKED_MIN_N, lower_cholesky_blocked

    shape = g.shape_of(op.input)
    et = f32_or_f64(op, g.elem_of(op.input))
    *batch, n, _ = shape
    if n > BLOCKED_MIN_N:
        lower_cholesky_blocked(lw, op, et)
        return
    out = lw.alloc(op.result.type)
    group = min(CHOLESKY_GROUP, max(32, cdiv(n * n, 32) * 32))

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        lref, aref = args
        bi = _batch_index(e, batch)
        lid = e.local_id()
        zero = e.const(0.0, et)
        nan = e.const(float("nan"), et)

        def at(i: Idx, j: Idx) -> list[Idx]:
            return [*bi, i, j]

        def copy(b: KernelEmitter, t: SSAValue, ok: SSAValue | None) -> None:
            i, j = b.div(t, n), b.rem(t, n)
            v = b.load(aref, at(i, j), mask=ok)
            b.store(b.vselect(b.le(j, i), v, zero), lref, at(i, j), mask=ok)

        _strided(e, lid, 0, n * n, group, copy)
        e.barrier()

        def column(c: KernelEmitter, k: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            d = c.load(lref, at(k, k))
            piv = c.vselect(c.fgt(d, zero), c.sqrt(d), nan)
            inv = c.fdiv(c.const(1.0, et), piv)
            c.barrier()  # every lane has read L[k, k]
            c.store(piv, lref, at(k, k), mask=c.eq(lid, 0))
            k1 = c.add(k, 1)

            def scale(b: KernelEmitter, i: SSAValue, ok: SSAValue | None) -> None:
                b.store(b.fmul(b.load(lref, at(i, k), mask=ok), inv), lref, at(i, k), mask=ok)

            _strided(c, lid, k1, n, group, scale)
            c.barrier()
            m = c.index(c.sub(n - 1, k))
            mm = c.mul(m, m)

            def update(b: KernelEmitter, t: SSAValue, ok: SSAValue | None) -> None:
                i = b.add(k1, _div(b, t, m))
                j = b.add(k1, _rem(b, t, m))
                ok2 = b.and_(ok, b.le(j, i))
                lik = b.load(lref, at(i, k), mask=ok2)
                ljk = b.load(lref, at(j, k), mask=ok2)
                lij = b.load(lref, at(i, j), mask=ok2)
                b.store(b.fsub(lij, b.fmul(lik, ljk)), lref, at(i, j), mask=ok2)

            _strided(c, lid, 0, mm, group, update)
            c.barrier()
            return []

        e.for_(0, n, 1, [], column)

    lw.kernel("cholesky", [out, lw.mem(op.input)], group, [prod(batch), 1, 1], build)
    lw.env[op.result] = out


# --------------------------------------------------------------------------- svd


def lower_svd(lw: _FunctionLowering, op: g.SVDOp) -> None:
    """``tgraph.svd``: one-sided Jacobi, one tile per matrix; see the module docstring."""
    from tessera.passes import tile_svd_shared
    from tessera.passes.tile_svd_parallel import PARALLEL_MIN_K, lower_svd_parallel

    shape = g.shape_of(op.input)
    et = f32_or_f64(op, g.elem_of(op.input))
    *batch, m, n = shape
    k, r, trans = min(m, n), max(m, n), m < n
    if tile_svd_shared.fits(m, n, et):
        tile_svd_shared.lower_svd_shared(lw, op, et)
        return
    if k > PARALLEL_MIN_K:
        lower_svd_parallel(lw, op, et)
        return
    u_out, s_out, vh_out = (lw.alloc(v.type) for v in (op.u, op.s, op.vh))
    w = lw.alloc(MemRefType(et, [*batch, r, k]))
    v = lw.alloc(MemRefType(et, [*batch, k, k]))
    sn = lw.alloc(MemRefType(et, [*batch, k]))
    group, scope = (32, "warp") if r <= 32 else (SVD_GROUP, "group")

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        uref, sref, vhref, aref, wref, vref, snref = args
        bi = _batch_index(e, batch)
        lid = e.local_id()
        zero, one = e.const(0.0, et), e.const(1.0, et)

        def W(i: Idx, j: Idx) -> list[Idx]:
            return [*bi, i, j]

        # W = A (or A^T), V = I; each lane owns rows lid, lid + G, ... of W and V
        def init_w(b: KernelEmitter, i: SSAValue, ok: SSAValue | None) -> None:
            def col(c: KernelEmitter, j: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                a = c.load(aref, W(j, i) if trans else W(i, j), mask=ok)
                c.store(a, wref, W(i, j), mask=ok)
                return []

            b.for_(0, k, 1, [], col)

        def init_v(b: KernelEmitter, i: SSAValue, ok: SSAValue | None) -> None:
            def col(c: KernelEmitter, j: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                c.store(c.vselect(c.eq(i, j), one, zero), vref, W(i, j), mask=ok)
                return []

            b.for_(0, k, 1, [], col)

        _strided(e, lid, 0, r, group, init_w)
        _strided(e, lid, 0, k, group, init_v)

        def dots(c: KernelEmitter, cols: list[tuple[SSAValue, SSAValue]]) -> list[SSAValue]:
            """Tile-wide ``w_a . w_b`` for each ``(a, b)`` in ``cols``."""

            def acc(b: KernelEmitter, base: SSAValue, s: list[SSAValue]) -> list[SSAValue]:
                i = b.index(b.add(base, lid))
                ok = b.lt(i, r)
                vals = {x: b.load(wref, W(i, x), mask=ok) for x in dict.fromkeys(
                    x for ab in cols for x in ab)}
                return [b.fadd(t, b.fmul(vals[a], vals[bb])) for t, (a, bb) in zip(s, cols)]

            parts = c.for_(0, r, group, [zero] * len(cols), acc)
            return [c.op(tt.ReduceOp(x, "sum", scope)) for x in parts]

        def rotate(b: KernelEmitter, ref: SSAValue, rows: int, p: SSAValue, q: SSAValue,
                   cs: SSAValue, sn_: SSAValue) -> None:
            def body(c: KernelEmitter, i: SSAValue, ok: SSAValue | None) -> None:
                x, y = c.load(ref, W(i, p), mask=ok), c.load(ref, W(i, q), mask=ok)
                c.store(c.fsub(c.fmul(cs, x), c.fmul(sn_, y)), ref, W(i, p), mask=ok)
                c.store(c.fadd(c.fmul(sn_, x), c.fmul(cs, y)), ref, W(i, q), mask=ok)

            _strided(b, lid, 0, rows, group, body)

        tol = e.const(unit_roundoff(et), et)
        two = e.const(2.0, et)

        def pair(c: KernelEmitter, p: SSAValue, q: SSAValue, rot: SSAValue) -> SSAValue:
            alpha, beta, gamma = dots(c, [(p, p), (q, q), (p, q)])
            agamma = c.op(math.AbsFOp(gamma))
            do = c.fgt(agamma, c.fmul(tol, c.sqrt(c.fmul(alpha, beta))))
            z = c.fdiv(c.fsub(beta, alpha), c.fmul(two, gamma))
            sign = c.vselect(c.op(arith.CmpfOp(z, zero, "oge")), one, c.const(-1.0, et))
            az = c.op(math.AbsFOp(z))
            t = c.fdiv(sign, c.fadd(az, c.sqrt(c.fadd(one, c.fmul(z, z)))))
            cs = c.fdiv(one, c.sqrt(c.fadd(one, c.fmul(t, t))))
            sn_ = c.fmul(cs, t)
            cs = c.vselect(do, cs, one)
            sn_ = c.vselect(do, sn_, zero)
            rotate(c, wref, r, p, q, cs, sn_)
            rotate(c, vref, k, p, q, cs, sn_)
            return c.op(arith.OrIOp(rot, do))

        def sweep(c: KernelEmitter) -> list[SSAValue]:
            def over_p(b: KernelEmitter, p: SSAValue, s: list[SSAValue]) -> list[SSAValue]:
                def over_q(a: KernelEmitter, q: SSAValue, s2: list[SSAValue]) -> list[SSAValue]:
                    return [pair(a, p, q, s2[0])]

                return b.for_(b.add(p, 1), k, 1, s, over_q)

            rotated = c.for_(0, k, 1, [c.const(0, i1)], over_p)[0]
            return [c.op(arith.XOrIOp(rotated, c.const(1, i1)))]

        def sweeps(c: KernelEmitter, _: SSAValue, s: list[SSAValue]) -> list[SSAValue]:
            return c.if_(s[0], lambda t: [t.const(1, i1)], sweep, [i1])

        e.for_(0, MAX_SWEEPS, 1, [e.const(0, i1)], sweeps)

        # S_j = |w_j| into scratch, then columns in order of descending S
        def norm(c: KernelEmitter, j: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            (s2,) = dots(c, [(j, j)])
            c.store(c.sqrt(s2), snref, [*bi, j], mask=c.eq(lid, 0))
            return []

        e.for_(0, k, 1, [], norm)
        e.barrier()

        def place(c: KernelEmitter, j: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            sj = c.load(snref, [*bi, j])

            def count(b: KernelEmitter, i: SSAValue, s: list[SSAValue]) -> list[SSAValue]:
                si = b.load(snref, [*bi, i])
                before = b.op(arith.OrIOp(
                    b.fgt(si, sj), b.and_(b.feq(si, sj), b.lt(i, j))))
                return [b.add(s[0], b.select(before, 1, 0))]

            rank = c.for_(0, k, 1, [c.index(0)], count)[0]
            inv = c.vselect(c.fgt(sj, zero), c.fdiv(one, sj), zero)
            c.store(sj, sref, [*bi, rank], mask=c.eq(lid, 0))

            def left(b: KernelEmitter, i: SSAValue, ok: SSAValue | None) -> None:
                x = b.fmul(b.load(wref, W(i, j), mask=ok), inv)
                b.store(x, vhref if trans else uref, W(rank, i) if trans else W(i, rank), mask=ok)

            def right(b: KernelEmitter, i: SSAValue, ok: SSAValue | None) -> None:
                x = b.load(vref, W(i, j), mask=ok)
                b.store(x, uref if trans else vhref, W(i, rank) if trans else W(rank, i), mask=ok)

            _strided(c, lid, 0, r, group, left)
            _strided(c, lid, 0, k, group, right)
            return []

        e.for_(0, k, 1, [], place)

    args = [u_out, s_out, vh_out, lw.mem(op.input), w, v, sn]
    lw.kernel("svd", args, group, [prod(batch), 1, 1], build)
    lw.env[op.u], lw.env[op.s], lw.env[op.vh] = u_out, s_out, vh_out

