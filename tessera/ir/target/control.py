"""Control flow and synchronization within a CTA: labels, branches, ``ret``, CTA
barriers and warp shuffles."""

from __future__ import annotations

import weakref
from typing import ClassVar

from xdsl.dialects.builtin import I64, IntegerAttr, StringAttr, UnitAttr
from xdsl.ir import Block, SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, opt_prop_def, prop_def

from tessera.ir.target.base import GUARD_FORMAT, PtxOp, i64_attr, kernel_block
from tessera.ir.target.types import RegisterType


@irdl_op_definition
class LabelOp(PtxOp):
    """A branch target: ``ttarget.label "L3"`` → ``L3:``."""

    name = "ttarget.label"
    PTX_OPCODE: ClassVar[str] = "{label}"
    PTX_END: ClassVar[str] = ":"

    label = prop_def(StringAttr)
    assembly_format = "$label attr-dict"

    def __init__(self, label: str):
        super().__init__(properties={"label": StringAttr(label)})

    def verify_(self) -> None:
        if not self.label.data.isidentifier() or self.label.data.startswith("_"):
            self._fail(f"'{self.label.data}' is not a valid PTX label")


@irdl_op_definition
class BraOp(PtxOp):
    """A branch: ``ttarget.bra "L3" if %p`` → ``@%p bra L3;`` (``bra.uni`` when unpredicated)."""

    name = "ttarget.bra"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$label",)

    def ptx_opcode(self) -> str:
        return "bra.uni" if self.guard is None else "bra"

    label = prop_def(StringAttr)
    guard = opt_operand_def(RegisterType)
    negate = opt_prop_def(UnitAttr)
    assembly_format = "$label " + GUARD_FORMAT + " attr-dict"

    def __init__(self, label: str, guard: SSAValue | None = None, negate: bool = False):
        super().__init__(
            operands=[guard],
            properties={"label": StringAttr(label), "negate": UnitAttr() if negate else None},
        )

    def verify_(self) -> None:
        self._guard_ok(self.guard)
        if self.negate is not None and self.guard is None:
            self._fail("'negated' needs a guard")
        block = kernel_block(self)
        if block is not None and not _has_label(block, self.label.data):
            self._fail(f"no ttarget.label \"{self.label.data}\" in this function")


_LABELS: weakref.WeakKeyDictionary[Block, dict[str, LabelOp]] = weakref.WeakKeyDictionary()
"""The labels of each kernel body, as last collected (a verified kernel has one branch per
few ops: collecting them per branch made verification quadratic)."""


def _has_label(block: Block, name: str) -> bool:
    """Whether ``block`` holds ``ttarget.label name``. A remembered label counts only while
    it is still in the block under that name; otherwise the labels are collected again."""
    known = _LABELS.get(block)
    found = known.get(name) if known is not None else None
    if found is not None and found.parent is block and found.label.data == name:
        return True
    labels = {op.label.data: op for op in block.ops if isinstance(op, LabelOp)}
    _LABELS[block] = labels
    return name in labels


@irdl_op_definition
class RetOp(PtxOp):
    """``ttarget.ret`` → ``ret;``."""

    name = "ttarget.ret"
    PTX_OPCODE: ClassVar[str] = "ret"

    assembly_format = "attr-dict"

    def verify_(self) -> None:
        pass


def _verify_barrier(
    op: PtxOp, barrier: IntegerAttr, threads: IntegerAttr | None, first_id: int
) -> None:
    """A barrier id in ``[first_id, 15]`` (id 0 is the CTA barrier ``bar.sync 0`` uses)
    and, when given, a thread count that is a multiple of 32 in ``[32, 1024]``."""
    if not first_id <= barrier.value.data <= 15:
        cta = " (0 is the CTA barrier)" if first_id else ""
        op._fail(f"barrier id must be in [{first_id}, 15]{cta}, got {barrier.value.data}")
    if threads is not None:
        t = threads.value.data
        if not 32 <= t <= 1024 or t % 32:
            op._fail(f"thread count must be a multiple of 32 in [32, 1024], got {t}")


@irdl_op_definition
class BarSyncOp(PtxOp):
    """``ttarget.bar_sync 0`` → ``bar.sync 0;`` (all threads of the CTA);
    ``ttarget.bar_sync 1 threads = 128`` → ``bar.sync 1, 128;`` (a named barrier that
    the given number of threads, a multiple of 32, arrive at: e.g. one warpgroup)."""

    name = "ttarget.bar_sync"
    PTX_OPCODE: ClassVar[str] = "bar.sync"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$barrier", "$threads")

    barrier = prop_def(IntegerAttr[I64])
    threads = opt_prop_def(IntegerAttr[I64])
    assembly_format = "$barrier (`threads` `=` $threads^)? attr-dict"

    def __init__(self, barrier: int = 0, threads: int | None = None):
        super().__init__(
            properties={
                "barrier": i64_attr(barrier), "threads": i64_attr(threads) if threads is not None else None,
            }
        )

    def verify_(self) -> None:
        _verify_barrier(self, self.barrier, self.threads, first_id=0)


@irdl_op_definition
class BarArriveOp(PtxOp):
    """``ttarget.bar_arrive 2 threads = 256`` → ``bar.arrive 2, 256;``: the executing
    warps arrive at named barrier 2 without waiting for it. The barrier completes when
    ``threads`` threads in all have arrived or synced (``ttarget.bar_sync`` with the same
    count), so one warpgroup can release another that waits there (a producer/consumer
    hand-off between warpgroups)."""

    name = "ttarget.bar_arrive"
    PTX_OPCODE: ClassVar[str] = "bar.arrive"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$barrier", "$threads")

    barrier = prop_def(IntegerAttr[I64])
    threads = prop_def(IntegerAttr[I64])
    assembly_format = "$barrier `threads` `=` $threads attr-dict"

    def __init__(self, barrier: int, threads: int):
        super().__init__(properties={"barrier": i64_attr(barrier), "threads": i64_attr(threads)})

    def verify_(self) -> None:
        _verify_barrier(self, self.barrier, self.threads, first_id=1)


@irdl_op_definition
class ShflOp(PtxOp):
    """``ttarget.shfl "bfly.b32" %d, %a, %lane, %clamp, %mask``
    → ``shfl.sync.bfly.b32 %d, %a, lane, clamp, membermask;``."""

    name = "ttarget.shfl"
    PTX_OPCODE: ClassVar[str] = "shfl.sync.{mods}"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "$a", "$b", "$c", "$mask")

    MODIFIERS: ClassVar[frozenset[str]] = frozenset({"bfly", "up", "down", "idx"})
    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    a = operand_def(RegisterType)
    b = operand_def(RegisterType)
    c = operand_def(RegisterType)
    mask = operand_def(RegisterType)
    assembly_format = "$mods $dst `,` $a `,` $b `,` $c `,` $mask attr-dict"

    def __init__(
        self, mode: str, dst: SSAValue, a: SSAValue, b: SSAValue, c: SSAValue, mask: SSAValue
    ):
        super().__init__(operands=[dst, a, b, c, mask], properties={"mods": StringAttr(f"{mode}.b32")})

    def verify_(self) -> None:
        mods, (ty,) = self._mods(self.mods)
        if len(mods) != 1:
            self._fail("needs exactly one mode: bfly, up, down or idx")
        if ty != "b32":
            self._fail(f"shuffles .b32 values, not .{ty}")
        self._dst(self.dst, "b32")
        for v, what in ((self.a, "value"), (self.b, "lane"), (self.c, "clamp"), (self.mask, "mask")):
            self._src(v, "b32", what)
