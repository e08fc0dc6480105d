"""``merge-sibling-reductions``: reductions over the same rows of the same tensors become
one ``tgraph.fused_reductions`` op, which reads those tensors once.

Batch norm's backward reduces ``g`` and ``g * (x - mean)`` over each (sample, channel)
plane, with ``g`` the relu backward ``select(y <= 0, 0, dy)``: after ``fuse-elementwise``
these are two ``tgraph.fused`` ops ending in ``tgraph.sum`` over ``[2, 3]``, and two row
kernels that both read ``y`` and ``dy``. Merged, one row kernel reads ``y``, ``dy`` and
``x`` once and folds both sums. Its forward statistics, ``sum(x - k)`` and
``sum((x - k)^2)`` of a per-plane shift ``k``, merge the same way.

Candidates are ``tgraph.fused`` ops closed by a reduction (``sum``/``max``/``min``/``mean``)
whose body holds only elementwise ops and splat constants, and plain reductions. Two
candidates merge when

* their reductions reduce the same axes of values of the same shape, with the same
  ``keepdims``;
* they read at least one operand of that full shape in common (merging must save a read);
* every operand of the later one is defined before the earlier one, which is where the
  merged op is placed (so neither depends on the other, and every use of either result
  comes after it);
* the merged op is one row kernel: the reductions are over trailing dims with f32
  accumulation, as :func:`tessera.passes.tile_fused_rows.applies` decides (anything
  else would need the generic kernels, which compute one reduction each).

The body of the merged op is the members' bodies, cloned in order, with what they
compute alike computed once (``cse``), and its results are their reductions' results:
each result is the reduction of the same values. A fused member's reduction was a row
kernel already and adds in the same order; a plain reduction's kernel adds in another
order than the row kernel, so its result is as accurate, not bitwise the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, f32
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.transforms.common_subexpression_elimination import cse

from tessera.ir import graph as g
from tessera.passes import tile_fused_rows
from tessera.passes.fuse_elementwise import clone_into, fused_inputs


def _reduction(op: Operation) -> g.ReductionOp | None:
    """The reduction a candidate ends in, or None when ``op`` is not a candidate."""
    if isinstance(op, g.FUSIBLE_REDUCTION_OPS):
        return op  # type: ignore[return-value]
    if not isinstance(op, g.FusedOp):
        return None
    red = op.reduction()
    if red is None or op.yield_op.values[0] is not red.results[0]:
        return None
    body = [o for o in op.block.ops if not isinstance(o, g.YieldOp) and o is not red]
    if not all(isinstance(o, (*g.FUSIBLE_ELEMENTWISE_OPS, g.ConstantOp)) for o in body):
        return None
    if any(isinstance(o, g.FUSIBLE_REDUCTION_OPS) for o in body):
        return None
    return red  # type: ignore[return-value]


def _key(red: g.ReductionOp) -> tuple[object, ...]:
    return (tuple(g.shape_of(red.input)), tuple(red.axis_list()), red.keepdims is not None)


def _accum(t: Attribute) -> Attribute:
    """The type a row kernel accumulates a value of type ``t`` in."""
    return f32 if isinstance(t, Float32Type | Float16Type | BFloat16Type) else t


def merged(members: Sequence[Operation]) -> g.FusedReductionsOp:
    """One ``tgraph.fused_reductions`` op computing ``members``' results, in order."""
    inputs: list[SSAValue] = []
    for m in members:
        for v in fused_inputs(m):
            if not any(v is w for w in inputs):
                inputs.append(v)
    block = Block(arg_types=[v.type for v in inputs])
    outer = dict(zip(inputs, block.args))
    results = [clone_into(m, block, outer) for m in members]
    block.add_op(g.YieldOp(*results))
    cse(block)  # what the members computed alike (the relu backward of both sums) once
    return g.FusedReductionsOp(inputs, [m.results[0].type for m in members], Region(block))


def _acceptable(op: g.FusedReductionsOp) -> bool:
    """``op`` (a trial merge) is one row kernel, and its members computed different
    values (members that compute the same reduction are left to ``cse``; their merged body
    would yield one value twice)."""
    values = list(op.yield_op.values)
    if len({id(v) for v in values}) != len(values):
        return False
    reds = op.reductions()
    acc = [_accum(g.elem_of(r.operands[0])) for r in reds]
    return tile_fused_rows.applies(reds, list(op.block.args), acc)  # type: ignore[arg-type]


def merge_block(block: Block) -> int:
    """Merge the sibling reductions of ``block``; the number of ops merged away."""
    position = {op: i for i, op in enumerate(block.ops)}

    def before(v: SSAValue, at: int) -> bool:
        """``v`` is defined before the op at ``at`` (or outside the block)."""
        owner = v.owner
        if isinstance(owner, Operation) and owner.parent_block() is block:
            return position[owner] < at
        return True

    groups: dict[tuple[object, ...], list[list[Operation]]] = {}
    for op in list(block.ops):
        red = _reduction(op)
        if red is None:
            continue
        shape = list(g.shape_of(red.input))
        full = {v for v in fused_inputs(op) if list(g.shape_of(v)) == shape}
        placed = False
        for group in groups.setdefault(_key(red), []):
            anchor = position[group[0]]
            shared = any(any(v is w for v in full) for m in group for w in fused_inputs(m))
            if not shared or not all(before(v, anchor) for v in fused_inputs(op)):
                continue
            trial = merged([*group, op])
            if _acceptable(trial):
                group.append(op)
                placed = True
                trial.erase()
                break
            trial.erase()
        if not placed:
            groups[_key(red)].append([op])
    count = 0
    for group in (gr for grs in groups.values() for gr in grs if len(gr) > 1):
        new = merged(group)
        block.insert_op_before(new, group[0])
        for m, r in zip(group, new.outputs):
            m.results[0].replace_all_uses_with(r)
        for m in group:
            block.erase_op(m)
        count += len(group) - 1
    return count


@dataclass(frozen=True)
class MergeSiblingReductionsPass(ModulePass):
    """Merge reductions over the same rows of shared tensors into
    ``tgraph.fused_reductions`` ops (one row kernel each)."""

    name = "merge-sibling-reductions"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        blocks = [
            block for inner in op.walk() if not isinstance(inner, g.FusedOp | g.FusedReductionsOp)
            for region in inner.regions for block in region.blocks
        ]
        for block in blocks:
            merge_block(block)


__all__ = ["MergeSiblingReductionsPass", "merge_block", "merged"]
