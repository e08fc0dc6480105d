"""Data movement: shared-memory declarations and addresses, parameter loads, register
moves, special registers, ``ld`` / ``st`` and the sm_80 asynchronous copies."""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import I64, IntegerAttr, StringAttr, UnitAttr
from xdsl.ir import BlockArgument, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    var_operand_def,
)

from tessera.ir.target.base import GUARD_FORMAT, PtxOp, i64_attr, kernel_block, reg_class
from tessera.ir.target.facts import (
    BIT_TYPES,
    CLUSTER_REGISTERS,
    CLUSTER_SREG,
    MAX_SHARED_BYTES,
    MEM_SPACES,
    SPECIAL_REGISTERS,
    TYPE_BITS,
    Requirement,
)
from tessera.ir.target.types import ParamType, RegisterType

# --------------------------------------------------------------------------- shared memory


@irdl_op_definition
class SharedOp(PtxOp):
    """A CTA shared-memory array: ``ttarget.shared "smem0" size = 4096 align = 16``.

    Printed ``.shared .align 16 .b8 smem0[4096];`` at the top of the kernel body.
    """

    name = "ttarget.shared"
    PTX_OPCODE: ClassVar[str] = ".shared .align {align} .b8 {sym}[{size}]"

    sym = prop_def(StringAttr)
    size = prop_def(IntegerAttr[I64])
    align = prop_def(IntegerAttr[I64])
    assembly_format = "$sym `size` `=` $size `align` `=` $align attr-dict"

    def __init__(self, sym: str, size: int, align: int = 16):
        super().__init__(
            properties={"sym": StringAttr(sym), "size": i64_attr(size), "align": i64_attr(align)}
        )

    def verify_(self) -> None:
        if not self.sym.data.isidentifier():
            self._fail(f"'{self.sym.data}' is not a valid PTX identifier")
        if self.size.value.data <= 0:
            self._fail(f"size must be positive, got {self.size.value.data}")
        if self.size.value.data > MAX_SHARED_BYTES:
            self._fail(f"size {self.size.value.data} exceeds 227 KiB of shared memory")
        a = self.align.value.data
        if a <= 0 or a & (a - 1) or a > 128:
            self._fail(f"align must be a power of two <= 128, got {a}")


@irdl_op_definition
class ExternSharedOp(PtxOp):
    """The kernel's dynamic shared memory: ``ttarget.extern_shared "smem" align = 1024``
    → ``.extern .shared .align 1024 .b8 smem[];`` (its size is given at launch)."""

    name = "ttarget.extern_shared"
    PTX_OPCODE: ClassVar[str] = ".extern .shared .align {align} .b8 {sym}[]"

    sym = prop_def(StringAttr)
    align = prop_def(IntegerAttr[I64])
    assembly_format = "$sym `align` `=` $align attr-dict"

    def __init__(self, sym: str, align: int = 1024):
        super().__init__(properties={"sym": StringAttr(sym), "align": i64_attr(align)})

    def verify_(self) -> None:
        if not self.sym.data.isidentifier():
            self._fail(f"'{self.sym.data}' is not a valid PTX identifier")
        a = self.align.value.data
        if a <= 0 or a & (a - 1) or a > 1024:
            self._fail(f"align must be a power of two <= 1024, got {a}")


class _SymbolAddrOp(PtxOp, ABC):
    """Base of the ops moving a shared array's shared-space address into a ``u32``
    register (``mov.u32 %r, sym;``); ``DECL`` is the op that declares the array."""

    PTX_OPCODE: ClassVar[str] = "mov.u32"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "$sym")

    DECL: ClassVar[type[PtxOp]]

    dst = operand_def(RegisterType)
    sym = prop_def(StringAttr)
    assembly_format = "$dst `,` $sym attr-dict"

    def __init__(self, dst: SSAValue, sym: str):
        super().__init__(operands=[dst], properties={"sym": StringAttr(sym)})

    def verify_(self) -> None:
        self._dst(self.dst, "u32")
        block = kernel_block(self)
        if block is not None:
            syms = {o.sym.data for o in block.ops if isinstance(o, self.DECL)}
            if self.sym.data not in syms:
                self._fail(
                    f"no {self.DECL.name} array named '{self.sym.data}' in this function"
                )


@irdl_op_definition
class SharedAddrOp(_SymbolAddrOp):
    """The shared-space address of a ``ttarget.shared`` array:
    ``ttarget.shared_addr %r, "smem0"`` → ``mov.u32 %r, smem0;``."""

    name = "ttarget.shared_addr"
    DECL: ClassVar[type[PtxOp]] = SharedOp


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
    PTX_OPCODE: ClassVar[str] = "mov.u64"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "$param")

    dst = operand_def(RegisterType)
    param = operand_def(ParamType)
    assembly_format = "$dst `,` $param attr-dict `:` type($param)"

    def __init__(self, dst: SSAValue, param: SSAValue):
        super().__init__(operands=[dst, param])

    def verify_(self) -> None:
        self._dst(self.dst, "u64")
        if not isinstance(self.param, BlockArgument):
            self._fail("parameter must be an argument of the enclosing ttarget.func")


@irdl_op_definition
class LdParamOp(PtxOp):
    """Loads a kernel parameter: ``ttarget.ld_param "u64" %rd, %arg`` → ``ld.param.u64 %rd, [k_param_0];``."""

    name = "ttarget.ld_param"
    PTX_OPCODE: ClassVar[str] = "ld.param.{mods}"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "[$param]")

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


# --------------------------------------------------------------------------- moves


@irdl_op_definition
class SregOp(PtxOp):
    """Reads a special register: ``ttarget.sreg %r, "tid.x"`` → ``mov.u32 %r, %tid.x;``."""

    name = "ttarget.sreg"
    PTX_OPCODE: ClassVar[str] = "mov.u32"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "%$sreg")

    dst = operand_def(RegisterType)
    sreg = prop_def(StringAttr)
    assembly_format = "$dst `,` $sreg attr-dict"

    def __init__(self, dst: SSAValue, sreg: str):
        super().__init__(operands=[dst], properties={"sreg": StringAttr(sreg)})

    def requirement(self) -> Requirement:
        return CLUSTER_SREG if self.sreg.data in CLUSTER_REGISTERS else super().requirement()

    def verify_(self) -> None:
        if self.sreg.data not in SPECIAL_REGISTERS:
            self._fail(
                f"unknown special register '{self.sreg.data}'; valid: "
                + ", ".join(sorted(SPECIAL_REGISTERS))
            )
        self._dst(self.dst, "u32")


@irdl_op_definition
class MovOp(PtxOp):
    """``ttarget.mov "f32" %d, %a`` → ``mov.f32 %d, %a;`` (optionally predicated)."""

    name = "ttarget.mov"
    PTX_OPCODE: ClassVar[str] = "mov.{mods}"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "$src")

    mods = prop_def(StringAttr)
    dst = operand_def(RegisterType)
    src = operand_def(RegisterType)
    guard = opt_operand_def(RegisterType)
    negate = opt_prop_def(UnitAttr)
    assembly_format = "$mods $dst `,` $src " + GUARD_FORMAT + " attr-dict"

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


@irdl_op_definition
class PackOp(PtxOp):
    """Packs registers into a wider one: ``ttarget.pack "b32" %d, (%lo, %hi)``
    → ``mov.b32 %d, {%lo, %hi};`` (first element in the low bits)."""

    name = "ttarget.pack"
    PTX_OPCODE: ClassVar[str] = "mov.{mods}"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "$srcs")

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


@irdl_op_definition
class UnpackOp(PtxOp):
    """Splits a register: ``ttarget.unpack "b32" (%lo, %hi), %s`` → ``mov.b32 {%lo, %hi}, %s;``."""

    name = "ttarget.unpack"
    PTX_OPCODE: ClassVar[str] = "mov.{mods}"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dsts", "$src")

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


@irdl_op_definition
class CvtaOp(PtxOp):
    """Converts a generic address to a state space: ``ttarget.cvta "to.global.u64" %d, %a``."""

    name = "ttarget.cvta"
    PTX_OPCODE: ClassVar[str] = "cvta.{mods}"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dst", "$src")

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


# --------------------------------------------------------------------------- loads, stores and asynchronous copies


class MemOp(PtxOp, ABC):
    """Base of ``ld`` and ``st``: state space, vector width, cache modifiers and the address."""

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
    PTX_OPCODE: ClassVar[str] = "ld.{mods}"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$dsts", "[$addr+$offset]")

    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    mods = prop_def(StringAttr)
    dsts = var_operand_def(RegisterType)
    addr = operand_def(RegisterType)
    offset = prop_def(IntegerAttr[I64])
    guard = opt_operand_def(RegisterType)
    negate = opt_prop_def(UnitAttr)
    assembly_format = (
        "$mods ` ` `(` $dsts `)` `,` `[` $addr `+` $offset `]` " + GUARD_FORMAT + " attr-dict"
    )

    def __init__(
        self, mods: str, dsts: Sequence[SSAValue], addr: SSAValue, offset: int = 0,
        guard: SSAValue | None = None, negate: bool = False,
    ):
        super().__init__(
            operands=[list(dsts), addr, guard],
            properties={
                "mods": StringAttr(mods), "offset": i64_attr(offset),
                "negate": UnitAttr() if negate else None,
            },
        )

    def verify_(self) -> None:
        self._check_mem(self.mods, self.dsts, self.addr, load=True)
        self._guard_ok(self.guard)


@irdl_op_definition
class StOp(MemOp):
    """``ttarget.st "global.f32" [%rd + 0], (%f)`` → ``st.global.f32 [%rd], %f;`` (optionally predicated)."""

    name = "ttarget.st"
    PTX_OPCODE: ClassVar[str] = "st.{mods}"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("[$addr+$offset]", "$srcs")

    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    mods = prop_def(StringAttr)
    addr = operand_def(RegisterType)
    offset = prop_def(IntegerAttr[I64])
    srcs = var_operand_def(RegisterType)
    guard = opt_operand_def(RegisterType)
    negate = opt_prop_def(UnitAttr)
    assembly_format = (
        "$mods ` ` `[` $addr `+` $offset `]` `,` `(` $srcs `)` " + GUARD_FORMAT + " attr-dict"
    )

    def __init__(
        self, mods: str, addr: SSAValue, srcs: Sequence[SSAValue], offset: int = 0,
        guard: SSAValue | None = None, negate: bool = False,
    ):
        super().__init__(
            operands=[addr, list(srcs), guard],
            properties={
                "mods": StringAttr(mods), "offset": i64_attr(offset),
                "negate": UnitAttr() if negate else None,
            },
        )

    def verify_(self) -> None:
        self._check_mem(self.mods, self.srcs, self.addr, load=False)
        self._guard_ok(self.guard)


@irdl_op_definition
class CpAsyncOp(PtxOp):
    """Asynchronous global→shared copy (sm_80):
    ``ttarget.cp_async "cg.shared.global" [%s + 0], [%g + 0], 16 src_size %n``
    → ``cp.async.cg.shared.global [%s], [%g], 16, %n;``. Bytes past ``src_size`` are zero-filled.
    """

    name = "ttarget.cp_async"
    PTX_OPCODE: ClassVar[str] = "cp.async.{mods}"
    PTX_ARGS: ClassVar[tuple[str, ...]] = (
        "[$dst+$dst_offset]", "[$src+$src_offset]", "$size", "$src_size",
    )

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
                "mods": StringAttr(f"{cache}.shared.global"), "size": i64_attr(size),
                "dst_offset": i64_attr(dst_offset), "src_offset": i64_attr(src_offset),
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


@irdl_op_definition
class CpAsyncCommitOp(PtxOp):
    """``ttarget.cp_async_commit`` → ``cp.async.commit_group;``."""

    name = "ttarget.cp_async_commit"
    PTX_OPCODE: ClassVar[str] = "cp.async.commit_group"

    PTX: ClassVar[tuple[int, int]] = (7, 0)
    SM: ClassVar[int] = 80
    assembly_format = "attr-dict"

    def verify_(self) -> None:
        pass


@irdl_op_definition
class CpAsyncMbarrierArriveOp(PtxOp):
    """``ttarget.cp_async_mbarrier_arrive [%bar]`` →
    ``cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%bar];``: the mbarrier at shared
    address ``bar`` receives one arrive once every ``cp.async`` this thread issued before
    has completed (``.noinc``: the arrive counts towards the barrier's expected count)."""

    name = "ttarget.cp_async_mbarrier_arrive"
    PTX_OPCODE: ClassVar[str] = "cp.async.mbarrier.arrive.noinc.shared::cta.b64"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("[$addr]",)

    PTX: ClassVar[tuple[int, int]] = (7, 0)
    SM: ClassVar[int] = 80
    addr = operand_def(RegisterType)
    assembly_format = "` ` `[` $addr `]` attr-dict"

    def __init__(self, addr: SSAValue):
        super().__init__(operands=[addr])

    def verify_(self) -> None:
        self._src(self.addr, "b32", "barrier address")


@irdl_op_definition
class CpAsyncWaitOp(PtxOp):
    """``ttarget.cp_async_wait 0`` → ``cp.async.wait_group 0;`` (wait until at most N groups pend)."""

    name = "ttarget.cp_async_wait"
    PTX_OPCODE: ClassVar[str] = "cp.async.wait_group"
    PTX_ARGS: ClassVar[tuple[str, ...]] = ("$pending",)

    PTX: ClassVar[tuple[int, int]] = (7, 0)
    SM: ClassVar[int] = 80
    pending = prop_def(IntegerAttr[I64])
    assembly_format = "$pending attr-dict"

    def __init__(self, pending: int):
        super().__init__(properties={"pending": i64_attr(pending)})

    def verify_(self) -> None:
        if not 0 <= self.pending.value.data <= 7:
            self._fail(f"pending group count must be in [0, 7], got {self.pending.value.data}")
