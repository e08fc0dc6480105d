"""``tgraph.conv2d`` on the sm90 GEMM: an im2col buffer, one wgmma GEMM, one NCHW store.

For bf16/f16 operands, ``lower-matmul-sm90`` lowers ``y = conv2d(x, w) (+ bias)`` with
``x: [N, C, H, W]``, ``w: [O, C, kh, kw]``, ``y: [N, O, Ho, Wo]`` as three kernels:

1. **im2col**: ``cols[(n, ho, wo), (c, i, j)] = x[n, c, ho*sh + i - ph, wo*sw + j - pw]``
   (zero in the padding), a ``[N*Ho*Wo, Kp]`` row-major buffer whose ``K = C*kh*kw``
   columns are padded with zeros to ``Kp``, a multiple of 8 (16-byte TMA rows). One lane
   per element, columns fastest, so the stores are coalesced.
2. **GEMM** ``cols @ w2.T`` on the Hopper kernel (:mod:`tessera.passes.lower_matmul_sm90`)
   with the weight as the K-major B operand: ``w`` seen as ``[O, C*kh*kw]`` is
   ``nn.Linear``'s layout, copied first into a 2-D ``[O, Kp]`` buffer (zero-padded
   columns; the weight is small). The product ``[N*Ho*Wo, O]`` is f32.
3. **NCHW store**: ``y[n, o, ho, wo] = round(prod[(n, ho, wo), o] + bias[o])``, one lane per
   output element with ``wo`` fastest (coalesced stores), the bias added in f32 and the
   sum rounded once to the result type, as the generic direct convolution does.

The products are exact in f32 and summed by the tensor cores in f32, so results match
the direct kernel to f32 rounding. Taken when O is a multiple of 8 (the product's TMA row
stride); other convolutions keep the direct kernel (``tessera.passes.tile_conv``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import BFloat16Type, Float16Type, TensorType, f32
from xdsl.ir import SSAValue

from tessera.ir import graph as g
from tessera.ir import target as tt
from tessera.passes.matmul_config import sm90_config
from tessera.passes.tile_builder import KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

GROUP = 256
"""Lanes per tile of the im2col, weight-padding and store kernels."""


def conv_eligible(op: g.Conv2dOp) -> str | None:
    """None if the sm90 path takes ``op``, else why not."""
    et = g.elem_of(op.input)
    if not isinstance(et, BFloat16Type | Float16Type):
        return "operands are not bf16 or f16"
    o = g.shape_of(op.weight)[0]
    if o % 8:
        return f"{o} output channels: the product's rows need a multiple of 8"
    if min(g.shape_of(op.result)) < 1 or min(g.shape_of(op.input)) < 1:
        return "empty dimension"
    return None


def lower_conv2d_sm90(lw: _FunctionLowering, op: g.Conv2dOp) -> bool:
    """Lower ``op`` through im2col and the sm90 GEMM; False leaves it to the direct kernel."""
    if conv_eligible(op) is not None:
        return False
    from tessera.passes.lower_matmul_sm90 import Sm90Gemm, build_kernel, device_sms

    et = g.elem_of(op.input)
    ty = "bf16" if isinstance(et, BFloat16Type) else "f16"
    n, c, h, w = g.shape_of(op.input)
    o, _, kh, kw = g.shape_of(op.weight)
    _, _, ho, wo = g.shape_of(op.result)
    sh, sw = op.stride.get_values()
    ph, pw = op.padding.get_values()
    k = c * kh * kw
    kp = cdiv(k, 8) * 8
    rows = n * ho * wo

    cols = lw.alloc(TensorType(et, [rows, kp]))

    def im2col(e: KernelEmitter, args: list[SSAValue]) -> None:
        out, x = args
        lin = e.linear_id()
        ok = e.lt(lin, rows * kp)
        bn, y0, x0, col = e.unravel(lin, [n, ho, wo, kp])
        ci, ij = e.div(col, kh * kw), e.rem(col, kh * kw)
        hi = e.add(e.sub(e.mul(y0, sh), ph), e.div(ij, kw))
        wi = e.add(e.sub(e.mul(x0, sw), pw), e.rem(ij, kw))
        inside = e.and_(e.and_(e.and_(ok, e.lt(col, k)), e.and_(e.le(0, hi), e.lt(hi, h))),
                        e.and_(e.le(0, wi), e.lt(wi, w)))
        assert inside is not None
        v = e.load(x, [e.select(inside, bn, 0), e.select(inside, ci, 0), e.select(inside, hi, 0),
                       e.select(inside, wi, 0)], mask=inside, other=e.const(0.0, et))
        e.store(v, out, [e.div(lin, kp), col], mask=ok)

    lw.kernel("conv2d_im2col", [cols, lw.mem(op.input)], GROUP,
              [cdiv(rows * kp, GROUP), 1, 1], im2col)

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

    gemm = Sm90Gemm(rows, o, kp, ty, "f32", sm90_config(rows, o, kp), device_sms(), b_t=True)
    product = lw.alloc(TensorType(f32, [rows, o]))
    cnt = lw.counter.get("matmul", 0)
    lw.counter["matmul"] = cnt + 1
    name = f"{lw.name}_matmul_{cnt}"
    lw.module.body.block.insert_op_before(build_kernel(name, gemm), lw.fn)
    lw.hb.add_op(tt.LaunchExOp(name, [product, cols, weight], gemm.grid(), gemm.smem_bytes,
                               gemm.boxes()))

    out = lw.alloc(op.result.type)
    total = math.prod((n, o, ho, wo))
    has_bias = op.bias is not None

    def store(e: KernelEmitter, args: list[SSAValue]) -> None:
        y, prod_ref = args[:2]
        lin = e.linear_id()
        ok = e.lt(lin, total)
        bn, oi, y0, x0 = e.unravel(lin, [n, o, ho, wo])
        r = e.add(e.mul(bn, ho * wo), e.add(e.mul(y0, wo), x0))
        v = e.load(prod_ref, [r, oi], mask=ok)
        if has_bias:
            v = e.fadd(v, e.convert(e.load(args[2], [oi], mask=ok), f32))
        e.store(e.convert(v, et), y, [bn, oi, y0, x0], mask=ok)

    args = [out, product] + ([lw.mem(op.bias)] if op.bias is not None else [])
    lw.kernel("conv2d_store", args, GROUP, [cdiv(total, GROUP), 1, 1], store)
    lw.env[op.result] = out
    return True
