"""The input gradient of a 2-D convolution as one stride-1 convolution of the undilated
output gradient, shared by the ``conv2d`` adjoint (:mod:`tessera.autodiff.scientific_rules`)
and the torch backend's ``aten.convolution_backward`` rule.

The forward ``y[i] = sum over k of x[s*i + d*k - p] w[k]`` (per spatial axis) gives
``dx[j] = sum of g[i] w[k]`` over ``s*i + d*k - p = j``. Along an axis of stride 1 that is
the correlation of ``g`` with the reversed kernel (the forward's dilation): one
``tgraph.reverse`` of the weight, which a batch-channel swap before it costs nothing
more (the reverse reads through it).

Along an axis of stride ``s > 1`` (the sub-pixel or phase decomposition): output row
``j = s*q + a`` of phase ``a`` receives exactly the taps ``k`` with ``(a + p - k*d) % s
== 0``, each from gradient row ``q + (a + p - k*d) / s``. Over all phases these offsets
``delta`` span a window of ``T`` rows (``T = 2`` for a 3x3/2 kernel, against 3 taps over a
twice-as-long stride-dilated gradient before), so all ``s`` phases are ONE stride-1
convolution of ``g`` whose output channels are (phase, channel): the kernel of phase
``a`` at window row ``u`` is ``w[off + a + s*(T-1-u)]`` (zero outside the kernel), i.e.
the kernel zero-padded to ``s*T`` rows, reshaped ``[T, s]`` and reversed along ``T``.
The phases' outputs interleave with one transpose (``[.., q, a, ..]`` is row ``s*q + a``),
whose rows the input needs are cropped from it whole (a slice that reads through the
transpose: one pass), plus a crop inside the last phase row when the input's size is
not a multiple of the stride. A kernel of one tap along an axis of stride ``s`` (a 1x1/2 shortcut) gives
only one phase taps: it is computed alone and the others are zeros, written by one
``select`` of the broadcast product (no product of zero rows, no dilated copy). A dilated
kernel along a strided axis is first spread to its extent with zero taps between (its
weight, not the gradient). Groups map to groups of ``(phase, C/G)`` output channels.

Symmetric padding of the convolution: ``P`` rows on both sides, ``P >= -delta_min``
so that the first output row needs no negative index and large enough that the last
phase row the input needs is computed; rows of the input the forward never reached
(``(H + 2p - E) % s`` rows: an output_padding-like tail) read zero rows, as they must.

The construction is written once against :class:`Builder`, which each caller
implements with its own op constructors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np

T = TypeVar("T")


class Builder(Protocol, Generic[T]):
    """The ops the input gradient is built from, on the caller's values ``T``."""

    def shape(self, x: T) -> tuple[int, ...]: ...
    def reshape(self, x: T, shape: list[int]) -> T: ...
    def transpose(self, x: T, perm: list[int]) -> T: ...
    def reverse(self, x: T, dims: list[int]) -> T: ...
    def pad(self, x: T, axis: int, before: int, after: int) -> T:
        """``x`` with ``before`` and ``after`` zeros along ``axis``."""
        ...
    def take(self, x: T, axis: int, start: int, stop: int) -> T:
        """``x[start:stop]`` along ``axis``."""
        ...
    def crop(self, x: T, start: list[int], shape: list[int]) -> T:
        """``x[start : start + shape]`` (one slice, ``x`` itself when it is all of ``x``)."""
        ...
    def conv2d(self, x: T, w: T, padding: list[int], dilation: list[int], groups: int) -> T:
        """A stride-1 ``conv2d``."""
        ...
    def mask(self, x: T, keep: np.ndarray) -> T:
        """``where(keep, x, 0)``, ``keep`` a bool array broadcast against ``x``."""
        ...


@dataclass(frozen=True)
class AxisPlan:
    """How one spatial axis of the input gradient is computed (module docstring)."""

    stride: int
    phases: int
    """Phases computed by the convolution as output channels: ``s`` (``1`` at stride 1 or
    for a one-tap kernel)."""
    single: int | None
    """The one phase that gets a tap when the kernel has one tap and ``s > 1``."""
    spread: int
    """The kernel's taps spread by this many rows (its dilation, along a strided axis)."""
    before: int
    after: int
    """Zero rows around the (spread) kernel before it is cut into ``[taps, phases]``."""
    taps: int
    conv_dilation: int
    padding: int
    start: int
    """First row of the interleaved result that is input row 0."""
    rows: int
    """Rows of the convolution's output."""

    @property
    def period(self) -> int:
        """Rows of the interleaved result per row of the convolution's output."""
        return 1 if self.stride == 1 else self.stride


def axis_plan(n: int, out: int, k: int, s: int, p: int, d: int) -> AxisPlan:
    """The plan of an axis: input size ``n``, gradient size ``out``, kernel ``k``, the
    forward's stride ``s``, padding ``p`` and dilation ``d``."""
    if s == 1:
        lo = p - (k - 1) * d  # gradient row of the reversed kernel's tap 0, for input row 0
        pad = max(0, -lo, lo + (k - 1) * d + n - out)
        return AxisPlan(1, 1, None, 1, 0, 0, k, d, pad, lo + pad, out + 2 * pad - (k - 1) * d)
    e = (k - 1) * d + 1
    deltas = [(a + p - t) // s for a in range(s) for t in range(e) if (a + p - t) % s == 0]
    dmin, dmax = min(deltas), max(deltas)
    taps = dmax - dmin + 1
    off = p - s * dmax  # kernel row of phase 0, window row taps - 1
    before, after = -off, off + s * taps - e
    assert before >= 0 and after >= 0, (n, out, k, s, p, d)
    q = -(-n // s)  # rows per phase that the input needs
    pad = max(0, -dmin, dmax + q - out)
    rows = out + 2 * pad - taps + 1
    single = (-p) % s if e == 1 else None
    return AxisPlan(s, 1 if e == 1 else s, single, d if e > 1 else 1, before, after, taps, 1,
                    pad, s * (dmin + pad), rows)


def _spread(b: Builder[T], w: T, axis: int, d: int) -> T:
    """``d - 1`` zero taps between the taps of ``w`` along ``axis``."""
    shape = list(b.shape(w))
    k = shape[axis]
    w = b.reshape(w, [*shape[: axis + 1], 1, *shape[axis + 1 :]])
    w = b.pad(w, axis + 1, 0, d - 1)
    w = b.reshape(w, [*shape[:axis], k * d, *shape[axis + 1 :]])
    return b.take(w, axis, 0, (k - 1) * d + 1)


def group_transpose(b: Builder[T], w: T, groups: int) -> T:
    """``w [O, C/G, kh, kw]`` with O and C swapped within each of the ``groups`` groups:
    ``[C, O/G, kh, kw]``, the weight of the grouped transposed convolution (a reshape
    when either side of a group has one channel, as a depthwise one's)."""
    o, cg, kh, kw = b.shape(w)
    if groups == 1:
        return b.transpose(w, [1, 0, 2, 3])
    og = o // groups
    if og == 1 or cg == 1:
        return b.reshape(w, [groups * cg, og, kh, kw])
    w5 = b.transpose(b.reshape(w, [groups, og, cg, kh, kw]), [0, 2, 1, 3, 4])
    return b.reshape(w5, [groups * cg, og, kh, kw])


def input_grad(
    b: Builder[T], g: T, w: T, size: tuple[int, int], stride: list[int], padding: list[int],
    dilation: list[int], groups: int,
) -> T:
    """``dx [N, C, H, W]`` of ``y = conv2d(x, w, stride, padding, dilation, groups)`` for
    the output gradient ``g`` (module docstring); ``size`` is ``(H, W)``."""
    n, o, lh, lw = b.shape(g)
    _, cg, kh, kw = b.shape(w)
    c = cg * groups
    og = o // groups
    plans = [axis_plan(size[i], (lh, lw)[i], (kh, kw)[i], stride[i], padding[i], dilation[i])
             for i in range(2)]
    ph, pw = (pl.phases for pl in plans)
    th, tw = (pl.taps for pl in plans)
    if ph == pw == 1:
        # no phases as channels: the flipped, group-transposed kernel (a one-tap kernel
        # of a strided axis is its own sub-kernel)
        wc = b.reverse(group_transpose(b, w, groups), [i for i in (2, 3) if b.shape(w)[i] > 1])
    else:
        for i, pl in enumerate(plans):
            if pl.phases > 1:
                if pl.spread > 1:
                    w = _spread(b, w, 2 + i, pl.spread)
                w = b.pad(w, 2 + i, pl.before, pl.after)
        w7 = b.reshape(w, [groups, og, cg, th, ph, tw, pw])
        w7 = b.reverse(w7, [d for d, t in ((3, th), (5, tw)) if t > 1])
        w7 = b.transpose(w7, [0, 4, 6, 2, 1, 3, 5])  # [G, Ph, Pw, C/G, O/G, Th, Tw]
        wc = b.reshape(w7, [groups * ph * pw * cg, og, th, tw])
    y = b.conv2d(g, wc, [pl.padding for pl in plans], [pl.conv_dilation for pl in plans],
                 groups)
    # the rows of the convolution's output that the input needs: whole phase rows first
    # (cropped before the interleave, so that the crop reads through the transpose),
    # then what remains inside a row of phases
    lo = [pl.start // pl.period for pl in plans]
    hi = [-(-(pl.start + size[i]) // pl.period) for i, pl in enumerate(plans)]
    rh, rw = hi[0] - lo[0], hi[1] - lo[1]
    if ph * pw > 1:
        y = b.reshape(y, [n, groups, ph, pw, cg, plans[0].rows, plans[1].rows])
        y = b.transpose(y, [0, 1, 4, 5, 2, 6, 3])  # [N, G, C/G, rows, Ph, cols, Pw]
        y = b.crop(y, [0, 0, 0, lo[0], 0, lo[1], 0], [n, groups, cg, rh, ph, rw, pw])
    else:
        y = b.crop(y, [0, 0, lo[0], lo[1]], [n, c, rh, rw])
    if any(pl.single is not None for pl in plans):
        y = b.reshape(y, [n, c, rh, ph, rw, pw])
        # the one phase of a one-tap strided axis: its rows, zeros between
        keep = np.ones([1, 1, 1, 1, 1, 1], dtype=bool)
        for i, pl in enumerate(plans):
            if pl.single is not None:
                sel = np.arange(pl.stride) == pl.single
                keep = keep & sel.reshape([pl.stride if j == 3 + 2 * i else 1 for j in range(6)])
        y = b.mask(y, keep)
    y = b.reshape(y, [n, c, rh * plans[0].period, rw * plans[1].period])
    first = [pl.start - lo[i] * pl.period for i, pl in enumerate(plans)]
    return b.crop(y, [0, 0, *first], [n, c, *size])

__all__ = ["AxisPlan", "Builder", "axis_plan", "group_transpose", "input_grad"]
