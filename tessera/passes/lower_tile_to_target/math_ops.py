"""Lowerings of the ``math`` dialect: ``ex2`` / ``lg2`` / ``sin`` / ``cos`` approximations
in f32, tanh and erf as polynomials, square roots, ``fma`` and ``powf``."""

from __future__ import annotations

from xdsl.dialects import math as mathd
from xdsl.dialects.builtin import Float32Type, f32
from xdsl.ir import Operation, SSAValue

from tessera.ir import target as tt
from tessera.passes.lower_tile_to_target.kernel import TARGET_LOWERINGS, KernelLowering
from tessera.passes.lower_tile_to_target.types import float_type

LOG2E = 1.4426950408889634


LN2 = 0.6931471805599453


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


@TARGET_LOWERINGS.register(mathd.ExpOp, mathd.Exp2Op, mathd.LogOp, mathd.Log2Op, mathd.SinOp, mathd.CosOp)
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


@TARGET_LOWERINGS.register(mathd.TanhOp)
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


@TARGET_LOWERINGS.register(mathd.ErfOp)
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


@TARGET_LOWERINGS.register(mathd.SqrtOp, mathd.RsqrtOp, mathd.AbsFOp)
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


@TARGET_LOWERINGS.register(mathd.FmaOp)
def _fma(lw: KernelLowering, op: Operation) -> None:
    ty = float_type(op.results[0].type)
    a, b, c = (lw.one(v) for v in op.operands)
    d = lw.define(op.results[0])
    lw.emit(tt.FmaOp(f"rn.{ty}", d, a, b, c))


@TARGET_LOWERINGS.register(mathd.PowFOp)
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
