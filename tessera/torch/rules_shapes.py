"""ATen rules: views, shape ops, data movement and tensor creation.

The rules register themselves in :data:`tessera.torch.aten_ops.RULES` when this
module is imported (``aten_ops`` imports it).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.fx

from tessera.frontend import ops
from tessera.torch.aten_ops import (
    TracedTensor,
    dilate,
    int_list,
    norm_dims,
    out_dtype,
    rule,
    slice_bounds,
    to,
    torch_dtype,
    ts_dtype,
    zeros_of,
)

aten = torch.ops.aten
prims = torch.ops.prims


# --------------------------------------------------------------------------- shapes


@rule(
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.view_copy.default,
    compute=False,
)
def _view(node: torch.fx.Node, a: Any, shape: Sequence[Any]) -> TracedTensor:
    return ops.reshape(a, int_list(shape))


@rule(aten.permute.default, aten.permute_copy.default, compute=False)
def _permute(node: torch.fx.Node, a: Any, dims: Sequence[int]) -> TracedTensor:
    if a.ndim == 0:
        return a
    return ops.transpose(a, [int(d) % a.ndim for d in dims])


@rule(aten.t.default, compute=False)
def _t(node: torch.fx.Node, a: Any) -> TracedTensor:
    return a if a.ndim < 2 else ops.transpose(a, [1, 0])


@rule(aten.transpose.int, compute=False)
def _transpose(node: torch.fx.Node, a: Any, d0: int, d1: int) -> TracedTensor:
    if a.ndim < 2:
        return a
    perm = list(range(a.ndim))
    i, j = int(d0) % a.ndim, int(d1) % a.ndim
    perm[i], perm[j] = perm[j], perm[i]
    return ops.transpose(a, perm)


@rule(aten.expand.default, aten.expand_copy.default, compute=False)
def _expand(node: torch.fx.Node, a: Any, sizes: Sequence[Any], *, implicit: bool = False) -> TracedTensor:
    sizes = int_list(sizes)
    lead = len(sizes) - a.ndim
    shape = [a.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes)]
    if tuple(shape) == a.shape:
        return a
    return ops.broadcast_to(a, shape)


@rule(aten.repeat.default, compute=False)
def _repeat(node: torch.fx.Node, a: Any, repeats: Sequence[Any]) -> TracedTensor:
    """``a.repeat(*repeats)``: each dim ``d`` of size ``n`` repeated ``r`` times is a
    broadcast of ``[1, n]`` to ``[r, n]`` read as ``r n`` (leading repeats add dims)."""
    reps = int_list(repeats)
    x = ops.reshape(a, [1] * (len(reps) - a.ndim) + list(a.shape)) if len(reps) > a.ndim else a
    if all(r == 1 for r in reps):
        return x
    pairs = [v for n in x.shape for v in (1, n)]
    wide = [v for r, n in zip(reps, x.shape) for v in (r, n)]
    y = ops.broadcast_to(ops.reshape(x, pairs), wide)
    return ops.reshape(y, [r * n for r, n in zip(reps, x.shape)])


@rule(aten.copy.default, compute=False)
def _copy(node: torch.fx.Node, dst: Any, src: Any, non_blocking: bool = False) -> TracedTensor:
    """The functional ``copy``: ``src`` broadcast to ``dst``'s shape in its dtype."""
    x = to(src, out_dtype(node))
    return x if tuple(x.shape) == tuple(dst.shape) else ops.broadcast_to(x, list(dst.shape))


@rule(aten.unsqueeze.default, aten.unsqueeze_copy.default, compute=False)
def _unsqueeze(node: torch.fx.Node, a: Any, dim: int) -> TracedTensor:
    d = int(dim) % (a.ndim + 1)
    shape = list(a.shape)
    shape.insert(d, 1)
    return ops.reshape(a, shape)


@rule(
    aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze_copy.dims,
    compute=False,
)
def _squeeze(node: torch.fx.Node, a: Any, dims: Any = None) -> TracedTensor:
    axes = set(norm_dims(dims, a.ndim)) if dims is not None else set(range(a.ndim))
    shape = [s for i, s in enumerate(a.shape) if not (i in axes and s == 1)]
    return a if len(shape) == a.ndim else ops.reshape(a, shape)


@rule(aten.cat.default, compute=False)
def _cat(node: torch.fx.Node, xs: Sequence[Any], dim: int = 0) -> TracedTensor:
    dt = out_dtype(node)
    parts = [to(x, dt) for x in xs if not (x.ndim == 1 and x.shape[0] == 0)]
    if len(parts) == 1:
        return parts[0]
    return ops.concat(parts, axis=int(dim) % parts[0].ndim)




@rule(aten.slice.Tensor, aten.slice_copy.Tensor, compute=False)
def _slice(
    node: torch.fx.Node, a: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1
) -> TracedTensor:
    d = int(dim) % a.ndim
    s, e = slice_bounds(a.shape[d], start, end, int(step))
    if s == 0 and e == a.shape[d] and step == 1:
        return a
    lo = [0] * a.ndim
    hi = list(a.shape)
    st = [1] * a.ndim
    lo[d], hi[d], st[d] = s, e, int(step)
    return ops.slice(a, lo, hi, st)


@rule(aten.slice_scatter.default)
def _slice_scatter(
    node: torch.fx.Node, base: Any, src: Any, dim: int = 0, start: Any = None, end: Any = None,
    step: int = 1,
) -> TracedTensor:
    d = int(dim) % base.ndim
    s, e = slice_bounds(base.shape[d], start, end, int(step))
    if int(step) != 1:
        return _strided_scatter(base, to(src, torch_dtype(base)), d, s, int(step))
    parts = []
    for piece in ("before", "src", "after"):
        if piece == "src":
            parts.append(to(src, torch_dtype(base)))
            continue
        a, b = (0, s) if piece == "before" else (e, base.shape[d])
        if b > a:
            lo = [0] * base.ndim
            hi = list(base.shape)
            lo[d], hi[d] = a, b
            parts.append(ops.slice(base, lo, hi))
    return parts[0] if len(parts) == 1 else ops.concat(parts, axis=d)


def _strided_scatter(base: TracedTensor, src: TracedTensor, d: int, s: int, step: int) -> TracedTensor:
    """``base`` with ``base[s::step][:m] = src`` along ``d`` (``m`` the length of ``src``
    there): ``src`` spread out with ``step - 1`` zeros between elements, padded to the
    length of ``base``, and picked where a constant mask of those positions is true."""
    n, m = base.shape[d], src.shape[d]
    if m == 0:
        return base
    spread = dilate(src, step, d)
    parts = [zeros_of(src, [s if k == d else x for k, x in enumerate(src.shape)])] if s else []
    parts.append(spread)
    tail = n - s - spread.shape[d]
    if tail:
        parts.append(zeros_of(src, [tail if k == d else x for k, x in enumerate(src.shape)]))
    placed = parts[0] if len(parts) == 1 else ops.concat(parts, axis=d)
    mask = np.zeros([n if k == d else 1 for k in range(base.ndim)], dtype=bool)
    mask.reshape(-1)[s : s + (m - 1) * step + 1 : step] = True
    return ops.where(ops.constant(mask, ts_dtype(torch.bool)), placed, base)


@rule(aten.roll.default, compute=False)
def _roll(node: torch.fx.Node, a: Any, shifts: Any, dims: Any = ()) -> TracedTensor:
    """``torch.roll``: per dim, the last ``shift`` rows moved to the front (two slices and
    a concat); without dims, the flattened tensor rolled and reshaped back."""
    sh = [int(shifts)] if isinstance(shifts, int) else int_list(shifts)
    ds = [int(dims)] if isinstance(dims, int) else int_list(dims)
    x = a
    if not ds:
        flat = ops.reshape(x, [int(np.prod(x.shape))])
        return ops.reshape(_roll_axis(flat, 0, sh[0]), list(x.shape))
    for s, d in zip(sh, ds):
        x = _roll_axis(x, d % x.ndim, s)
    return x


def _roll_axis(x: TracedTensor, d: int, shift: int) -> TracedTensor:
    n = x.shape[d]
    k = shift % n if n else 0
    if k == 0:
        return x
    lo, hi = [0] * x.ndim, list(x.shape)
    hi[d] = n - k
    head = ops.slice(x, lo, hi)
    lo2 = [0] * x.ndim
    lo2[d] = n - k
    tail = ops.slice(x, lo2, list(x.shape))
    return ops.concat([tail, head], axis=d)


@rule(aten.select.int, aten.select_copy.int, compute=False)
def _select(node: torch.fx.Node, a: Any, dim: int, index: int) -> TracedTensor:
    d = int(dim) % a.ndim
    i = int(index) % a.shape[d]
    lo = [0] * a.ndim
    hi = list(a.shape)
    lo[d], hi[d] = i, i + 1
    part = ops.slice(a, lo, hi)
    return ops.reshape(part, [s for j, s in enumerate(a.shape) if j != d])


@rule(aten.split_with_sizes.default, aten.split.Tensor, aten.split_with_sizes_copy.default,
      compute=False)
def _split(node: torch.fx.Node, a: Any, sizes: Any, dim: int = 0) -> tuple[TracedTensor, ...]:
    d = int(dim) % a.ndim
    n = a.shape[d]
    if isinstance(sizes, int):
        sizes = [min(sizes, n - i) for i in range(0, n, sizes)]
    out = []
    pos = 0
    for s in int_list(sizes):
        lo = [0] * a.ndim
        hi = list(a.shape)
        lo[d], hi[d] = pos, pos + s
        out.append(ops.slice(a, lo, hi))
        pos += s
    return tuple(out)


@rule(aten.constant_pad_nd.default)
def _pad(node: torch.fx.Node, a: Any, pad: Sequence[int], value: Any = 0) -> TracedTensor:
    x = a
    pad = int_list(pad)
    dt = torch_dtype(x)
    for i in range(len(pad) // 2):
        d = x.ndim - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        if before < 0 or after < 0:
            lo = [0] * x.ndim
            hi = list(x.shape)
            lo[d] = max(-before, 0)
            hi[d] = x.shape[d] - max(-after, 0)
            x = ops.slice(x, lo, hi)
            before, after = max(before, 0), max(after, 0)
        parts = []
        for width in (before, None, after):
            if width is None:
                parts.append(x)
            elif width > 0:
                shape = list(x.shape)
                shape[d] = width
                parts.append(ops.broadcast_to(to(value, dt), shape))
        if len(parts) > 1:
            x = ops.concat(parts, axis=d)
    return x


@rule(operator.getitem, compute=False)
def _getitem(node: torch.fx.Node, a: Any, i: int) -> Any:
    return a[i]


# --------------------------------------------------------------------------- creation


def _full_value(value: Any, dt: torch.dtype, shape: Sequence[int]) -> TracedTensor:
    c = to(value, dt)
    return c if not shape else ops.broadcast_to(c, int_list(shape))


@rule(aten.full.default, aten.scalar_tensor.default)
def _full(node: torch.fx.Node, *args: Any, **kwargs: Any) -> TracedTensor:
    if node.target is aten.scalar_tensor.default:
        return _full_value(args[0], out_dtype(node), [])
    return _full_value(args[1], out_dtype(node), args[0])


@rule(aten.full_like.default)
def _full_like(node: torch.fx.Node, a: Any, value: Any, **kwargs: Any) -> TracedTensor:
    return _full_value(value, out_dtype(node), a.shape)


@rule(aten.arange.start_step, aten.arange.default, aten.arange.start)
def _arange(node: torch.fx.Node, *args: Any, **kwargs: Any) -> TracedTensor:
    """torch's own ``arange`` of the same numbers: its length rule differs from numpy's
    (an int64 range truncates the bounds first: ``arange(0., -8.000001, -4.)`` has two
    elements, not three)."""
    dt = out_dtype(node)
    nums = [a for a in args if isinstance(a, int | float)]
    values = torch.arange(*nums, dtype=dt)
    if values.is_floating_point():
        values = values.float()  # exact, for numpy (bf16 has no numpy dtype)
    return ops.constant(values.numpy().astype(ts_dtype(dt).np_dtype), ts_dtype(dt))
