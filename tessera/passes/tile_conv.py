"""Tile IR kernel for ``tgraph.conv2d`` (NCHW input, OIHW weight, optional bias [O]).

Direct convolution, one lane per output element: ``group_size = 256``, grid
``[ceil(N O Ho Wo / 256), 1, 1]``, the flat output index split as ``(n, o, ho, wo)``
with ``wo`` fastest, so neighbouring lanes read neighbouring input columns. Each lane
runs three uniform ``scf.for`` loops, over input channels ``c``, kernel rows ``i`` and
kernel columns ``j``, and accumulates

    acc += x[n, c, ho * sh + i * dh - ph, wo * sw + j * dw - pw] * w[o, c, i, j]

where input positions in the zero padding are masked loads giving 0 (their indices are
clamped to 0, so no lane addresses memory outside the input). Products and sums are in
f32 for f32/f16/bf16 operands (16-bit values widened exactly) and f64 for f64; the bias
is added to the sum and the result rounded once to the result type, as the Graph IR
interpreter does (which sums in another order, so the two agree to rounding).
"""

from __future__ import annotations

import math as pymath
from typing import TYPE_CHECKING

from xdsl.ir import SSAValue

from tessera.ir import graph as g
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv, compute_type, float_elem

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

GROUP = 256
"""Lanes per tile."""


def lower_conv2d(lw: _FunctionLowering, op: g.Conv2dOp) -> None:
    """``tgraph.conv2d``: direct convolution, one lane per output element."""

    et = float_elem(op, op.result.type)
    acc_t = compute_type(et)
    _, c_in, h_in, w_in = g.shape_of(op.input)
    _, _, kh, kw = g.shape_of(op.weight)
    out_shape = g.shape_of(op.result)
    sh, sw = op.stride.get_values()
    ph, pw = op.padding.get_values()
    dh, dw = op.dilation_values
    total = pymath.prod(out_shape)
    has_bias = op.bias is not None
    out = lw.alloc(op.result.type)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, x_ref, w_ref = args[:3]
        lin = e.linear_id()
        ok = e.lt(lin, total)
        n, o, ho, wo = e.unravel(lin, out_shape)
        h0 = e.sub(e.mul(ho, sh), ph)
        w0 = e.sub(e.mul(wo, sw), pw)

        def over_c(bc: KernelEmitter, c: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
            def over_i(bi: KernelEmitter, i: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
                h = bi.add(h0, bi.mul(i, dh) if dh != 1 else i)
                hin = bi.and_(bi.and_(ok, bi.le(0, h)), bi.lt(h, h_in))

                def over_j(bj: KernelEmitter, j: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
                    w = bj.add(w0, bj.mul(j, dw) if dw != 1 else j)
                    inside = bj.and_(bj.and_(hin, bj.le(0, w)), bj.lt(w, w_in))
                    hh: Idx = bj.select(inside, h, 0)
                    ww: Idx = bj.select(inside, w, 0)
                    xv = bj.convert(bj.load(x_ref, [n, c, hh, ww], mask=inside), acc_t)
                    wv = bj.convert(bj.load(w_ref, [o, c, i, j], mask=ok), acc_t)
                    return [bj.fadd(acc[0], bj.fmul(xv, wv))]

                return bi.for_(0, kw, 1, acc, over_j)

            return bc.for_(0, kh, 1, acc, over_i)

        (acc,) = e.for_(0, c_in, 1, [e.const(0.0, acc_t)], over_c)
        if has_bias:
            acc = e.fadd(acc, e.convert(e.load(args[3], [o], mask=ok), acc_t))
        e.store(e.convert(acc, et), o_ref, [n, o, ho, wo], mask=ok)

    args = [out, lw.mem(op.input), lw.mem(op.weight)]
    if op.bias is not None:
        args.append(lw.mem(op.bias))
    lw.kernel("conv2d", args, GROUP, [cdiv(total, GROUP), 1, 1], build)
    lw.env[op.result] = out
