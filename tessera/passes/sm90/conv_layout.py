"""The operand copies of the implicit-GEMM convolution, as Target IR kernels.

Both index in 32 bits with compile-time divisors (``ptxas`` turns ``div.u32`` by an
immediate into a multiply), which the generic Tile IR copies (64-bit ``index``
arithmetic) do not:

* :func:`nhwc_kernel`: ``xt[n, p, c] = x[n, c, p]`` (``p = h*W + w``), channels
  zero-padded to ``Cp``. A CTA of 256 threads moves a tile of 64 pixels x 128 bytes of
  channels (64 16-bit or 32 f32): each thread issues its loads (lanes along the pixels)
  before it writes them to shared memory, a tile row per pixel of 128 bytes with the
  16-byte chunks swizzled (chunk ``g`` of pixel ``p`` at ``g ^ (p % 8)``); then each
  thread reads two 16-byte vectors and stores them with ``st.global.v4`` (8 lanes
  write a pixel's 128 contiguous bytes).
* :func:`weight_kernel`: ``wk[o, (i*kw + j)*Cp + c] = w[o, c, i, j]`` (0 for ``c >= C``),
  one element per thread.

f32 operands are written as the TF32 parts the 3xTF32 (or, with ``allow_tf32``, the one
TF32) product reads: ``hi = tf32(x)`` and ``lo = tf32(x - hi)`` in two planes (the
rounding of :mod:`tessera.passes.sm90.split_tf32`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.ir import SSAValue

from tessera.ir import target as tt
from tessera.passes.sm90 import builders
from tessera.passes.sm90.asm import TargetAsm
from tessera.passes.sm90.split_tf32 import KEEP_MASK, ROUND_BIAS
from tessera.passes.tile_builder import cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

THREADS = 256
PIXELS = 64
"""Pixels of one NHWC-copy tile (its channels fill a 128-byte row: 64 16-bit or 32 f32)."""
ROW_BYTES = 128
NHWC_SMEM = PIXELS * ROW_BYTES + 1024
"""Dynamic shared memory of the NHWC copy: the tile and 1 KiB for alignment."""


def tile_channels(eb: int) -> int:
    return ROW_BYTES // eb


def nhwc_grid(n: int, c: int, p: int, cp: int, eb: int = 2) -> int:
    return n * cdiv(p, PIXELS) * cdiv(cp, tile_channels(eb))


def tf32_parts(e: TargetAsm, word: SSAValue, parts: int) -> list[SSAValue]:
    """``[hi]`` or ``[hi, lo]`` (b32 registers) of the f32 bits ``word``: ``hi`` rounded to
    TF32 (nearest, ties away: ``(bits + 0x1000) & ~0x1fff``), ``lo = tf32(x - hi)``, as
    :mod:`tessera.passes.sm90.split_tf32` computes them."""

    def rnd(bits: SSAValue) -> SSAValue:
        return e.bin(tt.AndOp, "b32", e.add32(bits, ROUND_BIAS), KEEP_MASK & 0xFFFFFFFF)

    hi = rnd(word)
    if parts == 1:
        return [hi]
    x, h, d, db = e.reg("f32"), e.reg("f32"), e.reg("f32"), e.reg("b32")
    e.add(tt.MovOp("b32", x, word))
    e.add(tt.MovOp("b32", h, hi))
    e.add(tt.SubOp("rn.f32", d, x, h))
    e.add(tt.MovOp("b32", db, d))
    return [hi, rnd(db)]


def nhwc_kernel(
    name: str, n: int, c: int, p: int, cp: int, eb: int = 2, parts: int = 1,
    swapped: bool = False,
) -> tt.FuncOp:
    """The ``ttarget.func`` ``(xt, x)`` of the NHWC copy (module docstring) for ``x`` of
    ``[n, c, p]`` elements of ``eb`` bytes; one CTA per tile, :func:`nhwc_grid` of them.
    f32 (``eb = 4``) is written as TF32 ``parts``: ``[parts, n, p, cp]``, hi then lo.
    ``swapped``: ``x`` is stored ``[c, n, p]`` (the source of a batch-channel transpose,
    read in place of the transposed copy)."""
    func = tt.FuncOp(name, ["u64", "u64"], THREADS)
    out_param, x_param = func.block.args
    e = TargetAsm(func)
    tid, bid, sbase = builders.shared_base(e)
    tch = tile_channels(eb)
    cpe = 16 // eb  # channels per 16-byte chunk
    bits = "b16" if eb == 2 else "b32"
    tp, tc = cdiv(p, PIXELS), cdiv(cp, tch)
    img, rest = e.bin(tt.DivOp, "u32", bid, tp * tc), e.bin(tt.RemOp, "u32", bid, tp * tc)
    p0 = e.mul32(e.bin(tt.DivOp, "u32", rest, tc), PIXELS)
    c0 = e.mul32(e.bin(tt.RemOp, "u32", rest, tc), tch)
    xptr = builders.global_pointer(e, x_param)
    optr = builders.global_pointer(e, out_param)

    # read: thread (pixel pl, channel row cr) loads channels cr + 4k
    pl, cr = e.bin(tt.AndOp, "b32", tid, PIXELS - 1), e.bin(tt.ShrOp, "u32", tid, 6)
    pix = e.add32(p0, pl)
    okp = e.setp("lt", pix, p)
    lim = e.bin(tt.SubOp, "u32", c, c0)  # channels of this tile that exist (c0 < C)
    src = e.reg("b64")
    # x[img, ch, pix] at img * stride_n + ch * stride_c + pix
    stride_n, stride_c = (p, n * p) if swapped else (c * p, p)
    first = e.add32(e.mad32(img, stride_n, e.mul32(e.add32(c0, cr), stride_c)), pix)
    e.add(tt.MulOp("wide.u32", src, first, e.imm(eb)))
    e.add(tt.AddOp("u64", src, src, xptr))
    vals = []
    for k in range(tch // 4):
        v = e.reg(bits)
        e.mov(bits, v, 0)
        ok = e.reg("pred")
        e.add(tt.AndOp("pred", ok, okp, e.setp("lt", e.add32(cr, 4 * k), lim)))
        e.add(tt.LdOp(f"global.{bits}", [v], src, 4 * k * stride_c * eb, ok))
        vals.append(v)
    # shared: pixel pl's row; channel cr + 4k in chunk 4k // cpe (swizzled: chunk g of
    # pixel r at g ^ (r % 8)), element 4k % cpe + cr of the chunk
    row = e.add32(sbase, e.add32(e.mul32(pl, ROW_BYTES), e.mul32(cr, eb)))
    pswz = e.bin(tt.AndOp, "b32", pl, 7)
    chunks: dict[int, SSAValue] = {}
    for k, v in enumerate(vals):
        g = 4 * k // cpe
        if g not in chunks:
            chunks[g] = e.add32(row, e.mul32(e.bin(tt.XorOp, "b32", pswz, g), 16))
        e.add(tt.StOp(f"shared.{bits}", chunks[g], [v], (4 * k % cpe) * eb))
    e.add(tt.BarSyncOp(0))

    # write: thread (chunk g, pixel pr + 32 v) stores that pixel's 16 bytes of chunk g
    g_ = e.bin(tt.AndOp, "b32", tid, 7)
    pr = e.bin(tt.ShrOp, "u32", tid, 3)
    chan = e.add32(c0, e.mul32(g_, cpe))
    okc = e.setp("lt", chan, cp)
    sw = e.mul32(e.bin(tt.XorOp, "b32", g_, e.bin(tt.AndOp, "b32", pr, 7)), 16)
    plane = n * p * cp * eb
    for v in range(PIXELS // 32):
        prv = e.add32(pr, 32 * v) if v else pr
        words = [e.reg("b32") for _ in range(4)]
        e.add(tt.LdOp("shared.v4.b32", words, e.add32(sbase, e.mad32(prv, ROW_BYTES, sw))))
        pixv = e.add32(p0, prv)
        ok = e.reg("pred")
        e.add(tt.AndOp("pred", ok, okc, e.setp("lt", pixv, p)))
        dst = e.reg("b64")
        e.add(tt.MulOp("wide.u32", dst, e.mad32(e.mad32(img, p, pixv), cp, chan), e.imm(eb)))
        e.add(tt.AddOp("u64", dst, dst, optr))
        if eb == 2:
            e.add(tt.StOp("global.v4.b32", dst, words, 0, ok))
            continue
        split = [tf32_parts(e, wd, parts) for wd in words]
        for part in range(parts):
            e.add(tt.StOp("global.v4.b32", dst, [sp[part] for sp in split], part * plane, ok))
    e.add(tt.RetOp())
    return func


def weight_grid(o: int, k: int) -> int:
    return cdiv(o * k, THREADS)


def weight_kernel(
    name: str, o: int, c: int, kh: int, kw: int, cp: int, eb: int = 2, parts: int = 1,
    kwp: int = 0, flip: bool = False, swapped: bool = False,
) -> tt.FuncOp:
    """The ``ttarget.func`` ``(wk, w)`` of the weight reorder (module docstring); one
    element per thread, :func:`weight_grid` CTAs. f32 is written as TF32 ``parts``
    (``[parts, o, K]``, as :func:`nhwc_kernel`). ``kwp > kw``: each filter row is
    zero-padded to ``kwp`` taps (``wk[o, (i*kwp + j)*cp + c]``, a packed gather's K).
    ``flip``: the convolution's weight is ``w`` with its taps reversed, read as
    ``w[o, c, kh-1-i, kw-1-j]`` (an input gradient's kernel: no flipped copy);
    ``swapped``: ``w`` is stored ``[C, O, kh, kw]`` (``w[c, o, ...]``, the forward
    weight of an input gradient: no transposed copy)."""
    func = tt.FuncOp(name, ["u64", "u64"], THREADS)
    out_param, w_param = func.block.args
    e = TargetAsm(func)
    kwp = max(kwp, kw)
    k = kh * kwp * cp
    lin = e.mad32(e.sreg("ctaid.x"), THREADS, e.sreg("tid.x"))
    ok = e.setp("lt", lin, o * k)
    oi, col = e.bin(tt.DivOp, "u32", lin, k), e.bin(tt.RemOp, "u32", lin, k)
    tap, ci = e.bin(tt.DivOp, "u32", col, cp), e.bin(tt.RemOp, "u32", col, cp)
    inside = e.reg("pred")
    e.add(tt.AndOp("pred", inside, ok, e.setp("lt", ci, c)))
    if kwp != kw:  # tap i*kwp + j: j past the filter row is a zero
        fi, fj = e.bin(tt.DivOp, "u32", tap, kwp), e.bin(tt.RemOp, "u32", tap, kwp)
        e.add(tt.AndOp("pred", inside, inside, e.setp("lt", fj, kw)))
        tap = e.mad32(fi, kw, fj)
    if flip:  # tap (kh-1-i)*kw + kw-1-j = kh*kw - 1 - tap
        tap = e.bin(tt.SubOp, "u32", kh * kw - 1, tap)
    row = e.mad32(ci, o, oi) if swapped else e.mad32(oi, c, ci)
    src_i = e.mad32(row, kh * kw, tap)  # w[o, c, i, j], i*kw + j = tap
    copy_element(e, w_param, src_i, inside, out_param, lin, ok, eb, parts, o * k)
    e.add(tt.RetOp())
    return func


def copy_element(
    e: TargetAsm, w_param: SSAValue, src_i: SSAValue, inside: SSAValue, out_param: SSAValue,
    lin: SSAValue, ok: SSAValue, eb: int, parts: int, part_elems: int,
) -> None:
    """Weight element ``src_i`` (zero where ``inside`` is false) to element ``lin`` of the
    relaid-out weight (where ``ok``): as it is for 16-bit elements, else its ``parts``
    TF32 parts (:func:`tf32_parts`), ``part_elems`` elements apart."""
    bits = "b16" if eb == 2 else "b32"
    src = e.reg("b64")
    e.add(tt.MulOp("wide.u32", src, src_i, e.imm(eb)))
    e.add(tt.AddOp("u64", src, src, builders.global_pointer(e, w_param)))
    v = e.reg(bits)
    e.mov(bits, v, 0)
    e.add(tt.LdOp(f"global.{bits}", [v], src, 0, inside))
    dst = e.reg("b64")
    e.add(tt.MulOp("wide.u32", dst, lin, e.imm(eb)))
    e.add(tt.AddOp("u64", dst, dst, builders.global_pointer(e, out_param)))
    vals = [v] if eb == 2 else tf32_parts(e, v, parts)
    for part, pv in enumerate(vals):
        e.add(tt.StOp(f"global.{bits}", dst, [pv], part * part_elems * eb, ok))


def launch(lw: _FunctionLowering, name: str, args: list[SSAValue], grid: int, smem: int) -> None:
    """Launch kernel ``name`` (added by ``lw.named_kernel``) on ``args``."""
    lw.hb.add_op(tt.LaunchExOp(name, args, (grid, 1, 1), smem, [0, 0] * len(args)))
