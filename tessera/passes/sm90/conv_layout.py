"""The operand copies of the implicit-GEMM convolution, as Target IR kernels.

Both index in 32 bits with compile-time divisors (``ptxas`` turns ``div.u32`` by an
immediate into a multiply), which the generic Tile IR copies (64-bit ``index``
arithmetic) do not:

* :func:`nhwc_kernel`: ``xt[n, p, c] = x[n, c, p]`` (``p = h*W + w``), channels
  zero-padded to ``Cp``. A CTA of 256 threads moves a tile of 64 pixels x 64 channels:
  each thread issues its 16 loads (lanes along the pixels: 64 contiguous bytes per
  warp) before it writes them to shared memory, a tile row per pixel of 128 bytes with
  the 16-byte chunks swizzled (chunk ``g`` of pixel ``p`` at ``g ^ (p % 8)``); then
  each thread reads two 16-byte vectors of 8 channels and stores them with
  ``st.global.v4`` (8 lanes write a pixel's 128 contiguous bytes).
* :func:`weight_kernel`: ``wk[o, (i*kw + j)*Cp + c] = w[o, c, i, j]`` (0 for ``c >= C``),
  one element per thread.
"""

from __future__ import annotations

from xdsl.ir import SSAValue

from tessera.ir import target as tt
from tessera.passes.sm90 import builders
from tessera.passes.sm90.asm import TargetAsm
from tessera.passes.tile_builder import cdiv

THREADS = 256
TILE = 64
"""Pixels and channels of one NHWC-copy tile."""
ROW_BYTES = TILE * 2
NHWC_SMEM = TILE * ROW_BYTES + 1024
"""Dynamic shared memory of the NHWC copy: the tile and 1 KiB for alignment."""


def nhwc_grid(n: int, c: int, p: int, cp: int) -> int:
    return n * cdiv(p, TILE) * cdiv(cp, TILE)


def nhwc_kernel(name: str, n: int, c: int, p: int, cp: int) -> tt.FuncOp:
    """The ``ttarget.func`` ``(xt, x)`` of the NHWC copy (module docstring) for ``x`` of
    ``[n, c, p]`` 16-bit elements; one CTA per tile, :func:`nhwc_grid` of them."""
    func = tt.FuncOp(name, ["u64", "u64"], THREADS)
    out_param, x_param = func.block.args
    e = TargetAsm(func)
    tid, bid, sbase = builders.shared_base(e)
    tp, tc = cdiv(p, TILE), cdiv(cp, TILE)
    img, rest = e.bin(tt.DivOp, "u32", bid, tp * tc), e.bin(tt.RemOp, "u32", bid, tp * tc)
    p0 = e.mul32(e.bin(tt.DivOp, "u32", rest, tc), TILE)
    c0 = e.mul32(e.bin(tt.RemOp, "u32", rest, tc), TILE)
    xptr = builders.global_pointer(e, x_param)
    optr = builders.global_pointer(e, out_param)

    # read: thread (pixel pl, channel row cr) loads channels cr + 4k, k < 16
    pl, cr = e.bin(tt.AndOp, "b32", tid, TILE - 1), e.bin(tt.ShrOp, "u32", tid, 6)
    pix = e.add32(p0, pl)
    okp = e.setp("lt", pix, p)
    lim = e.bin(tt.SubOp, "u32", c, c0)  # channels of this tile that exist (c0 < C)
    src = e.reg("b64")
    first = e.mad32(e.mad32(img, c, e.add32(c0, cr)), p, pix)
    e.add(tt.MulOp("wide.u32", src, first, e.imm(2)))
    e.add(tt.AddOp("u64", src, src, xptr))
    vals = []
    for k in range(TILE // 4):
        v = e.reg("b16")
        e.mov("b16", v, 0)
        ok = e.reg("pred")
        e.add(tt.AndOp("pred", ok, okp, e.setp("lt", e.add32(cr, 4 * k), lim)))
        e.add(tt.LdOp("global.b16", [v], src, 4 * k * p * 2, ok))
        vals.append(v)
    # shared: pixel pl's row, channel cr + 4k in chunk k // 2 (swizzled), element cr + 4 (k % 2)
    row = e.add32(sbase, e.add32(e.mul32(pl, ROW_BYTES), e.mul32(cr, 2)))
    pswz = e.bin(tt.AndOp, "b32", pl, 7)
    for g in range(TILE // 8):
        addr = e.add32(row, e.mul32(e.bin(tt.XorOp, "b32", pswz, g), 16))
        for half in (0, 1):
            e.add(tt.StOp("shared.b16", addr, [vals[2 * g + half]], 8 * half))
    e.add(tt.BarSyncOp(0))

    # write: thread (chunk g, pixel pr + 32 v) stores channels 8g..8g+7 of that pixel
    g_ = e.bin(tt.AndOp, "b32", tid, 7)
    pr = e.bin(tt.ShrOp, "u32", tid, 3)
    chan = e.add32(c0, e.mul32(g_, 8))
    okc = e.setp("lt", chan, cp)
    sw = e.mul32(e.bin(tt.XorOp, "b32", g_, e.bin(tt.AndOp, "b32", pr, 7)), 16)
    for v in range(TILE // 32):
        prv = e.add32(pr, 32 * v) if v else pr
        words = [e.reg("b32") for _ in range(4)]
        e.add(tt.LdOp("shared.v4.b32", words, e.add32(sbase, e.mad32(prv, ROW_BYTES, sw))))
        pixv = e.add32(p0, prv)
        ok = e.reg("pred")
        e.add(tt.AndOp("pred", ok, okc, e.setp("lt", pixv, p)))
        dst = e.reg("b64")
        e.add(tt.MulOp("wide.u32", dst, e.mad32(e.mad32(img, p, pixv), cp, chan), e.imm(2)))
        e.add(tt.AddOp("u64", dst, dst, optr))
        e.add(tt.StOp("global.v4.b32", dst, words, 0, ok))
    e.add(tt.RetOp())
    return func


def weight_grid(o: int, k: int) -> int:
    return cdiv(o * k, THREADS)


def weight_kernel(name: str, o: int, c: int, kh: int, kw: int, cp: int) -> tt.FuncOp:
    """The ``ttarget.func`` ``(wk, w)`` of the weight reorder (module docstring); one
    element per thread, :func:`weight_grid` CTAs."""
    func = tt.FuncOp(name, ["u64", "u64"], THREADS)
    out_param, w_param = func.block.args
    e = TargetAsm(func)
    k = kh * kw * cp
    lin = e.mad32(e.sreg("ctaid.x"), THREADS, e.sreg("tid.x"))
    ok = e.setp("lt", lin, o * k)
    oi, col = e.bin(tt.DivOp, "u32", lin, k), e.bin(tt.RemOp, "u32", lin, k)
    tap, ci = e.bin(tt.DivOp, "u32", col, cp), e.bin(tt.RemOp, "u32", col, cp)
    inside = e.reg("pred")
    e.add(tt.AndOp("pred", inside, ok, e.setp("lt", ci, c)))
    src_i = e.mad32(e.mad32(oi, c, ci), kh * kw, tap)  # w[o, c, i, j], i*kw + j = tap
    src = e.reg("b64")
    e.add(tt.MulOp("wide.u32", src, src_i, e.imm(2)))
    e.add(tt.AddOp("u64", src, src, builders.global_pointer(e, w_param)))
    v = e.reg("b16")
    e.mov("b16", v, 0)
    e.add(tt.LdOp("global.b16", [v], src, 0, inside))
    dst = e.reg("b64")
    e.add(tt.MulOp("wide.u32", dst, lin, e.imm(2)))
    e.add(tt.AddOp("u64", dst, dst, builders.global_pointer(e, out_param)))
    e.add(tt.StOp("global.b16", dst, [v], 0, ok))
    e.add(tt.RetOp())
    return func


def launch(lw, func: tt.FuncOp, args: list[SSAValue], grid: int, smem: int) -> None:
    """Insert ``func`` before the lowered function and launch it on ``args``."""
    lw.module.body.block.insert_op_before(func, lw.fn)
    lw.hb.add_op(tt.LaunchExOp(func.sym_name.data, args, (grid, 1, 1), smem,
                               [0, 0] * len(args)))
