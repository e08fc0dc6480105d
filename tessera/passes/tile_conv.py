"""Tile IR kernels for ``tgraph.conv2d`` (NCHW input, OIHW weight, optional bias [O]).

**Direct kernel**, one lane per output element: ``group_size = 256``, grid
``[ceil(N O Ho Wo / 256), 1, 1]``, the flat output index split as ``(n, o, ho, wo)``
with ``wo`` fastest, so neighbouring lanes read neighbouring input columns. Each lane
runs three uniform ``scf.for`` loops, over the input channels ``c`` of its group
(``C / groups`` of them, from ``(o // (O / groups)) * C / groups``), kernel rows ``i``
and kernel columns ``j``, and accumulates

    acc += x[n, cg0 + c, ho * sh + i * dh - ph, wo * sw + j * dw - pw] * w[o, c, i, j]

where input positions in the zero padding are masked loads giving 0 (their indices are
clamped to 0, so no lane addresses memory outside the input).

**Plane kernel** (:func:`plane_eligible`): a grouped convolution with few taps per output
(``C/groups x kh x kw <= 64``: depthwise, depthwise with a channel multiplier ``O /
groups``, or a few channels per group as ResNeXt's) is memory-bound, so each tile works
on ``R`` output rows of one output plane ``(n, o)`` (grid ``[N O ceil(Ho / R), 1, 1]``, on
flat views of the input and the result): its lanes first copy the input rows those
outputs read from each of the group's ``C/groups`` channels, zero padding included,
into shared ``rows x cols`` buffers of the compute type (coalesced loads along W, all of a lane's loads issued before its shared
stores; a lane whose element lies in the padding does not load), load the output
channel's ``C/groups x kh x kw`` weights into registers, then each lane computes ``ceil(R Wo / 256)`` outputs
(``wo`` fastest: coalesced stores) from shared memory with the taps unrolled as fused
multiply-adds. A lane keeps one column and steps by rows (:func:`_lanes`), so its
addresses differ by constants: the shared loads of all its taps and outputs use one
address register with immediate offsets. Every input element is read from global
memory once per tile (halo rows once more by the neighbouring tile) instead of ``kh kw``
times.

**Window kernel** (:func:`window_eligible`): one input channel per output channel, few
outputs per plane (at most :data:`WINDOW_OUTPUTS`) and a large kernel, the shape of a
grouped convolution's weight gradient (the input convolved with the output gradient as
kernel: a 56x56 kernel for 3x3 outputs). The direct kernel would give each of the few
outputs one lane and a long serial loop; here one tile takes a whole output plane,
stages the padded input plane in shared memory (in the compute type when it fits
:data:`WINDOW_STAGE_BYTES`, else in a 16-bit element type, else not at all), and its
lanes split the kernel's taps (flat index ``lid + k 256``, coalesced along the kernel's
rows), each keeps one partial per output in registers (f32; f64 for f64) (``scf.for`` over its taps,
reading the input at the ``Ho Wo`` constant offsets of a tap), and the partials are
added by ``ttile.reduce`` over the tile (a fixed order) before lane 0 stores the plane.

Products and sums are in f32 for f32/f16/bf16 operands (16-bit values widened exactly)
and f64 for f64 (the plane and window kernels fuse each product into its sum); the bias is added to
the sum and the result rounded once to the result type, as the Graph IR interpreter does
(which sums in another order, so the two agree to rounding).
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable
from typing import TYPE_CHECKING

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    MemRefType,
    i16,
    i32,
)
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv, compute_type, float_elem
from tessera.passes.tile_datamove import reshape_view

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

GROUP = 256
"""Lanes per tile."""

PLANE_STAGE = 4096
"""Most input elements (16 KiB in f32) a plane-kernel tile stages in shared memory."""
PLANE_OUTPUTS = 2048
"""Most output elements of a plane-kernel tile (8 per lane)."""
PLANE_TAPS = 64
"""Most taps per output (``C/groups x kh x kw``) the plane kernel unrolls."""
WINDOW_OUTPUTS = 64
"""Most outputs per plane (registers of partial sums per lane) of the window kernel."""


def lower_conv2d(lw: _FunctionLowering, op: g.Conv2dOp) -> None:
    """``tgraph.conv2d``: the plane kernel when :func:`plane_eligible`, else the window
    kernel when :func:`window_eligible`, else the direct kernel, one lane per output
    element."""
    rows = plane_rows(op)
    if rows is not None:
        _lower_plane(lw, op, rows)
        return
    if window_eligible(op) is None:
        _lower_window(lw, op)
        return

    et = float_elem(op, op.result.type)
    acc_t = compute_type(et)
    _, c_in, h_in, w_in = g.shape_of(op.input)
    o_all, cg, kh, kw = g.shape_of(op.weight)
    og = o_all // op.groups_value  # output channels per group
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
        # the first input channel of o's group
        c0 = e.mul(e.div(o, og), cg) if cg != c_in else 0

        def over_c(bc: KernelEmitter, c: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
            ci = bc.add(c0, c)

            def over_i(bi: KernelEmitter, i: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
                h = bi.add(h0, bi.mul(i, dh) if dh != 1 else i)
                hin = bi.and_(bi.and_(ok, bi.le(0, h)), bi.lt(h, h_in))

                def over_j(bj: KernelEmitter, j: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
                    w = bj.add(w0, bj.mul(j, dw) if dw != 1 else j)
                    inside = bj.and_(bj.and_(hin, bj.le(0, w)), bj.lt(w, w_in))
                    hh: Idx = bj.select(inside, h, 0)
                    ww: Idx = bj.select(inside, w, 0)
                    xv = bj.convert(bj.load(x_ref, [n, ci, hh, ww], mask=inside), acc_t)
                    wv = bj.convert(bj.load(w_ref, [o, c, i, j], mask=ok), acc_t)
                    return [bj.fadd(acc[0], bj.fmul(xv, wv))]

                return bi.for_(0, kw, 1, acc, over_j)

            return bc.for_(0, kh, 1, acc, over_i)

        (acc,) = e.for_(0, cg, 1, [e.const(0.0, acc_t)], over_c)
        if has_bias:
            acc = e.fadd(acc, e.convert(e.load(args[3], [o], mask=ok), acc_t))
        e.store(e.convert(acc, et), o_ref, [n, o, ho, wo], mask=ok)

    args = [out, lw.mem(op.input), lw.mem(op.weight)]
    if op.bias is not None:
        args.append(lw.mem(op.bias))
    lw.kernel("conv2d", args, GROUP, [cdiv(total, GROUP), 1, 1], build)
    lw.env[op.result] = out


# --------------------------------------------------------------------------- plane kernel


def _stage_shape(op: g.Conv2dOp, rows: int) -> tuple[int, int]:
    """``(rows, cols)`` of the input a tile of ``rows`` output rows reads."""
    _, _, kh, kw = g.shape_of(op.weight)
    wo = g.shape_of(op.result)[3]
    sh, sw = op.stride.get_values()
    dh, dw = op.dilation_values
    return (rows - 1) * sh + (kh - 1) * dh + 1, (wo - 1) * sw + (kw - 1) * dw + 1


def plane_rows(op: g.Conv2dOp) -> int | None:
    """The output rows ``R`` per tile of the plane kernel (module docstring), or None when
    another kernel takes ``op`` (:func:`plane_eligible` says why: one channel group, more
    than :data:`PLANE_TAPS` taps per output, or an output row whose input rows over the
    group's channels exceed :data:`PLANE_STAGE` elements). ``R`` is the most rows of at
    most :data:`PLANE_OUTPUTS` outputs within the staging budget, evened out over the
    row blocks (``Ho = 56`` in blocks of 28, not 36 + 20)."""
    return _plane(op)[0]


def plane_eligible(op: g.Conv2dOp) -> str | None:
    """None if the plane kernel takes ``op``, else why not."""
    return _plane(op)[1]


def _plane(op: g.Conv2dOp) -> tuple[int | None, str | None]:
    _, c, _, _ = g.shape_of(op.input)
    _, cg, kh, kw = g.shape_of(op.weight)
    ho, wo = g.shape_of(op.result)[2:]
    if op.groups_value == 1 and c > 1:
        return None, "one channel group (a dense convolution: the GEMM paths or the direct kernel)"
    if cg * kh * kw > PLANE_TAPS:
        return None, (f"{cg} input channels per output channel of kernel {kh}x{kw}: more "
                      f"than {PLANE_TAPS} taps to unroll")
    if min(g.shape_of(op.result)) < 1:
        return None, "empty result"
    r1, cols = _stage_shape(op, 1)
    if cg * r1 * cols > PLANE_STAGE:
        return None, f"one output row reads {cg}x{r1}x{cols} inputs (> {PLANE_STAGE})"
    rows = 1
    while rows < ho and rows + 1 <= PLANE_OUTPUTS // wo and \
            cg * _stage_shape(op, rows + 1)[0] * cols <= PLANE_STAGE:
        rows += 1
    rows = cdiv(ho, cdiv(ho, rows))
    return rows, None


def _lanes(
    e: KernelEmitter, lid: SSAValue, rows: int, cols: int
) -> list[tuple[Idx, int, Idx, SSAValue | None, int]]:
    """The elements ``(r0, dr, col, live, rmax)`` (row ``r0 + dr``, at most ``rmax``) of a
    ``rows x cols`` block each lane of the tile takes, in the order issued. When ``cols``
    fits a tile at least 3/4 used (``p = GROUP // cols`` rows per pass), a lane keeps its
    row ``r0`` and column (``lid // cols``, ``lid % cols``: one division per lane) and
    steps by ``dr = p`` rows, so that addresses derived from ``r0`` and ``col`` differ by
    constants (one address register, immediate offsets). Otherwise the flat index
    ``lid + k GROUP`` is split per element (``dr = 0``). ``live`` is None where every
    element is in the block."""
    out: list[tuple[Idx, int, Idx, SSAValue | None, int]] = []
    per = GROUP // cols
    if cols <= GROUP and 4 * per * cols >= 3 * GROUP:
        r0, c = e.unravel(lid, [cdiv(GROUP, cols), cols])
        lane_ok = e.lt(lid, per * cols) if per * cols < GROUP else None
        for k in range(cdiv(rows, per)):
            live = e.and_(lane_ok, e.lt(e.add(r0, k * per), rows) if (k + 1) * per > rows
                          else None)
            out.append((r0, k * per, c, live, (GROUP - 1) // cols + k * per))
        return out
    total = rows * cols
    for k in range(cdiv(total, GROUP)):
        t = e.add(lid, k * GROUP)
        r, c = e.unravel(t, [rows, cols])
        out.append((r, 0, c, e.lt(t, total) if (k + 1) * GROUP > total else None,
                    (k * GROUP + GROUP - 1) // cols))
    return out


def _widen(e: KernelEmitter, v: SSAValue, acc_t: Attribute) -> SSAValue:
    """``v`` in the compute type ``acc_t``; a bf16 value as its bits shifted into the top
    half of an f32 (exact: a bf16 is the top half of an f32; a NaN stays a NaN of its
    sign), two integer instructions instead of the generic conversion's sequence."""
    if isinstance(v.type, BFloat16Type) and isinstance(acc_t, Float32Type):
        u = e.op(arith.ExtUIOp(e.op(arith.BitcastOp(v, i16)), i32))
        return e.op(arith.BitcastOp(e.op(arith.ShLIOp(u, e.const(16, i32))), acc_t))
    return e.convert(v, acc_t)


def _i32_in(e: KernelEmitter, v32: SSAValue, lo: int | None, hi: int | None) -> SSAValue | None:
    """``lo <= v32 < hi`` on an i32 value (a bound None is not checked)."""
    ok = None
    if lo is not None:
        ok = e.op(arith.CmpiOp(v32, e.const(lo, i32), "sge"))
    if hi is not None:
        ok = e.and_(ok, e.op(arith.CmpiOp(v32, e.const(hi, i32), "slt")))
    return ok


STAGE_BATCH = 16
"""Most loads a lane issues before storing them to shared memory while staging."""


def _stage(
    e: KernelEmitter, lid: SSAValue, x_ref: SSAValue, x_plane: Idx, top: Idx,
    staged: tuple[int, int], size: tuple[int, int], pw: int, buf: SSAValue,
    between: Callable[[KernelEmitter], None], offset: int = 0,
) -> None:
    """Copy the ``staged = (rows, cols)`` input elements from row ``top`` and column
    ``-pw`` of the plane whose row 0 is row ``x_plane`` of the flat input ``x_ref`` (of
    planes ``size = (H, W)``) into the shared ``buf`` from element ``offset`` on, in the
    compute type, zeros outside
    the plane: coalesced along W, :data:`STAGE_BATCH` loads of a lane issued before their
    shared stores (``between`` emits more loads after the first batch). A lane whose
    element lies in the zero padding does not load (its address is never used)."""
    srows, scols = staged
    h_in, w_in = size
    acc_t = buf.type.element_type  # type: ignore[attr-defined]
    lane: dict[tuple[object, object], tuple[Idx, Idx, SSAValue, SSAValue | None]] = {}
    loaded: list[tuple[Idx, SSAValue, SSAValue | None]] = []
    first = True
    elems = _lanes(e, lid, srows, scols)
    for q, (r0, dr, sc, live, _) in enumerate(elems):
        if (r0, sc) not in lane:
            w = e.sub(sc, pw)
            h = e.add(top, r0)
            col_ok = None
            if pw or scols > w_in:
                col_ok = _i32_in(e, e.convert(e.index(w), i32), 0 if pw else None, w_in)
            lane[(r0, sc)] = (e.add(e.mul(e.add(x_plane, h), w_in), w),
                              e.add(e.add(e.mul(r0, scols), sc), offset),
                              e.convert(e.index(h), i32), col_ok)
        xi, si, h32, col_ok = lane[(r0, sc)]
        inside = e.and_(e.and_(live, col_ok), _i32_in(e, h32, -dr, h_in - dr))
        v = e.load(x_ref, [e.add(xi, dr * w_in)], mask=inside)
        loaded.append((e.add(si, dr * scols), v, live))
        if len(loaded) == STAGE_BATCH or q == len(elems) - 1:
            if first:
                between(e)
                first = False
            for t, v, ok in loaded:
                e.store(_widen(e, v, acc_t), buf, [t], mask=ok)
            loaded = []


def _lower_plane(lw: _FunctionLowering, op: g.Conv2dOp, rows: int) -> None:
    """The plane kernel (module docstring) with ``rows`` output rows per tile."""
    et = float_elem(op, op.result.type)
    acc_t = compute_type(et)
    n_, c_, h_in, w_in = g.shape_of(op.input)
    o_all, cg, kh, kw = g.shape_of(op.weight)
    og = o_all // op.groups_value  # output channels per group
    ho_all, wo_all = g.shape_of(op.result)[2:]
    sh, sw = op.stride.get_values()
    ph, pw = op.padding.get_values()
    dh, dw = op.dilation_values
    srows, scols = _stage_shape(op, rows)
    plane = srows * scols  # one staged input channel
    blocks = cdiv(ho_all, rows)
    has_bias = op.bias is not None
    out = lw.alloc(op.result.type)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, x_ref, w_ref = args[:3]  # flat NOHoWo, flat NCHW, OIHW
        n, o, rb = e.unravel(e.tile_id("x"), [n_, o_all, blocks])
        c0 = e.add(e.mul(n, c_), e.mul(e.div(o, og), cg))  # the group's first input channel
        y_plane = e.mul(e.add(e.mul(n, o_all), o), ho_all)
        lid = e.local_id()
        row0 = e.mul(rb, rows)  # the tile's first output row
        top = e.sub(e.mul(row0, sh), ph)  # the input row of staged row 0
        buf = e.op(tt.AllocSharedOp([cg * plane], acc_t, alignment=16))
        loaded: list[SSAValue] = []

        def weights(e: KernelEmitter) -> None:
            loaded.extend(_widen(e, e.load(w_ref, [o, c, i, j]), acc_t)
                          for c in range(cg) for i in range(kh) for j in range(kw))
            if has_bias:
                loaded.append(_widen(e, e.load(args[3], [o]), acc_t))

        for c in range(cg):  # the group's input channels, one after the other
            _stage(e, lid, x_ref, e.mul(e.add(c0, c), h_in), top, (srows, scols),
                   (h_in, w_in), pw, buf, weights if c == 0 else lambda e: None, c * plane)
        taps = [loaded[t * kw:(t + 1) * kw] for t in range(cg * kh)]  # by (c, i)
        bias = loaded[-1] if has_bias else None
        e.barrier()
        olane: dict[tuple[object, object], tuple[Idx, Idx, SSAValue]] = {}
        for r0, dr, wo, live, rmax in _lanes(e, lid, rows, wo_all):
            if (r0, wo) not in olane:
                olane[(r0, wo)] = (
                    e.add(e.mul(e.mul(r0, sh), scols), e.mul(wo, sw)),
                    e.add(e.mul(e.add(e.add(y_plane, row0), r0), wo_all), wo),
                    e.convert(e.index(r0), i32))
            base, yi, r32 = olane[(r0, wo)]
            # the last block's rows past Ho are not stored; a row past the block (a lane
            # of the last pass) would read past the staged rows
            ok = live
            if ho_all % rows:
                ho32 = e.convert(e.index(e.add(row0, r0)), i32)
                ok = e.and_(ok, _i32_in(e, ho32, None, ho_all - dr))
            inb = _i32_in(e, r32, None, rows - dr) if rmax >= rows else None
            acc = e.const(0.0, acc_t)
            for c in range(cg):
                for i in range(kh):
                    for j in range(kw):
                        off = c * plane + dr * sh * scols + i * dh * scols + j * dw
                        xv = e.load(buf, [e.add(base, off)], mask=inb)
                        acc = e.op(math.FmaOp(xv, taps[c * kh + i][j], acc))
            if bias is not None:
                acc = e.fadd(acc, bias)
            e.store(e.convert(acc, et), o_ref, [e.add(yi, dr * wo_all)], mask=ok)

    args = [reshape_view(lw, out, MemRefType(et, [n_ * o_all * ho_all * wo_all])),
            reshape_view(lw, lw.mem(op.input), MemRefType(et, [n_ * c_ * h_in * w_in])),
            lw.mem(op.weight)]
    if op.bias is not None:
        args.append(lw.mem(op.bias))
    lw.kernel("conv2d_plane", args, GROUP, [n_ * o_all * blocks, 1, 1], build)
    lw.env[op.result] = out


# --------------------------------------------------------------------------- window kernel


def window_eligible(op: g.Conv2dOp) -> str | None:
    """None if the window kernel (module docstring) takes ``op``, else why not."""
    _, cg, kh, kw = g.shape_of(op.weight)
    ho, wo = g.shape_of(op.result)[2:]
    if cg != 1:
        return f"{cg} input channels per output channel (C / groups != 1)"
    if ho * wo > WINDOW_OUTPUTS:
        return f"{ho}x{wo} outputs per plane (> {WINDOW_OUTPUTS})"
    if kh * kw <= PLANE_TAPS:
        return f"kernel {kh}x{kw}: few taps per output (the plane or direct kernel)"
    if min(g.shape_of(op.result)) < 1:
        return "empty result"
    return None


WINDOW_STAGE_BYTES = 44 * 1024
"""Most shared memory the window kernel stages its input plane in (static shared memory
is limited to 48 KiB per tile; the reduction takes a little)."""


def _lower_window(lw: _FunctionLowering, op: g.Conv2dOp) -> None:
    et = float_elem(op, op.result.type)
    acc_t = compute_type(et)
    n_, c_, h_in, w_in = g.shape_of(op.input)
    o_all, _, kh, kw = g.shape_of(op.weight)
    mult = o_all // op.groups_value
    ho_all, wo_all = g.shape_of(op.result)[2:]
    sh, sw = op.stride.get_values()
    ph, pw = op.padding.get_values()
    dh, dw = op.dilation_values
    taps = kh * kw
    has_bias = op.bias is not None
    srows, scols = _stage_shape(op, ho_all)
    # stage the plane in the compute type, else (16-bit operands) in the element type,
    # widened as it is read, else not at all
    stage_t: Attribute | None = None
    for t, nbytes in ((acc_t, 8 if isinstance(acc_t, Float64Type) else 4),
                      (et, 2 if isinstance(et, BFloat16Type | Float16Type) else 8)):
        if stage_t is None and srows * scols * nbytes <= WINDOW_STAGE_BYTES:
            stage_t = t
    out = lw.alloc(op.result.type)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, x_ref, w_ref = args[:3]  # flat NOHoWo, flat NCHW, flat O*kh*kw
        n, o = e.unravel(e.tile_id("x"), [n_, o_all])
        x_plane = e.mul(e.add(e.mul(n, c_), e.div(o, mult)), h_in)
        lid = e.local_id()
        buf = None
        if stage_t is not None:  # the padded plane in shared memory, taps at constant offsets
            buf = e.op(tt.AllocSharedOp([srows * scols], stage_t, alignment=16))
            _stage(e, lid, x_ref, x_plane, -ph, (srows, scols), (h_in, w_in), pw, buf,
                   lambda e: None)
            e.barrier()

        def over_taps(b: KernelEmitter, k: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
            t = b.add(lid, b.mul(k, GROUP))
            live = b.lt(t, taps)
            a, c = b.unravel(t, [kh, kw])
            wv = _widen(b, b.load(w_ref, [b.add(b.mul(o, taps), t)], mask=live), acc_t)
            new = []
            if buf is not None:
                base = b.add(b.mul(a, dh * scols), b.mul(c, dw))
                for i in range(ho_all):
                    for j in range(wo_all):
                        xv = b.load(buf, [b.add(base, i * sh * scols + j * sw)], mask=live)
                        new.append(b.op(math.FmaOp(_widen(b, xv, acc_t), wv,
                                                   acc[i * wo_all + j])))
                return new
            h0 = b.sub(b.mul(a, dh), ph)  # the input row of output row 0
            w0 = b.sub(b.mul(c, dw), pw)
            h32, w32 = b.convert(b.index(h0), i32), b.convert(b.index(w0), i32)
            rows_ok = [_i32_in(b, h32, -i * sh, h_in - i * sh) for i in range(ho_all)]
            cols_ok = [_i32_in(b, w32, -j * sw, w_in - j * sw) for j in range(wo_all)]
            base = b.add(b.mul(x_plane, w_in), b.add(b.mul(h0, w_in), w0))
            for i in range(ho_all):
                for j in range(wo_all):
                    ok = b.and_(live, b.and_(rows_ok[i], cols_ok[j]))
                    xv = b.load(x_ref, [b.add(base, i * sh * w_in + j * sw)], mask=ok)
                    new.append(b.op(math.FmaOp(_widen(b, xv, acc_t), wv, acc[i * wo_all + j])))
            return new

        zero = e.const(0.0, acc_t)
        accs = e.for_(0, cdiv(taps, GROUP), 1, [zero] * (ho_all * wo_all), over_taps)
        sums = [e.op(tt.ReduceOp(a, "sum", "group")) for a in accs]
        bias = e.convert(e.load(args[3], [o]), acc_t) if has_bias else None
        first = e.eq(lid, 0)
        y_plane = e.mul(e.add(e.mul(n, o_all), o), ho_all * wo_all)
        for q, v in enumerate(sums):
            if bias is not None:
                v = e.fadd(v, bias)
            e.store(e.convert(v, et), o_ref, [e.add(y_plane, q)], mask=first)

    args = [reshape_view(lw, out, MemRefType(et, [n_ * o_all * ho_all * wo_all])),
            reshape_view(lw, lw.mem(op.input), MemRefType(et, [n_ * c_ * h_in * w_in])),
            reshape_view(lw, lw.mem(op.weight), MemRefType(et, [o_all * taps]))]
    if op.bias is not None:
        args.append(lw.mem(op.bias))
    lw.kernel("conv2d_window", args, GROUP, [n_ * o_all, 1, 1], build)
    lw.env[op.result] = out
