"""The base of Target IR instructions and the one PTX formatter.

Every instruction describes its PTX line declaratively (:class:`PtxOp`):

* ``PTX_OPCODE``: the opcode and its modifiers, a ``str.format`` template over the
  op's properties (``"mov.{mods}"``, ``"setmaxnreg.{action}.sync.aligned.u32"``);
  ``{mnemonic}`` is the op name without ``ttarget.``, and a unit property ``read``
  formats as ``.read`` when set and as nothing otherwise;
* ``PTX_ARGS``: the operands in PTX order, each a small template where ``$x`` is the
  field ``x`` of the op: a register or immediate prints as its PTX name (a variadic
  operand as a ``{%r0, %r1}`` vector, or bare when it holds one value; ``*$x`` lists
  its names without braces), an integer or string property as its value.
  ``[$a+$off]`` is an address (``[%rd4+16]``, ``[%rd4]`` for offset 0). Anything else
  is literal text (``"[$tmap, {$c0, $c1}]"``, ``"_"``). An argument naming an absent
  optional field is left out.

:meth:`PtxOp.ptx` is the only printer: it adds the guard prefix (``@%p`` / ``@!%p``)
of ops with a ``guard`` operand, joins the arguments with ``", "`` and ends the line
with ``PTX_END`` (``;``). Ops whose opcode depends on their operands override
:meth:`PtxOp.ptx_opcode` (or add format fields with :meth:`PtxOp.ptx_fields`); an op whose operand list depends on its form returns
a subset of ``PTX_ARGS`` from :meth:`PtxOp.ptx_args` (the fp8 ``wgmma`` forms drop the
transpose immediates).

The module also holds the two declarations every instruction uses as operands,
:class:`RegOp` (a virtual register) and :class:`ImmOp` (an immediate).
"""

from __future__ import annotations

import re
import struct
from abc import ABC
from collections.abc import Sequence
from typing import ClassVar, final

from xdsl.dialects.builtin import (
    Float32Type,
    Float64Type,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Block, Operation, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, prop_def, result_def, traits_def
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from tessera.ir.target.facts import (
    BIT_TYPES,
    FLOAT_TYPES,
    REG_CLASSES,
    REG_PREFIX,
    TYPE_BITS,
    Requirement,
    compatible,
    parse_mods,
)
from tessera.ir.target.types import RegisterType

GUARD_FORMAT = "(`if` $guard^)? (`negated` $negate^)?"
"""The assembly-format tail of a predicated instruction: ``if %p`` / ``if %p negated``."""

KERNEL_OP_NAME = "ttarget.func"


def i64_attr(v: int) -> IntegerAttr:
    """An ``i64`` integer property."""
    return IntegerAttr(v, i64)


def kernel_block(op: Operation) -> Block | None:
    """The body of the ``ttarget.func`` directly holding ``op`` (None outside one)."""
    parent = op.parent_op()
    if parent is None or parent.name != KERNEL_OP_NAME:
        return None
    return parent.regions[0].block


def reg_class(v: SSAValue) -> str | None:
    """The register class of ``v`` (``"imm"`` for an immediate), None if it is neither."""
    owner = v.owner
    if isinstance(owner, RegOp):
        return owner.cls.data
    if isinstance(owner, ImmOp):
        return "imm"
    return None


# --------------------------------------------------------------------------- names


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
        """The predicate prefix of a guarded instruction (``"@%p0 "``, ``"@!%p0 "``)."""
        if guard is None:
            return ""
        return f"@{'!' if negate else ''}{self(guard)} "

    def vec(self, vs: Sequence[SSAValue]) -> str:
        return "{" + ", ".join(self(v) for v in vs) + "}"

    def addr(self, base: SSAValue, offset: IntegerAttr) -> str:
        off = offset.value.data
        return f"[{self(base)}{'+' if off >= 0 else ''}{off}]" if off else f"[{self(base)}]"


# --------------------------------------------------------------------------- the formatter

_ARG_FIELD = re.compile(r"\[\$(\w+)\+\$(\w+)\]|(\*?)\$(\w+)")


def _text(op: Operation, field: str, value: object, names: PtxNames, splat: bool = False) -> str:
    """The PTX text of one field value of ``op`` (see :class:`PtxOp`)."""
    if isinstance(value, SSAValue):
        return names(value)
    if isinstance(value, IntegerAttr):
        return str(value.value.data)
    if isinstance(value, IntAttr):
        return str(value.data)
    if isinstance(value, StringAttr):
        return value.data
    if isinstance(value, UnitAttr):
        return ""
    if isinstance(value, Sequence):
        vs: list[SSAValue] = list(value)  # a variadic operand
        if splat:
            return ", ".join(names(v) for v in vs)
        return names(vs[0]) if len(vs) == 1 else names.vec(vs)
    raise TypeError(f"{op.name}: field '{field}' of type {type(value).__name__} has no PTX form")


def _arg(op: Operation, template: str, names: PtxNames) -> str | None:
    """One operand of ``op`` from its template; None when it names an absent field."""
    if any(getattr(op, m[1] or m[4]) is None for m in _ARG_FIELD.finditer(template)):
        return None

    def sub(m: re.Match[str]) -> str:
        if m[1] is not None:  # [$base+$offset]
            return names.addr(getattr(op, m[1]), getattr(op, m[2]))
        return _text(op, m[4], getattr(op, m[4]), names, splat=m[3] == "*")

    return _ARG_FIELD.sub(sub, template)


class _OpcodeFields(dict[str, str]):
    """The ``str.format`` fields of an opcode template: the op's properties, read on use."""

    def __init__(self, op: PtxOp, extra: dict[str, str]):
        super().__init__(extra)
        self.op = op

    def __missing__(self, key: str) -> str:
        if key == "mnemonic":
            return self.op.name.removeprefix("ttarget.")
        value = getattr(self.op, key)
        if isinstance(value, UnitAttr):
            return f".{key}"
        if value is None:
            return ""
        return _text(self.op, key, value, PtxNames())


class PtxOp(IRDLOperation, ABC):
    """Base of Target IR instructions: modifier checks, operand checks, and the PTX
    description printed by :meth:`ptx` (see the module docstring)."""

    MODIFIERS: ClassVar[frozenset[str]] = frozenset()
    """Modifiers (other than types) this instruction accepts."""
    PTX: ClassVar[tuple[int, int]] = (6, 0)
    """Lowest PTX ISA version with this instruction."""
    SM: ClassVar[int] = 30
    """Lowest SM architecture with this instruction."""

    PTX_OPCODE: ClassVar[str] = ""
    """The opcode with its modifiers: a ``str.format`` template over the op's properties."""
    PTX_ARGS: ClassVar[tuple[str, ...]] = ()
    """The operands in PTX order, one template each (``"$dst"``, ``"[$addr+$offset]"``)."""
    PTX_END: ClassVar[str] = ";"
    """What ends the line (``:`` for a label)."""

    def requirement(self) -> Requirement:
        """The PTX ISA version and SM architecture this instruction needs."""
        return Requirement(self.PTX, self.SM)

    def required_ptx(self) -> tuple[int, int]:
        return self.requirement().ptx

    def required_sm(self) -> int:
        return self.requirement().sm

    # -- printing

    def ptx_fields(self) -> dict[str, str]:
        """Format fields of ``PTX_OPCODE`` that are not properties of the op."""
        return {}

    def ptx_opcode(self) -> str:
        """The opcode and modifiers, from ``PTX_OPCODE``."""
        return self.PTX_OPCODE.format_map(_OpcodeFields(self, self.ptx_fields()))

    def ptx_args(self) -> tuple[str, ...]:
        """The operand templates to print: ``PTX_ARGS`` (a form with fewer operands
        returns a subset)."""
        return self.PTX_ARGS

    @final
    def ptx(self, names: PtxNames) -> str:
        """This instruction as one line of PTX (without indentation)."""
        guard = names.guard(getattr(self, "guard", None), getattr(self, "negate", None))
        args = [a for t in self.ptx_args() if (a := _arg(self, t, names)) is not None]
        tail = " " + ", ".join(args) if args else ""
        return f"{guard}{self.ptx_opcode()}{tail}{self.PTX_END}"

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
        """The immediate as PTX writes it (``4``, ``0f3F800000``, ``0d3FF0000000000000``)."""
        v = self.value
        if isinstance(v, FloatAttr):
            x = v.value.data
            if isinstance(v.type, Float32Type):
                return f"0f{struct.unpack('<I', struct.pack('<f', x))[0]:08X}"
            return f"0d{struct.unpack('<Q', struct.pack('<d', x))[0]:016X}"
        return str(v.value.data)
