"""Arithmetic, comparison, selection and conversion instructions.

The simple families are tables: each op names the PTX types it takes (``TYPES``), the
modifiers valid on float and integer types, and whether a float form needs a
rounding mode; :class:`ArithOp` checks them all and prints ``{mnemonic}.{mods}``
followed by the destination and the sources.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, prop_def, var_operand_def

from tessera.ir.target.base import PtxOp, reg_class
from tessera.ir.target.facts import (
    CMP_FLOAT,
    CMP_INT,
    FLOAT_TYPES,
    FP8_PAIR_TYPES,
    INT_TYPES,
    ROUNDING_F,
    ROUNDING_I,
    TYPE_BITS,
    Requirement,
    cvt_requirement,
)
from tessera.ir.target.types import RegisterType


class ArithOp(PtxOp, ABC):
    """Arithmetic: ``dst = op(srcs)``, all operands of the instruction type."""

    PTX_OPCODE: ClassVar[str] = "{mnemonic}.{mods}"

    ARITY: ClassVar[int] = 2
    TYPES: ClassVar[frozenset[str]] = frozenset()
    FLOAT_MODS: ClassVar[frozenset[str]] = frozenset()
    INT_MODS: ClassVar[frozenset[str]] = frozenset()
    NEEDS_ROUNDING: ClassVar[bool] = False
    APPROX_ONLY: ClassVar[bool] = False

    def _arith_init(self, mods: str, dst: SSAValue, srcs: Sequence[SSAValue]) -> None:
        IRDLOperation.__init__(self, operands=[dst, *srcs], properties={"mods": StringAttr(mods)})

    def _srcs(self) -> list[SSAValue]:
        return list(self.operands[1:])

    def verify_(self) -> None:
        mods, (ty,) = self._mods(self.mods)  # type: ignore[attr-defined]
        if ty not in self.TYPES:
            self._fail(f"unsupported type .{ty} (valid: {', '.join(sorted(self.TYPES))})")
        allowed = self.FLOAT_MODS if ty in FLOAT_TYPES else self.INT_MODS
        for m in mods:
            if m not in allowed:
                kind = "float" if ty in FLOAT_TYPES else "integer"
                self._fail(f"modifier '{m}' does not apply to {kind} type .{ty}")
        if len(set(mods)) != len(mods):
            self._fail(f"repeated modifier in \"{self.mods.data}\"")  # type: ignore[attr-defined]
        rnd = [m for m in mods if m in ROUNDING_F]
        if len(rnd) > 1:
            self._fail("at most one rounding modifier")
        if self.APPROX_ONLY and "approx" not in mods:
            self._fail("only the .approx form exists")
        if self.NEEDS_ROUNDING and ty in ("f32", "f64") and not rnd and "approx" not in mods:
            self._fail(f".{ty} needs a rounding modifier (rn, rz, rm, rp) or approx")
        dty, sty = self._dst_src_types(ty, mods)
        self._dst(self.operands[0], dty)
        for s in self._srcs():
            self._src(s, sty)

    def _dst_src_types(self, ty: str, mods: list[str]) -> tuple[str, str]:
        return ty, ty


_INT = frozenset({"u16", "s16", "u32", "s32", "u64", "s64"})
_FLT = frozenset({"f32", "f64"})
_BITS = frozenset({"b16", "b32", "b64", "pred"})
_F_RND = ROUNDING_F | {"ftz", "sat"}

_BIN_FMT = "$mods $dst `,` $a `,` $b attr-dict"
_UN_FMT = "$mods $dst `,` $a attr-dict"
_TERN_FMT = "$mods $dst `,` $a `,` $b `,` $c attr-dict"


class BinaryArithOp(ArithOp, ABC):
    """``op.MODS d, a, b``."""

    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "$a", "$b")

    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    a = operand_def(RegisterType)
    b = operand_def(RegisterType)
    assembly_format = _BIN_FMT

    def __init__(self, mods: str, dst: SSAValue, a: SSAValue, b: SSAValue):
        self._arith_init(mods, dst, [a, b])


class UnaryArithOp(ArithOp, ABC):
    """``op.MODS d, a``."""

    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "$a")

    ARITY: ClassVar[int] = 1
    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    a = operand_def(RegisterType)
    assembly_format = _UN_FMT

    def __init__(self, mods: str, dst: SSAValue, a: SSAValue):
        self._arith_init(mods, dst, [a])


@irdl_op_definition
class AddOp(BinaryArithOp):
    """``ttarget.add "rn.f32" %d, %a, %b`` → ``add.rn.f32 %d, %a, %b;``."""

    name = "ttarget.add"
    TYPES: ClassVar[frozenset[str]] = _INT | _FLT
    FLOAT_MODS: ClassVar[frozenset[str]] = _F_RND
    INT_MODS: ClassVar[frozenset[str]] = frozenset({"sat"})
    MODIFIERS: ClassVar[frozenset[str]] = FLOAT_MODS | INT_MODS


@irdl_op_definition
class SubOp(BinaryArithOp):
    """``sub``: ``d = a - b``."""

    name = "ttarget.sub"
    TYPES: ClassVar[frozenset[str]] = _INT | _FLT
    FLOAT_MODS: ClassVar[frozenset[str]] = _F_RND
    INT_MODS: ClassVar[frozenset[str]] = frozenset({"sat"})
    MODIFIERS: ClassVar[frozenset[str]] = FLOAT_MODS | INT_MODS


@irdl_op_definition
class DivOp(BinaryArithOp):
    """``div``: float division needs ``rn``/``rz``/``rm``/``rp`` (IEEE), ``approx`` or ``full``."""

    name = "ttarget.div"
    TYPES: ClassVar[frozenset[str]] = _INT | _FLT
    FLOAT_MODS: ClassVar[frozenset[str]] = _F_RND | {"approx", "full"}
    MODIFIERS: ClassVar[frozenset[str]] = FLOAT_MODS
    NEEDS_ROUNDING: ClassVar[bool] = True

    def _dst_src_types(self, ty: str, mods: list[str]) -> tuple[str, str]:
        if "full" in mods and ty != "f32":
            self._fail("div.full applies to .f32 only")
        return ty, ty


@irdl_op_definition
class RemOp(BinaryArithOp):
    """``rem``: integer remainder (sign of the dividend)."""

    name = "ttarget.rem"
    TYPES: ClassVar[frozenset[str]] = _INT


@irdl_op_definition
class MinOp(BinaryArithOp):
    """``min``; for floats NaN-ignoring unless ``NaN`` is given."""

    name = "ttarget.min"
    TYPES: ClassVar[frozenset[str]] = _INT | _FLT
    FLOAT_MODS: ClassVar[frozenset[str]] = frozenset({"ftz", "NaN"})
    MODIFIERS: ClassVar[frozenset[str]] = FLOAT_MODS


@irdl_op_definition
class MaxOp(BinaryArithOp):
    """``max``; for floats NaN-ignoring unless ``NaN`` is given."""

    name = "ttarget.max"
    TYPES: ClassVar[frozenset[str]] = _INT | _FLT
    FLOAT_MODS: ClassVar[frozenset[str]] = frozenset({"ftz", "NaN"})
    MODIFIERS: ClassVar[frozenset[str]] = FLOAT_MODS


@irdl_op_definition
class AndOp(BinaryArithOp):
    """``and``: bitwise (logical on ``.pred``)."""

    name = "ttarget.and"
    TYPES: ClassVar[frozenset[str]] = _BITS


@irdl_op_definition
class OrOp(BinaryArithOp):
    """``or``: bitwise (logical on ``.pred``)."""

    name = "ttarget.or"
    TYPES: ClassVar[frozenset[str]] = _BITS


@irdl_op_definition
class XorOp(BinaryArithOp):
    """``xor``: bitwise (logical on ``.pred``)."""

    name = "ttarget.xor"
    TYPES: ClassVar[frozenset[str]] = _BITS


@irdl_op_definition
class CopysignOp(BinaryArithOp):
    """``copysign``: ``d`` has the magnitude of ``b`` and the sign of ``a``."""

    name = "ttarget.copysign"
    TYPES: ClassVar[frozenset[str]] = _FLT


@irdl_op_definition
class MulOp(ArithOp):
    """``mul``: floats take rounding/ftz/sat; integers need ``lo``, ``hi`` or ``wide``
    (``mul.wide.s32`` writes a 64-bit destination)."""

    name = "ttarget.mul"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "$a", "$b")

    TYPES: ClassVar[frozenset[str]] = _INT | _FLT
    FLOAT_MODS: ClassVar[frozenset[str]] = _F_RND
    INT_MODS: ClassVar[frozenset[str]] = frozenset({"lo", "hi", "wide"})
    MODIFIERS: ClassVar[frozenset[str]] = FLOAT_MODS | INT_MODS
    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    a = operand_def(RegisterType)
    b = operand_def(RegisterType)
    assembly_format = _BIN_FMT

    def __init__(self, mods: str, dst: SSAValue, a: SSAValue, b: SSAValue):
        self._arith_init(mods, dst, [a, b])

    def _dst_src_types(self, ty: str, mods: list[str]) -> tuple[str, str]:
        if ty in _INT:
            modes = [m for m in mods if m in self.INT_MODS]
            if len(modes) != 1:
                self._fail(f"integer mul needs exactly one of lo, hi, wide (got \"{self.mods.data}\")")
            if modes[0] == "wide":
                if ty not in ("u16", "s16", "u32", "s32"):
                    self._fail(f"mul.wide takes 16- or 32-bit sources, not .{ty}")
                return f"{ty[0]}{2 * TYPE_BITS[ty]}", ty
        return ty, ty


class _ShiftOp(ArithOp, ABC):
    """Base of ``shl`` / ``shr``: ``d = a << b`` / ``a >> b``, the shift amount a 32-bit
    register or immediate whatever the width of ``a``."""

    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "$a", "$b")

    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    a = operand_def(RegisterType)
    b = operand_def(RegisterType)
    assembly_format = _BIN_FMT

    def __init__(self, mods: str, dst: SSAValue, a: SSAValue, b: SSAValue):
        self._arith_init(mods, dst, [a, b])

    def verify_(self) -> None:
        _, (ty,) = self._mods(self.mods)
        if ty not in self.TYPES:
            self._fail(f"unsupported type .{ty} (valid: {', '.join(sorted(self.TYPES))})")
        self._dst(self.dst, ty)
        self._src(self.a, ty)
        self._src(self.b, "u32", "shift amount")


@irdl_op_definition
class ShlOp(_ShiftOp):
    """``shl.b32 %d, %a, %b``: shift left."""

    name = "ttarget.shl"
    TYPES: ClassVar[frozenset[str]] = frozenset({"b16", "b32", "b64"})


@irdl_op_definition
class ShrOp(_ShiftOp):
    """``shr.u32`` (logical) / ``shr.s32`` (arithmetic): shift right."""

    name = "ttarget.shr"
    TYPES: ClassVar[frozenset[str]] = frozenset({"b16", "b32", "b64"}) | _INT


@irdl_op_definition
class NegOp(UnaryArithOp):
    """``neg``: ``d = -a``."""

    name = "ttarget.neg"
    TYPES: ClassVar[frozenset[str]] = frozenset({"s16", "s32", "s64"}) | _FLT
    FLOAT_MODS: ClassVar[frozenset[str]] = frozenset({"ftz"})
    MODIFIERS: ClassVar[frozenset[str]] = FLOAT_MODS


@irdl_op_definition
class AbsOp(UnaryArithOp):
    """``abs``: ``d = |a|``."""

    name = "ttarget.abs"
    TYPES: ClassVar[frozenset[str]] = frozenset({"s16", "s32", "s64"}) | _FLT
    FLOAT_MODS: ClassVar[frozenset[str]] = frozenset({"ftz"})
    MODIFIERS: ClassVar[frozenset[str]] = FLOAT_MODS


@irdl_op_definition
class NotOp(UnaryArithOp):
    """``not``: bitwise complement (logical on ``.pred``)."""

    name = "ttarget.not"
    TYPES: ClassVar[frozenset[str]] = _BITS


@irdl_op_definition
class RcpOp(UnaryArithOp):
    """``rcp``: ``d = 1/a``, IEEE (``rn``...) or ``approx``."""

    name = "ttarget.rcp"
    TYPES: ClassVar[frozenset[str]] = _FLT
    FLOAT_MODS: ClassVar[frozenset[str]] = _F_RND | {"approx"}
    MODIFIERS: ClassVar[frozenset[str]] = FLOAT_MODS
    NEEDS_ROUNDING: ClassVar[bool] = True


@irdl_op_definition
class SqrtOp(UnaryArithOp):
    """``sqrt``: IEEE (``rn``...) or ``approx``."""

    name = "ttarget.sqrt"
    TYPES: ClassVar[frozenset[str]] = _FLT
    FLOAT_MODS: ClassVar[frozenset[str]] = _F_RND | {"approx"}
    MODIFIERS: ClassVar[frozenset[str]] = FLOAT_MODS
    NEEDS_ROUNDING: ClassVar[bool] = True


@irdl_op_definition
class RsqrtOp(UnaryArithOp):
    """``rsqrt.approx``: ``d = 1/sqrt(a)``."""

    name = "ttarget.rsqrt"
    TYPES: ClassVar[frozenset[str]] = _FLT
    FLOAT_MODS: ClassVar[frozenset[str]] = frozenset({"approx", "ftz"})
    MODIFIERS: ClassVar[frozenset[str]] = FLOAT_MODS
    APPROX_ONLY: ClassVar[bool] = True


class _ApproxF32Op(UnaryArithOp, ABC):
    """Base of the f32 ``.approx`` special functions (``ex2``, ``lg2``, ``sin``, ``cos``)."""

    TYPES: ClassVar[frozenset[str]] = frozenset({"f32"})
    FLOAT_MODS: ClassVar[frozenset[str]] = frozenset({"approx", "ftz"})
    MODIFIERS: ClassVar[frozenset[str]] = FLOAT_MODS
    APPROX_ONLY: ClassVar[bool] = True


@irdl_op_definition
class Ex2Op(_ApproxF32Op):
    """``ex2.approx``: ``d = 2**a``."""

    name = "ttarget.ex2"


@irdl_op_definition
class Lg2Op(_ApproxF32Op):
    """``lg2.approx``: ``d = log2(a)``."""

    name = "ttarget.lg2"


@irdl_op_definition
class SinOp(_ApproxF32Op):
    """``sin.approx``."""

    name = "ttarget.sin"


@irdl_op_definition
class CosOp(_ApproxF32Op):
    """``cos.approx``."""

    name = "ttarget.cos"


@irdl_op_definition
class TanhOp(UnaryArithOp):
    """``tanh.approx.f32`` (sm_75, PTX 7.0)."""

    name = "ttarget.tanh"
    TYPES: ClassVar[frozenset[str]] = frozenset({"f32"})
    FLOAT_MODS: ClassVar[frozenset[str]] = frozenset({"approx"})
    MODIFIERS: ClassVar[frozenset[str]] = FLOAT_MODS
    APPROX_ONLY: ClassVar[bool] = True
    PTX: ClassVar[tuple[int, int]] = (7, 0)
    SM: ClassVar[int] = 75


class _TernaryOp(ArithOp, ABC):
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "$a", "$b", "$c")

    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    a = operand_def(RegisterType)
    b = operand_def(RegisterType)
    c = operand_def(RegisterType)
    assembly_format = _TERN_FMT

    def __init__(self, mods: str, dst: SSAValue, a: SSAValue, b: SSAValue, c: SSAValue):
        self._arith_init(mods, dst, [a, b, c])


@irdl_op_definition
class FmaOp(_TernaryOp):
    """``fma.rn.f32 %d, %a, %b, %c``: fused ``a*b + c``, one rounding."""

    name = "ttarget.fma"

    ARITY: ClassVar[int] = 3
    TYPES: ClassVar[frozenset[str]] = _FLT
    FLOAT_MODS: ClassVar[frozenset[str]] = _F_RND
    MODIFIERS: ClassVar[frozenset[str]] = FLOAT_MODS
    NEEDS_ROUNDING: ClassVar[bool] = True


@irdl_op_definition
class MadOp(_TernaryOp):
    """``mad.lo.s32 %d, %a, %b, %c``: integer ``a*b + c`` (``lo``, ``hi`` or ``wide``)."""

    name = "ttarget.mad"

    ARITY: ClassVar[int] = 3
    TYPES: ClassVar[frozenset[str]] = _INT
    INT_MODS: ClassVar[frozenset[str]] = frozenset({"lo", "hi", "wide"})
    MODIFIERS: ClassVar[frozenset[str]] = INT_MODS

    def _dst_src_types(self, ty: str, mods: list[str]) -> tuple[str, str]:
        if len(mods) != 1:
            self._fail("needs exactly one of lo, hi, wide")
        if mods == ["wide"]:
            self._fail("mad.wide is not supported; use mul.wide and add")
        return ty, ty


# --------------------------------------------------------------------------- compare, select, convert


@irdl_op_definition
class SelpOp(PtxOp):
    """``selp.f32 %d, %a, %b, %p``: ``d = p ? a : b``."""

    name = "ttarget.selp"
    PTX_OPCODE: ClassVar[str] = "selp.{mods}"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "$a", "$b", "$pred")

    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    a = operand_def(RegisterType)
    b = operand_def(RegisterType)
    pred = operand_def(RegisterType)
    assembly_format = "$mods $dst `,` $a `,` $b `,` $pred attr-dict"

    def __init__(self, ty: str, dst: SSAValue, a: SSAValue, b: SSAValue, pred: SSAValue):
        super().__init__(operands=[dst, a, b, pred], properties={"mods": StringAttr(ty)})

    def verify_(self) -> None:
        _, (ty,) = self._mods(self.mods)
        if ty in ("pred", "f16", "bf16", "f16x2", "bf16x2") or TYPE_BITS[ty] < 16:
            self._fail(f"unsupported type .{ty}")
        self._dst(self.dst, ty)
        self._src(self.a, ty)
        self._src(self.b, ty)
        if reg_class(self.pred) != "pred":
            self._fail("selector must be a pred register")


@irdl_op_definition
class SetpOp(PtxOp):
    """``setp.lt.f32 %p, %a, %b``: compare into a predicate."""

    name = "ttarget.setp"
    PTX_OPCODE: ClassVar[str] = "setp.{mods}"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "$a", "$b")

    MODIFIERS: ClassVar[frozenset[str]] = CMP_INT | CMP_FLOAT | {"ftz"}
    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    a = operand_def(RegisterType)
    b = operand_def(RegisterType)
    assembly_format = _BIN_FMT

    def __init__(self, mods: str, dst: SSAValue, a: SSAValue, b: SSAValue):
        super().__init__(operands=[dst, a, b], properties={"mods": StringAttr(mods)})

    def verify_(self) -> None:
        mods, (ty,) = self._mods(self.mods)
        cmps = [m for m in mods if m != "ftz"]
        if len(cmps) != 1:
            self._fail(f"needs exactly one comparison in \"{self.mods.data}\"")
        valid = CMP_FLOAT if ty in _FLT else CMP_INT
        if ty == "pred" or ty in ("f16", "bf16", "f16x2", "bf16x2") or cmps[0] not in valid:
            self._fail(f"comparison '{cmps[0]}' is not defined on .{ty}")
        if "ftz" in mods and ty != "f32":
            self._fail("ftz applies to .f32 only")
        self._dst(self.dst, "pred")
        self._src(self.a, ty)
        self._src(self.b, ty)


@irdl_op_definition
class CvtOp(PtxOp):
    """Conversion: ``ttarget.cvt "rn.f32.s32" %d, %a`` → ``cvt.rn.f32.s32 %d, %a;``.

    Types are destination then source. Float narrowing needs a rounding mode
    (``rn``…), float→int an integer rounding (``rzi``…). Packed conversions take
    two sources (high element first, as in PTX): ``cvt.rn.bf16x2.f32 %d, %hi, %lo``,
    ``cvt.rn.satfinite.e4m3x2.f32 %d, %hi, %lo`` (sm_89); ``cvt.rn.f16x2.e4m3x2 %d, %a``
    widens two fp8 codes held in a ``b16`` register (sm_89).
    """

    name = "ttarget.cvt"
    PTX_OPCODE: ClassVar[str] = "cvt.{mods}"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "*$srcs")

    MODIFIERS: ClassVar[frozenset[str]] = ROUNDING_F | ROUNDING_I | {"ftz", "sat", "satfinite", "relu"}
    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    srcs = var_operand_def(RegisterType)
    assembly_format = "$mods $dst `,` $srcs attr-dict"

    def __init__(self, mods: str, dst: SSAValue, srcs: Sequence[SSAValue]):
        super().__init__(operands=[dst, list(srcs)], properties={"mods": StringAttr(mods)})

    def _types(self) -> tuple[list[str], str, str]:
        mods, (dty, sty) = self._mods(self.mods, 2)
        return mods, dty, sty

    def requirement(self) -> Requirement:
        _, dty, sty = self._types()
        return cvt_requirement(dty, sty)

    def verify_(self) -> None:
        mods, dty, sty = self._types()
        rf = [m for m in mods if m in ROUNDING_F]
        ri = [m for m in mods if m in ROUNDING_I]
        if len(rf) + len(ri) > 1:
            self._fail("at most one rounding modifier")
        if sty in FP8_PAIR_TYPES:
            # cvt.rn.f16x2.e4m3x2 %r, %rs: two fp8 codes (b16) widened, exactly, to f16x2
            if dty != "f16x2" or rf != ["rn"] or ri or len(mods) != 1:
                self._fail(f"cvt from .{sty} is cvt.rn.f16x2.{sty}")
            if len(self.srcs) != 1:
                self._fail(f"cvt from .{sty} takes 1 source, got {len(self.srcs)}")
            self._dst(self.dst, dty)
            if self._src(self.srcs[0], sty) == "imm":
                self._fail("sources must be registers")
            return
        packed = dty in FP8_PAIR_TYPES or dty in ("bf16x2", "f16x2")
        nsrc = 2 if packed else 1
        if len(self.srcs) != nsrc:
            self._fail(f"cvt to .{dty} takes {nsrc} source(s), got {len(self.srcs)}")
        if packed:
            if sty != "f32":
                self._fail(f"packed cvt to .{dty} converts from .f32, not .{sty}")
            if not rf or rf != ["rn"]:
                self._fail(f"packed cvt to .{dty} needs .rn")
            if dty in FP8_PAIR_TYPES and "satfinite" not in mods:
                self._fail(f"cvt to .{dty} needs .satfinite")
        elif dty in FLOAT_TYPES and sty in FLOAT_TYPES:
            # f16 <-> bf16 keep the width but not the values: they round like a narrowing.
            rounds = TYPE_BITS[dty] < TYPE_BITS[sty] or (
                TYPE_BITS[dty] == TYPE_BITS[sty] and dty != sty)
            if rounds and not rf:
                self._fail(f"narrowing .{sty} to .{dty} needs a rounding modifier (rn, rz, rm, rp)")
            if not rounds and rf and dty != sty:
                self._fail(f"widening .{sty} to .{dty} is exact; drop the rounding modifier")
            if ri and dty != sty:
                self._fail("integer rounding applies to float->int or same-type float cvt")
        elif dty in FLOAT_TYPES and sty in INT_TYPES:
            if not rf:
                self._fail(f"int .{sty} to float .{dty} needs a rounding modifier (rn, rz, rm, rp)")
        elif dty in INT_TYPES and sty in FLOAT_TYPES:
            if not ri:
                self._fail(f"float .{sty} to int .{dty} needs an integer rounding (rni, rzi, rmi, rpi)")
        elif dty in INT_TYPES and sty in INT_TYPES:
            if rf or ri:
                self._fail("int to int cvt takes no rounding modifier")
        else:
            self._fail(f"cannot convert .{sty} to .{dty}")
        if "satfinite" in mods and not packed and dty not in ("f16", "bf16"):
            self._fail(".satfinite applies to conversions into f16/bf16/f8 types")
        self._dst(self.dst, dty)
        for s in self.srcs:
            if self._src(s, sty) == "imm":
                self._fail("sources must be registers")
