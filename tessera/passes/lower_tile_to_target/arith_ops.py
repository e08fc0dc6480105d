"""Lowerings of the ``arith`` dialect except float conversions: constants, integer and
float arithmetic, bitwise ops and shifts, comparisons, ``select``, integer casts and
bitcasts."""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    BFloat16Type,
    DenseIntOrFPElementsAttr,
    Float8E4M3FNType,
    Float8E5M2Type,
    Float16Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    VectorType,
    f32,
    f64,
)
from xdsl.ir import Attribute, Operation, SSAValue

from tessera.ir import target as tt
from tessera.passes.lower_tile_to_target.kernel import TARGET_LOWERINGS, KernelLowering
from tessera.passes.lower_tile_to_target.types import (
    TYPE_BITS_OF,
    bits_type,
    float_type,
    int_type,
    is_i1,
    reg_class_of,
)


@TARGET_LOWERINGS.register(arith.ConstantOp)
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


@TARGET_LOWERINGS.register(*_INT_BIN)
def _int_binary(lw: KernelLowering, op: Operation) -> None:
    build, sign, pre = _INT_BIN[type(op)]  # type: ignore[index]
    t = op.results[0].type
    if is_i1(t):
        raise lw.fail(op, "integer arithmetic on i1 is not lowered")
    _binary(lw, op, build, pre + int_type(t, sign == "s"))


@TARGET_LOWERINGS.register(arith.AndIOp, arith.OrIOp, arith.XOrIOp)
def _bitwise(lw: KernelLowering, op: Operation) -> None:
    build = {arith.AndIOp: tt.AndOp, arith.OrIOp: tt.OrOp, arith.XOrIOp: tt.XorOp}[type(op)]  # type: ignore[index]
    cls = reg_class_of(op.results[0].type)
    _binary(lw, op, build, "pred" if cls == "pred" else bits_type(cls))


@TARGET_LOWERINGS.register(arith.ShLIOp, arith.ShRSIOp, arith.ShRUIOp)
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


@TARGET_LOWERINGS.register(*_FLOAT_BIN)
def _float_binary(lw: KernelLowering, op: Operation) -> None:
    build, pre = _FLOAT_BIN[type(op)]  # type: ignore[index]
    _binary(lw, op, build, pre + float_type(op.results[0].type))


def float_minmax(lw: KernelLowering, kind: str, cls: str, out: SSAValue, a: SSAValue, b: SSAValue) -> None:
    """NaN-propagating min/max (``arith.maximumf`` semantics)."""
    op = tt.MaxOp if kind == "max" else tt.MinOp
    if cls == "f32":
        lw.emit(op("NaN.f32", out, a, b))
        return
    lw.emit(op("f64", out, a, b))
    p = lw.reg("pred")
    lw.emit(tt.SetpOp("nan.f64", p, a, b))
    lw.emit(tt.SelpOp("f64", out, lw.imm(float("nan"), f64), out, p))


@TARGET_LOWERINGS.register(arith.MaximumfOp, arith.MinimumfOp)
def _float_minmax_op(lw: KernelLowering, op: Operation) -> None:
    cls = float_type(op.results[0].type)
    d = lw.define(op.results[0])
    kind = "max" if isinstance(op, arith.MaximumfOp) else "min"
    float_minmax(lw, kind, cls, d, lw.one(op.operands[0]), lw.one(op.operands[1]))


@TARGET_LOWERINGS.register(arith.NegfOp)
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


@TARGET_LOWERINGS.register(arith.CmpiOp)
def _cmpi(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, arith.CmpiOp)
    pred = arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]
    t = op.lhs.type
    d = lw.define(op.result)
    a, b = lw.one(op.lhs), lw.one(op.rhs)
    if is_i1(t):
        if pred not in ("eq", "ne"):
            raise lw.fail(op, f"comparison '{pred}' on i1 is not lowered")
        lw.emit(tt.XorOp("pred", d, a, b))
        if pred == "eq":
            lw.emit(tt.NotOp("pred", d, d))
        return
    cmp, sign = _CMPI[pred]
    lw.emit(tt.SetpOp(f"{cmp}.{int_type(t, sign == 's')}", d, a, b))


@TARGET_LOWERINGS.register(arith.CmpfOp)
def _cmpf(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, arith.CmpfOp)
    pred = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
    d = lw.define(op.result)
    if pred in ("false", "true"):
        lw.emit(tt.SetpOp("eq.u32" if pred == "true" else "ne.u32", d, lw.imm(0), lw.imm(0)))
        return
    ty = float_type(op.lhs.type)
    lw.emit(tt.SetpOp(f"{_CMPF[pred]}.{ty}", d, lw.one(op.lhs), lw.one(op.rhs)))


@TARGET_LOWERINGS.register(arith.SelectOp)
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


@TARGET_LOWERINGS.register(arith.IndexCastOp, arith.ExtSIOp, arith.ExtUIOp, arith.TruncIOp)
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
    if sb == 8 and not signed and db > 8:
        # an i8 register holds the sign-extended value: zero-extend its low byte
        wide = lw.reg(reg_class_of(dst_t))
        lw.emit(tt.CvtOp(f"{int_type(dst_t, False)}.u16", wide, [s]))
        lw.emit(tt.AndOp(bits_type(reg_class_of(dst_t)), d, wide,
                         lw.imm(0xFF, IntegerType(max(16, db)))))
        return
    sty = int_type(src_t, signed)
    dty = int_type(dst_t, signed)
    if sty == dty or reg_class_of(src_t) == reg_class_of(dst_t):
        lw.emit(tt.MovOp(bits_type(reg_class_of(dst_t)), d, s))
    else:
        lw.emit(tt.CvtOp(f"{dty}.{sty}", d, [s]))


@TARGET_LOWERINGS.register(arith.BitcastOp)
def _bitcast(lw: KernelLowering, op: Operation) -> None:
    d = lw.define(op.results[0])
    cls = reg_class_of(op.results[0].type)
    lw.emit(tt.MovOp(bits_type(cls), d, lw.one(op.operands[0])))
