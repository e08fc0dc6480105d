"""Tile IR kernels for the CSR products ``tgraph.spmm``, ``tgraph.spmm_transpose`` and
``tgraph.sddmm``.

A CSR matrix ``A [M, K]`` is ``indptr [M+1]``, ``indices [nnz]`` (columns) and
``values [nnz]``; row ``i`` holds entries ``p = indptr[i] .. indptr[i+1]`` in storage
order. Products and sums are in f32 for f32/f16/bf16 operands (16-bit values widened
exactly) and in f64 for f64; each result is rounded once to the result type. Every
output element is computed by one lane (sddmm: one group of lanes, combined in a fixed
order), so results are deterministic: no atomics, the same bits on every run.

**Vectors.** Both kernels read dense rows ``W`` elements at a time (16 bytes: 4 f32,
8 f16/bf16, 2 f64), ``W`` the widest power of two that divides the row length, so every
access is aligned (buffers start 16-byte aligned). ``G`` lanes (a power of two, at most
32) share a row: lane ``s`` of the group reads elements ``s*W .. s*W+W-1`` of every
``G*W``-wide stripe, the group reading ``G*W`` consecutive elements per access.

``tgraph.spmm`` (``out = A @ dense``, ``dense [K, N]``, ``out [M, N]``):

* ``G`` = the fewest lanes (power of two, at most 32) whose vectors cover ``N``; each
  lane owns ``P`` vectors of its row (``P * W`` accumulators, at most 16 in f32 or 8 in
  f64), so a group covers ``C = G * W * P`` columns; wider rows are split over the
  grid's y dimension (``ceil(N / C)`` column blocks). A warp holds ``32 / G`` row
  groups, a tile (128 lanes) ``128 / G`` rows: grid ``[ceil(M / (128 / G)), ceil(N / C),
  1]``; row ``r = tile_x * 128 / G + local_id / G``, lane ``s = local_id % G``.
* The group walks its row's entries in storage order, ``U`` at a time (``U = 8`` when a
  lane has at most 4 accumulators, else 4): the ``U`` (column, value) pairs are read
  first (every lane of the group reads the same address: one broadcast transaction per
  warp), then the ``U * P`` dense vectors ``dense[indices[p], c .. c+W-1]``, then the
  products are added to the accumulators in order of ``p`` (``acc += values[p] *
  dense[..]``, a multiply then an add, never fused), so each output element is the sum
  of its row's terms in CSR order: bit for bit the Graph IR interpreter's sum. Entries
  past the row's end (the last step) read zeros and add ``+0``, which leaves any sum
  unchanged (a sum that starts at ``+0`` is never ``-0``). Unrolling only lets ``U *
  P`` loads be in flight per lane; it does not change the order.
* Row lengths only set a group's trip count, so short rows (many rows per warp when
  ``N`` is small) and long ones (one row per warp, ``U * P`` loads in flight) both keep
  the loads coalesced; one very long row is still one group's serial walk.

``tgraph.sddmm`` (``out[p] = sum_n lhs[i, n] * rhs[indices[p], n]`` for entry ``p`` of row
``i``; ``lhs [M, N]``, ``rhs [K, N]``, ``out [nnz]``):

* One group of ``G`` lanes (``G`` = the fewest lanes covering ``N``, at most 32) per
  ``E = 8`` consecutive stored entries, taken one after the other (``32 / G`` groups per
  warp, 128 lanes per tile, grid ``[ceil(nnz / (E * 128 / G)), 1, 1]``): work is
  balanced over entries whatever the row lengths. The group finds its first entry's
  row by a uniform binary search in ``indptr`` (the last ``i < M`` with ``indptr[i] <=
  p``; ``ceil(log2(M + 1))`` steps) and searches again only for an entry past that
  row's end. For entry ``p`` of row ``i``, lane ``s`` adds ``lhs[i, n] * rhs[indices[p],
  n]`` over its elements ``n`` in increasing order (stripes of ``G * W``, ``W``-wide
  vectors of both rows, up to four stripes' loads in flight); the group's ``G`` partial
  sums are combined by a butterfly (``shuffle_xor`` by ``G/2, ..., 1``: every lane ends
  with the same sum, the same bits on every run), and lane 0 of the group stores it.

``tgraph.spmm_transpose`` (``out = Aᵀ @ dense``, ``dense [M, N]``, ``out [K, N]``) makes
``Aᵀ`` as CSR and runs the spmm kernel on it:

* a stable sort of the entries by column (:func:`_sort_by_column`): tiles of 256 lanes
  sort 256 entries each in shared memory, then ``ceil(log2(nnz)) - 8`` merge levels in
  global memory (:func:`_merge_path`), one launch each; equal columns keep storage
  order;
* ``colptr[c]`` (``c = 0 .. K``) by a binary search in the sorted columns
  (:func:`_colptr`), and for each sorted entry A's row (:func:`row_of`) and value
  (:func:`_gather`);
* the spmm kernel on (``colptr``, rows, values) ``[K, M]``: each output element sums its
  column's entries in storage order, bit for bit the CPU reference's ``numpy.add.at``.

No kernel reads out of bounds: row extents are clamped to ``[0, nnz]`` and a column
index outside ``[0, K)`` reads zeros (spmm: the entry adds ``value * 0``; sddmm: the
result is 0; spmm_transpose: the entry is left out). (The CPU reference rejects such
malformed CSR operands with an error.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from xdsl.dialects import arith
from xdsl.dialects.builtin import Float64Type, IndexType, TensorType, VectorType, i1, i32
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import (
    Idx,
    KernelEmitter,
    cdiv,
    compute_type,
    float_elem,
    not_lowered,
)

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

LANES = 128
"""Lanes per tile of both kernels (four warps)."""

UNROLL = 4
"""Entries (spmm) or stripes (sddmm) whose loads are issued together."""

ENTRIES = 8
"""Consecutive stored entries one sddmm lane group takes, one after the other."""


def vector_width(et: Attribute, n: int) -> int:
    """Elements per access of a row of ``n`` elements of ``et``: the widest power of two
    dividing ``n`` with at most 16 bytes."""
    w = 16 // tt.element_bytes(et)
    while n % w:
        w //= 2
    return w


def group_lanes(n: int, w: int) -> int:
    """Lanes per row (spmm) or entry (sddmm): the fewest (power of two, at most 32)
    whose ``w``-wide vectors cover ``n`` elements."""
    g_ = 1
    while g_ < 32 and g_ * w < n:
        g_ *= 2
    return g_


def spmm_plan(et: Attribute, n: int) -> tuple[int, int, int]:
    """``(W, G, P)`` of an spmm with ``n`` output columns of ``et``: vector width, lanes
    per row, vectors per lane."""
    w = vector_width(et, n)
    lanes = group_lanes(n, w)
    most = 8 if isinstance(compute_type(et), Float64Type) else 16  # accumulators per lane
    p = max(1, min(cdiv(n, lanes * w), most // w))
    return w, lanes, p


def _index(e: KernelEmitter, v: SSAValue) -> SSAValue:
    return e.convert(v, IndexType())


def _row_extent(e: KernelEmitter, indptr: SSAValue, row: Idx, m: int, nnz: int):
    """``(lo, hi)`` of row ``min(row, m)`` with both clamped to ``[0, nnz]`` and
    ``hi >= lo`` (rows ``>= m`` are empty)."""

    def bound(i: Idx) -> Idx:
        return e.min(e.max(_index(e, e.load(indptr, [i])), 0), nnz)

    rc = e.min(row, m)
    lo = bound(rc)
    return lo, e.max(bound(e.min(e.add(rc, 1), m)), lo)


def _column(e: KernelEmitter, indices: SSAValue, p: Idx, k: int,
            mask: SSAValue | None = None) -> tuple[SSAValue, SSAValue]:
    """Column ``indices[p]`` (0 when outside ``[0, k)``) and whether it is inside."""
    c = _index(e, e.load(indices, [p], mask=mask))
    inside = e.and_(mask, e.and_(e.le(0, c), e.lt(c, k)))
    assert inside is not None
    return e.select(inside, c, 0), inside


def _widen(e: KernelEmitter, vec: SSAValue, w: int, to: Attribute) -> list[SSAValue]:
    return [e.convert(e.extract(vec, x), to) for x in range(w)]


def row_of(e: KernelEmitter, indptr: SSAValue, p: SSAValue, m: int) -> Idx:
    """The row of entry ``p``: the last ``i < m`` with ``indptr[i] <= p`` (0 when none),
    by a binary search of ``ceil(log2(m + 1))`` uniform steps over ``indptr``."""

    # keep lo <= answer <= hi over [0, m]
    def halve(b: KernelEmitter, _: SSAValue, s: list[SSAValue]) -> list[SSAValue]:
        lo, hi = s
        mid = b.div(b.add(b.add(lo, hi), 1), 2)
        at_or_before = b.le(_index(b, b.load(indptr, [mid])), p)
        return [b.select(at_or_before, mid, lo), b.select(at_or_before, hi, b.sub(mid, 1))]

    lo, _ = e.for_(0, max(1, m.bit_length()), 1, [e.index(0), e.index(m)], halve)
    return e.max(e.min(lo, m - 1), 0)


def lower_spmm(lw: _FunctionLowering, op: g.SpMMOp) -> None:
    """``tgraph.spmm``: ``G`` lanes per row, ``W``-wide vectors, entries in CSR order."""
    et = float_elem(op, op.result.type)
    m, k = (int(x) for x in op.sparse_shape.get_values())
    out = lw.alloc(op.result.type)
    refs = [lw.mem(v) for v in (op.indptr, op.indices, op.values, op.dense)]
    spmm_kernel(lw, "spmm", out, refs, et, m, k, g.shape_of(op.dense)[1],
                g.shape_of(op.indices)[0])
    lw.env[op.result] = out


def spmm_kernel(lw: _FunctionLowering, tag: str, out: SSAValue, refs: list[SSAValue],
                et: Attribute, m: int, k: int, n: int, nnz: int) -> None:
    """Launch the spmm kernel: ``out [m, n] = A @ dense`` for CSR ``A [m, k]`` with
    ``nnz`` entries; ``refs`` = indptr, indices, values, dense."""
    acc_t = compute_type(et)
    w, lanes, per = spmm_plan(et, n)
    rows_per_tile = LANES // lanes
    cols = lanes * w * per  # columns of one column block
    unroll = 2 * UNROLL if per * w <= 4 else UNROLL

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o, indptr, indices, values, dense = args
        lid = e.local_id()
        row = e.add(e.mul(e.tile_id("x"), rows_per_tile), e.div(lid, lanes))
        first = e.add(e.mul(e.tile_id("y"), cols), e.mul(e.rem(lid, lanes), w))
        row_ok = e.lt(row, m)
        cs = [e.add(first, j * lanes * w) for j in range(per)]
        oks = [e.and_(row_ok, e.lt(c, n)) for c in cs]
        lo, hi = _row_extent(e, indptr, row, m, nnz)

        def terms(b: KernelEmitter, p: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
            pairs = []
            for u in range(unroll):
                live = b.lt(b.add(p, u), hi)
                col, inside = _column(b, indices, b.add(p, u), k, live)
                v = b.load(values, [b.add(p, u)], mask=live)
                pairs.append((col, inside, b.convert(v, acc_t)))
            loaded = [
                [b.op(tt.LoadVectorOp(dense, [col, b.index(c)], w, b.and_(inside, ok)))
                 for c, ok in zip(cs, oks)]
                for col, inside, _ in pairs
            ]
            acc = list(acc)
            for (_, _, v), vecs in zip(pairs, loaded):
                for j, vec in enumerate(vecs):
                    for x, d in enumerate(_widen(b, vec, w, acc_t)):
                        acc[j * w + x] = b.fadd(acc[j * w + x], b.fmul(v, d))
            return acc

        acc = e.for_(lo, hi, unroll, [e.const(0.0, acc_t)] * (per * w), terms)
        for j, (c, ok) in enumerate(zip(cs, oks)):
            vec = e.const(0.0, VectorType(et, [w]))
            for x in range(w):
                vec = e.insert(e.convert(acc[j * w + x], et), vec, x)
            e.emit(tt.StoreVectorOp(vec, o, [e.index(row), e.index(c)], ok))

    lw.kernel(tag, [out, *refs], LANES, [cdiv(m, rows_per_tile), cdiv(n, cols), 1], build)


def lower_sddmm(lw: _FunctionLowering, op: g.SDDMMOp) -> None:
    """``tgraph.sddmm``: ``G`` lanes per stored entry, a fixed butterfly over the group."""
    et = float_elem(op, op.result.type)
    acc_t = compute_type(et)
    m, k = (int(x) for x in op.sparse_shape.get_values())
    nnz = g.shape_of(op.indices)[0]
    n = g.shape_of(op.lhs)[1]
    out = lw.alloc(op.result.type)
    w = vector_width(et, max(n, 1))
    lanes = group_lanes(n, w)
    per_tile = LANES // lanes
    stripes = cdiv(n, lanes * w)
    unroll = min(UNROLL, max(stripes, 1))

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o, indptr, indices, lhs, rhs = args
        lid = e.local_id()
        first = e.mul(e.add(e.mul(e.tile_id("x"), per_tile), e.div(lid, lanes)), ENTRIES)
        sub = e.rem(lid, lanes)
        last = max(nnz - 1, 0)

        def entry(b: KernelEmitter, j: SSAValue, carried: list[SSAValue]) -> list[SSAValue]:
            p = b.add(first, j)
            ok = b.lt(p, nnz)
            pc = b.min(p, last)
            (row,) = carried
            nxt = _index(b, b.load(indptr, [b.min(b.add(row, 1), m)]))
            (row,) = b.if_(b.le(nxt, pc), lambda t: [t.index(row_of(t, indptr, pc, m))],
                           lambda t: [row], [IndexType()])
            col, inside = _column(b, indices, pc, k, ok)
            if m == 0:  # malformed: entries but no rows
                inside = b.const(0, inside.type)

            def part(c: KernelEmitter, s: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
                starts = [c.add(c.mul(c.add(s, u), lanes * w), c.mul(sub, w))
                          for u in range(unroll)]
                oks = [c.and_(inside, c.lt(x, n)) for x in starts]
                xs = [c.op(tt.LoadVectorOp(lhs, [row, c.index(x)], w, ok_))
                      for x, ok_ in zip(starts, oks)]
                ys = [c.op(tt.LoadVectorOp(rhs, [col, c.index(x)], w, ok_))
                      for x, ok_ in zip(starts, oks)]
                (a,) = acc
                for x, y in zip(xs, ys):
                    for xv, yv in zip(_widen(c, x, w, acc_t), _widen(c, y, w, acc_t)):
                        a = c.fadd(a, c.fmul(xv, yv))
                return [a]

            zero = b.const(0.0, acc_t)
            (acc,) = b.for_(0, cdiv(stripes, unroll) * unroll, unroll, [zero], part)
            off = lanes // 2
            while off:
                acc = b.fadd(acc, b.op(tt.ShuffleXorOp(acc, off)))
                off //= 2
            b.store(b.convert(acc, et), o, [p], mask=b.and_(ok, b.eq(sub, 0)))
            return [row]

        row0 = row_of(e, indptr, e.min(first, last), m)
        e.for_(0, ENTRIES, 1, [e.index(row0)], entry)

    args = [out, *(lw.mem(v) for v in (op.indptr, op.indices, op.lhs, op.rhs))]
    lw.kernel("sddmm", args, LANES, [cdiv(nnz, per_tile * ENTRIES), 1, 1], build)
    lw.env[op.result] = out


# --------------------------------------------------------------------------- spmm_transpose


def lower_spmm_transpose(lw: _FunctionLowering, op: g.SpMMTransposeOp) -> None:
    """``tgraph.spmm_transpose``: ``Aᵀ`` as CSR by a stable merge sort of the entries by
    column, then the spmm kernel."""
    et = float_elem(op, op.result.type)
    m, k = (int(x) for x in op.sparse_shape.get_values())
    nnz = g.shape_of(op.indices)[0]
    n = g.shape_of(op.dense)[1]
    if nnz >= 2**31 or k >= 2**31 - 1:
        raise not_lowered(op, f"{nnz} entries of {k} columns; at most 2**31 - 1 are lowered")
    out = lw.alloc(op.result.type)
    if k == 0 or n == 0:
        lw.env[op.result] = out
        return
    indptr, indices, vals = (lw.mem(v) for v in (op.indptr, op.indices, op.values))
    ints = TensorType(i32, [nnz])
    colptr = lw.alloc(TensorType(i32, [k + 1]))
    t_rows, t_vals = lw.alloc(ints), lw.alloc(TensorType(et, [nnz]))
    if nnz:
        keys, perm = _sort_by_column(lw, indices, k, nnz)
        _colptr(lw, colptr, keys, k, nnz)
        _gather(lw, t_rows, t_vals, perm, indptr, vals, m, nnz)
    else:
        _colptr(lw, colptr, None, k, 0)
    spmm_kernel(lw, "spmm_transpose", out, [colptr, t_rows, t_vals, lw.mem(op.dense)], et,
                k, m, n, nnz)
    lw.env[op.result] = out


LOCAL_SORT = 256
"""Entries one tile sorts in shared memory before the merges in global memory."""


def _merge_dst(e: KernelEmitter, key_at: Callable[[KernelEmitter, Idx, SSAValue], SSAValue],
               q: Idx, size: Idx, shift: Idx, steps: Idx) -> SSAValue:
    """Where the entry at ``q`` (of ``size``) goes when the sorted runs of ``2**shift``
    entries are merged in pairs: ``start of the pair + (q - start of its run) + (entries
    of the sibling run that go before it)``, counted by a binary search of ``steps``
    uniform steps (``>= shift + 1``): keys ``< key`` in a right sibling, ``<= key`` in a
    left one, so equal keys keep their order. ``key_at(emitter, i, mask)`` reads key
    ``i``."""
    as_ssa = e.index
    run = e.op(arith.ShRUIOp(as_ssa(q), as_ssa(shift)))
    width = e.op(arith.ShLIOp(as_ssa(1), as_ssa(shift)))
    start = e.op(arith.ShLIOp(run, as_ssa(shift)))
    left = e.eq(e.rem(run, 2), 0)
    lo0 = e.select(left, e.min(e.add(start, width), size), e.sub(start, width))
    hi0 = e.select(left, e.min(e.add(start, e.mul(width, 2)), size), start)
    key = key_at(e, q, None)

    def step(b: KernelEmitter, _: SSAValue, s: list[SSAValue]) -> list[SSAValue]:
        lo, hi = s
        live = b.lt(lo, hi)
        km = key_at(b, b.div(b.add(lo, hi), 2), live)
        before = b.select(left, b.lt(km, key), b.le(km, key))
        go_right = b.and_(live, before)
        stay = b.and_(live, b.op(arith.XOrIOp(before, b.const(1, i1))))
        assert go_right is not None and stay is not None
        mid = b.div(b.add(lo, hi), 2)
        return [b.select(go_right, b.add(mid, 1), lo), b.select(stay, mid, hi)]

    lo, _ = e.for_(0, steps, 1, [lo0, hi0], step)
    base = e.select(left, start, e.sub(start, width))
    return e.add(e.add(base, e.sub(q, start)), e.sub(lo, lo0))


def _sort_by_column(lw: _FunctionLowering, indices: SSAValue, k: int,
                    nnz: int) -> tuple[SSAValue, SSAValue]:
    """Buffers ``(keys, perm)``: the entries' columns (clamped to ``[-1, k]``) in
    increasing order and the entries in that order, equal columns in storage order (a
    stable merge sort: deterministic).

    ``sparse_sort_local``: each tile of 256 lanes sorts 256 consecutive entries in shared
    memory (eight merge levels, :func:`_merge_dst`, a barrier after each) and writes
    their columns and positions ``p`` sorted; then ``ceil(log2(nnz)) - 8`` launches of
    ``sparse_merge`` (:func:`_merge_path`, the run width ``2**s`` a kernel argument)
    merge pairs of sorted runs into the other pair of buffers."""
    ints = TensorType(i32, [nnz])
    bufs = [(lw.alloc(ints), lw.alloc(ints)), (lw.alloc(ints), lw.alloc(ints))]
    levels = (LOCAL_SORT - 1).bit_length()

    def local(e: KernelEmitter, args: list[SSAValue]) -> None:
        keys, perm, ix = args
        lid = e.local_id()
        chunk = e.mul(e.tile_id("x"), LOCAL_SORT)
        p = e.add(chunk, lid)
        ok = e.lt(p, nnz)
        size = e.min(e.sub(nnz, chunk), LOCAL_SORT)
        smem = [[e.op(tt.AllocSharedOp([LOCAL_SORT], i32)) for _ in range(2)]
                for _ in range(2)]
        c = e.min(e.max(_index(e, e.load(ix, [e.min(p, nnz - 1)])), -1), k)
        e.store(e.convert(c, i32), smem[0][0], [lid])
        e.store(e.convert(p, i32), smem[0][1], [lid])
        e.barrier()
        src = 0
        for level in range(levels):
            sk, sp = smem[src]

            def key_at(b: KernelEmitter, i: Idx, mask: SSAValue | None, sk=sk) -> SSAValue:
                return _index(b, b.load(sk, [b.min(i, LOCAL_SORT - 1)], mask=mask))

            dst = _merge_dst(e, key_at, lid, size, level, level + 1)
            dk, dp = smem[1 - src]
            e.store(e.load(sk, [lid]), dk, [dst], mask=ok)
            e.store(e.load(sp, [lid]), dp, [dst], mask=ok)
            e.barrier()
            src = 1 - src
        e.store(e.load(smem[src][0], [lid]), keys, [p], mask=ok)
        e.store(e.load(smem[src][1], [lid]), perm, [p], mask=ok)

    lw.kernel("sparse_sort_local", [*bufs[0], indices], LOCAL_SORT,
              [cdiv(nnz, LOCAL_SORT), 1, 1], local)

    def merge(e: KernelEmitter, args: list[SSAValue]) -> None:
        _merge_path(e, args, nnz)

    src = 0
    name = None
    grid = [cdiv(nnz, LOCAL_SORT), 1, 1]
    for s in range(levels, max(levels, (nnz - 1).bit_length())):
        args = [*bufs[src], *bufs[1 - src], lw.host_index(s)]
        if name is None:
            name = lw.kernel("sparse_merge", args, LOCAL_SORT, grid, merge)
        else:
            lw.launch(name, args, grid)
        src = 1 - src
    return bufs[src]


def _merge_path(e: KernelEmitter, args: list[SSAValue], nnz: int) -> None:
    """One merge level in global memory: runs of ``w = 2**shift >= 256`` sorted entries
    (``skeys``, ``sperm``) merged in pairs into ``dkeys``, ``dperm``; a tile of 256 lanes
    writes 256 consecutive outputs of one pair (merge path).

    The tile's outputs start ``d`` outputs into the pair; the tile finds how many of the
    pair's first ``d`` outputs come from the left run (``a``: the first ``i`` with
    ``left[i] > right[d - 1 - i]``, a binary search of ``shift + 2`` uniform steps), loads
    the next 256 keys of each run into shared memory, and lane ``i`` finds its output the
    same way within those (9 steps): the smaller head, the left one on equal keys, so
    the merge is stable."""
    skeys, sperm, dkeys, dperm, shift = args
    t = LOCAL_SORT
    lid = e.local_id()
    o0 = e.mul(e.tile_id("x"), t)
    s1 = e.add(shift, 1)
    width = e.op(arith.ShLIOp(e.index(1), e.index(shift)))
    base = e.op(arith.ShLIOp(e.op(arith.ShRUIOp(e.index(o0), s1)), s1))
    mid = e.min(e.add(base, width), nnz)
    len_l = e.sub(mid, base)
    len_r = e.sub(e.min(e.add(base, e.mul(width, 2)), nnz), mid)
    d = e.sub(o0, base)

    def key(b: KernelEmitter, at: Idx, mask: SSAValue | None = None) -> SSAValue:
        return _index(b, b.load(skeys, [b.max(b.min(at, nnz - 1), 0)], mask=mask))

    def split(b: KernelEmitter, diag: Idx, nl: Idx, nr: Idx, steps: Idx,
              left_at: Callable[[KernelEmitter, Idx, SSAValue], SSAValue],
              right_at: Callable[[KernelEmitter, Idx, SSAValue], SSAValue]) -> SSAValue:
        """The first ``i`` in ``[max(0, diag - nr), min(diag, nl)]`` with ``left[i] >
        right[diag - 1 - i]``."""

        def step(c: KernelEmitter, _: SSAValue, s: list[SSAValue]) -> list[SSAValue]:
            lo, hi = s
            live = c.lt(lo, hi)
            m = c.div(c.add(lo, hi), 2)
            takes_left = c.le(left_at(c, m, live), right_at(c, c.sub(c.sub(diag, m), 1), live))
            up = c.and_(live, takes_left)
            down = c.and_(live, c.op(arith.XOrIOp(takes_left, c.const(1, i1))))
            assert up is not None and down is not None
            return [c.select(up, c.add(m, 1), lo), c.select(down, m, hi)]

        lo0, hi0 = b.index(b.max(b.sub(diag, nr), 0)), b.index(b.min(diag, nl))
        lo, _ = b.for_(0, steps, 1, [lo0, hi0], step)
        return lo

    a = split(e, d, len_l, len_r, e.add(shift, 2),
              lambda c, i, mk: key(c, c.add(base, i), mk),
              lambda c, j, mk: key(c, c.add(mid, j), mk))
    b0 = e.sub(d, a)  # outputs before the tile taken from the right run
    n_l, n_r = e.min(e.sub(len_l, a), t), e.min(e.sub(len_r, b0), t)
    sl, sr = (e.op(tt.AllocSharedOp([t], i32)) for _ in range(2))
    e.store(e.convert(key(e, e.add(e.add(base, a), lid), e.lt(lid, n_l)), i32), sl, [lid])
    e.store(e.convert(key(e, e.add(e.add(mid, b0), lid), e.lt(lid, n_r)), i32), sr, [lid])
    e.barrier()

    def shared(ref: SSAValue) -> Callable[[KernelEmitter, Idx, SSAValue | None], SSAValue]:
        def at(c: KernelEmitter, i: Idx, mask: SSAValue | None = None) -> SSAValue:
            return _index(c, c.load(ref, [c.max(c.min(i, t - 1), 0)], mask=mask))

        return at

    ai = split(e, lid, n_l, n_r, (t + 1).bit_length(), shared(sl), shared(sr))
    bi = e.sub(lid, ai)
    kl, kr = shared(sl)(e, ai), shared(sr)(e, bi)
    no_right = e.op(arith.XOrIOp(e.lt(bi, n_r), e.const(1, i1)))
    left_first = e.op(arith.OrIOp(no_right, e.le(kl, kr)))
    take_l = e.and_(e.lt(ai, n_l), left_first)
    assert take_l is not None
    src = e.select(take_l, e.add(e.add(base, a), ai), e.add(e.add(mid, b0), bi))
    o = e.add(o0, lid)
    ok = e.lt(o, nnz)
    e.store(e.convert(e.select(take_l, kl, kr), i32), dkeys, [o], mask=ok)
    e.store(e.load(sperm, [e.min(src, nnz - 1)]), dperm, [o], mask=ok)


def _colptr(lw: _FunctionLowering, colptr: SSAValue, keys: SSAValue | None, k: int,
            nnz: int) -> None:
    """``colptr[c]`` = the first position of a key ``>= c`` in the sorted ``keys``
    (``c = 0 .. k``), by a binary search of ``ceil(log2(nnz + 1))`` uniform steps: the
    entries of column ``c`` are ``colptr[c] .. colptr[c+1]`` (keys -1 and ``k``, columns
    outside ``[0, k)``, are in none)."""

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        c = e.linear_id()
        ok = e.lt(c, k + 1)
        if keys is None:
            e.store(e.const(0, i32), args[0], [c], mask=ok)
            return

        def step(b: KernelEmitter, _: SSAValue, s: list[SSAValue]) -> list[SSAValue]:
            lo, hi = s
            live = b.lt(lo, hi)
            mid = b.div(b.add(lo, hi), 2)
            km = _index(b, b.load(args[1], [b.min(mid, nnz - 1)], mask=live))
            below = b.and_(live, b.lt(km, c))
            assert below is not None
            above = b.and_(live, b.op(arith.XOrIOp(b.lt(km, c), b.const(1, i1))))
            assert above is not None
            return [b.select(below, b.add(mid, 1), lo), b.select(above, mid, hi)]

        lo, _ = e.for_(0, max(1, (nnz + 1).bit_length()), 1, [e.index(0), e.index(nnz)], step)
        e.store(e.convert(lo, i32), args[0], [c], mask=ok)

    args = [colptr] if keys is None else [colptr, keys]
    lw.kernel("sparse_colptr", args, LANES, [cdiv(k + 1, LANES), 1, 1], build)


def _gather(lw: _FunctionLowering, t_rows: SSAValue, t_vals: SSAValue, perm: SSAValue,
            indptr: SSAValue, vals: SSAValue, m: int, nnz: int) -> None:
    """Entry ``q`` of ``Aᵀ`` (entry ``p = perm[q]`` of A): its column in ``Aᵀ``, A's row
    of ``p`` (:func:`row_of`), and its value."""

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        rows, tv, pm, ip, v = args
        q = e.linear_id()
        ok = e.lt(q, nnz)
        p = e.min(e.max(_index(e, e.load(pm, [q], mask=ok)), 0), nnz - 1)
        row = row_of(e, ip, p, m) if m else 0
        e.store(e.convert(e.index(row), i32), rows, [q], mask=ok)
        e.store(e.load(v, [p]), tv, [q], mask=ok)

    lw.kernel("sparse_gather", [t_rows, t_vals, perm, indptr, vals], LANES,
              [cdiv(nnz, LANES), 1, 1], build)
