"""``tgraph.conv2d`` as a GEMM: an im2col buffer, one wgmma (or FMA) GEMM, one NCHW store.

With ``implicit_conv`` (``CompileOptions``, on by default) :func:`lower_conv2d_sm90` first
tries a pointwise convolution as one batched GEMM on views of its buffers
(:func:`conv1x1_eligible`), then the implicit GEMM
(:mod:`tessera.passes.sm90.conv_implicit`, no im2col buffer); what neither takes, or
everything with ``TESSERA_IMPLICIT_CONV=0``, goes the way described below.

For bf16/f16 operands, ``lower-matmul-sm90`` lowers ``y = conv2d(x, w) (+ bias)`` with
``x: [N, C, H, W]``, ``w: [O, C, kh, kw]``, ``y: [N, O, Ho, Wo]`` as three kernels:

1. **im2col**: ``cols[(n, ho, wo), (c, i, j)] = x[n, c, ho*sh + i - ph, wo*sw + j - pw]``
   (zero in the padding), a ``[N*Ho*Wo, Kp]`` row-major buffer whose ``K = C*kh*kw``
   columns are padded with zeros to ``Kp``, a multiple of 8 (16-byte TMA rows). One tile
   per output row ``(n, ho)``: lanes own columns (consecutive lanes, consecutive columns:
   coalesced stores) and walk ``wo``, so no lane divides per element.
2. **GEMM** ``cols @ w2.T`` on the Hopper kernel (:mod:`tessera.passes.sm90.lower_matmul_sm90`)
   with the weight as the K-major B operand: ``w`` seen as ``[O, C*kh*kw]`` is
   ``nn.Linear``'s layout, copied first into a 2-D ``[O, Kp]`` buffer (zero-padded
   columns; the weight is small). The product ``[N*Ho*Wo, O]`` is f32.
3. **NCHW store**: ``y[n, o, ho, wo] = round(prod[(n, ho, wo), o] + bias[o])``, one tile per
   output row ``(n, o, ho)`` with lanes along ``wo`` (coalesced stores), the bias added in
   f32 and the sum rounded once to the result type, as the generic direct convolution
   does.

The products are exact in f32 and summed by the tensor cores in f32, so results match
the direct kernel to f32 rounding. Taken when O is a multiple of 8 (the product's TMA row
stride); other convolutions keep the direct kernel (``tessera.passes.tile_conv``).

f32 convolutions take the same im2col and store kernels around the FMA GEMM
(:func:`tessera.passes.tile_gemm.fma_matmul_2d`, 8 x 8 results per lane) instead of the
direct kernel's one output per lane; the Tile IR interpreter runs that path on the CPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, TensorType, f32
from xdsl.ir import SSAValue

from tessera.ir import graph as g
from tessera.ir import target as tt
from tessera.passes.matmul_config import sm90_config
from tessera.passes.sm90.conv_implicit import grouped, lower_conv2d_implicit
from tessera.passes.tile_builder import KernelEmitter, cdiv
from tessera.passes.tile_gemm import fma_matmul_2d

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

GROUP = 256
"""Lanes per tile of the im2col and weight-padding kernels."""
STORE_GROUP = 64
"""Lanes per tile of the NCHW store (one tile per output row of ``Wo`` elements)."""


def conv_eligible(op: g.Conv2dOp) -> str | None:
    """None if the sm90 path takes ``op``, else why not."""
    if (why := grouped(op)) is not None:
        return why
    et = g.elem_of(op.input)
    if isinstance(et, Float32Type):
        return None  # im2col + the FMA GEMM (no TMA row-stride constraint)
    if not isinstance(et, BFloat16Type | Float16Type):
        return "operands are not f32, bf16 or f16"
    o = g.shape_of(op.weight)[0]
    if o % 8:
        return f"{o} output channels: the product's rows need a multiple of 8"
    if min(g.shape_of(op.result)) < 1 or min(g.shape_of(op.input)) < 1:
        return "empty dimension"
    return None


def conv1x1_eligible(op: g.Conv2dOp) -> str | None:
    """None if ``op`` is a pointwise convolution the batched sm90 GEMM takes as it is
    stored, else why not: ``y[n] (O x HW) = w (O x C) @ x[n] (C x HW)``, the weight the
    K-major A (broadcast over the batch), ``x[n]`` the N-major B, ``y`` stored by TMA."""
    if (why := grouped(op)) is not None:
        return why
    et = g.elem_of(op.input)
    if not isinstance(et, BFloat16Type | Float16Type):
        return "operands are not bf16 or f16"
    n, c, h, w = g.shape_of(op.input)
    o, _, kh, kw = g.shape_of(op.weight)
    if (kh, kw) != (1, 1) or tuple(op.stride.get_values()) != (1, 1) or any(
            op.padding.get_values()):
        return "not a 1x1 convolution with stride 1 and no padding"
    if op.bias is not None:
        return "a bias (the GEMM epilogue adds row vectors over the pixels only)"
    if o % 64 or c % 64:
        return f"O = {o} and C = {c} must be multiples of 64 (batched tiles)"
    if (h * w) % 8:
        return f"H*W = {h * w} is no multiple of 8 (16-byte TMA rows)"
    if min(n, h, w) < 1:
        return "empty dimension"
    return None


def lower_conv1x1_gemm(lw: _FunctionLowering, op: g.Conv2dOp, store: str = "staged") -> bool:
    """Lower a pointwise ``op`` (:func:`conv1x1_eligible`) as one batched sm90 GEMM on
    views of its buffers (no copies; a weight that is a deferred batch-channel transpose,
    an input gradient's, is read as stored, the GEMM's M-major A); False when not
    eligible. ``store``: how a result TMA does not store leaves (``Sm90Gemm.store``)."""
    if conv1x1_eligible(op) is not None:
        return False
    from dataclasses import replace

    from xdsl.dialects.builtin import MemRefType

    from tessera.passes.sm90.lower_matmul_sm90 import Sm90Gemm, build_kernel, device_sms
    from tessera.passes.tile_datamove import reshape_view

    et = g.elem_of(op.input)
    ty = "bf16" if isinstance(et, BFloat16Type) else "f16"
    n, c, h, w = g.shape_of(op.input)
    o = g.shape_of(op.weight)[0]
    p = h * w
    cfg = sm90_config(n * o, p, c, ty, ty)
    if o % cfg.bm:  # a tile must not straddle two images
        cfg = replace(cfg, consumers=1, cluster=1)
    # an input gradient's kernel is the forward weight channel-swapped: read it as stored,
    # K x M (the M-major A), instead of a transposed copy
    through = lw.peek_transpose(op.weight)
    a_t = through is not None and through[1] == (1, 0, 2, 3)
    w_buf = lw.mem(through[0]) if a_t and through is not None else lw.mem(op.weight)
    gemm = Sm90Gemm(o, p, c, ty, ty, cfg, device_sms(), a_t=a_t, batch=n, a_batched=False,
                    store=store)
    out = lw.alloc(op.result.type)
    args = [reshape_view(lw, out, MemRefType(et, [n * o, p])),
            reshape_view(lw, w_buf, MemRefType(et, [c, o] if a_t else [o, c])),
            reshape_view(lw, lw.mem(op.input), MemRefType(et, [n * c, p]))]
    name = lw.named_kernel("matmul", lambda nm: build_kernel(nm, gemm), ("a_t", a_t))
    lw.hb.add_op(tt.LaunchExOp(name, args, gemm.grid(), gemm.smem_bytes, gemm.boxes()))
    lw.env[op.result] = out
    return True


def lower_conv2d_sm90(
    lw: _FunctionLowering, op: g.Conv2dOp, implicit: bool = False, split_k: str = "off",
    sm90_store: str = "staged",
) -> bool:
    """Lower ``op`` through im2col and the sm90 GEMM (with ``implicit``, first try the
    implicit GEMM, split along K under ``split_k``:
    :mod:`tessera.passes.sm90.conv_implicit`); False leaves it to the direct kernel.
    ``sm90_store``: how the GEMMs' results that TMA does not store leave
    (``Sm90Gemm.store``; the implicit GEMM keeps its NCHW store)."""
    if implicit and (lower_conv1x1_gemm(lw, op, sm90_store)
                     or lower_conv2d_implicit(lw, op, split_k)):
        return True
    if conv_eligible(op) is not None:
        return False
    et = g.elem_of(op.input)
    ty = {BFloat16Type: "bf16", Float16Type: "f16", Float32Type: "f32"}[type(et)]
    n, c, h, w = g.shape_of(op.input)
    o, _, kh, kw = g.shape_of(op.weight)
    _, _, ho, wo = g.shape_of(op.result)
    sh, sw = op.stride.get_values()
    ph, pw = op.padding.get_values()
    dh, dw = op.dilation_values
    k = c * kh * kw
    kp = cdiv(k, 8) * 8
    rows = n * ho * wo

    cols = lw.alloc(TensorType(et, [rows, kp]))

    def im2col(e: KernelEmitter, args: list[SSAValue]) -> None:
        # one tile per output row (n, ho); lanes own columns (c, i, j) and walk wo, so
        # the only divisions are per tile and per column, none per element
        out, x = args
        bid = e.tile_id("x")
        bn, y0 = e.div(bid, ho), e.rem(bid, ho)
        hbase = e.sub(e.mul(y0, sh), ph)
        lane = e.local_id()
        zero = e.const(0.0, et)

        def chunk(ce: KernelEmitter, c0: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            col = ce.add(c0, lane)
            live = ce.lt(col, kp)
            real = ce.and_(live, ce.lt(col, k))
            ci, ij = ce.div(col, kh * kw), ce.rem(col, kh * kw)
            hi = ce.add(hbase, ce.mul(ce.div(ij, kw), dh))
            row_in = ce.and_(real, ce.and_(ce.le(0, hi), ce.lt(hi, h)))
            wj = ce.sub(ce.mul(ce.rem(ij, kw), dw), pw)
            r0 = ce.mul(bid, wo)

            def pixel(pe: KernelEmitter, x0: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                wi = pe.add(pe.mul(x0, sw), wj)
                inside = pe.and_(row_in, pe.and_(pe.le(0, wi), pe.lt(wi, w)))
                assert inside is not None
                v = pe.load(x, [pe.select(inside, bn, 0), pe.select(inside, ci, 0),
                                pe.select(inside, hi, 0), pe.select(inside, wi, 0)],
                            mask=inside, other=zero)
                pe.store(v, out, [pe.add(r0, x0), col], mask=live)
                return []

            ce.for_(0, wo, 1, [], pixel)
            return []

        e.for_(0, kp, GROUP, [], chunk)

    lw.kernel("conv2d_im2col", [cols, lw.mem(op.input)], GROUP, [n * ho, 1, 1], im2col)

    # the weight as a 2-D [O, Kp] row-major buffer (a tensor map sees a memref as
    # [rows, last dim], and [O, C, kh, kw]'s last dim is kw); padded columns are zero
    padded = lw.alloc(TensorType(et, [o, kp]))

    def pad_weight(e: KernelEmitter, args: list[SSAValue]) -> None:
        out, wt = args
        lin = e.linear_id()
        ok = e.lt(lin, o * kp)
        oi, col = e.unravel(lin, [o, kp])
        inside = e.and_(ok, e.lt(col, k))
        assert inside is not None
        ci, ij = e.div(col, kh * kw), e.rem(col, kh * kw)
        v = e.load(wt, [e.select(inside, oi, 0), e.select(inside, ci, 0),
                        e.select(inside, e.div(ij, kw), 0), e.select(inside, e.rem(ij, kw), 0)],
                   mask=inside, other=e.const(0.0, et))
        e.store(v, out, [oi, col], mask=ok)

    lw.kernel("conv2d_weight", [padded, lw.mem(op.weight)], GROUP,
              [cdiv(o * kp, GROUP), 1, 1], pad_weight)
    weight = padded

    product = lw.alloc(TensorType(f32, [rows, o]))
    if isinstance(et, Float32Type):
        fma_matmul_2d(lw, product, cols, weight, rows, o, kp, f32, tb=True)
    else:
        _wgmma_product(lw, product, cols, weight, rows, o, kp, ty, sm90_store)


    out = lw.alloc(op.result.type)
    has_bias = op.bias is not None

    def store(e: KernelEmitter, args: list[SSAValue]) -> None:
        # one tile per output row (n, o, ho); lanes walk wo
        y, prod_ref = args[:2]
        bid = e.tile_id("x")
        row, y0 = e.div(bid, ho), e.rem(bid, ho)
        bn, oi = e.div(row, o), e.rem(row, o)
        r0 = e.mul(e.add(e.mul(bn, ho), y0), wo)
        b = e.convert(e.load(args[2], [oi]), f32) if has_bias else None
        lane = e.local_id()

        def chunk(ce: KernelEmitter, x0: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            xi = ce.add(x0, lane)
            ok = ce.lt(xi, wo)
            v = ce.load(prod_ref, [ce.add(r0, xi), oi], mask=ok)
            if b is not None:
                v = ce.fadd(v, b)
            ce.store(ce.convert(v, et), y, [bn, oi, y0, xi], mask=ok)
            return []

        e.for_(0, wo, STORE_GROUP, [], chunk)

    args = [out, product] + ([lw.mem(op.bias)] if op.bias is not None else [])
    lw.kernel("conv2d_store", args, STORE_GROUP, [n * o * ho, 1, 1], store)
    lw.env[op.result] = out
    return True


def _wgmma_product(
    lw: _FunctionLowering, product: SSAValue, cols: SSAValue, weight: SSAValue, rows: int,
    o: int, kp: int, ty: str, store: str = "staged",
) -> None:
    """``product[rows, o] (f32) = cols[rows, kp] @ weight[o, kp].T`` on the sm90 kernel."""
    from tessera.passes.sm90.lower_matmul_sm90 import Sm90Gemm, build_kernel, device_sms

    gemm = Sm90Gemm(rows, o, kp, ty, "f32", sm90_config(rows, o, kp), device_sms(), b_t=True,
                    store=store)
    name = lw.named_kernel("matmul", lambda nm: build_kernel(nm, gemm))
    lw.hb.add_op(tt.LaunchExOp(name, [product, cols, weight], gemm.grid(), gemm.smem_bytes,
                               gemm.boxes()))
