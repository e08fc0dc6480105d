"""Lowerings of the ``math`` dialect: ``ex2`` / ``lg2`` approximations in f32, sine and
cosine with an argument reduction (f32 and f64), tanh and erf as polynomials, square
roots, ``fma`` and ``powf``."""

from __future__ import annotations

import math as _math

from xdsl.dialects import math as mathd
from xdsl.dialects.arith import FastMathFlag
from xdsl.dialects.builtin import Float32Type, f32, f64
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


EXP_LN2_HI = 0.693145751953125
"""ln 2 to 16 bits (``0x3f317200``): ``n * EXP_LN2_HI`` is exact for ``|n| < 2**9``."""
EXP_LN2_LO = 1.4286068203094173e-06
"""``ln 2 - EXP_LN2_HI`` rounded to f32."""
LOG_LN2_HI = 0.693138122558594
"""ln 2 to 16 bits (``0x3f317180``), the high part of ``e ln 2`` in ``log``."""
LOG_LN2_LO = 9.05800061445916e-06
"""``ln 2 - LOG_LN2_HI`` rounded to f32 (``0x3717f7d1``)."""
LOG_POLY = (0.6666666269302368, 0.40000972151756287, 0.2849878668785095, 0.24279078841209412)
"""``Lg1..Lg4`` of the classic ``logf`` kernel (fdlibm): ``log1p(f) = f - h + s (h + R)``
with ``s = f / (2 + f)``, ``h = f^2 / 2`` and ``R = z (Lg1 + w Lg3) + w (Lg2 + w Lg4)``,
``z = s^2``, ``w = z^2``; under 1 ulp for ``f`` in ``[sqrt(2)/2 - 1, sqrt(2) - 1]``."""


def _exp_accurate(lw: KernelLowering, x: SSAValue, d: SSAValue) -> None:
    """``d = e^x`` in f32 to about 2 ulps over the whole range (``ex2.approx`` of
    ``x log2 e`` loses ``|x|`` ulps to the rounding of the product): ``x = n ln 2 + r``
    with ``n = rint(x log2 e)`` and ``r`` from a two-part ``ln 2`` (exact ``fma``s), so
    ``e^x = 2^n 2^(r log2 e)`` with ``|r log2 e| <= 1/2``; ``2^n`` is two exponent-field
    factors (``n`` from -150 to 128 after clamping ``x`` to [-104, 89]), so subnormal
    and overflowing results round once. NaN gives NaN."""

    def reg(kind: str = "f32") -> SSAValue:
        return lw.reg(kind)

    xc, t, n, r, u, p = reg(), reg(), reg(), reg(), reg(), reg()
    lw.emit(tt.MaxOp("f32", xc, x, lw.imm(-104.0, f32)))
    lw.emit(tt.MinOp("f32", xc, xc, lw.imm(89.0, f32)))
    lw.emit(tt.MulOp("rn.f32", t, xc, lw.imm(LOG2E, f32)))
    lw.emit(tt.CvtOp("rni.f32.f32", n, [t]))
    lw.emit(tt.FmaOp("rn.f32", r, n, lw.imm(-EXP_LN2_HI, f32), xc))
    lw.emit(tt.FmaOp("rn.f32", r, n, lw.imm(-EXP_LN2_LO, f32), r))
    lw.emit(tt.MulOp("rn.f32", u, r, lw.imm(LOG2E, f32)))
    lw.emit(tt.Ex2Op("approx.f32", p, u))
    ni, n1, n2 = reg("b32"), reg("b32"), reg("b32")
    lw.emit(tt.CvtOp("rni.s32.f32", ni, [n]))
    lw.emit(tt.ShrOp("s32", n1, ni, lw.imm(1)))
    lw.emit(tt.SubOp("s32", n2, ni, n1))
    y = p
    for half in (n1, n2):
        bits, scale, prod_ = reg("b32"), reg(), reg()
        lw.emit(tt.AddOp("s32", bits, half, lw.imm(127)))
        lw.emit(tt.ShlOp("b32", bits, bits, lw.imm(23)))
        lw.emit(tt.MovOp("b32", scale, bits))
        lw.emit(tt.MulOp("rn.f32", prod_, y, scale))
        y = prod_
    is_nan = reg("pred")
    lw.emit(tt.SetpOp("nan.f32", is_nan, x, x))
    lw.emit(tt.SelpOp("f32", d, x, y, is_nan))


def _log_accurate(lw: KernelLowering, x: SSAValue, d: SSAValue) -> None:
    """``d = ln x`` in f32 to about 1 ulp (``lg2.approx`` has an absolute error, so its
    relative error grows without bound as ``x`` nears 1): ``x = 2^e m`` with ``m`` in
    ``[sqrt(2)/2, sqrt(2))`` from the bits (subnormals scaled by ``2^23`` first), ``ln x
    = e ln 2 + log1p(m - 1)`` by :data:`LOG_POLY`. ``ln 0 = -inf``, ``ln x = NaN`` for
    ``x < 0``, ``ln inf = inf``, NaN gives NaN."""

    def reg(kind: str = "f32") -> SSAValue:
        return lw.reg(kind)

    sub, big = reg("pred"), reg("pred")
    lw.emit(tt.SetpOp("lt.f32", sub, x, lw.imm(2.0 ** -126, f32)))
    scaled, xs = reg(), reg()
    lw.emit(tt.MulOp("rn.f32", scaled, x, lw.imm(2.0 ** 23, f32)))
    lw.emit(tt.SelpOp("f32", xs, scaled, x, sub))
    bits, e, mb = reg("b32"), reg("b32"), reg("b32")
    lw.emit(tt.MovOp("b32", bits, xs))
    lw.emit(tt.ShrOp("u32", e, bits, lw.imm(23)))
    lw.emit(tt.AndOp("b32", e, e, lw.imm(0xFF)))
    lw.emit(tt.AndOp("b32", mb, bits, lw.imm(0x7FFFFF)))
    lw.emit(tt.OrOp("b32", mb, mb, lw.imm(0x3F800000)))
    # m > sqrt(2): halve it (one off the exponent field) and count it in e
    lw.emit(tt.SetpOp("gt.u32", big, mb, lw.imm(0x3FB504F3)))
    halved, adj, eadj = reg("b32"), reg("b32"), reg("b32")
    lw.emit(tt.SubOp("s32", halved, mb, lw.imm(0x00800000)))
    lw.emit(tt.SelpOp("b32", mb, halved, mb, big))
    lw.emit(tt.SelpOp("s32", adj, lw.imm(-126), lw.imm(-127), big))
    lw.emit(tt.SelpOp("s32", eadj, lw.imm(-23), lw.imm(0), sub))
    lw.emit(tt.AddOp("s32", e, e, adj))
    lw.emit(tt.AddOp("s32", e, e, eadj))
    m, f, den, s_, z, w = reg(), reg(), reg(), reg(), reg(), reg()
    lw.emit(tt.MovOp("b32", m, mb))
    lw.emit(tt.SubOp("rn.f32", f, m, lw.imm(1.0, f32)))
    lw.emit(tt.AddOp("rn.f32", den, f, lw.imm(2.0, f32)))
    lw.emit(tt.DivOp("rn.f32", s_, f, den))
    lw.emit(tt.MulOp("rn.f32", z, s_, s_))
    lw.emit(tt.MulOp("rn.f32", w, z, z))
    lg1, lg2, lg3, lg4 = LOG_POLY
    t1, t2, rr = reg(), reg(), reg()
    lw.emit(tt.FmaOp("rn.f32", t1, w, lw.imm(lg4, f32), lw.imm(lg2, f32)))
    lw.emit(tt.MulOp("rn.f32", t1, t1, w))
    lw.emit(tt.FmaOp("rn.f32", t2, w, lw.imm(lg3, f32), lw.imm(lg1, f32)))
    lw.emit(tt.MulOp("rn.f32", t2, t2, z))
    lw.emit(tt.AddOp("rn.f32", rr, t2, t1))
    hfsq, ff, dk, acc = reg(), reg(), reg(), reg()
    lw.emit(tt.MulOp("rn.f32", ff, f, f))
    lw.emit(tt.MulOp("rn.f32", hfsq, ff, lw.imm(0.5, f32)))
    lw.emit(tt.CvtOp("rn.f32.s32", dk, [e]))
    # s (h + R) + e ln2_lo - h + f + e ln2_hi, in that order
    lw.emit(tt.AddOp("rn.f32", acc, hfsq, rr))
    lw.emit(tt.MulOp("rn.f32", acc, acc, s_))
    lw.emit(tt.FmaOp("rn.f32", acc, dk, lw.imm(LOG_LN2_LO, f32), acc))
    lw.emit(tt.SubOp("rn.f32", acc, acc, hfsq))
    lw.emit(tt.AddOp("rn.f32", acc, acc, f))
    lw.emit(tt.FmaOp("rn.f32", acc, dk, lw.imm(LOG_LN2_HI, f32), acc))
    zero, neg, special = reg("pred"), reg("pred"), reg("pred")
    lw.emit(tt.SetpOp("eq.f32", zero, x, lw.imm(0.0, f32)))
    lw.emit(tt.SelpOp("f32", acc, lw.imm(float("-inf"), f32), acc, zero))
    lw.emit(tt.SetpOp("lt.f32", neg, x, lw.imm(0.0, f32)))
    lw.emit(tt.SelpOp("f32", acc, lw.imm(float("nan"), f32), acc, neg))
    # +inf and NaN are their own logarithm
    lw.emit(tt.SetpOp("equ.f32", special, x, lw.imm(float("inf"), f32)))
    lw.emit(tt.SelpOp("f32", d, x, acc, special))


@TARGET_LOWERINGS.register(mathd.ExpOp, mathd.Exp2Op, mathd.LogOp, mathd.Log2Op)
def _transcendental(lw: KernelLowering, op: Operation) -> None:
    """``exp`` and ``log`` to 1-2 ulps (:func:`_exp_accurate`, :func:`_log_accurate`), an
    ``exp`` marked ``fastmath<afn>`` (the kernels' own: softmax, attention) as ``ex2.approx``
    of ``x log2 e``;
    ``exp2`` and ``log2`` as the ``approx`` instructions (what the softmax and attention
    kernels' base-2 arithmetic is written for)."""
    _f32_only(lw, op)
    x = lw.one(op.operands[0])
    d = lw.define(op.results[0])
    if isinstance(op, mathd.ExpOp) and FastMathFlag.APPROX_FUNC in op.fastmath.data:
        lw.emit(tt.MovOp("f32", d, _exp_f32(lw, x)))
    elif isinstance(op, mathd.ExpOp):
        _exp_accurate(lw, x, d)
    elif isinstance(op, mathd.Exp2Op):
        lw.emit(tt.Ex2Op("approx.f32", d, x))
    elif isinstance(op, mathd.LogOp):
        _log_accurate(lw, x, d)
    else:
        lw.emit(tt.Lg2Op("approx.f32", d, x))


TWO_OVER_PI = 0.6366197723675814

PIO2_F32 = (1.5707963705062866, -4.371138828673793e-08, -1.7151245100058819e-15)
"""``pi/2`` as a sum of three f32 numbers (each the f32 rounding of what the previous ones
leave; the rest is 1.1e-23), for the Cody-Waite reduction ``r = x - k pi/2`` in f32 with
``fma``: ``x - k C1`` is exact (both are multiples of 2^-23 and their difference is below
2), the two other products add the low bits."""

PIO2_F64 = (1.5707963267948966, 6.123233995736766e-17, -1.4973849048591698e-33)
"""``pi/2`` as a sum of three f64 numbers (the rest is 5.6e-50), for the reduction in f64."""

SIN_FAST_F32 = 131072.0
"""Above this ``|x|`` (2^17) an f32 argument is reduced in f64 instead of f32: the f32
reduction keeps ``k`` (up to 83,000) and its products exact, the f64 one does for any
``k`` below 2^40."""

SIN_DOMAIN = float(2**40)
"""The largest ``|x|`` the kernels reduce (about 1.1e12 radians); above it sine and
cosine are NaN rather than a wrong number (Payne-Hanek reduction is not implemented)."""

SIN_F32 = (-1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880)
"""``sin r = r + r^3 S(r^2)`` on ``|r| <= pi/4``: the Taylor coefficients of ``S``, lowest
first (truncation 2.5e-9 relative, below half an f32 ulp)."""

COS_F32 = (1.0 / 24, -1.0 / 720, 1.0 / 40320, -1.0 / 3628800)
"""``cos r = 1 - r^2/2 + r^4 C(r^2)`` on ``|r| <= pi/4`` (truncation 1.2e-10)."""

SIN_F64 = tuple((-1.0) ** n / _math.factorial(2 * n + 1) for n in range(1, 9))
"""``S`` in f64: to ``r^17`` (truncation 1.1e-19 relative)."""

COS_F64 = tuple((-1.0) ** n / _math.factorial(2 * n) for n in range(2, 10))
"""``C`` in f64: to ``r^18`` (truncation 3.3e-21)."""


def _reduce_f64(lw: KernelLowering, x: SSAValue, r: SSAValue, q: SSAValue) -> SSAValue:
    """``r = x - k pi/2`` and ``q = k mod 4`` (into existing registers) for the f64 ``x``,
    ``k`` the integer nearest ``x 2/pi``; returns ``k``."""
    j, k, nk, t, m = (lw.reg("f64") for _ in range(5))
    lw.emit(tt.MulOp("rn.f64", j, x, lw.imm(TWO_OVER_PI, f64)))
    lw.emit(tt.CvtOp("rni.f64.f64", k, [j]))
    lw.emit(tt.NegOp("f64", nk, k))
    lw.emit(tt.FmaOp("rn.f64", r, nk, lw.imm(PIO2_F64[0], f64), x))
    for c in PIO2_F64[1:]:
        lw.emit(tt.FmaOp("rn.f64", r, nk, lw.imm(c, f64), r))
    lw.emit(tt.MulOp("rn.f64", t, k, lw.imm(0.25, f64)))
    lw.emit(tt.CvtOp("rmi.f64.f64", t, [t]))
    lw.emit(tt.FmaOp("rn.f64", m, t, lw.imm(-4.0, f64), k))  # k - 4 floor(k/4), exact
    lw.emit(tt.CvtOp("rzi.s32.f64", q, [m]))
    return k


@TARGET_LOWERINGS.register(mathd.SinOp, mathd.CosOp)
def _sin_cos(lw: KernelLowering, op: Operation) -> None:
    """Sine and cosine in f32 or f64 to about 1 ulp for ``|x| <= SIN_DOMAIN``.

    Cody-Waite reduction ``r = x - k pi/2`` with ``k`` the integer nearest ``x 2/pi``
    (``pi/2`` in three parts, :data:`PIO2_F32` / :data:`PIO2_F64`; f32 arguments above
    :data:`SIN_FAST_F32` branch to the reduction in f64), then ``sin r`` or ``cos r`` by
    the quadrant ``k mod 4`` (cosine is sine a quadrant on) from Taylor polynomials on
    ``|r| <= pi/4``. ``k = 0`` keeps ``r = x``; ``sin(+-0) = +-0``; NaN, the
    infinities and ``|x| > SIN_DOMAIN`` give NaN. ``sin.approx`` is not used: it is
    accurate only near ``[-pi, pi]``."""
    ty = float_type(op.results[0].type)
    if ty not in ("f32", "f64"):
        raise lw.fail(op, f"only f32 and f64 are lowered, got {op.results[0].type}")
    fty = f32 if ty == "f32" else f64
    x = lw.one(op.operands[0])
    d = lw.define(op.results[0])
    r, q = lw.reg(ty), lw.reg("b32")
    ax = lw.reg(ty)
    lw.emit(tt.AbsOp(ty, ax, x))
    if ty == "f32":
        j, k, nk = lw.reg("f32"), lw.reg("f32"), lw.reg("f32")
        lw.emit(tt.MulOp("rn.f32", j, x, lw.imm(TWO_OVER_PI, f32)))
        lw.emit(tt.CvtOp("rni.f32.f32", k, [j]))
        lw.emit(tt.NegOp("f32", nk, k))
        lw.emit(tt.FmaOp("rn.f32", r, nk, lw.imm(PIO2_F32[0], f32), x))
        for c in PIO2_F32[1:]:
            lw.emit(tt.FmaOp("rn.f32", r, nk, lw.imm(c, f32), r))
        lw.emit(tt.CvtOp("rzi.s32.f32", q, [k]))
        big = lw.reg("pred")
        lw.emit(tt.SetpOp("gt.f32", big, ax, lw.imm(SIN_FAST_F32, f32)))
        done = lw.label("sincos_reduced")
        lw.emit(tt.BraOp(done, big, negate=True))
        xd, rd = lw.reg("f64"), lw.reg("f64")
        lw.emit(tt.CvtOp("f64.f32", xd, [x]))
        _reduce_f64(lw, xd, rd, q)
        lw.emit(tt.CvtOp("rn.f32.f64", r, [rd]))
        lw.emit(tt.LabelOp(done))
    else:
        k = _reduce_f64(lw, x, r, q)
    k0 = lw.reg("pred")
    lw.emit(tt.SetpOp(f"eq.{ty}", k0, k, lw.imm(0.0, fty)))
    lw.emit(tt.SelpOp(ty, r, x, r, k0))
    if isinstance(op, mathd.CosOp):
        lw.emit(tt.AddOp("s32", q, q, lw.imm(1)))
    r2, rr2 = lw.reg(ty), lw.reg(ty)
    lw.emit(tt.MulOp(f"rn.{ty}", r2, r, r))
    lw.emit(tt.MulOp(f"rn.{ty}", rr2, r2, r))
    sin_c, cos_c = (SIN_F32, COS_F32) if ty == "f32" else (SIN_F64, COS_F64)
    s = lw.reg(ty)
    lw.emit(tt.FmaOp(f"rn.{ty}", s, rr2, _horner(lw, sin_c, r2, ty), r))
    r4, c, c0 = lw.reg(ty), lw.reg(ty), lw.reg(ty)
    lw.emit(tt.MulOp(f"rn.{ty}", r4, r2, r2))
    lw.emit(tt.FmaOp(f"rn.{ty}", c0, r2, lw.imm(-0.5, fty), lw.imm(1.0, fty)))
    lw.emit(tt.FmaOp(f"rn.{ty}", c, r4, _horner(lw, cos_c, r2, ty), c0))
    bit = lw.reg("b32")
    odd, neg = lw.reg("pred"), lw.reg("pred")
    lw.emit(tt.AndOp("b32", bit, q, lw.imm(1)))
    lw.emit(tt.SetpOp("ne.b32", odd, bit, lw.imm(0)))
    lw.emit(tt.AndOp("b32", bit, q, lw.imm(2)))
    lw.emit(tt.SetpOp("ne.b32", neg, bit, lw.imm(0)))
    v, nv = lw.reg(ty), lw.reg(ty)
    lw.emit(tt.SelpOp(ty, v, c, s, odd))
    lw.emit(tt.NegOp(ty, nv, v))
    lw.emit(tt.SelpOp(ty, v, nv, v, neg))
    if isinstance(op, mathd.SinOp):  # sin(+-0) = +-0 (the polynomial's fma gives +0)
        zero = lw.reg("pred")
        lw.emit(tt.SetpOp(f"eq.{ty}", zero, x, lw.imm(0.0, fty)))
        lw.emit(tt.SelpOp(ty, v, x, v, zero))
    out = lw.reg("pred")
    lw.emit(tt.SetpOp(f"gt.{ty}", out, ax, lw.imm(SIN_DOMAIN, fty)))
    lw.emit(tt.SelpOp(ty, d, lw.imm(float("nan"), fty), v, out))


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


ERF_SMALL = (
    0.12837916572679590, -0.37612625824417023, 0.11283585149710876, -0.026853811961114415,
    0.005188327710304322, -0.0008010193680756672, 7.853861105167059e-05,
)
"""``erf(x) = x + x P(x^2)`` for ``|x| < 1``: the coefficients of ``P``, lowest first (a
weighted least-squares fit of ``erf(x)/x - 1`` in relative error, max 1.2e-9 in float64)."""

ERF_LOG2_ERFC = (
    0.0004435064475827908, -1.6305149983840759, -0.9116347314629556, -0.15872712237610184,
    0.03807591349207425, -0.006854217111986673, 0.0008588314468936514,
    -6.624507019653558e-05, 2.3544262055530396e-06,
)
"""``erf(x) = 1 - 2^Q(x)`` for ``1 <= x <= ERF_ONE``: the coefficients of ``Q``, lowest first
(a minimax-weighted fit of ``log2(erfc(x))``, max absolute error 1.2e-8)."""

ERF_ONE = 3.92
"""Above this ``erfc(x) < 2.3e-8``, so ``erf(x)`` rounds to 1 in f32."""


def _horner(lw: KernelLowering, coeffs: tuple[float, ...], t: SSAValue, ty: str = "f32") -> SSAValue:
    """``sum coeffs[k] t^k`` by Horner's rule with ``fma.rn`` in ``ty`` (f32 or f64)."""
    fty = f32 if ty == "f32" else f64
    p = lw.reg(ty)
    lw.emit(tt.MovOp(ty, p, lw.imm(coeffs[-1], fty)))
    for c in reversed(coeffs[:-1]):
        lw.emit(tt.FmaOp(f"rn.{ty}", p, p, t, lw.imm(c, fty)))
    return p


@TARGET_LOWERINGS.register(mathd.ErfOp)
def _erf(lw: KernelLowering, op: Operation) -> None:
    """erf in f32 to about 1 ulp (with an exact ``ex2``; ``ex2.approx`` adds its own error
    to the ``|x| >= 1`` branch): ``x + x P(x^2)`` for ``|x| < 1`` (the ``fma`` keeps small
    arguments exact to the last bit), ``sign(x) (1 - 2^Q(min(|x|, ERF_ONE)))`` above;
    NaN gives NaN, infinities give +-1."""
    _f32_only(lw, op)
    x = lw.one(op.operands[0])
    d = lw.define(op.results[0])
    ax = lw.reg("f32")
    lw.emit(tt.AbsOp("f32", ax, x))
    t = lw.reg("f32")
    lw.emit(tt.MulOp("rn.f32", t, x, x))
    small = lw.reg("f32")
    lw.emit(tt.FmaOp("rn.f32", small, x, _horner(lw, ERF_SMALL, t), x))
    clamped = lw.reg("f32")
    lw.emit(tt.MinOp("f32", clamped, ax, lw.imm(ERF_ONE, f32)))
    tail = _exp2_f32(lw, _horner(lw, ERF_LOG2_ERFC, clamped))
    big = lw.reg("f32")
    lw.emit(tt.SubOp("rn.f32", big, lw.imm(1.0, f32), tail))
    lw.emit(tt.CopysignOp("f32", big, x, big))
    is_small = lw.reg("pred")
    lw.emit(tt.SetpOp("lt.f32", is_small, ax, lw.imm(1.0, f32)))
    y = lw.reg("f32")
    lw.emit(tt.SelpOp("f32", y, small, big, is_small))
    is_nan = lw.reg("pred")
    lw.emit(tt.SetpOp("nan.f32", is_nan, x, x))
    lw.emit(tt.SelpOp("f32", d, x, y, is_nan))


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
    """``a ** b`` with C's ``powf`` (and numpy's) special cases: ``|a| ** b =
    exp2(b * log2 |a|)``; for ``a < 0`` the result is negated when ``b`` is an odd
    integer and NaN when ``b`` is not an integer; ``a ** 0 = 1`` and ``1 ** b = 1``
    for every ``a`` and ``b`` (NaN included); ``0 ** b`` is ``0`` or ``inf`` by the sign
    of ``b`` (exp2 of ``-inf`` / ``inf``)."""
    _f32_only(lw, op)
    a, b = (lw.one(v) for v in op.operands)
    d = lw.define(op.results[0])
    one = lw.imm(1.0, f32)

    def reg(kind: str = "f32") -> SSAValue:
        return lw.reg(kind)

    abs_a, lg, t, mag = reg(), reg(), reg(), reg()
    lw.emit(tt.AbsOp("f32", abs_a, a))
    lw.emit(tt.Lg2Op("approx.f32", lg, abs_a))
    lw.emit(tt.MulOp("rn.f32", t, lg, b))
    lw.emit(tt.Ex2Op("approx.f32", mag, t))
    # the sign for a < 0: b an integer (trunc(b) == b), odd when trunc(b / 2) != b / 2
    tb, half, th = reg(), reg(), reg()
    lw.emit(tt.CvtOp("rzi.f32.f32", tb, [b]))
    lw.emit(tt.MulOp("rn.f32", half, b, lw.imm(0.5, f32)))
    lw.emit(tt.CvtOp("rzi.f32.f32", th, [half]))
    is_int, is_odd, neg = reg("pred"), reg("pred"), reg("pred")
    lw.emit(tt.SetpOp("eq.f32", is_int, tb, b))
    lw.emit(tt.SetpOp("neu.f32", is_odd, th, half))
    lw.emit(tt.SetpOp("lt.f32", neg, a, lw.imm(0.0, f32)))
    minus, signed, on_neg = reg(), reg(), reg()
    lw.emit(tt.NegOp("f32", minus, mag))
    lw.emit(tt.SelpOp("f32", signed, minus, mag, is_odd))
    lw.emit(tt.SelpOp("f32", on_neg, signed, lw.imm(float("nan"), f32), is_int))
    r1 = reg()
    lw.emit(tt.SelpOp("f32", r1, on_neg, mag, neg))
    # b == 0 or a == 1: exactly 1
    b0, a1 = reg("pred"), reg("pred")
    lw.emit(tt.SetpOp("eq.f32", b0, b, lw.imm(0.0, f32)))
    lw.emit(tt.SetpOp("eq.f32", a1, a, one))
    r2 = reg()
    lw.emit(tt.SelpOp("f32", r2, one, r1, b0))
    lw.emit(tt.SelpOp("f32", d, one, r2, a1))
