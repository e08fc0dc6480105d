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
so), stored when that position lies inside ``dx``; the rest of ``y`` (rows the crops
drop) is never needed, and the GEMM computes only the rows and columns that reach ``dx``
(:meth:`Interleave.trimmed`). A kernel of one tap along a strided axis (a 1x1/2
shortcut's) has one phase: ``y [N, C, R, Q]`` reshaped ``[N, C, R, 1, Q, 1]``, a
``select`` of a constant ``[1, 1, 1, Ph, 1, Pw]`` mask with one true element against
zero, then reshaped and cropped: each element of ``y`` owns a ``Ph x Pw`` block of ``dx``,
its value at the mask's place and zeros at the others (:attr:`Interleave.single`).

:func:`match` recognizes either chain after a convolution (each value used once; the
composite checked on one image, every place of ``dx``, against the closed form) and
:func:`epilogue` stores the GEMM's accumulators that way, in place of
:func:`tessera.passes.sm90.conv_implicit.nchw_epilogue`: the convolution writes ``dx``
once instead of writing ``y`` for a slice or select kernel to read and write again.
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
    single: tuple[int, int] | None = None
    """A one-tap kernel's input gradient (a 1x1/2 shortcut's): ``y`` has no phases in its
    channels (``oc = g*Cg + c``); each of its elements owns the ``Ph x Pw`` places
    ``(r*Ph + a - oh, q*Pw + b - ow)`` of ``dx`` and holds the one at ``(a, b) = single``,
    zeros at the others (the select of conv_grad's ``mask``, written by the epilogue)."""
    channel_major: bool = False
    """The GEMM's columns in (group, channel, phase) order, ``oc = ((g*Cg + c)*Ph + a)*Pw
    + b``, when the weight relayout wrote its rows so
    (:mod:`tessera.passes.sm90.conv_phase_weight`): a warp's stores of a channel's
    phases then fill whole runs of dx's rows."""

    @property
    def channels(self) -> int:
        """The convolution's output channels."""
        if self.single is not None:
            return self.groups * self.cg
        return self.groups * self.ph * self.pw * self.cg

    def place(self, oc: np.ndarray, r: np.ndarray, q: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(channel, row, column)`` of ``dx`` for output channel ``oc`` at ``(r, q)``
        (the row or column may lie outside ``dx``: not stored); with :attr:`single` the
        place of the value."""
        if self.single is not None:
            a, b = self.single
            return oc, r * self.ph + a - self.oh, q * self.pw + b - self.ow
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

    def written(self) -> np.ndarray:
        """``[C, H, W]``: per place of one image of ``dx``, the linear index into one image
        of ``y`` of the element stored there, -1 where a zero is, -2 where nothing is."""
        out = np.full((self.groups * self.cg, self.h, self.w), -2, np.int64)
        oc, r, q = np.meshgrid(np.arange(self.channels), np.arange(self.rows),
                               np.arange(self.cols), indexing="ij")
        lin = (oc * self.rows + r) * self.cols + q
        if self.single is not None:
            a0, b0 = self.single
            for a in range(self.ph):
                for b in range(self.pw):
                    hh, ww = r * self.ph + a - self.oh, q * self.pw + b - self.ow
                    ok = (hh >= 0) & (hh < self.h) & (ww >= 0) & (ww < self.w)
                    val = lin if (a, b) == (a0, b0) else np.full_like(lin, -1)
                    out[oc[ok], hh[ok], ww[ok]] = val[ok]
            return out
        ch, hh, ww = self.place(oc, r, q)
        ok = (hh >= 0) & (hh < self.h) & (ww >= 0) & (ww < self.w)
        out[ch[ok], hh[ok], ww[ok]] = lin[ok]
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
        user, g.ReshapeOp | g.TransposeOp | g.SliceOp | g.SelectOp
    ):
        if isinstance(user, g.SliceOp) and any(s != 1 for s in user.stride.get_values()):
            break
        if isinstance(user, g.SelectOp) and _mask(user, v) is None:
            break
        ops.append(user)
        v = user.results[0]
    return ops


def _mask(op: g.SelectOp, v: SSAValue) -> np.ndarray | None:
    """The constant mask of ``select(mask, v, 0)`` (one for every image), else None."""
    cond, zero = op.cond.owner, op.on_false.owner
    if op.on_true is not v or not isinstance(cond, g.ConstantOp) or \
            not isinstance(zero, g.ConstantOp):
        return None
    if any(float(x) != 0.0 for x in zero.value.get_values()):
        return None
    shape = tuple(g.shape_of(op.cond))
    vals = np.asarray([bool(x) for x in cond.value.get_values()])
    if not shape or shape[0] != 1 or vals.size not in (1, int(np.prod(shape))):
        return None
    return np.broadcast_to(vals, shape) if vals.size == 1 else vals.reshape(shape)


def _evaluate(ops: Sequence[Operation], x: np.ndarray) -> np.ndarray:
    """The data movement of ``ops`` on one image ``x`` (batch dim of size 1)."""
    for op in ops:
        if isinstance(op, g.SelectOp):
            keep = _mask(op, op.on_true)
            assert keep is not None
            shape = [1, *g.shape_of(op.result)[1:]]
            x = np.broadcast_to(np.where(keep, x, -1), shape)
            continue
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
    ops (the last one's result is ``dx``), or None when they are not such a chain: the
    phases as channels (a reshape to ``[N, G, Ph, Pw, Cg, R, Q]`` and the transpose
    :data:`PERM`) or one phase (a select of a constant ``[1, 1, 1, Ph, 1, Pw]`` mask
    with one true element). Checked on one image, every place of ``dx``, against the
    closed form (:meth:`Interleave.written`)."""
    ops = _chain(conv)
    if not ops:
        return None
    n, oc, rows, cols = g.shape_of(conv.result)
    if oc * rows * cols > CHECK_ELEMENTS:
        return None
    selects = [op for op in ops if isinstance(op, g.SelectOp)]
    if selects:
        found = _single(ops, selects[0], oc)
    else:
        found = _phases(ops, n, rows, cols)
    if found is None:
        return None
    groups, ph, pw, cg, single, ops = found
    for op in ops:
        if g.shape_of(op.results[0])[0] != n or (
                isinstance(op, g.TransposeOp) and int(op.permutation.get_values()[0]) != 0) or (
                isinstance(op, g.SliceOp) and op.start.get_values()[0] != 0):
            return None
    _, _, h, w = g.shape_of(ops[-1].results[0])
    ids = np.arange(oc * rows * cols, dtype=np.int64).reshape(1, oc, rows, cols)
    got = _evaluate(ops, ids)[0]
    # the offsets, from the element stored first in dx
    flat = got.reshape(-1)
    at = int(np.argmax(flat >= 0))
    if flat[at] < 0:
        return None
    _, hh, ww = np.unravel_index(at, got.shape)
    c0, rest = divmod(int(flat[at]), rows * cols)
    r0, q0 = divmod(rest, cols)
    if single is not None:
        a0, b0 = single
    else:
        a0, b0 = divmod((c0 // cg) % (ph * pw), pw)
    il = Interleave(groups, ph, pw, cg, rows, cols, h, w, r0 * ph + a0 - int(hh),
                    q0 * pw + b0 - int(ww), single)
    if not np.array_equal(il.written(), got):
        return None
    return il, ops


def _end(ops: list[Operation], n: int, c: int, after: int) -> list[Operation] | None:
    """``ops`` up to the last value of the input's layout ``[N, C, H, W]`` past index
    ``after`` (only more of it would follow)."""
    last = None
    for i, op in enumerate(ops):
        s = g.shape_of(op.results[0])
        if i > after and len(s) == 4 and s[0] == n and s[1] == c:
            last = i
    return None if last is None else ops[: last + 1]


def _phases(ops: list[Operation], n: int, rows: int, cols: int) -> tuple | None:
    """``(groups, Ph, Pw, Cg, None, ops)`` of a phases-as-channels chain."""
    s7 = list(g.shape_of(ops[0].results[0]))
    if not isinstance(ops[0], g.ReshapeOp) or len(s7) != 7 or s7[0] != n or \
            s7[5:] != [rows, cols] or len(ops) < 2:
        return None
    t = ops[1]
    if not isinstance(t, g.TransposeOp) or tuple(t.permutation.get_values()) != PERM:
        return None
    kept = _end(ops, n, s7[1] * s7[4], 1)
    return None if kept is None else (*s7[1:5], None, kept)


def _single(ops: list[Operation], sel: g.SelectOp, oc: int) -> tuple | None:
    """``(1, Ph, Pw, C, (a, b), ops)`` of a one-phase chain."""
    keep = _mask(sel, sel.on_true)
    assert keep is not None
    if keep.ndim != 6 or keep.shape[:3] != (1, 1, 1) or keep.shape[4] != 1 or \
            int(keep.sum()) != 1:
        return None
    (_, _, _, a0, _, b0), = np.argwhere(keep)
    kept = _end(ops, g.shape_of(sel.result)[0], oc, ops.index(sel))
    return None if kept is None else (1, keep.shape[3], keep.shape[5], oc,
                                      (int(a0), int(b0)), kept)


def lower_target(lw: _FunctionLowering, conv: g.Conv2dOp
                 ) -> tuple[Interleave, SSAValue] | None:
    """When ``conv`` is followed by an interleave (:func:`match`): its description and
    ``dx``'s buffer, made now, with the chain's ops left to the convolution (``lw.skip``: its
    epilogue stores ``dx``)."""
    from tessera.passes.tile_policy import rounding_policy

    found = match(conv)
    if found is None:
        return None
    il, ops = found
    if any(rounding_policy(op.results[0].type) is not None for op in ops):
        return None  # rounded again by a numeric policy: lowered as they are
    dx = ops[-1].results[0]
    buf = lw.env[dx] = lw.alloc(dx.type)
    lw.skip.update(ops)
    # a select's mask and zero, when nothing else reads them
    for sel in (op for op in ops if isinstance(op, g.SelectOp)):
        for const in (sel.cond.owner, sel.on_false.owner):
            if all(u.operation in lw.skip for u in const.results[0].uses):
                lw.skip.add(const)
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
    zero = e.reg("f32" if eb == 4 else "b16")  # a one-phase gradient's other places
    if il.single is not None:
        e.add(tt.MovOp("f32", zero, e.fimm(0.0)) if eb == 4 else tt.MovOp("b16", zero,
                                                                          e.imm(0)))

    def store(v: SSAValue, h: int, coff: SSAValue, a: SSAValue | int, b: SSAValue | int,
              cok: SSAValue) -> None:
        """``v`` at ``dx[n, ., rb + a, qb + b]`` of row ``h``, ``coff`` elements past the
        row's phase-0 place, if that lies inside ``dx``."""
        hh, ww = e.add32(rbase[h], a), e.add32(qbase[h], b)
        gd = e.reg("pred")
        e.add(tt.AndOp("pred", gd, rok[h], cok))
        for val, lim in ((hh, il.h), (ww, il.w)):
            e.add(tt.AndOp("pred", gd, gd, e.setp("lt", val, lim)))
        ptr = e.reg("b64")
        e.add(tt.MovOp("b64", ptr, base))
        builders.advance_pointer(e, ptr, e.add32(rowlin[h], coff), eb)
        if eb == 4:
            e.add(tt.StOp("global.f32", ptr, [v], 0, gd))
            return
        if v is zero:
            e.add(tt.StOp("global.b16", ptr, [zero], 0, gd))
            return
        out = e.reg("b16")
        e.add(tt.CvtOp(f"rn.{out_type}.f32", out, [v]))
        e.add(tt.StOp("global.b16", ptr, [out], 0, gd))

    for j in range(bn // 8):
        for x in (0, 1):
            col = e.add32(col0, 8 * j + x)
            cok = e.setp("lt", col, o)
            if il.single is not None:
                # channel col: the value at its phase, zeros at the block's other places
                for a in range(il.ph):
                    for b in range(il.pw):
                        coff = e.mad32(col, hw, a * il.w + b)
                        for h in (0, 1):
                            v = acc[4 * j + 2 * h + x] if (a, b) == il.single else zero
                            store(v, h, coff, a, b, cok)
                continue
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
                store(acc[4 * j + 2 * h + x], h, coff, a, b, cok)


__all__ = ["Interleave", "epilogue", "lower_target", "match"]
