"""Tensor-core attention backward for ``tgraph.flash_attention_bwd`` (bf16/f16).

These are the ``mma.sync`` kernels, for every device; on sm90, ``lower-attention-sm90``
takes the ops :func:`tessera.passes.sm90.attention_bwd_sm90.eligible` accepts to its TMA +
wgmma kernels instead (with :func:`lower_dot_padded`, this module's ``dot`` over padded
buffers), unless ``CompileOptions.sm90_attention_bwd`` is off.

The FlashAttention-2 algorithm: nothing of size ``Sq x Sk`` is stored; each kernel
recomputes ``S = q kᵀ`` and ``P = exp(scale S - lse)`` from the log-sum-exp the forward
saved (``tgraph.flash_attention_fwd``). Three kernels, all deterministic (every output
element is summed by one warp in a fixed order; no atomics):

* ``dot``: ``Di = rowsum(do ∘ o)`` in f32, ``d / 8`` lanes per row (one 16-byte load of
  each operand per lane, a ``shuffle_xor`` tree);
* ``dkdv``: one tile per ``16 WARPS`` keys (16 keys per warp; grid
  ``[ceil(Sk / (16 WARPS)), 1, batch]``). The warp's K and V rows stay in registers as m16n8k16
  ``a`` fragments; the tile loops over blocks of ``bq`` queries, staging q and do in
  shared memory twice: row-major (``b`` fragments of ``k Qᵀ`` and ``v doᵀ``, whose two
  k-consecutive elements are adjacent in a row) and pair-interleaved (element
  ``(q, c)`` at ``[q / 2][2c + q % 2]``: ``b`` fragments of ``Pᵀ do`` and ``dSᵀ q``, whose
  k runs over queries). Per block: ``Sᵀ = k qᵀ``, ``Pᵀ = exp2(Sᵀ scale log2e - lse log2e)``,
  ``dv += Pᵀ do``, ``dPᵀ = v doᵀ``, ``dSᵀ = Pᵀ ∘ (dPᵀ - Di)``, ``dk += dSᵀ q``; the
  ``Sᵀ``/``dSᵀ`` accumulators of two adjacent query tiles form one ``a`` fragment;
* ``dq``: one tile per ``16 WARPS`` queries; q and do rows in registers, key blocks of
  ``bkv`` staged as k row-major, k pair-interleaved and v row-major; per block
  ``S = q kᵀ``, ``P``, ``dP = do vᵀ``, ``dS = P ∘ (dP - Di)``, ``dq += dS k``.

``dk`` and ``dq`` are multiplied by ``scale`` once, when stored. Causal attention (key
``<=`` query, top-left aligned) skips the blocks that are masked for the whole tile and
masks only the diagonal blocks; the ragged ends of queries and keys are masked or
zero-filled (rows past the end are read as zeros and never stored). Shared buffers use
the XOR swizzles of :mod:`tessera.passes.tile_attention` (chunk ``^ row % 8`` row-major,
``^ 2 (pair % 4)`` pair-interleaved) so fragment loads hit distinct banks.

Staging is synchronous (global -> registers -> both shared layouts, between two
barriers). A variant with ``copy_async`` double buffering, per-lane lse/Di loads and
k-permuted fragments (one 16-byte shared load per two ``b`` fragments) measured slower
on an H100 (8.7 against 6.6 ms for the bench's ``ts.grad``; branch history and
docs/perf/2026-11-24-h100-attention-bwd.txt).
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


def lower_dot_padded(
    lw: _FunctionLowering, op: g.FlashAttentionBwdOp, di: SSAValue, nlse: SSAValue, pad: int
) -> None:
    """The ``attention_bwd_dot`` prologue of the sm90 backward kernels: ``Di = rowsum(do ∘
    o)`` and ``-lse log2e`` into ``[heads, pad]`` f32 buffers, zeros in rows ``>= Sq``."""
    s = _Spec(op)
    o, do, lse = lw.mem(op.o), lw.mem(op.do), lw.mem(op.lse)
    lanes = s.d // 8
    lw.kernel(
        "attention_bwd_dot", [di, nlse, o, do, lse], 128,
        [cdiv(s.n_batch * pad, 128 // lanes), 1, 1],
        lambda e, a: _dot_padded(e, a, s, pad),
    )


def _dot_padded(e: KernelEmitter, args: list[SSAValue], s: _Spec, pad: int) -> None:
    """:func:`_dot` over ``pad`` rows per head, also storing ``-lse log2e``."""
    di, nlse, o, do, lse = args
    lanes = s.d // 8
    lane = e.local_id()
    row = e.add(e.mul(e.tile_id("x"), 128 // lanes), e.div(lane, lanes))
    c = e.rem(lane, lanes)
    in_grid = e.lt(row, s.n_batch * pad)
    row = e.select(in_grid, row, 0)
    bh, qi = e.div(row, pad), e.rem(row, pad)
    ok = e.and_(in_grid, e.lt(qi, s.sq))
    idx = [*(e.unravel(bh, s.batch) if s.batch else []), e.select(ok, qi, 0)]
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
    zero = e.const(0.0, f32)
    first = e.and_(in_grid, e.eq(c, 0))
    e.store(e.vselect(ok, acc, zero), di, [bh, qi], first)
    lv = e.load(lse, idx, ok, zero)
    e.store(e.vselect(ok, e.fmul(lv, e.const(-LOG2E, f32)), zero), nlse, [bh, qi], first)


class _Common:
    """Fragment helpers shared by the ``dkdv`` and ``dq`` kernels (``WARPS`` warps, each
    owning 16 rows of the tile: rows ``row0`` and ``row0 + 8`` per lane)."""

    e: KernelEmitter
    s: _Spec

    def setup(self) -> None:
        e, s = self.e, self.s
        self.lane = e.local_id()
        lid = e.lane_id()
        warp = e.warp_id()
        self.gq, self.tq = e.div(lid, 4), e.rem(lid, 4)
        self.bidx = e.unravel(e.tile_id("z"), s.batch) if s.batch else []
        self.t0 = e.mul(e.tile_id("x"), tile_rows())
        self.row0 = e.add(self.t0, e.add(e.mul(warp, 16), self.gq))
        self.rows = [self.row0, e.add(self.row0, 8)]
        d = s.d
        # lane offsets (elements) into a swizzled row-major block (b fragments, k = d)
        self.rm_off = [
            e.add(e.add(e.mul(self.gq, d), e.mul(self.tq, 2)), e.mul(_xor(e, c, self.gq), 8))
            for c in range(8)
        ]
        # ... and into a pair-interleaved block (b fragments, k = rows of the block)
        g_hi, g_lo = e.div(self.gq, 4), e.rem(self.gq, 4)
        self.il_off = {}
        for c_hi in (0, 2, 4, 6):
            for h in (0, 1):
                r = e.add(self.tq, 4 * h)
                ch = _xor(e, e.add(g_hi, c_hi), e.mul(e.rem(r, 4), 2))
                self.il_off[c_hi, h] = e.add(e.add(e.mul(r, 2 * d), e.mul(ch, 8)), e.mul(g_lo, 2))

    def load_a(self, ref: SSAValue, n: int) -> list[SSAValue]:
        """``a`` fragments (one per k-step of 16 columns) of the lane's two rows of ``ref``
        (rows ``>= n`` read as zeros)."""
        e, s = self.e, self.s
        oks = [e.lt(r, n) for r in self.rows]
        frags = []
        for ks in range(s.d // 16):
            c0 = e.add(e.mul(self.tq, 2), 16 * ks)
            elems: list[SSAValue] = []
            for dc in (0, 8):
                for ri in (0, 1):
                    elems += _pair(e, ref, [*self.bidx, self.rows[ri], e.add(c0, dc)], oks[ri])
            frags.append(_vec(e, elems, s.et))
        return frags

    def stage_plan(self, rows: int) -> list[tuple[Idx, Idx, list[Idx], list[Idx]]]:
        """Per copy item of a ``rows x d`` block (computed once, outside the loops): the
        item's pair of rows ``p``, 8-column chunk ``cc``, row-major offsets of its two
        rows and pair-interleaved offsets of its two halves."""
        e, d = self.e, self.s.d
        cpr = d // 8
        items = rows // 2 * cpr
        group = 32 * WARPS
        assert items % group == 0
        plan = []
        for it in range(items // group):
            q = e.add(self.lane, it * group)
            p, cc = e.div(q, cpr), e.rem(q, cpr)
            rm = []
            for h in (0, 1):
                r = e.add(e.mul(p, 2), h)
                rm.append(e.add(e.mul(r, d), e.mul(_xor(e, cc, e.rem(r, 8)), 8)))
            il = []
            for half in (0, 1):
                chunk = _xor(e, e.add(e.mul(cc, 2), half), e.mul(e.rem(p, 4), 2))
                il.append(e.add(e.mul(p, 2 * d), e.mul(chunk, 8)))
            plan.append((p, cc, rm, il))
        return plan

    def stage(
        self, e: KernelEmitter, ref: SSAValue, r0: Idx, n: int,
        plan: list[tuple[Idx, Idx, list[Idx], list[Idx]]],
        rm: SSAValue | None, il: SSAValue | None,
    ) -> None:
        """Copy rows ``r0 ..`` of ``ref`` (those ``>= n`` as zeros) into the row-major
        buffer ``rm`` and/or the pair-interleaved buffer ``il`` (``plan``: :meth:`stage_plan`)."""
        s = self.s
        for p, cc, rm_off, il_off in plan:
            vals = []
            for h in (0, 1):
                row = e.add(r0, e.add(e.mul(p, 2), h))
                ok = e.lt(row, n)
                vals.append(e.op(tt.LoadVectorOp(
                    ref, [e.index(i) for i in (*self.bidx, e.select(ok, row, 0), e.mul(cc, 8))],
                    8, ok,
                )))
                if rm is not None:
                    e.emit(tt.StoreVectorOp(vals[-1], rm, [e.index(rm_off[h])]))
            if il is None:
                continue
            a, b = vals
            for half in (0, 1):
                elems = []
                for k in range(4 * half, 4 * half + 4):
                    elems += [e.extract(a, k), e.extract(b, k)]
                e.emit(tt.StoreVectorOp(_vec(e, elems, s.et), il, [e.index(il_off[half])]))

    def b_rm(self, e: KernelEmitter, buf: SSAValue, jn: int, ks: int) -> SSAValue:
        """``b`` fragment (k = columns ``16 ks ..``, n = rows ``8 jn ..``) of a row-major
        block: the block's rows transposed."""
        d = self.s.d
        elems: list[SSAValue] = []
        for h in (0, 1):
            chunk = 2 * ks + h
            off = e.add(self.rm_off[chunk % 8], jn * 8 * d + (chunk - chunk % 8) * 8)
            elems += _pair(e, buf, [off])
        return _vec(e, elems, self.s.et)

    def b_il(self, e: KernelEmitter, buf: SSAValue, m: int, dn: int) -> SSAValue:
        """``b`` fragment (k = rows ``16 m ..``, n = columns ``8 dn ..``) of a
        pair-interleaved block."""
        d = self.s.d
        c_hi, c_rest = (2 * dn) % 8, (2 * dn) - (2 * dn) % 8
        elems: list[SSAValue] = []
        for h in (0, 1):
            off = e.add(self.il_off[c_hi, h], m * 16 * d + c_rest * 8)
            elems += _pair(e, buf, [off])
        return _vec(e, elems, self.s.et)

    def to_a(self, e: KernelEmitter, tiles: list[list[SSAValue]]) -> list[SSAValue]:
        """f32 accumulator tiles (8 columns each) -> 16-bit ``a`` fragments; tiles
        ``2m`` and ``2m + 1`` form k-step ``m``."""
        out = []
        for m in range(len(tiles) // 2):
            elems = [e.convert(x, self.s.et) for x in (*tiles[2 * m], *tiles[2 * m + 1])]
            out.append(_vec(e, elems, self.s.et))
        return out

    def store_acc(self, ref: SSAValue, accs: Sequence[SSAValue], n: int, factor: float) -> None:
        """Store the ``d / 8`` accumulator tiles of the lane's rows (``< n``) times ``factor``."""
        e, s = self.e, self.s
        oks = [e.lt(r, n) for r in self.rows]
        f = e.const(factor, f32)
        for dn, v in enumerate(accs):
            col = e.add(e.mul(self.tq, 2), 8 * dn)
            for r in (0, 1):
                ys = [e.extract(v, 2 * r + k) for k in (0, 1)]
                if factor != 1.0:
                    ys = [e.fmul(y, f) for y in ys]
                out = _vec(e, [e.convert(y, s.et) for y in ys], s.et)
                idx = [e.index(i) for i in (*self.bidx, self.rows[r], col)]
                e.emit(tt.StoreVectorOp(out, ref, idx, oks[r]))

    def mma_rows(
        self, e: KernelEmitter, a: list[SSAValue], buf: SSAValue, n_tiles: int
    ) -> list[list[SSAValue]]:
        """``a`` (16 rows x d) times the transpose of a row-major block: ``n_tiles`` tiles
        of 8 columns, as scalars."""
        zero4 = e.const(0.0, VectorType(f32, [4]))
        out = []
        for jn in range(n_tiles):
            acc = zero4
            for ks in range(self.s.d // 16):
                acc = e.op(tt.MmaOp(a[ks], self.b_rm(e, buf, jn, ks), acc))
            out.append([e.extract(acc, i) for i in range(4)])
        return out

    def mma_acc(
        self, e: KernelEmitter, a: list[SSAValue], buf: SSAValue, accs: list[SSAValue]
    ) -> list[SSAValue]:
        """``accs += a`` (16 rows x block) times a pair-interleaved block (block x d)."""
        out = list(accs)
        for dn in range(self.s.d // 8):
            for m in range(len(a)):
                out[dn] = e.op(tt.MmaOp(a[m], self.b_il(e, buf, m, dn), out[dn]))
        return out


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
        self.q_rm, self.q_il, self.do_rm, self.do_il = (
            e.op(tt.AllocSharedOp([bq * d], s.et, alignment=128)) for _ in range(4)
        )
        self.lse_s = e.op(tt.AllocSharedOp([bq], f32, alignment=16))
        self.plan = self.stage_plan(bq)
        self.di_s = e.op(tt.AllocSharedOp([bq], f32, alignment=16))
        nq = cdiv(s.sq, bq)
        full = s.sq // bq
        if s.causal:
            first = e.div(self.t0, bq)  # the first block with a query >= the tile's first key
            diag = e.min(cdiv_idx(e, e.add(self.t0, tile_rows()), bq), nq)
        else:
            first, diag = 0, 0
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
        self.store_acc(self.dk, carried[: d // 8], s.sk, s.scale)
        self.store_acc(self.dv, carried[d // 8:], s.sk, 1.0)

    def block(self, e: KernelEmitter, i: SSAValue, c: list[SSAValue], masked: bool) -> list[SSAValue]:
        s = self.s
        bq, d = s.inner, s.d
        dk, dv = c[: d // 8], c[d // 8:]
        q0 = e.mul(i, bq)
        e.barrier()
        self.stage(e, self.q, q0, s.sq, self.plan, self.q_rm, self.q_il)
        self.stage(e, self.do, q0, s.sq, self.plan, self.do_rm, self.do_il)

        def rows(be: KernelEmitter) -> list[SSAValue]:
            row = be.add(q0, self.lane)
            ok = be.lt(row, s.sq)
            idx = [*self.bidx, be.select(ok, row, 0)]
            lse = be.load(self.lse, idx, ok, be.const(0.0, f32))
            be.store(be.fmul(lse, be.const(-LOG2E, f32)), self.lse_s, [self.lane])
            be.store(be.load(self.di, idx, ok, be.const(0.0, f32)), self.di_s, [self.lane])
            return []

        e.if_(e.lt(self.lane, bq), rows)
        e.barrier()
        nt = bq // 8
        # S^T = K Q^T: element i of tile jn is key row gq + 8 (i >> 1), query 8 jn + 2 tq + (i & 1)
        st = self.mma_rows(e, self.k_frags, self.q_rm, nt)
        cols = [[e.add(e.mul(self.tq, 2), 8 * jn + b) for b in (0, 1)] for jn in range(nt)]
        lse = [[e.load(self.lse_s, [cols[jn][b]]) for b in (0, 1)] for jn in range(nt)]  # -lse log2e
        di = [[e.load(self.di_s, [cols[jn][b]]) for b in (0, 1)] for jn in range(nt)]
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
        dpt = self.mma_rows(e, self.v_frags, self.do_rm, nt)
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
        self.setup()
        self.q_frags = self.load_a(self.q, s.sq)
        self.do_frags = self.load_a(self.do, s.sq)
        self.lse2, self.di_r = [], []
        for r in self.rows:
            ok = e.lt(r, s.sq)
            idx = [*self.bidx, e.select(ok, r, 0)]
            lse = e.load(self.lse, idx, ok, e.const(0.0, f32))
            self.lse2.append(e.fmul(lse, e.const(-LOG2E, f32)))
            self.di_r.append(e.load(self.di, idx, ok, e.const(0.0, f32)))
        self.k_rm, self.k_il, self.v_rm = (
            e.op(tt.AllocSharedOp([bkv * d], s.et, alignment=128)) for _ in range(3)
        )
        self.plan = self.stage_plan(bkv)
        all_blocks = cdiv(s.sk, bkv)
        full = s.sk // bkv
        if s.causal:
            n_blocks: Idx = e.min(cdiv_idx(e, e.add(self.t0, tile_rows()), bkv), all_blocks)
            n_full: Idx = e.min(e.div(e.add(self.t0, 1), bkv), full)
        else:
            n_blocks, n_full = all_blocks, full
        zero4 = e.const(0.0, VectorType(f32, [4]))
        carried = [zero4] * (d // 8)
        carried = e.for_(0, n_full, 1, carried, lambda ie, j, c: self.block(ie, j, c, False))
        if not (isinstance(n_full, int) and n_full == n_blocks):
            carried = e.for_(
                n_full, n_blocks, 1, carried, lambda ie, j, c: self.block(ie, j, c, True)
            )
        self.store_acc(self.dq, carried, s.sq, s.scale)

    def block(self, e: KernelEmitter, j: SSAValue, c: list[SSAValue], masked: bool) -> list[SSAValue]:
        s = self.s
        bkv = s.inner
        k0 = e.mul(j, bkv)
        e.barrier()
        self.stage(e, self.k, k0, s.sk, self.plan, self.k_rm, self.k_il)
        self.stage(e, self.v, k0, s.sk, self.plan, self.v_rm, None)
        e.barrier()
        nt = bkv // 8
        sc = self.mma_rows(e, self.q_frags, self.k_rm, nt)
        cl = e.const(s.scale * LOG2E, f32)
        ninf = e.const(-pymath.inf, f32)
        probs = []
        for jn in range(nt):
            row = []
            for i_ in range(4):
                x = sc[jn][i_]
                if masked:
                    key = e.add(k0, e.add(e.mul(self.tq, 2), 8 * jn + (i_ & 1)))
                    ok = e.lt(key, s.sk)
                    if s.causal:
                        ok = e.and_(ok, e.le(key, self.rows[i_ >> 1]))
                    assert ok is not None
                    x = e.vselect(ok, x, ninf)
                row.append(e.op(math.Exp2Op(e.op(math.FmaOp(x, cl, self.lse2[i_ >> 1])))))
            probs.append(row)
        dp = self.mma_rows(e, self.do_frags, self.v_rm, nt)
        ds = [
            [e.fmul(probs[jn][i_], e.fsub(dp[jn][i_], self.di_r[i_ >> 1])) for i_ in range(4)]
            for jn in range(nt)
        ]
        return self.mma_acc(e, self.to_a(e, ds), self.k_il, c)


def cdiv_idx(e: KernelEmitter, a: Idx, b: int) -> Idx:
    """``ceil(a / b)`` on indices."""
    return e.div(e.add(a, b - 1), b)
