"""Lowerings of the float conversions of ``arith`` (``extf``, ``truncf``, int <-> float),
including fp8 (e4m3 / e5m2) with ``cast_array``'s rounding and overflow rules and
NaN signs kept through PTX's canonical-NaN ``cvt``."""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, i32
from xdsl.ir import Operation, SSAValue

from tessera.ir import target as tt
from tessera.passes.lower_tile_to_target.kernel import TARGET_LOWERINGS, KernelLowering
from tessera.passes.lower_tile_to_target.types import float_name, int_type, is_i1

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
    returns the canonical NaN; ORing in the sign bit changes nothing else). A bf16 is
    the high half of its f32: a shift, which keeps every bit (NaN sign and payload)."""
    if sty == "bf16":
        half = lw.reg("b16")
        lw.emit(tt.MovOp("b16", half, s))
        wide = lw.reg("b32")
        lw.emit(tt.CvtOp("u32.u16", wide, [half]))
        lw.emit(tt.ShlOp("b32", wide, wide, lw.imm(16)))
        lw.emit(tt.MovOp("b32", d, wide))
        return
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


@TARGET_LOWERINGS.register(arith.ExtFOp, arith.TruncFOp)
def _float_cast(lw: KernelLowering, op: Operation) -> None:
    src_t, dst_t = op.operands[0].type, op.results[0].type
    s = lw.one(op.operands[0])
    d = lw.define(op.results[0])
    sty, dty = float_name(src_t), float_name(dst_t)
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


@TARGET_LOWERINGS.register(arith.SIToFPOp, arith.UIToFPOp)
def _int_to_float(lw: KernelLowering, op: Operation) -> None:
    src_t, dst_t = op.operands[0].type, op.results[0].type
    signed = isinstance(op, arith.SIToFPOp)
    s = lw.one(op.operands[0])
    d = lw.define(op.results[0])
    if is_i1(src_t):
        one = lw.reg("b32")
        lw.emit(tt.SelpOp("u32", one, lw.imm(1), lw.imm(0), s))
        s, src_t, signed = one, i32, False
    lw.emit(tt.CvtOp(f"rn.{float_name(dst_t)}.{int_type(src_t, signed)}", d, [s]))


@TARGET_LOWERINGS.register(arith.FPToSIOp, arith.FPToUIOp)
def _float_to_int(lw: KernelLowering, op: Operation) -> None:
    src_t, dst_t = op.operands[0].type, op.results[0].type
    if is_i1(dst_t):
        raise lw.fail(op, "float to i1 conversion is not lowered")
    signed = isinstance(op, arith.FPToSIOp)
    d = lw.define(op.results[0])
    lw.emit(tt.CvtOp(f"rzi.{int_type(dst_t, signed)}.{float_name(src_t)}", d, [lw.one(op.operands[0])]))
