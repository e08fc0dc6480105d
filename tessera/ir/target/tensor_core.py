"""Tensor-core instructions: the warp-wide ``mma.sync`` (sm_80) and the warpgroup
``wgmma`` (sm_90a) with its wait and the warpgroup register budget (``setmaxnreg``)."""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import I64, IntegerAttr, StringAttr
from xdsl.ir import SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    irdl_op_definition,
    operand_def,
    prop_def,
    var_operand_def,
)

from tessera.ir.target.base import PtxOp, i64_attr, reg_class
from tessera.ir.target.facts import Requirement, parse_mods
from tessera.ir.target.types import RegisterType


@irdl_op_definition
class MmaOp(PtxOp):
    """Warp-wide tensor core MMA (row.col), f32 accumulate:
    ``ttarget.mma "bf16" (%d0..%d3), (%a0..%a3), (%b0, %b1), (%c0..%c3)``
    → ``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {..}, {..}, {..}, {..};``.

    ``bf16`` / ``f16`` inputs use the m16n8k16 shape (2 packed 16-bit values per
    ``b32`` register); ``e4m3`` / ``e5m2`` inputs the m16n8k32 shape (4 packed 8-bit
    values per register; sm_89+, PTX ISA 8.4); ``tf32`` inputs the m16n8k8 shape (one
    value per register). Either way A fragments are 4 ``b32`` registers, B 2 ``b32``, C
    and D 4 ``f32``.
    """

    name = "ttarget.mma"
    PTX_OPCODE: ClassVar[str] = "mma.sync.aligned.{shape}.row.col.f32.{mods}.{mods}.f32"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$d", "$a", "$b", "$c")

    PTX: ClassVar[tuple[int, int]] = (7, 0)
    SM: ClassVar[int] = 80
    FP8: ClassVar[frozenset[str]] = frozenset({"e4m3", "e5m2"})
    FP8_NEEDS: ClassVar[Requirement] = Requirement((8, 4), 89)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    mods = prop_def(StringAttr)
    d = var_operand_def(RegisterType)
    a = var_operand_def(RegisterType)
    b = var_operand_def(RegisterType)
    c = var_operand_def(RegisterType)
    assembly_format = (
        "$mods ` ` `(` $d `)` `,` `(` $a `)` `,` `(` $b `)` `,` `(` $c `)` attr-dict"
    )

    def __init__(
        self, ab_type: str, d: Sequence[SSAValue], a: Sequence[SSAValue], b: Sequence[SSAValue],
        c: Sequence[SSAValue],
    ):
        super().__init__(
            operands=[list(d), list(a), list(b), list(c)],
            properties={"mods": StringAttr(ab_type)},
        )

    @property
    def is_fp8(self) -> bool:
        return self.mods.data in self.FP8

    def requirement(self) -> Requirement:
        return self.FP8_NEEDS if self.is_fp8 else super().requirement()

    def ptx_fields(self) -> dict[str, str]:
        if self.is_fp8:
            return {"shape": "m16n8k32"}
        return {"shape": "m16n8k8" if self.mods.data == "tf32" else "m16n8k16"}

    def verify_(self) -> None:
        ty = self.mods.data
        if ty not in self.FP8 and ty != "tf32":
            _, (ty,) = self._mods(self.mods)
            if ty not in ("bf16", "f16"):
                self._fail(f"mma inputs must be .bf16, .f16, .tf32, .e4m3 or .e5m2, got .{ty}")
        for vs, n, cls, what in (
            (self.d, 4, "f32", "D"), (self.a, 4, "b32", "A"), (self.b, 2, "b32", "B"),
            (self.c, 4, "f32", "C"),
        ):
            if len(vs) != n:
                self._fail(f"{what} fragment needs {n} registers, got {len(vs)}")
            for v in vs:
                got = reg_class(v)
                if got != cls:
                    self._fail(f"{what} fragment registers must be {cls}, got {got}")


class _WgmmaBase(PtxOp, ABC):
    """Shared modifiers, shape and accumulator checks of the warpgroup MMAs: ``mods`` is
    ``m64nNk16.f32.T.T`` with T bf16 or f16, ``m64nNk32.f32.A.B`` with A, B e4m3 or e5m2, or
    ``m64nNk8.f32.tf32.tf32`` (fp8 and tf32 operands are K-major: no transpose), and D has
    N/2 ``f32`` registers per thread.

    The PTX operands end in the transpose immediates (``TRANS_ARGS`` of them); the fp8 and
    tf32 forms take none."""

    PTX: ClassVar[tuple[int, int]] = (8, 0)
    SM: ClassVar[int] = 90
    TRANS_ARGS: ClassVar[int] = 0
    """How many of the trailing ``PTX_ARGS`` are transpose immediates."""

    @property
    def is_fp8(self) -> bool:
        mods: str = self.mods.data  # type: ignore[attr-defined]
        return "e4m3" in mods or "e5m2" in mods

    @property
    def k_major_only(self) -> bool:
        """fp8 and tf32 operands are read K-major only: no transpose immediates."""
        mods: str = self.mods.data  # type: ignore[attr-defined]
        return self.is_fp8 or "tf32" in mods

    def ptx_args(self) -> tuple[str, ...]:
        return self.PTX_ARGS[: -self.TRANS_ARGS] if self.k_major_only else self.PTX_ARGS

    def shape(self) -> tuple[int, int, int]:
        parts = parse_mods(self.mods.data)  # type: ignore[attr-defined]
        s = parts[0] if parts else ""
        try:
            m, rest = s.removeprefix("m").split("n")
            n, k = rest.split("k")
            return int(m), int(n), int(k)
        except ValueError:
            self._fail(f"bad shape '{s}' in \"{self.mods.data}\" (expected m64nNk16)")  # type: ignore[attr-defined]
            raise

    def _verify_common(self) -> None:
        mods: str = self.mods.data  # type: ignore[attr-defined]
        parts = parse_mods(mods)
        fp8 = len(parts) == 4 and {parts[2], parts[3]} <= {"e4m3", "e5m2"}
        tf32 = len(parts) == 4 and parts[2] == parts[3] == "tf32"
        if len(parts) != 4 or parts[1] != "f32" or not fp8 and not tf32 and (
            parts[2] != parts[3] or parts[2] not in ("bf16", "f16")
        ):
            self._fail(
                f"modifiers must be \"m64nNk16.f32.T.T\" with T bf16 or f16, "
                f"\"m64nNk32.f32.A.B\" with A, B e4m3 or e5m2, or \"m64nNk8.f32.tf32.tf32\", "
                f"got \"{mods}\""
            )
        m, n, k = self.shape()
        kk = 32 if fp8 else 8 if tf32 else 16
        if m != 64 or k != kk or n % 8 or not 8 <= n <= 256:
            self._fail(f"shape m{m}n{n}k{k}: needs m64, k{kk} and N a multiple of 8 in [8, 256]")
        if (fp8 or tf32) and (self.trans_b.value.data or getattr(self, "trans_a", None) is not None  # type: ignore[attr-defined]
                              and self.trans_a.value.data):  # type: ignore[attr-defined]
            self._fail(f"{'fp8' if fp8 else 'tf32'} operands are K-major: trans_a and trans_b "
                       "must be 0")
        d: Sequence[SSAValue] = self.d  # type: ignore[attr-defined]
        if len(d) != n // 2:
            self._fail(f"D needs {n // 2} f32 registers for N={n}, got {len(d)}")
        for v in d:
            if reg_class(v) != "f32":
                self._fail("D registers must be f32")
        if reg_class(self.bdesc) != "b64":  # type: ignore[attr-defined]
            self._fail("B descriptor must be a b64 register")
        if reg_class(self.scale_d) != "pred":  # type: ignore[attr-defined]
            self._fail("scale_d must be a pred register")
        if self.trans_b.value.data not in (0, 1):  # type: ignore[attr-defined]
            self._fail("trans_b must be 0 or 1")


@irdl_op_definition
class WgmmaOp(_WgmmaBase):
    """Warpgroup MMA on shared-memory operands, f32 accumulate:
    ``ttarget.wgmma "m64n128k16.f32.bf16.bf16" (%d0, ...), %adesc, %bdesc, %scale_d trans_b = 1``
    → ``wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {d..}, adesc, bdesc, p, 1, 1, 0, 1;``.

    ``adesc`` / ``bdesc`` are 64-bit shared-memory matrix descriptors; D has N/2
    ``f32`` registers per thread; ``scale_d`` (a predicate) false means D = A B.
    ``trans_a`` / ``trans_b`` = 1 read A M-major / B N-major.
    """

    name = "ttarget.wgmma"
    PTX_OPCODE: ClassVar[str] = "wgmma.mma_async.sync.aligned.{mods}"
    PTX_ARGS: ClassVar[tuple[str, ...]] = (
        "$d", "$adesc", "$bdesc", "$scale_d", "1", "1", "$trans_a", "$trans_b",
    )
    TRANS_ARGS: ClassVar[int] = 2

    mods = prop_def(StringAttr)
    d = var_operand_def(RegisterType)
    adesc = operand_def(RegisterType)
    bdesc = operand_def(RegisterType)
    scale_d = operand_def(RegisterType)
    trans_a = prop_def(IntegerAttr[I64])
    trans_b = prop_def(IntegerAttr[I64])
    assembly_format = (
        "$mods ` ` `(` $d `)` `,` $adesc `,` $bdesc `,` $scale_d `trans_a` `=` $trans_a "
        "`trans_b` `=` $trans_b attr-dict"
    )

    def __init__(
        self, mods: str, d: Sequence[SSAValue], adesc: SSAValue, bdesc: SSAValue,
        scale_d: SSAValue, trans_a: int = 0, trans_b: int = 0,
    ):
        super().__init__(
            operands=[list(d), adesc, bdesc, scale_d],
            properties={
                "mods": StringAttr(mods), "trans_a": i64_attr(trans_a), "trans_b": i64_attr(trans_b),
            },
        )

    def verify_(self) -> None:
        self._verify_common()
        if reg_class(self.adesc) != "b64":
            self._fail("A descriptor must be a b64 register")
        if self.trans_a.value.data not in (0, 1):
            self._fail("trans_a must be 0 or 1")


@irdl_op_definition
class WgmmaRsOp(_WgmmaBase):
    """Warpgroup MMA with A in registers and B in shared memory, f32 accumulate:
    ``ttarget.wgmma_rs "m64n128k16.f32.bf16.bf16" (%d0, ...), (%a0, %a1, %a2, %a3), %bdesc,
    %scale_d trans_b = 1`` → ``wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {d..},
    {a0, a1, a2, a3}, bdesc, p, 1, 1, 1;``.

    A is the warpgroup's 64 x 16 tile as four ``b32`` registers of two packed 16-bit
    elements per thread, laid out like the ``mma.sync`` m16n8k16 ``a`` fragment within
    each warp's 16 rows (so two adjacent 8-column blocks of a wgmma D fragment, converted
    and packed, are the A of a following wgmma: how attention feeds P to ``P V``).
    """

    name = "ttarget.wgmma_rs"
    PTX_OPCODE: ClassVar[str] = "wgmma.mma_async.sync.aligned.{mods}"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$d", "$a", "$bdesc", "$scale_d", "1", "1", "$trans_b")
    TRANS_ARGS: ClassVar[int] = 1

    mods = prop_def(StringAttr)
    d = var_operand_def(RegisterType)
    a = var_operand_def(RegisterType)
    bdesc = operand_def(RegisterType)
    scale_d = operand_def(RegisterType)
    trans_b = prop_def(IntegerAttr[I64])
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = (
        "$mods ` ` `(` $d `)` `,` `(` $a `)` `,` $bdesc `,` $scale_d `trans_b` `=` $trans_b "
        "attr-dict"
    )

    def __init__(
        self, mods: str, d: Sequence[SSAValue], a: Sequence[SSAValue], bdesc: SSAValue,
        scale_d: SSAValue, trans_b: int = 0,
    ):
        super().__init__(
            operands=[list(d), list(a), bdesc, scale_d],
            properties={"mods": StringAttr(mods), "trans_b": i64_attr(trans_b)},
        )

    def verify_(self) -> None:
        self._verify_common()
        if len(self.a) != 4 or any(reg_class(v) != "b32" for v in self.a):
            self._fail(f"A needs 4 b32 registers, got {len(self.a)}")


@irdl_op_definition
class WgmmaWaitOp(PtxOp):
    """``ttarget.wgmma_wait 1`` → ``wgmma.wait_group.sync.aligned 1;``: at most N committed
    wgmma groups of this warpgroup still pending."""

    name = "ttarget.wgmma_wait"
    PTX_OPCODE: ClassVar[str] = "wgmma.wait_group.sync.aligned"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$pending",)

    PTX: ClassVar[tuple[int, int]] = (8, 0)
    SM: ClassVar[int] = 90
    pending = prop_def(IntegerAttr[I64])
    assembly_format = "$pending attr-dict"

    def __init__(self, pending: int):
        super().__init__(properties={"pending": i64_attr(pending)})

    def verify_(self) -> None:
        if not 0 <= self.pending.value.data <= 7:
            self._fail(f"pending groups must be in [0, 7], got {self.pending.value.data}")


@irdl_op_definition
class SetmaxnregOp(PtxOp):
    """``ttarget.setmaxnreg "inc" 232`` → ``setmaxnreg.inc.sync.aligned.u32 232;``: the
    warpgroup's per-thread register budget (24..256, a multiple of 8)."""

    name = "ttarget.setmaxnreg"
    PTX_OPCODE: ClassVar[str] = "setmaxnreg.{action}.sync.aligned.u32"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$count",)

    PTX: ClassVar[tuple[int, int]] = (8, 0)
    SM: ClassVar[int] = 90
    action = prop_def(StringAttr)
    count = prop_def(IntegerAttr[I64])
    assembly_format = "$action $count attr-dict"

    def __init__(self, action: str, count: int):
        super().__init__(properties={"action": StringAttr(action), "count": i64_attr(count)})

    def verify_(self) -> None:
        if self.action.data not in ("inc", "dec"):
            self._fail(f"action must be inc or dec, got '{self.action.data}'")
        c = self.count.value.data
        if not 24 <= c <= 256 or c % 8:
            self._fail(f"register count must be a multiple of 8 in [24, 256], got {c}")
