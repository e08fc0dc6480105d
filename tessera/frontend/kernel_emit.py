"""The IR builder of the kernel front end: scalar ops, structured control flow, lane ids.

:class:`Emitter` extends :class:`~tessera.frontend.kernel_values.ScalarBuilder`
with ``scf.for`` / ``scf.if`` construction from Python callbacks and with the
lane coordinates of ``ttile`` (created once, at the top of the kernel, so they
dominate every use).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from xdsl.dialects import scf
from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.ir import Attribute, Block, Operation, Region

from tessera.frontend.kernel_values import INDEX, Scalar, ScalarBuilder
from tessera.ir import tile as ttile

LANE_OPS: dict[str, Callable[[], Operation]] = {
    "local_id": ttile.LocalIdOp,
    "linear_id": ttile.LinearIdOp,
    "lane_id": ttile.LaneIdOp,
    "warp_id": ttile.WarpIdOp,
    "group_size": ttile.GroupSizeOp,
    "tile_id": lambda: ttile.TileIdOp("x"),
    "num_tiles": lambda: ttile.NumTilesOp("x"),
}


class Emitter(ScalarBuilder):
    """Builds the body of one ``ttile.kernel``."""

    def __init__(self, entry: Block, group_size: int):
        super().__init__(entry)
        self.entry = entry
        self.group_size = group_size
        self._lane: dict[str, Scalar] = {}
        self.used_lane_ops: set[str] = set()

    @contextmanager
    def at(self, block: Block) -> Iterator[None]:
        """Emit into ``block`` for the duration of the ``with``."""
        saved = self.block
        self.block = block
        try:
            yield
        finally:
            self.block = saved

    def lane(self, which: str) -> Scalar:
        """``ttile.<which>`` (local_id, linear_id, ...), created once at the kernel's top."""
        self.used_lane_ops.add(which)
        if which not in self._lane:
            op = LANE_OPS[which]()
            first = self.entry.first_op
            if first is None:
                self.entry.add_op(op)
            else:
                self.entry.insert_op_before(op, first)
            self._lane[which] = Scalar(op.results[0])
        return self._lane[which]

    def index(self, v: Any) -> Scalar:
        """``v`` as an ``index`` Scalar."""
        return self.materialize(v, INDEX)

    def for_loop(
        self,
        lb: Any,
        ub: Any,
        step: Any,
        carried: Sequence[Scalar],
        body: Callable[[Scalar, list[Scalar]], Sequence[Scalar]],
        attrs: dict[str, Attribute] | None = None,
    ) -> list[Scalar]:
        """``scf.for`` over index bounds; ``body(iv, carried)`` returns the next carried."""
        lo, hi, st = self.index(lb), self.index(ub), self.index(step)
        block = Block(arg_types=[INDEX, *[c.type for c in carried]])
        with self.at(block):
            nxt = list(body(Scalar(block.args[0]), [Scalar(a) for a in block.args[1:]]))
            self.emit(scf.YieldOp(*[n.ssa for n in nxt]))
        op = scf.ForOp(lo.ssa, hi.ssa, st.ssa, [c.ssa for c in carried], Region(block))
        if attrs:
            op.attributes.update(attrs)
        self.emit(op)
        return [Scalar(r) for r in op.results]

    def if_then(
        self,
        cond: Scalar,
        then: Callable[[], None],
        otherwise: Callable[[], None] | None = None,
    ) -> None:
        """``scf.if`` without results."""
        tb = Block()
        with self.at(tb):
            then()
            self.emit(scf.YieldOp())
        regions = [Region(tb)]
        if otherwise is not None:
            eb = Block()
            with self.at(eb):
                otherwise()
                self.emit(scf.YieldOp())
            regions.append(Region(eb))
        self.emit(scf.IfOp(cond.ssa, [], regions[0], regions[1] if otherwise else None))

    def strided_lanes(
        self, count: Any, body: Callable[[Scalar], None], by: str = "local_id"
    ) -> None:
        """Run ``body(q)`` for q = local_id, local_id + G, ... < count (the tile's lanes
        share the work)."""
        start = self.lane(by)

        def step(iv: Scalar, _: list[Scalar]) -> list[Scalar]:
            body(iv)
            return []

        self.for_loop(start, count, self.group_size, [], step)


def prefetch_attr(n: int) -> dict[str, Attribute]:
    """The discardable attribute that records ``tile.range(..., prefetch=n)``."""
    return {"tessera.prefetch": IntegerAttr(n, i64)}
