"""A strided convolution's input-gradient kernel read by the implicit GEMM's weight
relayout straight from the forward weight: no zero-pad, reverse or transpose kernels.

:func:`tessera.autodiff.conv_grad.input_grad` builds the kernel of the phase convolution
(stride phases as output channels) from the forward weight ``w [O, C, kh, kw]`` by data
movement only: zero pads (concats of broadcast zeros), a reshape into ``[T, P]`` taps and
phases per axis, a reverse and a transpose, ``wc [Ph*Pw*C, O, Th, Tw]``. Each element of
``wc`` is one element of ``w`` or zero, and the map factorizes by axis:
``wc[(a*Pw + b)*C + c, o, u, v] = w[o, c, rows[a][u], cols[b][v]]`` (zero where a table
has no tap): a :class:`PhaseWeight`. :func:`claim` (run over the function before any op
is lowered) finds such a chain in front of an implicit convolution, checks the map
element by element against the tables, and leaves the chain's ops unlowered;
:func:`weight_kernel` writes the GEMM's K-major operand ``wk[oc, (u*kwp + v)*Cp + o]``
from ``w`` itself, one element per thread (``tessera.passes.sm90.conv_layout``'s weight
relayout with the tables in place of its flip).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import Operation, SSAValue

from tessera.ir import graph as g
from tessera.ir import target as tt
from tessera.passes.sm90 import conv_layout
from tessera.passes.sm90.asm import TargetAsm

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

NOTE = "phase_weight"
"""Key of ``lw.notes`` entries ``(NOTE, conv) -> (PhaseWeight, w)``."""
MOVES = (g.ReshapeOp, g.TransposeOp, g.ReverseOp, g.ConcatOp, g.SliceOp, g.BroadcastOp)
CHECK_ELEMENTS = 1 << 24
"""Most elements of a kernel whose map :func:`match` evaluates."""


@dataclass(frozen=True)
class PhaseWeight:
    """``wc[(a*Pw + b)*C + c, o, u, v] = w[o, c, rows[a][u], cols[b][v]]`` (zero where
    the table holds -1) for ``w [O, C, kh, kw]``."""

    o: int
    c: int
    kh: int
    kw: int
    rows: tuple[tuple[int, ...], ...]
    """``[Ph][Th]``: the forward kernel row of phase ``a`` at window row ``u``, or -1."""
    cols: tuple[tuple[int, ...], ...]

    @property
    def ph(self) -> int:
        return len(self.rows)

    @property
    def pw(self) -> int:
        return len(self.cols)

    @property
    def th(self) -> int:
        return len(self.rows[0])

    @property
    def tw(self) -> int:
        return len(self.cols[0])

    def index_map(self) -> np.ndarray:
        """``wc``'s elements as linear indices of ``w`` (-1: zero)."""
        r = np.asarray(self.rows).reshape(self.ph, 1, 1, 1, self.th, 1)
        q = np.asarray(self.cols).reshape(1, self.pw, 1, 1, 1, self.tw)
        c = np.arange(self.c).reshape(1, 1, self.c, 1, 1, 1)
        o = np.arange(self.o).reshape(1, 1, 1, self.o, 1, 1)
        lin = np.where((r >= 0) & (q >= 0), ((o * self.c + c) * self.kh + r) * self.kw + q, -1)
        lin = np.broadcast_to(lin, (self.ph, self.pw, self.c, self.o, self.th, self.tw))
        return lin.reshape(self.ph * self.pw * self.c, self.o, self.th, self.tw)

    def apply(self, w: np.ndarray) -> np.ndarray:
        """``wc`` from ``w`` (numpy; the reference of :func:`weight_kernel`)."""
        m = self.index_map()
        return np.where(m >= 0, w.reshape(-1)[np.maximum(m, 0)], 0).astype(w.dtype)


def _zero(v: SSAValue) -> bool:
    """``v`` is a constant zero tensor (a broadcast of one)."""
    op = v.owner
    if isinstance(op, g.BroadcastOp):
        op = op.input.owner
    if not isinstance(op, g.ConstantOp):
        return False
    return all(float(x) == 0.0 for x in op.value.get_values())


def _chain(v: SSAValue) -> tuple[list[Operation], SSAValue] | None:
    """The data-movement ops that make ``v`` from one tensor, in program order, each
    result used once (the zero pieces of its concats, a constant or a broadcast of one,
    among them), and that tensor."""
    ops: list[Operation] = []
    while isinstance(op := v.owner, MOVES) and not isinstance(op, g.BroadcastOp):
        if len(list(op.results[0].uses)) != 1:
            break
        if isinstance(op, g.ConcatOp):
            live = [x for x in op.inputs if not _zero(x)]
            zeros = [x for x in op.inputs if _zero(x)]
            if len(live) != 1 or any(u.operation is not op for x in zeros for u in x.uses):
                return None
            ops.append(op)
            ops.extend(dict.fromkeys(x.owner for x in zeros))  # before the concat, reversed
            v = live[0]
        else:
            ops.append(op)
            v = op.operands[0]
    return (ops[::-1], v) if ops else None


def _evaluate(ops: Sequence[Operation], root: SSAValue, x: np.ndarray) -> np.ndarray:
    """The chain on ``x`` (the root's elements), zeros as -1."""
    vals: dict[SSAValue, np.ndarray] = {root: x}
    for op in ops:
        if isinstance(op, g.BroadcastOp | g.ConstantOp):  # a zero piece
            vals[op.results[0]] = np.full(g.shape_of(op.results[0]), -1, np.int64)
            continue
        if isinstance(op, g.ConcatOp):
            parts = [vals[v] if v in vals else np.full(g.shape_of(v), -1, np.int64)
                     for v in op.inputs]
            vals[op.result] = np.concatenate(parts, axis=op.axis.value.data)
            continue
        a = vals[op.operands[0]]
        if isinstance(op, g.ReshapeOp):
            r = a.reshape(g.shape_of(op.result))
        elif isinstance(op, g.TransposeOp):
            r = a.transpose([int(p) for p in op.permutation.get_values()])
        elif isinstance(op, g.ReverseOp):
            r = np.flip(a, op.dim_values())
        else:
            assert isinstance(op, g.SliceOp)
            r = a[tuple(slice(s, e, k) for s, e, k in zip(
                op.start.get_values(), op.limit.get_values(), op.stride.get_values()))]
        vals[op.results[0]] = r
    return vals[ops[-1].results[0]]


def _table(m: np.ndarray, axis_of: np.ndarray, phases: int, taps: int,
           phase_of: np.ndarray, tap_axis: int) -> tuple[tuple[int, ...], ...] | None:
    """The ``[phases][taps]`` table of one axis read off the map (-1 where no element
    of that phase and tap is a weight element); None when the map disagrees with itself."""
    table = np.full((phases, taps), -1, np.int64)
    valid = m >= 0
    for a in range(phases):
        for u in range(taps):
            sel = valid & (phase_of == a)
            sel = np.take(sel, [u], axis=tap_axis)
            vals = np.take(axis_of, [u], axis=tap_axis)[sel]
            if vals.size:
                if (vals != vals[0]).any():
                    return None
                table[a, u] = vals[0]
    return tuple(tuple(int(x) for x in row) for row in table)


def match(conv: g.Conv2dOp) -> tuple[PhaseWeight, list[Operation], SSAValue] | None:
    """``conv``'s kernel as a :class:`PhaseWeight` of a forward weight, the ops that make
    it (to leave unlowered) and that weight; None when it is not one."""
    found = _chain(conv.weight)
    if found is None:
        return None
    ops, root = found
    rs = g.shape_of(root)
    oc, o, th, tw = g.shape_of(conv.weight)
    if len(rs) != 4 or rs[0] != o or oc % rs[1] or oc * o * th * tw > CHECK_ELEMENTS:
        return None
    _, c, kh, kw = rs
    m = _evaluate(ops, root, np.arange(o * c * kh * kw, dtype=np.int64).reshape(rs))
    phases = oc // c
    if phases == 1:  # a stride-1 kernel's flip: conv_layout.weight_kernel reads it flipped
        return None
    oi = np.arange(oc).reshape(oc, 1, 1, 1)
    rest = np.maximum(m, 0)
    i_of, j_of = (rest // kw) % kh, rest % kw
    for ph in (p for p in range(1, phases + 1) if phases % p == 0):
        pw = phases // ph
        a_of = np.broadcast_to((oi // c) // pw, m.shape)
        b_of = np.broadcast_to((oi // c) % pw, m.shape)
        rows = _table(m, i_of, ph, th, a_of, 2)
        cols = _table(m, j_of, pw, tw, b_of, 3)
        if rows is None or cols is None:
            continue
        pwt = PhaseWeight(o, c, kh, kw, rows, cols)
        if np.array_equal(pwt.index_map(), m):
            # the zero constants are claimed too when every user of theirs is
            consts = {x.input.owner for x in ops if isinstance(x, g.BroadcastOp)}
            claimed = set(ops)
            extra = [k for k in consts if all(u.operation in claimed for u in k.result.uses)]
            return pwt, extra + ops, root
    return None


def claim(lw: _FunctionLowering, op: Operation) -> None:
    """Before lowering: a convolution that takes the implicit GEMM (not the pointwise
    one) with the one-element-per-thread weight relayout (fewer than
    ``WIDE_KERNEL_TAPS`` taps) and whose kernel is a :class:`PhaseWeight` gets it noted;
    its ops are skipped (``lower_conv2d_implicit`` then reads the forward weight)."""
    from tessera.passes.sm90.conv import conv1x1_eligible
    from tessera.passes.sm90.conv_implicit import WIDE_KERNEL_TAPS, implicit_eligible
    from tessera.passes.tile_policy import rounding_policy

    if not isinstance(op, g.Conv2dOp) or implicit_eligible(op) is not None or \
            conv1x1_eligible(op) is None or rounding_policy(op.result.type) is not None:
        return  # not lowered by lower_conv2d_implicit (a rounding policy's lowering)
    _, _, th, tw = g.shape_of(op.weight)
    if th * tw >= WIDE_KERNEL_TAPS:  # relaid out by the NHWC copy, from a made kernel
        return
    found = match(op)
    if found is None:
        return
    pwt, ops, root = found
    lw.skip.update(ops)
    lw.notes[NOTE, op] = (pwt, root)


def weight_kernel(name: str, pwt: PhaseWeight, cp: int, eb: int = 2, parts: int = 1,
                  kwp: int = 0, channel_major: bool = False) -> tt.FuncOp:
    """The ``ttarget.func`` ``(wk, w)``: ``wk[oc, (u*kwp + v)*cp + o] = wc[oc, o, u, v]``
    (:class:`PhaseWeight`; zero for padded channels, padded filter-row taps and taps no
    weight element reaches), one element per thread over ``conv_layout.weight_grid``
    CTAs; f32 as TF32 ``parts`` as ``conv_layout.weight_kernel`` writes them.
    ``channel_major``: row ``(c*Ph + a)*Pw + b`` of ``wk`` holds ``wc``'s channel ``(a*Pw
    + b)*C + c`` (the GEMM's columns in (channel, phase) order:
    :attr:`tessera.passes.sm90.conv_interleave.Interleave.channel_major`)."""
    func = tt.FuncOp(name, ["u64", "u64"], conv_layout.THREADS)
    out_param, w_param = func.block.args
    e = TargetAsm(func)
    kwp = max(kwp, pwt.tw)
    oc = pwt.ph * pwt.pw * pwt.c
    k = pwt.th * kwp * cp
    lin = e.mad32(e.sreg("ctaid.x"), conv_layout.THREADS, e.sreg("tid.x"))
    ok = e.setp("lt", lin, oc * k)
    oi, col = e.bin(tt.DivOp, "u32", lin, k), e.bin(tt.RemOp, "u32", lin, k)
    tap, o = e.bin(tt.DivOp, "u32", col, cp), e.bin(tt.RemOp, "u32", col, cp)
    u, v = e.bin(tt.DivOp, "u32", tap, kwp), e.bin(tt.RemOp, "u32", tap, kwp)
    if channel_major:
        c, ab = (e.bin(tt.DivOp, "u32", oi, pwt.ph * pwt.pw),
                 e.bin(tt.RemOp, "u32", oi, pwt.ph * pwt.pw))
    else:
        ab, c = e.bin(tt.DivOp, "u32", oi, pwt.c), e.bin(tt.RemOp, "u32", oi, pwt.c)
    a, b = e.bin(tt.DivOp, "u32", ab, pwt.pw), e.bin(tt.RemOp, "u32", ab, pwt.pw)
    inside = e.reg("pred")
    e.add(tt.AndOp("pred", inside, ok, e.setp("lt", o, pwt.o)))

    def lookup(table: tuple[tuple[int, ...], ...], phase: SSAValue, t: SSAValue) -> SSAValue:
        """The table's entry at ``(phase, t)``; ``inside`` cleared where it has none."""
        hit, val = e.setp("ne", phase, phase), e.reg("b32")  # false: no entry found yet
        e.mov("b32", val, 0)
        for pa, row in enumerate(table):
            for ti, x in enumerate(row):
                if x < 0:
                    continue
                here = e.reg("pred")
                e.add(tt.AndOp("pred", here, e.setp("eq", phase, pa), e.setp("eq", t, ti)))
                e.mov("b32", val, x, here)
                e.add(tt.OrOp("pred", hit, hit, here))
        e.add(tt.AndOp("pred", inside, inside, hit))
        return val

    i = lookup(pwt.rows, a, u)
    j = lookup(pwt.cols, b, v)
    src_i = e.mad32(e.mad32(e.mad32(o, pwt.c, c), pwt.kh, i), pwt.kw, j)  # w[o, c, i, j]
    conv_layout.copy_element(e, w_param, src_i, inside, out_param, lin, ok, eb, parts, oc * k)
    e.add(tt.RetOp())
    return func


__all__ = ["PhaseWeight", "claim", "match", "weight_kernel"]
