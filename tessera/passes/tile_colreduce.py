"""Reductions over leading or middle axes (``[A, R, C]`` summed over ``R``) as
coalesced column kernels.

Used by ``lower-graph-to-tile`` for ``tgraph.sum`` / ``mean`` / ``max`` / ``min`` (and
the reductions closing a ``tgraph.fused`` body) whose reduced axes are consecutive and
followed by at least one kept axis: the bias and norm-weight gradients of a backward
pass (``[tokens, features] -> [features]``), a batch norm's statistics over
``[N, C, H*W]``. The strided kernel of ``lower_graph_to_tile`` gives each output element
one tile whose lanes stride down a column; here the lanes of a warp read 32 adjacent
columns of one row (whole memory sectors) and the tile's warps take rows in turn:

* kernel 1, grid ``[column blocks, splits, A]``: warp ``y`` of split ``s`` folds rows
  ``y, y + 8, ...`` of the split's rows, in order, loading 8 of them at a time; the 8 warps' partials are combined through
  shared memory in warp order. With one split this is the result; with more, each
  split's partial goes to an f32 buffer ``[A, splits, C]``;
* kernel 2 (several splits only), one lane per output element: the splits' partials
  in split order.

With at most ``THIN_ROWS`` reduced rows (grouped-query attention's head groups) one
lane per output element folds its rows itself, in row order: one kernel, no shared
memory.

The number of splits gives the GPU enough tiles when there are few columns (``C`` of
768 is 24 column blocks) and is a function of the shape only, so the combination
order, and the result, is the same on every run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

COLUMNS = 32
"""Columns per tile: one per lane of a warp."""
WARPS = 8
"""Warps per tile, each folding every ``WARPS``-th row of the tile's split."""
TARGET_TILES = 1056
"""Tiles to aim for (eight per SM of an H100) when choosing the number of splits: on an
H100, twice the splits of four tiles per SM took a ViT-B/16 bias gradient
(``[25216, 768]`` bf16 summed over rows) from 0.063 to 0.046 ms and a layer norm's weight
gradient from 0.105 to 0.083 ms (docs/perf/2026-11-25-h100-colreduce.txt)."""
MIN_ROWS_PER_WARP = 16
"""A split gives each warp at least this many rows (fewer splits otherwise)."""
UNROLL = 8
"""Rows a warp loads before folding them (loads in flight per lane)."""
NARROW_UNROLL = 16
"""``UNROLL`` when the reduction reads at most two tensors of 16-bit (or narrower)
elements: a warp's row is then 64 bytes, and twice the rows keep as many bytes in
flight as for f32 (the folding order, and so the result, does not change)."""
MAX_GRID_Y = 65535
"""CUDA's largest grid extent in y and z (where the kernels put A)."""
FINAL_UNROLL = 8
"""Partials a lane of the second kernel loads before folding them."""
THIN_ROWS = 32
"""At most this many reduced rows (the head groups of grouped-query attention's key and
value gradients: 4): one lane per output element folds its rows itself, in order."""

Value = Callable[[KernelEmitter, list[SSAValue], list[Idx], SSAValue], SSAValue]
"""``value(e, input_refs, index, valid)``: a reduced element, in the accumulation type."""
Combine = Callable[[KernelEmitter, SSAValue, SSAValue], SSAValue]
"""``combine(e, a, b)``: two partial results folded into one."""


def column_groups(shape: Sequence[int], axes: Sequence[int]) -> tuple[int, int, int] | None:
    """``(A, R, C)`` when the reduced ``axes`` of ``shape`` are consecutive (size-1 dims
    ignored) and some kept dim of size > 1 follows them; else None."""
    live = [k for k, d in enumerate(shape) if d != 1]
    red = [k for k in live if k in axes]
    if not red:
        return None
    first, last = red[0], red[-1]
    if any(k not in axes for k in live if first <= k <= last):
        return None
    after = [k for k in live if k > last]
    if not after:
        return None
    a = prod(shape[k] for k in live if k < first)
    r = prod(shape[k] for k in red)
    c = prod(shape[k] for k in after)
    return a, r, c


def splits(a: int, r: int, c: int, width: int = 1) -> int:
    """How many splits the rows of a column reduction are cut into (``width`` columns per
    lane: the vector kernel, with its own tile target and rows per warp)."""
    target, min_rows = ((TARGET_TILES, MIN_ROWS_PER_WARP) if width == 1
                        else (VECTOR_TARGET_TILES, VECTOR_MIN_ROWS_PER_WARP))
    tiles = -(-c // (COLUMNS * width)) * a
    most = max(1, r // (WARPS * min_rows))
    return max(1, min(most, -(-target // tiles)))


def _finisher(mean: bool, r_n: int, acc_t: Attribute, out_t: Attribute
              ) -> Callable[[KernelEmitter, SSAValue], SSAValue]:
    """A column's total as stored: divided by the ``r_n`` rows for a mean, converted to
    the result type."""

    def finish(e: KernelEmitter, total: SSAValue) -> SSAValue:
        if mean:
            total = e.fdiv(total, e.const(float(r_n), acc_t))
        return e.convert(total, out_t)

    return finish


def lower_column_reduction(
    lw: _FunctionLowering,
    op: g.ReductionOp,
    tag: str,
    inputs: Sequence[SSAValue],
    value: Value,
    kind: str,
    acc_t: Attribute,
) -> bool:
    """Emit ``op`` (whose element at input index ``idx`` is ``value(e, refs, idx, ok)``
    in ``acc_t``) as column kernels; False (nothing emitted) when its axes are not
    ``[A, R, C]`` over ``R``."""
    from tessera.passes.lower_graph_to_tile import _reduce_init

    shape = g.shape_of(op.input)
    axes = op.axis_list()
    groups = column_groups(shape, axes)
    if groups is None:
        return False
    a_n, r_n, c_n = groups
    if a_n > MAX_GRID_Y:  # A is on grid y or z (at most 65535): the strided kernel
        return False
    dims = list(enumerate(shape))
    # split as column_groups does: size-1 dims (reduced or kept) take index 0 wherever
    # they are, so a reduced size-1 dim after the kept ones does not end [A, R, C] early
    red = [k for k, d in dims if k in axes and d != 1]
    a_dims = [(k, d) for k, d in dims if k not in axes and d != 1 and k < red[0]]
    r_dims = [(k, d) for k, d in dims if k in red]
    c_dims = [(k, d) for k, d in dims if k not in axes and d != 1 and k > red[-1]]
    keep = op.keepdims is not None
    out_t = g.elem_of(op.result)
    s_n = splits(a_n, r_n, c_n)
    narrow = len(inputs) <= 2 and all(
        getattr(getattr(v.type, "element_type", None), "bitwidth", 64) <= 16 for v in inputs)
    unroll = NARROW_UNROLL if narrow else UNROLL
    seg = -(-r_n // s_n)
    s_n = -(-r_n // seg)  # no empty split
    mean = isinstance(op, g.MeanOp)
    out = lw.alloc(op.result.type)
    lw.env[op.result] = out

    def in_index(e: KernelEmitter, a: Idx, r: Idx, c: Idx) -> list[Idx]:
        parts: dict[int, Idx] = {}
        for lst, lin in ((a_dims, a), (r_dims, r), (c_dims, c)):
            for (k, _), v in zip(lst, e.unravel(lin, [d for _, d in lst])):
                parts[k] = v
        return [parts.get(k, 0) for k in range(len(shape))]

    def out_index(e: KernelEmitter, a: Idx, c: Idx) -> list[Idx]:
        idx = in_index(e, a, 0, c)
        if keep:
            return idx
        return [v for k, v in enumerate(idx) if k not in axes]

    finish = _finisher(mean, r_n, acc_t, out_t)

    def build_partial(e: KernelEmitter, args: list[SSAValue], dst: str) -> None:
        o_ref, ins = args[0], args[1:]

        def load(ie: KernelEmitter, a: Idx, r: Idx, c: SSAValue, ok: SSAValue) -> SSAValue:
            v = value(ie, ins, in_index(ie, a, r, c), ok)
            return ie.vselect(ok, v, ie.const(_reduce_init(kind, acc_t), acc_t))

        def store(ie: KernelEmitter, a: Idx, s: Idx, c: SSAValue, total: SSAValue,
                  ok: SSAValue) -> None:
            if dst == "out":
                ie.store(finish(ie, total), o_ref, out_index(ie, a, c), mask=ok)
            else:
                ie.store(total, o_ref, [a, s, c], mask=ok)

        _column_tile(e, 1, unroll, seg, r_n, c_n, kind, acc_t, load, store)

    if r_n <= THIN_ROWS:
        _thin(lw, tag, out, inputs, value, kind, acc_t, (a_n, r_n, c_n), in_index, out_index,
              finish)
        return True
    grid = [-(-c_n // COLUMNS), s_n, a_n]
    group = WARPS * 32
    if s_n == 1:
        lw.kernel(tag, [out, *inputs], group,
                  grid, lambda e, args: build_partial(e, args, "out"))
        return True
    part = lw.alloc(MemRefType(acc_t, [a_n, s_n, c_n]))
    lw.kernel(f"{tag}_part", [part, *inputs], group, grid,
              lambda e, args: build_partial(e, args, "part"))

    lw.kernel(tag, [out, part], 256, [-(-(a_n * c_n) // 256), 1, 1],
              lambda e, args: _final(e, args, a_n, s_n, c_n, kind, acc_t,
                                     lambda ie, a, c: out_index(ie, a, c), finish))
    return True


def _column_tile(
    e: KernelEmitter, width: int, unroll: int, seg: int, r_n: int, c_n: int, kind: str,
    acc_t: Attribute,
    load: Callable[[KernelEmitter, Idx, Idx, SSAValue, SSAValue], SSAValue],
    store: Callable[[KernelEmitter, Idx, Idx, SSAValue, SSAValue, SSAValue], None],
    expand: Callable[[KernelEmitter, SSAValue, SSAValue], list[SSAValue]] | None = None,
) -> None:
    """The first kernel's tile (grid ``[column blocks, splits, A]``): lane ``l`` of a warp
    takes columns ``width * l ..`` of its block, warp ``y`` folds rows ``y, y + WARPS, ..``
    of the split's ``seg`` rows in order, ``unroll`` rows loaded (``load(e, a, r, c, ok)``,
    all before any is used) and then folded (``expand(e, loaded, ok)``: the ``width``
    accumulator-typed elements from column ``c``, identities where ``ok`` is false; without
    it ``load`` gives the one element itself); the warps' partials are combined through shared memory
    in warp order and each column's total goes to ``store(e, a, split, c, total, ok)``."""
    from tessera.passes.lower_graph_to_tile import _combine, _reduce_init

    lane, warp = e.lane_id(), e.warp_id()
    c0 = e.add(e.mul(e.tile_id("x"), COLUMNS), lane)
    if width > 1:
        c0 = e.mul(c0, width)
    s, a = e.tile_id("y"), e.tile_id("z")
    c_ok = e.lt(c0, c_n)
    r0 = e.mul(s, seg)

    def step(ie: KernelEmitter, k: SSAValue, carried: list[SSAValue]) -> list[SSAValue]:
        loaded = []  # independent loads in flight, then folded in row order
        for u in range(unroll):
            local = ie.add(ie.mul(ie.add(ie.mul(k, unroll), u), WARPS), warp)
            r = ie.add(r0, local)
            ok = ie.and_(c_ok, ie.and_(ie.lt(r, r_n), ie.lt(local, seg)))
            assert ok is not None
            loaded.append((load(ie, a, r, c0, ok), ok))
        accs = list(carried)
        for raw, ok in loaded:
            vals = expand(ie, raw, ok) if expand is not None else [raw]
            accs = [_combine(ie, kind, acc, v) for acc, v in zip(accs, vals)]
        return accs

    init = e.const(_reduce_init(kind, acc_t), acc_t)
    accs = e.for_(0, -(-seg // (WARPS * unroll)), 1, [init] * width, step)
    smem = e.op(tt.AllocSharedOp([WARPS, COLUMNS * width], acc_t, alignment=16))

    base = lane if width == 1 else e.mul(lane, width)

    def col(ie: KernelEmitter, j: int) -> Idx:
        return base if j == 0 else ie.add(base, j)

    for j, acc in enumerate(accs):
        e.store(acc, smem, [warp, col(e, j)])
    e.barrier()

    def combine(ie: KernelEmitter) -> list[SSAValue]:
        for j in range(width):
            cj = col(ie, j)
            total = ie.load(smem, [0, cj])
            for w in range(1, WARPS):
                total = _combine(ie, kind, total, ie.load(smem, [w, cj]))
            store(ie, a, s, c0 if j == 0 else ie.add(c0, j), total, c_ok)
        return []

    e.if_(e.eq(warp, 0), combine)


def _final(
    e: KernelEmitter, args: list[SSAValue], a_n: int, s_n: int, c_n: int, kind: str,
    acc_t: Attribute, out_index: Callable[[KernelEmitter, Idx, Idx], list[Idx]],
    finish: Callable[[KernelEmitter, SSAValue], SSAValue],
) -> None:
    """The second kernel: one lane per output element folds the splits' partials
    ``[A, S, C]`` in split order, loading ``FINAL_UNROLL`` of them before adding (the loads
    of a lane are independent: in flight together, not one latency each)."""
    from tessera.passes.lower_graph_to_tile import _combine, _reduce_init

    o_ref, p_ref = args
    lin = e.linear_id()
    ok = e.lt(lin, a_n * c_n)
    a = e.div(lin, c_n)
    c = e.rem(lin, c_n)
    init = e.const(_reduce_init(kind, acc_t), acc_t)
    total = init
    full, rest = divmod(s_n, FINAL_UNROLL)

    def step(ie: KernelEmitter, k: SSAValue, carried: list[SSAValue]) -> list[SSAValue]:
        s0 = ie.mul(k, FINAL_UNROLL)
        vs = [ie.load(p_ref, [a, ie.add(s0, u), c], mask=ok) for u in range(FINAL_UNROLL)]
        acc = carried[0]
        for v in vs:
            acc = _combine(ie, kind, acc, v)
        return [acc]

    if full:
        (total,) = e.for_(0, full, 1, [total], step)
    tail = [e.load(p_ref, [a, full * FINAL_UNROLL + u, c], mask=ok) for u in range(rest)]
    for v in tail:
        total = _combine(e, kind, total, v)
    e.store(finish(e, total), o_ref, out_index(e, a, c), mask=ok)


def _thin(
    lw: _FunctionLowering, tag: str, out: SSAValue, inputs: Sequence[SSAValue], value: Value,
    kind: str, acc_t: Attribute, sizes: tuple[int, int, int],
    in_index: Callable[[KernelEmitter, Idx, Idx, Idx], list[Idx]],
    out_index: Callable[[KernelEmitter, Idx, Idx], list[Idx]],
    finish: Callable[[KernelEmitter, SSAValue], SSAValue],
) -> None:
    """Few reduced rows: a lane per output element ``(a, c)`` (adjacent lanes on adjacent
    columns) loads its ``R`` elements, then folds them in row order."""
    from tessera.passes.lower_graph_to_tile import _combine

    a_n, r_n, c_n = sizes
    group = WARPS * 32

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, ins = args[0], args[1:]
        c = e.add(e.mul(e.tile_id("x"), group), e.local_id())
        a = e.tile_id("y")
        ok = e.lt(c, c_n)
        vs = [value(e, ins, in_index(e, a, r, c), ok) for r in range(r_n)]
        total = vs[0]
        for v in vs[1:]:
            total = _combine(e, kind, total, v)
        e.store(finish(e, total), o_ref, out_index(e, a, c), mask=ok)

    lw.kernel(tag, [out, *inputs], group, [-(-c_n // group), a_n, 1], build)


VECTOR_UNROLL = 4
"""Rows a warp of the vector kernel loads (16 bytes per lane each) before folding them."""
VECTOR_TARGET_TILES = 528
"""Tiles the vector kernel aims for (four per SM of an H100). On an H100 (bench/colreduce.py,
docs/perf/2026-11-25-h100-colreduce-vector.txt) 528 tiles with 16 rows per warp were the
best of 264/528/1056 tiles overall: 2.5-2.8 TB/s on ViT-B/16's bias gradients, where the
scalar kernel reads 0.9-1.6 TB/s."""
VECTOR_MIN_ROWS_PER_WARP = 16
"""A split of the vector kernel gives each warp at least this many rows."""


def lower_vector_columns(lw: _FunctionLowering, op: g.ReductionOp) -> bool:
    """A plain ``sum`` / ``mean`` / ``max`` / ``min`` of a bf16, f16 or f32 tensor over
    consecutive axes followed by kept ones (``[A, R, C]`` over ``R``), with ``C`` a multiple
    of a 16-byte vector: each lane reads one vector (8 bf16/f16 or 4 f32 columns) of a row,
    a warp 512 contiguous bytes; otherwise as the scalar kernels (rows folded in order per
    warp, the warps' partials through shared memory in warp order, the splits' partials by
    a second kernel in split order, accumulated in f32). False (nothing emitted) when it
    does not apply; the input is read through an ``[A, R, C]`` view, so no index is
    unravelled per element."""
    from xdsl.dialects.builtin import f32

    return _vector_columns(lw, op, op.name.split(".")[1], [op.input], [lw.mem(op.input)],
                           lambda e, leaves: leaves[0], f32)


def lower_vector_fused(
    lw: _FunctionLowering, op: g.ReductionOp, values: Sequence[SSAValue],
    refs: Sequence[SSAValue], evaluate: Callable[[KernelEmitter, list[SSAValue]], SSAValue],
    acc_t: Attribute,
) -> bool:
    """The reduction ``op`` closing a ``tgraph.fused`` body (its element is
    ``evaluate(e, leaves)`` of the body's leaf values ``values``, buffers ``refs``) as the
    vector column kernel of :func:`lower_vector_columns`: each leaf of the input's shape is
    read as 16-byte vectors, a leaf that is one value per row (a norm's mean and rstd)
    once per row, one that is one value per column (a weight) as vectors of the column
    block; False (nothing emitted) for other leaves or shapes."""
    return _vector_columns(lw, op, "fused", values, refs, evaluate, acc_t)


def _vector_columns(
    lw: _FunctionLowering, op: g.ReductionOp, tag: str, values: Sequence[SSAValue],
    refs: Sequence[SSAValue], evaluate: Callable[[KernelEmitter, list[SSAValue]], SSAValue],
    acc_t: Attribute,
) -> bool:
    from xdsl.dialects.builtin import Float32Type

    from tessera.passes.lower_graph_to_tile import _reduce_init
    from tessera.passes.tile_datamove import reshape_view

    kinds = {g.SumOp: "sum", g.MeanOp: "sum", g.MaxOp: "max", g.MinOp: "min"}
    kind = kinds.get(type(op))
    shape, axes = g.shape_of(op.input), op.axis_list()
    groups = column_groups(shape, axes)
    if kind is None or groups is None or not isinstance(acc_t, Float32Type):
        return False
    a_n, r_n, c_n = groups
    if a_n > MAX_GRID_Y or r_n <= THIN_ROWS:
        return False
    modes = [_leaf_mode(g.shape_of(v), shape, axes) for v in values]
    wide = [v for v, m in zip(values, modes) if m in ("full", "col")]
    if None in modes or not wide or not all(tile_float(g.elem_of(v)) for v in values):
        return False
    bits = {getattr(g.elem_of(v), "bitwidth", 0) for v in wide}
    if len(bits) != 1 or bits.pop() not in (16, 32):
        return False
    width = 128 // getattr(g.elem_of(wide[0]), "bitwidth", 32)
    if c_n % width:
        return False
    rt = g.elem_of(op.result)
    mean = isinstance(op, g.MeanOp)
    s_n = splits(a_n, r_n, c_n, width)
    seg = -(-r_n // s_n)
    s_n = -(-r_n // seg)
    cols = COLUMNS * width
    view_shape = {"full": [a_n, r_n, c_n], "row": [a_n, r_n], "col": [c_n], "scalar": [1]}
    views = [reshape_view(lw, r, MemRefType(g.elem_of(v), view_shape[m]))
             for v, r, m in zip(values, refs, modes)]
    out = lw.alloc(op.result.type)
    lw.env[op.result] = out
    out2 = reshape_view(lw, out, MemRefType(rt, [a_n, c_n]))
    init = _reduce_init(kind, acc_t)

    finish = _finisher(mean, r_n, acc_t, rt)

    def build(e: KernelEmitter, args: list[SSAValue], to_out: bool) -> None:
        o_ref, ins = args[0], args[1:]

        def load(ie: KernelEmitter, a: Idx, r: Idx, c: SSAValue, ok: SSAValue) -> list:
            got = []
            for ref, m in zip(ins, modes):
                if m == "full":
                    idx = [ie.index(a), ie.index(r), ie.index(c)]
                    got.append(ie.op(tt.LoadVectorOp(ref, idx, width, ok)))
                elif m == "col":
                    got.append(ie.op(tt.LoadVectorOp(ref, [ie.index(c)], width, ok)))
                elif m == "row":
                    got.append(ie.load(ref, [a, r], mask=ok))
                else:
                    got.append(ie.load(ref, [0], mask=ok))
            return got

        def expand(ie: KernelEmitter, got: list, ok: SSAValue) -> list[SSAValue]:
            vals = []
            for j in range(width):
                leaves = [ie.extract(v, j) if m in ("full", "col") else v
                          for v, m in zip(got, modes)]
                vals.append(ie.convert(evaluate(ie, leaves), acc_t))
            if len(values) > 1 or kind != "sum":  # a masked load reads zeros
                vals = [ie.vselect(ok, x, ie.const(init, acc_t)) for x in vals]
            return vals

        def store(ie: KernelEmitter, a: Idx, s: Idx, c: SSAValue, total: SSAValue,
                  ok: SSAValue) -> None:
            if to_out:
                ie.store(finish(ie, total), o_ref, [a, c], mask=ok)
            else:
                ie.store(total, o_ref, [a, s, c], mask=ok)

        _column_tile(e, width, VECTOR_UNROLL, seg, r_n, c_n, kind, acc_t, load, store, expand)

    grid = [-(-c_n // cols), s_n, a_n]
    if s_n == 1:
        lw.kernel(tag, [out2, *views], WARPS * 32, grid, lambda e, args: build(e, args, True))
        return True
    part = lw.alloc(MemRefType(acc_t, [a_n, s_n, c_n]))
    lw.kernel(f"{tag}_part", [part, *views], WARPS * 32, grid,
              lambda e, args: build(e, args, False))
    lw.kernel(tag, [out2, part], 256, [-(-(a_n * c_n) // 256), 1, 1],
              lambda e, args: _final(e, args, a_n, s_n, c_n, kind, acc_t,
                                     lambda ie, a, c: [a, c], finish))
    return True


def _leaf_mode(leaf: Sequence[int], shape: Sequence[int], axes: Sequence[int]) -> str | None:
    """How the vector column kernel reads a leaf of ``leaf``'s shape broadcast to the
    reduction's input ``shape`` (reduced ``axes``): ``full`` (the input's shape),
    ``row`` (the input's reduced and leading kept dims, size 1 on the trailing kept ones),
    ``col`` (size 1 but on the trailing kept dims), ``scalar``; None otherwise."""
    lead = [1] * (len(shape) - len(leaf)) + list(leaf)
    if len(lead) != len(shape):
        return None
    if list(lead) == list(shape):
        return "full"
    red = [k for k in axes if shape[k] != 1]
    if not red:
        return None
    trailing = [k for k in range(len(shape)) if k > max(red) and k not in axes]
    if all(d == 1 for d in lead):
        return "scalar"
    if all(lead[k] == shape[k] for k in range(len(shape)) if k not in trailing) and all(
            lead[k] == 1 for k in trailing):
        return "row"
    if all(lead[k] == 1 for k in range(len(shape)) if k not in trailing) and all(
            lead[k] == shape[k] for k in trailing):
        return "col"
    return None


def tile_float(t: Attribute) -> bool:
    """bf16, f16 or f32."""
    from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type

    return isinstance(t, BFloat16Type | Float16Type | Float32Type)
