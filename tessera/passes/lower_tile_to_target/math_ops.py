"""Lowerings of the ``math`` dialect: ``ex2`` / ``lg2`` approximations in f32, sine and
cosine with an argument reduction (f32 and f64), tanh and erf as polynomials, square
roots, ``fma`` and ``powf``."""

from __future__ import annotations

import math as _math

from xdsl.dialects import math as mathd
from xdsl.dialects.arith import FastMathFlag
from xdsl.dialects.builtin import Float32Type, Float64Type, f32, f64, i64
from xdsl.ir import Operation, SSAValue

from tessera.ir import target as tt
from tessera.passes.lower_tile_to_target.kernel import TARGET_LOWERINGS, KernelLowering
from tessera.passes.lower_tile_to_target.types import float_type, int_type, is_i1

LOG2E = 1.4426950408889634


LN2 = 0.6931471805599453


def _f32_path(lw: KernelLowering, op: Operation) -> None:
    """Refuse ``op`` before its f32 instruction sequence when its type is not f32 (the f64
    ones branch off before this)."""
    if not isinstance(op.results[0].type, Float32Type):
        raise lw.fail(op, f"only f32 and f64 are lowered, got {op.results[0].type}")


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


# --------------------------------------------------------------------------- f64 exp and log

EXP_LN2_HI_F64 = 0.6931471805599453
"""ln 2 rounded to f64: ``x - n EXP_LN2_HI_F64`` by ``fma`` is exact for the ``n`` nearest
``x log2 e`` (the difference is a multiple of ``ulp(x)`` or 2^-53 below 1/2)."""
EXP_LN2_LO_F64 = 2.3190468138462996e-17
"""``ln 2 - EXP_LN2_HI_F64`` rounded to f64 (the rest, 5.7e-34, times ``|n| <= 1100`` is
2^-100)."""
EXP_F64 = tuple(1.0 / _math.factorial(k) for k in range(2, 14))
"""``e^r - 1 = r + r^2 E(r)`` on ``|r| <= ln2/2``: the Taylor coefficients ``1/k!``, ``k =
2..13``, of ``E``, lowest first (truncation ``r^14/14! < 4.1e-18``, 0.04 ulp of 1)."""
EXP_F64_MIN = -750.0
"""``e^x`` is clamped below here (``e^-750`` rounds to 0; ``n`` stays above -1083)."""
EXP_F64_MAX = 710.0
"""``e^x`` is clamped above here (``e^710`` overflows to inf; ``n`` stays below 1025)."""

LOG_LN2_HI_F64 = 0.6931471805598903
"""ln 2 truncated to 42 bits: ``k LOG_LN2_HI_F64`` is exact for ``|k| < 2^11``."""
LOG_LN2_LO_F64 = 5.497923018708371e-14
"""``ln 2 - LOG_LN2_HI_F64`` rounded to f64 (the rest is below 2^-96)."""
LOG2E_LO = 2.0355273740931033e-17
"""``1/ln 2 - LOG2E`` rounded to f64."""
SQRT2_BITS = 0x3FF6A09E667F3BCD
"""The bits of sqrt(2) in f64: mantissas ``1.m`` above it are halved in ``log``."""
TWO_THIRDS_HI = 0.6666666666666666
"""2/3 rounded to f64."""
TWO_THIRDS_LO = 3.700743415417188e-17
"""``2/3 - TWO_THIRDS_HI`` rounded to f64."""
ATANH_F64 = tuple(2.0 / (2 * k + 1) for k in range(2, 11))
"""``log1p(f) = 2 atanh(s) = 2s + s z (2/3 + z A(z))`` with ``s = f/(2+f)``, ``z = s^2 <=
0.0295`` (``f`` in ``[sqrt(2)/2 - 1, sqrt(2) - 1]``): the Taylor coefficients ``2/(2k+1)``,
``k = 2..10``, of ``A``, lowest first (truncation ``2/23 z^11`` relative to ``2s``: 2^-61)."""

TANH_F64_MIN = -40.0
"""``tanh`` clamps ``-2|x|`` here: ``tanh(20)`` rounds to 1 in f64."""
TANH_F64_SPLIT = 0.55
"""``tanh |x| = -m/(m+2)`` with ``m = expm1(-2|x|)`` below this, ``1 - 2e/(1+e)`` with ``e =
e^-2|x|`` above (each form where its rounding errors stay under about 1 ulp)."""

ERF_F64_SPLIT = 0.84375
"""``erf(x) = x + x P(x^2)`` below this ``|x|`` (:data:`ERF_F64_SMALL`)."""
ERF_F64_SMALL = (
    0.1283791670955126, -0.3761263890318375, 0.11283791670954747, -0.02686617064503173,
    0.005223977624088953, -0.0008548326914788754, 0.000120553274432313,
    -1.4925464145762318e-05, 1.6457924042769818e-06, -1.6303196466129588e-07,
    1.420619410239985e-08, -8.881232333500952e-10,
)
"""``P(t) = erf(sqrt t)/sqrt t - 1`` on ``t`` in ``[0, 0.84375^2]``, lowest first: a
least-squares fit (Chebyshev nodes, 60 digits) of degree 11, error 1.3e-17."""
ERF_F64_ONE = 0.8427007929497149
"""erf(1) rounded to f64."""
ERF_F64_MID = (
    -2.4801320890531376e-17, 0.4151074974205947, -0.4151074974205947, 0.13836916580686492,
    0.06918458290343187, -0.06918458290343586, 0.00461230552702114, 0.015154718160028835,
    -0.004777030737475476, -0.0018851883591667069, 0.0012262882841285688,
    8.552199689761837e-05, -0.00020007233453271905, 1.8800550286329978e-05,
    2.3794699280786003e-05, -6.617779427351961e-06,
)
"""``erf(1 + s) - ERF_F64_ONE`` on ``s`` in ``[-0.15625, 0.25]`` (``|x|`` in ``[0.84375,
1.25]``), lowest first: a least-squares fit of degree 15, error 2.8e-18."""
ERFCX_F64_NEAR_C = 1.875
"""The centre of :data:`ERFCX_F64_NEAR`'s interval [1.25, 2.5]."""
ERFCX_F64_NEAR = (
    0.2694299851646704, -0.11801672272799829, 0.04814863004967369, -0.018492027589918095,
    0.006738039159289776, -0.002343281666090475, 0.0007814620116899869,
    -0.00025086869067621794, 7.77708062610392e-05, -2.334403848954726e-05,
    6.800126439965411e-06, -1.92642195514771e-06, 5.314544625134897e-07,
    -1.4230413223244617e-07, 3.749357566381967e-08, -1.0722025419390106e-08,
    2.647560248055303e-09,
)
"""``erfcx(c + t) = e^((c+t)^2) erfc(c + t)`` for ``c + t`` in [1.25, 2.5], ``c =
ERFCX_F64_NEAR_C``, lowest first: a least-squares fit of degree 16 in relative error
(1.3e-16)."""
ERFCX_F64_FAR_C = 4.25
"""The centre of :data:`ERFCX_F64_FAR`'s interval [2.5, 6]."""
ERFCX_F64_FAR = (
    0.12934527478598806, -0.028944331414622205, 0.006331866273865194,
    -0.0013559331669672947, 0.0002845751568938738, -5.859550100816825e-05,
    1.1848093518252181e-05, -2.354598546321443e-06, 4.602603254200479e-07,
    -8.855732300249811e-08, 1.6780916066577825e-08, -3.131332803025108e-09,
    5.76868582459346e-10, -1.0603538250407334e-10, 1.8919740086029488e-11,
    -2.9752112058772795e-12, 5.364209862313236e-13, -1.5410374501450678e-13,
    2.5126361792639784e-14,
)
"""``erfcx`` on [2.5, 6] about ``ERFCX_F64_FAR_C``: degree 18, relative error 5.9e-15 (``erfc
<= 4.1e-4`` there, so 0.03 ulp of ``erf``). Above 6 ``erf`` rounds to 1."""


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
    kernels' base-2 arithmetic is written for). In f64 (which has no ``approx``
    instructions) all four to under 1 ulp, ``afn`` or not: :func:`_exp_f64`,
    :func:`_exp2_f64`, ``ln`` by :func:`_log_dd_f64` and :func:`_log2_f64`."""
    x = lw.one(op.operands[0])
    if isinstance(op.results[0].type, Float64Type):
        d = lw.define(op.results[0])
        if isinstance(op, mathd.ExpOp):
            _exp_f64(lw, x, d)
        elif isinstance(op, mathd.Exp2Op):
            _exp2_f64(lw, x, d)
        elif isinstance(op, mathd.LogOp):
            _log_special_f64(lw, x, _log_dd_f64(lw, x)[0], d)
        else:
            _log2_f64(lw, x, d)
        return
    _f32_path(lw, op)
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
    """tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|); an odd Taylor polynomial for |x| < 0.3.
    In f64 by :func:`_tanh_f64` (about 1.3 ulp)."""
    x = lw.one(op.operands[0])
    if isinstance(op.results[0].type, Float64Type):
        _tanh_f64(lw, x, lw.define(op.results[0]))
        return
    _f32_path(lw, op)
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
    NaN gives NaN, infinities give +-1. In f64 by :func:`_erf_f64` (under 1 ulp)."""
    x = lw.one(op.operands[0])
    if isinstance(op.results[0].type, Float64Type):
        _erf_f64(lw, x, lw.define(op.results[0]))
        return
    _f32_path(lw, op)
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


@TARGET_LOWERINGS.register(mathd.AbsIOp)
def _absi(lw: KernelLowering, op: Operation) -> None:
    """``|x|`` of a signed integer, wrapping as two's complement (``abs`` of the most
    negative value is itself); i8 values are held sign-extended in 16-bit registers."""
    t = op.results[0].type
    if is_i1(t):
        raise lw.fail(op, "abs of i1 is not lowered (it is the value itself)")
    d = lw.define(op.results[0])
    lw.emit(tt.AbsOp(int_type(t), d, lw.one(op.operands[0])))


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
    of ``b`` (exp2 of ``-inf`` / ``inf``). ``-0 ** b`` takes the ``+0`` branch (``+inf``
    for an odd negative ``b``, where C gives ``-inf``).

    Computed in f64 around :func:`_pow_mag_f64` (``ln|a|`` and ``b ln|a|`` in
    double-double, about 1 ulp), an f32 power from its operands widened and rounded once
    at the end: the f32 ``lg2.approx``/``ex2.approx`` pair was off by ``|b log2 a|``
    times the f32 rounding of the exponent (1.6e-6 relative for a result near 2^21)."""
    ty = float_type(op.results[0].type)
    if ty != "f64":
        _f32_path(lw, op)
    a, b = (lw.one(v) for v in op.operands)
    d = lw.define(op.results[0])
    if ty == "f32":
        a64, b64, d64 = lw.reg("f64"), lw.reg("f64"), lw.reg("f64")
        lw.emit(tt.CvtOp("f64.f32", a64, [a]))
        lw.emit(tt.CvtOp("f64.f32", b64, [b]))
        _pow_f64(lw, a64, b64, d64)
        lw.emit(tt.CvtOp("rn.f32.f64", d, [d64]))
    else:
        _pow_f64(lw, a, b, d)


def _pow_f64(lw: KernelLowering, a: SSAValue, b: SSAValue, d: SSAValue) -> None:
    """``d = a ** b`` in f64 with :func:`_powf`'s special cases."""
    ty, fty = "f64", f64
    one = lw.imm(1.0, fty)

    def reg(kind: str = ty) -> SSAValue:
        return lw.reg(kind)

    mag = _pow_mag_f64(lw, a, b)
    # the sign for a < 0: b an integer (trunc(b) == b), odd when trunc(b / 2) != b / 2
    tb, half, th = reg(), reg(), reg()
    lw.emit(tt.CvtOp(f"rzi.{ty}.{ty}", tb, [b]))
    lw.emit(tt.MulOp(f"rn.{ty}", half, b, lw.imm(0.5, fty)))
    lw.emit(tt.CvtOp(f"rzi.{ty}.{ty}", th, [half]))
    is_int, is_odd, neg = reg("pred"), reg("pred"), reg("pred")
    lw.emit(tt.SetpOp(f"eq.{ty}", is_int, tb, b))
    lw.emit(tt.SetpOp(f"neu.{ty}", is_odd, th, half))
    lw.emit(tt.SetpOp(f"lt.{ty}", neg, a, lw.imm(0.0, fty)))
    minus, signed, on_neg = reg(), reg(), reg()
    lw.emit(tt.NegOp(ty, minus, mag))
    lw.emit(tt.SelpOp(ty, signed, minus, mag, is_odd))
    lw.emit(tt.SelpOp(ty, on_neg, signed, lw.imm(float("nan"), fty), is_int))
    r1 = reg()
    lw.emit(tt.SelpOp(ty, r1, on_neg, mag, neg))
    # b == 0 or a == 1: exactly 1
    b0, a1 = reg("pred"), reg("pred")
    lw.emit(tt.SetpOp(f"eq.{ty}", b0, b, lw.imm(0.0, fty)))
    lw.emit(tt.SetpOp(f"eq.{ty}", a1, a, one))
    r2 = reg()
    lw.emit(tt.SelpOp(ty, r2, one, r1, b0))
    lw.emit(tt.SelpOp(ty, d, one, r2, a1))


# --------------------------------------------------------------------------- f64 lowerings


def _fma64(lw: KernelLowering, a: SSAValue, b: SSAValue, c: SSAValue) -> SSAValue:
    r = lw.reg("f64")
    lw.emit(tt.FmaOp("rn.f64", r, a, b, c))
    return r


def _bin64(lw: KernelLowering, cls: type, a: SSAValue, b: SSAValue) -> SSAValue:
    """``cls`` (add, sub, mul, div) in ``rn.f64`` into a new register."""
    r = lw.reg("f64")
    lw.emit(cls("rn.f64", r, a, b))
    return r


def _sel64(lw: KernelLowering, a: SSAValue, b: SSAValue, p: SSAValue) -> SSAValue:
    r = lw.reg("f64")
    lw.emit(tt.SelpOp("f64", r, a, b, p))
    return r


def _setp64(lw: KernelLowering, cmp: str, a: SSAValue, b: SSAValue) -> SSAValue:
    p = lw.reg("pred")
    lw.emit(tt.SetpOp(f"{cmp}.f64", p, a, b))
    return p


def _reduce_exp_f64(
    lw: KernelLowering, x: SSAValue, xlo: SSAValue | None = None,
) -> tuple[SSAValue, SSAValue, SSAValue]:
    """``x (+ xlo) = n ln 2 + r + rlo`` with ``n = rint(x log2 e)`` (an f64 integer),
    ``|r| <= ln2/2`` and ``rlo`` the rounding error of ``r`` (below ``ulp(r)``): a two-part
    ``ln 2`` (:data:`EXP_LN2_HI_F64` exact by ``fma``); a low part ``xlo`` of the argument
    joins ``r`` before it is rounded."""
    t, n, nn = lw.reg("f64"), lw.reg("f64"), lw.reg("f64")
    lw.emit(tt.MulOp("rn.f64", t, x, lw.imm(LOG2E, f64)))
    lw.emit(tt.CvtOp("rni.f64.f64", n, [t]))
    lw.emit(tt.NegOp("f64", nn, n))
    hi, lo = lw.imm(EXP_LN2_HI_F64, f64), lw.imm(EXP_LN2_LO_F64, f64)
    r1 = _fma64(lw, nn, hi, x)
    if xlo is None:
        r = _fma64(lw, nn, lo, r1)
        rlo = _fma64(lw, nn, lo, _bin64(lw, tt.SubOp, r1, r))
    else:
        a = _bin64(lw, tt.AddOp, r1, xlo)
        r = _fma64(lw, nn, lo, a)
        err = _bin64(lw, tt.AddOp, _bin64(lw, tt.SubOp, r1, a), xlo)
        rlo = _bin64(lw, tt.AddOp, _fma64(lw, nn, lo, _bin64(lw, tt.SubOp, a, r)), err)
    return n, r, rlo


def _expm1_reduced_f64(lw: KernelLowering, r: SSAValue, rlo: SSAValue) -> SSAValue:
    """``e^(r + rlo) - 1 = r + (r^2 E(r) + rlo)`` for ``|r| <= ln2/2`` (:data:`EXP_F64`),
    about half an ulp."""
    r2 = _bin64(lw, tt.MulOp, r, r)
    u = _fma64(lw, r2, _horner(lw, EXP_F64, r, "f64"), rlo)
    return _bin64(lw, tt.AddOp, r, u)


def _pow2_f64(lw: KernelLowering, n: SSAValue) -> SSAValue:
    """``2^n`` for the s32 ``n`` in [-1022, 1023], from the exponent field."""
    b32, b64, v = lw.reg("b32"), lw.reg("b64"), lw.reg("f64")
    lw.emit(tt.AddOp("s32", b32, n, lw.imm(1023)))
    lw.emit(tt.CvtOp("s64.s32", b64, [b32]))
    lw.emit(tt.ShlOp("b64", b64, b64, lw.imm(52)))
    lw.emit(tt.MovOp("b64", v, b64))
    return v


def _exp_f64(lw: KernelLowering, x: SSAValue, d: SSAValue, xlo: SSAValue | None = None) -> None:
    """``d = e^(x + xlo)`` in f64 to under 1 ulp (0.8 measured) over the whole range:
    :func:`_reduce_exp_f64` of ``x`` clamped to [:data:`EXP_F64_MIN`,
    :data:`EXP_F64_MAX`], ``e^r = 1 + expm1`` by :func:`_expm1_reduced_f64`, times ``2^n``
    as two exponent-field factors, so results that overflow give inf and subnormal
    results round once (correctly, not flushed); ``e^-inf = 0``, NaN gives NaN."""
    xc = lw.reg("f64")
    lw.emit(tt.MaxOp("f64", xc, x, lw.imm(EXP_F64_MIN, f64)))
    lw.emit(tt.MinOp("f64", xc, xc, lw.imm(EXP_F64_MAX, f64)))
    n, r, rlo = _reduce_exp_f64(lw, xc, xlo)
    p = _bin64(lw, tt.AddOp, _expm1_reduced_f64(lw, r, rlo), lw.imm(1.0, f64))
    _scale_f64(lw, x, n, p, d)


def _scale_f64(lw: KernelLowering, x: SSAValue, n: SSAValue, p: SSAValue, d: SSAValue) -> None:
    """``d = p 2^n`` (``n`` an f64 integer, ``|n| <= 2044``) as two factors, NaN ``x``
    passed through."""
    ni, n1, n2 = lw.reg("b32"), lw.reg("b32"), lw.reg("b32")
    lw.emit(tt.CvtOp("rni.s32.f64", ni, [n]))
    lw.emit(tt.ShrOp("s32", n1, ni, lw.imm(1)))
    lw.emit(tt.SubOp("s32", n2, ni, n1))
    y = _bin64(lw, tt.MulOp, _bin64(lw, tt.MulOp, p, _pow2_f64(lw, n1)), _pow2_f64(lw, n2))
    lw.emit(tt.SelpOp("f64", d, x, y, _setp64(lw, "nan", x, x)))


def _exp2_f64(lw: KernelLowering, x: SSAValue, d: SSAValue) -> None:
    """``d = 2^x`` in f64 to under 1 ulp: ``x = n + f`` (``n = rint(x)`` after clamping to
    [-1080, 1030], ``f`` exact), ``2^f = e^(f ln 2)`` with ``f ln 2`` in two parts, then as
    :func:`_exp_f64`."""
    xc, n = lw.reg("f64"), lw.reg("f64")
    lw.emit(tt.MaxOp("f64", xc, x, lw.imm(-1080.0, f64)))
    lw.emit(tt.MinOp("f64", xc, xc, lw.imm(1030.0, f64)))
    lw.emit(tt.CvtOp("rni.f64.f64", n, [xc]))
    f = _bin64(lw, tt.SubOp, xc, n)
    hi = lw.imm(EXP_LN2_HI_F64, f64)
    r = _bin64(lw, tt.MulOp, f, hi)
    nr = lw.reg("f64")
    lw.emit(tt.NegOp("f64", nr, r))
    rlo = _fma64(lw, f, lw.imm(EXP_LN2_LO_F64, f64), _fma64(lw, f, hi, nr))
    p = _bin64(lw, tt.AddOp, _expm1_reduced_f64(lw, r, rlo), lw.imm(1.0, f64))
    _scale_f64(lw, x, n, p, d)


def _log1p_dd_f64(lw: KernelLowering, x: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue]:
    """``(k, h, l)`` with ``x = 2^k (1 + f)``, ``1 + f`` in ``[sqrt(2)/2, sqrt(2))`` from the
    bits (subnormals scaled by 2^54 first), and ``log1p(f) = h + l`` to about 2^-66
    relative: ``s = f/(2+f)`` and ``z = s^2`` in double-double, ``log1p(f) = 2s + s z (2/3 +
    z A(z))`` (:data:`ATANH_F64`) with the ``s z 2/3`` term in double-double too. For
    positive finite ``x`` only (the callers select the special values)."""
    sub = _setp64(lw, "lt", x, lw.imm(2.0 ** -1022, f64))
    xs = _sel64(lw, _bin64(lw, tt.MulOp, x, lw.imm(2.0 ** 54, f64)), x, sub)
    bits, eb, mb, half = lw.reg("b64"), lw.reg("b64"), lw.reg("b64"), lw.reg("b64")
    lw.emit(tt.MovOp("b64", bits, xs))
    lw.emit(tt.ShrOp("u64", eb, bits, lw.imm(52)))
    e, adj, eadj = lw.reg("b32"), lw.reg("b32"), lw.reg("b32")
    lw.emit(tt.CvtOp("u32.u64", e, [eb]))
    lw.emit(tt.AndOp("b32", e, e, lw.imm(0x7FF)))
    lw.emit(tt.AndOp("b64", mb, bits, lw.imm(0x000FFFFFFFFFFFFF, i64)))
    lw.emit(tt.OrOp("b64", mb, mb, lw.imm(0x3FF0000000000000, i64)))
    big = lw.reg("pred")
    lw.emit(tt.SetpOp("gt.u64", big, mb, lw.imm(SQRT2_BITS, i64)))
    lw.emit(tt.SubOp("s64", half, mb, lw.imm(1 << 52, i64)))
    lw.emit(tt.SelpOp("b64", mb, half, mb, big))
    lw.emit(tt.SelpOp("s32", adj, lw.imm(-1022), lw.imm(-1023), big))
    lw.emit(tt.SelpOp("s32", eadj, lw.imm(-54), lw.imm(0), sub))
    lw.emit(tt.AddOp("s32", e, e, adj))
    lw.emit(tt.AddOp("s32", e, e, eadj))
    m, dk = lw.reg("f64"), lw.reg("f64")
    lw.emit(tt.MovOp("b64", m, mb))
    lw.emit(tt.CvtOp("rn.f64.s32", dk, [e]))
    one, two = lw.imm(1.0, f64), lw.imm(2.0, f64)
    add, sub_, mul, div = tt.AddOp, tt.SubOp, tt.MulOp, tt.DivOp

    def neg(v: SSAValue) -> SSAValue:
        r = lw.reg("f64")
        lw.emit(tt.NegOp("f64", r, v))
        return r

    f = _bin64(lw, sub_, m, one)
    den = _bin64(lw, add, f, two)
    den_lo = _bin64(lw, add, _bin64(lw, sub_, two, den), f)
    s = _bin64(lw, div, f, den)
    ns = neg(s)
    e1 = _fma64(lw, ns, den_lo, _fma64(lw, ns, den, f))
    s_lo = _bin64(lw, div, e1, den)
    z = _bin64(lw, mul, s, s)
    s2 = _bin64(lw, add, s, s)
    z_lo = _fma64(lw, s2, s_lo, _fma64(lw, s, s, neg(z)))
    w = _bin64(lw, mul, z, _horner(lw, ATANH_F64, z, "f64"))
    t23 = lw.imm(TWO_THIRDS_HI, f64)
    cc = _bin64(lw, add, w, t23)
    c_lo = _bin64(lw, add, _bin64(lw, add, _bin64(lw, sub_, t23, cc), w), lw.imm(TWO_THIRDS_LO, f64))
    p = _bin64(lw, mul, s, z)
    p_lo = _bin64(lw, add, _fma64(lw, s, z, neg(p)), _fma64(lw, s, z_lo, _bin64(lw, mul, s_lo, z)))
    q = _bin64(lw, mul, p, cc)
    q_lo = _bin64(lw, add, _fma64(lw, p, cc, neg(q)), _fma64(lw, p, c_lo, _bin64(lw, mul, p_lo, cc)))
    h = _bin64(lw, add, s2, q)
    l_ = _bin64(lw, add, _bin64(lw, add, _bin64(lw, sub_, s2, h), q), _fma64(lw, s_lo, two, q_lo))
    return dk, h, l_


def _log_dd_f64(lw: KernelLowering, x: SSAValue) -> tuple[SSAValue, SSAValue]:
    """``ln x = H + L`` (double-double, about 2^-66 relative) for positive finite ``x``:
    :func:`_log1p_dd_f64` plus ``k ln 2`` (:data:`LOG_LN2_HI_F64`, exact, and
    :data:`LOG_LN2_LO_F64`), renormalized so ``H`` is ``ln x`` rounded (0.5 ulp)."""
    dk, h, l_ = _log1p_dd_f64(lw, x)
    kh = _bin64(lw, tt.MulOp, dk, lw.imm(LOG_LN2_HI_F64, f64))
    kl = _bin64(lw, tt.MulOp, dk, lw.imm(LOG_LN2_LO_F64, f64))
    hi = _bin64(lw, tt.AddOp, kh, h)
    lo = _bin64(lw, tt.AddOp, _bin64(lw, tt.AddOp, _bin64(lw, tt.SubOp, kh, hi), h),
                _bin64(lw, tt.AddOp, l_, kl))
    big = _bin64(lw, tt.AddOp, hi, lo)
    small = _bin64(lw, tt.AddOp, _bin64(lw, tt.SubOp, hi, big), lo)
    return big, small


def _log_special_f64(lw: KernelLowering, x: SSAValue, y: SSAValue, d: SSAValue) -> None:
    """``d = y`` but ``-inf`` at ``x = 0``, NaN for ``x < 0``, ``x`` itself at ``+inf`` and
    NaN."""
    zero = lw.imm(0.0, f64)
    y = _sel64(lw, lw.imm(float("-inf"), f64), y, _setp64(lw, "eq", x, zero))
    y = _sel64(lw, lw.imm(float("nan"), f64), y, _setp64(lw, "lt", x, zero))
    lw.emit(tt.SelpOp("f64", d, x, y, _setp64(lw, "equ", x, lw.imm(float("inf"), f64))))


def _log2_f64(lw: KernelLowering, x: SSAValue, d: SSAValue) -> None:
    """``d = log2 x = k + log1p(f) log2 e`` in f64 to under 1 ulp (0.5 measured), the
    product in double-double (:data:`LOG2E_LO`) and added to ``k`` exactly before the
    last rounding (so powers of two give their exponent exactly); special values as
    ``log``."""
    dk, h, l_ = _log1p_dd_f64(lw, x)
    le = lw.imm(LOG2E, f64)
    y = _bin64(lw, tt.MulOp, h, le)
    ny = lw.reg("f64")
    lw.emit(tt.NegOp("f64", ny, y))
    ylo = _bin64(lw, tt.AddOp, _fma64(lw, h, le, ny),
                 _fma64(lw, l_, le, _bin64(lw, tt.MulOp, h, lw.imm(LOG2E_LO, f64))))
    s = _bin64(lw, tt.AddOp, dk, y)
    s_lo = _bin64(lw, tt.AddOp, _bin64(lw, tt.AddOp, _bin64(lw, tt.SubOp, dk, s), y), ylo)
    _log_special_f64(lw, x, _bin64(lw, tt.AddOp, s, s_lo), d)


def _div_dd_f64(
    lw: KernelLowering, num: SSAValue, num_lo: SSAValue, e: SSAValue, e_lo: SSAValue,
    c: SSAValue,
) -> SSAValue:
    """``(num + num_lo) / (e + e_lo + c)`` for ``|c| >= |e|``: the denominator kept exactly
    as a double-double, the quotient with one Newton correction from the ``fma``
    remainder."""
    den = _bin64(lw, tt.AddOp, e, c)
    den_lo = _bin64(lw, tt.AddOp, _bin64(lw, tt.AddOp, _bin64(lw, tt.SubOp, c, den), e), e_lo)
    q = _bin64(lw, tt.DivOp, num, den)
    nn = lw.reg("f64")
    lw.emit(tt.NegOp("f64", nn, num))
    rem = _bin64(lw, tt.SubOp, _fma64(lw, q, den_lo, _fma64(lw, q, den, nn)), num_lo)
    return _bin64(lw, tt.SubOp, q, _bin64(lw, tt.DivOp, rem, den))


def _tanh_f64(lw: KernelLowering, x: SSAValue, d: SSAValue) -> None:
    """``d = tanh x`` in f64 to about 1.3 ulp: with ``y = max(-2|x|, TANH_F64_MIN) = n ln 2 +
    r``, ``v = expm1(r)`` (:func:`_expm1_reduced_f64`) and ``2^n`` give ``m = expm1(y) =
    2^n v + (2^n - 1)`` and ``e = e^y = 2^n v + 2^n``, each a double-double; ``tanh |x| =
    -m/(m+2)`` below :data:`TANH_F64_SPLIT`, ``1 - 2e/(1+e)`` above, the divisions by
    :func:`_div_dd_f64`; the sign of ``x`` copied (``tanh(+-0) = +-0``), ``+-inf`` give
    ``+-1``, NaN gives NaN."""
    ax, y = lw.reg("f64"), lw.reg("f64")
    lw.emit(tt.AbsOp("f64", ax, x))
    lw.emit(tt.MulOp("rn.f64", y, ax, lw.imm(-2.0, f64)))
    lw.emit(tt.MaxOp("f64", y, y, lw.imm(TANH_F64_MIN, f64)))
    n, r, rlo = _reduce_exp_f64(lw, y)
    v = _expm1_reduced_f64(lw, r, rlo)
    ni = lw.reg("b32")
    lw.emit(tt.CvtOp("rni.s32.f64", ni, [n]))
    sc = _pow2_f64(lw, ni)
    add, sub_ = tt.AddOp, tt.SubOp
    scv = _bin64(lw, tt.MulOp, sc, v)
    sm1 = _bin64(lw, sub_, sc, lw.imm(1.0, f64))
    em = _bin64(lw, add, sm1, scv)
    em_lo = _bin64(lw, add, _bin64(lw, sub_, sm1, em), scv)
    ep = _bin64(lw, add, sc, scv)
    ep_lo = _bin64(lw, add, _bin64(lw, sub_, sc, ep), scv)
    nem, nem_lo = lw.reg("f64"), lw.reg("f64")
    lw.emit(tt.NegOp("f64", nem, em))
    lw.emit(tt.NegOp("f64", nem_lo, em_lo))
    small = _div_dd_f64(lw, nem, nem_lo, em, em_lo, lw.imm(2.0, f64))
    w = _div_dd_f64(lw, _bin64(lw, add, ep, ep), _bin64(lw, add, ep_lo, ep_lo), ep, ep_lo,
                    lw.imm(1.0, f64))
    large = _bin64(lw, sub_, lw.imm(1.0, f64), w)
    t = _sel64(lw, small, large, _setp64(lw, "lt", ax, lw.imm(TANH_F64_SPLIT, f64)))
    lw.emit(tt.CopysignOp("f64", t, x, t))
    lw.emit(tt.SelpOp("f64", d, x, t, _setp64(lw, "nan", x, x)))


def _erf_f64(lw: KernelLowering, x: SSAValue, d: SSAValue) -> None:
    """``d = erf x`` in f64 to under 1 ulp (0.7 measured): ``x + x P(x^2)`` below
    :data:`ERF_F64_SPLIT` (:data:`ERF_F64_SMALL`); ``erf(1) + Q(|x| - 1)`` below 1.25
    (:data:`ERF_F64_MID`); ``1 - e^(-x^2) erfcx(|x|)`` below 6, ``e^(-x^2)`` of ``x^2`` in
    double-double (:func:`_exp_f64` with a low part) and ``erfcx`` by
    :data:`ERFCX_F64_NEAR` / :data:`ERFCX_F64_FAR`; 1 above; the sign of ``x`` copied.
    ``erf(+-inf) = +-1``, NaN gives NaN."""
    ax = lw.reg("f64")
    lw.emit(tt.AbsOp("f64", ax, x))
    t = _bin64(lw, tt.MulOp, x, x)
    small = _fma64(lw, x, _horner(lw, ERF_F64_SMALL, t, "f64"), x)
    am1 = _bin64(lw, tt.SubOp, ax, lw.imm(1.0, f64))
    mid = _bin64(lw, tt.AddOp, lw.imm(ERF_F64_ONE, f64), _horner(lw, ERF_F64_MID, am1, "f64"))
    ac = lw.reg("f64")
    lw.emit(tt.MaxOp("f64", ac, ax, lw.imm(1.25, f64)))
    lw.emit(tt.MinOp("f64", ac, ac, lw.imm(6.0, f64)))
    near = _horner(lw, ERFCX_F64_NEAR, _bin64(lw, tt.SubOp, ac, lw.imm(ERFCX_F64_NEAR_C, f64)), "f64")
    far = _horner(lw, ERFCX_F64_FAR, _bin64(lw, tt.SubOp, ac, lw.imm(ERFCX_F64_FAR_C, f64)), "f64")
    g = _sel64(lw, near, far, _setp64(lw, "lt", ac, lw.imm(2.5, f64)))
    xx = _bin64(lw, tt.MulOp, ac, ac)
    nxx, nxx_lo = lw.reg("f64"), lw.reg("f64")
    lw.emit(tt.NegOp("f64", nxx, xx))
    lw.emit(tt.NegOp("f64", nxx_lo, _fma64(lw, ac, ac, nxx)))
    e = lw.reg("f64")
    _exp_f64(lw, nxx, e, nxx_lo)
    eg = _bin64(lw, tt.MulOp, e, g)
    tail = _bin64(lw, tt.SubOp, lw.imm(1.0, f64), eg)
    big = _sel64(lw, mid, tail, _setp64(lw, "lt", ax, lw.imm(1.25, f64)))
    big = _sel64(lw, big, lw.imm(1.0, f64), _setp64(lw, "lt", ax, lw.imm(6.0, f64)))
    lw.emit(tt.CopysignOp("f64", big, x, big))
    y = _sel64(lw, small, big, _setp64(lw, "lt", ax, lw.imm(ERF_F64_SPLIT, f64)))
    lw.emit(tt.SelpOp("f64", d, x, y, _setp64(lw, "nan", x, x)))


def _pow_mag_f64(lw: KernelLowering, a: SSAValue, b: SSAValue) -> SSAValue:
    """``|a| ** b = e^(b ln|a|)`` in f64 to about 1 ulp (0.9 measured): ``ln|a|`` in
    double-double (:func:`_log_dd_f64`), ``t = b ln|a|`` in double-double (its low part
    dropped where ``|t| >= 2048``, the overflow and underflow range), ``e^t`` by
    :func:`_exp_f64` with the low part. ``0 ** b`` and ``inf ** b`` are ``e^(+-inf)``."""
    aa = lw.reg("f64")
    lw.emit(tt.AbsOp("f64", aa, a))
    hh, ll = _log_dd_f64(lw, aa)
    lg = lw.reg("f64")
    _log_special_f64(lw, aa, hh, lg)
    t = _bin64(lw, tt.MulOp, b, lg)
    nt = lw.reg("f64")
    lw.emit(tt.NegOp("f64", nt, t))
    t_lo = _bin64(lw, tt.AddOp, _fma64(lw, b, lg, nt), _bin64(lw, tt.MulOp, b, ll))
    at = lw.reg("f64")
    lw.emit(tt.AbsOp("f64", at, t))
    t_lo = _sel64(lw, t_lo, lw.imm(0.0, f64), _setp64(lw, "lt", at, lw.imm(2048.0, f64)))
    mag = lw.reg("f64")
    _exp_f64(lw, t, mag, t_lo)
    return mag
