"""ATen rules: ``index.Tensor`` with one integer index tensor, as a gather, and its
gradient ``index_put(..., accumulate=True)``, as a one-hot product.

Vision transformers (Swin, BEiT, LeViT) read their relative position bias as
``table[index]``, with ``index`` an int64 buffer: ``aten.index.Tensor(table, [index])``.
With one index tensor at dim ``d`` (the other entries ``None``), the result is
``x.shape[:d] + index.shape + x.shape[d+1:]``: a ``take_along_axis`` of ``x`` along ``d``
with the flattened index broadcast over the other dims, then a reshape. Negative
indices count from the end, as in torch. An index outside the dim reads NaN (torch
raises), so a bad index is never a silent finite value.

The gradient of such a read is ``index_put`` with ``accumulate=True`` and the same one
index tensor: each row of the target (along the indexed dim) gets the sum of the values whose index names it, which is the
product of the index's one-hot matrix (transposed) with the values: deterministic, no
atomics; it is translated while that matrix has at most :data:`MAX_ONE_HOT` elements
(a position-bias table, not a large vocabulary).

The rules register themselves in :data:`tessera.torch.aten_ops.RULES` when this module
is imported (``aten_ops`` imports it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.fx

from tessera.frontend import ops
from tessera.torch.aten_ops import (
    FLOAT_DTYPES,
    TracedTensor,
    opmath_dtype,
    rule,
    to,
    torch_dtype,
    ts_dtype,
    val,
)

aten = torch.ops.aten


def _index_check(node: torch.fx.Node) -> str | None:
    x, indices = node.args[0], list(node.args[1])
    used = [i for i in indices if i is not None]
    if len(used) != 1:
        return f"{len(used)} index tensors"
    idx = val(used[0])
    if idx.dtype not in (torch.int64, torch.int32):
        return f"{idx.dtype} index"
    if val(x).dtype not in FLOAT_DTYPES:
        return f"gather of a {val(x).dtype} tensor"
    if not all(isinstance(s, int) for s in (*val(x).shape, *idx.shape)):
        return "symbolic shape"
    return None


@rule(aten.index.Tensor, check=_index_check)
def _index(node: torch.fx.Node, x: Any, indices: Sequence[Any]) -> TracedTensor:
    d = next(k for k, i in enumerate(indices) if i is not None)
    idx = indices[d]
    n = x.shape[d]
    m = math.prod(idx.shape)
    flat = ops.reshape(idx, [m])
    dt = torch_dtype(flat)
    flat = ops.where(ops.lt(flat, to(0, dt)), ops.add(flat, to(n, dt)), flat)
    shape = [1] * x.ndim
    shape[d] = m
    full = list(x.shape)
    full[d] = m
    got = ops.take_along_axis(x, ops.broadcast_to(ops.reshape(flat, shape), full), axis=d)
    return ops.reshape(got, [*x.shape[:d], *idx.shape, *x.shape[d + 1:]])


MAX_ONE_HOT = 1 << 22
"""The most elements (index entries x rows of the target) an ``index_put`` is
translated with: its one-hot matrix."""


def _index_put_check(node: torch.fx.Node) -> str | None:
    base, indices, values = node.args[0], list(node.args[1]), node.args[2]
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    if not accumulate:
        return "accumulate=False (duplicate indices would race)"
    used = [k for k, i in enumerate(indices) if i is not None]
    if len(used) != 1:
        return f"{len(used)} index tensors"
    d = used[0]
    b, idx, v = val(base), val(indices[d]), val(values)
    if idx.dtype not in (torch.int64, torch.int32):
        return f"{idx.dtype} index"
    if b.dtype not in FLOAT_DTYPES or v.dtype != b.dtype:
        return f"{v.dtype} values into a {b.dtype} tensor"
    if not all(isinstance(s, int) for s in (*b.shape, *idx.shape, *v.shape)):
        return "symbolic shape"
    if list(v.shape) != [*b.shape[:d], *idx.shape, *b.shape[d + 1:]]:
        return f"values of shape {list(v.shape)} (broadcast values)"
    if idx.numel() * b.shape[d] > MAX_ONE_HOT:
        return f"a one-hot matrix of {idx.numel()} x {b.shape[d]}"
    return None


@rule(aten.index_put.default, check=_index_put_check)
def _index_put(
    node: torch.fx.Node, base: Any, indices: Sequence[Any], values: Any, accumulate: bool = False,
) -> TracedTensor:
    """``base.index_put_((None, ..., index), values, accumulate=True)``: the values of
    each row summed by the product with the index's one-hot matrix, ``base +
    onehot(index)ᵀ @ values`` with the indexed dim moved first, in f32 for 16-bit values.
    An index outside the dim makes the result NaN (torch raises)."""
    d = next(k for k, i in enumerate(indices) if i is not None)
    idx = indices[d]
    k = idx.ndim
    if d:  # the indexed dim first, in the base and in the values
        base = ops.transpose(base, [d, *range(d), *range(d + 1, base.ndim)])
        values = ops.transpose(values, [*range(d, d + k), *range(d),
                                        *range(d + k, values.ndim)])
    t = base.shape[0]
    m = math.prod(idx.shape)
    rest = math.prod(base.shape[1:])
    dt = torch_dtype(base)
    wide = opmath_dtype(dt)
    flat = ops.reshape(idx, [m, 1])
    it = torch_dtype(flat)
    flat = ops.where(ops.lt(flat, to(0, it)), ops.add(flat, to(t, it)), flat)
    rows = ops.constant(np.arange(t, dtype=ts_dtype(it).np_dtype).reshape(1, t), ts_dtype(it))
    hot = to(ops.eq(flat, rows), wide)  # [m, t]
    v = ops.reshape(to(values, wide), [m, rest])
    summed = ops.matmul(hot, v, transpose_a=True)  # [t, rest]
    missing = ops.sum(ops.sub(to(1.0, wide), ops.sum(hot, axis=1)))  # indices out of range
    bad = ops.where(ops.gt(missing, to(0.0, wide)), to(float("nan"), wide), to(0.0, wide))
    out = to(ops.reshape(ops.add(ops.add(to(ops.reshape(base, [t, rest]), wide), summed), bad),
                         list(base.shape)), dt)
    if d:
        out = ops.transpose(out, [*range(1, d + 1), 0, *range(d + 1, out.ndim)])
    return out


__all__ = ["MAX_ONE_HOT"]
