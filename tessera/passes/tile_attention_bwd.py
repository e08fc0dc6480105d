"""Tensor-core attention backward for ``tgraph.flash_attention_bwd`` (bf16/f16).

The FlashAttention-2 algorithm: nothing of size ``Sq x Sk`` is stored; each kernel
recomputes ``S = q kᵀ`` and ``P = exp(scale S - lse)`` from the log-sum-exp the forward
saved (``tgraph.flash_attention_fwd``). Three kernels, all deterministic (every output
element is summed by one warp in a fixed order; no atomics):

* ``dot``: ``Di = rowsum(do ∘ o)`` in f32, ``d / 8`` lanes per row (one 16-byte load of
  each operand per lane, a ``shuffle_xor`` tree);
* ``dkdv``: one tile per ``16 WARPS`` keys (16 keys per warp; grid
  ``[ceil(Sk / (16 WARPS)), 1, batch]``). The warp's K and V rows stay in registers as
  m16n8k16 ``a`` fragments; the tile loops over blocks of ``bq`` queries (32 at
  D = 128, 64 at D = 64). q and do blocks arrive by ``copy_async`` in row-major,
  double-buffered shared buffers (block ``i + 1`` in flight while ``i`` is used): their
  rows are the ``b`` fragments of ``k Qᵀ`` and ``v doᵀ`` (two k-consecutive elements
  adjacent in a row). Each block is also copied, shared to shared, pair-interleaved
  (element ``(q, c)`` at ``[q / 2][2c + q % 2]``): the ``b`` fragments of ``Pᵀ do`` and
  ``dSᵀ q``, whose k runs over queries. 48 KiB of shared memory. Per block:
  ``Sᵀ = k qᵀ``, ``Pᵀ = exp2(Sᵀ scale log2e - lse log2e)`` (lse and Di read per lane),
  ``dv += Pᵀ do``, ``dPᵀ = v doᵀ``, ``dSᵀ = Pᵀ ∘ (dPᵀ - Di)``, ``dk += dSᵀ q``; the
  ``Sᵀ``/``dSᵀ`` accumulators of two adjacent query tiles form one ``a`` fragment;
* ``dq``: one tile per ``16 WARPS`` queries (causal: the late, heaviest tiles first);
  q and do rows in registers, key blocks of ``bkv`` (as ``bq``) by ``copy_async`` into
  double-buffered row-major k and v buffers, k also pair-interleaved (40 KiB); per
  block ``S = q kᵀ``, ``P``, ``dP = do vᵀ``, ``dS = P ∘ (dP - Di)``, ``dq += dS k``.

``dk`` and ``dq`` are multiplied by ``scale`` once, when stored. Causal attention (key
``<=`` query, top-left aligned) skips the blocks that are masked for the whole tile and
masks only the diagonal blocks; the ragged ends of queries and keys are masked or
zero-filled (rows past the end are read as zeros and never stored). Shared buffers use
the XOR swizzles of :mod:`tessera.passes.tile_attention` (chunk ``^ row % 8`` row-major,
``^ 2 (pair % 4)`` pair-interleaved) so fragment loads hit distinct banks.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Sequence
from typing import TYPE_CHECKING

from xdsl.dialects import math
from xdsl.dialects.builtin import TensorType, VectorType, f32
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes import tile_attention
from tessera.passes.tile_attention import LOG2E
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

WARPS = 8
"""Warps per ``dkdv`` and ``dq`` tile; each owns 16 rows (keys, queries)."""


def tile_rows() -> int:
    """Keys per ``dkdv`` tile and queries per ``dq`` tile."""
    return 16 * WARPS

_vec = tile_attention._Kernel.vec
_pair = tile_attention._Kernel.pair
_xor = tile_attention._Kernel._xor


def inner_block(d: int) -> int:
    """Rows of the operand blocks a tile loops over (queries for ``dkdv``, keys for
    ``dq``): 32 at D = 128, 64 at D = 64 (shared buffers of 32 KiB at most)."""
    return 32 if d == 128 else 64


def fused(op: g.FlashAttentionFwdOp | g.FlashAttentionBwdOp) -> bool:
    """Whether ``op`` has its tensor-core kernel (bf16/f16, head size 64 or 128, equal
    batch dims, an f32 log-sum-exp); ``expand-attention-grad`` expands the others."""
    lse = op.lse.type
    assert isinstance(lse, TensorType)
    return tile_attention.supported(op) and lse.element_type == f32  # type: ignore[arg-type]


class _Spec:
    def __init__(self, op: g.FlashAttentionBwdOp):
        qs, ks = g.shape_of(op.q), g.shape_of(op.k)
        self.et: Attribute = g.elem_of(op.q)
        self.batch = list(qs[:-2])
        self.sq, self.d, self.sk = qs[-2], qs[-1], ks[-2]
        self.scale = op.scale.value.data if op.scale is not None else 1.0 / pymath.sqrt(self.d)
        self.causal = op.causal is not None
        self.inner = inner_block(self.d)
        self.n_batch = 1
        for x in self.batch:
            self.n_batch *= x


def lower_flash_attention_bwd(lw: _FunctionLowering, op: g.FlashAttentionBwdOp) -> None:
    """``tgraph.flash_attention_bwd`` as the ``dot``, ``dkdv`` and ``dq`` kernels (only
    when :func:`fused`: ``lower-graph-to-tile`` expands the others first)."""
    assert fused(op), "flash_attention_bwd without a kernel is expanded first"
    s = _Spec(op)
    dq, dk, dv = (lw.alloc(r.type) for r in op.results)
    lw.env[op.dq], lw.env[op.dk], lw.env[op.dv] = dq, dk, dv
    if s.n_batch == 0 or s.sq == 0 or s.sk == 0:
        _zero_fill(lw, op, s)
        return
    di = lw.alloc(op.lse.type)
    q, k, v, o, do, lse = (lw.mem(x) for x in op.operands)
    lanes = s.d // 8
    rows_per_tile = 128 // lanes
    n_rows = s.n_batch * s.sq
    lw.kernel(
        "attention_bwd_dot", [di, o, do], 128, [cdiv(n_rows, rows_per_tile), 1, 1],
        lambda e, a: _dot(e, a, s),
    )
    lw.kernel(
        "attention_bwd_dkdv", [dk, dv, q, k, v, do, lse, di], 32 * WARPS,
        [cdiv(s.sk, tile_rows()), 1, s.n_batch], lambda e, a: _DkDv(e, a, s).build(),
    )
    lw.kernel(
        "attention_bwd_dq", [dq, q, k, v, do, lse, di], 32 * WARPS,
        [cdiv(s.sq, tile_rows()), 1, s.n_batch], lambda e, a: _Dq(e, a, s).build(),
    )


def _zero_fill(lw: _FunctionLowering, op: g.FlashAttentionBwdOp, s: _Spec) -> None:
    """Empty query or key ranges: every gradient is zero."""
    for r in op.results:
        shape = g.shape_of(r)
        if 0 in shape:
            continue
        m = lw.env[r]
        lw.map_kernel("zero", shape, m, [], lambda e, xs, t=s.et: e.const(0.0, t))


def _dot(e: KernelEmitter, args: list[SSAValue], s: _Spec) -> None:
    """``Di = rowsum(do ∘ o)``: lane ``c`` of a row's ``d / 8`` lanes takes columns
    ``8c .. 8c + 7``."""
    di, o, do = args
    lanes = s.d // 8
    lane = e.local_id()
    row = e.add(e.mul(e.tile_id("x"), 128 // lanes), e.div(lane, lanes))
    c = e.rem(lane, lanes)
    n_rows = s.n_batch * s.sq
    ok = e.lt(row, n_rows)
    idx = e.unravel(e.select(ok, row, 0), [*s.batch, s.sq])
    col = e.index(e.mul(c, 8))
    ov = e.op(tt.LoadVectorOp(o, [e.index(i) for i in idx] + [col], 8, ok))
    dov = e.op(tt.LoadVectorOp(do, [e.index(i) for i in idx] + [col], 8, ok))
    acc = None
    for i in range(8):
        prod = e.fmul(e.convert(e.extract(ov, i), f32), e.convert(e.extract(dov, i), f32))
        acc = prod if acc is None else e.fadd(acc, prod)
    assert acc is not None
    off = 1
    while off < lanes:
        acc = e.fadd(acc, e.op(tt.ShuffleXorOp(acc, off)))
        off *= 2
    e.store(acc, di, idx, e.and_(ok, e.eq(c, 0)))


def rho(jn: int) -> tuple[int, int]:
    """Rows of n-tile ``jn`` of a ``... x block`` product: lane column ``g`` (0..7) of the
    tile is block row ``base + 4 (g // 2) + g % 2`` with ``(base, 0)`` returned here, so
    that the rows of tiles ``2m`` and ``2m + 1`` at lane columns ``2t, 2t + 1`` are the 4
    consecutive rows ``16 m + 4 t ..`` (a quad-interleaved ``b`` fragment)."""
    return 16 * (jn // 2) + 2 * (jn % 2), 0


class _Common:
    """Fragment helpers shared by the ``dkdv`` and ``dq`` kernels (``WARPS`` warps, each
    owning 16 rows of the tile: rows ``row0`` and ``row0 + 8`` per lane).

    Products over the head dim permute k: the lane with ``t = lane % 4`` holds, for
    k-steps ``2kk`` and ``2kk + 1``, columns ``32 kk + 8 t + 0..7`` (``4 s + 0..3`` for
    step ``s``), so a ``b`` fragment pair is one 16-byte shared load of a row-major
    block, and ``a`` fragments (read once from global memory) use the same order.
    Products over the block (``Pᵀ do``, ``dSᵀ q``, ``dS k``) take ``a`` from accumulators
    whose n-tiles cover rows :func:`rho`, and ``b`` from the quad-interleaved copy of the
    block (element ``(r, c)`` at ``[r / 4][4 c + r % 4]``), where n-tile ``dn`` of the
    result holds head columns ``16 (dn // 2) + 2 g + dn % 2``: one 16-byte load gives
    the ``b`` fragments of tiles ``2u`` and ``2u + 1``, and the stores write 4 adjacent
    columns. Row-major blocks swizzle chunk ``^ 4 (row % 2)``, quad-interleaved ones
    chunk ``^ 2 (quad % 4)``.
    """

    e: KernelEmitter
    s: _Spec

    def setup(self, n_rows: int = 0) -> None:
        """Lane indices and fragment offsets; with ``n_rows``, tiles take their rows from
        the end (the causal ``dq`` tiles with the most key blocks start first)."""
        e, s = self.e, self.s
        self.lane = e.local_id()
        lid = e.lane_id()
        warp = e.warp_id()
        self.gq, self.tq = e.div(lid, 4), e.rem(lid, 4)
        self.bidx = e.unravel(e.tile_id("z"), s.batch) if s.batch else []
        tile = e.tile_id("x")
        if n_rows:
            tile = e.sub(cdiv(n_rows, tile_rows()) - 1, tile)
        self.t0 = e.mul(tile, tile_rows())
        self.row0 = e.add(self.t0, e.add(e.mul(warp, 16), self.gq))
        self.rows = [self.row0, e.add(self.row0, 8)]
        d = s.d
        # b fragments of a row-major block: row rho(jn) + 4 (gq // 2) + gq % 2, chunk
        # 4 kk + tq (swizzled ^ 4 (row % 2) = ^ 4 (gq % 2))
        g_hi, g_lo = e.div(self.gq, 2), e.rem(self.gq, 2)
        lrow = e.add(e.mul(g_hi, 4), g_lo)
        self.rm_off = [
            e.add(e.mul(lrow, d), e.mul(_xor(e, e.add(self.tq, 4 * kk), e.mul(g_lo, 4)), 8))
            for kk in range(2)
        ]
        # b fragments of a quad-interleaved block: quad tq (+ 4 m), chunk 8 u + gq
        # (swizzled ^ 2 tq)
        self.il_off = e.add(e.mul(self.tq, 4 * d), e.mul(_xor(e, self.gq, e.mul(self.tq, 2)), 8))

    def load_a(self, ref: SSAValue, n: int) -> list[SSAValue]:
        """``a`` fragments (one per k-step of 16 head columns, k permuted as the class
        says) of the lane's two rows of ``ref`` (rows ``>= n`` read as zeros)."""
        e, s = self.e, self.s
        frags = []
        for kk in range(s.d // 32):
            col = e.add(e.mul(self.tq, 8), 32 * kk)
            vs = []
            for r in self.rows:
                ok = e.lt(r, n)
                idx = [*self.bidx, e.select(ok, r, 0), col]
                vs.append(e.op(tt.LoadVectorOp(ref, [e.index(i) for i in idx], 8, ok)))
            for st in (0, 1):
                x = [[e.extract(v, 4 * st + c) for c in range(4)] for v in vs]
                frags.append(_vec(e, [*x[0][0:2], *x[1][0:2], *x[0][2:4], *x[1][2:4]], s.et))
        return frags

    def stage_plan(self, rows: int) -> tuple[list[tuple[Idx, Idx, list[Idx]]], list[tuple[Idx, Idx]]]:
        """Per lane, computed once outside the loops: the ``copy_async`` items of a
        ``rows x d`` block (pair of rows ``p``, 8-column chunk ``cc``, the row-major
        offsets of both rows) and the quad-interleave items (quad ``qd``, chunk ``cc``;
        lanes past ``rows / 4 * d / 8`` have none)."""
        e, d = self.e, self.s.d
        cpr = d // 8
        group = 32 * WARPS
        items = rows // 2 * cpr
        assert items % group == 0
        copies = []
        for it in range(items // group):
            q = e.add(self.lane, it * group)
            p, cc = e.div(q, cpr), e.rem(q, cpr)
            rm = [e.add(e.mul(e.add(e.mul(p, 2), h), d), e.mul(_xor(e, cc, 4 * h), 8))
                  for h in (0, 1)]
            copies.append((p, cc, rm))
        quads = rows // 4 * cpr
        assert quads <= group
        self.n_quads = quads
        return copies, [(e.div(self.lane, cpr), e.rem(self.lane, cpr))]

    def issue(
        self, e: KernelEmitter, ref: SSAValue, r0: Idx, n: int,
        plan: tuple[list[tuple[Idx, Idx, list[Idx]]], list[tuple[Idx, Idx]]],
        rm: SSAValue, base: Idx,
    ) -> None:
        """``copy_async`` rows ``r0 ..`` of ``ref`` (those ``>= n`` zero-filled) into the
        row-major buffer ``rm`` at element ``base`` (``plan``: :meth:`stage_plan`)."""
        for p, cc, rm_off in plan[0]:
            for h in (0, 1):
                row = e.add(r0, e.add(e.mul(p, 2), h))
                inside = e.lt(row, n)
                e.emit(tt.CopyAsyncOp(
                    rm, [e.index(e.add(rm_off[h], base))], ref,
                    [e.index(i) for i in (*self.bidx, e.select(inside, row, 0), e.mul(cc, 8))],
                    8, e.select(inside, 8, 0),
                ))

    def interleave(
        self, e: KernelEmitter, rm: SSAValue, base: Idx, il: SSAValue,
        plan: tuple[list[tuple[Idx, Idx, list[Idx]]], list[tuple[Idx, Idx]]],
    ) -> None:
        """The quad-interleaved copy ``il`` of the row-major block at ``rm[base:]``."""
        s = self.s
        d = s.d
        ((qd, cc),) = plan[1]

        def body(be: KernelEmitter) -> list[SSAValue]:
            rows = []
            for r in range(4):
                off = be.add(be.mul(be.add(be.mul(qd, 4), r), d), be.mul(_xor(be, cc, 4 * (r % 2)), 8))
                rows.append(be.op(tt.LoadVectorOp(rm, [be.index(be.add(off, base))], 8)))
            for u in range(4):
                elems = [be.extract(rows[r], 2 * u + b) for b in (0, 1) for r in range(4)]
                chunk = _xor(be, be.add(be.mul(cc, 4), u), be.mul(be.rem(qd, 4), 2))
                off = be.add(be.mul(qd, 4 * d), be.mul(chunk, 8))
                be.emit(tt.StoreVectorOp(_vec(be, elems, s.et), il, [be.index(off)]))
            return []

        if self.n_quads == 32 * WARPS:
            body(e)
        else:
            e.if_(e.lt(self.lane, self.n_quads), body)

    def to_a(self, e: KernelEmitter, tiles: list[list[SSAValue]]) -> list[SSAValue]:
        """f32 accumulator tiles (8 columns each) -> 16-bit ``a`` fragments; tiles
        ``2m`` and ``2m + 1`` form k-step ``m``."""
        out = []
        for m in range(len(tiles) // 2):
            elems = [e.convert(x, self.s.et) for x in (*tiles[2 * m], *tiles[2 * m + 1])]
            out.append(_vec(e, elems, self.s.et))
        return out

    def store_acc(self, ref: SSAValue, accs: Sequence[SSAValue], n: int, factor: float) -> None:
        """Store the ``d / 8`` accumulator tiles of the lane's rows (``< n``) times
        ``factor``: tiles ``2u`` and ``2u + 1`` hold columns ``16 u + 4 tq + 0..3``."""
        e, s = self.e, self.s
        oks = [e.lt(r, n) for r in self.rows]
        f = e.const(factor, f32)
        for u in range(len(accs) // 2):
            col = e.add(e.mul(self.tq, 4), 16 * u)
            for r in (0, 1):
                ys = [e.extract(accs[2 * u + t], 2 * r + b) for b in (0, 1) for t in (0, 1)]
                if factor != 1.0:
                    ys = [e.fmul(y, f) for y in ys]
                out = _vec(e, [e.convert(y, s.et) for y in ys], s.et)
                idx = [e.index(i) for i in (*self.bidx, self.rows[r], col)]
                e.emit(tt.StoreVectorOp(out, ref, idx, oks[r]))

    def mma_rows(
        self, e: KernelEmitter, a: list[SSAValue], buf: SSAValue, base: Idx, n_tiles: int
    ) -> list[list[SSAValue]]:
        """``a`` (16 rows x d) times the transpose of the row-major block at ``buf[base:]``:
        ``n_tiles`` tiles (rows :func:`rho`), as scalars."""
        s = self.s
        d = s.d
        zero4 = e.const(0.0, VectorType(f32, [4]))
        offs = [e.add(o, base) for o in self.rm_off]
        accs = [zero4] * n_tiles
        for kk in range(d // 32):
            for jn in range(n_tiles):
                r0, _ = rho(jn)
                off = e.add(offs[kk % 2], r0 * d + (kk // 2) * 64)
                v = e.op(tt.LoadVectorOp(buf, [e.index(off)], 8))
                for st in (0, 1):
                    b = _vec(e, [e.extract(v, 4 * st + c) for c in range(4)], s.et)
                    accs[jn] = e.op(tt.MmaOp(a[2 * kk + st], b, accs[jn]))
        return [[e.extract(acc, i) for i in range(4)] for acc in accs]

    def mma_acc(
        self, e: KernelEmitter, a: list[SSAValue], buf: SSAValue, accs: list[SSAValue]
    ) -> list[SSAValue]:
        """``accs += a`` (16 rows x block) times the quad-interleaved block (block x d)."""
        s = self.s
        d = s.d
        out = list(accs)
        for u in range(d // 16):
            for m in range(len(a)):
                off = e.add(self.il_off, m * 16 * d + u * 64)
                v = e.op(tt.LoadVectorOp(buf, [e.index(off)], 8))
                for t in (0, 1):
                    b = _vec(e, [e.extract(v, 4 * t + c) for c in range(4)], s.et)
                    out[2 * u + t] = e.op(tt.MmaOp(a[m], b, out[2 * u + t]))
        return out

    def block_index(self, jn: int, i: int) -> Idx:
        """The block row (query in ``dkdv``, key in ``dq``) of element ``i`` of n-tile
        ``jn``'s accumulator (lane column ``2 tq + (i & 1)``)."""
        r0, _ = rho(jn)
        return self.e.add(self.e.mul(self.tq, 4), r0 + (i & 1))


class _DkDv(_Common):
    """dK and dV of a tile of keys, looping over blocks of queries."""

    def __init__(self, e: KernelEmitter, args: list[SSAValue], s: _Spec):
        self.e, self.s = e, s
        self.dk, self.dv, self.q, self.k, self.v, self.do, self.lse, self.di = args

    def build(self) -> None:
        e, s = self.e, self.s
        bq, d = s.inner, s.d
        self.setup()
        self.k_frags = self.load_a(self.k, s.sk)
        self.v_frags = self.load_a(self.v, s.sk)
        # q and do row-major, double buffered (copy_async of the next block in flight),
        # and pair-interleaved: 48 KiB
        self.q_rm, self.do_rm = (
            e.op(tt.AllocSharedOp([2 * bq * d], s.et, alignment=128)) for _ in range(2)
        )
        self.q_il, self.do_il = (
            e.op(tt.AllocSharedOp([bq * d], s.et, alignment=128)) for _ in range(2)
        )
        self.plan = self.stage_plan(bq)
        nq = cdiv(s.sq, bq)
        self.nq = nq
        full = s.sq // bq
        if s.causal:
            first = e.div(self.t0, bq)  # the first block with a query >= the tile's first key
            diag = e.min(cdiv_idx(e, e.add(self.t0, tile_rows()), bq), nq)
        else:
            first, diag = 0, 0
        base = e.mul(e.rem(first, 2), bq * d)
        self.issue(e, self.q, e.mul(first, bq), s.sq, self.plan, self.q_rm, base)
        self.issue(e, self.do, e.mul(first, bq), s.sq, self.plan, self.do_rm, base)
        e.emit(tt.CommitGroupOp())
        zero4 = e.const(0.0, VectorType(f32, [4]))
        carried = [zero4] * (2 * (d // 8))
        if s.causal:
            carried = e.for_(
                first, diag, 1, carried, lambda ie, i, c: self.block(ie, i, c, True)
            )
        mid_end = e.max(diag, full) if s.causal else full
        carried = e.for_(diag, full, 1, carried, lambda ie, i, c: self.block(ie, i, c, False))
        if s.sq % bq:
            carried = e.for_(
                mid_end, nq, 1, carried, lambda ie, i, c: self.block(ie, i, c, True)
            )
        e.emit(tt.WaitGroupOp(0))
        self.store_acc(self.dk, carried[: d // 8], s.sk, s.scale)
        self.store_acc(self.dv, carried[d // 8:], s.sk, 1.0)

    def block(self, e: KernelEmitter, i: SSAValue, c: list[SSAValue], masked: bool) -> list[SSAValue]:
        s = self.s
        bq, d = s.inner, s.d
        dk, dv = c[: d // 8], c[d // 8:]
        q0 = e.mul(i, bq)
        base = e.mul(e.rem(i, 2), bq * d)
        e.emit(tt.WaitGroupOp(0))
        e.barrier()  # block i has landed; every warp is done with block i - 1
        nxt = e.add(i, 1)

        def prefetch(be: KernelEmitter) -> list[SSAValue]:
            nbase = be.mul(be.rem(nxt, 2), bq * d)
            for ref, rm in ((self.q, self.q_rm), (self.do, self.do_rm)):
                self.issue(be, ref, be.mul(nxt, bq), s.sq, self.plan, rm, nbase)
            return []

        e.if_(e.lt(nxt, self.nq), prefetch)
        e.emit(tt.CommitGroupOp())
        self.interleave(e, self.q_rm, base, self.q_il, self.plan)
        self.interleave(e, self.do_rm, base, self.do_il, self.plan)
        nt = bq // 8
        # this lane's queries (accumulator columns) and their -lse log2 e and Di
        cols = [[self.block_index(jn, b) for b in (0, 1)] for jn in range(nt)]
        lse, di = [], []
        for jn in range(nt):
            lse_j, di_j = [], []
            for b in (0, 1):
                qi = e.add(q0, cols[jn][b])
                ok = e.lt(qi, s.sq)
                idx = [*self.bidx, e.select(ok, qi, 0)]
                raw = e.load(self.lse, idx, ok, e.const(0.0, f32))
                lse_j.append(e.fmul(raw, e.const(-LOG2E, f32)))
                di_j.append(e.load(self.di, idx, ok, e.const(0.0, f32)))
            lse.append(lse_j)
            di.append(di_j)
        e.barrier()
        # S^T = K Q^T: element i of tile jn is key row gq + 8 (i >> 1), query cols[jn][i & 1]
        st = self.mma_rows(e, self.k_frags, self.q_rm, base, nt)
        cl = e.const(s.scale * LOG2E, f32)
        ninf = e.const(-pymath.inf, f32)
        probs = []
        for jn in range(nt):
            row = []
            for i_ in range(4):
                x = st[jn][i_]
                if masked:
                    qi = e.add(q0, cols[jn][i_ & 1])
                    ok = e.lt(qi, s.sq)
                    if s.causal:
                        ok = e.and_(ok, e.le(self.rows[i_ >> 1], qi))
                    assert ok is not None
                    x = e.vselect(ok, x, ninf)
                neg = e.op(math.FmaOp(x, cl, lse[jn][i_ & 1]))
                row.append(e.op(math.Exp2Op(neg)))
            probs.append(row)
        dv = self.mma_acc(e, self.to_a(e, probs), self.do_il, dv)
        dpt = self.mma_rows(e, self.v_frags, self.do_rm, base, nt)
        ds = [
            [e.fmul(probs[jn][i_], e.fsub(dpt[jn][i_], di[jn][i_ & 1])) for i_ in range(4)]
            for jn in range(nt)
        ]
        dk = self.mma_acc(e, self.to_a(e, ds), self.q_il, dk)
        return [*dk, *dv]


class _Dq(_Common):
    """dQ of a tile of queries, looping over blocks of keys."""

    def __init__(self, e: KernelEmitter, args: list[SSAValue], s: _Spec):
        self.e, self.s = e, s
        self.dq, self.q, self.k, self.v, self.do, self.lse, self.di = args

    def build(self) -> None:
        e, s = self.e, self.s
        bkv, d = s.inner, s.d
        self.setup(s.sq if s.causal else 0)
        self.q_frags = self.load_a(self.q, s.sq)
        self.do_frags = self.load_a(self.do, s.sq)
        self.lse2, self.di_r = [], []
        for r in self.rows:
            ok = e.lt(r, s.sq)
            idx = [*self.bidx, e.select(ok, r, 0)]
            lse = e.load(self.lse, idx, ok, e.const(0.0, f32))
            self.lse2.append(e.fmul(lse, e.const(-LOG2E, f32)))
            self.di_r.append(e.load(self.di, idx, ok, e.const(0.0, f32)))
        # k and v row-major, double buffered; k pair-interleaved: 40 KiB
        self.k_rm, self.v_rm = (
            e.op(tt.AllocSharedOp([2 * bkv * d], s.et, alignment=128)) for _ in range(2)
        )
        self.k_il = e.op(tt.AllocSharedOp([bkv * d], s.et, alignment=128))
        self.plan = self.stage_plan(bkv)
        all_blocks = cdiv(s.sk, bkv)
        full = s.sk // bkv
        if s.causal:
            n_blocks: Idx = e.min(cdiv_idx(e, e.add(self.t0, tile_rows()), bkv), all_blocks)
            n_full: Idx = e.min(e.div(e.add(self.t0, 1), bkv), full)
        else:
            n_blocks, n_full = all_blocks, full
        self.n_blocks = n_blocks
        self.issue(e, self.k, 0, s.sk, self.plan, self.k_rm, 0)
        self.issue(e, self.v, 0, s.sk, self.plan, self.v_rm, 0)
        e.emit(tt.CommitGroupOp())
        zero4 = e.const(0.0, VectorType(f32, [4]))
        carried = [zero4] * (d // 8)
        carried = e.for_(0, n_full, 1, carried, lambda ie, j, c: self.block(ie, j, c, False))
        if not (isinstance(n_full, int) and n_full == n_blocks):
            carried = e.for_(
                n_full, n_blocks, 1, carried, lambda ie, j, c: self.block(ie, j, c, True)
            )
        e.emit(tt.WaitGroupOp(0))
        self.store_acc(self.dq, carried, s.sq, s.scale)

    def block(self, e: KernelEmitter, j: SSAValue, c: list[SSAValue], masked: bool) -> list[SSAValue]:
        s = self.s
        bkv = s.inner
        d = s.d
        k0 = e.mul(j, bkv)
        base = e.mul(e.rem(j, 2), bkv * d)
        e.emit(tt.WaitGroupOp(0))
        e.barrier()  # block j has landed; every warp is done with block j - 1
        nxt = e.add(j, 1)

        def prefetch(be: KernelEmitter) -> list[SSAValue]:
            nbase = be.mul(be.rem(nxt, 2), bkv * d)
            for ref, rm in ((self.k, self.k_rm), (self.v, self.v_rm)):
                self.issue(be, ref, be.mul(nxt, bkv), s.sk, self.plan, rm, nbase)
            return []

        e.if_(e.lt(nxt, self.n_blocks), prefetch)
        e.emit(tt.CommitGroupOp())
        self.interleave(e, self.k_rm, base, self.k_il, self.plan)
        e.barrier()
        nt = bkv // 8
        sc = self.mma_rows(e, self.q_frags, self.k_rm, base, nt)
        cl = e.const(s.scale * LOG2E, f32)
        ninf = e.const(-pymath.inf, f32)
        probs = []
        for jn in range(nt):
            row = []
            for i_ in range(4):
                x = sc[jn][i_]
                if masked:
                    key = e.add(k0, self.block_index(jn, i_))
                    ok = e.lt(key, s.sk)
                    if s.causal:
                        ok = e.and_(ok, e.le(key, self.rows[i_ >> 1]))
                    assert ok is not None
                    x = e.vselect(ok, x, ninf)
                row.append(e.op(math.Exp2Op(e.op(math.FmaOp(x, cl, self.lse2[i_ >> 1])))))
            probs.append(row)
        dp = self.mma_rows(e, self.do_frags, self.v_rm, base, nt)
        ds = [
            [e.fmul(probs[jn][i_], e.fsub(dp[jn][i_], self.di_r[i_ >> 1])) for i_ in range(4)]
            for jn in range(nt)
        ]
        return self.mma_acc(e, self.to_a(e, ds), self.k_il, c)


def cdiv_idx(e: KernelEmitter, a: Idx, b: int) -> Idx:
    """``ceil(a / b)`` on indices."""
    return e.div(e.add(a, b - 1), b)
