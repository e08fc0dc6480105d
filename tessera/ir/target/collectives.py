"""Host-side collectives of lowered per-rank programs.

They are mapped 1:1 from the ``ttile`` ops of the same name by
``lower-tile-to-target`` (syntax, verifiers and semantics in
:mod:`tessera.ir.host_collectives`). They are not PTX: emit-ptx ignores host functions.
"""

from __future__ import annotations

from xdsl.irdl import irdl_op_definition

from tessera.ir import host_collectives as hc


@irdl_op_definition
class AllReduceOp(hc.AllReduceBase):
    """Host: ``%r = ttarget.all_reduce %x op = "sum" axis = "tp" : memref<..> -> memref<..>``."""

    name = "ttarget.all_reduce"


@irdl_op_definition
class AllGatherOp(hc.AllGatherBase):
    """Host: ``%r = ttarget.all_gather %x axis = "tp" dim = 1 : memref<..> -> memref<..>``."""

    name = "ttarget.all_gather"


@irdl_op_definition
class ReduceScatterOp(hc.ReduceScatterBase):
    """Host: ``%r = ttarget.reduce_scatter %x op = "sum" axis = "tp" dim = 0 : ...``."""

    name = "ttarget.reduce_scatter"


@irdl_op_definition
class AllToAllOp(hc.AllToAllBase):
    """Host: ``%r = ttarget.all_to_all %x axis = "tp" split_dim = 0 concat_dim = 1 : ...``."""

    name = "ttarget.all_to_all"


@irdl_op_definition
class SendOp(hc.SendBase):
    """Host: ``ttarget.send %x axis = "pp" peer = 1 : memref<..>``."""

    name = "ttarget.send"


@irdl_op_definition
class RecvOp(hc.RecvBase):
    """Host: ``%r = ttarget.recv axis = "pp" peer = -1 : memref<..>``."""

    name = "ttarget.recv"


@irdl_op_definition
class MeshCoordOp(hc.MeshCoordBase):
    """Host: ``%c = ttarget.mesh_coord axis = "tp"`` (this rank's coordinate, an index)."""

    name = "ttarget.mesh_coord"


HOST_COLLECTIVE_OPS: tuple[type[hc.HostCollectiveOp], ...] = (
    AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp, SendOp, RecvOp, MeshCoordOp,
)
"""Host-side collective ops of ``ttarget`` (same order as ``hc.HOST_COLLECTIVE_BASES``)."""
