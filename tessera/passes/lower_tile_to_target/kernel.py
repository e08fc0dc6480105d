"""The per-kernel state of ``lower-tile-to-target``: registers of each Tile IR value,
small instruction builders, addresses, scalar loads and stores, and the table of
op lowerings (:data:`TARGET_LOWERINGS`) that the per-dialect modules fill."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    NoneAttr,
    f32,
    f64,
    i32,
)
from xdsl.ir import Attribute, Operation, SSAValue

from tessera.ir import target as tt
from tessera.ir import tile
from tessera.ir.registry import OpRegistry
from tessera.ir.tile import element_bytes, is_shared
from tessera.passes.lower_tile_to_target.types import (
    TYPE_BITS_OF,
    TileLoweringError,
    bits_type,
    is_i1,
    mem_type,
    reg_class_of,
)


@dataclass
class _Shared:
    """A ``ttile.alloc_shared`` array: its PTX symbol, shape, element size and swizzle."""

    sym: str
    shape: tuple[int, ...]
    elem_bytes: int
    swizzle: bool


class KernelLowering:
    """Translates one ``ttile.kernel`` into the body of a ``ttarget.func``."""

    def __init__(self, kernel: tile.KernelOp):
        self.kernel = kernel
        self.kname = kernel.sym_name.data
        self.group_size = kernel.group_size_value()
        params = [self._param_type(a.type, i) for i, a in enumerate(kernel.args)]
        self.func = tt.FuncOp(self.kname, params, self.group_size)
        self.block = self.func.block
        self.vals: dict[SSAValue, list[SSAValue]] = {}
        self.shared: dict[SSAValue, _Shared] = {}
        self.nlabels = 0
        self.nshared = 0
        self.imms: dict[tuple[str, object], SSAValue] = {}
        self.tid: SSAValue | None = None
        self.packed: dict[tuple[SSAValue, object], list[SSAValue]] = {}
        self.size_args = kernel.size_args()

    # -- small builders

    def fail(self, op: Operation, msg: str) -> TileLoweringError:
        return TileLoweringError(f"lower-tile-to-target: {op.name} in kernel @{self.kname}: {msg}")

    def _param_type(self, t: Attribute, i: int) -> str:
        if isinstance(t, MemRefType):
            return "u64"
        p = tt.host_param_type(t)
        if p is None:
            raise TileLoweringError(
                f"lower-tile-to-target: kernel @{self.kernel.sym_name.data} argument {i}: "
                f"type {t} cannot be a kernel parameter"
            )
        return p

    def emit(self, op: Operation) -> None:
        self.block.add_op(op)

    def prepend(self, op: Operation) -> None:
        """Put a declaration (immediate, shared array) at the top of the body."""
        first = self.block.first_op
        if first is None:
            self.block.add_op(op)
        else:
            self.block.insert_op_before(op, first)

    def reg(self, cls: str) -> SSAValue:
        op = tt.RegOp(cls)
        self.emit(op)
        return op.result

    def imm(self, value: int | float, ty: Attribute = i32) -> SSAValue:
        key = (str(ty), value)
        if key not in self.imms:
            attr = FloatAttr(value, ty) if isinstance(ty, Float32Type | Float64Type) else (
                IntegerAttr(int(value), ty)
            )
            op = tt.ImmOp(attr)  # type: ignore[arg-type]
            self.prepend(op)
            self.imms[key] = op.result
        return self.imms[key]

    def label(self, hint: str) -> str:
        self.nlabels += 1
        return f"$L_{hint}_{self.nlabels}".replace("$", "")

    def const_reg(self, cls: str, value: int | float) -> SSAValue:
        r = self.reg(cls)
        if cls in ("f32", "f64"):
            self.emit(tt.MovOp(cls, r, self.imm(float(value), f32 if cls == "f32" else f64)))
        else:
            ity = {"b16": "b16", "b32": "b32", "b64": "b64"}[cls]
            self.emit(tt.MovOp(ity, r, self.imm(int(value), IntegerType(TYPE_BITS_OF[cls]))))
        return r

    def one(self, v: SSAValue) -> SSAValue:
        regs = self.vals.get(v)
        if regs is None:
            raise TileLoweringError(
                f"lower-tile-to-target: kernel @{self.kname}: value {v} used before it is lowered"
            )
        if len(regs) != 1:
            raise TileLoweringError(f"lower-tile-to-target: expected a scalar, got a vector {v.type}")
        return regs[0]

    def define(self, v: SSAValue) -> SSAValue:
        r = self.reg(reg_class_of(v.type))
        self.vals[v] = [r]
        return r

    def mov(self, dst: SSAValue, src: SSAValue, t: Attribute) -> None:
        cls = reg_class_of(t)
        if cls == "pred":
            self.emit(tt.OrOp("pred", dst, src, src))
        else:
            self.emit(tt.MovOp(bits_type(cls) if cls.startswith("b") else cls, dst, src))

    def tid_x(self) -> SSAValue:
        if self.tid is None:
            self.tid = self.reg("b32")
            self.emit(tt.SregOp(self.tid, "tid.x"))
        return self.tid

    def u32_of(self, v64: SSAValue) -> SSAValue:
        r = self.reg("b32")
        self.emit(tt.CvtOp("u32.u64", r, [v64]))
        return r

    def u64_of(self, v32: SSAValue) -> SSAValue:
        r = self.reg("b64")
        self.emit(tt.CvtOp("u64.u32", r, [v32]))
        return r

    # -- driver

    def run(self) -> tt.FuncOp:
        for arg, p in zip(self.kernel.args, self.func.block.args):
            if isinstance(arg.type, MemRefType):
                raw = self.reg("b64")
                self.emit(tt.LdParamOp("u64", raw, p))
                r = self.reg("b64")
                self.emit(tt.CvtaOp("to.global.u64", r, raw))
            else:
                assert isinstance(p.type, tt.ParamType)
                pty = p.type.ty.data
                cls = reg_class_of(arg.type)
                if cls == "pred":
                    raw = self.reg("b32")
                    self.emit(tt.LdParamOp("u32", raw, p))
                    r = self.reg("pred")
                    self.emit(tt.SetpOp("ne.u32", r, raw, self.imm(0)))
                elif cls == "b16":
                    raw = self.reg("b32")
                    self.emit(tt.LdParamOp("u32", raw, p))
                    r = self.reg("b16")
                    self.emit(tt.CvtOp("u16.u32", r, [raw]))
                else:
                    r = self.reg(cls)
                    self.emit(tt.LdParamOp(pty, r, p))
            self.vals[arg] = [r]
        self.tid_x()  # read once at entry: later uses may sit in any branch
        self.region_ops(self.kernel.body.block.ops)
        last = self.block.last_op
        if not isinstance(last, tt.RetOp):
            self.emit(tt.RetOp())
        return self.func

    def region_ops(self, ops: Sequence[Operation] | object) -> None:
        for op in ops:  # type: ignore[attr-defined]
            self.lower_op(op)

    def lower_op(self, op: Operation) -> None:
        handler = TARGET_LOWERINGS.get(op)
        if handler is None:
            raise self.fail(op, "no lowering to Target IR for this op")
        handler(self, op)

    # -- addresses

    def dim_size(self, op: Operation, ref: SSAValue, dim: int) -> SSAValue:
        """The register holding the size of dynamic dim ``dim`` of the argument ``ref``
        (its ``index`` size argument, named by the kernel's ``sizes``)."""
        arg = next((k for k, a in enumerate(self.kernel.args) if a is ref), None)
        src = self.size_args.get((arg, dim)) if arg is not None else None
        if src is None:
            raise self.fail(
                op, f"dim {dim} of {ref.type} is dynamic and no kernel argument holds its size "
                "(name one in the kernel's sizes = [...])"
            )
        return self.one(self.kernel.args[src])

    def linear_index(
        self, ref: SSAValue, indices: Sequence[SSAValue], op: Operation | None = None
    ) -> SSAValue:
        """Row-major element offset (b64) of ``indices`` in ``ref``; strides over dynamic
        dims are computed from the dims' size arguments."""
        t = ref.type
        assert isinstance(t, MemRefType)
        shape = t.get_shape()
        i64t = IntegerType(64)
        acc: SSAValue | None = None
        stride = 1
        stride_reg: SSAValue | None = None  # stride = stride_reg * stride when set
        for k in reversed(range(len(shape))):
            idx = self.one(indices[k])
            factor = stride_reg
            if stride_reg is not None and stride != 1:
                factor = self.reg("b64")
                self.emit(tt.MulOp("lo.s64", factor, stride_reg, self.imm(stride, i64t)))
            if factor is None and stride == 1:
                term = idx
                if acc is not None:
                    term = self.reg("b64")
                    self.emit(tt.AddOp("s64", term, idx, acc))
                acc = term
            else:
                mul = factor if factor is not None else self.imm(stride, i64t)
                nxt = self.reg("b64")
                if acc is None:
                    self.emit(tt.MulOp("lo.s64", nxt, idx, mul))
                else:
                    self.emit(tt.MadOp("lo.s64", nxt, idx, mul, acc))
                acc = nxt
            if k == 0:
                break
            if shape[k] < 0:
                size = self.dim_size(op or ref.owner, ref, k)  # type: ignore[arg-type]
                if stride_reg is None:
                    stride_reg = size
                else:
                    prod = self.reg("b64")
                    self.emit(tt.MulOp("lo.s64", prod, stride_reg, size))
                    stride_reg = prod
            else:
                stride *= shape[k]
        if acc is None:
            acc = self.const_reg("b64", 0)
        return acc

    def address(self, op: Operation, ref: SSAValue, indices: Sequence[SSAValue]) -> tuple[str, SSAValue]:
        """(state space, address register) of element ``indices`` of ``ref``."""
        t = ref.type
        assert isinstance(t, MemRefType)
        ebytes = element_bytes(t.element_type) if not is_i1(t.element_type) else 1
        if is_shared(t):
            sh = self.shared.get(ref)
            if sh is None:
                raise self.fail(op, "shared memref must come from ttile.alloc_shared in this kernel")
            base = self.one(ref)
            if sh.swizzle:
                off32 = self.swizzled_offset(sh, indices)
            else:
                lin = self.u32_of(self.linear_index(ref, indices))
                off32 = self.reg("b32")
                self.emit(tt.MulOp("lo.u32", off32, lin, self.imm(ebytes)))
            a = self.reg("b32")
            self.emit(tt.AddOp("u32", a, base, off32))
            return "shared", a
        if not isinstance(t.memory_space, NoneAttr):
            raise self.fail(op, f"unsupported memory space {t.memory_space}")
        lin = self.linear_index(ref, indices, op)
        a = self.reg("b64")
        self.emit(tt.MadOp("lo.s64", a, lin, self.imm(ebytes, IntegerType(64)), self.one(ref)))
        return "global", a

    def shared_address_imm(
        self, op: Operation, ref: SSAValue, indices: Sequence[SSAValue]
    ) -> tuple[str, SSAValue, int]:
        """``address`` with the constant part of a 1-D, unswizzled shared index
        (``x + c``, ``c > 0`` an ``arith.constant``) split off as a byte offset for the
        instruction's ``[addr+offset]``: loads at constant distances from one lane offset
        share one address register."""
        t = ref.type
        assert isinstance(t, MemRefType)
        sh = self.shared.get(ref) if is_shared(t) else None
        if sh is None or sh.swizzle or len(indices) != 1 or is_i1(t.element_type):
            space, a = self.address(op, ref, indices)
            return space, a, 0
        x, c = indices[0], 0
        while isinstance(x.owner, arith.AddiOp):
            lhs, rhs = x.owner.lhs, x.owner.rhs
            k = _const_int(rhs)
            if k is None:
                k, lhs = _const_int(lhs), rhs
            if k is None or k < 0:
                break
            x, c = lhs, c + k
        space, a = self.address(op, ref, [x])
        return space, a, c * element_bytes(t.element_type)

    def swizzled_offset(self, sh: _Shared, indices: Sequence[SSAValue]) -> SSAValue:
        """Byte offset ``r*R + ((c*e/16) ^ (r % p))*16 + (c*e) % 16`` (docs/TILE_IR.md)."""
        e = sh.elem_bytes
        row_bytes = sh.shape[-1] * e
        chunks = row_bytes // 16
        p = 1
        while chunks % (p * 2) == 0 and p < 8:
            p *= 2
        # r = flattened row index over the leading dims
        r: SSAValue | None = None
        stride = 1
        for k in reversed(range(len(sh.shape) - 1)):
            idx = self.u32_of(self.one(indices[k]))
            if r is None:
                r = idx
                if stride != 1:
                    r = self.reg("b32")
                    self.emit(tt.MulOp("lo.u32", r, idx, self.imm(stride)))
            else:
                nxt = self.reg("b32")
                self.emit(tt.MadOp("lo.u32", nxt, idx, self.imm(stride), r))
                r = nxt
            stride *= sh.shape[k]
        assert r is not None
        c = self.u32_of(self.one(indices[-1]))
        cb = self.reg("b32")
        self.emit(tt.MulOp("lo.u32", cb, c, self.imm(e)))
        chunk = self.reg("b32")
        self.emit(tt.ShrOp("u32", chunk, cb, self.imm(4)))
        rm = self.reg("b32")
        self.emit(tt.AndOp("b32", rm, r, self.imm(p - 1)))
        sw = self.reg("b32")
        self.emit(tt.XorOp("b32", sw, chunk, rm))
        within = self.reg("b32")
        self.emit(tt.AndOp("b32", within, cb, self.imm(15)))
        off = self.reg("b32")
        self.emit(tt.MadOp("lo.u32", off, sw, self.imm(16), within))
        out = self.reg("b32")
        self.emit(tt.MadOp("lo.u32", out, r, self.imm(row_bytes), off))
        return out

    # -- loads and stores of one element

    def load_scalar(
        self, op: Operation, ref: SSAValue, indices: Sequence[SSAValue], result: SSAValue,
        mask: SSAValue | None = None, other: SSAValue | None = None,
    ) -> None:
        et = result.type
        space, a, offset = self.shared_address_imm(op, ref, indices)
        d = self.define(result)
        guard = self.one(mask) if mask is not None else None
        if is_i1(et):
            raw = self.reg("b16")
            if guard is not None:
                self.emit(tt.MovOp("b16", raw, self.imm(0, IntegerType(16))))
            self.emit(tt.LdOp(f"{space}.u8", [raw], a, guard=guard))
            self.emit(tt.SetpOp("ne.u16", d, raw, self.imm(0, IntegerType(16))))
            if other is not None:
                assert guard is not None
                keep = self.reg("pred")
                self.emit(tt.AndOp("pred", keep, d, guard))
                neg = self.reg("pred")
                self.emit(tt.NotOp("pred", neg, guard))
                alt = self.reg("pred")
                self.emit(tt.AndOp("pred", alt, self.one(other), neg))
                self.emit(tt.OrOp("pred", d, keep, alt))
            return
        if guard is not None:
            if other is not None:
                self.mov(d, self.one(other), et)
            else:
                self.zero(d, et)
        self.emit(tt.LdOp(f"{space}.{mem_type(et)}", [d], a, offset, guard=guard))

    def store_scalar(
        self, op: Operation, value: SSAValue, ref: SSAValue, indices: Sequence[SSAValue],
        mask: SSAValue | None = None,
    ) -> None:
        et = value.type
        space, a, offset = self.shared_address_imm(op, ref, indices)
        guard = self.one(mask) if mask is not None else None
        v = self.one(value)
        if is_i1(et):
            raw = self.reg("b16")
            self.emit(tt.SelpOp("u16", raw, self.imm(1, IntegerType(16)), self.imm(0, IntegerType(16)), v))
            v = raw
        self.emit(tt.StOp(f"{space}.{mem_type(et)}", a, [v], offset, guard=guard))

    def zero(self, d: SSAValue, t: Attribute) -> None:
        cls = reg_class_of(t)
        if cls == "pred":
            self.emit(tt.SetpOp("ne.u32", d, self.imm(0), self.imm(0)))
        elif cls in ("f32", "f64"):
            self.emit(tt.MovOp(cls, d, self.imm(0.0, f32 if cls == "f32" else f64)))
        else:
            self.emit(tt.MovOp(cls, d, self.imm(0, IntegerType(TYPE_BITS_OF[cls]))))


Handler = Callable[["KernelLowering", Operation], None]
"""Lowers one op: appends its instructions and records the registers of its results."""

TARGET_LOWERINGS: OpRegistry[Handler] = OpRegistry("Target IR lowering")
"""The Target IR lowering of each Tile IR op (``ttile``, ``arith``, ``math``, ``vector``,
``scf``, ``memref``), by op class; each module of this package registers its dialect's."""


def _const_int(v: SSAValue) -> int | None:
    """The value of an integer ``arith.constant``, else None."""
    o = v.owner
    if isinstance(o, arith.ConstantOp) and isinstance(o.value, IntegerAttr):
        return o.value.value.data
    return None
