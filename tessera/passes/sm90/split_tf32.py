"""K-major TF32 copies of f32 matmul operands: the pre-pass of the TF32 wgmma kernels.

tf32 wgmma reads both operands K-major from shared memory, and takes only the top
19 bits of each 32-bit element. :func:`split_tf32` writes an operand as the kernel
reads it: a ``[parts, rows, Kp]`` f32 buffer (``rows`` the operand's M or N, times
its batch; ``Kp`` = K rounded up to 4 elements, the 16-byte TMA row stride, padded
with zeros) holding

* ``parts = 1``: ``hi = tf32(x)``, each element rounded to TF32 (10-bit mantissa,
  nearest, ties away from zero: ``cvt.rna.tf32.f32``'s rounding);
* ``parts = 2``: ``hi`` and ``lo = tf32(x - hi)`` (``x - hi`` is exact in f32). The
  3xTF32 product ``A B ~ A_lo B_hi + A_hi B_lo + A_hi B_hi`` then keeps about 22 bits of
  each operand (CUTLASS's error-compensated "3xTF32" method); the dropped
  ``A_lo B_lo`` is below ``2^-22`` of each product.

The rounding is integer arithmetic on the bits (``(bits + 0x1000) & ~0x1fff``): exact
for finite values, infinities stay infinite, and a NaN stays a NaN unless its payload
lies only in the 13 dropped bits (then it becomes an infinity of its sign, and its lo
part is NaN, so the product is NaN either way).

An operand stored ``[.., K, rows]`` (MN-major: ``x @ w``'s ``w``, ``a.T @ b``'s ``a``) is
transposed on the way through shared memory (``32 x 32`` tiles, reads and writes
coalesced); a K-major one (``[.., rows, K]``) is copied element by element.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from xdsl.dialects import arith
from xdsl.dialects.builtin import Float32Type, IntegerAttr, TensorType, f32, i32
from xdsl.ir import SSAValue

from tessera.ir import tile as tl
from tessera.passes.tile_builder import KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

TILE = 32
GROUP = 256
ROUND_BIAS = 0x1000
"""Half of the last kept mantissa bit of a TF32 value (bit 13)."""
KEEP_MASK = -0x2000
"""``0xffffe000`` as a signed 32-bit integer: sign, exponent and the top 10 mantissa bits."""


def padded_k(k: int) -> int:
    """K rounded up to a whole 16-byte row of f32 elements (the TMA row-stride unit)."""
    return cdiv(k, 4) * 4


def round_tf32(e: KernelEmitter, x: SSAValue) -> SSAValue:
    """``x`` (f32) rounded to the nearest TF32 value, ties away from zero."""
    bits = e.op(arith.BitcastOp(x, i32))
    bias = e.op(arith.ConstantOp(IntegerAttr(ROUND_BIAS, i32)))
    keep = e.op(arith.ConstantOp(IntegerAttr(KEEP_MASK, i32)))
    rounded = e.op(arith.AndIOp(e.op(arith.AddiOp(bits, bias)), keep))
    return e.op(arith.BitcastOp(rounded, f32))


def split(e: KernelEmitter, x: SSAValue, parts: int) -> list[SSAValue]:
    """``[hi]`` or ``[hi, lo]`` of ``x`` (module docstring)."""
    hi = round_tf32(e, x)
    if parts == 1:
        return [hi]
    return [hi, round_tf32(e, e.fsub(x, hi))]


def split_tf32(
    lw: _FunctionLowering, src: SSAValue, shape: Sequence[int], transposed: bool, parts: int,
) -> SSAValue:
    """A new ``[parts, batch * rows, Kp]`` f32 buffer of the f32 operand ``src`` of
    ``shape`` (``[batch.., rows, K]``, or ``[batch.., K, rows]`` when ``transposed``)."""
    if parts not in (1, 2):
        raise ValueError(f"split_tf32: parts must be 1 or 2, got {parts}")
    *batch, r0, c0 = shape
    rows, k = (c0, r0) if transposed else (r0, c0)
    kp = padded_k(k)
    nb = math.prod(batch)
    dst = lw.alloc(TensorType(Float32Type(), [parts, nb * rows, kp]))
    zero = 0.0

    if not transposed:
        total = nb * rows * kp

        def build(e: KernelEmitter, args: list[SSAValue]) -> None:
            out, inp = args
            lin = e.linear_id()
            ok = e.lt(lin, total)
            row, col = e.div(lin, kp), e.rem(lin, kp)
            inside = e.and_(ok, e.lt(col, k)) if kp != k else ok
            sidx = [*e.unravel(row, [*batch, rows]), col]
            sidx = [e.select(inside, i, 0) if not isinstance(i, int) else i for i in sidx]
            x = e.load(inp, sidx, mask=inside, other=e.const(zero, f32))
            for p, v in enumerate(split(e, x, parts)):
                e.store(v, out, [p, e.select(ok, row, 0), e.select(ok, col, 0)], mask=ok)

        lw.kernel("split_tf32", [dst, src], GROUP, [cdiv(total, GROUP), 1, 1], build)
        return dst

    def build_t(e: KernelEmitter, args: list[SSAValue]) -> None:
        out, inp = args
        lane = e.local_id()
        ty, tx = e.div(lane, TILE), e.rem(lane, TILE)
        rt = e.mul(e.tile_id("x"), TILE)  # this tile's first row of the result (M or N)
        kt = e.mul(e.tile_id("y"), TILE)  # and its first K
        bz = e.tile_id("z") if nb > 1 else 0
        bidx = e.unravel(bz, batch) if batch else []
        tile = e.op(tl.AllocSharedOp([TILE, TILE + 1], f32))
        step = GROUP // TILE
        for i in range(TILE // step):  # read along the source rows (K): r contiguous
            kk = e.add(kt, e.add(ty, step * i))
            r = e.add(rt, tx)
            ok = e.and_(e.lt(kk, k), e.lt(r, rows))
            v = e.load(inp, [*bidx, e.select(ok, kk, 0), e.select(ok, r, 0)], mask=ok,
                       other=e.const(zero, f32))
            e.store(v, tile, [e.add(ty, step * i), tx])
        e.barrier()
        for i in range(TILE // step):  # write along the result rows (K contiguous)
            r = e.add(rt, e.add(ty, step * i))
            kk = e.add(kt, tx)
            ok = e.and_(e.lt(r, rows), e.lt(kk, kp))
            x = e.load(tile, [tx, e.add(ty, step * i)])
            row = e.add(e.mul(bz, rows), r)
            for p, v in enumerate(split(e, x, parts)):
                e.store(v, out, [p, e.select(ok, row, 0), e.select(ok, kk, 0)], mask=ok)

    lw.kernel("split_tf32", [dst, src], GROUP, [cdiv(rows, TILE), cdiv(kp, TILE), nb], build_t)
    return dst
