"""Tile IR kernels for ``tgraph.matmul`` and ``tgraph.flash_attention``.

Used by ``lower-graph-to-tile`` (tessera/passes/lower_graph_to_tile.py):

* bf16/f16 matmul: a ``BM x BN x BK`` block per tile, 4 warps in 2x2, each warp
  accumulating its ``BM/2 x BN/2`` block with m16n8k16 ``ttile.mma``; operand
  tiles staged in shared memory by ``ttile.copy_async`` (or masked loads and
  stores when global rows are not 4-byte aligned or the operand is transposed).
  Packed fp6/fp4 operands take the same kernel: the tile fill reads each element's
  code from the packed bytes and dequantizes it into the bf16 shared tile.
* f32/f64 matmul: 256 lanes as 16x16, each computing a micro-tile from
  shared-memory tiles (FMA loop).
* flash attention: one lane per query row, K/V blocks in shared memory, online
  softmax.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float8E4M3FNType,
    Float8E5M2Type,
    Float16Type,
    Float32Type,
    Float64Type,
    TensorType,
    VectorType,
    bf16,
    f32,
    i32,
)
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv, compute_type
from tessera.passes.tile_numerics import (
    PackedFormat,
    dequantize,
    load_code,
    packed_format,
    storage_memref,
)

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

MMA_GROUP = 128
FMA_GROUP = 256
ATTN_BLOCK_Q = 64
ATTN_BLOCK_KV = 32

# (row, col) -> index list of the operand in global memory
GlobalIndex = Callable[[KernelEmitter, Idx, Idx], list[Idx]]

Packed = tuple[PackedFormat, int]
"""A packed fp6/fp4 operand: its format and the bytes of one packed row."""


def _batch_index(
    bidx: list[Idx], op_batch: Sequence[int], out_batch: Sequence[int]
) -> list[Idx]:
    off = len(out_batch) - len(op_batch)
    return [bidx[k + off] if d != 1 else 0 for k, d in enumerate(op_batch)]


def _fill_elementwise(
    e: KernelEmitter,
    smem: SSAValue,
    rows: int,
    cols: int,
    src: SSAValue,
    gindex: GlobalIndex,
    r0: Idx,
    c0: Idx,
    rlim: int,
    clim: int,
    lane: SSAValue,
    group: int,
    to: Attribute | None = None,
) -> None:
    """smem[r, c] = src(r0 + r, c0 + c), zero outside ``rlim x clim``; every lane helps."""
    total = rows * cols

    def step(ie: KernelEmitter, j: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
        q = ie.add(ie.mul(j, group), lane)
        r, cc = ie.div(q, cols), ie.rem(q, cols)
        gr, gc = ie.add(r0, r), ie.add(c0, cc)
        inside = ie.lt(q, total) if total % group else None
        ok = ie.and_(inside, ie.and_(ie.lt(gr, rlim), ie.lt(gc, clim)))
        v = ie.load(src, gindex(ie, gr, gc), mask=ok)
        if to is not None:
            v = ie.convert(v, to)
        ie.store(v, smem, [r, cc], mask=inside)
        return []

    e.for_(0, cdiv(total, group), 1, [], step)


def _fill_packed(
    e: KernelEmitter,
    smem: SSAValue,
    rows: int,
    cols: int,
    src: SSAValue,
    gindex: GlobalIndex,
    r0: Idx,
    c0: Idx,
    rlim: int,
    clim: int,
    lane: SSAValue,
    group: int,
    packed: Packed,
) -> None:
    """Like :func:`_fill_elementwise` for a packed fp6/fp4 operand: each lane reads an
    element's code from the packed bytes in global memory, dequantizes it exactly
    (:func:`tessera.passes.tile_numerics.dequantize`) and stores it as the shared tile's
    type (bf16, exact for every fp6/fp4 value); zero outside ``rlim x clim``."""
    fmt, nbytes = packed
    total = rows * cols
    st = smem.type.element_type  # type: ignore[attr-defined]

    def step(ie: KernelEmitter, j: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
        q = ie.add(ie.mul(j, group), lane)
        r, cc = ie.div(q, cols), ie.rem(q, cols)
        gr, gc = ie.add(r0, r), ie.add(c0, cc)
        inside = ie.lt(q, total) if total % group else None
        ok = ie.and_(inside, ie.and_(ie.lt(gr, rlim), ie.lt(gc, clim)))
        idx = gindex(ie, gr, gc)
        code = load_code(ie, src, idx[:-1], idx[-1], fmt, nbytes, ok)
        code = ie.op(arith.SelectOp(ok, code, ie.const(0, i32))) if ok is not None else code
        ie.store(ie.convert(dequantize(ie, code, fmt), st), smem, [r, cc], mask=inside)
        return []

    e.for_(0, cdiv(total, group), 1, [], step)


def _fill_async(
    e: KernelEmitter,
    smem: SSAValue,
    rows: int,
    cols: int,
    chunk: int,
    src: SSAValue,
    gindex: GlobalIndex,
    r0: Idx,
    c0: Idx,
    rlim: int,
    clim: int,
    lane: SSAValue,
    group: int,
) -> None:
    """Like :func:`_fill_elementwise` with ``copy_async`` chunks of ``chunk`` elements."""
    cpr = cols // chunk
    total = rows * cpr

    def step(ie: KernelEmitter, j: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
        q = ie.add(ie.mul(j, group), lane)

        def copy(be: KernelEmitter) -> list[SSAValue]:
            r, cc = be.div(q, cpr), be.mul(be.rem(q, cpr), chunk)
            gr, gc = be.add(r0, r), be.add(c0, cc)
            left = be.min(be.max(be.sub(clim, gc), 0), chunk)
            valid = be.select(be.lt(gr, rlim), left, 0)
            reads = be.lt(0, valid)
            sr, sc = be.select(reads, gr, 0), be.select(reads, gc, 0)
            src_idx = [be.index(i) for i in gindex(be, sr, sc)]
            be.emit(
                tt.CopyAsyncOp(smem, [be.index(r), be.index(cc)], src, src_idx, chunk, valid)
            )
            return []

        if total % group:
            ie.if_(ie.lt(q, total), copy)
        else:
            copy(ie)
        return []

    e.for_(0, cdiv(total, group), 1, [], step)
    e.emit(tt.CommitGroupOp())
    e.emit(tt.WaitGroupOp(0))


def _async_chunk(elem_bytes: int, row_len: int, cols: int, contiguous: bool) -> int | None:
    """Elements per copy_async (16, 8 or 4 bytes) that keep every chunk aligned, or None."""
    if not contiguous:
        return None
    for nbytes in (16, 8, 4):
        c = nbytes // elem_bytes
        if c >= 1 and row_len % c == 0 and cols % c == 0:
            return c
    return None


def _fma_tile(m: int, n: int) -> tuple[int, int, int]:
    """The f32/f64 FMA kernel's tile: 8 x 8 results per lane on large tiles (16 operand
    loads per 64 FMAs), smaller tiles for small M or N."""
    return (128 if m >= 128 else 64 if m >= 64 else 32), (
        128 if n >= 128 else 64 if n >= 64 else 32), 16


def _mm_tile(
    op: g.MatmulOp | g.MatmulEpilogueOp, mma: bool, m: int, n: int, kstep: int = 16
) -> tuple[int, int, int]:
    if op.tile_shape is not None:
        bm, bn, bk = op.tile_shape.get_values()
    elif mma:
        bm, bn, bk = (64 if m > 32 else 32), (64 if n > 32 else 32), 32
    else:
        bm, bn, bk = _fma_tile(m, n)
    if mma and (bm % 32 or bn % 16 or bk % kstep):
        raise ValueError(
            f"{op.name}: tile_shape [{bm}, {bn}, {bk}] cannot be lowered to mma tiles: "
            f"BM must be a multiple of 32, BN of 16 and BK of {kstep}"
        )
    if not mma and (bm % 16 or bn % 16):
        raise ValueError(
            f"{op.name}: tile_shape [{bm}, {bn}, {bk}] cannot be lowered: BM and BN must be "
            "multiples of 16"
        )
    return bm, bn, bk


Epilogue = Callable[[KernelEmitter, list[SSAValue], SSAValue, list[Idx], Idx, Idx, SSAValue | None],
                    SSAValue]
"""``(emitter, extra kernel args, accumulator, batch index, row, col, in-bounds mask) ->
value to store``: what a matmul kernel does to each accumulator before storing it."""


def _store_epilogue(rt: Attribute) -> Epilogue:
    """The plain matmul's epilogue: convert the accumulator to the result type."""
    return lambda e, extra, acc, pre, row, col, ok: e.convert(acc, rt)


def lower_matmul(lw: _FunctionLowering, op: g.MatmulOp | g.MatmulEpilogueOp) -> None:
    """``tgraph.matmul`` and ``tgraph.matmul_epilogue`` (whose bias add, activation and cast
    are applied to the accumulators in registers, before the store)."""
    et = g.elem_of(op.lhs)
    rt = g.elem_of(op.result)
    extra: list[SSAValue] = []
    epilogue = _store_epilogue(rt)
    if isinstance(op, g.MatmulEpilogueOp):
        from tessera.passes.lower_graph_to_tile import matmul_epilogue

        epilogue = matmul_epilogue(op)
        extra += [lw.mem(v) for v in op.epilogue_operands]
    packed: tuple[Packed | None, Packed | None] = (None, None)
    if packed_format(et) is not None:  # fp6/fp4: unpacked to bf16 in shared memory
        packed = (_packed(op.lhs), _packed(op.rhs))
        et = bf16
    mma = isinstance(et, BFloat16Type | Float16Type | Float8E4M3FNType | Float8E5M2Type)
    if mma and packed == (None, None) and g.elem_of(op.rhs) != et:
        raise NotImplementedError(
            f"lower-graph-to-tile: {op.name} has no Tile IR lowering for {et} x "
            f"{g.elem_of(op.rhs)} operands (mixed element types)"
        )
    if not (mma or isinstance(et, Float32Type | Float64Type)):
        raise NotImplementedError(
            f"lower-graph-to-tile: {op.name} has no Tile IR lowering for {et} operands"
        )
    ta, tb = op.transpose_lhs is not None, op.transpose_rhs is not None
    ash, bsh, osh = g.shape_of(op.lhs), g.shape_of(op.rhs), g.shape_of(op.result)
    m, n = osh[-2], osh[-1]
    k = ash[-2] if ta else ash[-1]
    batch = osh[:-2]
    out = lw.alloc(op.result.type)
    lw.env[op.result] = out
    if k == 0:
        _empty_product(lw, out, extra, osh, compute_type(et), epilogue)
        return
    bm, bn, bk = _mm_tile(op, mma, m, n, tt.mma_k(et) if mma else 16)
    grid = [cdiv(n, bn), cdiv(m, bm), prod(batch)]

    def a_index(bidx: list[Idx]) -> GlobalIndex:
        pre = _batch_index(bidx, ash[:-2], batch)
        return lambda e, r, c: [*pre, *((c, r) if ta else (r, c))]

    def b_index(bidx: list[Idx]) -> GlobalIndex:
        pre = _batch_index(bidx, bsh[:-2], batch)
        return lambda e, r, c: [*pre, *((c, r) if tb else (r, c))]

    args = [out, lw.mem(op.lhs), lw.mem(op.rhs), *extra]
    p = _MatmulProblem(et, epilogue, m, n, k, bm, bn, bk, batch, ta, tb, a_index, b_index,
                       packed)
    if mma:
        lw.kernel("matmul", args, MMA_GROUP, grid, lambda e, a: _mma_kernel(e, a, p))
    else:
        lw.kernel("matmul", args, FMA_GROUP, grid, lambda e, a: _fma_kernel(e, a, p))


def _packed(v: SSAValue) -> Packed:
    """The format and packed row bytes of a packed fp6/fp4 matmul operand."""
    t = v.type
    assert isinstance(t, TensorType)
    fmt = packed_format(t.element_type)
    assert fmt is not None
    return fmt, storage_memref(t).get_shape()[-1]


def fma_matmul_2d(
    lw: _FunctionLowering, out: SSAValue, a: SSAValue, b: SSAValue, m: int, n: int, k: int,
    et: Attribute, tb: bool = False,
) -> None:
    """``out[m, n] = a[m, k] @ b`` (``b[k, n]``, or ``b[n, k]`` when ``tb``) on the FMA kernel,
    for f32/f64 buffers that are not graph values (the f32 convolution's im2col GEMM)."""
    bm, bn, bk = _fma_tile(m, n)
    p = _MatmulProblem(
        et, _store_epilogue(et), m, n, k, bm, bn, bk, [], False, tb,
        lambda bidx: lambda e, r, c: [r, c],
        lambda bidx: (lambda e, r, c: [c, r]) if tb else (lambda e, r, c: [r, c]),
    )
    lw.kernel("matmul", [out, a, b], FMA_GROUP, [cdiv(n, bn), cdiv(m, bm), 1],
              lambda e, args: _fma_kernel(e, args, p))


@dataclass(frozen=True)
class _MatmulProblem:
    """What a matmul kernel is specialized for: element type, epilogue, sizes ``C[m, n] =
    A[m, k] B[k, n]`` over ``batch``, tile shape, transposes and the batch-aware index
    maps of A and B."""

    et: Attribute
    epilogue: Epilogue
    m: int
    n: int
    k: int
    bm: int
    bn: int
    bk: int
    batch: Sequence[int]
    ta: bool
    tb: bool
    a_index: Callable[[list[Idx]], GlobalIndex]
    b_index: Callable[[list[Idx]], GlobalIndex]
    packed: tuple[Packed | None, Packed | None] = (None, None)


def _empty_product(
    lw: _FunctionLowering,
    out: SSAValue,
    extra: list[SSAValue],
    osh: Sequence[int],
    acc_t: Attribute,
    epilogue: Epilogue,
) -> None:
    """K = 0: the product is zero; one lane per output element applies the epilogue."""
    total = prod(osh)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        lin = e.linear_id()
        ok = e.lt(lin, total)
        idx = e.unravel(lin, osh)
        v = epilogue(e, args[1:], e.const(0.0, acc_t), idx[:-2], idx[-2], idx[-1], ok)
        e.store(v, args[0], idx, mask=ok)

    lw.kernel("matmul", [out, *extra], FMA_GROUP, [cdiv(total, FMA_GROUP), 1, 1], build)


def _mma_kernel(e: KernelEmitter, args: list[SSAValue], p: _MatmulProblem) -> None:
    c_ref, a_ref, b_ref, *extra = args
    et, epilogue, m, n, k, bm, bn, bk = p.et, p.epilogue, p.m, p.n, p.k, p.bm, p.bn, p.bk
    batch, ta, tb, a_index, b_index = p.batch, p.ta, p.tb, p.a_index, p.b_index
    group = MMA_GROUP
    wm_size, wn_size = bm // 2, bn // 2
    mi_n, ni_n = wm_size // 16, wn_size // 8
    lane = e.local_id()
    lid = e.lane_id()
    warp = e.warp_id()
    wm, wn = e.div(warp, 2), e.rem(warp, 2)
    gq, tq = e.div(lid, 4), e.rem(lid, 4)
    n0 = e.mul(e.tile_id("x"), bn)
    m0 = e.mul(e.tile_id("y"), bm)
    bidx = e.unravel(e.tile_id("z"), batch) if batch else []
    ai, bi = a_index(bidx), b_index(bidx)
    sa = e.op(tt.AllocSharedOp([bm, bk], et, alignment=16))
    sb = e.op(tt.AllocSharedOp([bk, bn], et, alignment=16))
    zero = e.const(0.0, VectorType(f32, [4]))
    eb = tt.element_bytes(et)
    mk = tt.mma_k(et)
    pa, pb = p.packed
    ca = _async_chunk(eb, k, bk, not ta) if pa is None else None
    cb = _async_chunk(eb, n, bn, not tb) if pb is None else None
    wrow = e.mul(wm, wm_size)
    wcol = e.mul(wn, wn_size)

    def kstep(ie: KernelEmitter, k0: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
        if pa is not None:
            _fill_packed(ie, sa, bm, bk, a_ref, ai, m0, k0, m, k, lane, group, pa)
        elif ca is not None:
            _fill_async(ie, sa, bm, bk, ca, a_ref, ai, m0, k0, m, k, lane, group)
        else:
            _fill_elementwise(ie, sa, bm, bk, a_ref, ai, m0, k0, m, k, lane, group)
        if pb is not None:
            _fill_packed(ie, sb, bk, bn, b_ref, bi, k0, n0, k, n, lane, group, pb)
        elif cb is not None:
            _fill_async(ie, sb, bk, bn, cb, b_ref, bi, k0, n0, k, n, lane, group)
        else:
            _fill_elementwise(ie, sb, bk, bn, b_ref, bi, k0, n0, k, n, lane, group)
        ie.barrier()
        accs = list(accs)
        # fragment element i of lane (g, t) = 4g + t: tt.mma_a_coords / mma_b_coords
        # with g, t factored out: (row, col) = (g, per*t) + offsets(i)
        per = mk // 8
        for kk in range(0, bk, mk):
            afr = []
            for mi in range(mi_n):
                v = ie.const(0.0, VectorType(et, [mk // 2]))
                r = ie.add(wrow, ie.add(gq, mi * 16))
                c = ie.add(ie.mul(tq, per), kk)
                for i in range(mk // 2):
                    dr, dc = tt.mma_a_coords(0, i, mk)
                    x = ie.load(sa, [ie.add(r, dr), ie.add(c, dc)])
                    v = ie.insert(x, v, i)
                afr.append(v)
            bfr = []
            for ni in range(ni_n):
                v = ie.const(0.0, VectorType(et, [mk // 4]))
                col = ie.add(wcol, ie.add(gq, ni * 8))
                kr = ie.add(ie.mul(tq, per), kk)
                for i in range(mk // 4):
                    dk, _ = tt.mma_b_coords(0, i, mk)
                    x = ie.load(sb, [ie.add(kr, dk), col])
                    v = ie.insert(x, v, i)
                bfr.append(v)
            for mi in range(mi_n):
                for ni in range(ni_n):
                    j = mi * ni_n + ni
                    accs[j] = ie.op(tt.MmaOp(afr[mi], bfr[ni], accs[j]))
        ie.barrier()
        return accs

    accs = e.for_(0, k, bk, [zero] * (mi_n * ni_n), kstep)
    pre = _batch_index(bidx, batch, batch)
    for mi in range(mi_n):
        for ni in range(ni_n):
            acc = accs[mi * ni_n + ni]
            rbase = e.add(m0, e.add(wrow, e.add(gq, mi * 16)))
            cbase = e.add(n0, e.add(wcol, e.add(e.mul(tq, 2), ni * 8)))
            for i in range(4):
                row = e.add(rbase, 8 * (i >> 1))
                col = e.add(cbase, i & 1)
                ok = e.and_(e.lt(row, m), e.lt(col, n))
                v = epilogue(e, extra, e.extract(acc, i), pre, row, col, ok)
                e.store(v, c_ref, [*pre, row, col], mask=ok)


def _fma_kernel(e: KernelEmitter, args: list[SSAValue], p: _MatmulProblem) -> None:
    c_ref, a_ref, b_ref, *extra = args
    et, epilogue, m, n, k, bm, bn, bk = p.et, p.epilogue, p.m, p.n, p.k, p.bm, p.bn, p.bk
    batch, a_index, b_index = p.batch, p.a_index, p.b_index
    group = FMA_GROUP
    tm, tn = bm // 16, bn // 16
    lane = e.local_id()
    ty, tx = e.div(lane, 16), e.rem(lane, 16)
    n0 = e.mul(e.tile_id("x"), bn)
    m0 = e.mul(e.tile_id("y"), bm)
    bidx = e.unravel(e.tile_id("z"), batch) if batch else []
    ai, bi = a_index(bidx), b_index(bidx)
    sa = e.op(tt.AllocSharedOp([bm, bk], et))
    sb = e.op(tt.AllocSharedOp([bk, bn], et))
    zero = e.const(0.0, et)

    def kstep(ie: KernelEmitter, k0: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
        _fill_elementwise(ie, sa, bm, bk, a_ref, ai, m0, k0, m, k, lane, group)
        _fill_elementwise(ie, sb, bk, bn, b_ref, bi, k0, n0, k, n, lane, group)
        ie.barrier()

        def inner(je: KernelEmitter, kk: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
            av = [je.load(sa, [je.add(ty, 16 * i), kk]) for i in range(tm)]
            bv = [je.load(sb, [kk, je.add(tx, 16 * j)]) for j in range(tn)]
            return [
                je.op(math.FmaOp(av[i], bv[j], acc[i * tn + j]))
                for i in range(tm) for j in range(tn)
            ]

        accs = ie.for_(0, bk, 1, accs, inner)
        ie.barrier()
        return accs

    accs = e.for_(0, k, bk, [zero] * (tm * tn), kstep)
    pre = _batch_index(bidx, batch, batch)
    for i in range(tm):
        for j in range(tn):
            row = e.add(m0, e.add(ty, 16 * i))
            col = e.add(n0, e.add(tx, 16 * j))
            ok = e.and_(e.lt(row, m), e.lt(col, n))
            v = epilogue(e, extra, accs[i * tn + j], pre, row, col, ok)
            e.store(v, c_ref, [*pre, row, col], mask=ok)


# --------------------------------------------------------------------------- attention


def lower_flash_attention(lw: _FunctionLowering, op: g.FlashAttentionOp) -> None:
    et = g.elem_of(op.q)
    if not isinstance(et, BFloat16Type | Float16Type | Float32Type | Float64Type):
        raise NotImplementedError(
            f"lower-graph-to-tile: {op.name} has no Tile IR lowering for {et} operands"
        )
    ct = compute_type(et)
    qs, ks, vs = g.shape_of(op.q), g.shape_of(op.k), g.shape_of(op.v)
    sq, d = qs[-2], qs[-1]
    sk, dv = ks[-2], vs[-1]
    batch = qs[:-2]
    scale = op.scale.value.data if op.scale is not None else 1.0 / pymath.sqrt(d)
    causal = op.causal is not None
    out = lw.alloc(op.result.type)
    lw.env[op.result] = out
    bq, bkv = ATTN_BLOCK_Q, ATTN_BLOCK_KV

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, q_ref, k_ref, v_ref = args
        lane = e.local_id()
        bidx = e.unravel(e.tile_id("z"), batch) if batch else []
        qrow = e.add(e.mul(e.tile_id("x"), bq), lane)
        qok = e.lt(qrow, sq)
        s_q = e.op(tt.AllocSharedOp([bq, max(d, 1)], ct))
        s_o = e.op(tt.AllocSharedOp([bq, max(dv, 1)], ct))
        s_k = e.op(tt.AllocSharedOp([bkv, max(d, 1)], ct))
        s_v = e.op(tt.AllocSharedOp([bkv, max(dv, 1)], ct))
        zero = e.const(0.0, ct)

        def init(ie: KernelEmitter, j: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
            x = ie.convert(ie.load(q_ref, [*bidx, qrow, j], mask=qok), ct)
            ie.store(ie.fmul(x, ie.const(scale, ct)), s_q, [lane, j])
            return []

        e.for_(0, d, 1, [], init)

        def init_o(ie: KernelEmitter, j: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
            ie.store(zero, s_o, [lane, j])
            return []

        e.for_(0, dv, 1, [], init_o)
        m_init = e.const(-pymath.inf, ct)

        def kv_block(ie: KernelEmitter, kb: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
            ie.barrier()
            for s_ref, g_ref, width in ((s_k, k_ref, d), (s_v, v_ref, dv)):
                _fill_elementwise(
                    ie, s_ref, bkv, width, g_ref,
                    lambda fe, r, cc, g_ref=g_ref: [*bidx, r, cc],
                    kb, 0, sk, width, lane, bq, to=ct,
                )
            ie.barrier()

            def key(je: KernelEmitter, j: SSAValue, mc: list[SSAValue]) -> list[SSAValue]:
                mx, ls = mc
                kpos = je.add(kb, j)
                valid = je.lt(kpos, sk)
                if causal:
                    valid = je.and_(valid, je.le(kpos, qrow))
                assert valid is not None

                def dot(de: KernelEmitter, t: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
                    a = de.load(s_q, [lane, t])
                    b = de.load(s_k, [j, t])
                    return [de.fadd(acc[0], de.fmul(a, b))]

                (s,) = je.for_(0, d, 1, [zero], dot)
                m_new = je.vselect(valid, je.fmax(mx, s), mx)
                p = je.vselect(valid, je.exp(je.fsub(s, m_new)), zero)
                same = je.feq(mx, m_new)
                alpha = je.vselect(same, je.const(1.0, ct), je.exp(je.fsub(mx, m_new)))
                l_new = je.fadd(je.fmul(ls, alpha), p)

                def upd(ue: KernelEmitter, t: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
                    o = ue.load(s_o, [lane, t])
                    vv = ue.load(s_v, [j, t])
                    ue.store(ue.fadd(ue.fmul(o, alpha), ue.fmul(p, vv)), s_o, [lane, t])
                    return []

                je.for_(0, dv, 1, [], upd)
                return [m_new, l_new]

            return ie.for_(0, bkv, 1, list(c), key)

        _, lsum = e.for_(0, sk, bkv, [m_init, zero], kv_block)
        inv = e.fdiv(e.const(1.0, ct), lsum)

        def write(ie: KernelEmitter, t: SSAValue, c: list[SSAValue]) -> list[SSAValue]:
            y = ie.fmul(ie.load(s_o, [lane, t]), inv)
            ie.store(ie.convert(y, g.elem_of(op.result)), o_ref, [*bidx, qrow, t], mask=qok)
            return []

        e.for_(0, dv, 1, [], write)

    args = [out, lw.mem(op.q), lw.mem(op.k), lw.mem(op.v)]
    lw.kernel("flash_attention", args, bq, [cdiv(sq, bq), 1, prod(batch)], build)
