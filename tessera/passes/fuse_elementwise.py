"""``fuse-elementwise``: chains of elementwise ops (with an optional trailing reduction)
become one ``tgraph.fused`` op, which lowers to one kernel.

A producer is absorbed into its consumer when the consumer is the producer's
only user, so no value is computed twice and every intermediate tensor of the
chain disappears from the graph. Producers are elementwise ops and fused ops
without a reduction; consumers are elementwise ops, reductions and fused ops.
A fused op that ends in a reduction is never a producer: the reduction stays
the last step of its kernel. Splat constants used by a fused op are copied
into its body (``fuse-constants``), so the kernel needs no tensor for them.

The body of a ``tgraph.fused`` op is made of the very ops that were fused, so
running it computes exactly what the unfused chain computed.
"""

from __future__ import annotations

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
                or any(u.operation is not op for u in v.uses)
            ):
                continue
            rewriter.replace(op, merge(p, op, v))
            rewriter.erase(p)
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
