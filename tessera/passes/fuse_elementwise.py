"""``fuse-elementwise``: chains of elementwise ops (with an optional trailing reduction)
become one ``tgraph.fused`` op, which lowers to one kernel.

A producer is absorbed into its consumer when the consumer is the producer's
only user, so every intermediate tensor of the chain disappears from the graph.
Producers are elementwise ops and fused ops without a reduction; consumers are
elementwise ops, reductions and fused ops.

A producer with several users, all of them consumers, is copied into each of them
when that reads no more memory than storing and rereading its result
(:func:`duplicable`): it reads one tensor of its result's size, of an element no
wider than the result's, the other inputs smaller (broadcast statistics, scalars).
Batch norm's ``x - mean``, used by the variance and by the normalization, or a cast
feeding two reductions, is then computed in both kernels and never stored.
A fused op that ends in a reduction is never a producer: the reduction stays
the last step of its kernel. Splat constants used by a fused op are copied
into its body (``fuse-constants``), so the kernel needs no tensor for them.

The body of a ``tgraph.fused`` op is made of the very ops that were fused, so
running it computes exactly what the unfused chain computed.
"""

from __future__ import annotations

import math
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

from tessera.ir import graph as g
from tessera.ir.attrs import rounds_specially
from tessera.passes.algebra_utils import constant_op, splat_value


def _rounds(op: Operation) -> bool:
    """A result of ``op`` is stored by a rounding policy (stochastic, saturating, scaled):
    the op keeps its own kernel, which applies the policy."""
    return any(rounds_specially(r.type) for r in op.results)


def is_producer(op: Operation) -> bool:
    """``op`` may be absorbed into a consumer."""
    if _rounds(op):
        return False
    if isinstance(op, g.FusedOp):
        return op.reduction() is None
    return isinstance(op, g.FUSIBLE_ELEMENTWISE_OPS)


def is_consumer(op: Operation) -> bool:
    """``op`` may absorb its producers."""
    return not _rounds(op) and isinstance(op, (g.FusedOp, *g.FUSIBLE_ELEMENTWISE_OPS, *g.FUSIBLE_REDUCTION_OPS))


def _inputs(op: Operation) -> list[SSAValue]:
    return list(op.inputs) if isinstance(op, g.FusedOp) else list(op.operands)


def _elem_bits(v: SSAValue) -> int:
    return getattr(g.elem_of(v), "bitwidth", 64)


def duplicable(op: Operation) -> bool:
    """Computing producer ``op`` again in each consumer reads no more memory than storing
    its result and reading it back: it reads exactly one tensor as large as its result,
    with elements no wider than the result's, and only smaller tensors besides."""
    if not is_producer(op) or len(op.results) != 1:
        return False
    r = op.results[0]
    if not isinstance(r.type, builtin.TensorType):
        return False
    size = math.prod(g.shape_of(r))
    big = []
    for v in _inputs(op):
        if not isinstance(v.type, builtin.TensorType):
            return False
        if math.prod(g.shape_of(v)) >= size and not any(v is w for w in big):
            big.append(v)
    return len(big) == 1 and _elem_bits(big[0]) <= _elem_bits(r)


def _clone_into(
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


def merge(producer: Operation, consumer: Operation, value: SSAValue) -> g.FusedOp:
    """One fused op computing ``consumer`` with ``producer`` (whose result ``value`` is used
    only by ``consumer``) inlined into it."""
    inputs: list[SSAValue] = []
    for v in _inputs(producer) + [v for v in _inputs(consumer) if v is not value]:
        if not any(v is w for w in inputs):
            inputs.append(v)
    block = Block(arg_types=[v.type for v in inputs])
    outer = dict(zip(inputs, block.args))
    produced = _clone_into(producer, block, outer)
    result = _clone_into(consumer, block, {**outer, value: produced})
    block.add_op(g.YieldOp(result))
    return g.FusedOp(inputs, consumer.results[0].type, Region(block))


class FuseProducerIntoConsumer(RewritePattern):
    """consumer(producer(...), ...) -> tgraph.fused { producer; consumer } when the
    consumer is the producer's only user. With ``fuse_reductions=False`` reductions
    are not absorbed into fused ops."""

    def __init__(self, fuse_reductions: bool = True):
        self.fuse_reductions = fuse_reductions

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if (
            not is_consumer(op)
            or len(op.results) != 1
            or isinstance(op.parent_op(), g.FusedOp)
        ):
            return
        if not self.fuse_reductions and isinstance(op, g.FUSIBLE_REDUCTION_OPS):
            return
        for v in _inputs(op):
            p = v.owner
            if (
                not isinstance(p, Operation)
                or p.parent is not op.parent
                or len(p.results) != 1
                or not is_producer(p)
            ):
                continue
            users = {id(u.operation): u.operation for u in v.uses}
            if len(users) > 1 and not (
                duplicable(p) and all(self._absorbs(u, p) for u in users.values())
            ):
                continue
            rewriter.replace(op, merge(p, op, v))
            if not v.uses:
                rewriter.erase(p)
            return

    def _absorbs(self, user: Operation, producer: Operation) -> bool:
        """``user`` would take a copy of ``producer`` (a consumer beside it)."""
        if not is_consumer(user) or len(user.results) != 1 or user.parent is not producer.parent:
            return False
        return self.fuse_reductions or not isinstance(user, g.FUSIBLE_REDUCTION_OPS)


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


@dataclass(frozen=True)
class FuseElementwisePass(ModulePass):
    """Fuse elementwise chains (and a trailing reduction) into ``tgraph.fused`` ops."""

    name = "fuse-elementwise"

    fuse_reductions: bool = True
    fuse_constants: bool = True

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        patterns: list[RewritePattern] = [FuseProducerIntoConsumer(self.fuse_reductions)]
        if self.fuse_constants:
            patterns.append(FuseSplatConstants())
        PatternRewriteWalker(GreedyRewritePatternApplier(patterns)).rewrite_module(op)
