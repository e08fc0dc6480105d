"""Hopper's asynchronous data movement (sm_90): TMA tensor copies, mbarriers,
bulk async-groups, cluster addresses (``mapa``) and the operand-less fences."""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import I64, IntegerAttr, StringAttr, UnitAttr
from xdsl.ir import SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
)

from tessera.ir.target.base import GUARD_FORMAT, PtxOp, i64_attr
from tessera.ir.target.facts import FENCES, UNKNOWN_FENCE, Requirement
from tessera.ir.target.types import RegisterType


@irdl_op_definition
class MbarrierInitOp(PtxOp):
    """``ttarget.mbarrier_init [%addr], %count``
    → ``mbarrier.init.shared::cta.b64 [addr], count;`` (``addr``: a 32-bit shared address)."""

    name = "ttarget.mbarrier_init"
    PTX_OPCODE: ClassVar[str] = "mbarrier.init.shared::cta.b64"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("[$addr]", "$count")

    PTX: ClassVar[tuple[int, int]] = (7, 8)
    SM: ClassVar[int] = 80
    addr = operand_def(RegisterType)
    count = operand_def(RegisterType)
    assembly_format = "` ` `[` $addr `]` `,` $count attr-dict"

    def __init__(self, addr: SSAValue, count: SSAValue):
        super().__init__(operands=[addr, count])

    def verify_(self) -> None:
        self._src(self.addr, "b32", "barrier address")
        self._src(self.count, "u32", "count")


@irdl_op_definition
class MbarrierArriveOp(PtxOp):
    """Arrive on a shared mbarrier, optionally announcing a transaction byte count:
    ``ttarget.mbarrier_arrive [%addr]`` → ``mbarrier.arrive.shared::cta.b64 _, [addr];``,
    ``ttarget.mbarrier_arrive [%addr] expect_tx %bytes``
    → ``mbarrier.arrive.expect_tx.shared::cta.b64 _, [addr], bytes;``.

    ``ttarget.mbarrier_arrive [%addr] cluster`` arrives on the mbarrier of any CTA of the
    cluster, ``addr`` being a ``shared::cluster`` address from ``ttarget.mapa``:
    ``mbarrier.arrive.shared::cluster.b64 _, [addr];``. Its release has PTX's default
    CTA scope: enough to hand back a shared-memory slot whose reads have completed
    (after ``wgmma.wait_group``), while a cluster-scope release costs a
    ``MEMBAR.ALL.GPU`` per arrive (measured: it halved the clustered GEMM's rate)."""

    name = "ttarget.mbarrier_arrive"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("_", "[$addr]", "$tx")

    def ptx_opcode(self) -> str:
        if self.cluster is not None:
            return "mbarrier.arrive.shared::cluster.b64"
        if self.tx is None:
            return "mbarrier.arrive.shared::cta.b64"
        return "mbarrier.arrive.expect_tx.shared::cta.b64"

    PTX: ClassVar[tuple[int, int]] = (8, 0)
    SM: ClassVar[int] = 90
    addr = operand_def(RegisterType)
    tx = opt_operand_def(RegisterType)
    guard = opt_operand_def(RegisterType)
    cluster = opt_prop_def(UnitAttr)
    negate = opt_prop_def(UnitAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = (
        "` ` `[` $addr `]` (`expect_tx` $tx^)? (`cluster` $cluster^)? " + GUARD_FORMAT + " attr-dict"
    )

    def __init__(
        self, addr: SSAValue, tx: SSAValue | None = None, guard: SSAValue | None = None,
        negate: bool = False, cluster: bool = False,
    ):
        super().__init__(
            operands=[addr, tx, guard],
            properties={
                "negate": UnitAttr() if negate else None,
                "cluster": UnitAttr() if cluster else None,
            },
        )

    def verify_(self) -> None:
        self._src(self.addr, "b32", "barrier address")
        if self.tx is not None:
            self._src(self.tx, "u32", "transaction bytes")
            if self.cluster is not None:
                self._fail("expect_tx and cluster cannot be combined")
        self._guard_ok(self.guard)


@irdl_op_definition
class MbarrierTryWaitOp(PtxOp):
    """``ttarget.mbarrier_try_wait %p, [%addr], %parity``
    → ``mbarrier.try_wait.parity.shared::cta.b64 p, [addr], parity;``: ``p`` is true once
    the barrier's phase of that parity has completed (callers loop until it is)."""

    name = "ttarget.mbarrier_try_wait"
    PTX_OPCODE: ClassVar[str] = "mbarrier.try_wait.parity.shared::cta.b64"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "[$addr]", "$parity")

    PTX: ClassVar[tuple[int, int]] = (7, 8)
    SM: ClassVar[int] = 90
    dst = operand_def(RegisterType)
    addr = operand_def(RegisterType)
    parity = operand_def(RegisterType)
    assembly_format = "$dst `,` `[` $addr `]` `,` $parity attr-dict"

    def __init__(self, dst: SSAValue, addr: SSAValue, parity: SSAValue):
        super().__init__(operands=[dst, addr, parity])

    def verify_(self) -> None:
        self._dst(self.dst, "pred")
        self._src(self.addr, "b32", "barrier address")
        self._src(self.parity, "u32", "parity")


@irdl_op_definition
class CpAsyncBulkTensorOp(PtxOp):
    """A TMA load of one box of a 2-D tensor into shared memory, completing on an mbarrier:
    ``ttarget.cp_async_bulk_tensor [%dst], [%tmap, %c0, %c1], [%mbar]``
    → ``cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes
    [dst], [tmap, {c0, c1}], [mbar];``.

    ``tmap`` is the 64-bit address of a tensor map (``ttarget.param_addr``), ``c0`` the
    innermost coordinate; boxes partly outside the tensor are zero-filled.

    ``multicast %mask`` (a 16-bit CTA mask, bit i for cluster rank i) writes the box to
    the same shared-memory offset in every CTA of the mask and signals the mbarrier at
    the same offset in each (``.multicast::cluster``, sm_90a).
    """

    name = "ttarget.cp_async_bulk_tensor"
    PTX_OPCODE: ClassVar[str] = (
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes{multicast}"
    )
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("[$dst]", "[$tmap, {$c0, $c1}]", "[$mbar]", "$mask")

    def ptx_fields(self) -> dict[str, str]:
        return {"multicast": ".multicast::cluster" if self.mask is not None else ""}

    PTX: ClassVar[tuple[int, int]] = (8, 0)
    SM: ClassVar[int] = 90
    dst = operand_def(RegisterType)
    tmap = operand_def(RegisterType)
    c0 = operand_def(RegisterType)
    c1 = operand_def(RegisterType)
    mbar = operand_def(RegisterType)
    mask = opt_operand_def(RegisterType)
    guard = opt_operand_def(RegisterType)
    negate = opt_prop_def(UnitAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = (
        "` ` `[` $dst `]` `,` `[` $tmap `,` $c0 `,` $c1 `]` `,` `[` $mbar `]` "
        "(`multicast` $mask^)? " + GUARD_FORMAT + " attr-dict"
    )

    def __init__(
        self, dst: SSAValue, tmap: SSAValue, c0: SSAValue, c1: SSAValue, mbar: SSAValue,
        guard: SSAValue | None = None, negate: bool = False, mask: SSAValue | None = None,
    ):
        super().__init__(
            operands=[dst, tmap, c0, c1, mbar, mask, guard],
            properties={"negate": UnitAttr() if negate else None},
        )

    def verify_(self) -> None:
        self._src(self.dst, "b32", "shared destination")
        self._verify_box(self.tmap, self.c0, self.c1)
        self._src(self.mbar, "b32", "barrier address")
        if self.mask is not None:
            self._src(self.mask, "b16", "multicast mask")
        self._guard_ok(self.guard)


@irdl_op_definition
class CpAsyncBulkTensorStoreOp(PtxOp):
    """A TMA store of one box of a 2-D tensor from shared memory, in a bulk async-group:
    ``ttarget.cp_async_bulk_tensor_store [%tmap, %c0, %c1], [%src]``
    → ``cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [tmap, {c0, c1}], [src];``.

    The box's parts outside the tensor are not written. Shared-memory writes that the
    store reads must be made visible to the async proxy first (``ttarget.fence
    "proxy_async"``); ``ttarget.fence "bulk_commit"`` closes the group and
    ``ttarget.bulk_wait`` waits for it.
    """

    name = "ttarget.cp_async_bulk_tensor_store"
    PTX_OPCODE: ClassVar[str] = "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("[$tmap, {$c0, $c1}]", "[$src]")

    PTX: ClassVar[tuple[int, int]] = (8, 0)
    SM: ClassVar[int] = 90
    tmap = operand_def(RegisterType)
    c0 = operand_def(RegisterType)
    c1 = operand_def(RegisterType)
    src = operand_def(RegisterType)
    guard = opt_operand_def(RegisterType)
    negate = opt_prop_def(UnitAttr)
    assembly_format = (
        "` ` `[` $tmap `,` $c0 `,` $c1 `]` `,` `[` $src `]` " + GUARD_FORMAT + " attr-dict"
    )

    def __init__(
        self, tmap: SSAValue, c0: SSAValue, c1: SSAValue, src: SSAValue,
        guard: SSAValue | None = None, negate: bool = False,
    ):
        super().__init__(
            operands=[tmap, c0, c1, src, guard],
            properties={"negate": UnitAttr() if negate else None},
        )

    def verify_(self) -> None:
        self._verify_box(self.tmap, self.c0, self.c1)
        self._src(self.src, "b32", "shared source")
        self._guard_ok(self.guard)


@irdl_op_definition
class BulkWaitOp(PtxOp):
    """Wait until at most ``pending`` of this thread's bulk async-groups are incomplete:
    ``ttarget.bulk_wait 0`` → ``cp.async.bulk.wait_group 0;``; with ``read``
    (``cp.async.bulk.wait_group.read 0;``) only until their shared-memory sources have
    been read, so the buffer can be reused."""

    name = "ttarget.bulk_wait"
    PTX_OPCODE: ClassVar[str] = "cp.async.bulk.wait_group{read}"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$pending",)

    PTX: ClassVar[tuple[int, int]] = (8, 0)
    SM: ClassVar[int] = 90
    pending = prop_def(IntegerAttr[I64])
    read = opt_prop_def(UnitAttr)
    assembly_format = "$pending (`read` $read^)? attr-dict"

    def __init__(self, pending: int, read: bool = False):
        super().__init__(
            properties={"pending": i64_attr(pending), "read": UnitAttr() if read else None}
        )

    def verify_(self) -> None:
        if not 0 <= self.pending.value.data <= 7:
            self._fail(f"pending groups must be in [0, 7], got {self.pending.value.data}")


@irdl_op_definition
class MapaOp(PtxOp):
    """The ``shared::cluster`` address of a shared variable in another CTA of the cluster:
    ``ttarget.mapa %d, %addr, %rank`` → ``mapa.shared::cluster.u32 d, addr, rank;``
    (``addr``: this CTA's 32-bit shared address; ``rank``: the target CTA's
    ``cluster_ctarank``)."""

    name = "ttarget.mapa"
    PTX_OPCODE: ClassVar[str] = "mapa.shared::cluster.u32"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "$addr", "$rank")

    PTX: ClassVar[tuple[int, int]] = (7, 8)
    SM: ClassVar[int] = 90
    dst = operand_def(RegisterType)
    addr = operand_def(RegisterType)
    rank = operand_def(RegisterType)
    assembly_format = "$dst `,` $addr `,` $rank attr-dict"

    def __init__(self, dst: SSAValue, addr: SSAValue, rank: SSAValue):
        super().__init__(operands=[dst, addr, rank])

    def verify_(self) -> None:
        self._dst(self.dst, "u32")
        self._src(self.addr, "u32", "shared address")
        self._src(self.rank, "u32", "CTA rank")


@irdl_op_definition
class FenceOp(PtxOp):
    """Ordering instructions without operands: ``ttarget.fence "proxy_async"``
    (``fence.proxy.async.shared::cta``), ``"mbarrier_init"``
    (``fence.mbarrier_init.release.cluster``), ``"wgmma"`` (``wgmma.fence.sync.aligned``),
    ``"wgmma_commit"`` (``wgmma.commit_group.sync.aligned``), ``"bulk_commit"``
    (``cp.async.bulk.commit_group``: close this thread's bulk async-group of TMA
    stores), and the two halves of the
    cluster-wide barrier, ``"cluster_arrive"`` (``barrier.cluster.arrive.release``) and
    ``"cluster_wait"`` (``barrier.cluster.wait.acquire``): every thread of every CTA of
    the cluster arrives before any waiting thread goes on."""

    name = "ttarget.fence"

    kind = prop_def(StringAttr)
    assembly_format = "$kind attr-dict"

    def __init__(self, kind: str):
        super().__init__(properties={"kind": StringAttr(kind)})

    def requirement(self) -> Requirement:
        form = FENCES.get(self.kind.data)
        return form.needs if form is not None else UNKNOWN_FENCE

    def ptx_opcode(self) -> str:
        return FENCES[self.kind.data].text

    def verify_(self) -> None:
        if self.kind.data not in FENCES:
            self._fail(f"unknown fence '{self.kind.data}'; valid: {', '.join(FENCES)}")
