"""Tensor-core flash attention forward for ``tgraph.flash_attention`` (bf16/f16).

Used by ``lower-graph-to-tile`` when q, k and v are bf16 or f16, the head size is
64 or 128 (``d == dv``), and q, k and v have the same batch dims; other cases use
the scalar kernel of ``tile_gemm.lower_flash_attention``.

Per tile a block of ``BQ`` query rows (``BQ / 16`` warps, 16 rows per warp; grid
``[ceil(Sq / BQ), 1, batch]``), keys and values in blocks of ``BKV``:

* the warp's Q rows are read once into m16n8k16 ``a`` fragments (registers);
* K blocks are copied into shared memory with ``ttile.copy_async``, double
  buffered: block ``j + 1`` is in flight while block ``j`` is used;
* V blocks are read into registers at the start of an iteration and written to
  shared memory *pair-interleaved* (element ``(key, c)`` at ``[key / 2][2c + key % 2]``)
  after the softmax, so that the two ``k``-consecutive elements of a ``b`` fragment
  are one 32-bit shared load, as they are for K;
* both shared buffers are 1-D with an XOR swizzle of their 16-byte chunks applied in
  the index computation (chunk ``^ (row % 8)`` for K, ``^ 2 (row % 4)`` for V), so
  the fragment loads of a warp hit 32 distinct banks; each lane's offsets are
  computed once and loads add constants;
* ``S = Q Kᵀ`` with ``ttile.mma`` (f32), online softmax on the accumulator
  fragments: the row max is combined over the 4 lanes holding a row with
  ``ttile.shuffle_xor`` 1 and 2, ``exp`` is ``exp2`` with ``scale * log2 e`` folded
  into one FMA, the row sum stays a per-lane partial until the end;
* ``P`` (the ``S`` accumulators of two adjacent key tiles form one ``a`` fragment)
  is rounded to bf16/f16 and ``O += P V`` with ``ttile.mma``; ``O / l`` is stored.

Causal attention (a key attends iff ``key <= query``) skips the key blocks after the
tile's last query; masks (and the ragged end of the keys) are applied only in the
blocks that need them, a second loop after the unmasked blocks.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Sequence
from typing import TYPE_CHECKING

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import BFloat16Type, Float16Type, VectorType, f32
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

HEAD_SIZES = (64, 128)
"""Head sizes with a tensor-core kernel."""

BLOCK_KV = 64
"""Keys per block."""

LOG2E = 1.4426950408889634


def choose_block_q(sq: int) -> int:
    """Query rows per tile: 128 (8 warps) for long sequences, else 64 (4 warps)."""
    return 128 if sq >= 1024 else 64


def supported(op: g.FlashAttentionOp) -> bool:
    """Whether :func:`lower_flash_attention` has a tensor-core kernel for ``op``."""
    et = g.elem_of(op.q)
    if not isinstance(et, BFloat16Type | Float16Type):
        return False
    if g.elem_of(op.k) != et or g.elem_of(op.v) != et:
        return False
    qs, ks, vs = g.shape_of(op.q), g.shape_of(op.k), g.shape_of(op.v)
    if len(qs) < 2 or qs[:-2] != ks[:-2] or qs[:-2] != vs[:-2]:
        return False
    return qs[-1] in HEAD_SIZES and vs[-1] == qs[-1] and ks[-2] == vs[-2] and ks[-2] > 0


def lower_flash_attention(
    lw: _FunctionLowering, op: g.FlashAttentionOp | g.FlashAttentionFwdOp
) -> None:
    """``tgraph.flash_attention``: the tensor-core kernel when :func:`supported`, else the
    scalar kernel of ``tile_gemm``. ``tgraph.flash_attention_fwd`` (only when
    :func:`supported`: ``lower-graph-to-tile`` expands the others) is the same kernel that
    also stores each row's log-sum-exp."""
    with_lse = isinstance(op, g.FlashAttentionFwdOp)
    if not supported(op):
        assert not with_lse, "flash_attention_fwd without a kernel is expanded first"
        from tessera.passes.tile_gemm import lower_flash_attention as scalar

        scalar(lw, op)
        return
    qs, ks = g.shape_of(op.q), g.shape_of(op.k)
    batch = list(qs[:-2])
    sq, d, sk = qs[-2], qs[-1], ks[-2]
    scale = op.scale.value.data if op.scale is not None else 1.0 / pymath.sqrt(d)
    bq = choose_block_q(sq)
    out = lw.alloc(op.result.type)
    lw.env[op.result] = out
    lse = None
    if isinstance(op, g.FlashAttentionFwdOp):
        lse = lw.alloc(op.lse.type)
        lw.env[op.lse] = lse
    n_batch = 1
    for x in batch:
        n_batch *= x
    if sq == 0 or n_batch == 0:
        return
    spec = _Spec(
        et=g.elem_of(op.q), ot=g.elem_of(op.result), batch=batch, sq=sq, sk=sk, d=d,
        scale=scale, causal=op.causal is not None, bq=bq, bkv=BLOCK_KV,
    )
    args = [out, lw.mem(op.q), lw.mem(op.k), lw.mem(op.v), *([lse] if lse is not None else [])]
    lw.kernel(
        "flash_attention_fwd" if lse is not None else "flash_attention", args, spec.group, [cdiv(sq, bq), 1, n_batch],
        lambda e, a: _Kernel(e, a, spec).build(),
    )


class _Spec:
    def __init__(
        self, et: Attribute, ot: Attribute, batch: Sequence[int], sq: int, sk: int, d: int,
        scale: float, causal: bool, bq: int, bkv: int,
    ):
        self.et, self.ot, self.batch = et, ot, list(batch)
        self.sq, self.sk, self.d = sq, sk, d
        self.scale, self.causal, self.bq, self.bkv = scale, causal, bq, bkv

    @property
    def group(self) -> int:
        return self.bq // 16 * tt.WARP_SIZE


class _Kernel:
    """Emits the body of one flash attention kernel."""

    def __init__(self, e: KernelEmitter, args: list[SSAValue], spec: _Spec):
        self.e = e
        self.o_ref, self.q_ref, self.k_ref, self.v_ref = args[:4]
        self.lse_ref = args[4] if len(args) > 4 else None
        self.s = spec

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def vec(e: KernelEmitter, elems: Sequence[SSAValue], t: Attribute) -> SSAValue:
        """A vector of the scalars ``elems``."""
        v = e.const(0.0, VectorType(t, [len(elems)]))
        for i, x in enumerate(elems):
            v = e.insert(x, v, i)
        return v

    @staticmethod
    def pair(
        e: KernelEmitter, ref: SSAValue, idx: Sequence[Idx], mask: SSAValue | None = None
    ) -> list[SSAValue]:
        """Two consecutive elements (one 32-bit access) as scalars."""
        v = e.op(tt.LoadVectorOp(ref, [e.index(i) for i in idx], 2, mask))
        return [e.extract(v, 0), e.extract(v, 1)]

    # ------------------------------------------------------------------ kernel
    def build(self) -> None:
        e, s = self.e, self.s
        d, bkv = s.d, s.bkv
        self.group = s.group
        self.lane = e.local_id()
        lid = e.lane_id()
        warp = e.warp_id()
        self.gq, self.tq = e.div(lid, 4), e.rem(lid, 4)
        self.bidx = e.unravel(e.tile_id("z"), s.batch) if s.batch else []
        self.q0 = e.mul(e.tile_id("x"), s.bq)
        self.row0 = e.add(self.q0, e.add(e.mul(warp, 16), self.gq))  # rows row0, row0 + 8
        self.rows = [self.row0, e.add(self.row0, 8)]
        self.sk_ = e.op(tt.AllocSharedOp([2 * bkv * d], s.et, alignment=128))
        self.sv_ = e.op(tt.AllocSharedOp([bkv * d], s.et, alignment=128))
        # per-lane fragment offsets (elements) in the swizzled buffers
        self.k_off = [
            e.add(e.add(e.mul(self.gq, d), e.mul(self.tq, 2)), e.mul(self._xor(e, c, self.gq), 8))
            for c in range(8)
        ]
        g_hi, g_lo = e.div(self.gq, 4), e.rem(self.gq, 4)
        self.v_off = {}
        for c_hi in (0, 2, 4, 6):
            for h in (0, 1):
                r = e.add(self.tq, 4 * h)
                ch = self._xor(e, e.add(g_hi, c_hi), e.mul(e.rem(r, 4), 2))
                self.v_off[c_hi, h] = e.add(
                    e.add(e.mul(r, 2 * d), e.mul(ch, 8)), e.mul(g_lo, 2)
                )
        self.q_frags = self.load_q()
        n_blocks, n_full = self.block_counts()
        self.n_blocks = n_blocks
        self.fill_k(0, 0)
        e.emit(tt.CommitGroupOp())
        m_init = e.const(-pymath.inf, f32)
        zero = e.const(0.0, f32)
        o_init = e.const(0.0, VectorType(f32, [4]))
        carried = [m_init, m_init, zero, zero, *([o_init] * (d // 8))]
        carried = e.for_(0, n_full, 1, carried, lambda ie, j, c: self.block(ie, j, c, False))
        if not (isinstance(n_full, int) and n_full == n_blocks):
            carried = e.for_(
                n_full, n_blocks, 1, carried, lambda ie, j, c: self.block(ie, j, c, True)
            )
        self.finish(carried)

    def block_counts(self) -> tuple[Idx, Idx]:
        """(key blocks to visit, of which the first are unmasked for the whole tile)."""
        e, s = self.e, self.s
        all_blocks = cdiv(s.sk, s.bkv)
        full = s.sk // s.bkv
        if not s.causal:
            return all_blocks, full
        last = e.div(e.add(self.q0, s.bq + s.bkv - 1), s.bkv)  # blocks with key < q0 + bq
        diag = e.div(e.add(self.q0, 1), s.bkv)  # blocks with every key <= q0
        return e.min(last, all_blocks), e.min(diag, full)

    def load_q(self) -> list[SSAValue]:
        e, s = self.e, self.s
        oks = [e.lt(r, s.sq) for r in self.rows]
        frags = []
        for ks in range(s.d // 16):
            c0 = e.add(e.mul(self.tq, 2), 16 * ks)
            elems: list[SSAValue] = []
            for dc in (0, 8):
                for ri in (0, 1):
                    elems += self.pair(
                        e, self.q_ref, [*self.bidx, self.rows[ri], e.add(c0, dc)], oks[ri]
                    )
            frags.append(self.vec(e, elems, s.et))
        return frags

    def fill_k(self, j: Idx, buf: Idx, e: KernelEmitter | None = None) -> None:
        """``copy_async`` key block ``j`` into K buffer ``buf`` (rows past Sk zero-filled)."""
        e = e or self.e
        s = self.s
        cpr = s.d // 8
        items = s.bkv * cpr
        for it in range(cdiv(items, self.group)):
            q = e.add(self.lane, it * self.group)

            def copy(be: KernelEmitter, q: Idx = q) -> list[SSAValue]:
                r, cc = be.div(q, cpr), be.rem(q, cpr)
                key = be.add(be.mul(j, s.bkv), r)
                inside = be.lt(key, s.sk)
                valid = be.select(inside, 8, 0)
                src_row = be.select(inside, key, 0)
                dst = be.add(
                    be.mul(be.add(be.mul(buf, s.bkv), r), s.d),
                    be.mul(self._xor(be, cc, be.rem(r, 8)), 8),
                )
                be.emit(tt.CopyAsyncOp(
                    self.sk_, [be.index(dst)], self.k_ref,
                    [be.index(i) for i in (*self.bidx, src_row, be.mul(cc, 8))], 8, valid,
                ))
                return []

            if items % self.group and (it + 1) * self.group > items:
                e.if_(e.lt(q, items), copy)
            else:
                copy(e)

    @staticmethod
    def _xor(e: KernelEmitter, a: Idx, b: Idx) -> Idx:
        """``a ^ b`` on indices."""
        if isinstance(a, int) and isinstance(b, int):
            return a ^ b
        return e.op(arith.XOrIOp(e.index(a), e.index(b)))

    def load_v(self, e: KernelEmitter, j: Idx) -> list[tuple[Idx, Idx, list[SSAValue]]]:
        """Global V rows of key block ``j`` (pairs of rows, 8 columns) into registers."""
        s = self.s
        cpr = s.d // 8
        items = s.bkv // 2 * cpr
        assert items % self.group == 0
        out = []
        for it in range(items // self.group):
            q = e.add(self.lane, it * self.group)
            p, cc = e.div(q, cpr), e.rem(q, cpr)
            rows = []
            for h in (0, 1):
                key = e.add(e.mul(j, s.bkv), e.add(e.mul(p, 2), h))
                ok = e.lt(key, s.sk)
                v = e.op(tt.LoadVectorOp(
                    self.v_ref, [e.index(i) for i in (*self.bidx, key, e.mul(cc, 8))], 8, ok
                ))
                rows.append(v)
            out.append((p, cc, rows))
        return out

    def store_v(self, e: KernelEmitter, staged: list[tuple[Idx, Idx, list[SSAValue]]]) -> None:
        s = self.s
        for p, cc, (a, b) in staged:
            for half in (0, 1):
                elems = []
                for k in range(4 * half, 4 * half + 4):
                    elems += [e.extract(a, k), e.extract(b, k)]
                v = e.const(0.0, VectorType(s.et, [8]))
                for i, x in enumerate(elems):
                    v = e.insert(x, v, i)
                chunk = self._xor(e, e.add(e.mul(cc, 2), half), e.mul(e.rem(p, 4), 2))
                idx = e.add(e.mul(p, 2 * s.d), e.mul(chunk, 8))
                e.emit(tt.StoreVectorOp(v, self.sv_, [e.index(idx)]))

    def block(self, e: KernelEmitter, j: SSAValue, c: list[SSAValue], masked: bool) -> list[SSAValue]:
        s = self.s
        d, bkv = s.d, s.bkv
        m_old, l_old, o_acc = c[0:2], c[2:4], c[4:]
        buf = e.rem(j, 2)
        nxt = e.add(j, 1)
        nbuf = e.rem(nxt, 2)

        def prefetch(be: KernelEmitter) -> list[SSAValue]:
            self.fill_k(nxt, nbuf, be)
            return []

        e.if_(e.lt(nxt, self.n_blocks), prefetch)
        e.emit(tt.CommitGroupOp())
        e.emit(tt.WaitGroupOp(1))
        e.barrier()
        staged = self.load_v(e, j)
        # S = Q K^T
        kbase = e.mul(buf, bkv * d)
        koffs = [e.add(o, kbase) for o in self.k_off]
        accs = []
        zero4 = e.const(0.0, VectorType(f32, [4]))
        for jn in range(bkv // 8):
            acc = zero4
            for ks in range(d // 16):
                elems: list[SSAValue] = []
                for h in (0, 1):
                    chunk = 2 * ks + h
                    off = e.add(koffs[chunk % 8], jn * 8 * d + (chunk - chunk % 8) * 8)
                    elems += self.pair(e, self.sk_, [off])
                acc = e.op(tt.MmaOp(self.q_frags[ks], self.vec(e, elems, s.et), acc))
            accs.append(acc)
        # online softmax on the fragments; element i of tile jn: row i >> 1, key 2t + (i & 1)
        cl = s.scale * LOG2E
        scores = [[e.extract(a, i) for i in range(4)] for a in accs]
        if cl <= 0:
            scores = [[e.fmul(x, e.const(cl, f32)) for x in row] for row in scores]
            mult = 1.0
        else:
            mult = cl
        if masked:
            ninf = e.const(-pymath.inf, f32)
            kv0 = e.mul(j, bkv)
            for jn in range(bkv // 8):
                for i in range(4):
                    key = e.add(kv0, e.add(e.mul(self.tq, 2), 8 * jn + (i & 1)))
                    ok = e.lt(key, s.sk)
                    if s.causal:
                        ok = e.and_(ok, e.le(key, self.rows[i >> 1]))
                    assert ok is not None
                    scores[jn][i] = e.vselect(ok, scores[jn][i], ninf)
        m_new, neg, alpha = [], [], []
        cm = e.const(mult, f32)
        for r in (0, 1):
            mx = None
            for jn in range(bkv // 8):
                for i in (2 * r, 2 * r + 1):
                    mx = scores[jn][i] if mx is None else e.fmax(mx, scores[jn][i])
            assert mx is not None
            for off in (1, 2):
                mx = e.fmax(mx, e.op(tt.ShuffleXorOp(mx, off)))
            mn = e.fmax(m_old[r], mx)
            m_new.append(mn)
            ng = e.fmul(mn, e.const(-mult, f32))
            neg.append(ng)
            alpha.append(e.op(math.Exp2Op(e.op(math.FmaOp(m_old[r], cm, ng)))))
        probs = [
            [e.op(math.Exp2Op(e.op(math.FmaOp(scores[jn][i], cm, neg[i >> 1])))) for i in range(4)]
            for jn in range(bkv // 8)
        ]
        l_new = []
        for r in (0, 1):
            acc = e.fmul(l_old[r], alpha[r])
            for jn in range(bkv // 8):
                for i in (2 * r, 2 * r + 1):
                    acc = e.fadd(acc, probs[jn][i])
            l_new.append(acc)
        o_scaled = []
        for v in o_acc:
            o_scaled.append(self.vec(e, [e.fmul(e.extract(v, i), alpha[i >> 1]) for i in range(4)], f32))
        # P to 16-bit a fragments: key tiles 2m and 2m + 1 form k-step m
        p_frags = []
        for m in range(bkv // 16):
            elems = [e.convert(x, s.et) for x in (*probs[2 * m], *probs[2 * m + 1])]
            p_frags.append(self.vec(e, elems, s.et))
        self.store_v(e, staged)
        e.barrier()
        o_new = list(o_scaled)
        for dn in range(d // 8):
            c_hi, c_rest = (2 * dn) % 8, (2 * dn) - (2 * dn) % 8
            for m in range(bkv // 16):
                elems = []
                for h in (0, 1):
                    off = e.add(self.v_off[c_hi, h], m * 8 * 2 * d + c_rest * 8)
                    elems += self.pair(e, self.sv_, [off])
                o_new[dn] = e.op(tt.MmaOp(p_frags[m], self.vec(e, elems, s.et), o_new[dn]))
        return [*m_new, *l_new, *o_new]

    def finish(self, c: list[SSAValue]) -> None:
        e, s = self.e, self.s
        e.emit(tt.WaitGroupOp(0))
        inv = []
        for r in (0, 1):
            lsum = c[2 + r]
            for off in (1, 2):
                lsum = e.fadd(lsum, e.op(tt.ShuffleXorOp(lsum, off)))
            inv.append(e.fdiv(e.const(1.0, f32), lsum))
            if self.lse_ref is not None:
                self.store_lse(c[r], lsum, r)
        oks = [e.lt(r, s.sq) for r in self.rows]
        for dn, v in enumerate(c[4:]):
            col = e.add(e.mul(self.tq, 2), 8 * dn)
            for r in (0, 1):
                ys = [e.convert(e.fmul(e.extract(v, 2 * r + k), inv[r]), s.ot) for k in (0, 1)]
                out = self.vec(e, ys, s.ot)
                idx = [e.index(i) for i in (*self.bidx, self.rows[r], col)]
                e.emit(tt.StoreVectorOp(out, self.o_ref, idx, oks[r]))

    def store_lse(self, m: SSAValue, lsum: SSAValue, r: int) -> None:
        """``lse = ln 2 (m mult + log2 l)`` of row ``r`` (the scores' log2 units undone),
        stored by the first lane of the row's quad."""
        e, s = self.e, self.s
        cl = s.scale * LOG2E
        mult = cl if cl > 0 else 1.0
        lse2 = e.op(math.FmaOp(m, e.const(mult, f32), e.op(math.Log2Op(lsum))))
        lse = e.fmul(lse2, e.const(1.0 / LOG2E, f32))
        ok = e.and_(e.lt(self.rows[r], s.sq), e.eq(self.tq, 0))
        e.store(lse, self.lse_ref, [*self.bidx, self.rows[r]], ok)
