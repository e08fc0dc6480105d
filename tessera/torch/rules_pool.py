"""ATen rules: 2-D pooling (max, average, adaptive average) and their backwards.

Every pooling here is a sum (or maximum) of the ``kh x kw`` strided views of the padded
input, one ``slice`` per window tap, and every backward adds each tap's share of the
gradient onto the input's stride phases (:func:`_taps_to_input`): no scatter, no
gather. Output sizes follow torch's ``pooling_output_shape`` (``ceil_mode`` included: a
last window that starts in the right padding is dropped), and an average's divisor
follows ``avg_pool2d`` (``count_include_pad`` counts the padding but not the cells past
it that ``ceil_mode`` adds; ``divisor_override`` replaces both).

The rules register themselves in :data:`tessera.torch.aten_ops.RULES` when this module
is imported (``aten_ops`` imports it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.fx

from tessera.frontend import ops
from tessera.torch.aten_ops import (
    FLOAT_DTYPES,
    TracedTensor,
    int_list,
    opmath_dtype,
    out_dtype,
    pair,
    rule,
    take,
    to,
    torch_dtype,
    ts_dtype,
    val,
    zeros_of,
)
from tessera.torch.rules_nn import _pad_zeros

aten = torch.ops.aten


def _pool_params(kernel: Any, stride: Any, padding: Any) -> tuple[list[int], list[int], list[int]]:
    k = pair(kernel)
    return k, pair(stride, k), pair(padding)


def out_size(n: int, k: int, s: int, p: int, ceil_mode: bool) -> int:
    """torch's ``pooling_output_shape`` (no dilation): windows of ``k`` every ``s`` over
    ``n`` cells padded by ``p``; with ``ceil_mode`` a partial last window counts unless it
    would start in the right padding."""
    num = n + 2 * p - k + (s - 1 if ceil_mode else 0)
    o = num // s + 1
    if ceil_mode and (o - 1) * s >= n + p:
        o -= 1
    return max(o, 0)


def _pool_check(node: torch.fx.Node, x: Any, rest: Sequence[Any], dilation_at: int | None) -> str | None:
    if len(val(x).shape) != 4:
        return "not a batched 2-D pooling"
    if dilation_at is not None and len(rest) > dilation_at:
        d = rest[dilation_at]
        if any(int(v) != 1 for v in ([d] if isinstance(d, int) else d)):
            return f"dilation={d}"
    if not all(isinstance(s, int) for s in val(x).shape[2:]):
        return "symbolic image size"
    return None if val(x).dtype in FLOAT_DTYPES else f"{val(x).dtype} input"


def _max_pool_check(node: torch.fx.Node) -> str | None:
    args = list(node.args)
    backward = node.target is aten.max_pool2d_with_indices_backward.default
    x = args[1] if backward else args[0]
    return _pool_check(node, x, args[2:] if backward else args[1:], 3)


def _padded(x: TracedTensor, k: list[int], st: list[int], pd: list[int], ho: int, wo: int,
            fill: float) -> TracedTensor:
    """``x`` padded by ``pd`` cells of ``fill`` before each image axis and as many after
    as the last window (of ``ho x wo``) needs, at least ``pd``."""
    xp = x
    for axis, p, o in ((2, pd[0], ho), (3, pd[1], wo)):
        i = axis - 2
        after = max(p, (o - 1) * st[i] + k[i] - x.shape[axis] - p)
        for n, before in ((p, True), (after, False)):
            if n <= 0:
                continue
            shape = list(xp.shape)
            shape[axis] = n
            edge = ops.broadcast_to(to(fill, torch_dtype(x)), shape)
            xp = ops.concat([edge, xp] if before else [xp, edge], axis=axis)
    return xp


def _pool_windows(
    x: TracedTensor, k: list[int], st: list[int], pd: list[int], ceil_mode: bool,
    fill: float = float("-inf"),
) -> tuple[list[tuple[int, int, TracedTensor]], int, int]:
    """The ``k[0] x k[1]`` strided views of ``x`` padded with ``fill``, in torch's scan
    order, and the output size."""
    n, c, h, w = x.shape
    ho = out_size(h, k[0], st[0], pd[0], ceil_mode)
    wo = out_size(w, k[1], st[1], pd[1], ceil_mode)
    xp = _padded(x, k, st, pd, ho, wo, fill)
    wins = []
    for i in range(k[0]):
        for j in range(k[1]):
            lo = [0, 0, i, j]
            hi = [n, c, i + st[0] * (ho - 1) + 1, j + st[1] * (wo - 1) + 1]
            wins.append((i, j, ops.slice(xp, lo, hi, [1, 1, st[0], st[1]])))
    return wins, ho, wo


def _window_max(wins: list[tuple[int, int, TracedTensor]]) -> TracedTensor:
    out = wins[0][2]
    for _, _, win in wins[1:]:
        out = ops.maximum(out, win)
    return out


def _flat_cells(ho: int, wo: int, i: int, j: int, st: list[int], pd: list[int], w: int
                ) -> np.ndarray:
    """``[ho, wo]``: the flat input index ``row * w + col`` of window tap ``(i, j)`` of
    each output cell (meaningless where the tap is in the padding)."""
    rows = (np.arange(ho) * st[0] + i - pd[0])[:, None]
    cols = (np.arange(wo) * st[1] + j - pd[1])[None, :]
    return (rows * w + cols).astype(np.int64)


@rule(aten.max_pool2d_with_indices.default, check=_max_pool_check)
def _max_pool(
    node: torch.fx.Node, x: Any, kernel: Any, stride: Any = (), padding: Any = 0,
    dilation: Any = 1, ceil_mode: bool = False,
) -> tuple[TracedTensor, TracedTensor]:
    """The window maximum and its index, as torch's kernels scan a window: the index
    starts at the window's first cell inside the image and moves to each tap in scan
    order whose value is above the best so far or is NaN (so the first maximum, or the
    last NaN). The padding holds ``-inf``, which is never above the start, so no tap in
    it is taken. The maximum itself is the NaN-propagating maximum of the taps."""
    k, st, pd = _pool_params(kernel, stride, padding)
    wins, ho, wo = _pool_windows(x, k, st, pd, bool(ceil_mode))
    out = _window_max(wins)
    w = x.shape[3]
    i64 = ts_dtype(torch.int64)
    first = (np.maximum(np.arange(ho) * st[0] - pd[0], 0)[:, None] * w
             + np.maximum(np.arange(wo) * st[1] - pd[1], 0)[None, :]).astype(np.int64)
    base = _flat_cells(ho, wo, 0, 0, st, pd, w)
    # the taken tap's offset from the window's first tap (a scalar per tap), its cell's
    # flat index added once at the end
    off = ops.constant(first - base, i64)
    best = to(float("-inf"), torch_dtype(x))
    for i, j, win in wins:
        take_it = ops.where(ops.gt(win, best), True, ops.ne(win, win))
        off = ops.where(take_it, to(i * w + j, torch.int64), off)
        best = ops.where(take_it, win, best)
    return out, ops.add(off, ops.constant(base, i64))


@rule(aten.max_pool2d_with_indices_backward.default, check=_max_pool_check)
def _max_pool_backward(
    node: torch.fx.Node, grad: Any, x: Any, kernel: Any, stride: Any, padding: Any,
    dilation: Any, ceil_mode: bool, indices: Any,
) -> TracedTensor:
    """Each output cell's gradient goes to the input cell its index names (``indices``
    from the forward: a cell of the cell's own window), summed in f32 for 16-bit inputs
    where windows overlap: per window tap, the gradient where the index is that tap's
    cell, added onto the input's stride phases (:func:`_taps_to_input`)."""
    k, st, pd = _pool_params(kernel, stride, padding)
    dt = out_dtype(node)
    wide = opmath_dtype(dt)
    ho, wo = grad.shape[2], grad.shape[3]
    w = x.shape[3]
    g = to(grad, wide)
    # each tap compares the index with its cell: idx - base is the cell's offset from
    # the window's first tap, one constant for all taps
    rel = ops.sub(to(indices, torch.int64),
                  ops.constant(_flat_cells(ho, wo, 0, 0, st, pd, w), ts_dtype(torch.int64)))
    zero = to(0.0, wide)
    taps = [(i, j, ops.where(ops.eq(rel, to(i * w + j, torch.int64)), g, zero))
            for i in range(k[0]) for j in range(k[1])]
    return _taps_to_input(taps, st, pd, x.shape, dt)


def _taps_to_input(
    taps: list[tuple[int, int, TracedTensor]], st: list[int], pd: list[int],
    shape: Sequence[int], out: torch.dtype | None = None,
) -> TracedTensor:
    """The input-sized sum of each window tap's output-sized part: tap ``(i, j)`` of output
    ``(oh, ow)`` is input cell ``(oh s + i - p, ow s + j - p)`` (cells in the padding are
    dropped). Input row ``r`` is row ``r // s`` of phase ``r % s``, so a tap adds its part
    to phase ``(i - p) % s`` shifted by ``(i - p) // s`` rows; the taps are summed on the
    phases' output-sized grids, which are interleaved once at the end (each phase cast to
    ``out`` first, when given, so the sums' kernels store the result type)."""
    n, c, h, w = shape
    size = [-(-h // st[0]), -(-w // st[1])]  # rows of phase 0
    phases: dict[tuple[int, int], TracedTensor] = {}
    g = taps[0][2]
    for i, j, part in taps:
        for axis, off in ((2, i - pd[0]), (3, j - pd[1])):
            part = _shift(part, axis, off // st[axis - 2], size[axis - 2])
        key = ((i - pd[0]) % st[0], (j - pd[1]) % st[1])
        phases[key] = part if key not in phases else ops.add(phases[key], part)
    if out is not None:
        phases = {key: to(ph, out) for key, ph in phases.items()}
        g = to(g, out)
    zero = None
    rows = []
    for a in range(st[0]):
        cols = []
        for b in range(st[1]):
            ph = phases.get((a, b))
            if ph is None:
                zero = zero if zero is not None else zeros_of(g, [n, c, *size])
                ph = zero
            cols.append(ops.reshape(ph, [n, c, size[0], 1, size[1], 1]))
        rows.append(ops.concat(cols, axis=5) if len(cols) > 1 else cols[0])
    full = ops.concat(rows, axis=3) if len(rows) > 1 else rows[0]
    full = ops.reshape(full, [n, c, size[0] * st[0], size[1] * st[1]])
    return take(take(full, 2, 0, h), 3, 0, w)


def _shift(x: TracedTensor, axis: int, d: int, size: int) -> TracedTensor:
    """``y[q] = x[q - d]`` along ``axis`` for ``q`` in ``[0, size)``, 0 outside ``x``."""
    lo, hi = max(0, -d), min(x.shape[axis], size - d)
    if hi <= lo:
        shape = list(x.shape)
        shape[axis] = size
        return zeros_of(x, shape)
    x = take(x, axis, lo, hi)
    return _pad_zeros(x, axis, max(0, d), size - max(0, d) - (hi - lo))


# --------------------------------------------------------------------------- average pooling


def _avg_args(args: Sequence[Any]) -> tuple[Any, Any, Any, bool, bool, Any]:
    """(kernel, stride, padding, ceil_mode, count_include_pad, divisor_override) of an
    ``avg_pool2d`` argument list after the input, with torch's defaults."""
    a = [*args, *[None] * (6 - len(args))]
    return (a[0], a[1] if a[1] is not None else (), a[2] if a[2] is not None else 0,
            bool(a[3]) if a[3] is not None else False,
            bool(a[4]) if a[4] is not None else True, a[5])


def _avg_check(node: torch.fx.Node) -> str | None:
    backward = node.target is aten.avg_pool2d_backward.default
    args = list(node.args)
    x = args[1] if backward else args[0]
    bad = _pool_check(node, x, [], None)
    if bad:
        return bad
    kernel, stride, padding, *_ = _avg_args(args[2:] if backward else args[1:])
    k, _, pd = _pool_params(kernel, stride, padding)
    if any(p > kk // 2 for p, kk in zip(pd, k)):
        return f"padding {pd} over half the kernel {k}"
    return None


def _divisors(
    h: int, w: int, k: list[int], st: list[int], pd: list[int], ho: int, wo: int,
    count_include_pad: bool, divisor_override: Any,
) -> np.ndarray:
    """avg_pool2d's divisor of each output cell, ``[ho, wo]``."""
    if divisor_override:
        return np.full((ho, wo), float(divisor_override))

    def extent(o: int, n: int, kk: int, s: int, p: int) -> tuple[np.ndarray, np.ndarray]:
        start = np.arange(o) * s - p
        end = np.minimum(start + kk, n + p)
        with_pad = end - start
        inside = np.minimum(end, n) - np.maximum(start, 0)
        return with_pad, inside

    rh, ih = extent(ho, h, k[0], st[0], pd[0])
    rw, iw = extent(wo, w, k[1], st[1], pd[1])
    d = np.outer(rh, rw) if count_include_pad else np.outer(ih, iw)
    return d.astype(np.float64)


@rule(aten.avg_pool2d.default, check=_avg_check)
def _avg_pool(node: torch.fx.Node, x: Any, *args: Any) -> TracedTensor:
    """The sum of the zero-padded window views (in f32 for 16-bit inputs), divided by
    avg_pool2d's divisor of each output cell."""
    kernel, stride, padding, ceil_mode, include, override = _avg_args(args)
    k, st, pd = _pool_params(kernel, stride, padding)
    dt = torch_dtype(x)
    wide = opmath_dtype(dt)
    wins, ho, wo = _pool_windows(to(x, wide), k, st, pd, ceil_mode, fill=0.0)
    total = wins[0][2]
    for _, _, win in wins[1:]:
        total = ops.add(total, win)
    div = _divisors(x.shape[2], x.shape[3], k, st, pd, ho, wo, include, override)
    return to(ops.div(total, ops.constant(div.astype(ts_dtype(wide).np_dtype), ts_dtype(wide))), dt)


@rule(aten.avg_pool2d_backward.default, check=_avg_check)
def _avg_pool_backward(node: torch.fx.Node, grad: Any, x: Any, *args: Any) -> TracedTensor:
    """Each output cell's gradient over its divisor, added to every input cell of its
    window (:func:`_taps_to_input`)."""
    kernel, stride, padding, ceil_mode, include, override = _avg_args(args)
    k, st, pd = _pool_params(kernel, stride, padding)
    dt = out_dtype(node)
    wide = opmath_dtype(dt)
    ho, wo = grad.shape[2], grad.shape[3]
    div = _divisors(x.shape[2], x.shape[3], k, st, pd, ho, wo, include, override)
    g = ops.div(to(grad, wide), ops.constant(div.astype(ts_dtype(wide).np_dtype), ts_dtype(wide)))
    taps = [(i, j, g) for i in range(k[0]) for j in range(k[1])]
    return _taps_to_input(taps, st, pd, x.shape, dt)


# --------------------------------------------------------------------------- adaptive average pooling


def _bins(n: int, o: int) -> list[tuple[int, int]]:
    """adaptive pooling's window of each of ``o`` outputs over ``n`` cells:
    ``[floor(i n / o), ceil((i + 1) n / o))``."""
    return [((i * n) // o, -(-((i + 1) * n) // o)) for i in range(o)]


def _adaptive_check(node: torch.fx.Node) -> str | None:
    x = node.args[1] if node.target is aten._adaptive_avg_pool2d_backward.default else node.args[0]
    if len(val(x).shape) != 4:
        return "not a batched 2-D pooling"
    if not all(isinstance(s, int) for s in val(x).shape[2:]):
        return "symbolic image size"
    return None if val(x).dtype in FLOAT_DTYPES else f"{val(x).dtype} input"


def _adaptive_axis(x: TracedTensor, axis: int, o: int) -> TracedTensor:
    """The mean of each adaptive window along ``axis``: a reshape and one mean when the
    windows tile the axis evenly, else one mean per window."""
    n = x.shape[axis]
    if n == o:
        return x
    if n % o == 0:
        shape = list(x.shape)
        shape[axis: axis + 1] = [o, n // o]
        return ops.mean(ops.reshape(x, shape), axis=axis + 1)
    parts = [ops.mean(take(x, axis, a, b), axis=axis, keepdims=True) for a, b in _bins(n, o)]
    return ops.concat(parts, axis=axis)


@rule(aten._adaptive_avg_pool2d.default, check=_adaptive_check)
def _adaptive_avg_pool(node: torch.fx.Node, x: Any, size: Sequence[int]) -> TracedTensor:
    """The window mean is separable (a window is a product of a row range and a column
    range): the means along the rows, then along the columns, in f32 for 16-bit inputs."""
    oh, ow = int_list(size)
    h, w = x.shape[-2:]
    if (oh, ow) == (h, w):
        return x
    dt = torch_dtype(x)
    if (oh, ow) == (1, 1):
        return to(ops.mean(to(x, opmath_dtype(dt)), axis=(2, 3), keepdims=True), dt)
    y = _adaptive_axis(to(x, opmath_dtype(dt)), 2, oh)
    return to(_adaptive_axis(y, 3, ow), dt)


def _spread(o: int, n: int, dt: torch.dtype) -> np.ndarray:
    """``[o, n]``: row ``i`` is ``1 / len`` over adaptive window ``i``, 0 elsewhere."""
    m = np.zeros((o, n))
    for i, (a, b) in enumerate(_bins(n, o)):
        m[i, a:b] = 1.0 / (b - a)
    return m.astype(ts_dtype(dt).np_dtype)


@rule(aten._adaptive_avg_pool2d_backward.default, check=_adaptive_check)
def _adaptive_avg_pool_backward(node: torch.fx.Node, grad: Any, x: Any) -> TracedTensor:
    """``dx = Aᵀ g B`` with ``A [oh, H]`` and ``B [ow, W]`` the windows' weights
    (:func:`_spread`); a broadcast of ``g / (H W)`` for a 1x1 output."""
    h, w = x.shape[-2:]
    oh, ow = grad.shape[-2:]
    dt = out_dtype(node)
    wide = opmath_dtype(dt)
    g = to(grad, wide)
    if (oh, ow) == (h, w):
        return to(g, dt)
    if (oh, ow) == (1, 1):
        return to(ops.broadcast_to(ops.div(g, to(h * w, wide)), x.shape), dt)
    a = ops.constant(_spread(oh, h, wide), ts_dtype(wide))
    b = ops.constant(_spread(ow, w, wide), ts_dtype(wide))
    n, c = x.shape[0], x.shape[1]
    rows = ops.matmul(ops.broadcast_to(a, [n, c, oh, h]), g, transpose_a=True)  # [n, c, H, ow]
    return to(ops.matmul(rows, ops.broadcast_to(b, [n, c, ow, w])), dt)


__all__ = ["out_size"]
