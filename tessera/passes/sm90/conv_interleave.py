"""A strided convolution's input gradient stored by the implicit GEMM's epilogue at its
strided positions: no phase-interleave pass.

:func:`tessera.autodiff.conv_grad.input_grad` computes the input gradient of a strided
convolution as one stride-1 convolution ``y [N, G*Ph*Pw*Cg, R, Q]`` whose output channels
are (group, row phase, column phase, channel), then interleaves the phases back into the
input's layout with data movement only::

    y -> reshape [N, G, Ph, Pw, Cg, R, Q] -> transpose [0, 1, 4, 5, 2, 6, 3]
      -> crop (whole phase rows) -> reshape [N, C, rows, cols] -> crop -> dx [N, C, H, W]

Every element of ``dx`` is one element of ``y``: channel ``oc = ((g*Ph + a)*Pw + b)*Cg + c``
at ``(r, q)`` is ``dx[n, g*Cg + c, r*Ph + a - oh, q*Pw + b - ow]`` (an :class:`Interleave`;
when the weight relayout orders the GEMM's columns as (channel, phase), it decodes them
so),
stored when that position lies inside ``dx``; the rest of ``y`` (rows the crops drop) is
never needed. :func:`match` recognizes the chain after a convolution (each value used
once, the composite checked element by element on one image against the closed form) and
:func:`epilogue` stores the GEMM's accumulators that way, in place of
:func:`tessera.passes.sm90.conv_implicit.nchw_epilogue`: the convolution writes ``dx``
once instead of writing ``y`` for a slice kernel to read and write again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import Operation, SSAValue

from tessera.ir import graph as g
from tessera.ir import target as tt
from tessera.passes.sm90 import builders
from tessera.passes.sm90.asm import TargetAsm

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

PERM = (0, 1, 4, 5, 2, 6, 3)
"""``[N, G, Ph, Pw, Cg, R, Q] -> [N, G, Cg, R, Ph, Q, Pw]``: rows of phases."""
CHECK_ELEMENTS = 1 << 23
"""Most elements of one image's chain that :func:`match` evaluates to check it."""


@dataclass(frozen=True)
class Interleave:
    """Where the convolution's output ``y [N, G*Ph*Pw*Cg, R, Q]`` goes in ``dx [N, G*Cg, H,
    W]``: channel ``((g*Ph + a)*Pw + b)*Cg + c`` at ``(r, q)`` to ``dx[n, g*Cg + c, r*Ph +
    a - oh, q*Pw + b - ow]`` when that lies inside ``dx``."""

    groups: int
    ph: int
    pw: int
    cg: int
    rows: int
    cols: int
    """``R x Q``: the convolution's output pixels."""
    h: int
    w: int
    oh: int
    ow: int
    channel_major: bool = False
    """The GEMM's columns in (group, channel, phase) order, ``oc = ((g*Cg + c)*Ph + a)*Pw
    + b``, when the weight relayout wrote its rows so
    (:mod:`tessera.passes.sm90.conv_phase_weight`): a warp's stores of a channel's
    phases then fill whole runs of dx's rows."""

    @property
    def channels(self) -> int:
        """The convolution's output channels."""
        return self.groups * self.ph * self.pw * self.cg

    def place(self, oc: np.ndarray, r: np.ndarray, q: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(channel, row, column)`` of ``dx`` for output channel ``oc`` at ``(r, q)``
        (the row or column may lie outside ``dx``: not stored)."""
        if self.channel_major:
            gc, ab = np.divmod(oc, self.ph * self.pw)
            gi, c = np.divmod(gc, self.cg)
        else:
            pi, c = np.divmod(oc, self.cg)
            gi, ab = np.divmod(pi, self.ph * self.pw)
        a, b = np.divmod(ab, self.pw)
        return gi * self.cg + c, r * self.ph + a - self.oh, q * self.pw + b - self.ow

    def trimmed(self) -> tuple[Interleave, int, int]:
        """The interleave of only the rows ``rmin..`` and columns ``qmin..`` of ``y`` that
        reach ``dx`` (a row of ``y`` reaches it when one of its phases does), and
        ``(rmin, qmin)``."""
        def span(n: int, p: int, off: int, size: int) -> tuple[int, int]:
            lo = max(0, -(-(off - p + 1) // p))
            return lo, min(n - 1, (size - 1 + off) // p) - lo + 1

        rmin, rows = span(self.rows, self.ph, self.oh, self.h)
        qmin, cols = span(self.cols, self.pw, self.ow, self.w)
        return (replace(self, rows=rows, cols=cols, oh=self.oh - rmin * self.ph,
                        ow=self.ow - qmin * self.pw), rmin, qmin)

    def apply(self, y: np.ndarray) -> np.ndarray:
        """``dx`` from ``y`` (numpy; the reference of :func:`epilogue`)."""
        n = y.shape[0]
        out = np.zeros((n, self.groups * self.cg, self.h, self.w), y.dtype)
        oc, r, q = np.meshgrid(np.arange(self.channels), np.arange(self.rows),
                               np.arange(self.cols), indexing="ij")
        ch, hh, ww = self.place(oc, r, q)
        ok = (hh >= 0) & (hh < self.h) & (ww >= 0) & (ww < self.w)
        out[:, ch[ok], hh[ok], ww[ok]] = y[:, oc[ok], r[ok], q[ok]]
        return out


def _single_use(v: SSAValue) -> Operation | None:
    uses = list(v.uses)
    return uses[0].operation if len(uses) == 1 else None


def _chain(conv: g.Conv2dOp) -> list[Operation] | None:
    """The reshape, transpose, crops and reshapes that follow ``conv``, each the only user
    of the value before it, up to the last of them."""
    ops: list[Operation] = []
    v = conv.result
    while (user := _single_use(v)) is not None and isinstance(
        user, g.ReshapeOp | g.TransposeOp | g.SliceOp
    ):
        if isinstance(user, g.SliceOp) and any(s != 1 for s in user.stride.get_values()):
            break
        ops.append(user)
        v = user.result
    return ops


def _evaluate(ops: Sequence[Operation], x: np.ndarray) -> np.ndarray:
    """The data movement of ``ops`` on one image ``x`` (batch dim of size 1)."""
    for op in ops:
        if isinstance(op, g.ReshapeOp):
            x = x.reshape([1, *g.shape_of(op.result)[1:]])
        elif isinstance(op, g.TransposeOp):
            x = x.transpose([int(p) for p in op.permutation.get_values()])
        else:
            assert isinstance(op, g.SliceOp)
            st, li = op.start.get_values(), op.limit.get_values()
            x = x[(slice(0, 1), *(slice(a, b) for a, b in zip(st[1:], li[1:])))]
    return x


def match(conv: g.Conv2dOp) -> tuple[Interleave, list[Operation]] | None:
    """The interleave that the ops after ``conv`` compute (module docstring) and those
    ops (the last one's result is ``dx``), or None when they are not such a chain."""
    ops = _chain(conv)
    if not ops or not isinstance(ops[0], g.ReshapeOp):
        return None
    n, oc, rows, cols = g.shape_of(conv.result)
    s7 = list(g.shape_of(ops[0].result))
    if len(s7) != 7 or s7[0] != n or s7[5:] != [rows, cols] or len(ops) < 2:
        return None
    t = ops[1]
    if not isinstance(t, g.TransposeOp) or tuple(t.permutation.get_values()) != PERM:
        return None
    # the chain ends at the first value of the input's layout [N, C, H, W] after which
    # only more of it would follow
    last = None
    for i, op in enumerate(ops):
        s = g.shape_of(op.result)
        if i >= 2 and len(s) == 4 and s[0] == n and s[1] == s7[1] * s7[4]:
            last = i
    if last is None:
        return None
    ops = ops[: last + 1]
    for op in ops:
        if isinstance(op, g.ReshapeOp | g.TransposeOp | g.SliceOp) and g.shape_of(
                op.result)[0] != n:
            return None
        if isinstance(op, g.TransposeOp) and int(op.permutation.get_values()[0]) != 0:
            return None
        if isinstance(op, g.SliceOp) and op.start.get_values()[0] != 0:
            return None
    if oc * rows * cols > CHECK_ELEMENTS:
        return None
    groups, ph, pw, cg = s7[1:5]
    _, _, h, w = g.shape_of(ops[-1].result)
    # the offsets: where y's element that lands on dx[.., 0, 0] came from
    ids = np.arange(oc * rows * cols, dtype=np.int64).reshape(1, oc, rows, cols)
    got = _evaluate(ops, ids)
    first = int(got[0, 0, 0, 0])
    c0, rest = divmod(first, rows * cols)
    r0, q0 = divmod(rest, cols)
    a0, b0 = divmod((c0 // cg) % (ph * pw), pw)
    il = Interleave(groups, ph, pw, cg, rows, cols, h, w, r0 * ph + a0, q0 * pw + b0)
    if not np.array_equal(il.apply(ids), got):
        return None
    return il, ops


def lower_target(lw: _FunctionLowering, conv: g.Conv2dOp
                 ) -> tuple[Interleave, SSAValue] | None:
    """When ``conv`` is followed by an interleave (:func:`match`): its description and
    ``dx``'s buffer, made now, with the chain's ops left to the convolution (``lw.skip``: its
    epilogue stores ``dx``)."""
    found = match(conv)
    if found is None:
        return None
    il, ops = found
    dx = ops[-1].results[0]
    buf = lw.env[dx] = lw.alloc(dx.type)
    lw.skip.update(ops)
    return il, buf


def epilogue(
    e: TargetAsm, il: Interleave, out_type: str, m: int, bn: int, c_param: SSAValue,
    tid: SSAValue, cw: SSAValue, m0: SSAValue, n0: SSAValue, acc: Sequence[SSAValue],
) -> None:
    """Store consumer warpgroup ``cw``'s fragment of the ``M x O`` tile at ``(m0, n0)``
    (``M = N*R*Q`` pixels, ``O`` :attr:`Interleave.channels`) at its places in ``dx``
    (:class:`Interleave`), rounded once to ``out_type``. Offsets are 32-bit with
    wraparound: a place outside ``dx`` is never stored, and those inside are below 2^31."""
    eb = 4 if out_type == "f32" else 2
    o, hw, rq = il.channels, il.h * il.w, il.rows * il.cols
    _, warp, lane = builders.fragment_lanes(e, tid)
    row0 = builders.fragment_row(e, m0, cw, warp, lane)
    col0 = e.add32(n0, builders.fragment_col(e, lane))
    base = builders.global_pointer(e, c_param)
    rowlin, rbase, qbase, rok = [], [], [], []
    for h in (0, 1):
        mh = e.add32(row0, 8 * h)
        ok = e.setp("lt", mh, m)
        mm = e.reg("b32")
        e.add(tt.SelpOp("b32", mm, mh, e.imm(0), ok))
        img, p = e.bin(tt.DivOp, "u32", mm, rq), e.bin(tt.RemOp, "u32", mm, rq)
        r, q = e.bin(tt.DivOp, "u32", p, il.cols), e.bin(tt.RemOp, "u32", p, il.cols)
        rb = e.bin(tt.SubOp, "u32", e.mul32(r, il.ph), il.oh)  # dx row of phase 0
        qb = e.bin(tt.SubOp, "u32", e.mul32(q, il.pw), il.ow)
        lin = e.mad32(img, il.groups * il.cg * hw, e.mad32(rb, il.w, qb))
        rowlin.append(lin)
        rbase.append(rb)
        qbase.append(qb)
        rok.append(ok)
    for j in range(bn // 8):
        for x in (0, 1):
            col = e.add32(col0, 8 * j + x)
            cok = e.setp("lt", col, o)
            phases = il.ph * il.pw
            if il.channel_major:
                gc, ab = e.bin(tt.DivOp, "u32", col, phases), e.bin(tt.RemOp, "u32", col, phases)
                gi, c = e.bin(tt.DivOp, "u32", gc, il.cg), e.bin(tt.RemOp, "u32", gc, il.cg)
            else:
                pi, c = e.bin(tt.DivOp, "u32", col, il.cg), e.bin(tt.RemOp, "u32", col, il.cg)
                gi, ab = e.bin(tt.DivOp, "u32", pi, phases), e.bin(tt.RemOp, "u32", pi, phases)
            a, b = e.bin(tt.DivOp, "u32", ab, il.pw), e.bin(tt.RemOp, "u32", ab, il.pw)
            # dx[n, g*Cg + c, rb + a, qb + b] - dx[n, 0, rb, qb]
            coff = e.mad32(e.mad32(gi, il.cg, c), hw, e.mad32(a, il.w, b))
            for h in (0, 1):
                hh, ww = e.add32(rbase[h], a), e.add32(qbase[h], b)
                gd = e.reg("pred")
                e.add(tt.AndOp("pred", gd, rok[h], cok))
                for v, lim in ((hh, il.h), (ww, il.w)):
                    inside = e.setp("lt", v, lim)
                    e.add(tt.AndOp("pred", gd, gd, inside))
                ptr = e.reg("b64")
                e.add(tt.MovOp("b64", ptr, base))
                builders.advance_pointer(e, ptr, e.add32(rowlin[h], coff), eb)
                v = acc[4 * j + 2 * h + x]
                if eb == 4:
                    e.add(tt.StOp("global.f32", ptr, [v], 0, gd))
                    continue
                out = e.reg("b16")
                e.add(tt.CvtOp(f"rn.{out_type}.f32", out, [v]))
                e.add(tt.StOp("global.b16", ptr, [out], 0, gd))


__all__ = ["Interleave", "epilogue", "lower_target", "match"]
