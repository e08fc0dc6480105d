"""Lowering of the Graph IR collectives to host-side ops.

``lower-graph-to-tile`` calls :func:`lower_collective` for ``tgraph.all_reduce``,
``all_gather``, ``reduce_scatter``, ``all_to_all``, ``send`` and ``recv``: each
becomes the ``ttile`` host op of the same name in the lowered host function, on
the operand's buffer, with the op's properties (reduction, axis, dims, peer,
``nondeterministic``; every ``all_reduce`` is ``nondeterministic`` when the pass's
``deterministic`` option is off). ``tgraph.all_slice`` needs no communication: it becomes
``ttile.mesh_coord`` (this rank's coordinate along the axis) and an ordinary
kernel copying block ``coord`` of the sliced dim (:func:`lower_all_slice`).

``lower-tile-to-target`` calls :func:`to_target` to map each ``ttile`` host
collective to the ``ttarget`` op of the same name.

Ops of a pipeline stage (``tessera.stage``) are not lowered: a lowered host
function runs every op on every rank, so staged programs run through
:mod:`tessera.dist.segments`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.dialects.builtin import IndexType, UnitAttr
from xdsl.ir import Operation, SSAValue

from tessera.ir import graph as g
from tessera.ir import host_collectives as hc
from tessera.ir import target as ttarget
from tessera.ir import tile as tt
from tessera.passes.tile_builder import KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

STAGE = "tessera.stage"

SLICE_GROUP = 256
"""Lanes per tile of the all_slice kernel (one lane per output element)."""

GRAPH_TO_TILE: dict[type[Operation], type[hc.HostCollectiveOp]] = {
    g.AllReduceOp: tt.AllReduceOp,
    g.AllGatherOp: tt.AllGatherOp,
    g.ReduceScatterOp: tt.ReduceScatterOp,
    g.AllToAllOp: tt.AllToAllOp,
    g.SendOp: tt.SendOp,
    g.RecvOp: tt.RecvOp,
}
"""The tgraph collectives that become one ttile host op each (all_slice is a kernel)."""

TILE_TO_TARGET: dict[type[hc.HostCollectiveOp], type[hc.HostCollectiveOp]] = dict(
    zip(tt.HOST_COLLECTIVE_OPS, ttarget.HOST_COLLECTIVE_OPS, strict=True)
)


def _check_stage(op: Operation) -> None:
    if STAGE in op.attributes:
        raise NotImplementedError(
            f"lower-graph-to-tile: {op.name} has no Tile IR lowering (ops of a pipeline stage, "
            "tessera.stage, run through tessera.dist.segments)"
        )


def lower_collective(lw: _FunctionLowering, op: Operation) -> None:
    """A tgraph collective -> the ttile host op of the same name, on the operand's buffer."""
    from tessera.passes.lower_graph_to_tile import memref_of

    _check_stage(op)
    props = dict(op.properties)
    if isinstance(op, g.AllReduceOp) and not lw.deterministic:
        props["nondeterministic"] = UnitAttr()
    new = GRAPH_TO_TILE[type(op)].create(
        operands=[lw.mem(v) for v in op.operands],
        result_types=[memref_of(r.type) for r in op.results],
        properties=props,
    )
    lw.host_op(new)
    for old, r in zip(op.results, new.results):
        lw.env[old] = r


def lower_all_slice(lw: _FunctionLowering, op: g.AllSliceOp) -> None:
    """``tgraph.all_slice``: ``ttile.mesh_coord`` and a kernel copying block ``coord`` of
    ``dim`` (one lane per output element)."""
    _check_stage(op)
    out_shape = g.shape_of(op.result)
    d = op.dim.value.data % len(out_shape)
    block = out_shape[d]
    n = 1
    for s in out_shape:
        n *= s
    coord = lw.host_op(
        tt.MeshCoordOp.create(result_types=[IndexType()], properties={"axis": op.axis})
    )
    out = lw.alloc(op.result.type)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o, x, c = args
        lin = e.linear_id()
        ok = e.lt(lin, n)
        idx = e.unravel(lin, out_shape)
        src = list(idx)
        src[d] = e.add(idx[d], e.mul(c, block))
        e.store(e.load(x, src, mask=ok), o, idx, mask=ok)

    lw.kernel(
        "all_slice", [out, lw.mem(op.input), coord], SLICE_GROUP,
        [cdiv(n, SLICE_GROUP), 1, 1], build,
    )
    lw.env[op.result] = out


def to_target(op: hc.HostCollectiveOp) -> hc.HostCollectiveOp:
    """The ``ttarget`` op for a ``ttile`` host collective (same operands, properties)."""
    return TILE_TO_TARGET[type(op)].create(
        operands=list(op.operands),
        result_types=[r.type for r in op.results],
        properties=dict(op.properties),
        attributes=dict(op.attributes),
    )


def lowerings() -> dict[type[Operation], object]:
    """Entries for lower-graph-to-tile's table of lowerings."""
    table: dict[type[Operation], object] = {k: lower_collective for k in GRAPH_TO_TILE}
    table[g.AllSliceOp] = lower_all_slice
    return table

