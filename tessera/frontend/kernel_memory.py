"""Memory references of the kernel front end: tensors, shared buffers and their views.

A :class:`Ref` is a memref (a kernel argument in global memory or a
``ttile.alloc_shared`` buffer) seen through a rectangular window: for each
dim of the memref an offset and an extent (``None`` for a dim fixed by
indexing). ``A[i, j]`` on a full window is an element; ``A[r]`` of a 2-D
tensor is the row view; ``A[0:BM, k:k+BK]`` is a BM x BK window. Windows
never copy; element accesses add the offsets.

Tile-level data movement is expanded here into per-lane ``ttile`` ops, the
lanes of a tile sharing the work:

* :func:`copy_async` (``cp_async(dst, src)``): chunks of 16, 8 or 4 bytes with
  ``ttile.copy_async`` when the window's rows allow it (checked at run time for
  dynamic sizes), else masked ``ttile.load`` / ``ttile.store``; reads past the
  end of the source give zeros.
* :func:`mma_accumulate` (``C += tile.mma(a, b)``): m16n8k16 ``ttile.mma`` over
  warps for bf16/f16 windows with M % 16 == 0, N % 8 == 0, K % 16 == 0 and a
  group size that is a multiple of 32, else an f32 multiply-add loop; stores
  past the end of the destination are masked off.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from xdsl.dialects import vector
from xdsl.dialects.builtin import MemRefType, VectorType, f32
from xdsl.ir import Attribute, SSAValue

from tessera.frontend.kernel_emit import Emitter
from tessera.frontend.kernel_values import (
    INDEX,
    KernelTypeError,
    Scalar,
    is_py_number,
)
from tessera.ir import tile as ttile

IntLike = int | Scalar


@dataclass(frozen=True)
class Ref:
    """A window onto a memref: per memref dim an offset and an extent (None = indexed)."""

    base: SSAValue
    sizes: tuple[IntLike, ...]
    offsets: tuple[IntLike, ...]
    extents: tuple[IntLike | None, ...]
    name: str
    writable: bool

    @staticmethod
    def whole(base: SSAValue, sizes: tuple[IntLike, ...], name: str, writable: bool) -> Ref:
        return Ref(base, sizes, (0,) * len(sizes), tuple(sizes), name, writable)

    @property
    def memref_type(self) -> MemRefType:
        t = self.base.type
        assert isinstance(t, MemRefType)
        return t

    @property
    def element_type(self) -> Attribute:
        return self.memref_type.element_type

    @property
    def shared(self) -> bool:
        return ttile.is_shared(self.memref_type)

    @property
    def view_dims(self) -> list[int]:
        """The memref dims that the window still spans, in order."""
        return [d for d, e in enumerate(self.extents) if e is not None]

    @property
    def shape(self) -> tuple[IntLike, ...]:
        return tuple(e for e in self.extents if e is not None)

    def static_shape(self) -> tuple[int, ...] | None:
        s = self.shape
        return tuple(int(x) for x in s) if all(isinstance(x, int) for x in s) else None


def is_slot_view(r: Ref) -> bool:
    """A window that fixes the leading (stage) dim of a stacked shared buffer."""
    return r.shared and len(r.extents) > 1 and r.extents[0] is None and all(
        isinstance(o, int) and o == 0 for o in r.offsets[1:]
    ) and tuple(r.extents[1:]) == tuple(r.sizes[1:])


_RETARGETABLE = (ttile.LoadOp, ttile.StoreOp, ttile.LoadVectorOp, ttile.StoreVectorOp)


def restack_shared(em: Emitter, allocs: list[Any]) -> SSAValue | None:
    """Replace equal ``ttile.alloc_shared`` ops by one buffer with a leading stage dim,
    rewriting their existing accesses to index stage j. None if some use cannot be
    rewritten (the caller keeps the separate buffers)."""
    for a in allocs:
        for use in a.results[0].uses:
            op = use.operation
            ok = isinstance(op, _RETARGETABLE) and op.ref is a.results[0]
            ok = ok or (isinstance(op, ttile.CopyAsyncOp) and op.dst is a.results[0]
                        and op.src is not a.results[0])
            if not ok:
                return None
    first = allocs[0]
    t = first.result.type
    sw = first.swizzle.data if first.swizzle else None
    al = first.alignment.value.data if first.alignment else None
    new = ttile.AllocSharedOp((len(allocs), *t.get_shape()), t.element_type, sw, al)
    block = first.parent_block()
    earliest = next(op for op in block.ops if op in allocs)
    block.insert_op_before(new, earliest)
    stacked = new.results[0]
    for j, a in enumerate(allocs):
        for use in list(a.results[0].uses):
            op = use.operation
            from xdsl.dialects import arith
            from xdsl.dialects.builtin import IntegerAttr

            c = arith.ConstantOp(IntegerAttr(j, INDEX), INDEX)
            op.parent_block().insert_op_before(c, op)
            if isinstance(op, ttile.CopyAsyncOp):
                rep: Any = ttile.CopyAsyncOp(
                    stacked, [c.result, *op.dst_indices], op.src, list(op.src_indices),
                    op.elems.value.data, op.valid,
                )
            elif isinstance(op, ttile.LoadOp):
                rep = ttile.LoadOp(stacked, [c.result, *op.indices], op.mask, op.other)
            elif isinstance(op, ttile.StoreOp):
                rep = ttile.StoreOp(op.value, stacked, [c.result, *op.indices], op.mask)
            elif isinstance(op, ttile.LoadVectorOp):
                rep = ttile.LoadVectorOp(stacked, [c.result, *op.indices], op.width, op.mask)
            else:
                rep = ttile.StoreVectorOp(op.value, stacked, [c.result, *op.indices], op.mask)
            op.parent_block().insert_op_before(rep, op)
            for old, r in zip(op.results, rep.results):
                old.replace_by(r)
            op.detach()
            op.erase()
    return stacked


@dataclass(frozen=True)
class SliceSpec:
    """``start:start+extent`` in one dim of a window (extent static or dynamic)."""

    start: Any
    extent: IntLike | None


def add(em: Emitter, a: Any, b: Any) -> IntLike:
    """Index addition with constant folding."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if isinstance(a, int) and a == 0:
        return em.index(b)
    if isinstance(b, int) and b == 0:
        return em.index(a)
    return em.binary("+", em.index(a), em.index(b))


def subscript(em: Emitter, ref: Ref, items: list[Any]) -> Ref:
    """The window ``ref[items]``; items are index values or :class:`SliceSpec`."""
    dims = ref.view_dims
    if len(items) > len(dims):
        raise KernelTypeError(
            f"too many indices for '{ref.name}': it has {len(dims)} dims, got {len(items)}"
        )
    offsets, extents = list(ref.offsets), list(ref.extents)
    for d, item in zip(dims, items):
        if isinstance(item, SliceSpec):
            start = 0 if item.start is None else item.start
            offsets[d] = add(em, offsets[d], start)
            extent = item.extent
            if extent is None:
                full = ref.extents[d]
                assert full is not None
                extent = full - start if isinstance(full, int) and isinstance(start, int) else (
                    em.binary("-", em.index(full), em.index(start))
                )
            extents[d] = extent
        else:
            if not (isinstance(item, Scalar) or (is_py_number(item) and isinstance(item, int))):
                raise KernelTypeError(f"an index of '{ref.name}' must be an integer")
            if isinstance(item, Scalar) and not isinstance(item.type, type(INDEX)):
                if not _is_intlike(item):
                    raise KernelTypeError(
                        f"an index of '{ref.name}' must be an integer, got {item.type}"
                    )
            offsets[d] = add(em, offsets[d], item)
            extents[d] = None
    return replace(ref, offsets=tuple(offsets), extents=tuple(extents))


def _is_intlike(v: Scalar) -> bool:
    from tessera.frontend.kernel_values import is_int

    return is_int(v.type)


def element_indices(em: Emitter, ref: Ref) -> list[SSAValue]:
    """The memref indices of a window that is a single element."""
    if ref.view_dims:
        raise KernelTypeError(
            f"'{ref.name}' is indexed with {len(ref.sizes) - len(ref.view_dims)} of "
            f"{len(ref.sizes)} indices; an element needs all of them"
        )
    return [em.index(o).ssa for o in ref.offsets]


def load(em: Emitter, ref: Ref, mask: Scalar | None = None, other: Any = None) -> Scalar:
    idx = element_indices(em, ref)
    oth = None
    if other is not None:
        oth = em.materialize(other, ref.element_type).ssa
    op = em.emit(ttile.LoadOp(ref.base, idx, mask.ssa if mask else None, oth))
    return Scalar(op.results[0])


def store(em: Emitter, ref: Ref, value: Any, mask: Scalar | None = None) -> None:
    if not ref.writable:
        raise KernelTypeError(
            f"cannot write to '{ref.name}': the argument is read-only "
            "(declare it mut, e.g. 'y: mut[f32[n]]')"
        )
    idx = element_indices(em, ref)
    v = em.materialize(value, ref.element_type)
    em.emit(ttile.StoreOp(v.ssa, ref.base, idx, mask.ssa if mask else None))


def vector_start(em: Emitter, ref: Ref) -> list[SSAValue]:
    """Memref indices of the first element of a window (for vector accesses)."""
    return [em.index(o).ssa for o in ref.offsets]


def load_vector(em: Emitter, ref: Ref, width: int, mask: Scalar | None = None) -> SSAValue:
    op = em.emit(
        ttile.LoadVectorOp(ref.base, vector_start(em, ref), width, mask.ssa if mask else None)
    )
    return op.results[0]


def store_vector(em: Emitter, ref: Ref, value: SSAValue, mask: Scalar | None = None) -> None:
    if not ref.writable:
        raise KernelTypeError(f"cannot write to '{ref.name}': the argument is read-only")
    em.emit(ttile.StoreVectorOp(value, ref.base, vector_start(em, ref), mask.ssa if mask else None))


# ------------------------------------------------------------------------ window iteration


def _split(em: Emitter, q: Scalar, shape: tuple[int, ...]) -> list[Scalar]:
    """Row-major multi-index of the flat position ``q`` in ``shape``."""
    out: list[Scalar] = []
    rest = q
    for k in range(len(shape) - 1, 0, -1):
        out.append(em.div_nonneg("%", rest, shape[k]))
        rest = em.div_nonneg("//", rest, shape[k])
    out.append(rest)
    return list(reversed(out))


def _at(em: Emitter, ref: Ref, view_idx: list[Any]) -> tuple[list[SSAValue], Scalar | None]:
    """Memref indices of window position ``view_idx`` and an in-bounds condition
    (None when statically in bounds)."""
    offsets = list(ref.offsets)
    cond: Scalar | None = None
    for d, i in zip(ref.view_dims, view_idx):
        offsets[d] = add(em, offsets[d], i)
    for d in range(len(offsets)):
        o, s = offsets[d], ref.sizes[d]
        if isinstance(o, int) and isinstance(s, int) and o < s:
            continue
        ok = em.compare("<", em.index(o), em.index(s))
        cond = ok if cond is None else em.binary("&", cond, ok)
    return [em.index(o).ssa for o in offsets], cond


def _safe(em: Emitter, idx: list[SSAValue], cond: Scalar | None) -> list[SSAValue]:
    """Indices clamped to 0 where ``cond`` is false, so no lane forms a wild address."""
    if cond is None:
        return idx
    zero = em.index(0)
    return [em.select(cond, Scalar(i), zero).ssa for i in idx]


def _static_shape(ref: Ref, what: str) -> tuple[int, ...]:
    s = ref.static_shape()
    if s is None:
        raise KernelTypeError(
            f"{what}: the window of '{ref.name}' needs a static shape (e.g. A[i:i+64]); "
            f"got {[str(x) if isinstance(x, int) else '?' for x in ref.shape]}"
        )
    return s


def copy_sync(em: Emitter, dst: Ref, src: Ref, shape: tuple[int, ...]) -> None:
    """Element-wise copy ``dst <- src`` shared by the lanes; zeros past the source's end."""
    total = 1
    for s in shape:
        total *= s

    def body(q: Scalar) -> None:
        pos = _split(em, q, shape)
        sidx, scond = _at(em, src, pos)
        didx, dcond = _at(em, dst, pos)
        v = em.emit(ttile.LoadOp(src.base, _safe(em, sidx, scond), scond.ssa if scond else None))
        em.emit(
            ttile.StoreOp(v.results[0], dst.base, _safe(em, didx, dcond), dcond.ssa if dcond else None)
        )

    em.strided_lanes(total, body)


def copy_async(em: Emitter, dst: Ref, src: Ref) -> None:
    """``cp_async(dst, src)``: global -> shared copy of a window, shared by the lanes."""
    if not dst.shared:
        raise KernelTypeError(f"cp_async: the destination '{dst.name}' must be shared memory")
    if src.shared:
        raise KernelTypeError(f"cp_async: the source '{src.name}' must be a global tensor")
    if dst.element_type != src.element_type:
        raise KernelTypeError(
            f"cp_async: element types differ: '{dst.name}' is {dst.element_type}, "
            f"'{src.name}' is {src.element_type}"
        )
    dshape = _static_shape(dst, "cp_async")
    sshape = src.static_shape()
    if sshape is not None and _squeeze(sshape) != _squeeze(dshape):
        raise KernelTypeError(
            f"cp_async: '{dst.name}' has shape {list(dshape)} but the source window of "
            f"'{src.name}' has shape {list(sshape)}"
        )
    src = _reshape_like(src, dshape)
    dst = replace(dst, writable=True)
    ebytes = ttile.element_bytes(dst.element_type)
    width = dshape[-1] if dshape else 1
    chunk = next(
        (c // ebytes for c in (16, 8, 4) if c % ebytes == 0 and width % (c // ebytes) == 0),
        None,
    )
    dst_ok = chunk is not None and _aligned_static(dst, chunk * ebytes)
    if chunk is None or not dst_ok or dst.base.type.get_num_dims() < 1:
        copy_sync(em, dst, src, dshape)
        return
    cond = _aligned_runtime(em, src, chunk * ebytes)

    def do_async() -> None:
        _copy_chunks(em, dst, src, dshape, chunk)

    if cond is None:
        do_async()
    elif isinstance(cond, bool):
        do_async() if cond else copy_sync(em, dst, src, dshape)
    else:
        em.if_then(cond, do_async, lambda: copy_sync(em, dst, src, dshape))


def _squeeze(s: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(x for x in s if x != 1)


def _reshape_like(src: Ref, shape: tuple[int, ...]) -> Ref:
    """A source window of the destination's rank (drops or keeps size-1 dims)."""
    if len(src.view_dims) == len(shape):
        return src
    if len(src.view_dims) < len(shape):
        raise KernelTypeError(
            f"cp_async: the window of '{src.name}' has rank {len(src.view_dims)}, the "
            f"destination rank {len(shape)}"
        )
    extents = list(src.extents)
    drop = len(src.view_dims) - len(shape)
    for d in src.view_dims:
        if drop and extents[d] == 1:
            extents[d] = None
            drop -= 1
    return replace(src, extents=tuple(extents))


def _aligned_static(dst: Ref, nbytes: int) -> bool:
    ebytes = ttile.element_bytes(dst.element_type)
    row = dst.sizes[-1]
    off = dst.offsets[-1]
    return (
        isinstance(row, int) and (row * ebytes) % nbytes == 0
        and isinstance(off, int) and (off * ebytes) % nbytes == 0
    )


def _aligned_runtime(em: Emitter, src: Ref, nbytes: int) -> Scalar | bool | None:
    """Condition that every chunk of ``src`` starts at a multiple of ``nbytes``."""
    ebytes = ttile.element_bytes(src.element_type)
    per = nbytes // ebytes
    conds: list[Any] = []
    if len(src.sizes) >= 2:
        conds.append(src.sizes[-1])
    conds.append(src.offsets[-1])
    result: Scalar | None = None
    for c in conds:
        if isinstance(c, int):
            if c % per:
                return False
            continue
        ok = em.compare("==", em.div_nonneg("%", c, per), 0)
        result = ok if result is None else em.binary("&", result, ok)
    return result


def _copy_chunks(em: Emitter, dst: Ref, src: Ref, shape: tuple[int, ...], chunk: int) -> None:
    per_row = shape[-1] // chunk
    rows = 1
    for s in shape[:-1]:
        rows *= s
    last_src_dim = src.view_dims[-1]

    def body(q: Scalar) -> None:
        pos = _split(em, q, (*shape[:-1], per_row))
        pos[-1] = em.binary("*", pos[-1], chunk)
        didx, _ = _at(em, dst, pos)
        sidx, _ = _at(em, src, pos)
        # valid = clamp(size - col, 0, chunk), 0 for rows past the end
        offsets = list(src.offsets)
        for d, i in zip(src.view_dims, pos):
            offsets[d] = add(em, offsets[d], i)
        valid: Any = None
        row_ok: Scalar | None = None
        for d in range(len(offsets)):
            if d == last_src_dim:
                continue
            o, s = offsets[d], src.sizes[d]
            if isinstance(o, int) and isinstance(s, int) and o < s:
                continue
            ok = em.compare("<", em.index(o), em.index(s))
            row_ok = ok if row_ok is None else em.binary("&", row_ok, ok)
        col, size = offsets[last_src_dim], src.sizes[last_src_dim]
        if not (isinstance(col, int) and isinstance(size, int) and col + chunk <= size):
            left = em.binary("-", em.index(size), em.index(col))
            valid = em.minmax("max", em.minmax("min", left, chunk), 0)
        if row_ok is not None:
            valid = em.select(row_ok, chunk if valid is None else valid, 0)
        safe_cond = None if valid is None else em.compare(">", valid, 0)
        sidx = _safe(em, sidx, safe_cond)
        em.emit(
            ttile.CopyAsyncOp(
                dst.base, didx, src.base, sidx, chunk,
                None if valid is None else em.index(valid).ssa,
            )
        )

    em.strided_lanes(rows * per_row, body)


# ------------------------------------------------------------------------------- mma


@dataclass(frozen=True)
class MmaProduct:
    """The value of ``tile.mma(a, b)``: the M x N product of two windows, not yet stored."""

    a: Ref
    b: Ref
    accum: Attribute


def mma_product(a: Ref, b: Ref, accum: Attribute = f32) -> MmaProduct:
    sa, sb = _static_shape(a, "tile.mma"), _static_shape(b, "tile.mma")
    if len(sa) != 2 or len(sb) != 2:
        raise KernelTypeError(
            f"tile.mma: operands must be 2-D windows, got '{a.name}' {list(sa)} and "
            f"'{b.name}' {list(sb)}"
        )
    if sa[1] != sb[0]:
        raise KernelTypeError(
            f"tile.mma: inner dimensions differ: '{a.name}' is {sa[0]}x{sa[1]}, "
            f"'{b.name}' is {sb[0]}x{sb[1]}"
        )
    if a.element_type != b.element_type:
        raise KernelTypeError(
            f"tile.mma: element types differ: {a.element_type} and {b.element_type}"
        )
    if accum != f32:
        raise KernelTypeError(f"tile.mma: accum must be f32, got {accum}")
    return MmaProduct(a, b, accum)


def _tensor_core_ok(em: Emitter, p: MmaProduct) -> bool:
    from xdsl.dialects.builtin import BFloat16Type, Float16Type

    (m, k), (_, n) = p.a.static_shape() or (0, 0), p.b.static_shape() or (0, 0)
    return (
        isinstance(p.a.element_type, BFloat16Type | Float16Type)
        and m % 16 == 0 and n % 8 == 0 and k % 16 == 0
        and em.group_size % ttile.WARP_SIZE == 0
    )


def mma_accumulate(em: Emitter, dst: Ref, p: MmaProduct, accumulate: bool) -> None:
    """``dst (+)= a @ b`` for the M x N window ``dst`` (stores past its end are dropped)."""
    if not dst.writable:
        raise KernelTypeError(f"cannot write to '{dst.name}': the argument is read-only")
    (m, k), (_, n) = _static_shape(p.a, "tile.mma"), _static_shape(p.b, "tile.mma")
    dshape = dst.static_shape()
    if dshape is None or len(dshape) != 2:
        dst = _window(em, dst, m, n)
    elif dshape[0] < m or dshape[1] < n:
        raise KernelTypeError(
            f"tile.mma: the product is {m}x{n} but '{dst.name}' is {dshape[0]}x{dshape[1]}"
        )

    def put(r: Any, c: Any, value: Scalar) -> None:
        idx, cond = _at(em, dst, [r, c])
        idx = _safe(em, idx, cond)
        mask = cond.ssa if cond else None
        v = value
        if accumulate:
            old = Scalar(em.emit(ttile.LoadOp(dst.base, idx, mask)).results[0])
            v = em.binary("+", em.cast(old, f32), value)
        em.emit(ttile.StoreOp(em.cast(v, dst.element_type).ssa, dst.base, idx, mask))

    if _tensor_core_ok(em, p):
        _mma_tensor_core(em, p, m, n, k, put)
    else:
        _mma_fma(em, p, m, n, k, put)


def _window(em: Emitter, dst: Ref, m: int, n: int) -> Ref:
    """The top-left m x n window of a 2-D ``dst`` (``C += tile.mma(...)`` on a whole tensor)."""
    if len(dst.view_dims) != 2:
        raise KernelTypeError(f"tile.mma: '{dst.name}' must be 2-D")
    extents = list(dst.extents)
    d0, d1 = dst.view_dims
    extents[d0], extents[d1] = m, n
    return replace(dst, extents=tuple(extents))


def _elem(em: Emitter, ref: Ref, r: Any, c: Any) -> Scalar:
    idx, cond = _at(em, ref, [r, c])
    idx = _safe(em, idx, cond)
    return Scalar(em.emit(ttile.LoadOp(ref.base, idx, cond.ssa if cond else None)).results[0])


def _mma_fma(em: Emitter, p: MmaProduct, m: int, n: int, k: int, put: Any) -> None:
    def body(q: Scalar) -> None:
        r, c = em.div_nonneg("//", q, n), em.div_nonneg("%", q, n)

        def step(kk: Scalar, acc: list[Scalar]) -> list[Scalar]:
            x = em.cast(_elem(em, p.a, r, kk), f32)
            y = em.cast(_elem(em, p.b, kk, c), f32)
            return [em.binary("+", acc[0], em.binary("*", x, y))]

        (total,) = em.for_loop(0, k, 1, [em.const(0.0, f32)], step)
        put(r, c, total)

    em.strided_lanes(m * n, body)


def _mma_tensor_core(em: Emitter, p: MmaProduct, m: int, n: int, k: int, put: Any) -> None:
    et = p.a.element_type
    lane = em.lane("lane_id")
    g = em.div_nonneg("//", lane, 4)
    t = em.div_nonneg("%", lane, 4)
    tiles_n = n // ttile.MMA_N
    n_tiles = (m // ttile.MMA_M) * tiles_n
    warps = em.group_size // ttile.WARP_SIZE

    def zero_vec(elem: Attribute, width: int) -> SSAValue:
        z = em.const(0.0, elem)
        return em.emit(vector.BroadcastOp(z.ssa, VectorType(elem, [width]))).results[0]

    def frag_tile(tid: Scalar, _: list[Scalar]) -> list[Scalar]:
        mi = em.binary("*", em.div_nonneg("//", tid, tiles_n), ttile.MMA_M)
        ni = em.binary("*", em.div_nonneg("%", tid, tiles_n), ttile.MMA_N)

        def kstep(kk: Scalar, acc: list[Scalar]) -> list[Scalar]:
            a = zero_vec(et, 8)
            for i in range(8):
                row = em.binary("+", g, 8 * ((i >> 1) & 1))
                col = em.binary("+", em.binary("*", t, 2), (i & 1) + 8 * (i >> 2))
                v = _elem(em, p.a, em.binary("+", mi, row), em.binary("+", kk, col))
                a = em.emit(vector.InsertOp(v.ssa, a, [i])).results[0]
            b = zero_vec(et, 4)
            for i in range(4):
                kr = em.binary("+", em.binary("*", t, 2), (i & 1) + 8 * (i >> 1))
                v = _elem(em, p.b, em.binary("+", kk, kr), em.binary("+", ni, g))
                b = em.emit(vector.InsertOp(v.ssa, b, [i])).results[0]
            d = em.emit(ttile.MmaOp(a, b, acc[0].ssa)).results[0]
            return [Scalar(d)]

        (acc,) = em.for_loop(0, k, ttile.MMA_K, [Scalar(zero_vec(f32, 4))], kstep)
        for i in range(4):
            val = Scalar(em.emit(vector.ExtractOp(acc.ssa, [i], f32)).results[0])
            r = em.binary("+", mi, em.binary("+", g, 8 * (i >> 1)))
            c = em.binary("+", ni, em.binary("+", em.binary("*", t, 2), i & 1))
            put(r, c, val)
        return []

    em.for_loop(em.lane("warp_id"), n_tiles, warps, [], frag_tile)
