"""Lowerings of the ``ttile`` kernel ops (and ``memref.load`` / ``memref.store``):
coordinates, shared memory, loads and stores, asynchronous copies, barriers, warp
shuffles and reductions, and the ``mma.sync`` tensor-core MMA."""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects import memref
from xdsl.dialects.builtin import IntegerType, MemRefType, VectorType, i32
from xdsl.ir import Attribute, Operation, SSAValue

from tessera.ir import target as tt
from tessera.ir import tile
from tessera.ir.tile import element_bytes
from tessera.passes.lower_tile_to_target.arith_ops import float_minmax
from tessera.passes.lower_tile_to_target.kernel import TARGET_LOWERINGS, KernelLowering, _Shared
from tessera.passes.lower_tile_to_target.types import (
    TileLoweringError,
    float_name,
    int_type,
    mem_type,
    reg_class_of,
)


@TARGET_LOWERINGS.register(tile.ReturnOp)
def _return(lw: KernelLowering, op: Operation) -> None:
    lw.emit(tt.RetOp())


@TARGET_LOWERINGS.register(tile.TileIdOp, tile.NumTilesOp)
def _tile_coord(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.TileIdOp | tile.NumTilesOp)
    dim = "xyz"[op.dim_index()]
    name = ("ctaid" if isinstance(op, tile.TileIdOp) else "nctaid") + "." + dim
    r = lw.reg("b32")
    lw.emit(tt.SregOp(r, name))
    lw.vals[op.results[0]] = [lw.u64_of(r)]


@TARGET_LOWERINGS.register(tile.LocalIdOp, tile.GroupSizeOp, tile.LinearIdOp, tile.LaneIdOp, tile.WarpIdOp)
def _lane_coord(lw: KernelLowering, op: Operation) -> None:
    tid = lw.tid_x()
    if isinstance(op, tile.LocalIdOp):
        r = tid
    elif isinstance(op, tile.GroupSizeOp):
        lw.vals[op.results[0]] = [lw.const_reg("b64", lw.group_size)]
        return
    elif isinstance(op, tile.LaneIdOp):
        r = lw.reg("b32")
        lw.emit(tt.AndOp("b32", r, tid, lw.imm(31)))
    elif isinstance(op, tile.WarpIdOp):
        r = lw.reg("b32")
        lw.emit(tt.ShrOp("u32", r, tid, lw.imm(5)))
    else:
        cta = lw.reg("b32")
        lw.emit(tt.SregOp(cta, "ctaid.x"))
        wide = lw.reg("b64")
        lw.emit(tt.MulOp("wide.u32", wide, cta, lw.imm(lw.group_size)))
        out = lw.reg("b64")
        lw.emit(tt.AddOp("s64", out, wide, lw.u64_of(tid)))
        lw.vals[op.results[0]] = [out]
        return
    lw.vals[op.results[0]] = [lw.u64_of(r)]


@TARGET_LOWERINGS.register(tile.AllocSharedOp)
def _alloc_shared(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.AllocSharedOp)
    t = op.result.type
    assert isinstance(t, MemRefType)
    e = element_bytes(t.element_type)
    size = math.prod(t.get_shape()) * e
    align = op.alignment.value.data if op.alignment is not None else 16
    sym = f"smem{lw.nshared}"  # kernel scope: the name need not be unique
    lw.nshared += 1
    lw.prepend(tt.SharedOp(sym, size, max(align, 16)))
    r = lw.reg("b32")
    lw.emit(tt.SharedAddrOp(r, sym))
    lw.vals[op.result] = [r]
    lw.shared[op.result] = _Shared(
        sym, tuple(t.get_shape()), e, op.swizzle is not None and op.swizzle.data == "xor"
    )


@TARGET_LOWERINGS.register(tile.LoadOp)
def _load(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.LoadOp)
    lw.load_scalar(op, op.ref, op.indices, op.result, op.mask, op.other)


@TARGET_LOWERINGS.register(tile.StoreOp)
def _store(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.StoreOp)
    lw.store_scalar(op, op.value, op.ref, op.indices, op.mask)


@TARGET_LOWERINGS.register(memref.LoadOp)
def _memref_load(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, memref.LoadOp)
    lw.load_scalar(op, op.memref, op.indices, op.res)


@TARGET_LOWERINGS.register(memref.StoreOp)
def _memref_store(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, memref.StoreOp)
    lw.store_scalar(op, op.value, op.memref, op.indices)


def _vector_access_words(lw: KernelLowering, op: Operation, vt: VectorType) -> tuple[str, int, int]:
    """(word type, number of words, elements per word) of a vector access."""
    et = vt.element_type
    n = vt.get_shape()[0]
    eb = element_bytes(et)
    total = n * eb
    if total not in (4, 8, 16) and not (n == 1 or total == 2):
        raise lw.fail(op, f"vector access of {total} bytes is not 1, 2, 4, 8 or 16 bytes")
    if eb >= 4:
        return mem_type(et), n, 1
    if eb == 2:
        if total == 2:
            return "b16", 1, 1
        return "b32", total // 4, 2
    raise lw.fail(op, f"vectors of {et} are not lowered")


@TARGET_LOWERINGS.register(tile.LoadVectorOp)
def _load_vector(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.LoadVectorOp)
    vt = op.result.type
    assert isinstance(vt, VectorType)
    wty, nw, per = _vector_access_words(lw, op, vt)
    space, a, offset = lw.shared_address_imm(op, op.ref, op.indices)
    guard = lw.one(op.mask) if op.mask is not None else None
    cls = "b32" if per == 2 else reg_class_of(vt.element_type)
    words = [lw.reg(cls) for _ in range(nw)]
    if guard is not None:
        for w in words:
            lw.zero(w, vt.element_type if per == 1 else i32)
    vec = f"v{nw}." if nw > 1 else ""
    lw.emit(tt.LdOp(f"{space}.{vec}{wty}", words, a, offset, guard=guard))
    if per == 1:
        lw.vals[op.result] = words
        return
    elems = []
    for w in words:
        lo, hi = lw.reg("b16"), lw.reg("b16")
        lw.emit(tt.UnpackOp("b32", [lo, hi], w))
        elems += [lo, hi]
    lw.vals[op.result] = elems


@TARGET_LOWERINGS.register(tile.StoreVectorOp)
def _store_vector(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.StoreVectorOp)
    vt = op.value.type
    assert isinstance(vt, VectorType)
    wty, nw, per = _vector_access_words(lw, op, vt)
    space, a, offset = lw.shared_address_imm(op, op.ref, op.indices)
    guard = lw.one(op.mask) if op.mask is not None else None
    elems = lw.vals[op.value]
    if per == 1:
        words = elems
    else:
        words = []
        for k in range(nw):
            w = lw.reg("b32")
            lw.emit(tt.PackOp("b32", w, elems[2 * k: 2 * k + 2]))
            words.append(w)
    vec = f"v{nw}." if nw > 1 else ""
    lw.emit(tt.StOp(f"{space}.{vec}{wty}", a, words, offset, guard=guard))


@TARGET_LOWERINGS.register(tile.CopyAsyncOp)
def _copy_async(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.CopyAsyncOp)
    st = op.src.type
    assert isinstance(st, MemRefType)
    eb = element_bytes(st.element_type)
    size = op.elems.value.data * eb
    _, dst = lw.address(op, op.dst, op.dst_indices)
    _, src = lw.address(op, op.src, op.src_indices)
    src_size = None
    if op.valid is not None:
        n = lw.u32_of(lw.one(op.valid))
        src_size = lw.reg("b32")
        lw.emit(tt.MulOp("lo.u32", src_size, n, lw.imm(eb)))
    lw.emit(tt.CpAsyncOp("cg" if size == 16 else "ca", dst, src, size, src_size))


@TARGET_LOWERINGS.register(tile.CommitGroupOp)
def _commit(lw: KernelLowering, op: Operation) -> None:
    lw.emit(tt.CpAsyncCommitOp())


@TARGET_LOWERINGS.register(tile.WaitGroupOp)
def _wait(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.WaitGroupOp)
    lw.emit(tt.CpAsyncWaitOp(op.pending.value.data))


@TARGET_LOWERINGS.register(tile.BarrierOp)
def _barrier(lw: KernelLowering, op: Operation) -> None:
    lw.emit(tt.BarSyncOp(0))


def _shuffle(lw: KernelLowering, v: SSAValue, t: Attribute, offset: int) -> SSAValue:
    """The register ``v`` of lane ``lane ^ offset`` (any 16/32/64-bit scalar type)."""
    cls = reg_class_of(t)
    full = lw.imm(-1)
    off = lw.imm(offset)
    clamp = lw.imm(31)
    out = lw.reg(cls)
    if cls in ("b32", "f32"):
        src = v
        if cls == "f32":
            src = lw.reg("b32")
            lw.emit(tt.MovOp("b32", src, v))
        got = lw.reg("b32")
        lw.emit(tt.ShflOp("bfly", got, src, off, clamp, full))
        lw.emit(tt.MovOp("b32", out, got))
    elif cls in ("b64", "f64"):
        lo, hi = lw.reg("b32"), lw.reg("b32")
        lw.emit(tt.UnpackOp("b64", [lo, hi], v if cls == "b64" else _as_b64(lw, v)))
        lo2, hi2 = lw.reg("b32"), lw.reg("b32")
        lw.emit(tt.ShflOp("bfly", lo2, lo, off, clamp, full))
        lw.emit(tt.ShflOp("bfly", hi2, hi, off, clamp, full))
        packed = lw.reg("b64")
        lw.emit(tt.PackOp("b64", packed, [lo2, hi2]))
        lw.emit(tt.MovOp("b64", out, packed))
    elif cls == "b16":
        z = lw.reg("b16")
        lw.emit(tt.MovOp("b16", z, lw.imm(0, IntegerType(16))))
        w = lw.reg("b32")
        lw.emit(tt.PackOp("b32", w, [v, z]))
        got = lw.reg("b32")
        lw.emit(tt.ShflOp("bfly", got, w, off, clamp, full))
        lw.emit(tt.UnpackOp("b32", [out, z], got))
    else:
        raise TileLoweringError(f"lower-tile-to-target: cannot shuffle values of type {t}")
    return out


def _as_b64(lw: KernelLowering, v: SSAValue) -> SSAValue:
    r = lw.reg("b64")
    lw.emit(tt.MovOp("b64", r, v))
    return r


@TARGET_LOWERINGS.register(tile.ShuffleXorOp)
def _shuffle_xor(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.ShuffleXorOp)
    lw.vals[op.result] = [_shuffle(lw, lw.one(op.value), op.value.type, op.offset.value.data)]


def _combine(lw: KernelLowering, kind: str, t: Attribute, a: SSAValue, b: SSAValue) -> SSAValue:
    cls = reg_class_of(t)
    out = lw.reg(cls)
    if cls in ("f32", "f64"):
        if kind == "sum":
            lw.emit(tt.AddOp(f"rn.{cls}", out, a, b))
        else:
            float_minmax(lw, kind, cls, out, a, b)
    elif cls in ("b32", "b64"):
        ity = int_type(t)
        op = {"sum": tt.AddOp, "max": tt.MaxOp, "min": tt.MinOp}[kind]
        lw.emit(op(ity, out, a, b))
    else:
        raise TileLoweringError(f"lower-tile-to-target: cannot reduce values of type {t}")
    return out


@TARGET_LOWERINGS.register(tile.ReduceOp)
def _reduce(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.ReduceOp)
    t = op.value.type
    kind = op.kind.data
    v = lw.one(op.value)
    for off in (16, 8, 4, 2, 1):
        other = _shuffle(lw, v, t, off)
        v = _combine(lw, kind, t, v, other)
    if op.scope.data == "group":
        nwarps = lw.group_size // 32
        if nwarps > 1:
            cls = reg_class_of(t)
            eb = 8 if cls in ("b64", "f64") else 4
            sym = f"red{lw.nshared}"
            lw.nshared += 1
            lw.prepend(tt.SharedOp(sym, nwarps * eb, 16))
            base = lw.reg("b32")
            lw.emit(tt.SharedAddrOp(base, sym))
            tid = lw.tid_x()
            lane = lw.reg("b32")
            lw.emit(tt.AndOp("b32", lane, tid, lw.imm(31)))
            warp = lw.reg("b32")
            lw.emit(tt.ShrOp("u32", warp, tid, lw.imm(5)))
            slot = lw.reg("b32")
            lw.emit(tt.MadOp("lo.u32", slot, warp, lw.imm(eb), base))
            is0 = lw.reg("pred")
            lw.emit(tt.SetpOp("eq.u32", is0, lane, lw.imm(0)))
            mt = mem_type(t) if cls in ("f32", "f64") else f"b{eb * 8}"
            lw.emit(tt.StOp(f"shared.{mt}", slot, [v], guard=is0))
            lw.emit(tt.BarSyncOp(0))
            acc: SSAValue | None = None
            for w in range(nwarps):
                x = lw.reg(cls)
                lw.emit(tt.LdOp(f"shared.{mt}", [x], base, offset=w * eb))
                acc = x if acc is None else _combine(lw, kind, t, acc, x)
            assert acc is not None
            lw.emit(tt.BarSyncOp(0))
            v = acc
    lw.vals[op.result] = [v]


@TARGET_LOWERINGS.register(tile.MmaOp)
def _mma(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.MmaOp)
    at = op.a.type
    assert isinstance(at, VectorType)
    ab = float_name(at.element_type)
    per = {tile.MMA_K_FP8: 4, tile.MMA_K_TF32: 1}.get(op.k, 2)
    if op.k == tile.MMA_K_TF32:
        ab = "tf32"  # the f32 registers as they are: the tensor cores read their tf32 bits

    def pack(v: SSAValue) -> list[SSAValue]:
        # Reuse the packing of an earlier mma in the same block (it ran before this one).
        key = (v, op.parent_block())
        cached = lw.packed.get(key)
        if cached is not None:
            return cached
        elems = lw.vals[v]
        out = []
        for k in range(0, len(elems), per):
            w = lw.reg("b32")
            if per == 1:
                lw.emit(tt.MovOp("b32", w, elems[k]))
            elif per == 2:
                lw.emit(tt.PackOp("b32", w, elems[k: k + 2]))
            else:
                _pack_bytes(lw, w, elems[k: k + 4])
            out.append(w)
        lw.packed[key] = out
        return out

    a = pack(op.a)
    b = pack(op.b)
    c = lw.vals[op.c]
    d = [lw.reg("f32") for _ in range(4)]
    lw.emit(tt.MmaOp(ab, d, a, b, c))
    lw.vals[op.result] = d


def _pack_bytes(lw: KernelLowering, w: SSAValue, elems: Sequence[SSAValue]) -> None:
    """``w`` (b32) = the low bytes of four b16 registers, the first in the low bits."""
    for j, e in enumerate(elems):
        x = lw.reg("b32")
        lw.emit(tt.CvtOp("u32.u16", x, [e]))
        lw.emit(tt.AndOp("b32", x, x, lw.imm(0xFF)))
        if j == 0:
            lw.emit(tt.MovOp("b32", w, x))
            continue
        lw.emit(tt.ShlOp("b32", x, x, lw.imm(8 * j)))
        lw.emit(tt.OrOp("b32", w, w, x))
