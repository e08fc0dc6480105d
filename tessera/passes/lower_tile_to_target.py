"""``lower-tile-to-target``: Tile IR kernels → Target IR (PTX on virtual registers).

Every ``ttile.kernel`` becomes a ``ttarget.func`` of the same name and every
``ttile.launch`` a ``ttarget.launch``, every host collective (``ttile.all_reduce``
...) the ``ttarget`` op of the same name; host ``func.func``s stay as they are.
Inside a kernel each SSA value gets its own virtual register (vectors one per
element) and ops translate one by one, top to bottom, into one flat block:

* ``scf.for`` / ``scf.if`` / ``scf.while`` become labels and (predicated)
  branches; loop-carried values live in registers written at ``scf.yield``
  (through temporaries, so the copy is parallel).
* ``ttile.load`` / ``ttile.store`` (and ``memref.load`` / ``memref.store``) compute
  row-major addresses; a mask predicates the access (``@%p ld``), ``other`` is
  moved in first. Shared memrefs use 32-bit ``.shared`` addresses; an
  ``alloc_shared`` with ``swizzle = "xor"`` XORs the 16-byte chunk index with the
  row index modulo ``p`` (docs/TILE_IR.md).
* ``ttile.reduce`` is a ``shfl.sync.bfly`` butterfly (offsets 16…1); with
  ``scope = group`` lane 0 of each warp writes its warp's result to shared
  memory and every lane combines the warps in order, between two barriers.
* ``ttile.mma`` packs bf16/f16 pairs into ``.b32`` fragment registers and emits
  ``mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32``.

Anything without a lowering raises :class:`TileLoweringError` naming the op and
the kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith, memref, scf, vector
from xdsl.dialects import math as mathd
from xdsl.dialects.builtin import (
    BFloat16Type,
    DenseIntOrFPElementsAttr,
    Float8E4M3FNType,
    Float8E5M2Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    NoneAttr,
    VectorType,
    f32,
    f64,
    i32,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tessera.errors import TesseraError
from tessera.ir import target as tt
from tessera.ir import tile
from tessera.ir.tile import element_bytes, is_shared
from tessera.passes import tile_collectives

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


class TileLoweringError(TesseraError, ValueError):
    """A Tile IR construct that ``lower-tile-to-target`` cannot lower."""


# --------------------------------------------------------------------------- type mapping


def reg_class_of(t: Attribute) -> str:
    """The PTX register class holding one value of scalar type ``t``."""
    if isinstance(t, IndexType):
        return "b64"
    if isinstance(t, IntegerType):
        w = t.width.data
        return {1: "pred", 8: "b16", 16: "b16", 32: "b32", 64: "b64"}[w]
    if isinstance(t, Float32Type):
        return "f32"
    if isinstance(t, Float64Type):
        return "f64"
    if isinstance(t, BFloat16Type | Float16Type):
        return "b16"
    if element_bits(t) == 8:
        return "b16"
    raise TileLoweringError(f"no PTX register class for type {t}")


def element_bits(t: Attribute) -> int:
    return 64 if isinstance(t, IndexType) else getattr(t, "bitwidth", 0) or getattr(
        getattr(t, "width", None), "data", 0
    )


def int_type(t: Attribute, signed: bool = True) -> str:
    """PTX integer type for an integer/index type (i8 values live in 16-bit registers)."""
    bits = 64 if isinstance(t, IndexType) else max(16, t.width.data)  # type: ignore[attr-defined]
    return f"{'s' if signed else 'u'}{bits}"


def float_type(t: Attribute) -> str:
    if isinstance(t, Float32Type):
        return "f32"
    if isinstance(t, Float64Type):
        return "f64"
    raise TileLoweringError(f"arithmetic on {t} is not lowered (compute in f32)")


def mem_type(t: Attribute) -> str:
    """PTX type used to load/store one element of type ``t``."""
    if isinstance(t, Float32Type | Float64Type):
        return float_type(t)
    if isinstance(t, IntegerType) and t.width.data == 1:
        return "u8"
    bits = element_bits(t)
    return {8: "b8", 16: "b16", 32: "b32", 64: "b64"}[bits]


def bits_type(cls: str) -> str:
    return {"b16": "b16", "b32": "b32", "b64": "b64", "f32": "b32", "f64": "b64"}[cls]


# --------------------------------------------------------------------------- kernel lowering


@dataclass
class _Shared:
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
        handler = _HANDLERS.get(type(op))
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
        ebytes = element_bytes(t.element_type) if not _is_i1(t.element_type) else 1
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
        space, a = self.address(op, ref, indices)
        d = self.define(result)
        guard = self.one(mask) if mask is not None else None
        if _is_i1(et):
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
        self.emit(tt.LdOp(f"{space}.{mem_type(et)}", [d], a, guard=guard))

    def store_scalar(
        self, op: Operation, value: SSAValue, ref: SSAValue, indices: Sequence[SSAValue],
        mask: SSAValue | None = None,
    ) -> None:
        et = value.type
        space, a = self.address(op, ref, indices)
        guard = self.one(mask) if mask is not None else None
        v = self.one(value)
        if _is_i1(et):
            raw = self.reg("b16")
            self.emit(tt.SelpOp("u16", raw, self.imm(1, IntegerType(16)), self.imm(0, IntegerType(16)), v))
            v = raw
        self.emit(tt.StOp(f"{space}.{mem_type(et)}", a, [v], guard=guard))

    def zero(self, d: SSAValue, t: Attribute) -> None:
        cls = reg_class_of(t)
        if cls == "pred":
            self.emit(tt.SetpOp("ne.u32", d, self.imm(0), self.imm(0)))
        elif cls in ("f32", "f64"):
            self.emit(tt.MovOp(cls, d, self.imm(0.0, f32 if cls == "f32" else f64)))
        else:
            self.emit(tt.MovOp(cls, d, self.imm(0, IntegerType(TYPE_BITS_OF[cls]))))


TYPE_BITS_OF = {"b16": 16, "b32": 32, "b64": 64}


def _is_i1(t: Attribute) -> bool:
    return isinstance(t, IntegerType) and t.width.data == 1


_HANDLERS: dict[type[Operation], Callable[[KernelLowering, Operation], None]] = {}


def lowers(*types: type[Operation]):
    def deco(fn: Callable[[KernelLowering, Operation], None]):
        for t in types:
            _HANDLERS[t] = fn
        return fn

    return deco


# --------------------------------------------------------------------------- ttile ops


@lowers(tile.ReturnOp)
def _return(lw: KernelLowering, op: Operation) -> None:
    lw.emit(tt.RetOp())


@lowers(tile.TileIdOp, tile.NumTilesOp)
def _tile_coord(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.TileIdOp | tile.NumTilesOp)
    dim = "xyz"[op.dim_index()]
    name = ("ctaid" if isinstance(op, tile.TileIdOp) else "nctaid") + "." + dim
    r = lw.reg("b32")
    lw.emit(tt.SregOp(r, name))
    lw.vals[op.results[0]] = [lw.u64_of(r)]


@lowers(tile.LocalIdOp, tile.GroupSizeOp, tile.LinearIdOp, tile.LaneIdOp, tile.WarpIdOp)
def _lane_coord(lw: KernelLowering, op: Operation) -> None:
    tid = lw.tid_x()
    if isinstance(op, tile.LocalIdOp):
        r = tid
    elif isinstance(op, tile.GroupSizeOp):
        lw.vals[op.results[0]] = [lw.const_reg("b64", lw.group_size)]
        return
    elif isinstance(op, tile.LaneIdOp):
        r = lw.reg("b32")
        lw.emit(tt.AndOp("b32", r, tid, lw.imm(31)))
    elif isinstance(op, tile.WarpIdOp):
        r = lw.reg("b32")
        lw.emit(tt.ShrOp("u32", r, tid, lw.imm(5)))
    else:
        cta = lw.reg("b32")
        lw.emit(tt.SregOp(cta, "ctaid.x"))
        wide = lw.reg("b64")
        lw.emit(tt.MulOp("wide.u32", wide, cta, lw.imm(lw.group_size)))
        out = lw.reg("b64")
        lw.emit(tt.AddOp("s64", out, wide, lw.u64_of(tid)))
        lw.vals[op.results[0]] = [out]
        return
    lw.vals[op.results[0]] = [lw.u64_of(r)]


@lowers(tile.AllocSharedOp)
def _alloc_shared(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.AllocSharedOp)
    t = op.result.type
    assert isinstance(t, MemRefType)
    e = element_bytes(t.element_type)
    size = math.prod(t.get_shape()) * e
    align = op.alignment.value.data if op.alignment is not None else 16
    sym = f"{lw.kname}_smem{lw.nshared}"
    lw.nshared += 1
    lw.prepend(tt.SharedOp(sym, size, max(align, 16)))
    r = lw.reg("b32")
    lw.emit(tt.SharedAddrOp(r, sym))
    lw.vals[op.result] = [r]
    lw.shared[op.result] = _Shared(
        sym, tuple(t.get_shape()), e, op.swizzle is not None and op.swizzle.data == "xor"
    )


@lowers(tile.LoadOp)
def _load(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.LoadOp)
    lw.load_scalar(op, op.ref, op.indices, op.result, op.mask, op.other)


@lowers(tile.StoreOp)
def _store(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.StoreOp)
    lw.store_scalar(op, op.value, op.ref, op.indices, op.mask)


@lowers(memref.LoadOp)
def _memref_load(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, memref.LoadOp)
    lw.load_scalar(op, op.memref, op.indices, op.res)


@lowers(memref.StoreOp)
def _memref_store(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, memref.StoreOp)
    lw.store_scalar(op, op.value, op.memref, op.indices)


def _vector_access_words(lw: KernelLowering, op: Operation, vt: VectorType) -> tuple[str, int, int]:
    """(word type, number of words, elements per word) of a vector access."""
    et = vt.element_type
    n = vt.get_shape()[0]
    eb = element_bytes(et)
    total = n * eb
    if total not in (4, 8, 16) and not (n == 1 or total == 2):
        raise lw.fail(op, f"vector access of {total} bytes is not 1, 2, 4, 8 or 16 bytes")
    if eb >= 4:
        return mem_type(et), n, 1
    if eb == 2:
        if total == 2:
            return "b16", 1, 1
        return "b32", total // 4, 2
    raise lw.fail(op, f"vectors of {et} are not lowered")


@lowers(tile.LoadVectorOp)
def _load_vector(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.LoadVectorOp)
    vt = op.result.type
    assert isinstance(vt, VectorType)
    wty, nw, per = _vector_access_words(lw, op, vt)
    space, a = lw.address(op, op.ref, op.indices)
    guard = lw.one(op.mask) if op.mask is not None else None
    cls = "b32" if per == 2 else reg_class_of(vt.element_type)
    words = [lw.reg(cls) for _ in range(nw)]
    if guard is not None:
        for w in words:
            lw.zero(w, vt.element_type if per == 1 else i32)
    vec = f"v{nw}." if nw > 1 else ""
    lw.emit(tt.LdOp(f"{space}.{vec}{wty}", words, a, guard=guard))
    if per == 1:
        lw.vals[op.result] = words
        return
    elems = []
    for w in words:
        lo, hi = lw.reg("b16"), lw.reg("b16")
        lw.emit(tt.UnpackOp("b32", [lo, hi], w))
        elems += [lo, hi]
    lw.vals[op.result] = elems


@lowers(tile.StoreVectorOp)
def _store_vector(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.StoreVectorOp)
    vt = op.value.type
    assert isinstance(vt, VectorType)
    wty, nw, per = _vector_access_words(lw, op, vt)
    space, a = lw.address(op, op.ref, op.indices)
    guard = lw.one(op.mask) if op.mask is not None else None
    elems = lw.vals[op.value]
    if per == 1:
        words = elems
    else:
        words = []
        for k in range(nw):
            w = lw.reg("b32")
            lw.emit(tt.PackOp("b32", w, elems[2 * k: 2 * k + 2]))
            words.append(w)
    vec = f"v{nw}." if nw > 1 else ""
    lw.emit(tt.StOp(f"{space}.{vec}{wty}", a, words, guard=guard))


@lowers(tile.CopyAsyncOp)
def _copy_async(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.CopyAsyncOp)
    st = op.src.type
    assert isinstance(st, MemRefType)
    eb = element_bytes(st.element_type)
    size = op.elems.value.data * eb
    _, dst = lw.address(op, op.dst, op.dst_indices)
    _, src = lw.address(op, op.src, op.src_indices)
    src_size = None
    if op.valid is not None:
        n = lw.u32_of(lw.one(op.valid))
        src_size = lw.reg("b32")
        lw.emit(tt.MulOp("lo.u32", src_size, n, lw.imm(eb)))
    lw.emit(tt.CpAsyncOp("cg" if size == 16 else "ca", dst, src, size, src_size))


@lowers(tile.CommitGroupOp)
def _commit(lw: KernelLowering, op: Operation) -> None:
    lw.emit(tt.CpAsyncCommitOp())


@lowers(tile.WaitGroupOp)
def _wait(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.WaitGroupOp)
    lw.emit(tt.CpAsyncWaitOp(op.pending.value.data))


@lowers(tile.BarrierOp)
def _barrier(lw: KernelLowering, op: Operation) -> None:
    lw.emit(tt.BarSyncOp(0))


def _shuffle(lw: KernelLowering, v: SSAValue, t: Attribute, offset: int) -> SSAValue:
    """The register ``v`` of lane ``lane ^ offset`` (any 16/32/64-bit scalar type)."""
    cls = reg_class_of(t)
    full = lw.imm(-1)
    off = lw.imm(offset)
    clamp = lw.imm(31)
    out = lw.reg(cls)
    if cls in ("b32", "f32"):
        src = v
        if cls == "f32":
            src = lw.reg("b32")
            lw.emit(tt.MovOp("b32", src, v))
        got = lw.reg("b32")
        lw.emit(tt.ShflOp("bfly", got, src, off, clamp, full))
        lw.emit(tt.MovOp("b32", out, got))
    elif cls in ("b64", "f64"):
        lo, hi = lw.reg("b32"), lw.reg("b32")
        lw.emit(tt.UnpackOp("b64", [lo, hi], v if cls == "b64" else _as_b64(lw, v)))
        lo2, hi2 = lw.reg("b32"), lw.reg("b32")
        lw.emit(tt.ShflOp("bfly", lo2, lo, off, clamp, full))
        lw.emit(tt.ShflOp("bfly", hi2, hi, off, clamp, full))
        packed = lw.reg("b64")
        lw.emit(tt.PackOp("b64", packed, [lo2, hi2]))
        lw.emit(tt.MovOp("b64", out, packed))
    elif cls == "b16":
        z = lw.reg("b16")
        lw.emit(tt.MovOp("b16", z, lw.imm(0, IntegerType(16))))
        w = lw.reg("b32")
        lw.emit(tt.PackOp("b32", w, [v, z]))
        got = lw.reg("b32")
        lw.emit(tt.ShflOp("bfly", got, w, off, clamp, full))
        lw.emit(tt.UnpackOp("b32", [out, z], got))
    else:
        raise TileLoweringError(f"lower-tile-to-target: cannot shuffle values of type {t}")
    return out


def _as_b64(lw: KernelLowering, v: SSAValue) -> SSAValue:
    r = lw.reg("b64")
    lw.emit(tt.MovOp("b64", r, v))
    return r


@lowers(tile.ShuffleXorOp)
def _shuffle_xor(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.ShuffleXorOp)
    lw.vals[op.result] = [_shuffle(lw, lw.one(op.value), op.value.type, op.offset.value.data)]


def _combine(lw: KernelLowering, kind: str, t: Attribute, a: SSAValue, b: SSAValue) -> SSAValue:
    cls = reg_class_of(t)
    out = lw.reg(cls)
    if cls in ("f32", "f64"):
        if kind == "sum":
            lw.emit(tt.AddOp(f"rn.{cls}", out, a, b))
        else:
            _float_minmax(lw, kind, cls, out, a, b)
    elif cls in ("b32", "b64"):
        ity = int_type(t)
        op = {"sum": tt.AddOp, "max": tt.MaxOp, "min": tt.MinOp}[kind]
        lw.emit(op(ity, out, a, b))
    else:
        raise TileLoweringError(f"lower-tile-to-target: cannot reduce values of type {t}")
    return out


def _float_minmax(lw: KernelLowering, kind: str, cls: str, out: SSAValue, a: SSAValue, b: SSAValue) -> None:
    """NaN-propagating min/max (``arith.maximumf`` semantics)."""
    op = tt.MaxOp if kind == "max" else tt.MinOp
    if cls == "f32":
        lw.emit(op("NaN.f32", out, a, b))
        return
    lw.emit(op("f64", out, a, b))
    p = lw.reg("pred")
    lw.emit(tt.SetpOp("nan.f64", p, a, b))
    lw.emit(tt.SelpOp("f64", out, lw.imm(float("nan"), f64), out, p))


@lowers(tile.ReduceOp)
def _reduce(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.ReduceOp)
    t = op.value.type
    kind = op.kind.data
    v = lw.one(op.value)
    for off in (16, 8, 4, 2, 1):
        other = _shuffle(lw, v, t, off)
        v = _combine(lw, kind, t, v, other)
    if op.scope.data == "group":
        nwarps = lw.group_size // 32
        if nwarps > 1:
            cls = reg_class_of(t)
            eb = 8 if cls in ("b64", "f64") else 4
            sym = f"{lw.kname}_red{lw.nshared}"
            lw.nshared += 1
            lw.prepend(tt.SharedOp(sym, nwarps * eb, 16))
            base = lw.reg("b32")
            lw.emit(tt.SharedAddrOp(base, sym))
            tid = lw.tid_x()
            lane = lw.reg("b32")
            lw.emit(tt.AndOp("b32", lane, tid, lw.imm(31)))
            warp = lw.reg("b32")
            lw.emit(tt.ShrOp("u32", warp, tid, lw.imm(5)))
            slot = lw.reg("b32")
            lw.emit(tt.MadOp("lo.u32", slot, warp, lw.imm(eb), base))
            is0 = lw.reg("pred")
            lw.emit(tt.SetpOp("eq.u32", is0, lane, lw.imm(0)))
            mt = mem_type(t) if cls in ("f32", "f64") else f"b{eb * 8}"
            lw.emit(tt.StOp(f"shared.{mt}", slot, [v], guard=is0))
            lw.emit(tt.BarSyncOp(0))
            acc: SSAValue | None = None
            for w in range(nwarps):
                x = lw.reg(cls)
                lw.emit(tt.LdOp(f"shared.{mt}", [x], base, offset=w * eb))
                acc = x if acc is None else _combine(lw, kind, t, acc, x)
            assert acc is not None
            lw.emit(tt.BarSyncOp(0))
            v = acc
    lw.vals[op.result] = [v]


@lowers(tile.MmaOp)
def _mma(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, tile.MmaOp)
    at = op.a.type
    assert isinstance(at, VectorType)
    ab = _float_name(at.element_type)
    per = 4 if op.k == tile.MMA_K_FP8 else 2

    def pack(v: SSAValue) -> list[SSAValue]:
        # Reuse the packing of an earlier mma in the same block (it ran before this one).
        key = (v, op.parent_block())
        cached = lw.packed.get(key)
        if cached is not None:
            return cached
        elems = lw.vals[v]
        out = []
        for k in range(0, len(elems), per):
            w = lw.reg("b32")
            if per == 2:
                lw.emit(tt.PackOp("b32", w, elems[k: k + 2]))
            else:
                _pack_bytes(lw, w, elems[k: k + 4])
            out.append(w)
        lw.packed[key] = out
        return out

    a = pack(op.a)
    b = pack(op.b)
    c = lw.vals[op.c]
    d = [lw.reg("f32") for _ in range(4)]
    lw.emit(tt.MmaOp(ab, d, a, b, c))
    lw.vals[op.result] = d


def _pack_bytes(lw: KernelLowering, w: SSAValue, elems: Sequence[SSAValue]) -> None:
    """``w`` (b32) = the low bytes of four b16 registers, the first in the low bits."""
    for j, e in enumerate(elems):
        x = lw.reg("b32")
        lw.emit(tt.CvtOp("u32.u16", x, [e]))
        lw.emit(tt.AndOp("b32", x, x, lw.imm(0xFF)))
        if j == 0:
            lw.emit(tt.MovOp("b32", w, x))
            continue
        lw.emit(tt.ShlOp("b32", x, x, lw.imm(8 * j)))
        lw.emit(tt.OrOp("b32", w, w, x))


# --------------------------------------------------------------------------- arith


@lowers(arith.ConstantOp)
def _constant(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, arith.ConstantOp)
    v = op.value
    t = op.result.type
    if isinstance(t, VectorType):
        assert isinstance(v, DenseIntOrFPElementsAttr)
        values = v.get_values()
        n = t.get_shape()[0]
        values = list(values) * n if len(values) == 1 else list(values)
        lw.vals[op.result] = [_scalar_const(lw, t.element_type, x) for x in values]
        return
    assert isinstance(v, IntegerAttr | FloatAttr)
    lw.vals[op.result] = [_scalar_const(lw, t, v.value.data)]


def _scalar_const(lw: KernelLowering, t: Attribute, x: float | int) -> SSAValue:
    cls = reg_class_of(t)
    r = lw.reg(cls)
    if cls == "pred":
        lw.emit(tt.SetpOp("eq.u32" if x else "ne.u32", r, lw.imm(0), lw.imm(0)))
    elif cls in ("f32", "f64"):
        lw.emit(tt.MovOp(cls, r, lw.imm(float(x), f32 if cls == "f32" else f64)))
    elif isinstance(t, BFloat16Type | Float16Type):
        np_t = ml_dtypes.bfloat16 if isinstance(t, BFloat16Type) else np.float16
        bits = int(np.array(x, dtype=np_t).view(np.uint16))
        lw.emit(tt.MovOp("b16", r, lw.imm(bits, IntegerType(16))))
    elif isinstance(t, Float8E4M3FNType | Float8E5M2Type):
        np8 = ml_dtypes.float8_e4m3fn if isinstance(t, Float8E4M3FNType) else ml_dtypes.float8_e5m2
        bits = int(np.array(x, dtype=np.float32).astype(np8).view(np.uint8))
        lw.emit(tt.MovOp("b16", r, lw.imm(bits, IntegerType(16))))
    else:
        bits = TYPE_BITS_OF[cls]
        xi = int(x) & ((1 << bits) - 1)
        lw.emit(tt.MovOp(cls, r, lw.imm(xi, IntegerType(bits))))
    return r


def _binary(lw: KernelLowering, op: Operation, build: Callable[[str, SSAValue, SSAValue, SSAValue], Operation], ty: str) -> None:
    lhs, rhs = op.operands
    d = lw.define(op.results[0])
    lw.emit(build(ty, d, lw.one(lhs), lw.one(rhs)))


_INT_BIN = {
    arith.AddiOp: (tt.AddOp, "s", ""),
    arith.SubiOp: (tt.SubOp, "s", ""),
    arith.MuliOp: (tt.MulOp, "s", "lo."),
    arith.DivSIOp: (tt.DivOp, "s", ""),
    arith.DivUIOp: (tt.DivOp, "u", ""),
    arith.RemSIOp: (tt.RemOp, "s", ""),
    arith.RemUIOp: (tt.RemOp, "u", ""),
    arith.MaxSIOp: (tt.MaxOp, "s", ""),
    arith.MinSIOp: (tt.MinOp, "s", ""),
    arith.MaxUIOp: (tt.MaxOp, "u", ""),
    arith.MinUIOp: (tt.MinOp, "u", ""),
}


@lowers(*_INT_BIN)
def _int_binary(lw: KernelLowering, op: Operation) -> None:
    build, sign, pre = _INT_BIN[type(op)]  # type: ignore[index]
    t = op.results[0].type
    if _is_i1(t):
        raise lw.fail(op, "integer arithmetic on i1 is not lowered")
    _binary(lw, op, build, pre + int_type(t, sign == "s"))


@lowers(arith.AndIOp, arith.OrIOp, arith.XOrIOp)
def _bitwise(lw: KernelLowering, op: Operation) -> None:
    build = {arith.AndIOp: tt.AndOp, arith.OrIOp: tt.OrOp, arith.XOrIOp: tt.XorOp}[type(op)]  # type: ignore[index]
    cls = reg_class_of(op.results[0].type)
    _binary(lw, op, build, "pred" if cls == "pred" else bits_type(cls))


@lowers(arith.ShLIOp, arith.ShRSIOp, arith.ShRUIOp)
def _shift(lw: KernelLowering, op: Operation) -> None:
    t = op.results[0].type
    cls = reg_class_of(t)
    amount = lw.one(op.operands[1])
    if cls == "b64":
        amount = lw.u32_of(amount)
    elif cls == "b16":
        a32 = lw.reg("b32")
        lw.emit(tt.CvtOp("u32.u16", a32, [amount]))
        amount = a32
    d = lw.define(op.results[0])
    a = lw.one(op.operands[0])
    if isinstance(op, arith.ShLIOp):
        lw.emit(tt.ShlOp(bits_type(cls), d, a, amount))
    else:
        lw.emit(tt.ShrOp(int_type(t, isinstance(op, arith.ShRSIOp)), d, a, amount))


_FLOAT_BIN = {
    arith.AddfOp: (tt.AddOp, "rn."),
    arith.SubfOp: (tt.SubOp, "rn."),
    arith.MulfOp: (tt.MulOp, "rn."),
    arith.DivfOp: (tt.DivOp, "rn."),
    arith.MaxnumfOp: (tt.MaxOp, ""),
    arith.MinnumfOp: (tt.MinOp, ""),
}


@lowers(*_FLOAT_BIN)
def _float_binary(lw: KernelLowering, op: Operation) -> None:
    build, pre = _FLOAT_BIN[type(op)]  # type: ignore[index]
    _binary(lw, op, build, pre + float_type(op.results[0].type))


@lowers(arith.MaximumfOp, arith.MinimumfOp)
def _float_minmax_op(lw: KernelLowering, op: Operation) -> None:
    cls = float_type(op.results[0].type)
    d = lw.define(op.results[0])
    kind = "max" if isinstance(op, arith.MaximumfOp) else "min"
    _float_minmax(lw, kind, cls, d, lw.one(op.operands[0]), lw.one(op.operands[1]))


@lowers(arith.NegfOp)
def _negf(lw: KernelLowering, op: Operation) -> None:
    d = lw.define(op.results[0])
    lw.emit(tt.NegOp(float_type(op.results[0].type), d, lw.one(op.operands[0])))


_CMPI = {
    "eq": ("eq", "s"), "ne": ("ne", "s"), "slt": ("lt", "s"), "sle": ("le", "s"),
    "sgt": ("gt", "s"), "sge": ("ge", "s"), "ult": ("lt", "u"), "ule": ("le", "u"),
    "ugt": ("gt", "u"), "uge": ("ge", "u"),
}
_CMPF = {
    "oeq": "eq", "ogt": "gt", "oge": "ge", "olt": "lt", "ole": "le", "one": "ne", "ord": "num",
    "ueq": "equ", "ugt": "gtu", "uge": "geu", "ult": "ltu", "ule": "leu", "une": "neu",
    "uno": "nan",
}


@lowers(arith.CmpiOp)
def _cmpi(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, arith.CmpiOp)
    pred = arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]
    t = op.lhs.type
    d = lw.define(op.result)
    a, b = lw.one(op.lhs), lw.one(op.rhs)
    if _is_i1(t):
        if pred not in ("eq", "ne"):
            raise lw.fail(op, f"comparison '{pred}' on i1 is not lowered")
        lw.emit(tt.XorOp("pred", d, a, b))
        if pred == "eq":
            lw.emit(tt.NotOp("pred", d, d))
        return
    cmp, sign = _CMPI[pred]
    lw.emit(tt.SetpOp(f"{cmp}.{int_type(t, sign == 's')}", d, a, b))


@lowers(arith.CmpfOp)
def _cmpf(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, arith.CmpfOp)
    pred = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
    d = lw.define(op.result)
    if pred in ("false", "true"):
        lw.emit(tt.SetpOp("eq.u32" if pred == "true" else "ne.u32", d, lw.imm(0), lw.imm(0)))
        return
    ty = float_type(op.lhs.type)
    lw.emit(tt.SetpOp(f"{_CMPF[pred]}.{ty}", d, lw.one(op.lhs), lw.one(op.rhs)))


@lowers(arith.SelectOp)
def _select(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, arith.SelectOp)
    t = op.result.type
    c = lw.one(op.cond)
    if isinstance(t, VectorType):
        outs = []
        cls = reg_class_of(t.element_type)
        for x, y in zip(lw.vals[op.lhs], lw.vals[op.rhs]):
            r = lw.reg(cls)
            lw.emit(tt.SelpOp(bits_type(cls), r, x, y, c))
            outs.append(r)
        lw.vals[op.result] = outs
        return
    cls = reg_class_of(t)
    d = lw.define(op.result)
    a, b = lw.one(op.lhs), lw.one(op.rhs)
    if cls == "pred":
        x = lw.reg("pred")
        lw.emit(tt.AndOp("pred", x, a, c))
        nc = lw.reg("pred")
        lw.emit(tt.NotOp("pred", nc, c))
        y = lw.reg("pred")
        lw.emit(tt.AndOp("pred", y, b, nc))
        lw.emit(tt.OrOp("pred", d, x, y))
    else:
        lw.emit(tt.SelpOp(cls if cls in ("f32", "f64") else bits_type(cls), d, a, b, c))


def _int_of(t: Attribute) -> tuple[int, bool]:
    return (64, False) if isinstance(t, IndexType) else (t.width.data, True)  # type: ignore[attr-defined]


@lowers(arith.IndexCastOp, arith.ExtSIOp, arith.ExtUIOp, arith.TruncIOp)
def _int_cast(lw: KernelLowering, op: Operation) -> None:
    src_t, dst_t = op.operands[0].type, op.results[0].type
    sb, _ = _int_of(src_t)
    db, _ = _int_of(dst_t)
    signed = not isinstance(op, arith.ExtUIOp)
    s = lw.one(op.operands[0])
    d = lw.define(op.results[0])
    if sb == 1:
        one = 1 if not signed else -1
        cls = reg_class_of(dst_t)
        lw.emit(
            tt.SelpOp(
                int_type(dst_t), d, lw.imm(one, IntegerType(TYPE_BITS_OF[cls])),
                lw.imm(0, IntegerType(TYPE_BITS_OF[cls])), s,
            )
        )
        return
    if db == 1:
        t16 = int_type(src_t, False)
        lo = lw.reg(reg_class_of(src_t))
        lw.emit(tt.AndOp(bits_type(reg_class_of(src_t)), lo, s, lw.imm(1, IntegerType(max(16, sb)))))
        lw.emit(tt.SetpOp(f"ne.{t16}", d, lo, lw.imm(0, IntegerType(max(16, sb)))))
        return
    sty = int_type(src_t, signed)
    dty = int_type(dst_t, signed)
    if sty == dty or reg_class_of(src_t) == reg_class_of(dst_t):
        lw.emit(tt.MovOp(bits_type(reg_class_of(dst_t)), d, s))
    else:
        lw.emit(tt.CvtOp(f"{dty}.{sty}", d, [s]))


def _float_name(t: Attribute) -> str:
    if isinstance(t, BFloat16Type):
        return "bf16"
    if isinstance(t, Float16Type):
        return "f16"
    if isinstance(t, Float8E4M3FNType):
        return "e4m3"
    if isinstance(t, Float8E5M2Type):
        return "e5m2"
    return float_type(t)


FP8_OVERFLOW: dict[str, tuple[int, int, int]] = {
    # name: (f32 bits of the smallest magnitude that overflows, exclusive unless Inf,
    #        code of an overflowed magnitude, code of NaN)
    "e4m3": (0x43E80000, 0x7F, 0x7F),  # |x| > 464 (and Inf, NaN) -> NaN; 464 ties to 448
    "e5m2": (0x47700000, 0x7C, 0x7E),  # |x| >= 61440 -> Inf (the tie goes to the even code)
}
"""Overflow rule of ``cast_array`` for fp8, applied around PTX's saturating ``cvt``."""


def _fp8_from_f32(lw: KernelLowering, d: SSAValue, x: SSAValue, fmt: str) -> None:
    """``d`` (b16, code in the low byte) = ``x`` (f32) rounded to fp8 like ``cast_array``.

    ``cvt.rn.satfinite.{e4m3,e5m2}x2.f32`` rounds to nearest-even but clamps overflow to
    the largest finite value and leaves NaN unspecified; the overflow rule (e4m3fn: NaN,
    e5m2: Inf) and NaN (sign kept) are decided on the f32 bits. Both bytes of the cvt get
    ``x``, so the result does not depend on which half is which.
    """
    threshold, over_code, nan_code = FP8_OVERFLOW[fmt]
    code = lw.reg("b16")
    lw.emit(tt.CvtOp(f"rn.satfinite.{fmt}x2.f32", code, [x, x]))
    bits = lw.reg("b32")
    lw.emit(tt.MovOp("b32", bits, x))
    mag = lw.reg("b32")
    lw.emit(tt.AndOp("b32", mag, bits, lw.imm(0x7FFFFFFF)))
    sgn32 = lw.reg("b32")
    lw.emit(tt.ShrOp("u32", sgn32, bits, lw.imm(24)))
    lw.emit(tt.AndOp("b32", sgn32, sgn32, lw.imm(0x80)))
    sgn = lw.reg("b16")
    lw.emit(tt.CvtOp("u16.u32", sgn, [sgn32]))
    i16 = IntegerType(16)
    over = lw.reg("pred")
    if fmt == "e4m3":
        lw.emit(tt.SetpOp("gt.u32", over, mag, lw.imm(threshold)))
    else:
        lw.emit(tt.SetpOp("ge.u32", over, mag, lw.imm(threshold)))
    special = lw.reg("b16")
    lw.emit(tt.OrOp("b16", special, sgn, lw.imm(over_code, i16)))
    if nan_code != over_code:
        isnan = lw.reg("pred")
        lw.emit(tt.SetpOp("gt.u32", isnan, mag, lw.imm(0x7F800000)))
        nan = lw.reg("b16")
        lw.emit(tt.OrOp("b16", nan, sgn, lw.imm(nan_code, i16)))
        lw.emit(tt.SelpOp("b16", special, nan, special, isnan))
    lw.emit(tt.SelpOp("b16", d, special, code, over))


def _f16_from_fp8(lw: KernelLowering, code: SSAValue, fmt: str) -> SSAValue:
    """The f16 (b16) value of the fp8 code in the low byte of ``code``: exact."""
    i16 = IntegerType(16)
    lo = lw.reg("b16")
    lw.emit(tt.AndOp("b16", lo, code, lw.imm(0xFF, i16)))
    hi = lw.reg("b16")
    lw.emit(tt.ShlOp("b16", hi, lo, lw.imm(8)))
    both = lw.reg("b16")
    lw.emit(tt.OrOp("b16", both, lo, hi))
    pair = lw.reg("b32")
    lw.emit(tt.CvtOp(f"rn.f16x2.{fmt}x2", pair, [both]))
    h0, h1 = lw.reg("b16"), lw.reg("b16")
    lw.emit(tt.UnpackOp("b32", [h0, h1], pair))
    # The cvt returns NaN without its sign; a value's sign is the code's sign bit.
    sign = lw.reg("b16")
    lw.emit(tt.AndOp("b16", sign, lo, lw.imm(0x80, i16)))
    lw.emit(tt.ShlOp("b16", sign, sign, lw.imm(8)))
    lw.emit(tt.OrOp("b16", h0, h0, sign))
    return h0


def _f32_from_half(lw: KernelLowering, d: SSAValue, s: SSAValue, sty: str) -> None:
    """``d`` (f32) = ``s`` (f16 or bf16), exact, with the sign of a NaN kept (the ``cvt``
    returns the canonical NaN; ORing in the sign bit changes nothing else)."""
    lw.emit(tt.CvtOp(f"f32.{sty}", d, [s]))
    half = lw.reg("b16")
    lw.emit(tt.MovOp("b16", half, s))
    wide = lw.reg("b32")
    lw.emit(tt.CvtOp("u32.u16", wide, [half]))
    lw.emit(tt.AndOp("b32", wide, wide, lw.imm(0x8000)))
    lw.emit(tt.ShlOp("b32", wide, wide, lw.imm(16)))
    bits = lw.reg("b32")
    lw.emit(tt.MovOp("b32", bits, d))
    lw.emit(tt.OrOp("b32", bits, bits, wide))
    lw.emit(tt.MovOp("b32", d, bits))


def _bf16_from_f32_exact(lw: KernelLowering, d: SSAValue, f: SSAValue) -> None:
    """``d`` (bf16) = ``f`` (f32 holding a bf16 value), with the sign of a NaN kept."""
    lw.emit(tt.CvtOp("rn.bf16.f32", d, [f]))
    bits = lw.reg("b32")
    lw.emit(tt.MovOp("b32", bits, f))
    lw.emit(tt.ShrOp("u32", bits, bits, lw.imm(16)))
    lw.emit(tt.AndOp("b32", bits, bits, lw.imm(0x8000)))
    sign = lw.reg("b16")
    lw.emit(tt.CvtOp("u16.u32", sign, [bits]))
    half = lw.reg("b16")
    lw.emit(tt.MovOp("b16", half, d))
    lw.emit(tt.OrOp("b16", half, half, sign))
    lw.emit(tt.MovOp("b16", d, half))


def _fp8_cast(lw: KernelLowering, op: Operation, s: SSAValue, d: SSAValue, sty: str, dty: str) -> None:
    """Casts to and from fp8 (e4m3 / e5m2), with ``cast_array``'s rounding and overflow."""
    if sty in ("e4m3", "e5m2"):
        h = _f16_from_fp8(lw, s, sty)
        if dty == "f16":
            lw.emit(tt.MovOp("b16", d, h))
            return
        if dty in ("e4m3", "e5m2"):
            f = lw.reg("f32")
            _f32_from_half(lw, f, h, "f16")
            _fp8_from_f32(lw, d, f, dty)
            return
        f = d if dty == "f32" else lw.reg("f32")
        _f32_from_half(lw, f, h, "f16")
        if dty == "f64":
            lw.emit(tt.CvtOp("f64.f32", d, [f]))
        elif dty == "bf16":
            _bf16_from_f32_exact(lw, d, f)  # exact: fp8 values are bf16 values
        return
    if sty == "f64":
        raise lw.fail(op, f"f64 to {dty} is not lowered (it would round twice); cast to f32 first")
    x = s
    if sty in ("f16", "bf16"):
        x = lw.reg("f32")
        _f32_from_half(lw, x, s, sty)
    _fp8_from_f32(lw, d, x, dty)


@lowers(arith.ExtFOp, arith.TruncFOp)
def _float_cast(lw: KernelLowering, op: Operation) -> None:
    src_t, dst_t = op.operands[0].type, op.results[0].type
    s = lw.one(op.operands[0])
    d = lw.define(op.results[0])
    sty, dty = _float_name(src_t), _float_name(dst_t)
    if {sty, dty} & {"e4m3", "e5m2"}:
        _fp8_cast(lw, op, s, d, sty, dty)
    elif isinstance(op, arith.ExtFOp):
        if sty in ("bf16", "f16") and dty == "f64":
            mid = lw.reg("f32")
            _f32_from_half(lw, mid, s, sty)
            lw.emit(tt.CvtOp("f64.f32", d, [mid]))
        elif sty in ("bf16", "f16") and dty == "f32":
            _f32_from_half(lw, d, s, sty)
        else:
            lw.emit(tt.CvtOp(f"{dty}.{sty}", d, [s]))
    else:
        lw.emit(tt.CvtOp(f"rn.{dty}.{sty}", d, [s]))
        if sty in ("f32", "f64") and dty in ("f32", "f16", "bf16"):
            _keep_nan_sign(lw, d, s, sty, dty)


_WIDTH = {"f64": 64, "f32": 32, "f16": 16, "bf16": 16}


def _keep_nan_sign(lw: KernelLowering, d: SSAValue, s: SSAValue, sty: str, dty: str) -> None:
    """After a narrowing ``cvt`` (which returns the canonical NaN): OR the source's sign
    bit into ``d``. Every other result already has the source's sign, so only NaN changes."""
    sw, dw = _WIDTH[sty], _WIDTH[dty]
    src = lw.reg(f"b{sw}")
    lw.emit(tt.MovOp(f"b{sw}", src, s))
    lw.emit(tt.ShrOp(f"u{sw}", src, src, lw.imm(sw - dw)))
    narrow = lw.reg(f"b{dw}")
    lw.emit(tt.CvtOp(f"u{dw}.u{sw}", narrow, [src]))
    sign_bit = 1 << (dw - 1)
    lw.emit(tt.AndOp(f"b{dw}", narrow, narrow, lw.imm(sign_bit, IntegerType(dw))))
    out = lw.reg(f"b{dw}")
    lw.emit(tt.MovOp(f"b{dw}", out, d))
    lw.emit(tt.OrOp(f"b{dw}", out, out, narrow))
    lw.emit(tt.MovOp(f"b{dw}", d, out))


@lowers(arith.SIToFPOp, arith.UIToFPOp)
def _int_to_float(lw: KernelLowering, op: Operation) -> None:
    src_t, dst_t = op.operands[0].type, op.results[0].type
    signed = isinstance(op, arith.SIToFPOp)
    s = lw.one(op.operands[0])
    d = lw.define(op.results[0])
    if _is_i1(src_t):
        one = lw.reg("b32")
        lw.emit(tt.SelpOp("u32", one, lw.imm(1), lw.imm(0), s))
        s, src_t, signed = one, i32, False
    lw.emit(tt.CvtOp(f"rn.{_float_name(dst_t)}.{int_type(src_t, signed)}", d, [s]))


@lowers(arith.FPToSIOp, arith.FPToUIOp)
def _float_to_int(lw: KernelLowering, op: Operation) -> None:
    src_t, dst_t = op.operands[0].type, op.results[0].type
    if _is_i1(dst_t):
        raise lw.fail(op, "float to i1 conversion is not lowered")
    signed = isinstance(op, arith.FPToSIOp)
    d = lw.define(op.results[0])
    lw.emit(tt.CvtOp(f"rzi.{int_type(dst_t, signed)}.{_float_name(src_t)}", d, [lw.one(op.operands[0])]))


@lowers(arith.BitcastOp)
def _bitcast(lw: KernelLowering, op: Operation) -> None:
    d = lw.define(op.results[0])
    cls = reg_class_of(op.results[0].type)
    lw.emit(tt.MovOp(bits_type(cls), d, lw.one(op.operands[0])))


# --------------------------------------------------------------------------- math


def _f32_only(lw: KernelLowering, op: Operation) -> None:
    if not isinstance(op.results[0].type, Float32Type):
        raise lw.fail(op, f"only f32 is lowered, got {op.results[0].type}")


def _exp2_f32(lw: KernelLowering, x: SSAValue) -> SSAValue:
    r = lw.reg("f32")
    lw.emit(tt.Ex2Op("approx.f32", r, x))
    return r


def _exp_f32(lw: KernelLowering, x: SSAValue) -> SSAValue:
    t = lw.reg("f32")
    lw.emit(tt.MulOp("rn.f32", t, x, lw.imm(LOG2E, f32)))
    return _exp2_f32(lw, t)


@lowers(mathd.ExpOp, mathd.Exp2Op, mathd.LogOp, mathd.Log2Op, mathd.SinOp, mathd.CosOp)
def _transcendental(lw: KernelLowering, op: Operation) -> None:
    _f32_only(lw, op)
    x = lw.one(op.operands[0])
    d = lw.define(op.results[0])
    if isinstance(op, mathd.ExpOp):
        lw.emit(tt.MovOp("f32", d, _exp_f32(lw, x)))
    elif isinstance(op, mathd.Exp2Op):
        lw.emit(tt.Ex2Op("approx.f32", d, x))
    elif isinstance(op, mathd.LogOp):
        t = lw.reg("f32")
        lw.emit(tt.Lg2Op("approx.f32", t, x))
        lw.emit(tt.MulOp("rn.f32", d, t, lw.imm(LN2, f32)))
    elif isinstance(op, mathd.Log2Op):
        lw.emit(tt.Lg2Op("approx.f32", d, x))
    elif isinstance(op, mathd.SinOp):
        lw.emit(tt.SinOp("approx.f32", d, x))
    else:
        lw.emit(tt.CosOp("approx.f32", d, x))


@lowers(mathd.TanhOp)
def _tanh(lw: KernelLowering, op: Operation) -> None:
    """tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|); an odd Taylor polynomial for |x| < 0.3."""
    _f32_only(lw, op)
    x = lw.one(op.operands[0])
    d = lw.define(op.results[0])
    ax = lw.reg("f32")
    lw.emit(tt.AbsOp("f32", ax, x))
    m2 = lw.reg("f32")
    lw.emit(tt.MulOp("rn.f32", m2, ax, lw.imm(-2.0 * LOG2E, f32)))
    e = _exp2_f32(lw, m2)
    num = lw.reg("f32")
    lw.emit(tt.SubOp("rn.f32", num, lw.imm(1.0, f32), e))
    den = lw.reg("f32")
    lw.emit(tt.AddOp("rn.f32", den, lw.imm(1.0, f32), e))
    big = lw.reg("f32")
    lw.emit(tt.DivOp("rn.f32", big, num, den))
    big_s = lw.reg("f32")
    lw.emit(tt.CopysignOp("f32", big_s, x, big))
    x2 = lw.reg("f32")
    lw.emit(tt.MulOp("rn.f32", x2, x, x))
    poly = lw.reg("f32")
    coeffs = [62.0 / 2835.0, -17.0 / 315.0, 2.0 / 15.0, -1.0 / 3.0]
    lw.emit(tt.MovOp("f32", poly, lw.imm(coeffs[0], f32)))
    for c in coeffs[1:]:
        lw.emit(tt.FmaOp("rn.f32", poly, poly, x2, lw.imm(c, f32)))
    px = lw.reg("f32")
    lw.emit(tt.MulOp("rn.f32", px, poly, x2))
    small = lw.reg("f32")
    lw.emit(tt.FmaOp("rn.f32", small, px, x, x))
    is_small = lw.reg("pred")
    lw.emit(tt.SetpOp("lt.f32", is_small, ax, lw.imm(0.3, f32)))
    lw.emit(tt.SelpOp("f32", d, small, big_s, is_small))


@lowers(mathd.ErfOp)
def _erf(lw: KernelLowering, op: Operation) -> None:
    """erf via Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7)."""
    _f32_only(lw, op)
    x = lw.one(op.operands[0])
    d = lw.define(op.results[0])
    ax = lw.reg("f32")
    lw.emit(tt.AbsOp("f32", ax, x))
    den = lw.reg("f32")
    lw.emit(tt.FmaOp("rn.f32", den, ax, lw.imm(0.3275911, f32), lw.imm(1.0, f32)))
    t = lw.reg("f32")
    lw.emit(tt.DivOp("rn.f32", t, lw.imm(1.0, f32), den))
    poly = lw.reg("f32")
    lw.emit(tt.MovOp("f32", poly, lw.imm(1.061405429, f32)))
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        lw.emit(tt.FmaOp("rn.f32", poly, poly, t, lw.imm(c, f32)))
    lw.emit(tt.MulOp("rn.f32", poly, poly, t))
    x2 = lw.reg("f32")
    lw.emit(tt.MulOp("rn.f32", x2, ax, ax))
    lw.emit(tt.NegOp("f32", x2, x2))
    e = _exp_f32(lw, x2)
    y = lw.reg("f32")
    lw.emit(tt.MulOp("rn.f32", y, poly, e))
    lw.emit(tt.SubOp("rn.f32", y, lw.imm(1.0, f32), y))
    lw.emit(tt.CopysignOp("f32", d, x, y))


@lowers(mathd.SqrtOp, mathd.RsqrtOp, mathd.AbsFOp)
def _sqrt_abs(lw: KernelLowering, op: Operation) -> None:
    ty = float_type(op.results[0].type)
    x = lw.one(op.operands[0])
    d = lw.define(op.results[0])
    if isinstance(op, mathd.AbsFOp):
        lw.emit(tt.AbsOp(ty, d, x))
    elif isinstance(op, mathd.SqrtOp):
        lw.emit(tt.SqrtOp(f"rn.{ty}", d, x))
    else:
        s = lw.reg(ty)
        lw.emit(tt.SqrtOp(f"rn.{ty}", s, x))
        lw.emit(tt.RcpOp(f"rn.{ty}", d, s))


@lowers(mathd.FmaOp)
def _fma(lw: KernelLowering, op: Operation) -> None:
    ty = float_type(op.results[0].type)
    a, b, c = (lw.one(v) for v in op.operands)
    d = lw.define(op.results[0])
    lw.emit(tt.FmaOp(f"rn.{ty}", d, a, b, c))


@lowers(mathd.PowFOp)
def _powf(lw: KernelLowering, op: Operation) -> None:
    """a**b = exp2(b * log2(a)) for a > 0 (NaN for a < 0, as log2 of a negative is NaN)."""
    _f32_only(lw, op)
    a, b = (lw.one(v) for v in op.operands)
    d = lw.define(op.results[0])
    lg = lw.reg("f32")
    lw.emit(tt.Lg2Op("approx.f32", lg, a))
    t = lw.reg("f32")
    lw.emit(tt.MulOp("rn.f32", t, lg, b))
    lw.emit(tt.Ex2Op("approx.f32", d, t))


# --------------------------------------------------------------------------- vector


@lowers(vector.ExtractOp)
def _vextract(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, vector.ExtractOp)
    if op.dynamic_position:
        raise lw.fail(op, "dynamic positions are not lowered")
    (pos,) = op.static_position.get_values()
    src = lw.vals[op.vector][pos]
    d = lw.define(op.result)
    lw.mov(d, src, op.result.type)


@lowers(vector.InsertOp)
def _vinsert(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, vector.InsertOp)
    if op.dynamic_position:
        raise lw.fail(op, "dynamic positions are not lowered")
    (pos,) = op.static_position.get_values()
    vt = op.result.type
    assert isinstance(vt, VectorType)
    et = vt.element_type
    out = []
    for k, r in enumerate(lw.vals[op.dest]):
        n = lw.reg(reg_class_of(et))
        lw.mov(n, lw.one(op.source) if k == pos else r, et)
        out.append(n)
    lw.vals[op.result] = out


@lowers(vector.BroadcastOp)
def _vbroadcast(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, vector.BroadcastOp)
    vt = op.vector.type
    assert isinstance(vt, VectorType)
    s = lw.one(op.source)
    out = []
    for _ in range(vt.get_shape()[0]):
        n = lw.reg(reg_class_of(vt.element_type))
        lw.mov(n, s, vt.element_type)
        out.append(n)
    lw.vals[op.vector] = out


# --------------------------------------------------------------------------- scf


def _copy_in(lw: KernelLowering, dsts: Sequence[list[SSAValue]], srcs: Sequence[SSAValue], types: Sequence[Attribute]) -> None:
    """Parallel copy ``dsts[k] := srcs[k]`` (through temporaries)."""
    temps: list[list[SSAValue]] = []
    for s, t in zip(srcs, types):
        et = t.element_type if isinstance(t, VectorType) else t
        row = []
        for r in lw.vals[s]:
            tmp = lw.reg(reg_class_of(et))
            lw.mov(tmp, r, et)
            row.append(tmp)
        temps.append(row)
    for d, row, t in zip(dsts, temps, types):
        et = t.element_type if isinstance(t, VectorType) else t
        for x, y in zip(d, row):
            lw.mov(x, y, et)


def _regs_for(lw: KernelLowering, t: Attribute) -> list[SSAValue]:
    if isinstance(t, VectorType):
        return [lw.reg(reg_class_of(t.element_type)) for _ in range(t.get_shape()[0])]
    return [lw.reg(reg_class_of(t))]


@lowers(scf.ForOp)
def _for(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, scf.ForOp)
    body = op.body.block
    iv = lw.reg(reg_class_of(op.lb.type))
    lw.mov(iv, lw.one(op.lb), op.lb.type)
    carried = [_regs_for(lw, a.type) for a in body.args[1:]]
    _copy_in(lw, carried, list(op.iter_args), [a.type for a in body.args[1:]])
    lw.vals[body.args[0]] = [iv]
    for a, regs in zip(body.args[1:], carried):
        lw.vals[a] = regs
    head, end = lw.label("for"), lw.label("endfor")
    ub = lw.one(op.ub)
    step = lw.one(op.step)
    lw.emit(tt.LabelOp(head))
    done = lw.reg("pred")
    ity = int_type(op.lb.type)
    lw.emit(tt.SetpOp(f"ge.{ity}", done, iv, ub))
    lw.emit(tt.BraOp(end, done))
    for inner in body.ops:
        if isinstance(inner, scf.YieldOp):
            _copy_in(lw, carried, list(inner.operands), [a.type for a in body.args[1:]])
        else:
            lw.lower_op(inner)
    lw.emit(tt.AddOp(ity, iv, iv, step))
    lw.emit(tt.BraOp(head))
    lw.emit(tt.LabelOp(end))
    for r, regs in zip(op.results, carried):
        lw.vals[r] = regs


@lowers(scf.IfOp)
def _if(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, scf.IfOp)
    outs = [_regs_for(lw, r.type) for r in op.results]
    types = [r.type for r in op.results]
    else_l, end = lw.label("else"), lw.label("endif")
    lw.emit(tt.BraOp(else_l, lw.one(op.cond), negate=True))

    def branch(region) -> None:
        if not region.blocks:
            return
        for inner in region.block.ops:
            if isinstance(inner, scf.YieldOp):
                _copy_in(lw, outs, list(inner.operands), types)
            else:
                lw.lower_op(inner)

    branch(op.true_region)
    lw.emit(tt.BraOp(end))
    lw.emit(tt.LabelOp(else_l))
    branch(op.false_region)
    lw.emit(tt.LabelOp(end))
    for r, regs in zip(op.results, outs):
        lw.vals[r] = regs


@lowers(scf.WhileOp)
def _while(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, scf.WhileOp)
    before, after = op.before_region.block, op.after_region.block
    bregs = [_regs_for(lw, a.type) for a in before.args]
    btypes = [a.type for a in before.args]
    _copy_in(lw, bregs, list(op.arguments), btypes)
    for a, regs in zip(before.args, bregs):
        lw.vals[a] = regs
    aregs = [_regs_for(lw, a.type) for a in after.args]
    atypes = [a.type for a in after.args]
    for a, regs in zip(after.args, aregs):
        lw.vals[a] = regs
    head, end = lw.label("while"), lw.label("endwhile")
    lw.emit(tt.LabelOp(head))
    for inner in before.ops:
        if isinstance(inner, scf.ConditionOp):
            _copy_in(lw, aregs, list(inner.args), atypes)
            lw.emit(tt.BraOp(end, lw.one(inner.condition), negate=True))
        else:
            lw.lower_op(inner)
    for inner in after.ops:
        if isinstance(inner, scf.YieldOp):
            _copy_in(lw, bregs, list(inner.operands), btypes)
        else:
            lw.lower_op(inner)
    lw.emit(tt.BraOp(head))
    lw.emit(tt.LabelOp(end))
    for r, regs in zip(op.results, aregs):
        lw.vals[r] = regs


# --------------------------------------------------------------------------- the pass


def lower_kernel(kernel: tile.KernelOp) -> tt.FuncOp:
    """The ``ttarget.func`` for one ``ttile.kernel``."""
    return KernelLowering(kernel).run()


@dataclass(frozen=True)
class LowerTileToTargetPass(ModulePass):
    """Replaces every ``ttile.kernel`` by a ``ttarget.func``, every ``ttile.launch``
    by a ``ttarget.launch`` and every host collective by its ``ttarget`` op."""

    name = "lower-tile-to-target"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        kernels = [k for k in op.walk() if isinstance(k, tile.KernelOp)]
        launches = [launch for launch in op.walk() if isinstance(launch, tile.LaunchOp)]
        for launch in launches:
            Rewriter.replace_op(
                launch,
                tt.LaunchOp(launch.callee.root_reference.data, list(launch.args), launch.grid_value()),
            )
        for k in kernels:
            Rewriter.replace_op(k, lower_kernel(k))
        for c in [c for c in op.walk() if isinstance(c, tile.HOST_COLLECTIVE_OPS)]:
            Rewriter.replace_op(c, tile_collectives.to_target(c))
