"""``fuse-elementwise``: chains of elementwise ops (with an optional trailing reduction)
become one ``tgraph.fused`` op, which lowers to one kernel.

A producer is absorbed into its consumer when the consumer is the producer's
only user, so every intermediate tensor of the chain disappears from the graph.
Producers are elementwise ops and fused ops without a reduction; consumers are
elementwise ops, reductions and fused ops.

A producer with several users, all of them consumers, is copied into each of them
when that moves no more memory than storing and rereading its result
(:func:`duplicable`). Per element of the result, storing it costs reading the
producer's large inputs (those of the result's size; smaller ones, broadcast
statistics and scalars, are not counted), writing the result and each user reading
it; copying it costs each user reading the large inputs it does not read already.
Batch norm's ``x - mean``, used by the variance and by the normalization, or a cast
feeding two reductions, is then computed in both kernels and never stored; so is the
relu backward ``select(y <= 0, 0, dy)`` of a bf16 network, which would be stored in
f32 for batch norm's backward reductions and its input gradient.
A fused op that ends in a reduction is never a producer: the reduction stays
the last step of its kernel. Splat constants used by a fused op are copied
into its body (``fuse-constants``), so the kernel needs no tensor for them.

A reduction of a reduction of the same kind (``sum`` of ``sum``, ``max`` of ``max``,
``min`` of ``min``, ``mean`` of ``mean``) whose inner result has no other user becomes one
reduction over both sets of axes (``merge-reductions``) when those are a leading or a
trailing block of the dims (a column or a row reduction over contiguous memory):
``sum(sum(x, [2, 3]), [0, 1])`` is one sum over everything. Batch norm's per-channel
statistics, ``sum(sum(x, [2, 3]), [0])``, stay two: one reduction over ``[0, 2, 3]`` of
NCHW reads strided runs and measured slower on the GPU than the row reduction and the
small column reduction. The inner reduction may close a fused body. A ``sum`` or ``mean`` then adds the same
elements in another order (and a 16-bit sum no longer rounds its partial sums): the
result is as accurate, not bitwise the same; ``max`` and ``min`` are exact.

A reshape of the result of an elementwise op that has no other user moves to the op's
operands when every reader of the reshape is a fusible consumer (``hoist-reshapes``): batch norm's ``reshape(cast(weight), [1, C, 1, 1])`` becomes
``cast(reshape(weight))``, and the cast joins the normalization's kernel instead of
being a kernel of its own. Every operand must have the result's shape (reshaped alike)
or be a scalar; the op computes the same elements.

The body of a ``tgraph.fused`` op is made of the very ops that were fused, so
running it computes exactly what the unfused chain computed.

Transposes that keep the last dim, slices, concats and reshapes of size-1 dims are
index maps (:func:`tessera.ir.graph.is_index_map`): producers and consumers both, so a
chain of them and the elementwise ops around it is one kernel that reads each input at
the index the maps give (``tessera.passes.tile_fused_maps``). A rotary embedding's
``x * cos + cat(-x[..., h:], x[..., :h]) * sin`` of a transposed projection, or the
gradients of an attention's q, k and v concatenated and transposed back into the
projection's layout, are one kernel each instead of one per slice, negation, concat and
transpose. A transpose that moves the last dim keeps its own kernel (the tiled transpose
through shared memory). The crops, reshapes and mask select after a strided
convolution's phase convolution are left alone: the implicit GEMM stores its input
gradient through them itself (:func:`stored_by_convolution`).

A fusion that would read the inputs at more than :data:`MAX_LEAF_READS` places per
element is not made (a prefix sum written as slices and concats would otherwise double
its reads at every step).

A ``tgraph.broadcast`` is a producer too. A producer that reads only tensors smaller
than its result (a broadcast, or an op of broadcast operands) is copied into each
consumer that reads it, also when another user (a matmul) keeps it: the copy reads the
small inputs with the consumer's indices, so the result is never written out for
elementwise consumers.

An ``add`` of a norm's input gradient (``tgraph.layernorm_bwd`` / ``rmsnorm_bwd``, no
other user) and a tensor of its type becomes that op's ``residual`` (``fold-norm-add``):
a residual stream's gradient, added by the norm's kernel as it writes ``dx`` (rounded
first, so the sum is the add's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.transforms.common_subexpression_elimination import cse

from tessera.ir import graph as g
from tessera.ir.attrs import rounds_specially
from tessera.passes.algebra_utils import constant_op, splat_value


def _rounds(op: Operation) -> bool:
    """A result of ``op`` is stored by a rounding policy (stochastic, saturating, scaled):
    the op keeps its own kernel, which applies the policy."""
    return any(rounds_specially(r.type) for r in op.results)


def _producer_of(op: Operation, v: SSAValue, kind: type | tuple[type, ...]) -> Operation | None:
    """The op of type ``kind`` defining ``v`` in ``op``'s block, when ``op`` is outside any
    fused body and neither op rounds by a policy: what a rewrite of the pair may move."""
    p = v.owner
    if (
        _in_fusion_body(op)
        or not isinstance(p, kind)
        or p.parent is not op.parent
        or _rounds(p) or _rounds(op)
    ):
        return None
    return p


def _index_map(op: Operation) -> bool:
    """``op`` is an index map (:func:`tessera.ir.graph.is_index_map`) of real tensors, not
    a reshape (a view, fused only where it joins two fusible ops: :func:`is_producer`)."""
    return (
        g.is_index_map(op)
        and not isinstance(op, g.ReshapeOp)
        and not any(isinstance(g.elem_of(v), builtin.ComplexType)
                    for v in (*op.operands, *op.results))
    )


def is_producer(op: Operation) -> bool:
    """``op`` may be absorbed into a consumer."""
    if _rounds(op):
        return False
    if isinstance(op, g.FusedOp):
        return op.reduction() is None
    # a broadcast inside a body reads its (smaller) input with the consumer's indices,
    # a transpose, slice or concat its input(s) at the indices its map gives
    if g.unit_reshape(op):  # a view: worth fusing only as a link between fused ops
        src = op.operands[0].owner
        return isinstance(src, Operation) and src.parent is op.parent and is_producer(src)
    return isinstance(op, (*g.FUSIBLE_ELEMENTWISE_OPS, g.BroadcastOp)) or _index_map(op)


def is_consumer(op: Operation) -> bool:
    """``op`` may absorb its producers."""
    if _rounds(op):
        return False
    return isinstance(
        op, (g.FusedOp, *g.FUSIBLE_ELEMENTWISE_OPS, *g.FUSIBLE_REDUCTION_OPS)
    ) or _index_map(op)


def fused_inputs(op: Operation) -> list[SSAValue]:
    """The tensors ``op`` reads: a fused op's inputs, another op's operands."""
    return list(op.inputs) if isinstance(op, g.FusedOp) else list(op.operands)


def _elem_bits(v: SSAValue) -> int:
    return getattr(g.elem_of(v), "bitwidth", 64)


def _big_inputs(op: Operation) -> list[SSAValue] | None:
    """The distinct inputs of ``op`` as large as its one tensor result (None when an input
    or the result is not a tensor)."""
    r = op.results[0]
    if not isinstance(r.type, builtin.TensorType):
        return None
    size = math.prod(g.shape_of(r))
    big: list[SSAValue] = []
    for v in fused_inputs(op):
        if not isinstance(v.type, builtin.TensorType):
            return None
        if math.prod(g.shape_of(v)) >= size and not any(v is w for w in big):
            big.append(v)
    return big


def duplicable(op: Operation, users: Sequence[Operation]) -> bool:
    """Computing producer ``op`` again in each of ``users`` moves no more memory than
    storing its result and reading it back (per element: reading its large inputs,
    writing the result, each user reading it), where a copy costs each user the large
    inputs it does not read already."""
    if not is_producer(op) or len(op.results) != 1:
        return False
    big = _big_inputs(op)
    if big is None:
        return False
    if not big:  # only smaller inputs (a broadcast): a copy reads nothing more
        return True
    out = _elem_bits(op.results[0])
    stored = sum(_elem_bits(v) for v in big) + out * (1 + len(users))
    copied = 0
    for u in users:
        reads = fused_inputs(u)
        copied += sum(_elem_bits(v) for v in big if not any(v is w for w in reads))
    return copied <= stored


MAX_LEAF_READS = 16
"""Most reads per element of a fused kernel's inputs (:func:`leaf_reads`). A body without
index maps reads each input once; index maps can read one at several places (a rotary
embedding reads its input at 3), and a chain of slices and concats that each read their
input twice (a prefix sum in ``log n`` steps) doubles them at every step: past this bound
the chain is cut into several kernels."""


def leaf_reads(op: g.FusedOp) -> int:
    """Reads per element of ``op``'s result of its inputs: one per input, and for a body
    with index maps one per distinct place an input is read at
    (``tessera.passes.tile_fused_maps``)."""
    from tessera.passes.tile_fused_maps import has_index_maps, mapped_value

    red = op.reduction()
    result = red.input if red is not None else op.yield_op.values[0]  # type: ignore[attr-defined]
    body = [o for o in op.block.ops if not isinstance(o, g.YieldOp) and o is not red]
    if not has_index_maps(body):
        return len(op.inputs)
    demands = mapped_value(list(op.block.args), body, result).demands
    return sum(len(demands.get(a, [])) for a in op.block.args)


def clone_into(
    op: Operation, block: Block, mapping: dict[SSAValue, SSAValue]
) -> SSAValue:
    """Clone ``op`` (a fused op's body, or ``op`` itself) into ``block`` after mapping its
    inputs; return the value standing for ``op``'s result."""
    if isinstance(op, g.FusedOp):
        inner = dict(zip(op.block.args, (mapping[v] for v in op.inputs)))
        for body_op in op.block.ops:
            if isinstance(body_op, g.YieldOp):
                return inner[body_op.values[0]]
            block.add_op(body_op.clone(value_mapper=inner))
        raise AssertionError("fused body without tgraph.yield")
    new = op.clone(value_mapper=dict(mapping))
    block.add_op(new)
    return new.results[0]


def _in_fusion_body(op: Operation) -> bool:
    """Whether ``op`` is in the body of a fusion op (``tgraph.fused``,
    ``tgraph.fused_reductions``): its kernel is already formed."""
    return isinstance(op.parent_op(), g.FusedOp | g.FusedReductionsOp)


def merge(producer: Operation, consumer: Operation, value: SSAValue) -> g.FusedOp:
    """One fused op computing ``consumer`` with ``producer`` (whose result ``value`` is used
    only by ``consumer``) inlined into it."""
    inputs: list[SSAValue] = []
    for v in fused_inputs(producer) + [v for v in fused_inputs(consumer) if v is not value]:
        if not any(v is w for w in inputs):
            inputs.append(v)
    block = Block(arg_types=[v.type for v in inputs])
    outer = dict(zip(inputs, block.args))
    produced = clone_into(producer, block, outer)
    result = clone_into(consumer, block, {**outer, value: produced})
    block.add_op(g.YieldOp(result))
    # A producer copied into several users that meet again in this body (a running
    # maximum read by its comparison and its select) is computed once: without this the
    # copies would double at every step of such a chain.
    cse(block)
    return g.FusedOp(inputs, consumer.results[0].type, Region(block))


class FuseProducerIntoConsumer(RewritePattern):
    """consumer(producer(...), ...) -> tgraph.fused { producer; consumer } when the
    consumer is the producer's only user. With ``fuse_reductions=False`` reductions
    are not absorbed into fused ops."""

    def __init__(self, fuse_reductions: bool = True, keep: frozenset[int] = frozenset()):
        self.fuse_reductions = fuse_reductions
        self.keep = keep
        """``id`` of ops left unfused (:func:`stored_by_convolution`)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if (
            not is_consumer(op)
            or len(op.results) != 1
            or _in_fusion_body(op)
        ):
            return
        if not self.fuse_reductions and isinstance(op, g.FUSIBLE_REDUCTION_OPS):
            return
        if id(op) in self.keep:
            return
        for v in fused_inputs(op):
            p = v.owner
            if (
                not isinstance(p, Operation)
                or id(p) in self.keep
                or p.parent is not op.parent
                or len(p.results) != 1
                or not is_producer(p)
            ):
                continue
            users = {id(u.operation): u.operation for u in v.uses}
            # a producer reading only tensors smaller than its result (a broadcast) is
            # copied into every consumer even when another user keeps it: the copy reads
            # those small inputs instead of the result
            if len(users) > 1 and _big_inputs(p) != [] and not (
                all(self._absorbs(u, p) for u in users.values())
                and duplicable(p, list(users.values()))
            ):
                continue
            merged = merge(p, op, v)
            if leaf_reads(merged) > MAX_LEAF_READS:
                merged.erase()  # never inserted: drop its uses of the operands
                continue
            rewriter.replace(op, merged)
            if not v.uses:
                rewriter.erase(p)
            return

    def _absorbs(self, user: Operation, producer: Operation) -> bool:
        """``user`` would take a copy of ``producer`` (a consumer beside it)."""
        if not is_consumer(user) or len(user.results) != 1 or user.parent is not producer.parent:
            return False
        return self.fuse_reductions or not isinstance(user, g.FUSIBLE_REDUCTION_OPS)


def _inner_reduction(v: SSAValue) -> g.ReductionOp | None:
    """The reduction that computes ``v``: its defining op, or the reduction closing the
    body of the fused op defining it."""
    op = v.owner
    if isinstance(op, g.FUSIBLE_REDUCTION_OPS):
        return op  # type: ignore[return-value]
    if isinstance(op, g.FusedOp):
        return op.reduction()  # type: ignore[return-value]
    return None


def merged_axes(inner: g.ReductionOp, outer: g.ReductionOp) -> list[int]:
    """The axes of ``inner``'s input that ``outer(inner(x))`` reduces over."""
    first = inner.axis_list()
    if inner.keepdims is not None:
        second = outer.axis_list()
    else:
        kept = [k for k in range(len(g.shape_of(inner.input))) if k not in first]
        second = [kept[b] for b in outer.axis_list()]
    return sorted({*first, *second})


def _row_or_column(shape: Sequence[int], axes: Sequence[int]) -> bool:
    """Whether reducing ``shape`` over ``axes`` reduces a leading or trailing block of its
    dims (size-1 dims aside): a column or row reduction, each one kernel over contiguous
    memory. A middle block left standing (batch norm's ``[0, 2, 3]`` of NCHW, channels
    kept) reads strided runs and measured slower on the GPU than the row reduction over
    ``[2, 3]`` and the small column reduction after it (ResNet-50 training, H100)."""
    dims = [k for k, d in enumerate(shape) if d != 1]
    flags = [k in axes for k in dims]
    if all(flags) or not any(flags):
        return True
    first = flags.index(not flags[0])
    return all(f == flags[first] for f in flags[first:])


class MergeReductionChain(RewritePattern):
    """``r(r(x, A), B)`` (``r`` one of sum, max, min, mean; the inner result used only by
    the outer reduction, the inner reduction possibly closing a fused body) becomes
    ``r(x, A + B)``, reshaped to the outer result's shape when ``keepdims`` differ."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if (
            not isinstance(op, g.FUSIBLE_REDUCTION_OPS)
            or _in_fusion_body(op)
            or _rounds(op)
        ):
            return
        outer: g.ReductionOp = op  # type: ignore[assignment]
        producer = outer.input.owner
        inner = _inner_reduction(outer.input)
        if (
            inner is None
            or type(inner) is not type(outer)
            or not isinstance(producer, Operation)
            or producer.parent is not outer.parent
            or _rounds(producer)
            or len(list(outer.input.uses)) != 1
        ):
            return
        axes = merged_axes(inner, outer)
        shape = g.shape_of(inner.input)
        if not _row_or_column(shape, axes):
            return
        keep = outer.keepdims is not None
        dims = [1 if k in axes else d for k, d in enumerate(shape)] if keep else [
            d for k, d in enumerate(shape) if k not in axes
        ]
        rtype = builtin.TensorType(g.elem_of(outer.result), dims)
        if isinstance(producer, g.FusedOp):
            mapping: dict[SSAValue, SSAValue] = {}
            block = Block(arg_types=[a.type for a in producer.block.args])
            mapping.update(zip(producer.block.args, block.args))
            for body_op in producer.block.ops:
                if body_op is inner:
                    new_red = type(inner)(mapping[inner.input], axes, keep, rtype)
                    block.add_op(new_red)
                    block.add_op(g.YieldOp(new_red.result))
                    break
                block.add_op(body_op.clone(value_mapper=mapping))
            merged: Operation = g.FusedOp(list(producer.inputs), rtype, Region(block))
        else:
            merged = type(inner)(inner.input, axes, keep, rtype)
        new_ops = [merged]
        if rtype != outer.result.type:
            new_ops.append(g.ReshapeOp.create(operands=[merged.results[0]], result_types=[outer.result.type]))
        rewriter.replace(outer, new_ops, [new_ops[-1].results[0]])
        rewriter.erase(producer)


class HoistReshape(RewritePattern):
    """``reshape(e(x, y, s))`` -> ``e(reshape(x), reshape(y), s)`` for an elementwise ``e``
    whose result only the reshape uses, its operands of the result's shape or scalars
    ``s`` (see the module docstring). Of a 0-d ``e`` every operand is reshaped: its 0-d
    operands are its shape, not broadcasts."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ReshapeOp, rewriter: PatternRewriter) -> None:
        e = _producer_of(op, op.input, g.FUSIBLE_ELEMENTWISE_OPS)
        if (
            e is None
            or len(e.results) != 1
            or len(list(e.results[0].uses)) != 1
            # the op moves into the kernels that read the reshape: only worth it when all
            # of them can take it (a matmul cannot; moved there, the op would be a kernel
            # of its own, cut off by the reshape from the producer it fused with)
            or not op.result.uses
            or not all(is_consumer(u.operation) for u in op.result.uses)
        ):
            return
        shape = g.shape_of(e.results[0])
        new_shape = g.shape_of(op.result)
        for v in e.operands:
            if not isinstance(v.type, builtin.TensorType):
                return
            s = g.shape_of(v)
            if s != () and (s != shape or isinstance(v.owner, g.ConstantOp)):
                return
        reshapes: list[Operation] = []
        operands: list[SSAValue] = []
        for v in e.operands:
            if g.shape_of(v) == () and shape != ():  # a scalar broadcast to the result
                operands.append(v)
                continue
            r = g.ReshapeOp.create(
                operands=[v], result_types=[builtin.TensorType(g.elem_of(v), new_shape)]
            )
            reshapes.append(r)
            operands.append(r.results[0])
        new = type(e).create(
            operands=operands, result_types=[op.result.type],
            properties=dict(e.properties), attributes=dict(e.attributes),
        )
        rewriter.replace(op, [*reshapes, new], [new.results[0]])
        rewriter.erase(e)


class StackConcat(RewritePattern):
    """``reshape(concat(x_1..x_k, axis a))`` splitting dim ``a`` into ``[k, n]`` (each
    ``x_i`` of size ``n`` along ``a``: a ``torch.stack`` written as a concat and a view)
    -> ``concat(reshape(x_1)..reshape(x_k), axis a)`` of the inputs viewed with a size-1
    dim ``a``: the concat then joins the index maps after it (an attention's dq, dk, dv
    stacked and transposed back into the projection's layout) in one kernel. Part of
    ``hoist-reshapes``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ReshapeOp, rewriter: PatternRewriter) -> None:
        cat = _producer_of(op, op.input, g.ConcatOp)
        if not isinstance(cat, g.ConcatOp) or len(list(cat.result.uses)) != 1:
            return
        shape = list(g.shape_of(cat.result))
        a = cat.axis.value.data % len(shape)
        sizes = {g.shape_of(v)[a] for v in cat.inputs}
        k = len(cat.inputs)
        if len(sizes) != 1 or k < 2:
            return
        (n,) = sizes
        if list(g.shape_of(op.result)) != [*shape[:a], k, n, *shape[a + 1:]]:
            return
        one = builtin.TensorType(g.elem_of(cat.result), [*shape[:a], 1, n, *shape[a + 1:]])
        views = [g.ReshapeOp.create(operands=[v], result_types=[one]) for v in cat.inputs]
        new = g.ConcatOp.create(
            operands=[v.results[0] for v in views], result_types=[op.result.type],
            properties={"axis": builtin.IntegerAttr(a, 64)},
        )
        rewriter.replace(op, [*views, new], [new.results[0]])
        rewriter.erase(cat)


def _split_axis(short: Sequence[int], long: Sequence[int]) -> tuple[int, list[int]] | None:
    """``(a, f)`` when ``long`` is ``short`` with its dim ``a`` split into the dims ``f``
    (at least two, ``prod(f) == short[a]``), else None."""
    r = len(short)
    if len(long) <= r:
        return None
    p = 0
    while p < r and short[p] == long[p]:
        p += 1
    q = 0
    while q < r - p and short[r - 1 - q] == long[len(long) - 1 - q]:
        q += 1
    if p + q != r - 1:
        return None
    f = list(long[p:len(long) - q])
    return (p, f) if len(f) >= 2 and math.prod(f) == short[p] else None


class SliceBeforeSplit(RewritePattern):
    """``reshape(slice(x))`` splitting the sliced dim ``a`` into ``[m, *inner]``, where the
    slice's start and ``x``'s dim are multiples of ``prod(inner)`` and its step 1 (a fused
    q/k/v projection cut into heads: ``x[..., 768:1536].view(.., 12, 64)``) ->
    ``slice(reshape(x))`` with ``x``'s dim split alike and the slice on the outer part:
    the reshape is a view of ``x`` and the slice joins the transpose after it in one
    kernel. Part of ``hoist-reshapes``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ReshapeOp, rewriter: PatternRewriter) -> None:
        sl = _producer_of(op, op.input, g.SliceOp)
        if not isinstance(sl, g.SliceOp):
            return
        found = _split_axis(g.shape_of(sl.result), g.shape_of(op.result))
        if found is None:
            return
        a, f = found
        inner = math.prod(f[1:])
        xs = list(g.shape_of(sl.input))
        start = [int(v) for v in sl.start.get_values()]
        limit = [int(v) for v in sl.limit.get_values()]
        stride = [int(v) for v in sl.stride.get_values()]
        if stride[a] != 1 or start[a] % inner or xs[a] % inner:
            return
        view_t = builtin.TensorType(g.elem_of(sl.input), [*xs[:a], xs[a] // inner, *f[1:], *xs[a + 1:]])
        view = g.ReshapeOp.create(operands=[sl.input], result_types=[view_t])
        tail = [0] * (len(f) - 1)
        new = g.SliceOp.create(
            operands=[view.results[0]], result_types=[op.result.type],
            properties={
                "start": builtin.DenseArrayBase.from_list(
                    builtin.i64, [*start[:a], start[a] // inner, *tail, *start[a + 1:]]),
                "limit": builtin.DenseArrayBase.from_list(
                    builtin.i64, [*limit[:a], start[a] // inner + f[0], *f[1:], *limit[a + 1:]]),
                "stride": builtin.DenseArrayBase.from_list(
                    builtin.i64, [*stride[:a], 1, *[1] * len(tail), *stride[a + 1:]]),
            },
        )
        rewriter.replace(op, [view, new], [new.results[0]])
        if not sl.result.uses:
            rewriter.erase(sl)


class ConcatBeforeMerge(RewritePattern):
    """``concat(reshape(y_1)..reshape(y_k), axis a)`` where each reshape merges dims of
    ``y_i`` into dim ``a`` with the same inner dims (heads merged back into a
    projection's width, ``[.., 12, 64] -> [.., 768]``, then concatenated) ->
    ``reshape(concat(y_1..y_k))`` concatenated along the outer merged dim: the concat
    joins the ops making the ``y_i`` (their transposes) in one kernel, and the reshape
    is a view. Part of ``hoist-reshapes``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ConcatOp, rewriter: PatternRewriter) -> None:
        if _in_fusion_body(op) or _rounds(op) or len(op.inputs) < 2:
            return
        a = op.axis.value.data % len(g.shape_of(op.result))
        ys: list[SSAValue] = []
        tails: set[tuple[int, ...]] = set()
        for v in op.inputs:
            r = _producer_of(op, v, g.ReshapeOp)
            if not isinstance(r, g.ReshapeOp):
                return
            found = _split_axis(g.shape_of(v), g.shape_of(r.input))
            if found is None or found[0] != a:
                return
            tails.add(tuple(found[1][1:]))
            ys.append(r.input)
        if len(tails) != 1:
            return
        shape = list(g.shape_of(ys[0]))
        shape[a] = sum(g.shape_of(y)[a] for y in ys)
        cat = g.ConcatOp.create(
            operands=ys, result_types=[builtin.TensorType(g.elem_of(op.result), shape)],
            properties={"axis": builtin.IntegerAttr(a, 64)},
        )
        view = g.ReshapeOp.create(operands=[cat.results[0]], result_types=[op.result.type])
        olds = [v.owner for v in op.inputs]
        rewriter.replace(op, [cat, view], [view.results[0]])
        for r in olds:
            if isinstance(r, Operation) and r.parent is not None and not r.results[0].uses:
                rewriter.erase(r)


class MergeDuplicateReshapes(RewritePattern):
    """Reshapes of one value to one type, in one block, are one: the later ones are replaced
    by the first (a reshape hoisted above an elementwise op reshapes each operand, so a
    value that several hoisted ops read is reshaped once per op; merged, the value keeps
    one user and its own producer can move too)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ReshapeOp, rewriter: PatternRewriter) -> None:
        block = op.parent
        if block is None:
            return
        later = []
        after = False
        others = {id(u.operation) for u in op.input.uses if u.operation is not op}
        if not others:
            return
        for other in block.ops:
            if other is op:
                after = True
            elif (after and id(other) in others and isinstance(other, g.ReshapeOp)
                  and other.result.type == op.result.type):
                later.append(other)
        for other in later:
            rewriter.replace(other, [], [op.result])


class FoldAddIntoNormBwd(RewritePattern):
    """``add(layernorm_bwd(...), r)`` (or ``rmsnorm_bwd``), where the gradient has no
    other user and ``r`` has its type: the gradient op's ``residual`` (``fold-norm-add``).
    A residual stream's gradient is the sum of the norm's input gradient and the stream's
    own; the norm's kernel adds it as it writes, with ``dx`` rounded first, so the result
    is the add's exactly and one tensor is neither written nor read again."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.AddOp, rewriter: PatternRewriter) -> None:
        for mine, other in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            bwd = mine.owner
            if (
                isinstance(bwd, g.LayerNormBwdOp | g.RMSNormBwdOp)
                and bwd.residual is None
                and len(list(mine.uses)) == 1
                and other.type == mine.type == op.result.type
                and not _rounds(op) and not _rounds(bwd)
            ):
                slots = [name for name, _ in type(bwd).get_irdl_definition().operands]
                values = {name: getattr(bwd, name) for name in slots}
                values["residual"] = other
                new = type(bwd).build(
                    operands=[[] if values[n] is None else [values[n]] for n in slots],
                    result_types=[op.result.type],
                )
                rewriter.replace(op, new)
                rewriter.erase(bwd)
                return


class FuseSplatConstants(RewritePattern):
    """Splat-constant operands of a ``tgraph.fused`` op are recreated inside its body and
    dropped from its operands."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.FusedOp, rewriter: PatternRewriter) -> None:
        splats = [i for i, v in enumerate(op.inputs) if splat_value(v) is not None]
        if not splats:
            return
        inputs = [v for i, v in enumerate(op.inputs) if i not in splats]
        block = Block(arg_types=[v.type for v in inputs])
        mapping: dict[SSAValue, SSAValue] = {}
        args = iter(block.args)
        for i, (old_arg, v) in enumerate(zip(op.block.args, op.inputs)):
            if i in splats:
                c = constant_op(v)
                assert c is not None
                inner = c.clone()
                block.add_op(inner)
                mapping[old_arg] = inner.result
            else:
                mapping[old_arg] = next(args)
        for body_op in op.block.ops:
            block.add_op(body_op.clone(value_mapper=mapping))
        rewriter.replace(op, g.FusedOp(inputs, op.result.type, Region(block)))


def stored_by_convolution(module: builtin.ModuleOp) -> frozenset[int]:
    """``id`` of the data movement around a strided convolution's phase convolution that
    its implicit GEMM does itself: the crops, reshapes and mask select storing its input
    gradient (``tessera.passes.sm90.conv_interleave.match``) and the pads, reverse and
    transpose building its kernel from the forward weight
    (``tessera.passes.sm90.conv_phase_weight.match``). They stay as they are, for the
    lowering to recognize."""
    from tessera.passes.sm90 import conv_interleave, conv_phase_weight

    keep: set[int] = set()
    for conv in module.walk():
        if not isinstance(conv, g.Conv2dOp):
            continue
        if (m := conv_interleave.match(conv)) is not None:
            keep.update(id(o) for o in m[1])
        if (w := conv_phase_weight.match(conv)) is not None:
            keep.update(id(o) for o in w[1])
    return frozenset(keep)


@dataclass(frozen=True)
class FuseElementwisePass(ModulePass):
    """Fuse elementwise chains (and a trailing reduction) into ``tgraph.fused`` ops."""

    name = "fuse-elementwise"

    fuse_reductions: bool = True
    fuse_constants: bool = True
    merge_reductions: bool = True
    hoist_reshapes: bool = True
    fold_norm_add: bool = True

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        first: list[RewritePattern] = []
        if self.fold_norm_add:
            first.append(FoldAddIntoNormBwd())
        if self.merge_reductions:
            first.append(MergeReductionChain())
        if self.hoist_reshapes:
            first += [MergeDuplicateReshapes(), HoistReshape(), StackConcat(),
                      SliceBeforeSplit(), ConcatBeforeMerge()]
        if first:  # before fusion, so that whole elementwise chains move and merge
            PatternRewriteWalker(GreedyRewritePatternApplier(first)).rewrite_module(op)
        patterns: list[RewritePattern] = [
            FuseProducerIntoConsumer(self.fuse_reductions, stored_by_convolution(op))
        ]
        if self.fuse_constants:
            patterns.append(FuseSplatConstants())
        PatternRewriteWalker(GreedyRewritePatternApplier(patterns)).rewrite_module(op)
