"""Tile IR for conversions to and from the narrow float formats (fp8, fp6, fp4).

Used by ``lower-graph-to-tile`` for ``tgraph.cast``:

* **fp8** (``f8E4M3FN``, ``f8E5M2``) is stored one byte per element; a cast is one
  ``arith.truncf`` / ``arith.extf`` per element, whose semantics are those of
  :func:`tessera.numerics.cast_array` (nearest-even, e4m3fn overflow -> NaN, e5m2
  overflow -> Inf, NaN kept). The Tile IR interpreter runs ``truncf`` through
  ``cast_array``; ``lower-tile-to-target`` emits ``cvt.rn.satfinite.*x2.f32`` plus the
  overflow / NaN rule on the f32 bits.
* **fp6 / fp4** (``f6E2M3FN``, ``f6E3M2FN``, ``f4E2M1FN``) are stored **packed** along
  the last axis, in the layout of :func:`tessera.numerics.pack_fp4` /
  :func:`tessera.numerics.pack_fp6`: a tensor ``tensor<... x N x f4E2M1FN>`` lives in a
  ``memref<... x ceil(N/2) x i8>``, an fp6 one in ``memref<... x 3*ceil(N/4) x i8>``
  (:func:`storage_memref`). Kernels dequantize with integer bit manipulation
  (:func:`dequantize`) and quantize with round-to-nearest-even in integer arithmetic,
  saturating at the format's largest finite value (:func:`quantize`); one lane writes
  a whole byte group (two fp4 codes, four fp6 codes in three bytes), so no two lanes
  share a byte. Everything is plain ``arith`` on ``i32``, so the interpreter runs the
  same arithmetic as the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float4E2M1FNType,
    Float6E2M3FNType,
    Float6E3M2FNType,
    Float8E4M3FNType,
    Float8E5M2Type,
    Float16Type,
    Float32Type,
    Float64Type,
    MemRefType,
    TensorType,
    f32,
    i8,
    i32,
)
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.numerics.pack import packed_nbytes
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

NUMERIC_GROUP = 256


@dataclass(frozen=True)
class PackedFormat:
    """A packed sub-byte float format: field widths, bias, and the packing group."""

    bits: int
    ebits: int
    mbits: int
    bias: int
    group: int  # elements per byte group
    group_bytes: int  # bytes per byte group

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal value."""
        return 1 - self.bias

    @property
    def max_code(self) -> int:
        """Code of the largest finite magnitude (every code is finite)."""
        return (1 << (self.bits - 1)) - 1

    @property
    def max_f32_bits(self) -> int:
        """The float32 bit pattern of the largest finite magnitude."""
        e = (1 << self.ebits) - 1
        return ((e - self.bias + 127) << 23) | (((1 << self.mbits) - 1) << (23 - self.mbits))


PACKED: dict[type, PackedFormat] = {
    Float4E2M1FNType: PackedFormat(4, 2, 1, 1, 2, 1),
    Float6E2M3FNType: PackedFormat(6, 2, 3, 1, 4, 3),
    Float6E3M2FNType: PackedFormat(6, 3, 2, 3, 4, 3),
}

FP8 = (Float8E4M3FNType, Float8E5M2Type)
PLAIN_FLOATS = (Float32Type, Float16Type, BFloat16Type)


def packed_format(t: Attribute) -> PackedFormat | None:
    """The packed format of element type ``t``, or None when ``t`` is stored unpacked."""
    return PACKED.get(type(t))


def storage_memref(t: TensorType) -> MemRefType:
    """The memref storing tensor type ``t``: packed ``i8`` rows for fp6/fp4, else ``t``'s."""
    shape = list(t.get_shape())
    fmt = packed_format(t.element_type)
    if fmt is None:
        return MemRefType(t.element_type, shape)
    if not shape:
        raise NotImplementedError(
            f"lower-graph-to-tile: a rank-0 tensor of {t.element_type} cannot be packed"
        )
    return MemRefType(i8, [*shape[:-1], packed_nbytes(shape[-1], fmt.bits)])


def is_narrow_cast(op: g.CastOp) -> bool:
    """Whether ``op`` converts to or from fp8, fp6 or fp4 (handled here)."""
    ts = (g.elem_of(op.input), g.elem_of(op.result))
    return any(isinstance(t, FP8) or packed_format(t) is not None for t in ts)


# --------------------------------------------------------------------------- integer helpers


def _c(e: KernelEmitter, v: int) -> SSAValue:
    return e.const(v, i32)


def _and(e: KernelEmitter, a: SSAValue, v: int) -> SSAValue:
    return e.op(arith.AndIOp(a, _c(e, v)))


def _or(e: KernelEmitter, a: SSAValue, b: SSAValue) -> SSAValue:
    return e.op(arith.OrIOp(a, b))


def _shl(e: KernelEmitter, a: SSAValue, b: SSAValue | int) -> SSAValue:
    if b == 0:
        return a
    return e.op(arith.ShLIOp(a, _c(e, b) if isinstance(b, int) else b))


def _shr(e: KernelEmitter, a: SSAValue, b: SSAValue | int) -> SSAValue:
    if b == 0:
        return a
    return e.op(arith.ShRUIOp(a, _c(e, b) if isinstance(b, int) else b))


def _cmp(e: KernelEmitter, pred: str, a: SSAValue, b: SSAValue | int) -> SSAValue:
    return e.op(arith.CmpiOp(a, _c(e, b) if isinstance(b, int) else b, pred))


def _sel(e: KernelEmitter, c: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
    return e.op(arith.SelectOp(c, a, b))


def _round_shift(e: KernelEmitter, v: SSAValue, s: SSAValue | int) -> SSAValue:
    """``v >> s`` rounded to nearest, ties to even (``v >= 0``, ``1 <= s <= 31``)."""
    q = _shr(e, v, s)
    one = _c(e, 1)
    mask = e.op(arith.SubiOp(_shl(e, one, s), one))
    rem = e.op(arith.AndIOp(v, mask))
    half = _shl(e, one, e.op(arith.SubiOp(s, one)) if isinstance(s, SSAValue) else s - 1)
    above = _cmp(e, "sgt", rem, half)
    tie = e.op(arith.AndIOp(_cmp(e, "eq", rem, half), _cmp(e, "ne", _and(e, q, 1), 0)))
    up = e.op(arith.ExtUIOp(e.op(arith.OrIOp(above, tie)), i32))
    return e.op(arith.AddiOp(q, up))


def dequantize(e: KernelEmitter, code: SSAValue, fmt: PackedFormat) -> SSAValue:
    """The f32 value of ``code`` (i32 in ``[0, 2**bits)``): exact, by bit manipulation."""
    sign = _shl(e, _shr(e, code, fmt.bits - 1), 31)
    ex = _and(e, _shr(e, code, fmt.mbits), (1 << fmt.ebits) - 1)
    man = _and(e, code, (1 << fmt.mbits) - 1)
    normal = _or(
        e,
        _shl(e, e.op(arith.AddiOp(ex, _c(e, 127 - fmt.bias))), 23),
        _shl(e, man, 23 - fmt.mbits),
    )
    # subnormal: man * 2**(emin - mbits), exact in f32
    sub_f = e.fmul(e.op(arith.SIToFPOp(man, f32)), e.const(2.0 ** (fmt.emin - fmt.mbits), f32))
    sub = e.op(arith.BitcastOp(sub_f, i32))
    mag = _sel(e, _cmp(e, "eq", ex, 0), sub, normal)
    return e.op(arith.BitcastOp(_or(e, mag, sign), f32))


def quantize(e: KernelEmitter, x: SSAValue, fmt: PackedFormat) -> SSAValue:
    """The code (i32) of f32 ``x`` rounded to nearest-even in ``fmt``, like ``cast_array``.

    Magnitudes at or above the largest finite value (Inf included) saturate to it; NaN
    becomes the zero of the opposite sign (ml_dtypes' rule, which ``cast_array`` keeps).
    """
    bits = e.op(arith.BitcastOp(x, i32))
    mag = _and(e, bits, 0x7FFFFFFF)
    sign = _shr(e, bits, 31)
    ex = e.op(arith.SubiOp(_shr(e, mag, 23), _c(e, 127)))
    # normal in the target: round the f32 bits at the target's last mantissa bit, rebias
    qn = e.op(
        arith.SubiOp(_round_shift(e, mag, 23 - fmt.mbits), _c(e, (127 - fmt.bias) << fmt.mbits))
    )
    # subnormal in the target: round the significand at 2**(emin - mbits)
    sig = _or(e, _and(e, mag, 0x7FFFFF), _c(e, 0x800000))
    s = e.op(arith.SubiOp(_c(e, 23 - fmt.mbits + fmt.emin), ex))
    s = e.op(arith.MinSIOp(s, _c(e, 31)))
    qs = _round_shift(e, sig, s)
    q = _sel(e, _cmp(e, "sge", ex, fmt.emin), qn, qs)
    q = _sel(e, _cmp(e, "sge", mag, fmt.max_f32_bits), _c(e, fmt.max_code), q)
    code = _or(e, q, _shl(e, sign, fmt.bits - 1))
    nan_code = _shl(e, e.op(arith.XOrIOp(sign, _c(e, 1))), fmt.bits - 1)
    return _sel(e, _cmp(e, "sgt", mag, 0x7F800000), nan_code, code)


def load_code(
    e: KernelEmitter, ref: SSAValue, pre: list[Idx], j: Idx, fmt: PackedFormat,
    nbytes: int, mask: SSAValue | None,
) -> SSAValue:
    """The code (i32) of element ``j`` of the packed row ``ref[*pre, :]``."""

    def byte(b: Idx, m: SSAValue | None) -> SSAValue:
        v = e.op(arith.ExtUIOp(e.load(ref, [*pre, b], mask=m), i32))
        return _and(e, v, 0xFF)

    grp = e.div(j, fmt.group)
    k = e.rem(j, fmt.group)
    if fmt.bits == 4:
        b = byte(grp, mask)
        sh = e.op(arith.IndexCastOp(e.index(k), i32)) if not isinstance(k, int) else k
        return _and(e, _shr(e, b, _shl(e, sh, 2) if isinstance(sh, SSAValue) else 4 * sh), 0xF)
    # fp6: bit offset 6k in the little-endian 24-bit word of bytes 3g .. 3g+2
    k32 = e.op(arith.IndexCastOp(e.index(k), i32))
    bit = e.op(arith.MuliOp(k32, _c(e, 6)))
    b0 = e.add(e.mul(grp, 3), e.div(e.mul(k, 6), 8))
    sh = _and(e, bit, 7)
    lo = byte(b0, mask)
    # a second byte is needed when the field straddles bytes (k = 1, 2); it is always
    # inside the row's group then
    two = _cmp(e, "sgt", sh, 2)
    m2 = e.and_(mask, two)
    b1 = e.add(b0, 1)
    b1 = e.min(b1, nbytes - 1)
    hi = byte(b1, m2)
    hi = _sel(e, two, hi, _c(e, 0))
    word = _or(e, lo, _shl(e, hi, 8))
    return _and(e, _shr(e, word, sh), 0x3F)


# --------------------------------------------------------------------------- lowering


def lower_narrow_cast(lw: _FunctionLowering, op: g.CastOp) -> None:
    """Lower a ``tgraph.cast`` to or from fp8 / fp6 / fp4 (see the module docstring)."""
    src, dst = g.elem_of(op.input), g.elem_of(op.result)
    sfmt, dfmt = packed_format(src), packed_format(dst)
    for t in (src, dst):
        if not (isinstance(t, FP8 + PLAIN_FLOATS + (Float64Type,)) or packed_format(t)):
            raise NotImplementedError(
                f"lower-graph-to-tile: {op.name} has no Tile IR lowering (casts between {src} "
                f"and {dst}: narrow floats convert to and from f64/f32/f16/bf16/fp8/fp6/fp4)"
            )
    if isinstance(src, Float64Type) and (isinstance(dst, FP8) or dfmt is not None):
        raise NotImplementedError(
            f"lower-graph-to-tile: {op.name} has no Tile IR lowering (f64 to {dst} would round "
            "twice; cast to f32 first)"
        )
    shape = list(g.shape_of(op.result))
    in_t = op.input.type
    assert isinstance(in_t, TensorType)
    in_bytes = storage_memref(in_t).get_shape()[-1] if sfmt else 0
    out = lw.alloc(op.result.type)
    args = [out, lw.mem(op.input)]
    lw.env[op.result] = out

    def read(e: KernelEmitter, ref: SSAValue, idx: list[Idx], ok: SSAValue | None) -> SSAValue:
        """Element ``idx`` of the input, widened exactly (to f32 unless it is f64)."""
        if sfmt is not None:
            code = load_code(e, ref, idx[:-1], idx[-1], sfmt, in_bytes, ok)
            return dequantize(e, code, sfmt)
        v = e.load(ref, idx, mask=ok)
        return v if isinstance(src, Float64Type) else e.convert(v, f32)

    if dfmt is None:
        n = prod(shape)

        def build(e: KernelEmitter, a: list[SSAValue]) -> None:
            lin = e.linear_id()
            ok = e.lt(lin, n)
            idx = e.unravel(lin, shape)
            e.store(e.convert(read(e, a[1], idx, ok), dst), a[0], idx, mask=ok)

        lw.kernel("cast", args, NUMERIC_GROUP, [cdiv(n, NUMERIC_GROUP), 1, 1], build)
        return

    # packed result: one lane per byte group of an output row
    row = shape[-1]
    groups = cdiv(row, dfmt.group)
    outer = shape[:-1]
    total = prod(outer) * groups

    def build_packed(e: KernelEmitter, a: list[SSAValue]) -> None:
        lin = e.linear_id()
        ok = e.lt(lin, total)
        gi = e.rem(lin, groups)
        pre = e.unravel(e.div(lin, groups), outer) if outer else []
        word: SSAValue | None = None
        for k in range(dfmt.group):
            j = e.add(e.mul(gi, dfmt.group), k)
            inside = e.and_(ok, e.lt(j, row)) if row % dfmt.group else ok
            x = read(e, a[1], [*pre, j], inside)
            code = quantize(e, x, dfmt)
            if row % dfmt.group:
                assert inside is not None
                code = _sel(e, inside, code, _c(e, 0))
            part = _shl(e, code, dfmt.bits * k)
            word = part if word is None else _or(e, word, part)
        assert word is not None
        for b in range(dfmt.group_bytes):
            byte = e.op(arith.TruncIOp(_and(e, _shr(e, word, 8 * b), 0xFF), i8))
            col = e.add(e.mul(gi, dfmt.group_bytes), b)
            e.store(byte, a[0], [*pre, col], mask=ok)

    lw.kernel("cast", args, NUMERIC_GROUP, [cdiv(total, NUMERIC_GROUP), 1, 1], build_packed)
