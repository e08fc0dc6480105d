"""SSA dominance and scoping: every use of a value must be dominated by its definition.

xDSL's verifier checks each op's own constraints but not where its operands come
from, so IR such as ``%y = tgraph.exp %z`` before ``%z = ...`` parses and
verifies, and a pass that walks the ops in order then meets a value it has not
seen. :func:`find_dominance_violation` applies MLIR's rules before any pass runs:

* a value defined by an op is visible only in the op's block, after the op, and
  in the regions of the ops that follow it (and, in a multi-block region, in the
  blocks its block dominates);
* a block argument is visible in its block and in the blocks that block dominates;
* nothing defined outside an ``IsolatedFromAbove`` op (``func.func``) is visible
  inside it;
* the body of ``builtin.module`` is a graph region: order does not matter there.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, OpResult, Region, SSAValue
from xdsl.irdl.dominance import DominanceInfo
from xdsl.traits import IsolatedFromAbove


@dataclass(frozen=True)
class DominanceViolation:
    """The op whose operand ``index`` is not visible where the op stands."""

    op: Operation
    index: int
    message: str


class _Dominance:
    """Positions of ops in their blocks and block dominance per region, computed on demand."""

    def __init__(self) -> None:
        self._index: dict[Block, dict[Operation, int]] = {}
        self._regions: dict[Region, DominanceInfo] = {}

    def index(self, op: Operation) -> int:
        block = op.parent_block()
        assert block is not None
        table = self._index.get(block)
        if table is None:
            table = {o: i for i, o in enumerate(block.ops)}
            self._index[block] = table
        return table[op]

    def block_dominates(self, a: Block, b: Block) -> bool:
        region = a.parent
        assert region is not None
        info = self._regions.get(region)
        if info is None:
            info = DominanceInfo(region)
            self._regions[region] = info
        return info.dominates(a, b)


def _is_graph_region(block: Block) -> bool:
    parent = block.parent_op()
    return isinstance(parent, ModuleOp)


def _value_name(value: SSAValue) -> str:
    return f"%{value.name_hint}" if value.name_hint else f"of type {value.type}"


def _check_operand(
    use: Operation, index: int, value: SSAValue, dom: _Dominance
) -> DominanceViolation | None:
    if isinstance(value, OpResult):
        def_block = value.op.parent_block()
        def_op: Operation | None = value.op
    elif isinstance(value, BlockArgument):
        def_block = value.block
        def_op = None
    else:  # a value with no owner in the IR (an erased op's result)
        return DominanceViolation(use, index, f"operand #{index} is not defined in the IR")
    name = _value_name(value)
    if def_block is None:
        return DominanceViolation(use, index, f"operand #{index} ({name}) is not defined in the IR")
    # Walk up from the use to the ancestor that stands in the defining block's region.
    ancestor: Operation | None = use
    while ancestor is not None:
        block = ancestor.parent_block()
        if block is None:
            ancestor = None
            break
        if block.parent is def_block.parent:
            break
        parent = block.parent_op()
        if parent is not None and parent.has_trait(IsolatedFromAbove):
            return DominanceViolation(
                use,
                index,
                f"operand #{index} ({name}) is defined outside the enclosing "
                f"'{parent.name}', which is isolated from above",
            )
        ancestor = parent
    if ancestor is None:
        return DominanceViolation(use, index, f"operand #{index} ({name}) is not in scope here")
    block = ancestor.parent_block()
    assert block is not None
    if block is not def_block:
        if not dom.block_dominates(def_block, block):
            return DominanceViolation(
                use, index, f"operand #{index} ({name}) does not dominate this use"
            )
        return None
    if def_op is None or _is_graph_region(block):
        return None
    if ancestor is def_op or dom.index(def_op) > dom.index(ancestor):
        return DominanceViolation(
            use, index, f"operand #{index} ({name}) is used before it is defined"
        )
    return None


def find_dominance_violation(root: Operation) -> DominanceViolation | None:
    """The first use in ``root`` (in walk order) that its definition does not dominate."""
    dom = _Dominance()
    for op in root.walk():
        for index, value in enumerate(op.operands):
            violation = _check_operand(op, index, value, dom)
            if violation is not None:
                return violation
    return None
