"""Tile IR lowerings of the data-movement ops: reshape, transpose, slice, concat, broadcast.

* ``tgraph.reshape`` launches nothing: every buffer is a dense row-major memref, so a
  reshape is a view of its input's buffer, built on the host with xDSL's upstream
  ``memref.collapse_shape`` / ``memref.expand_shape`` (:func:`reshape_groups` splits
  the two shapes into groups of equal size; a group of input dims is collapsed into
  one dim and expanded into its output dims). The GPU runtime makes it a torch
  ``view``, the tile interpreter a numpy ``reshape`` (a view). A result returned to the
  caller never shares memory with an argument, a constant or another result: the
  lowering copies it then (``_FunctionLowering.run``, via :func:`alias_root`).
* ``tgraph.transpose`` that keeps the last dim, ``tgraph.slice`` with a unit step on
  the last dim, ``tgraph.concat``, ``tgraph.broadcast`` and the copies of returned
  views are one :func:`vector_copy` kernel: each lane moves ``UNROLL`` vectors of up
  to 16 bytes along the contiguous last dim (all loads before the stores), lanes of a
  warp consecutive vectors, so both sides are coalesced 16-byte accesses. Shapes whose
  last dim (or slice start / concat offset on it) is not a multiple of the vector
  width fall back to narrower vectors, down to one element. A broadcast along the
  last dim loads one element per vector and splats it. Index arithmetic is 32-bit;
  tensors of ``2**31`` vectors or more spread their leading dims over grid y and z.
* ``tgraph.transpose`` that moves the last dim is :func:`tiled_transpose`: a tile of
  ``TILE x TILE`` elements (:func:`transpose_tile`: 64 for 2-byte types, else 32) is
  read along the input's last dim into shared memory (rows padded by one element
  against bank conflicts), then written along the output's last dim; ``TILE_GROUP``
  lanes, ``TILE * TILE / TILE_GROUP`` elements per lane each way. Ragged tiles are
  masked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import TYPE_CHECKING, Any

from xdsl.dialects import arith, memref, vector
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    IndexType,
    IntegerAttr,
    MemRefType,
    VectorType,
    i32,
    i64,
)
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

VECTOR_BYTES = 16
"""Widest access of one lane: ``ld.global.v4.b32``."""
COPY_GROUP = 256
UNROLL = 4
"""Vectors moved by one lane of :func:`vector_copy`."""
TILE_GROUP = 256


def transpose_tile(et: Attribute) -> int:
    """The side of :func:`tiled_transpose`'s tile: 64 elements for 1- and 2-byte types
    (a warp's row is 128 bytes), else 32."""
    return 64 if elem_bytes(et) in (1, 2) else 32


SrcIndex = Callable[[KernelEmitter, list[Idx]], list[Idx]]
"""The input index of an output element's index (both as lists of dims)."""


# --------------------------------------------------------------------------- reshape as a view


def reshape_groups(
    src: Sequence[int], dst: Sequence[int]
) -> tuple[list[list[int]], list[list[int]]]:
    """Group the dims of ``src`` and ``dst`` (same element count, > 0) into consecutive
    runs of equal products: the ``k``-th run of ``src`` holds the elements of the
    ``k``-th run of ``dst``. Size-1 dims left over at the end join the last run; a
    rank-0 side gives no runs (its partner is all ones)."""
    if prod(src) != prod(dst) or prod(src) == 0:
        raise ValueError(f"reshape_groups: {list(src)} and {list(dst)} differ in size or are empty")
    if not src or not dst:
        return [], []
    gs: list[list[int]] = []
    gd: list[list[int]] = []
    i = j = 0
    while i < len(src) and j < len(dst):
        a, b = [i], [j]
        pa, pb = src[i], dst[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                a.append(i)
                pa *= src[i]
                i += 1
            else:
                b.append(j)
                pb *= dst[j]
                j += 1
        gs.append(a)
        gd.append(b)
    gs[-1].extend(range(i, len(src)))  # trailing size-1 dims
    gd[-1].extend(range(j, len(dst)))
    return gs, gd


def _reassociation(groups: list[list[int]]) -> ArrayAttr:
    return ArrayAttr([ArrayAttr([IntegerAttr(d, i64) for d in grp]) for grp in groups])


def reshape_view(fl: _FunctionLowering, src: SSAValue, dst_type: MemRefType) -> SSAValue:
    """A host value viewing buffer ``src`` (a dense memref) with ``dst_type``'s shape:
    ``memref.collapse_shape`` and/or ``memref.expand_shape`` (neither when the shapes
    are equal)."""
    st = src.type
    assert isinstance(st, MemRefType)
    s, d = list(st.get_shape()), list(dst_type.get_shape())
    if s == d:
        return src
    gs, gd = reshape_groups(s, d)
    mid = [prod(s[k] for k in grp) for grp in gs]
    v = src
    if mid != s:
        v = fl.host_op(memref.CollapseShapeOp(
            operands=[v], result_types=[MemRefType(st.element_type, mid)],
            properties={"reassociation": _reassociation(gs)},
        ))
    if mid != d:
        v = fl.host_op(memref.ExpandShapeOp(
            operands=[v, []], result_types=[MemRefType(st.element_type, d)],
            properties={"reassociation": _reassociation(gd),
                        "static_output_shape": DenseArrayBase.from_list(i64, d)},
        ))
    return v


def alias_root(v: SSAValue) -> SSAValue:
    """The buffer a host value views (through collapse/expand shapes), or ``v``."""
    while isinstance(v.owner, memref.CollapseShapeOp | memref.ExpandShapeOp):
        v = v.owner.operands[0]
    return v


def lower_reshape(fl: _FunctionLowering, op: g.ReshapeOp) -> None:
    """``tgraph.reshape``: a view of the input's buffer (no kernel); an empty tensor gets
    its own (empty) buffer."""
    rt = op.result.type
    if prod(g.shape_of(op.result)) == 0:
        fl.env[op.result] = fl.alloc(rt)
        return
    from tessera.passes.lower_graph_to_tile import memref_of

    mt = memref_of(rt)
    assert isinstance(mt, MemRefType)
    fl.env[op.result] = reshape_view(fl, fl.mem(op.input), mt)


# --------------------------------------------------------------------------- vector copies


def elem_bytes(t: Attribute) -> int:
    """Bytes of one element for vector accesses (0: element by element)."""
    from tessera.passes.lower_graph_to_tile import _elem_bytes

    return _elem_bytes(t)


def vector_width(et: Attribute, *extents: int) -> int:
    """The widest power-of-two element count of at most 16 bytes dividing every one of
    ``extents`` (last-dim sizes and offsets that vectors must stay aligned to)."""
    eb = elem_bytes(et)
    if eb == 0:
        return 1
    w = VECTOR_BYTES // eb
    while w > 1 and any(x % w for x in extents):
        w //= 2
    return w


GRID_YZ = 65535
"""The largest grid extent along y and z."""
INDEX_LIMIT = 2**31
"""Linear indices of a 32-bit index space stay below this."""


def i32_split(vshape: Sequence[int], per_tile: int) -> tuple[int, int, int] | None:
    """How :func:`vector_copy` indexes ``vshape`` (vectors) in 32-bit arithmetic:
    ``(s, gy, gz)``, the dims ``vshape[s:]`` along grid x (``per_tile`` vectors a tile,
    their linear index below ``2**31``) and ``vshape[:s]`` along grid y and z
    (``gy * gz`` tiles covering their product; ``s = 0``: one-dimensional grid). None
    when no suffix of the dims fits (a last dim of ``2**31`` vectors): 64-bit indices."""
    for s in range(len(vshape)):
        inner, outer = prod(vshape[s:]), prod(vshape[:s])
        if cdiv(inner, per_tile) * per_tile >= INDEX_LIMIT:
            continue
        if outer > GRID_YZ * GRID_YZ or outer >= INDEX_LIMIT:
            return None
        gy = min(outer, GRID_YZ)
        return s, gy, cdiv(outer, gy)
    return None


def vector_copy(
    fl: _FunctionLowering, tag: str, out: SSAValue, shape: Sequence[int], src: SSAValue,
    src_index: SrcIndex, width: int, out_index: SrcIndex | None = None, splat: bool = False,
) -> None:
    """One kernel: ``out[out_index(i)] = src[src_index(i)]`` for every index ``i`` of
    ``shape``; ``width`` consecutive elements of the last dim (a multiple of ``width``,
    as must be the last-dim offsets both index maps add) move as one vector, each lane
    moves ``UNROLL`` vectors ``COPY_GROUP`` apart. ``splat``: the source holds one element
    for each vector (a broadcast along the last dim), loaded once and repeated.

    Indices are 32-bit (a division by a constant is a multiply-high and a shift, a
    64-bit one an emulated sequence many times longer): tensors of ``2**31`` vectors or
    more put their leading dims on grid y and z (:func:`i32_split`)."""
    n = prod(shape)
    if n == 0:
        return
    w = width
    vshape = [*shape[:-1], shape[-1] // w] if shape else [1]
    per_tile = COPY_GROUP * UNROLL
    split = i32_split(vshape, per_tile)
    s_dim, gy, gz = split if split is not None else (0, 1, 1)
    outer, inner = vshape[:s_dim], vshape[s_dim:]
    n_in, n_out = prod(inner), prod(outer)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o, s = args
        ix = I32Index(e) if split is not None else None
        oidx: list[Idx] = []
        o_ok: SSAValue | None = None
        if ix is not None:
            base: Idx = ix.add(ix.mul(ix.of(e.tile_id("x")), per_tile), ix.of(e.local_id()))
            if outer:
                t: Idx = ix.of(e.tile_id("y"))
                if gz > 1:
                    t = ix.add(ix.mul(ix.of(e.tile_id("z")), gy), t)
                if gy * gz != n_out:
                    o_ok = ix.lt(t, n_out)
                oidx = [ix.to_index(i) for i in ix.unravel(t, outer)]
        else:
            base = e.add(e.mul(e.tile_id("x"), per_tile), e.local_id())
        items: list[tuple[SSAValue, list[Idx], SSAValue]] = []
        for k in range(UNROLL):
            if ix is not None:  # 32-bit division by constants: a few instructions
                v = ix.add(base, k * COPY_GROUP)
                ok = ix.lt(v, n_in)
                if o_ok is not None:
                    ok = e.and_(ok, o_ok)
                idx = [*oidx, *(ix.to_index(i) for i in ix.unravel(v, inner))]
            else:
                v = e.add(base, k * COPY_GROUP)
                ok = e.lt(v, n_in)
                idx = e.unravel(v, vshape)
            if shape:
                idx = [*idx[:-1], e.mul(idx[-1], w)]
            else:
                idx = []
            si = [e.index(i) for i in src_index(e, idx)]
            if w > 1 and splat:
                et = s.type.element_type  # type: ignore[attr-defined]
                val = e.op(vector.BroadcastOp(e.load(s, si, mask=ok), VectorType(et, [w])))
            elif w > 1:
                val = e.op(tt.LoadVectorOp(s, si, w, ok))
            else:
                val = e.load(s, si, mask=ok)
            items.append((val, idx, ok))
        for val, idx, ok in items:
            oi = [e.index(i) for i in (out_index(e, idx) if out_index else idx)]
            if w > 1:
                e.emit(tt.StoreVectorOp(val, o, oi, ok))
            else:
                e.store(val, o, oi, mask=ok)

    grid = [cdiv(n_in, per_tile), gy, gz] if split is not None else [cdiv(n_in, per_tile), 1, 1]
    fl.kernel(tag, [out, src], COPY_GROUP, grid, build)


class I32Index:
    """Index arithmetic in ``i32`` (for linear indices below ``2**31``): PTX divides a
    32-bit value by a constant in a multiply-high and a shift, a 64-bit one in an
    emulated sequence several times longer."""

    def __init__(self, e: KernelEmitter):
        self.e = e

    def of(self, v: SSAValue) -> SSAValue:
        return self.e.op(arith.IndexCastOp(v, i32))

    def to_index(self, v: Idx) -> Idx:
        return v if isinstance(v, int) else self.e.op(arith.IndexCastOp(v, IndexType()))

    def _c(self, v: Idx) -> SSAValue:
        return self.e.const(v, i32) if isinstance(v, int) else v

    def add(self, a: Idx, b: Idx) -> Idx:
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if b == 0:
            return a
        return self.e.op(arith.AddiOp(self._c(a), self._c(b)))

    def mul(self, a: Idx, b: int) -> Idx:
        if isinstance(a, int):
            return a * b
        return a if b == 1 else self.e.op(arith.MuliOp(a, self._c(b)))

    def lt(self, a: Idx, b: int) -> SSAValue:
        return self.e.op(arith.CmpiOp(self._c(a), self._c(b), "ult"))

    def unravel(self, lin: Idx, shape: Sequence[int]) -> list[Idx]:
        """Row-major multi-index of ``lin`` in ``shape`` (the first dim unbounded)."""
        out: list[Idx] = []
        for k in range(len(shape) - 1, 0, -1):
            d = shape[k]
            if d == 1:
                out.append(0)
            elif isinstance(lin, int):
                out.append(lin % d)
                lin //= d
            else:
                out.append(self.e.op(arith.RemUIOp(lin, self._c(d))))
                lin = self.e.op(arith.DivUIOp(lin, self._c(d)))
        out.append(lin if shape and shape[0] != 1 else 0)
        return list(reversed(out))


def copy_buffer(fl: _FunctionLowering, t: Attribute, m: SSAValue) -> SSAValue:
    """A fresh buffer of tensor type ``t`` holding a copy of buffer ``m``."""
    out = fl.alloc(t)
    mt = m.type
    assert isinstance(mt, MemRefType)
    n = prod(mt.get_shape())
    if n == 0:
        return out
    # both buffers are dense: copy them as flat vectors (views on the host)
    flat = MemRefType(mt.element_type, [n])
    w = vector_width(mt.element_type, n)
    vector_copy(fl, "copy", reshape_view(fl, out, flat), [n], reshape_view(fl, m, flat),
                lambda e, idx: idx, w)
    return out


# --------------------------------------------------------------------------- transpose


def lower_transpose(fl: _FunctionLowering, op: g.TransposeOp) -> None:
    """``tgraph.transpose``: a vector copy when the last dim stays last, else the
    shared-memory tiled transpose. A transpose all of whose users can read its source
    through the permutation (:data:`READS_THROUGH`) is deferred; a lowering of a user
    that does not (``fl.mem``) makes it then."""
    perm = [int(p) for p in op.permutation.get_values()]
    users = [u.operation for u in op.result.uses]
    shape = list(g.shape_of(op.result))
    if users and all(READS_THROUGH.get(type(u), lambda p, s: False)(perm, shape)
                     for u in users):
        fl.defer(op.result, op.input, perm, lambda: _lower_transpose(fl, op))
        return
    _lower_transpose(fl, op)


READS_THROUGH: dict[type, Callable[[Sequence[int], Sequence[int]], bool]] = {
    # a slice composes its index map with a permutation that keeps the last dim (an
    # attention's q, k, v out of a permuted projection): one pass over the data, not two;
    # or with one that interleaves the source's rows (its last dim next to last, a last
    # dim of at most INTERLEAVE elements: a convolution input gradient's stride phases),
    # read an element at a time, each warp's reads a few runs along source rows
    g.SliceOp: lambda perm, shape: perm[-1] == len(perm) - 1 or interleaves(perm, shape),
    # so does a reverse (a convolution's flipped, channel-swapped weight)
    g.ReverseOp: lambda perm, shape: perm[-1] == len(perm) - 1,
    # the implicit-GEMM convolution's layout copies read a batch-channel swap (a weight
    # gradient's operands): tessera.passes.sm90.conv_implicit
    g.Conv2dOp: lambda perm, shape: tuple(perm) == (1, 0, 2, 3),
}
"""The ops whose lowering may read a deferred ``tgraph.transpose``'s source through its
permutation (``fl.peek_transpose``), given the permutation and the transpose's shape."""

INTERLEAVE = 4
"""The longest last dim of a transpose that a slice reads through element by element
(:func:`interleaves`)."""


def interleaves(perm: Sequence[int], shape: Sequence[int]) -> bool:
    """``transpose(x, perm)`` of result ``shape`` puts ``x``'s last dim next to last and a
    last dim of at most :data:`INTERLEAVE` elements after it: ``[.., rows, s, cols, s]``
    from ``[.., s, s, .., rows, cols]``, each output row a few runs of a source row."""
    return len(perm) > 1 and perm[-2] == len(perm) - 1 and shape[-1] <= INTERLEAVE


def collapse_permutation(
    in_shape: Sequence[int], perm: Sequence[int]
) -> tuple[list[int], list[int]]:
    """The same data movement as ``transpose(x, perm)`` of an ``in_shape`` tensor over
    fewer dims: ``(shape, perm)`` of the input viewed with its size-1 dims dropped and
    each run of dims that stays consecutive in the output merged into one
    (``[N, C, H, W] -> [N, H, W, C]`` is ``[N, C, HW] -> [N, HW, C]``)."""
    keep = [d for d in range(len(in_shape)) if in_shape[d] != 1]
    sizes = [in_shape[d] for d in keep]
    order = [keep.index(p) for p in perm if in_shape[p] != 1]  # kept dims, output order
    runs: list[list[int]] = []
    for d in order:
        if runs and d == runs[-1][-1] + 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    by_start = sorted(runs)
    shape = [prod(sizes[d] for d in r) for r in by_start]
    return shape, [by_start.index(r) for r in runs]


def _lower_transpose(fl: _FunctionLowering, op: g.TransposeOp) -> None:
    perm = [int(p) for p in op.permutation.get_values()]
    shape = list(g.shape_of(op.result))
    out = fl.alloc(op.result.type)
    fl.env[op.result] = out
    src = fl.mem(op.input)
    in_shape = list(g.shape_of(op.input))
    if prod(shape) > 0:
        # move the data over the fewest dims: an inner dim of 7 x 7 pixels as 49
        cshape, cperm = collapse_permutation(in_shape, perm)
        if len(cperm) < len(perm):
            et = g.elem_of(op.result)
            src = reshape_view(fl, src, MemRefType(et, cshape or [1]))
            out = reshape_view(fl, out, MemRefType(et, [cshape[p] for p in cperm] or [1]))
            perm, shape = cperm or [0], [cshape[p] for p in cperm] or [1]

    def src_index(e: KernelEmitter, idx: list[Idx]) -> list[Idx]:
        s: list[Idx] = [0] * len(perm)
        for i, p in enumerate(perm):
            s[p] = idx[i]
        return s

    if not shape or perm[-1] == len(perm) - 1 or prod(shape) == 0:
        w = vector_width(g.elem_of(op.result), shape[-1]) if shape else 1
        vector_copy(fl, "transpose", out, shape, src, src_index, w)
        return
    if min(shape[-1], shape[perm.index(len(perm) - 1)]) < NARROW_TRANSPOSE:
        # a tile of TILE x TILE elements would hold a few: one element per lane instead
        # (each warp's reads are a few runs of the source's short rows)
        vector_copy(fl, "transpose", out, shape, src, src_index, 1)
        return
    tiled_transpose(fl, out, shape, src, perm)


NARROW_TRANSPOSE = 8
"""A transpose whose source or result rows are shorter than this copies an element per
lane: the tiled kernel's ``TILE x TILE`` tiles would be mostly empty (a ``[.., 2, 2]``
inner pair took one 256-lane tile per four elements, 8.8 ms for a 4M-element weight on
an H100)."""


def tiled_transpose(
    fl: _FunctionLowering, out: SSAValue, shape: Sequence[int], src: SSAValue,
    perm: Sequence[int],
) -> None:
    """``out[i] = src[i permuted by perm]`` where the output's last dim is not the
    input's: per tile, ``side`` rows of ``side`` input elements along the input's last
    dim (output dim ``j``, ``perm[j] = rank - 1``; ``side`` is :func:`transpose_tile`)
    go through shared memory ``[side][side + 1]`` and leave as ``side`` rows along the
    output's last dim."""
    r = len(shape)
    j = perm.index(r - 1)
    nx, ny = shape[j], shape[-1]  # x: input-contiguous, y: output-contiguous
    batch_dims = [d for d in range(r - 1) if d != j]
    bshape = [shape[d] for d in batch_dims]
    et = out.type.element_type  # type: ignore[attr-defined]
    side = transpose_tile(et)
    tx, ty = cdiv(nx, side), cdiv(ny, side)
    tiles = tx * ty * prod(bshape)
    rows = TILE_GROUP // side

    def full_index(b: list[Idx], x: Idx, y: Idx) -> list[Idx]:
        idx: list[Idx] = [0] * r
        for d, v in zip(batch_dims, b):
            idx[d] = v
        idx[j] = x
        idx[r - 1] = y
        return idx

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o, s = args
        sm = e.op(tt.AllocSharedOp([side * (side + 1)], et))
        t = e.tile_id("x")
        ti = e.unravel(t, [*bshape, ty, tx])
        b, y0, x0 = ti[:-2], e.mul(ti[-2], side), e.mul(ti[-1], side)
        lane = e.local_id()
        c, rr = e.rem(lane, side), e.div(lane, side)
        # read: lanes along x (the input's last dim), rows along y
        for k in range(side // rows):
            yy = e.add(rr, k * rows)
            x, y = e.add(x0, c), e.add(y0, yy)
            ok = e.and_(e.lt(x, nx), e.lt(y, ny))
            src_idx: list[Idx] = [0] * r
            for i, p in enumerate(perm):
                src_idx[p] = full_index(b, x, y)[i]
            v = e.load(s, src_idx, mask=ok)
            e.store(v, sm, [e.add(e.mul(yy, side + 1), c)])
        e.barrier()
        # write: lanes along y (the output's last dim), rows along x
        for k in range(side // rows):
            xx = e.add(rr, k * rows)
            x, y = e.add(x0, xx), e.add(y0, c)
            ok = e.and_(e.lt(x, nx), e.lt(y, ny))
            v = e.load(sm, [e.add(e.mul(c, side + 1), xx)])
            e.store(v, o, full_index(b, x, y), mask=ok)

    fl.kernel("transpose", [out, src], TILE_GROUP, [tiles, 1, 1], build)


# --------------------------------------------------------------------------- slice, concat


def lower_slice(fl: _FunctionLowering, op: g.SliceOp) -> None:
    """``tgraph.slice``: a vector copy (vectors when the last dim's step is 1 and its
    start and both last-dim sizes are multiples of the width)."""
    start = [int(v) for v in op.start.get_values()]
    stride = [int(v) for v in op.stride.get_values()]
    shape = list(g.shape_of(op.result))
    in_shape = list(g.shape_of(op.input))
    out = fl.alloc(op.result.type)
    fl.env[op.result] = out
    w = 1
    if shape and stride[-1] == 1:
        w = vector_width(g.elem_of(op.result), shape[-1], in_shape[-1], start[-1])

    def src_index(e: KernelEmitter, idx: list[Idx]) -> list[Idx]:
        return [e.add(s, e.mul(i, st)) for i, s, st in zip(idx, start, stride)]

    through = fl.peek_transpose(op.input)
    if through is not None:
        source, perm = through
        # the input is a deferred transpose: read its source, as a vector copy when the
        # transpose keeps the last dim, else (an interleaving transpose: the last dims
        # [.., rows, phase, cols, phase]) one element per lane
        keeps_last = perm[-1] == len(perm) - 1
        if keeps_last or interleaves(perm, g.shape_of(op.input)):

            def through_index(e: KernelEmitter, idx: list[Idx]) -> list[Idx]:
                t = src_index(e, idx)
                s: list[Idx] = [0] * len(perm)
                for i, p in enumerate(perm):
                    s[p] = t[i]
                return s

            tag, width = ("slice_t", w) if keeps_last else ("slice_i", 1)
            vector_copy(fl, tag, out, shape, fl.mem(source), through_index, width)
            return
    vector_copy(fl, "slice", out, shape, fl.mem(op.input), src_index, w)


def lower_reverse(fl: _FunctionLowering, op: g.ReverseOp) -> None:
    """``tgraph.reverse``: one copy, ``out[i] = src[i with n - 1 - i_d on each reversed
    dim d]`` (vectors when the last dim is not reversed). A deferred transpose input
    keeping the last dim (a weight's batch-channel swap) is read through its
    permutation, so a transposed, flipped weight is one pass. A reverse of a convolution
    weight's taps (dims 2 and 3) used only as convolution weights is deferred: the
    implicit GEMM's weight relayout reads the weight flipped (and channel-swapped)
    itself (:data:`READS_FLIPPED`), any other lowering makes the copy when it needs it."""
    users = [(u.operation, u.index) for u in op.result.uses]
    if users and all(READS_FLIPPED.get(type(u), lambda i, d: False)(i, op.dim_values())
                     for u, i in users):
        through = fl.peek_transpose(op.input)
        source, perm = through if through is not None else (op.input, tuple(range(4)))
        fl.defer(op.result, source, perm, lambda: _lower_reverse(fl, op), op.dim_values())
        return
    _lower_reverse(fl, op)


READS_FLIPPED: dict[type, Callable[[int, Sequence[int]], bool]] = {
    # operand 1 (the weight) of a convolution, its kh and kw reversed:
    # tessera.passes.sm90.conv_implicit reads it so in its weight relayout
    g.Conv2dOp: lambda index, dims: index == 1 and tuple(dims) == (2, 3),
}
"""The ops whose lowering may read a deferred ``tgraph.reverse`` (``fl.peek_view``), given
the operand index it is used at and the reversed dims."""


def _lower_reverse(fl: _FunctionLowering, op: g.ReverseOp) -> None:
    dims = op.dim_values()
    shape = list(g.shape_of(op.result))
    out = fl.alloc(op.result.type)
    fl.env[op.result] = out
    rank = len(shape)
    w = 1
    if shape and rank - 1 not in dims:
        w = vector_width(g.elem_of(op.result), shape[-1])

    def flipped(e: KernelEmitter, idx: list[Idx]) -> list[Idx]:
        return [e.sub(shape[d] - 1, i) if d in dims else i for d, i in enumerate(idx)]

    through = fl.peek_transpose(op.input)
    if through is not None and through[1][-1] == rank - 1:
        source, perm = through

        def through_index(e: KernelEmitter, idx: list[Idx]) -> list[Idx]:
            t = flipped(e, idx)
            s: list[Idx] = [0] * rank
            for i, p in enumerate(perm):
                s[p] = t[i]
            return s

        vector_copy(fl, "reverse_t", out, shape, fl.mem(source), through_index, w)
        return
    vector_copy(fl, "reverse", out, shape, fl.mem(op.input), flipped, w)


def lower_concat(fl: _FunctionLowering, op: g.ConcatOp) -> None:
    """``tgraph.concat``: one vector copy per input into its part of the output."""
    shape = list(g.shape_of(op.result))
    rank = len(shape)
    ax = op.axis.value.data % rank
    out = fl.alloc(op.result.type)
    fl.env[op.result] = out
    offset = 0
    for v in op.inputs:
        s = list(g.shape_of(v))
        extents = [s[-1], shape[-1]] + ([offset] if ax == rank - 1 else [])
        w = vector_width(g.elem_of(op.result), *extents)

        def out_index(e: KernelEmitter, idx: list[Idx], off: int = offset) -> list[Idx]:
            return [e.add(i, off) if k == ax else i for k, i in enumerate(idx)]

        vector_copy(fl, "concat", out, s, fl.mem(v), lambda e, idx: idx, w, out_index)
        offset += s[ax]


# --------------------------------------------------------------------------- broadcast


def broadcast_runs(in_shape: Sequence[int], shape: Sequence[int]) -> tuple[list[int], list[int]]:
    """``(in_dims, out_dims)``: the broadcast of ``in_shape`` to ``shape`` with adjacent
    dims merged where both are repeated or both are copied (size-1 output dims dropped),
    so a scalar's broadcast is one flat run and ``[1, S, D] -> [B, S, D]`` is
    ``[1, S*D] -> [B, S*D]``: longer rows, wider vectors."""
    full = [1] * (len(shape) - len(in_shape)) + list(in_shape)
    ins: list[int] = []
    outs: list[int] = []
    kinds: list[bool] = []  # True: the run is repeated (input size 1)
    for i, o in zip(full, shape):
        if o == 1:
            continue
        rep = i == 1
        if kinds and kinds[-1] == rep:
            ins[-1] *= i
            outs[-1] *= o
        else:
            ins.append(i)
            outs.append(o)
            kinds.append(rep)
    return ins, outs


def lower_broadcast(fl: _FunctionLowering, op: g.BroadcastOp) -> None:
    """``tgraph.broadcast``: a vector copy from the input, its broadcast dims read at 0
    (adjacent dims merged first: :func:`broadcast_runs`); a broadcast along the last dim
    loads one element for each vector and repeats it."""
    out = fl.alloc(op.result.type)
    fl.env[op.result] = out
    if prod(g.shape_of(op.result)) == 0:
        return
    in_shape, shape = broadcast_runs(g.shape_of(op.input), g.shape_of(op.result))
    et = g.elem_of(op.result)
    dst = reshape_view(fl, out, MemRefType(et, shape))
    src = reshape_view(fl, fl.mem(op.input), MemRefType(et, in_shape))
    off = len(shape) - len(in_shape)

    def src_index(e: KernelEmitter, idx: list[Idx]) -> list[Idx]:
        return [idx[k + off] if d != 1 else 0 for k, d in enumerate(in_shape)]

    w = vector_width(et, shape[-1]) if shape else 1
    splat = bool(shape) and (not in_shape or in_shape[-1] != shape[-1])
    vector_copy(fl, "broadcast", dst, shape, src, src_index, w, splat=splat)


def register(registry: Any) -> None:
    """Register this module's lowerings in the Tile IR lowering registry."""
    registry.register(g.TransposeOp)(lower_transpose)
    registry.register(g.ReshapeOp)(lower_reshape)
    registry.register(g.SliceOp)(lower_slice)
    registry.register(g.ConcatOp)(lower_concat)
    registry.register(g.ReverseOp)(lower_reverse)
    registry.register(g.BroadcastOp)(lower_broadcast)
