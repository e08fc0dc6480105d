"""Tile IR for results whose numeric policy rounds: ``@stochastic_round``, ``@saturate``,
``@loss_scale``.

Used by ``lower-graph-to-tile`` for a ``tgraph.cast`` to such a policy and for any other
op whose result type carries one (the op is lowered into an f32 / f64 buffer first, then
stored through the policy, as the Graph IR interpreter's ``store`` does). The kernels
repeat :func:`tessera.numerics.cast_array`'s float64 program operation for operation, so
the results equal the CPU reference bit for bit:

1. the input is widened exactly to f64 (fp6/fp4 dequantized by integer arithmetic, fp8,
   f16, bf16 and f32 through ``arith.extf``) and multiplied by the loss scale (an
   explicit ``tgraph.cast`` only; one ``mul.rn.f64``, like numpy's);
2. the magnitude ``a`` (0 for Inf/NaN, clamped to the largest finite value under
   ``@saturate``) gets its neighbours on the target's grid: ``lo`` is ``a`` with its f64
   significand truncated at the target's last mantissa bit (``2**(max(E, emin) - mbits)``,
   the spacing, by an ``i64`` mask on the bits; subnormal targets included), ``hi = lo +
   spacing``; above the largest finite value the virtual neighbour ``max + ulp(max)``
   stands for overflow, as in :func:`tessera.numerics.rounding.round_narrow_float`;
3. stochastic rounding draws word 0 of Philox4x32-10 at counter ``offset + i`` (flat C
   index ``i``) under key ``seed`` (:class:`tessera.passes.tile_random.TileOps`) and
   rounds up iff ``word < (a - lo) / (hi - lo) * 2**32`` in f64; nearest-even compares
   ``a - lo`` with ``hi - a`` and breaks ties on the parity of ``lo``'s last bit;
4. the chosen neighbour (a value of the target, or the overflow marker) gets its sign
   back and is converted to the target by the plain nearest-even conversion, which is
   exact on the grid and applies the format's overflow rule to the marker (Inf, NaN or
   saturation); Inf and NaN inputs take that conversion directly (``@saturate`` turns
   Inf into the largest finite value first).

Other ops whose result carries such a policy (:func:`lower_with_policy`) and matmuls of
packed fp6/fp4 operands (:func:`lower_packed_matmul`) are lowered here too.

Float targets (f64, f32, f16, bf16, fp8, fp6, fp4) for every op; integer targets of 8 to
32 bits for casts (:func:`round_int_f64`: ``floor`` / ``floor + 1`` in f64, nearest-even or
stochastic, clamped, as :func:`tessera.numerics.rounding.round_integer`).
"""

from __future__ import annotations

import math as pymath
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import (
    Float64Type,
    IntegerType,
    TensorType,
    bf16,
    f32,
    f64,
    i8,
    i32,
)
from xdsl.ir import Attribute, Operation, SSAValue

from tessera.ir import graph as g
from tessera.ir.attrs import NumericPolicyAttr, rounds_specially
from tessera.ir.policy import NumericPolicy
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv, not_lowered
from tessera.passes.tile_numerics import (
    FP8,
    PLAIN_FLOATS,
    dequantize,
    load_code,
    lower_narrow_cast,
    packed_format,
    quantize,
    storage_memref,
)
from tessera.passes.tile_random import TileOps, i64

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

GROUP = 256
_MASK32 = 0xFFFFFFFF


def rounding_policy(t: Attribute) -> NumericPolicy | None:
    """The policy of tensor type ``t`` when storing into it does more than plain
    nearest-even rounding to the storage type (stochastic rounding, saturation or a
    loss scale), else None."""
    if not rounds_specially(t):
        return None
    assert isinstance(t, TensorType) and isinstance(t.encoding, NumericPolicyAttr)
    return t.encoding.to_policy()


@dataclass(frozen=True)
class Grid:
    """The representable magnitudes of a float target: ``mbits`` fraction bits, smallest
    normal exponent ``emin``, largest finite value and the spacing just below it."""

    mbits: int
    emin: int
    max_finite: float
    max_ulp: float

    @classmethod
    def of(cls, np_dtype: np.dtype) -> Grid:
        info = ml_dtypes.finfo(np_dtype)
        mx = float(info.max)
        mbits = int(info.nmant)
        return cls(mbits, int(info.minexp), mx, 2.0 ** (pymath.frexp(mx)[1] - 1 - mbits))


# --------------------------------------------------------------------------- scalar code


def _i(e: KernelEmitter, v: int) -> SSAValue:
    return e.const(v, i64)


def _f(e: KernelEmitter, v: float) -> SSAValue:
    return e.const(v, f64)


def _sel(e: KernelEmitter, c: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
    return e.op(arith.SelectOp(c, a, b))


def _cmpf(e: KernelEmitter, pred: str, a: SSAValue, b: SSAValue) -> SSAValue:
    return e.op(arith.CmpfOp(a, b, pred))


def _cmpi(e: KernelEmitter, pred: str, a: SSAValue, b: SSAValue) -> SSAValue:
    return e.op(arith.CmpiOp(a, b, pred))


def philox_word(e: KernelEmitter, seed: int, offset: int, i: SSAValue) -> SSAValue:
    """Word 0 of Philox4x32-10 at counter ``(offset + i) mod 2**64`` (``i`` an ``i64``
    flat index) under key ``seed``, as an ``i64`` in ``[0, 2**32)``: the stream of
    :func:`tessera.numerics.philox.uniform_bits`."""
    c = e.op(arith.AddiOp(i, _i(e, int(offset) & 0xFFFFFFFFFFFFFFFF)))
    c0 = e.op(arith.AndIOp(c, _i(e, _MASK32)))
    c1 = e.op(arith.ShRUIOp(c, _i(e, 32)))
    w = TileOps(e, seed, 0).philox([c0, c1, 0, 0])[0]
    return w if isinstance(w, SSAValue) else _i(e, w)


def round_f64(
    e: KernelEmitter, x: SSAValue, grid: Grid, *, saturate: bool, word: SSAValue | None
) -> SSAValue:
    """``x`` (f64) rounded to ``grid``: the signed neighbour ``cast_array`` picks, as f64
    (a value of the grid, or ``max + ulp(max)`` for overflow); Inf and NaN are returned
    as they are (Inf clamped to the largest finite value under ``saturate``).

    Nearest-even when ``word`` is None, else stochastic with that Philox word."""
    bits = e.op(arith.BitcastOp(x, i64))
    neg = _cmpi(e, "slt", bits, _i(e, 0))
    a = e.op(math.AbsFOp(x))
    finite = _cmpf(e, "olt", a, _f(e, pymath.inf))
    a = _sel(e, finite, a, _f(e, 0.0))
    if saturate:
        mx = _f(e, grid.max_finite)
        a = _sel(e, _cmpf(e, "ogt", a, mx), mx, a)
    top = _f(e, grid.max_finite + grid.max_ulp)
    a = _sel(e, _cmpf(e, "ogt", a, top), top, a)
    # lo: a truncated to the grid; c = the f64 fraction bits below the grid's spacing
    ab = e.op(arith.BitcastOp(a, i64))
    ex = e.op(arith.SubiOp(e.op(arith.ShRUIOp(ab, _i(e, 52))), _i(e, 1023)))
    emin = _i(e, grid.emin)
    eg = _sel(e, _cmpi(e, "slt", ex, emin), emin, ex)  # max(E, emin)
    c = e.op(arith.SubiOp(e.op(arith.AddiOp(eg, _i(e, 52 - grid.mbits))), ex))
    big = _cmpi(e, "sgt", c, _i(e, 52))
    cc = _sel(e, big, _i(e, 52), c)
    low = e.op(arith.SubiOp(e.op(arith.ShLIOp(_i(e, 1), cc)), _i(e, 1)))
    lo_bits = e.op(arith.AndIOp(ab, e.op(arith.XOrIOp(low, _i(e, -1)))))
    lo = _sel(e, big, _f(e, 0.0), e.op(arith.BitcastOp(lo_bits, f64)))
    k = e.op(arith.SubiOp(eg, _i(e, grid.mbits)))
    spacing = e.op(arith.BitcastOp(
        e.op(arith.ShLIOp(e.op(arith.AddiOp(k, _i(e, 1023))), _i(e, 52))), f64
    ))
    hi = e.op(arith.AddfOp(lo, spacing))
    if word is None:
        d_lo = e.op(arith.SubfOp(a, lo))
        d_hi = e.op(arith.SubfOp(hi, a))
        sig = e.op(arith.OrIOp(
            e.op(arith.AndIOp(ab, _i(e, (1 << 52) - 1))), _i(e, 1 << 52)
        ))
        odd_bit = e.op(arith.AndIOp(e.op(arith.ShRUIOp(sig, cc)), _i(e, 1)))
        odd = e.op(arith.AndIOp(
            _cmpi(e, "ne", odd_bit, _i(e, 0)), e.op(arith.XOrIOp(big, e.const(1, big.type)))
        ))
        tie = e.op(arith.AndIOp(_cmpf(e, "oeq", d_hi, d_lo), odd))
        up = e.op(arith.OrIOp(_cmpf(e, "olt", d_hi, d_lo), tie))
    else:
        p = e.op(arith.DivfOp(e.op(arith.SubfOp(a, lo)), e.op(arith.SubfOp(hi, lo))))
        p = _sel(e, _cmpf(e, "ogt", p, _f(e, 1.0)), _f(e, 1.0), p)
        w = e.op(arith.SIToFPOp(word, f64))
        up = _cmpf(e, "olt", w, e.op(arith.MulfOp(p, _f(e, 2.0**32))))
    up = e.op(arith.AndIOp(up, _cmpf(e, "one", a, lo)))
    mag = _sel(e, up, hi, lo)
    v = _sel(e, neg, e.op(arith.NegfOp(mag)), mag)
    special = x
    if saturate:
        mx = grid.max_finite
        clamped = _sel(e, neg, _f(e, -mx), _f(e, mx))
        is_inf = _cmpf(e, "oeq", e.op(math.AbsFOp(x)), _f(e, pymath.inf))
        special = _sel(e, is_inf, clamped, x)
    return _sel(e, finite, v, special)


# --------------------------------------------------------------------------- kernels


def check_target(op: Operation, p: NumericPolicy) -> None:
    """Refuse, naming ``op``, a rounding policy whose storage has no kernel rounding:
    integer storage is lowered for casts (8 to 32 bits), float storage for every op."""
    dt = p.storage
    if dt.kind == "float":
        return
    if isinstance(op, g.CastOp) and dt.kind == "int" and dt.np_dtype.itemsize <= 4:
        return
    raise not_lowered(
        op, f"a {p!r} result: stochastic rounding, saturation and loss scaling are lowered "
        "for float storage types, and for casts to integers of 8 to 32 bits"
    )


def round_int_f64(
    e: KernelEmitter, x: SSAValue, np_dtype: np.dtype, *, truncate: bool,
    word: SSAValue | None,
) -> SSAValue:
    """``x`` (f64) rounded to an integer as :func:`tessera.numerics.rounding.round_integer`
    does (NaN -> 0; ``floor(x)`` or ``floor(x) + 1``, nearest-even or stochastic with
    ``word``; or toward zero when ``truncate``, the plain float-to-integer cast), clamped
    to ``np_dtype``'s range; returned as f64 (an integer value)."""
    info = np.iinfo(np_dtype)
    x = _sel(e, _cmpf(e, "uno", x, x), _f(e, 0.0), x)
    big = _cmpf(e, "oge", e.op(math.AbsFOp(x)), _f(e, 2.0**53))  # integral already
    xs = _sel(e, big, _f(e, 0.0), x)
    ti = e.op(arith.FPToSIOp(xs, i64))
    t = e.op(arith.SIToFPOp(ti, f64))  # toward zero
    if truncate:
        r = _sel(e, big, x, t)
    else:
        below = _cmpf(e, "ogt", t, xs)
        fl = _sel(e, below, e.op(arith.SubfOp(t, _f(e, 1.0))), t)
        fl = _sel(e, big, x, fl)
        hi = e.op(arith.AddfOp(fl, _f(e, 1.0)))
        if word is None:
            d_lo = e.op(arith.SubfOp(x, fl))
            d_hi = e.op(arith.SubfOp(hi, x))
            fi = e.op(arith.FPToSIOp(_sel(e, big, _f(e, 0.0), fl), i64))
            odd = _cmpi(e, "ne", e.op(arith.AndIOp(fi, _i(e, 1))), _i(e, 0))
            tie = e.op(arith.AndIOp(_cmpf(e, "oeq", d_hi, d_lo), odd))
            up = e.op(arith.OrIOp(_cmpf(e, "olt", d_hi, d_lo), tie))
        else:
            p = e.op(arith.DivfOp(e.op(arith.SubfOp(x, fl)), e.op(arith.SubfOp(hi, fl))))
            p = _sel(e, _cmpf(e, "ogt", p, _f(e, 1.0)), _f(e, 1.0), p)
            w = e.op(arith.SIToFPOp(word, f64))
            up = _cmpf(e, "olt", w, e.op(arith.MulfOp(p, _f(e, 2.0**32))))
        up = e.op(arith.AndIOp(up, _cmpf(e, "one", x, fl)))
        r = _sel(e, up, hi, fl)
    lo_v, hi_v = _f(e, float(info.min)), _f(e, float(info.max))
    r = _sel(e, _cmpf(e, "olt", r, lo_v), lo_v, r)
    return _sel(e, _cmpf(e, "ogt", r, hi_v), hi_v, r)


def _widen(e: KernelEmitter, src: Attribute, ref: SSAValue, idx: list[Idx], ok: SSAValue,
           in_bytes: int) -> SSAValue:
    """Element ``idx`` of the input, widened exactly to f64."""
    sfmt = packed_format(src)
    if sfmt is not None:
        code = load_code(e, ref, idx[:-1], idx[-1], sfmt, in_bytes, ok)
        return e.convert(dequantize(e, code, sfmt), f64)
    v = e.load(ref, idx, mask=ok)
    if isinstance(src, FP8 + PLAIN_FLOATS):
        v = e.convert(v, f32)  # exact
    return e.convert(v, f64)  # exact (integers: sitofp, exact up to 2**53)


def _finish(e: KernelEmitter, v: SSAValue, dst: Attribute) -> SSAValue:
    """The f64 value ``v`` (on ``dst``'s grid, an overflow marker, Inf or NaN) converted
    to ``dst`` (f32 for packed targets, which :func:`quantize` then encodes)."""
    if isinstance(dst, Float64Type):
        return v
    v32 = e.convert(v, f32)
    if packed_format(dst) is not None or dst == f32:
        return v32
    return e.convert(v32, dst)


def lower_policy_store(
    lw: _FunctionLowering, op: Operation, src: SSAValue, src_type: TensorType,
    dst_type: TensorType, policy: NumericPolicy, seed: int, offset: int = 0,
) -> SSAValue:
    """Kernels storing the tensor held in ``src`` (of type ``src_type``) into a new buffer
    of ``dst_type`` under ``policy``; returns the buffer."""
    check_target(op, policy)
    src_el, dst_el = src_type.element_type, dst_type.element_type
    if isinstance(src_el, IntegerType) and src_el.width.data > 32:
        raise not_lowered(op, f"rounding {src_el} values to {policy!r}")
    to_int = isinstance(dst_el, IntegerType)
    grid = None if to_int else Grid.of(policy.storage.np_dtype)
    stochastic = policy.rounding == "stochastic" and not isinstance(dst_el, Float64Type)
    # a float-to-integer cast without a scale or stochastic rounding truncates first
    # (the interpreter's tgraph.cast); rounding an integer value is then the identity
    truncate = to_int and isinstance(op, g.CastOp) and scale_none(policy) and not stochastic
    scale = policy.loss_scale
    shape = list(src_type.get_shape())
    in_bytes = storage_memref(src_type).get_shape()[-1] if packed_format(src_el) else 0
    out = lw.alloc(dst_type)

    def value(e: KernelEmitter, ref: SSAValue, idx: list[Idx], lin: Idx,
              ok: SSAValue) -> SSAValue:
        x = _widen(e, src_el, ref, idx, ok, in_bytes)
        if scale is not None:
            x = e.op(arith.MulfOp(x, _f(e, scale)))
        if isinstance(dst_el, Float64Type):
            return round_f64_identity(e, x, policy.saturate)
        word = None
        if stochastic:
            word = philox_word(e, seed, offset, e.op(arith.IndexCastOp(e.index(lin), i64)))
        if grid is None:
            r = round_int_f64(e, x, policy.storage.np_dtype, truncate=truncate, word=word)
            return e.convert(e.op(arith.FPToSIOp(r, i32)), dst_el)
        return _finish(e, round_f64(e, x, grid, saturate=policy.saturate, word=word), dst_el)

    dfmt = packed_format(dst_el)
    if dfmt is None:
        n = pymath.prod(shape)

        def build(e: KernelEmitter, a: list[SSAValue]) -> None:
            lin = e.linear_id()
            ok = e.lt(lin, n)
            idx = e.unravel(lin, shape)
            e.store(value(e, a[1], idx, lin, ok), a[0], idx, mask=ok)

        lw.kernel("policy", [out, src], GROUP, [cdiv(n, GROUP), 1, 1], build)
        return out

    row = shape[-1]
    groups = cdiv(row, dfmt.group)
    outer = shape[:-1]
    total = pymath.prod(outer) * groups

    def build_packed(e: KernelEmitter, a: list[SSAValue]) -> None:
        lin = e.linear_id()
        ok = e.lt(lin, total)
        gi = e.rem(lin, groups)
        r = e.div(lin, groups)
        pre = e.unravel(r, outer) if outer else []
        word: SSAValue | None = None
        for k in range(dfmt.group):
            j = e.add(e.mul(gi, dfmt.group), k)
            inside = e.and_(ok, e.lt(j, row)) if row % dfmt.group else ok
            flat = e.add(e.mul(r, row), j)
            code = quantize(e, value(e, a[1], [*pre, j], flat, inside), dfmt)
            if row % dfmt.group:
                code = _sel(e, inside, code, e.const(0, i32))
            if k:
                code = e.op(arith.ShLIOp(code, e.const(dfmt.bits * k, i32)))
            word = code if word is None else e.op(arith.OrIOp(word, code))
        assert word is not None
        for b in range(dfmt.group_bytes):
            part = e.op(arith.ShRUIOp(word, e.const(8 * b, i32))) if b else word
            byte = e.op(arith.TruncIOp(e.op(arith.AndIOp(part, e.const(0xFF, i32))), i8))
            e.store(byte, a[0], [*pre, e.add(e.mul(gi, dfmt.group_bytes), b)], mask=ok)

    lw.kernel("policy", [out, src], GROUP, [cdiv(total, GROUP), 1, 1], build_packed)
    return out


def round_f64_identity(e: KernelEmitter, x: SSAValue, saturate: bool) -> SSAValue:
    """An f64 target: ``x`` itself; ``saturate`` turns +-Inf into +-max."""
    if not saturate:
        return x
    mx = float(np.finfo(np.float64).max)
    is_inf = _cmpf(e, "oeq", e.op(math.AbsFOp(x)), _f(e, pymath.inf))
    neg = _cmpf(e, "olt", x, _f(e, 0.0))
    clamped = _sel(e, neg, _f(e, -mx), _f(e, mx))
    return _sel(e, is_inf, clamped, x)


def lower_policy_cast(lw: _FunctionLowering, op: g.CastOp, policy: NumericPolicy) -> None:
    """A ``tgraph.cast`` to a rounding policy: scale, round (with the op's seed) and store."""
    in_t, out_t = op.input.type, op.result.type
    assert isinstance(in_t, TensorType) and isinstance(out_t, TensorType)
    seed = op.seed.value.data if op.seed is not None else 0
    lw.env[op.result] = lower_policy_store(lw, op, lw.mem(op.input), in_t, out_t, policy, seed)


def scale_none(policy: NumericPolicy) -> bool:
    """Whether ``policy`` has no loss scale."""
    return policy.loss_scale is None


def store_without_scale(policy: NumericPolicy) -> NumericPolicy:
    """The policy an op other than ``tgraph.cast`` stores with: its loss scale dropped
    (the interpreter scales only on an explicit cast)."""
    return replace(policy, loss_scale=None)


# --------------------------------------------------------------------------- other ops

MOVES = (g.ReshapeOp, g.TransposeOp, g.BroadcastOp, g.SliceOp, g.ConcatOp)
"""Ops that move values without computing: their results are the operands' stored values,
whatever the result's policy (the interpreter stores them as they are)."""
COMPUTES_WIDE = (
    g.ElementwiseBinaryOp, g.ElementwiseUnaryOp, g.SelectOp, g.MatmulOp, g.MatmulEpilogueOp,
    g.SumOp, g.MaxOp, g.MinOp, g.MeanOp,
)
"""Ops whose lowering computes in f32 (f64) and stores any float result type: a rounding
policy on their result is applied to that f32 (f64) value, as the interpreter does."""


def lower_with_policy(lw: _FunctionLowering, op: Operation, policy: NumericPolicy) -> None:
    """An op (not a cast) whose one result has a rounding policy: computed into an f32 (f64
    for f64 storage) buffer, then stored through the policy with seed 0 and no loss scale,
    as the Graph IR interpreter's ``store`` does; shape ops move their values unchanged."""
    rt = op.results[0].type
    assert isinstance(rt, TensorType)
    check_target(op, policy)
    if isinstance(op, MOVES):
        lw.lower_one(op)
        return
    if not isinstance(op, COMPUTES_WIDE):
        raise not_lowered(op, f"a {policy!r} result (stochastic rounding, saturation and "
                          "loss scaling are lowered for casts, elementwise ops, matmuls, "
                          "reductions and shape ops); cast the result to the policy instead")
    wide = f64 if policy.storage.np_dtype == np.float64 else f32
    tmp_t = TensorType(wide, rt.get_shape())
    (tmp,) = lw.lower_as(op, list(op.operands), [tmp_t])
    lw.env[op.results[0]] = lower_policy_store(
        lw, op, tmp, tmp_t, rt, store_without_scale(policy), seed=0
    )


def lower_packed_matmul(lw: _FunctionLowering, op: g.MatmulOp | g.MatmulEpilogueOp) -> None:
    """A matmul of packed fp6/fp4 operands (both of one format: the verifier's rule).

    The generic tensor-core GEMM unpacks them itself: its shared-memory tile fill reads
    each element's code from the packed bytes and dequantizes it into bf16
    (``tile_gemm``). When overrides take matmuls (the sm90 TMA + wgmma kernel, which loads
    tiles with TMA), each operand is first unpacked into a bf16 buffer by a cast kernel and
    the bf16 GEMM runs on those copies. Either way every fp6/fp4 value is exact in bf16
    and the accumulation is f32. A rounding policy on the result is applied by a store
    kernel after the GEMM."""
    temps: list[Operation] = []
    operands = list(op.operands)
    if lw.overrides.get(type(op)):
        for i, v in enumerate((op.lhs, op.rhs)):
            c = g.CastOp.create(operands=[v], result_types=[TensorType(bf16, g.shape_of(v))])
            temps.append(c)
            lower_narrow_cast(lw, c)
            operands[i] = c.results[0]
    try:
        pol = rounding_policy(op.result.type)
        if pol is None:
            (lw.env[op.result],) = lw.lower_as(op, operands, [op.result.type])
            return
        check_target(op, pol)
        rt = op.result.type
        assert isinstance(rt, TensorType)
        tmp_t = TensorType(f32, rt.get_shape())
        (tmp,) = lw.lower_as(op, operands, [tmp_t])
        lw.env[op.result] = lower_policy_store(
            lw, op, tmp, tmp_t, rt, store_without_scale(pol), seed=0
        )
    finally:
        for c in temps:
            c.erase(safe_erase=False)
