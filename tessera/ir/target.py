"""Target IR (``ttarget``): PTX instructions on virtual registers.

A kernel is one ``ttarget.func`` whose body is a single flat block of
instructions, read top to bottom like a PTX listing; control flow is
``ttarget.label`` plus (predicated) ``ttarget.bra``. Every op prints as exactly
one PTX line (see :mod:`tessera.passes.emit_ptx`).

Registers are not SSA: ``%r = ttarget.reg "f32"`` declares a virtual register of
a PTX register class (``pred``, ``b16``, ``b32``, ``b64``, ``f32``, ``f64``) and
instructions name it as a destination or a source, any number of times.
Immediate operands are values made by ``ttarget.imm`` (printed inline). Both are
values of type ``!ttarget.reg``, so instructions need no type lists.

Each instruction carries its PTX modifier chain as a string, exactly as it
follows the opcode in PTX (``"rn.f32"`` for ``add.rn.f32``,
``"global.v4.f32"`` for ``ld.global.v4.f32``); verifiers check every modifier
and that registers have a class compatible with the instruction type::

    ttarget.func @scale(%x: !ttarget.param<u64>, %n: !ttarget.param<u32>) maxntid = 128 {
      %rd0 = ttarget.reg "b64"
      %f0 = ttarget.reg "f32"
      %two = ttarget.imm 2.000000e+00 : f32
      ttarget.ld_param "u64" %rd0, %x
      ttarget.cvta "to.global.u64" %rd0, %rd0
      ttarget.ld "global.f32" (%f0), [%rd0 + 0]
      ttarget.mul "rn.f32" %f0, %f0, %two
      ttarget.st "global.f32" [%rd0 + 0], (%f0)
      ttarget.ret
    }
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    StringAttr,
    SymbolRefAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import (
    Attribute,
    Block,
    BlockArgument,
    Dialect,
    Operation,
    ParametrizedAttribute,
    Region,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import IsolatedFromAbove, NoTerminator, Pure, SymbolOpInterface, SymbolTable
from xdsl.utils.exceptions import VerifyException

from tessera.ir import host_collectives as hc

# --------------------------------------------------------------------------- PTX facts

REG_CLASSES: dict[str, int] = {"pred": 1, "b16": 16, "b32": 32, "b64": 64, "f32": 32, "f64": 64}
"""PTX register classes and their widths in bits."""

REG_PREFIX: dict[str, str] = {
    "pred": "%p", "b16": "%rs", "b32": "%r", "b64": "%rd", "f32": "%f", "f64": "%fd",
}

TYPE_BITS: dict[str, int] = {
    "pred": 1,
    "b8": 8, "u8": 8, "s8": 8,
    "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16, "e4m3x2": 16, "e5m2x2": 16,
    "b32": 32, "u32": 32, "s32": 32, "f32": 32, "f16x2": 32, "bf16x2": 32,
    "b64": 64, "u64": 64, "s64": 64, "f64": 64,
}
"""PTX fundamental (and packed) types and their widths in bits."""

FLOAT_TYPES = frozenset({"f16", "bf16", "f32", "f64", "f16x2", "bf16x2"})
INT_TYPES = frozenset({"u8", "s8", "u16", "s16", "u32", "s32", "u64", "s64"})
BIT_TYPES = frozenset({"b8", "b16", "b32", "b64"})

ROUNDING_F = frozenset({"rn", "rz", "rm", "rp"})
ROUNDING_I = frozenset({"rni", "rzi", "rmi", "rpi"})

SPECIAL_REGISTERS = frozenset(
    {f"{r}.{d}" for r in ("tid", "ntid", "ctaid", "nctaid") for d in "xyz"}
    | {"laneid", "warpid"}
    | {f"{r}.{d}" for r in ("clusterid", "nclusterid", "cluster_ctaid", "cluster_nctaid") for d in "xyz"}
    | {"cluster_ctarank", "cluster_nctarank"}
)
CLUSTER_REGISTERS = frozenset(r for r in SPECIAL_REGISTERS if "cluster" in r)
"""The special registers of thread-block clusters (sm_90, PTX 7.8)."""

TARGETS: dict[str, tuple[int, tuple[int, int]]] = {
    "sm_80": (80, (7, 0)),
    "sm_86": (86, (7, 1)),
    "sm_89": (89, (7, 8)),
    "sm_90": (90, (7, 8)),
    "sm_90a": (90, (8, 0)),
}
"""Supported ``.target`` names: (SM number, lowest PTX ISA that knows the target)."""

MAX_PTX_VERSION = (9, 0)
"""The newest PTX ISA the deployed driver (CUDA 13.0) loads."""


def _i64(v: int) -> IntegerAttr:
    return IntegerAttr(v, i64)


def parse_mods(mods: str) -> list[str]:
    return [m for m in mods.split(".") if m] if mods else []


# --------------------------------------------------------------------------- types


@irdl_attr_definition
class RegisterType(ParametrizedAttribute, TypeAttribute):
    """A PTX operand: a virtual register (``ttarget.reg``) or an immediate (``ttarget.imm``)."""

    name = "ttarget.reg"


@irdl_attr_definition
class ParamType(ParametrizedAttribute, TypeAttribute):
    """A kernel parameter in the ``.param`` state space: ``!ttarget.param<u64>``."""

    name = "ttarget.param"

    ty: StringAttr

    PARAM_TYPES: ClassVar[frozenset[str]] = frozenset(
        {"u32", "s32", "u64", "s64", "b32", "b64", "f32", "f64", "tmap"}
    )

    def __init__(self, ty: str | StringAttr):
        super().__init__(StringAttr(ty) if isinstance(ty, str) else ty)

    def verify(self) -> None:
        if self.ty.data not in self.PARAM_TYPES:
            raise VerifyException(
                f"!ttarget.param: unsupported parameter type '{self.ty.data}'; valid: "
                + ", ".join(sorted(self.PARAM_TYPES))
            )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        parser.parse_punctuation("<")
        ty = parser.parse_identifier()
        parser.parse_punctuation(">")
        return (StringAttr(ty),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.ty.data}>")


# --------------------------------------------------------------------------- helpers


def reg_class(v: SSAValue) -> str | None:
    """The register class of ``v`` (``"imm"`` for an immediate), None if it is neither."""
    owner = v.owner
    if isinstance(owner, RegOp):
        return owner.cls.data
    if isinstance(owner, ImmOp):
        return "imm"
    return None


def compatible(cls: str, ty: str) -> bool:
    """Whether a register of class ``cls`` may hold an operand of PTX type ``ty``."""
    if ty == "pred" or cls == "pred":
        return ty == cls
    if ty not in TYPE_BITS or cls not in REG_CLASSES:
        return False
    bits = TYPE_BITS[ty]
    if bits == 8:
        return cls in ("b16", "b32")
    if REG_CLASSES[cls] != bits:
        return False
    if cls.startswith("b"):
        return True
    return cls == ty or ty in BIT_TYPES


class PtxOp(IRDLOperation, ABC):
    """Base of Target IR instructions: modifier checks, operand checks, PTX printing."""

    MODIFIERS: ClassVar[frozenset[str]] = frozenset()
    """Modifiers (other than types) this instruction accepts."""
    PTX: ClassVar[tuple[int, int]] = (6, 0)
    """Lowest PTX ISA version with this instruction."""
    SM: ClassVar[int] = 30
    """Lowest SM architecture with this instruction."""

    def required_ptx(self) -> tuple[int, int]:
        return self.PTX

    def required_sm(self) -> int:
        return self.SM

    @abstractmethod
    def ptx(self, names: PtxNames) -> str:
        """This instruction as one line of PTX (without indentation)."""

    # -- checks shared by instructions

    def _fail(self, msg: str) -> None:
        raise VerifyException(f"{self.name}: {msg}")

    def _mods(self, mods: StringAttr, ntypes: int | Sequence[int] = 1) -> tuple[list[str], list[str]]:
        """Split a modifier chain into (modifiers, types) and check both."""
        parts = parse_mods(mods.data)
        types = [p for p in parts if p in TYPE_BITS]
        others = [p for p in parts if p not in TYPE_BITS]
        for m in others:
            if m not in self.MODIFIERS:
                valid = ", ".join(sorted(self.MODIFIERS)) or "none"
                self._fail(f"unknown modifier '{m}' in \"{mods.data}\" (valid: {valid})")
        counts = (ntypes,) if isinstance(ntypes, int) else tuple(ntypes)
        if len(types) not in counts:
            want = " or ".join(str(c) for c in counts)
            self._fail(f"expected {want} type(s) in \"{mods.data}\", got {len(types)}")
        if parts[len(others):] != types:
            self._fail(f"types must come last in \"{mods.data}\"")
        return others, types

    def _dst(self, v: SSAValue, ty: str | None, what: str = "destination") -> str:
        cls = reg_class(v)
        if cls is None or cls == "imm":
            self._fail(f"{what} must be a register declared by ttarget.reg")
        assert cls is not None
        if ty is not None and not compatible(cls, ty):
            self._fail(f"{what} register of class {cls} cannot hold a .{ty} value")
        return cls

    def _src(self, v: SSAValue, ty: str | None, what: str = "source") -> str:
        cls = reg_class(v)
        if cls is None:
            self._fail(f"{what} must be a ttarget.reg register or a ttarget.imm immediate")
        assert cls is not None
        if cls == "imm":
            imm = v.owner
            assert isinstance(imm, ImmOp)
            if ty is not None:
                imm.check_for(ty, self.name)
            return cls
        if ty is not None and not compatible(cls, ty):
            self._fail(f"{what} register of class {cls} cannot hold a .{ty} value")
        return cls

    def _guard_ok(self, guard: SSAValue | None) -> None:
        if guard is not None and reg_class(guard) != "pred":
            self._fail("guard must be a pred register")

    def _verify_box(self, tmap: SSAValue, c0: SSAValue, c1: SSAValue) -> None:
        """A TMA box operand: a 64-bit tensor map address and two s32 coordinates."""
        if reg_class(tmap) != "b64":
            self._fail("tensor map address must be a b64 register")
        self._src(c0, "s32", "coordinate")
        self._src(c1, "s32", "coordinate")


class PtxNames:
    """Names of registers and immediates while printing one function."""

    def __init__(self) -> None:
        self.names: dict[SSAValue, str] = {}
        self.counts: dict[str, int] = {c: 0 for c in REG_CLASSES}
        self.params: dict[SSAValue, str] = {}

    def declare(self, v: SSAValue, cls: str) -> None:
        self.names[v] = f"{REG_PREFIX[cls]}{self.counts[cls]}"
        self.counts[cls] += 1

    def __call__(self, v: SSAValue) -> str:
        if v in self.names:
            return self.names[v]
        if isinstance(v.owner, ImmOp):
            return v.owner.literal()
        if v in self.params:
            return self.params[v]
        raise ValueError(f"value {v} is not a ttarget register, immediate or parameter")

    def guard(self, guard: SSAValue | None, negate: UnitAttr | None) -> str:
        if guard is None:
            return ""
        return f"@{'!' if negate else ''}{self(guard)} "

    def vec(self, vs: Sequence[SSAValue]) -> str:
        return "{" + ", ".join(self(v) for v in vs) + "}"

    def addr(self, base: SSAValue, offset: IntegerAttr) -> str:
        off = offset.value.data
        return f"[{self(base)}{'+' if off >= 0 else ''}{off}]" if off else f"[{self(base)}]"


_GUARD = "(`if` $guard^)? (`negated` $negate^)?"

# --------------------------------------------------------------------------- declarations


@irdl_op_definition
class RegOp(IRDLOperation):
    """Declares a virtual register of a PTX register class: ``%r = ttarget.reg "f32"``."""

    name = "ttarget.reg"

    cls = prop_def(StringAttr)
    result = result_def(RegisterType)
    assembly_format = "$cls attr-dict"

    def __init__(self, cls: str):
        super().__init__(properties={"cls": StringAttr(cls)}, result_types=[RegisterType()])

    def verify_(self) -> None:
        if self.cls.data not in REG_CLASSES:
            raise VerifyException(
                f"ttarget.reg: unknown register class '{self.cls.data}'; valid: "
                + ", ".join(REG_CLASSES)
            )


@irdl_op_definition
class ImmOp(IRDLOperation):
    """An immediate operand: ``ttarget.imm 4 : i32``, ``ttarget.imm 1.0 : f32``.

    Printed inline where used (floats in PTX's exact hex form ``0f3F800000``).
    """

    name = "ttarget.imm"

    value = prop_def(IntegerAttr | FloatAttr)
    result = result_def(RegisterType)
    traits = traits_def(Pure())
    assembly_format = "$value attr-dict"

    def __init__(self, value: IntegerAttr | FloatAttr):
        super().__init__(properties={"value": value}, result_types=[RegisterType()])

    def verify_(self) -> None:
        v = self.value
        if isinstance(v, FloatAttr) and not isinstance(v.type, Float32Type | Float64Type):
            raise VerifyException(
                f"ttarget.imm: float immediates must be f32 or f64, got {v.type}"
            )

    def is_float(self) -> bool:
        return isinstance(self.value, FloatAttr)

    def check_for(self, ty: str, user: str) -> None:
        """Check that this immediate can be an operand of type ``ty`` of ``user``."""
        if ty == "pred":
            raise VerifyException(f"{user}: a .pred operand cannot be an immediate")
        if ty in FLOAT_TYPES:
            if ty not in ("f32", "f64"):
                raise VerifyException(f"{user}: PTX has no .{ty} immediates")
            v = self.value
            if not isinstance(v, FloatAttr) or TYPE_BITS[ty] != v.type.bitwidth:
                raise VerifyException(
                    f"{user}: a .{ty} operand needs a {ty} float immediate, got {v}"
                )
        elif self.is_float() and ty not in BIT_TYPES:
            raise VerifyException(f"{user}: a .{ty} operand cannot be a float immediate")

    def literal(self) -> str:
        v = self.value
        if isinstance(v, FloatAttr):
            x = v.value.data
            if isinstance(v.type, Float32Type):
                return f"0f{struct.unpack('<I', struct.pack('<f', x))[0]:08X}"
            return f"0d{struct.unpack('<Q', struct.pack('<d', x))[0]:016X}"
        return str(v.value.data)


@irdl_op_definition
class SharedOp(PtxOp):
    """A CTA shared-memory array: ``ttarget.shared "smem0" size = 4096 align = 16``.

    Printed ``.shared .align 16 .b8 smem0[4096];`` at the top of the kernel body.
    """

    name = "ttarget.shared"

    sym = prop_def(StringAttr)
    size = prop_def(IntegerAttr[I64])
    align = prop_def(IntegerAttr[I64])
    assembly_format = "$sym `size` `=` $size `align` `=` $align attr-dict"

    def __init__(self, sym: str, size: int, align: int = 16):
        super().__init__(
            properties={"sym": StringAttr(sym), "size": _i64(size), "align": _i64(align)}
        )

    def verify_(self) -> None:
        if not self.sym.data.isidentifier():
            self._fail(f"'{self.sym.data}' is not a valid PTX identifier")
        if self.size.value.data <= 0:
            self._fail(f"size must be positive, got {self.size.value.data}")
        if self.size.value.data > 227 * 1024:
            self._fail(f"size {self.size.value.data} exceeds 227 KiB of shared memory")
        a = self.align.value.data
        if a <= 0 or a & (a - 1) or a > 128:
            self._fail(f"align must be a power of two <= 128, got {a}")

    def ptx(self, names: PtxNames) -> str:
        return f".shared .align {self.align.value.data} .b8 {self.sym.data}[{self.size.value.data}];"


# --------------------------------------------------------------------------- moves


@irdl_op_definition
class SregOp(PtxOp):
    """Reads a special register: ``ttarget.sreg %r, "tid.x"`` → ``mov.u32 %r, %tid.x;``."""

    name = "ttarget.sreg"

    dst = operand_def(RegisterType)
    sreg = prop_def(StringAttr)
    assembly_format = "$dst `,` $sreg attr-dict"

    def __init__(self, dst: SSAValue, sreg: str):
        super().__init__(operands=[dst], properties={"sreg": StringAttr(sreg)})

    def required_ptx(self) -> tuple[int, int]:
        return (7, 8) if self.sreg.data in CLUSTER_REGISTERS else self.PTX

    def required_sm(self) -> int:
        return 90 if self.sreg.data in CLUSTER_REGISTERS else self.SM

    def verify_(self) -> None:
        if self.sreg.data not in SPECIAL_REGISTERS:
            self._fail(
                f"unknown special register '{self.sreg.data}'; valid: "
                + ", ".join(sorted(SPECIAL_REGISTERS))
            )
        self._dst(self.dst, "u32")

    def ptx(self, names: PtxNames) -> str:
        return f"mov.u32 {names(self.dst)}, %{self.sreg.data};"


@irdl_op_definition
class MovOp(PtxOp):
    """``ttarget.mov "f32" %d, %a`` → ``mov.f32 %d, %a;`` (optionally predicated)."""

    name = "ttarget.mov"

    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    src = operand_def(RegisterType)
    guard = opt_operand_def(RegisterType)
    negate = opt_prop_def(UnitAttr)
    assembly_format = "$mods $dst `,` $src " + _GUARD + " attr-dict"

    def __init__(
        self, ty: str, dst: SSAValue, src: SSAValue, guard: SSAValue | None = None,
        negate: bool = False,
    ):
        super().__init__(
            operands=[dst, src, guard],
            properties={"mods": StringAttr(ty), "negate": UnitAttr() if negate else None},
        )

    def verify_(self) -> None:
        _, (ty,) = self._mods(self.mods)
        self._dst(self.dst, ty)
        self._src(self.src, ty)
        self._guard_ok(self.guard)

    def ptx(self, names: PtxNames) -> str:
        g = names.guard(self.guard, self.negate)
        return f"{g}mov.{self.mods.data} {names(self.dst)}, {names(self.src)};"


@irdl_op_definition
class PackOp(PtxOp):
    """Packs registers into a wider one: ``ttarget.pack "b32" %d, (%lo, %hi)``
    → ``mov.b32 %d, {%lo, %hi};`` (first element in the low bits)."""

    name = "ttarget.pack"

    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    srcs = var_operand_def(RegisterType)
    assembly_format = "$mods $dst `,` `(` $srcs `)` attr-dict"

    def __init__(self, ty: str, dst: SSAValue, srcs: Sequence[SSAValue]):
        super().__init__(operands=[dst, list(srcs)], properties={"mods": StringAttr(ty)})

    def verify_(self) -> None:
        _, (ty,) = self._mods(self.mods)
        if ty not in ("b32", "b64"):
            self._fail(f"packs into .b32 or .b64, not .{ty}")
        self._dst(self.dst, ty)
        if len(self.srcs) not in (2, 4):
            self._fail(f"needs 2 or 4 sources, got {len(self.srcs)}")
        part = f"b{TYPE_BITS[ty] // len(self.srcs)}"
        if part not in BIT_TYPES:
            self._fail(f"cannot split .{ty} into {len(self.srcs)} parts")
        for s in self.srcs:
            if self._src(s, part) == "imm":
                self._fail("sources must be registers")

    def ptx(self, names: PtxNames) -> str:
        return f"mov.{self.mods.data} {names(self.dst)}, {names.vec(self.srcs)};"


@irdl_op_definition
class UnpackOp(PtxOp):
    """Splits a register: ``ttarget.unpack "b32" (%lo, %hi), %s`` → ``mov.b32 {%lo, %hi}, %s;``."""

    name = "ttarget.unpack"

    mods = prop_def(StringAttr)
    dsts = var_operand_def(RegisterType)
    src = operand_def(RegisterType)
    assembly_format = "$mods ` ` `(` $dsts `)` `,` $src attr-dict"

    def __init__(self, ty: str, dsts: Sequence[SSAValue], src: SSAValue):
        super().__init__(operands=[list(dsts), src], properties={"mods": StringAttr(ty)})

    def verify_(self) -> None:
        _, (ty,) = self._mods(self.mods)
        if ty not in ("b32", "b64"):
            self._fail(f"unpacks .b32 or .b64, not .{ty}")
        if len(self.dsts) not in (2, 4):
            self._fail(f"needs 2 or 4 destinations, got {len(self.dsts)}")
        part = f"b{TYPE_BITS[ty] // len(self.dsts)}"
        if part not in BIT_TYPES:
            self._fail(f"cannot split .{ty} into {len(self.dsts)} parts")
        for d in self.dsts:
            self._dst(d, part)
        if self._src(self.src, ty) == "imm":
            self._fail("source must be a register")

    def ptx(self, names: PtxNames) -> str:
        return f"mov.{self.mods.data} {names.vec(self.dsts)}, {names(self.src)};"


class _SymbolAddrOp(PtxOp, ABC):
    """Base of the ops moving a shared array's shared-space address into a ``u32``
    register (``mov.u32 %r, sym;``); ``DECL`` is the op that declares the array."""

    DECL: ClassVar[type[PtxOp]]

    dst = operand_def(RegisterType)
    sym = prop_def(StringAttr)
    assembly_format = "$dst `,` $sym attr-dict"

    def __init__(self, dst: SSAValue, sym: str):
        super().__init__(operands=[dst], properties={"sym": StringAttr(sym)})

    def verify_(self) -> None:
        self._dst(self.dst, "u32")
        func = self.parent_op()
        if isinstance(func, FuncOp):
            syms = {o.sym.data for o in func.block.ops if isinstance(o, self.DECL)}
            if self.sym.data not in syms:
                self._fail(
                    f"no {self.DECL.name} array named '{self.sym.data}' in this function"
                )

    def ptx(self, names: PtxNames) -> str:
        return f"mov.u32 {names(self.dst)}, {self.sym.data};"


@irdl_op_definition
class SharedAddrOp(_SymbolAddrOp):
    """The shared-space address of a ``ttarget.shared`` array:
    ``ttarget.shared_addr %r, "smem0"`` → ``mov.u32 %r, smem0;``."""

    name = "ttarget.shared_addr"
    DECL: ClassVar[type[PtxOp]] = SharedOp


@irdl_op_definition
class LdParamOp(PtxOp):
    """Loads a kernel parameter: ``ttarget.ld_param "u64" %rd, %arg`` → ``ld.param.u64 %rd, [k_param_0];``."""

    name = "ttarget.ld_param"

    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    param = operand_def(ParamType)
    assembly_format = "$mods $dst `,` $param attr-dict `:` type($param)"

    def __init__(self, ty: str, dst: SSAValue, param: SSAValue):
        super().__init__(operands=[dst, param], properties={"mods": StringAttr(ty)})

    def verify_(self) -> None:
        _, (ty,) = self._mods(self.mods)
        pt = self.param.type
        assert isinstance(pt, ParamType)
        if TYPE_BITS[ty] != TYPE_BITS[pt.ty.data]:
            self._fail(f"loads .{ty} from a .{pt.ty.data} parameter")
        self._dst(self.dst, ty)
        if not isinstance(self.param, BlockArgument):
            self._fail("parameter must be an argument of the enclosing ttarget.func")

    def ptx(self, names: PtxNames) -> str:
        return f"ld.param.{self.mods.data} {names(self.dst)}, [{names(self.param)}];"


@irdl_op_definition
class CvtaOp(PtxOp):
    """Converts a generic address to a state space: ``ttarget.cvta "to.global.u64" %d, %a``."""

    name = "ttarget.cvta"

    MODIFIERS: ClassVar[frozenset[str]] = frozenset({"to", "global", "shared", "local", "param"})
    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    src = operand_def(RegisterType)
    assembly_format = "$mods $dst `,` $src attr-dict"

    def __init__(self, mods: str, dst: SSAValue, src: SSAValue):
        super().__init__(operands=[dst, src], properties={"mods": StringAttr(mods)})

    def verify_(self) -> None:
        mods, (ty,) = self._mods(self.mods)
        if ty not in ("u32", "u64"):
            self._fail(f"type must be .u32 or .u64, got .{ty}")
        spaces = [m for m in mods if m != "to"]
        if len(spaces) != 1:
            self._fail("needs exactly one state space (global, shared, local or param)")
        self._dst(self.dst, ty)
        self._src(self.src, ty)

    def ptx(self, names: PtxNames) -> str:
        return f"cvta.{self.mods.data} {names(self.dst)}, {names(self.src)};"


# --------------------------------------------------------------------------- memory

MEM_SPACES = frozenset({"global", "shared", "local", "const"})


class MemOp(PtxOp, ABC):
    MODIFIERS: ClassVar[frozenset[str]] = MEM_SPACES | {"v2", "v4", "ca", "cg", "cs", "lu", "cv", "wb", "wt", "nc", "volatile"}

    def _check_mem(self, mods: StringAttr, values: Sequence[SSAValue], addr: SSAValue, load: bool):
        others, (ty,) = self._mods(mods)
        spaces = [m for m in others if m in MEM_SPACES]
        if len(spaces) != 1:
            self._fail(f"needs exactly one state space ({', '.join(sorted(MEM_SPACES))})")
        space = spaces[0]
        if not load and space == "const":
            self._fail("cannot store to the .const state space")
        vec = [m for m in others if m in ("v2", "v4")]
        n = {"v2": 2, "v4": 4}[vec[0]] if vec else 1
        if len(vec) > 1 or len(values) != n:
            self._fail(f"\"{mods.data}\" moves {n} value(s) but {len(values)} are given")
        if ty == "pred":
            self._fail("cannot load or store .pred values")
        for v in values:
            if load:
                self._dst(v, ty)
            else:
                self._src(v, ty, "stored value")
        acls = reg_class(addr)
        allowed = ("b32", "b64") if space == "shared" else ("b64",)
        if acls not in allowed:
            self._fail(f"{space} address must be a {' or '.join(allowed)} register, got {acls}")
        return space


@irdl_op_definition
class LdOp(MemOp):
    """``ttarget.ld "global.v4.f32" (%a, %b, %c, %d), [%rd + 16]`` → ``ld.global.v4.f32 {...}, [%rd+16];``.

    With ``if %p`` the load is predicated (``@%p ld...``): lanes with a false
    predicate leave their destination registers unchanged.
    """

    name = "ttarget.ld"

    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    mods = prop_def(StringAttr)
    dsts = var_operand_def(RegisterType)
    addr = operand_def(RegisterType)
    offset = prop_def(IntegerAttr[I64])
    guard = opt_operand_def(RegisterType)
    negate = opt_prop_def(UnitAttr)
    assembly_format = (
        "$mods ` ` `(` $dsts `)` `,` `[` $addr `+` $offset `]` " + _GUARD + " attr-dict"
    )

    def __init__(
        self, mods: str, dsts: Sequence[SSAValue], addr: SSAValue, offset: int = 0,
        guard: SSAValue | None = None, negate: bool = False,
    ):
        super().__init__(
            operands=[list(dsts), addr, guard],
            properties={
                "mods": StringAttr(mods), "offset": _i64(offset),
                "negate": UnitAttr() if negate else None,
            },
        )

    def verify_(self) -> None:
        self._check_mem(self.mods, self.dsts, self.addr, load=True)
        self._guard_ok(self.guard)

    def ptx(self, names: PtxNames) -> str:
        g = names.guard(self.guard, self.negate)
        d = names.vec(self.dsts) if len(self.dsts) > 1 else names(self.dsts[0])
        return f"{g}ld.{self.mods.data} {d}, {names.addr(self.addr, self.offset)};"


@irdl_op_definition
class StOp(MemOp):
    """``ttarget.st "global.f32" [%rd + 0], (%f)`` → ``st.global.f32 [%rd], %f;`` (optionally predicated)."""

    name = "ttarget.st"

    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    mods = prop_def(StringAttr)
    addr = operand_def(RegisterType)
    offset = prop_def(IntegerAttr[I64])
    srcs = var_operand_def(RegisterType)
    guard = opt_operand_def(RegisterType)
    negate = opt_prop_def(UnitAttr)
    assembly_format = (
        "$mods ` ` `[` $addr `+` $offset `]` `,` `(` $srcs `)` " + _GUARD + " attr-dict"
    )

    def __init__(
        self, mods: str, addr: SSAValue, srcs: Sequence[SSAValue], offset: int = 0,
        guard: SSAValue | None = None, negate: bool = False,
    ):
        super().__init__(
            operands=[addr, list(srcs), guard],
            properties={
                "mods": StringAttr(mods), "offset": _i64(offset),
                "negate": UnitAttr() if negate else None,
            },
        )

    def verify_(self) -> None:
        self._check_mem(self.mods, self.srcs, self.addr, load=False)
        self._guard_ok(self.guard)

    def ptx(self, names: PtxNames) -> str:
        g = names.guard(self.guard, self.negate)
        s = names.vec(self.srcs) if len(self.srcs) > 1 else names(self.srcs[0])
        return f"{g}st.{self.mods.data} {names.addr(self.addr, self.offset)}, {s};"


@irdl_op_definition
class CpAsyncOp(PtxOp):
    """Asynchronous global→shared copy (sm_80):
    ``ttarget.cp_async "cg.shared.global" [%s + 0], [%g + 0], 16 src_size %n``
    → ``cp.async.cg.shared.global [%s], [%g], 16, %n;``. Bytes past ``src_size`` are zero-filled.
    """

    name = "ttarget.cp_async"

    MODIFIERS: ClassVar[frozenset[str]] = frozenset({"ca", "cg", "shared", "global"})
    PTX: ClassVar[tuple[int, int]] = (7, 0)
    SM: ClassVar[int] = 80
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    dst_offset = prop_def(IntegerAttr[I64])
    src = operand_def(RegisterType)
    src_offset = prop_def(IntegerAttr[I64])
    size = prop_def(IntegerAttr[I64])
    src_size = opt_operand_def(RegisterType)
    assembly_format = (
        "$mods ` ` `[` $dst `+` $dst_offset `]` `,` `[` $src `+` $src_offset `]` `,` $size "
        "(`src_size` $src_size^)? attr-dict"
    )

    def __init__(
        self, cache: str, dst: SSAValue, src: SSAValue, size: int, src_size: SSAValue | None = None,
        dst_offset: int = 0, src_offset: int = 0,
    ):
        super().__init__(
            operands=[dst, src, src_size],
            properties={
                "mods": StringAttr(f"{cache}.shared.global"), "size": _i64(size),
                "dst_offset": _i64(dst_offset), "src_offset": _i64(src_offset),
            },
        )

    def verify_(self) -> None:
        mods, _ = self._mods(self.mods, 0)
        if len(mods) != 3 or mods[0] not in ("ca", "cg") or mods[1:] != ["shared", "global"]:
            self._fail(f"modifiers must be ca|cg.shared.global, got \"{self.mods.data}\"")
        if self.size.value.data not in (4, 8, 16):
            self._fail(f"copy size must be 4, 8 or 16 bytes, got {self.size.value.data}")
        if mods[0] == "cg" and self.size.value.data != 16:
            self._fail(".cg copies must be 16 bytes")
        if reg_class(self.dst) not in ("b32", "b64"):
            self._fail("shared address must be a b32 or b64 register")
        if reg_class(self.src) != "b64":
            self._fail("global address must be a b64 register")
        if self.src_size is not None:
            self._src(self.src_size, "u32", "src_size")

    def ptx(self, names: PtxNames) -> str:
        tail = f", {names(self.src_size)}" if self.src_size is not None else ""
        return (
            f"cp.async.{self.mods.data} {names.addr(self.dst, self.dst_offset)}, "
            f"{names.addr(self.src, self.src_offset)}, {self.size.value.data}{tail};"
        )


@irdl_op_definition
class CpAsyncCommitOp(PtxOp):
    """``ttarget.cp_async_commit`` → ``cp.async.commit_group;``."""

    name = "ttarget.cp_async_commit"

    PTX: ClassVar[tuple[int, int]] = (7, 0)
    SM: ClassVar[int] = 80
    assembly_format = "attr-dict"

    def verify_(self) -> None:
        pass

    def ptx(self, names: PtxNames) -> str:
        return "cp.async.commit_group;"


@irdl_op_definition
class CpAsyncWaitOp(PtxOp):
    """``ttarget.cp_async_wait 0`` → ``cp.async.wait_group 0;`` (wait until at most N groups pend)."""

    name = "ttarget.cp_async_wait"

    PTX: ClassVar[tuple[int, int]] = (7, 0)
    SM: ClassVar[int] = 80
    pending = prop_def(IntegerAttr[I64])
    assembly_format = "$pending attr-dict"

    def __init__(self, pending: int):
        super().__init__(properties={"pending": _i64(pending)})

    def verify_(self) -> None:
        if not 0 <= self.pending.value.data <= 7:
            self._fail(f"pending group count must be in [0, 7], got {self.pending.value.data}")

    def ptx(self, names: PtxNames) -> str:
        return f"cp.async.wait_group {self.pending.value.data};"


@irdl_op_definition
class BarSyncOp(PtxOp):
    """``ttarget.bar_sync 0`` → ``bar.sync 0;`` (all threads of the CTA);
    ``ttarget.bar_sync 1 threads = 128`` → ``bar.sync 1, 128;`` (a named barrier that
    the given number of threads, a multiple of 32, arrive at: e.g. one warpgroup)."""

    name = "ttarget.bar_sync"

    barrier = prop_def(IntegerAttr[I64])
    threads = opt_prop_def(IntegerAttr[I64])
    assembly_format = "$barrier (`threads` `=` $threads^)? attr-dict"

    def __init__(self, barrier: int = 0, threads: int | None = None):
        super().__init__(
            properties={
                "barrier": _i64(barrier), "threads": _i64(threads) if threads is not None else None,
            }
        )

    def verify_(self) -> None:
        if not 0 <= self.barrier.value.data <= 15:
            self._fail(f"barrier id must be in [0, 15], got {self.barrier.value.data}")
        if self.threads is not None:
            t = self.threads.value.data
            if not 32 <= t <= 1024 or t % 32:
                self._fail(f"thread count must be a multiple of 32 in [32, 1024], got {t}")

    def ptx(self, names: PtxNames) -> str:
        if self.threads is not None:
            return f"bar.sync {self.barrier.value.data}, {self.threads.value.data};"
        return f"bar.sync {self.barrier.value.data};"


# --------------------------------------------------------------------------- arithmetic


class ArithOp(PtxOp, ABC):
    """Arithmetic: ``dst = op(srcs)``, all operands of the instruction type."""

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

    def ptx(self, names: PtxNames) -> str:
        ops = ", ".join(names(v) for v in self.operands)
        return f"{self.name.removeprefix('ttarget.')}.{self.mods.data} {ops};"  # type: ignore[attr-defined]


_INT = frozenset({"u16", "s16", "u32", "s32", "u64", "s64"})
_FLT = frozenset({"f32", "f64"})
_BITS = frozenset({"b16", "b32", "b64", "pred"})
_F_RND = ROUNDING_F | {"ftz", "sat"}

_BIN_FMT = "$mods $dst `,` $a `,` $b attr-dict"
_UN_FMT = "$mods $dst `,` $a attr-dict"
_TERN_FMT = "$mods $dst `,` $a `,` $b `,` $c attr-dict"


class BinaryArithOp(ArithOp, ABC):
    """``op.MODS d, a, b``."""

    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    a = operand_def(RegisterType)
    b = operand_def(RegisterType)
    assembly_format = _BIN_FMT

    def __init__(self, mods: str, dst: SSAValue, a: SSAValue, b: SSAValue):
        self._arith_init(mods, dst, [a, b])


class UnaryArithOp(ArithOp, ABC):
    """``op.MODS d, a``."""

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


@irdl_op_definition
class SelpOp(PtxOp):
    """``selp.f32 %d, %a, %b, %p``: ``d = p ? a : b``."""

    name = "ttarget.selp"

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

    def ptx(self, names: PtxNames) -> str:
        ops = ", ".join(names(v) for v in (self.dst, self.a, self.b, self.pred))
        return f"selp.{self.mods.data} {ops};"


CMP_INT = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs"})
CMP_FLOAT = frozenset(
    {"eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"}
)


@irdl_op_definition
class SetpOp(PtxOp):
    """``setp.lt.f32 %p, %a, %b``: compare into a predicate."""

    name = "ttarget.setp"

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

    def ptx(self, names: PtxNames) -> str:
        return f"setp.{self.mods.data} {names(self.dst)}, {names(self.a)}, {names(self.b)};"


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

    def required_ptx(self) -> tuple[int, int]:
        _, dty, sty = self._types()
        if dty in ("e4m3x2", "e5m2x2") or sty in ("e4m3x2", "e5m2x2"):
            return (7, 8)
        if sty == "bf16":
            return (7, 8)
        if "bf16" in (dty, sty) or dty == "bf16x2":
            return (7, 0)
        return (6, 0)

    def required_sm(self) -> int:
        _, dty, sty = self._types()
        if dty in ("e4m3x2", "e5m2x2") or sty in ("e4m3x2", "e5m2x2"):
            return 89
        if sty == "bf16":
            return 90
        if "bf16" in (dty, sty) or dty == "bf16x2":
            return 80
        return 30

    def verify_(self) -> None:
        mods, dty, sty = self._types()
        rf = [m for m in mods if m in ROUNDING_F]
        ri = [m for m in mods if m in ROUNDING_I]
        if len(rf) + len(ri) > 1:
            self._fail("at most one rounding modifier")
        if sty in ("e4m3x2", "e5m2x2"):
            # cvt.rn.f16x2.e4m3x2 %r, %rs: two fp8 codes (b16) widened, exactly, to f16x2
            if dty != "f16x2" or rf != ["rn"] or ri or len(mods) != 1:
                self._fail(f"cvt from .{sty} is cvt.rn.f16x2.{sty}")
            if len(self.srcs) != 1:
                self._fail(f"cvt from .{sty} takes 1 source, got {len(self.srcs)}")
            self._dst(self.dst, dty)
            if self._src(self.srcs[0], sty) == "imm":
                self._fail("sources must be registers")
            return
        packed = dty in ("bf16x2", "f16x2", "e4m3x2", "e5m2x2")
        nsrc = 2 if packed else 1
        if len(self.srcs) != nsrc:
            self._fail(f"cvt to .{dty} takes {nsrc} source(s), got {len(self.srcs)}")
        if packed:
            if sty != "f32":
                self._fail(f"packed cvt to .{dty} converts from .f32, not .{sty}")
            if not rf or rf != ["rn"]:
                self._fail(f"packed cvt to .{dty} needs .rn")
            if dty in ("e4m3x2", "e5m2x2") and "satfinite" not in mods:
                self._fail(f"cvt to .{dty} needs .satfinite")
        elif dty in FLOAT_TYPES and sty in FLOAT_TYPES:
            # f16 <-> bf16 keep the width but not the values: they round like a narrowing.
            rounds = TYPE_BITS[dty] < TYPE_BITS[sty] or (TYPE_BITS[dty] == TYPE_BITS[sty] and dty != sty)
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

    def ptx(self, names: PtxNames) -> str:
        srcs = ", ".join(names(s) for s in self.srcs)
        return f"cvt.{self.mods.data} {names(self.dst)}, {srcs};"


# --------------------------------------------------------------------------- warp and tensor core


@irdl_op_definition
class ShflOp(PtxOp):
    """``ttarget.shfl "bfly.b32" %d, %a, %lane, %clamp, %mask``
    → ``shfl.sync.bfly.b32 %d, %a, lane, clamp, membermask;``."""

    name = "ttarget.shfl"

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

    def ptx(self, names: PtxNames) -> str:
        ops = ", ".join(names(v) for v in (self.dst, self.a, self.b, self.c, self.mask))
        return f"shfl.sync.{self.mods.data} {ops};"


@irdl_op_definition
class MmaOp(PtxOp):
    """Warp-wide tensor core MMA (row.col), f32 accumulate:
    ``ttarget.mma "bf16" (%d0..%d3), (%a0..%a3), (%b0, %b1), (%c0..%c3)``
    → ``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {..}, {..}, {..}, {..};``.

    ``bf16`` / ``f16`` inputs use the m16n8k16 shape (2 packed 16-bit values per
    ``b32`` register); ``e4m3`` / ``e5m2`` inputs the m16n8k32 shape (4 packed 8-bit
    values per register; sm_89+, PTX ISA 8.4). Either way A fragments are 4 ``b32``
    registers, B 2 ``b32``, C and D 4 ``f32``.
    """

    name = "ttarget.mma"

    PTX: ClassVar[tuple[int, int]] = (7, 0)
    SM: ClassVar[int] = 80
    FP8: ClassVar[frozenset[str]] = frozenset({"e4m3", "e5m2"})
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

    def required_ptx(self) -> tuple[int, int]:
        return (8, 4) if self.is_fp8 else self.PTX

    def required_sm(self) -> int:
        return 89 if self.is_fp8 else self.SM

    def verify_(self) -> None:
        ty = self.mods.data
        if ty not in self.FP8:
            _, (ty,) = self._mods(self.mods)
            if ty not in ("bf16", "f16"):
                self._fail(f"mma inputs must be .bf16, .f16, .e4m3 or .e5m2, got .{ty}")
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

    def ptx(self, names: PtxNames) -> str:
        ty = self.mods.data
        shape = "m16n8k32" if self.is_fp8 else "m16n8k16"
        return (
            f"mma.sync.aligned.{shape}.row.col.f32.{ty}.{ty}.f32 {names.vec(self.d)}, "
            f"{names.vec(self.a)}, {names.vec(self.b)}, {names.vec(self.c)};"
        )


# --------------------------------------------------------------------------- control flow


@irdl_op_definition
class LabelOp(PtxOp):
    """A branch target: ``ttarget.label "L3"`` → ``L3:``."""

    name = "ttarget.label"

    label = prop_def(StringAttr)
    assembly_format = "$label attr-dict"

    def __init__(self, label: str):
        super().__init__(properties={"label": StringAttr(label)})

    def verify_(self) -> None:
        if not self.label.data.isidentifier() or self.label.data.startswith("_"):
            self._fail(f"'{self.label.data}' is not a valid PTX label")

    def ptx(self, names: PtxNames) -> str:
        return f"{self.label.data}:"


@irdl_op_definition
class BraOp(PtxOp):
    """A branch: ``ttarget.bra "L3" if %p`` → ``@%p bra L3;`` (``bra.uni`` when unpredicated)."""

    name = "ttarget.bra"

    label = prop_def(StringAttr)
    guard = opt_operand_def(RegisterType)
    negate = opt_prop_def(UnitAttr)
    assembly_format = "$label " + _GUARD + " attr-dict"

    def __init__(self, label: str, guard: SSAValue | None = None, negate: bool = False):
        super().__init__(
            operands=[guard],
            properties={"label": StringAttr(label), "negate": UnitAttr() if negate else None},
        )

    def verify_(self) -> None:
        self._guard_ok(self.guard)
        if self.negate is not None and self.guard is None:
            self._fail("'negated' needs a guard")
        func = self.parent_op()
        if isinstance(func, FuncOp) and self.label.data not in func.labels():
            self._fail(f"no ttarget.label \"{self.label.data}\" in this function")

    def ptx(self, names: PtxNames) -> str:
        if self.guard is None:
            return f"bra.uni {self.label.data};"
        return f"{names.guard(self.guard, self.negate)}bra {self.label.data};"


@irdl_op_definition
class RetOp(PtxOp):
    """``ttarget.ret`` → ``ret;``."""

    name = "ttarget.ret"

    assembly_format = "attr-dict"

    def verify_(self) -> None:
        pass

    def ptx(self, names: PtxNames) -> str:
        return "ret;"


# --------------------------------------------------------------------------- kernels


@irdl_op_definition
class FuncOp(IRDLOperation):
    """A PTX kernel (``.visible .entry``)::

        ttarget.func @name(%a: !ttarget.param<u64>, %n: !ttarget.param<u32>) maxntid = 128 {
          ...flat list of ttarget instructions, ending in ttarget.ret or ttarget.bra...
        }

    An optional ``target = "sm_90a"`` names the ``.target`` (default sm_90a).
    An optional ``cluster = N`` (sm_90 and later) makes every launch group the CTAs
    into thread-block clusters of ``N x 1 x 1`` (``.reqnctapercluster N, 1, 1``); the
    grid's x size must then be a multiple of N.
    The PTX version printed is the lowest that the target and every instruction
    in the body need (:meth:`required_ptx`), never above 9.0.
    """

    name = "ttarget.func"

    sym_name = prop_def(StringAttr)
    maxntid = prop_def(IntAttr)
    target = prop_def(StringAttr, default_value=StringAttr("sm_90a"))
    cluster = opt_prop_def(IntAttr)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), SymbolOpInterface(), NoTerminator())

    def __init__(
        self, name: str, params: Sequence[str], maxntid: int, target: str = "sm_90a",
        cluster: int | None = None,
    ):
        block = Block(arg_types=[ParamType(p) for p in params])
        super().__init__(
            properties={
                "sym_name": StringAttr(name), "maxntid": IntAttr(maxntid),
                "target": StringAttr(target),
                "cluster": IntAttr(cluster) if cluster is not None else None,
            },
            regions=[Region(block)],
        )

    @property
    def cluster_size(self) -> int:
        """CTAs per cluster (1 when the kernel does not ask for clusters)."""
        return self.cluster.data if self.cluster is not None else 1

    @property
    def block(self) -> Block:
        return self.body.block

    def labels(self) -> set[str]:
        return {op.label.data for op in self.block.ops if isinstance(op, LabelOp)}

    def shared_arrays(self) -> set[str]:
        return {op.sym.data for op in self.block.ops if isinstance(op, SharedOp)}

    def required_ptx(self) -> tuple[int, int]:
        v = TARGETS[self.target.data][1]
        for op in self.block.ops:
            if isinstance(op, PtxOp):
                v = max(v, op.required_ptx())
        return v

    def verify_(self) -> None:
        name = self.sym_name.data
        where = f"ttarget.func @{name}"
        if not name.isidentifier():
            raise VerifyException(f"{where}: '{name}' is not a valid PTX identifier")
        if self.target.data not in TARGETS:
            raise VerifyException(
                f"{where}: unknown target '{self.target.data}'; valid: {', '.join(TARGETS)}"
            )
        if not 1 <= self.maxntid.data <= 1024:
            raise VerifyException(f"{where}: maxntid must be in [1, 1024], got {self.maxntid.data}")
        if self.cluster is not None:
            if not 1 <= self.cluster.data <= 8:
                raise VerifyException(
                    f"{where}: cluster must be in [1, 8] CTAs, got {self.cluster.data}"
                )
            if TARGETS[self.target.data][0] < 90:
                raise VerifyException(
                    f"{where}: clusters need sm_90 or later, target is {self.target.data}"
                )
        for a in self.block.args:
            if not isinstance(a.type, ParamType):
                raise VerifyException(f"{where}: parameters must be !ttarget.param, got {a.type}")
        sm = TARGETS[self.target.data][0]
        labels: set[str] = set()
        shared: set[str] = set()
        for op in self.block.ops:
            if isinstance(op, LabelOp):
                if op.label.data in labels:
                    raise VerifyException(f"{where}: label \"{op.label.data}\" defined twice")
                labels.add(op.label.data)
            elif isinstance(op, SharedOp):
                if op.sym.data in shared:
                    raise VerifyException(f"{where}: shared array \"{op.sym.data}\" defined twice")
                shared.add(op.sym.data)
            elif not isinstance(op, PtxOp | RegOp | ImmOp):
                raise VerifyException(f"{where}: '{op.name}' is not a Target IR instruction")
            if isinstance(op, PtxOp) and op.required_sm() > sm:
                raise VerifyException(
                    f"{where}: {op.name} needs sm_{op.required_sm()}, target is {self.target.data}"
                )
        last = self.block.last_op
        if not (isinstance(last, RetOp) or (isinstance(last, BraOp) and last.guard is None)):
            raise VerifyException(f"{where}: body must end with ttarget.ret or an unpredicated ttarget.bra")
        if self.required_ptx() > MAX_PTX_VERSION:
            v = self.required_ptx()
            raise VerifyException(f"{where}: needs PTX {v[0]}.{v[1]}, above the supported 9.0")

    @classmethod
    def parse(cls, parser: Parser) -> FuncOp:
        name = parser.parse_symbol_name().data
        args = parser.parse_comma_separated_list(
            parser.Delimiter.PAREN, lambda: parser.parse_argument()
        )
        parser.parse_keyword("maxntid")
        parser.parse_punctuation("=")
        maxntid = parser.parse_integer()
        target = "sm_90a"
        if parser.parse_optional_keyword("target") is not None:
            parser.parse_punctuation("=")
            target = parser.parse_str_literal()
        cluster: IntAttr | None = None
        if parser.parse_optional_keyword("cluster") is not None:
            parser.parse_punctuation("=")
            cluster = IntAttr(parser.parse_integer())
        attrs = parser.parse_optional_attr_dict_with_keyword()
        region = parser.parse_region(args)
        op = cls.__new__(cls)
        IRDLOperation.__init__(
            op,
            properties={
                "sym_name": StringAttr(name), "maxntid": IntAttr(maxntid),
                "target": StringAttr(target), "cluster": cluster,
            },
            attributes=attrs.data if attrs else {},
            regions=[region],
        )
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(f" @{self.sym_name.data}(")
        for i, a in enumerate(self.block.args):
            if i:
                printer.print_string(", ")
            printer.print_block_argument(a)
        printer.print_string(f") maxntid = {self.maxntid.data}")
        if self.target.data != "sm_90a":
            printer.print_string(f' target = "{self.target.data}"')
        if self.cluster is not None:
            printer.print_string(f" cluster = {self.cluster.data}")
        if self.attributes:
            printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False)


@irdl_op_definition
class LaunchOp(IRDLOperation):
    """Host side: run a kernel over a grid of CTAs of ``maxntid`` threads each::

        ttarget.launch @k(%x, %n) grid = [4, 1, 1] : (memref<512xf32>, index)

    Memref arguments are passed as ``.u64`` device pointers, scalars by value;
    the argument list must match the kernel's parameters.
    """

    name = "ttarget.launch"

    callee = prop_def(SymbolRefAttr)
    args = var_operand_def()
    grid = prop_def(DenseArrayBase.constr(i64))
    assembly_format = "$callee `(` $args `)` `grid` `=` $grid attr-dict `:` `(` type($args) `)`"

    def __init__(self, callee: str, args: Sequence[SSAValue], grid: Sequence[int]):
        super().__init__(
            operands=[list(args)],
            properties={
                "callee": SymbolRefAttr(callee),
                "grid": DenseArrayBase.from_list(i64, list(grid)),
            },
        )

    def grid_value(self) -> tuple[int, int, int]:
        g = tuple(self.grid.get_values())
        return (g + (1, 1, 1))[:3]  # type: ignore[return-value]

    def kernel(self) -> FuncOp | None:
        found = SymbolTable.lookup_symbol(self, self.callee)
        return found if isinstance(found, FuncOp) else None

    def verify_(self) -> None:
        g = tuple(self.grid.get_values())
        if not 1 <= len(g) <= 3 or any(x < 1 for x in g):
            raise VerifyException(f"ttarget.launch: grid must be 1 to 3 positive sizes, got {list(g)}")
        if any(x > 65535 for x in g[1:]) or g[0] > 2**31 - 1:
            raise VerifyException(f"ttarget.launch: grid {list(g)} exceeds the CUDA limits")
        k = self.kernel()
        if k is None:
            raise VerifyException(f"ttarget.launch: no ttarget.func named {self.callee}")
        if g[0] % k.cluster_size:
            raise VerifyException(
                f"ttarget.launch: grid x size {g[0]} is not a multiple of the cluster size "
                f"{k.cluster_size} of {self.callee}"
            )
        params = k.block.args
        if len(params) != len(self.args):
            raise VerifyException(
                f"ttarget.launch: kernel {self.callee} takes {len(params)} parameters, "
                f"got {len(self.args)} arguments"
            )
        for i, (p, a) in enumerate(zip(params, self.args)):
            assert isinstance(p.type, ParamType)
            want = host_param_type(a.type)
            if want is None or TYPE_BITS[want] != TYPE_BITS[p.type.ty.data]:
                raise VerifyException(
                    f"ttarget.launch: argument {i} of type {a.type} cannot be passed as "
                    f".param .{p.type.ty.data} to {self.callee}"
                )


# --------------------------------------------------------------------------- Hopper (sm_90a): TMA, mbarrier, wgmma


@irdl_op_definition
class ExternSharedOp(PtxOp):
    """The kernel's dynamic shared memory: ``ttarget.extern_shared "smem" align = 1024``
    → ``.extern .shared .align 1024 .b8 smem[];`` (its size is given at launch)."""

    name = "ttarget.extern_shared"

    sym = prop_def(StringAttr)
    align = prop_def(IntegerAttr[I64])
    assembly_format = "$sym `align` `=` $align attr-dict"

    def __init__(self, sym: str, align: int = 1024):
        super().__init__(properties={"sym": StringAttr(sym), "align": _i64(align)})

    def verify_(self) -> None:
        if not self.sym.data.isidentifier():
            self._fail(f"'{self.sym.data}' is not a valid PTX identifier")
        a = self.align.value.data
        if a <= 0 or a & (a - 1) or a > 1024:
            self._fail(f"align must be a power of two <= 1024, got {a}")

    def ptx(self, names: PtxNames) -> str:
        return f".extern .shared .align {self.align.value.data} .b8 {self.sym.data}[];"


@irdl_op_definition
class ExternSharedAddrOp(_SymbolAddrOp):
    """The shared-space address of the dynamic shared array:
    ``ttarget.extern_shared_addr %r, "smem"`` → ``mov.u32 %r, smem;``."""

    name = "ttarget.extern_shared_addr"
    DECL: ClassVar[type[PtxOp]] = ExternSharedOp


@irdl_op_definition
class ParamAddrOp(PtxOp):
    """The address of a kernel parameter (a tensor map passed by value):
    ``ttarget.param_addr %rd, %arg : !ttarget.param<tmap>`` → ``mov.u64 %rd, k_param_0;``."""

    name = "ttarget.param_addr"

    dst = operand_def(RegisterType)
    param = operand_def(ParamType)
    assembly_format = "$dst `,` $param attr-dict `:` type($param)"

    def __init__(self, dst: SSAValue, param: SSAValue):
        super().__init__(operands=[dst, param])

    def verify_(self) -> None:
        self._dst(self.dst, "u64")
        if not isinstance(self.param, BlockArgument):
            self._fail("parameter must be an argument of the enclosing ttarget.func")

    def ptx(self, names: PtxNames) -> str:
        return f"mov.u64 {names(self.dst)}, {names(self.param)};"


@irdl_op_definition
class MbarrierInitOp(PtxOp):
    """``ttarget.mbarrier_init [%addr], %count``
    → ``mbarrier.init.shared::cta.b64 [addr], count;`` (``addr``: a 32-bit shared address)."""

    name = "ttarget.mbarrier_init"

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

    def ptx(self, names: PtxNames) -> str:
        return f"mbarrier.init.shared::cta.b64 [{names(self.addr)}], {names(self.count)};"


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

    PTX: ClassVar[tuple[int, int]] = (8, 0)
    SM: ClassVar[int] = 90
    addr = operand_def(RegisterType)
    tx = opt_operand_def(RegisterType)
    guard = opt_operand_def(RegisterType)
    cluster = opt_prop_def(UnitAttr)
    negate = opt_prop_def(UnitAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = (
        "` ` `[` $addr `]` (`expect_tx` $tx^)? (`cluster` $cluster^)? " + _GUARD + " attr-dict"
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

    def ptx(self, names: PtxNames) -> str:
        g = names.guard(self.guard, self.negate)
        if self.cluster is not None:
            return f"{g}mbarrier.arrive.shared::cluster.b64 _, [{names(self.addr)}];"
        if self.tx is None:
            return f"{g}mbarrier.arrive.shared::cta.b64 _, [{names(self.addr)}];"
        return (
            f"{g}mbarrier.arrive.expect_tx.shared::cta.b64 _, [{names(self.addr)}], "
            f"{names(self.tx)};"
        )


@irdl_op_definition
class MbarrierTryWaitOp(PtxOp):
    """``ttarget.mbarrier_try_wait %p, [%addr], %parity``
    → ``mbarrier.try_wait.parity.shared::cta.b64 p, [addr], parity;``: ``p`` is true once
    the barrier's phase of that parity has completed (callers loop until it is)."""

    name = "ttarget.mbarrier_try_wait"

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

    def ptx(self, names: PtxNames) -> str:
        return (
            f"mbarrier.try_wait.parity.shared::cta.b64 {names(self.dst)}, [{names(self.addr)}], "
            f"{names(self.parity)};"
        )


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
        "(`multicast` $mask^)? " + _GUARD + " attr-dict"
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

    def ptx(self, names: PtxNames) -> str:
        g = names.guard(self.guard, self.negate)
        mc = ".multicast::cluster" if self.mask is not None else ""
        tail = f", {names(self.mask)}" if self.mask is not None else ""
        return (
            f"{g}cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes{mc} "
            f"[{names(self.dst)}], [{names(self.tmap)}, {{{names(self.c0)}, {names(self.c1)}}}], "
            f"[{names(self.mbar)}]{tail};"
        )


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

    PTX: ClassVar[tuple[int, int]] = (8, 0)
    SM: ClassVar[int] = 90
    tmap = operand_def(RegisterType)
    c0 = operand_def(RegisterType)
    c1 = operand_def(RegisterType)
    src = operand_def(RegisterType)
    guard = opt_operand_def(RegisterType)
    negate = opt_prop_def(UnitAttr)
    assembly_format = (
        "` ` `[` $tmap `,` $c0 `,` $c1 `]` `,` `[` $src `]` " + _GUARD + " attr-dict"
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

    def ptx(self, names: PtxNames) -> str:
        g = names.guard(self.guard, self.negate)
        return (
            f"{g}cp.async.bulk.tensor.2d.global.shared::cta.bulk_group "
            f"[{names(self.tmap)}, {{{names(self.c0)}, {names(self.c1)}}}], [{names(self.src)}];"
        )


@irdl_op_definition
class BulkWaitOp(PtxOp):
    """Wait until at most ``pending`` of this thread's bulk async-groups are incomplete:
    ``ttarget.bulk_wait 0`` → ``cp.async.bulk.wait_group 0;``; with ``read``
    (``cp.async.bulk.wait_group.read 0;``) only until their shared-memory sources have
    been read, so the buffer can be reused."""

    name = "ttarget.bulk_wait"

    PTX: ClassVar[tuple[int, int]] = (8, 0)
    SM: ClassVar[int] = 90
    pending = prop_def(IntegerAttr[I64])
    read = opt_prop_def(UnitAttr)
    assembly_format = "$pending (`read` $read^)? attr-dict"

    def __init__(self, pending: int, read: bool = False):
        super().__init__(
            properties={"pending": _i64(pending), "read": UnitAttr() if read else None}
        )

    def verify_(self) -> None:
        if not 0 <= self.pending.value.data <= 7:
            self._fail(f"pending groups must be in [0, 7], got {self.pending.value.data}")

    def ptx(self, names: PtxNames) -> str:
        r = ".read" if self.read is not None else ""
        return f"cp.async.bulk.wait_group{r} {self.pending.value.data};"


@irdl_op_definition
class MapaOp(PtxOp):
    """The ``shared::cluster`` address of a shared variable in another CTA of the cluster:
    ``ttarget.mapa %d, %addr, %rank`` → ``mapa.shared::cluster.u32 d, addr, rank;``
    (``addr``: this CTA's 32-bit shared address; ``rank``: the target CTA's
    ``cluster_ctarank``)."""

    name = "ttarget.mapa"

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

    def ptx(self, names: PtxNames) -> str:
        return (
            f"mapa.shared::cluster.u32 {names(self.dst)}, {names(self.addr)}, {names(self.rank)};"
        )


_FENCES: dict[str, tuple[str, tuple[int, int], int]] = {
    "proxy_async": ("fence.proxy.async.shared::cta;", (8, 0), 90),
    "mbarrier_init": ("fence.mbarrier_init.release.cluster;", (8, 0), 90),
    "wgmma": ("wgmma.fence.sync.aligned;", (8, 0), 90),
    "wgmma_commit": ("wgmma.commit_group.sync.aligned;", (8, 0), 90),
    "bulk_commit": ("cp.async.bulk.commit_group;", (8, 0), 90),
    "cluster_arrive": ("barrier.cluster.arrive.release;", (8, 0), 90),
    "cluster_wait": ("barrier.cluster.wait.acquire;", (8, 0), 90),
}


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

    def required_ptx(self) -> tuple[int, int]:
        return _FENCES.get(self.kind.data, ("", (8, 0), 90))[1]

    def required_sm(self) -> int:
        return _FENCES.get(self.kind.data, ("", (8, 0), 90))[2]

    def verify_(self) -> None:
        if self.kind.data not in _FENCES:
            self._fail(f"unknown fence '{self.kind.data}'; valid: {', '.join(_FENCES)}")

    def ptx(self, names: PtxNames) -> str:
        return _FENCES[self.kind.data][0]


@irdl_op_definition
class WgmmaWaitOp(PtxOp):
    """``ttarget.wgmma_wait 1`` → ``wgmma.wait_group.sync.aligned 1;``: at most N committed
    wgmma groups of this warpgroup still pending."""

    name = "ttarget.wgmma_wait"

    PTX: ClassVar[tuple[int, int]] = (8, 0)
    SM: ClassVar[int] = 90
    pending = prop_def(IntegerAttr[I64])
    assembly_format = "$pending attr-dict"

    def __init__(self, pending: int):
        super().__init__(properties={"pending": _i64(pending)})

    def verify_(self) -> None:
        if not 0 <= self.pending.value.data <= 7:
            self._fail(f"pending groups must be in [0, 7], got {self.pending.value.data}")

    def ptx(self, names: PtxNames) -> str:
        return f"wgmma.wait_group.sync.aligned {self.pending.value.data};"


@irdl_op_definition
class SetmaxnregOp(PtxOp):
    """``ttarget.setmaxnreg "inc" 232`` → ``setmaxnreg.inc.sync.aligned.u32 232;``: the
    warpgroup's per-thread register budget (24..256, a multiple of 8)."""

    name = "ttarget.setmaxnreg"

    PTX: ClassVar[tuple[int, int]] = (8, 0)
    SM: ClassVar[int] = 90
    action = prop_def(StringAttr)
    count = prop_def(IntegerAttr[I64])
    assembly_format = "$action $count attr-dict"

    def __init__(self, action: str, count: int):
        super().__init__(properties={"action": StringAttr(action), "count": _i64(count)})

    def verify_(self) -> None:
        if self.action.data not in ("inc", "dec"):
            self._fail(f"action must be inc or dec, got '{self.action.data}'")
        c = self.count.value.data
        if not 24 <= c <= 256 or c % 8:
            self._fail(f"register count must be a multiple of 8 in [24, 256], got {c}")

    def ptx(self, names: PtxNames) -> str:
        return f"setmaxnreg.{self.action.data}.sync.aligned.u32 {self.count.value.data};"


class _WgmmaBase(PtxOp, ABC):
    """Shared modifiers, shape and accumulator checks of the warpgroup MMAs: ``mods`` is
    ``m64nNk16.f32.T.T`` with T bf16 or f16, and D has N/2 ``f32`` registers per thread."""

    PTX: ClassVar[tuple[int, int]] = (8, 0)
    SM: ClassVar[int] = 90

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
        if len(parts) != 4 or parts[1] != "f32" or parts[2] != parts[3] or parts[2] not in (
            "bf16", "f16"
        ):
            self._fail(f"modifiers must be \"m64nNk16.f32.T.T\" with T bf16 or f16, got \"{mods}\"")
        m, n, k = self.shape()
        if m != 64 or k != 16 or n % 8 or not 8 <= n <= 256:
            self._fail(f"shape m{m}n{n}k{k}: needs m64, k16 and N a multiple of 8 in [8, 256]")
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
                "mods": StringAttr(mods), "trans_a": _i64(trans_a), "trans_b": _i64(trans_b),
            },
        )

    def verify_(self) -> None:
        self._verify_common()
        if reg_class(self.adesc) != "b64":
            self._fail("A descriptor must be a b64 register")
        if self.trans_a.value.data not in (0, 1):
            self._fail("trans_a must be 0 or 1")

    def ptx(self, names: PtxNames) -> str:
        return (
            f"wgmma.mma_async.sync.aligned.{self.mods.data} {names.vec(self.d)}, "
            f"{names(self.adesc)}, {names(self.bdesc)}, {names(self.scale_d)}, 1, 1, "
            f"{self.trans_a.value.data}, {self.trans_b.value.data};"
        )


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
            properties={"mods": StringAttr(mods), "trans_b": _i64(trans_b)},
        )

    def verify_(self) -> None:
        self._verify_common()
        if len(self.a) != 4 or any(reg_class(v) != "b32" for v in self.a):
            self._fail(f"A needs 4 b32 registers, got {len(self.a)}")

    def ptx(self, names: PtxNames) -> str:
        return (
            f"wgmma.mma_async.sync.aligned.{self.mods.data} {names.vec(self.d)}, "
            f"{names.vec(self.a)}, {names(self.bdesc)}, {names(self.scale_d)}, 1, 1, "
            f"{self.trans_b.value.data};"
        )


@irdl_op_definition
class LaunchExOp(IRDLOperation):
    """Host side: launch a kernel with dynamic shared memory and TMA tensor maps::

        ttarget.launch_ex @k(%a, %b, %c) grid = [132, 1, 1] smem = 197632
            boxes = [64, 128, 64, 64, 0, 0] : (memref<..>, memref<..>, memref<..>)

    ``boxes`` holds an (inner, outer) box size per argument: a memref whose box is
    non-zero is passed as a 2-D ``CUtensorMap`` of the memref seen as [rows, last dim]
    (rows the product of the leading dims; 128-byte swizzle, zero fill out of
    bounds) built by the runtime for a ``!ttarget.param<tmap>`` parameter; (0, 0)
    passes it like ``ttarget.launch`` does.
    """

    name = "ttarget.launch_ex"

    callee = prop_def(SymbolRefAttr)
    args = var_operand_def()
    grid = prop_def(DenseArrayBase.constr(i64))
    smem = prop_def(IntegerAttr[I64])
    boxes = prop_def(DenseArrayBase.constr(i64))
    assembly_format = (
        "$callee `(` $args `)` `grid` `=` $grid `smem` `=` $smem `boxes` `=` $boxes attr-dict "
        "`:` `(` type($args) `)`"
    )

    def __init__(
        self, callee: str, args: Sequence[SSAValue], grid: Sequence[int], smem: int,
        boxes: Sequence[int],
    ):
        super().__init__(
            operands=[list(args)],
            properties={
                "callee": SymbolRefAttr(callee),
                "grid": DenseArrayBase.from_list(i64, list(grid)),
                "smem": _i64(smem),
                "boxes": DenseArrayBase.from_list(i64, list(boxes)),
            },
        )

    def grid_value(self) -> tuple[int, int, int]:
        g = tuple(self.grid.get_values())
        return (g + (1, 1, 1))[:3]  # type: ignore[return-value]

    def box(self, i: int) -> tuple[int, int]:
        b = tuple(self.boxes.get_values())
        return b[2 * i], b[2 * i + 1]

    def kernel(self) -> FuncOp | None:
        found = SymbolTable.lookup_symbol(self, self.callee)
        return found if isinstance(found, FuncOp) else None

    def verify_(self) -> None:
        where = "ttarget.launch_ex"
        g = tuple(self.grid.get_values())
        if not 1 <= len(g) <= 3 or any(x < 1 for x in g):
            raise VerifyException(f"{where}: grid must be 1 to 3 positive sizes, got {list(g)}")
        if not 0 <= self.smem.value.data <= 227 * 1024:
            raise VerifyException(f"{where}: smem must be in [0, 227 KiB], got {self.smem.value.data}")
        if len(self.boxes.get_values()) != 2 * len(self.args):
            raise VerifyException(f"{where}: boxes needs two sizes per argument")
        k = self.kernel()
        if k is None:
            raise VerifyException(f"{where}: no ttarget.func named {self.callee}")
        if g[0] % k.cluster_size:
            raise VerifyException(
                f"{where}: grid x size {g[0]} is not a multiple of the cluster size "
                f"{k.cluster_size} of {self.callee}"
            )
        params = k.block.args
        if len(params) != len(self.args):
            raise VerifyException(
                f"{where}: kernel {self.callee} takes {len(params)} parameters, got {len(self.args)}"
            )
        for i, (p, a) in enumerate(zip(params, self.args)):
            assert isinstance(p.type, ParamType)
            is_map = self.box(i) != (0, 0)
            if is_map != (p.type.ty.data == "tmap"):
                raise VerifyException(
                    f"{where}: argument {i} has box {list(self.box(i))} but the parameter is "
                    f".{p.type.ty.data}; tensor maps go with !ttarget.param<tmap> parameters"
                )
            if is_map:
                if not isinstance(a.type, MemRefType) or len(a.type.get_shape()) < 2:
                    raise VerifyException(
                        f"{where}: argument {i}: a tensor map needs a memref of rank >= 2"
                    )
                continue
            want = host_param_type(a.type)
            if want is None or TYPE_BITS[want] != TYPE_BITS[p.type.ty.data]:
                raise VerifyException(
                    f"{where}: argument {i} of type {a.type} cannot be passed as "
                    f".param .{p.type.ty.data} to {self.callee}"
                )


SM90_OPS: tuple[type[IRDLOperation], ...] = (
    ExternSharedOp, ExternSharedAddrOp, ParamAddrOp, MbarrierInitOp, MbarrierArriveOp,
    MbarrierTryWaitOp, CpAsyncBulkTensorOp, CpAsyncBulkTensorStoreOp, BulkWaitOp, MapaOp,
    FenceOp, WgmmaWaitOp, SetmaxnregOp, WgmmaOp,
    WgmmaRsOp, LaunchExOp,
)
"""The Hopper instructions (TMA, mbarrier, wgmma, setmaxnreg) and the extended launch."""


def host_param_type(t: Attribute) -> str | None:
    """The ``.param`` type a host value of type ``t`` is passed as (None if it cannot be)."""
    if isinstance(t, MemRefType) or isinstance(t, IndexType):
        return "u64"
    if isinstance(t, IntegerType):
        return {1: "u32", 8: "u32", 16: "u32", 32: "s32", 64: "s64"}.get(t.width.data)
    if isinstance(t, Float32Type):
        return "f32"
    if isinstance(t, Float64Type):
        return "f64"
    return None


Target = Dialect(
    "ttarget",
    [
        FuncOp, RegOp, ImmOp, SharedOp, SregOp, MovOp, PackOp, UnpackOp, SharedAddrOp, LdParamOp,
        CvtaOp, LdOp, StOp, CpAsyncOp, CpAsyncCommitOp, CpAsyncWaitOp, BarSyncOp,
        AddOp, SubOp, MulOp, DivOp, RemOp, MinOp, MaxOp, AndOp, OrOp, XorOp, CopysignOp,
        ShlOp, ShrOp, NegOp, AbsOp, NotOp, RcpOp, SqrtOp, RsqrtOp, Ex2Op, Lg2Op, SinOp, CosOp,
        TanhOp, FmaOp, MadOp, SelpOp, SetpOp, CvtOp, ShflOp, MmaOp, LabelOp, BraOp, RetOp,
        LaunchOp,
        *SM90_OPS,
    ],
    [RegisterType, ParamType],
)


def is_instruction(op: Operation) -> bool:
    return isinstance(op, PtxOp)


# =========================================================================== host collectives
# Host-side collectives of lowered per-rank programs, mapped 1:1 from the ttile ops of the
# same name by lower-tile-to-target (syntax, verifiers and semantics in
# tessera/ir/host_collectives.py). They are not PTX: emit-ptx ignores host functions.


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

Target = Dialect("ttarget", [*Target.operations, *HOST_COLLECTIVE_OPS], [*Target.attributes])
