"""ATen rules: embeddings and indexed accumulation (``embedding``, ``index_put``).

``aten.embedding`` becomes a ``tgraph.take_along_axis`` of the table's rows (NaN for an
index outside the table, where torch raises). Its backward, which the core ATen
decompositions spell ``index_put(zeros, [indices], grad, accumulate=True)``, becomes a
product of a one-hot matrix ``[V, N]`` (``positions == indices``) with the ``[N, R]``
values: a sum in a fixed order with no atomics, whose cost is that of a language-model
head's matmul of the same sizes. A value that is NaN or infinite reaches every row of
the result through the product's zeros (torch keeps it to its own row); an index outside
the dim, after Python's wrap-around of negative ones, makes the whole result NaN (torch
raises): never a plausible value.

The rules register themselves in :data:`tessera.torch.aten_ops.RULES` when this module
is imported (``aten_ops`` imports it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.fx

from tessera.frontend import ops
from tessera.torch.aten_ops import (
    FLOAT_DTYPES,
    TracedTensor,
    opmath_dtype,
    out_dtype,
    rule,
    to,
    ts_dtype,
    val,
)

aten = torch.ops.aten

_INDEX_DTYPES = (torch.int64, torch.int32)


def _embedding_check(node: torch.fx.Node) -> str | None:
    w, idx = val(node.args[0]), val(node.args[1])
    if w.dtype not in FLOAT_DTYPES or w.dim() != 2:
        return f"weight {w.dtype}{list(w.shape)} (a float matrix is translated)"
    if idx.dtype not in _INDEX_DTYPES:
        return f"{idx.dtype} indices"
    sparse = node.kwargs.get("sparse", node.args[4] if len(node.args) > 4 else False)
    return "sparse=True" if sparse else None


@rule(aten.embedding.default, check=_embedding_check)
def _embedding(node: torch.fx.Node, w: Any, idx: Any, *args: Any, **kw: Any) -> TracedTensor:
    """``w[idx]``: the rows of the ``[V, D]`` table at each index, ``idx.shape + [D]``;
    ``padding_idx`` and ``scale_grad_by_freq`` concern only the backward (its own node)."""
    d = w.shape[1]
    n = math.prod(idx.shape)
    flat = ops.reshape(to(idx, torch.int64), [n, 1])
    rows = ops.take_along_axis(w, ops.broadcast_to(flat, [n, d]), 0)
    return ops.reshape(rows, [*idx.shape, d])


def _index_put_check(node: torch.fx.Node) -> str | None:
    x, indices, values = val(node.args[0]), node.args[1], val(node.args[2])
    accumulate = node.kwargs.get("accumulate", node.args[3] if len(node.args) > 3 else False)
    if not accumulate:
        return "accumulate=False (duplicate indices would need torch's write order)"
    if x.dtype not in FLOAT_DTYPES or x.dim() == 0:
        return f"{x.dtype}{list(x.shape)} input"
    if len(indices) != 1 or not isinstance(indices[0], torch.fx.Node):
        return "not one index tensor along dim 0"
    idx = val(indices[0])
    if idx.dtype not in _INDEX_DTYPES:
        return f"{idx.dtype} indices"
    want = [*idx.shape, *x.shape[1:]]
    if values.dtype != x.dtype or list(values.shape) != want:
        return f"values {values.dtype}{list(values.shape)}, expected {x.dtype}{want}"
    return None


@rule(aten.index_put.default, aten._unsafe_index_put.default, check=_index_put_check)
def _index_put(
    node: torch.fx.Node, x: Any, indices: Any, values: Any, accumulate: bool = False
) -> TracedTensor:
    """``x.index_put([idx], values, accumulate=True)``: ``x[idx[k]] += values[k]`` for
    each position ``k`` of the indices (of any shape), as ``x + onehot(idx)^T @ values`` (see the module docstring)."""
    dt = out_dtype(node)
    wide = opmath_dtype(dt)
    (idx,) = indices
    v, rest = x.shape[0], list(x.shape[1:])
    n, r = math.prod(idx.shape), math.prod(rest)
    i = ops.reshape(to(idx, torch.int64), [n])
    i = ops.where(ops.lt(i, to(0, torch.int64)), ops.add(i, to(v, torch.int64)), i)
    pos = ops.constant(np.arange(v, dtype=np.int64).reshape(v, 1), ts_dtype(torch.int64))
    onehot = to(ops.eq(pos, ops.reshape(i, [1, n])), wide)  # [V, N]
    upd = ops.matmul(onehot, ops.reshape(to(values, wide), [n, r]))  # [V, R]
    out = ops.add(to(ops.reshape(x, [v, r]), wide), upd)
    bad = ops.sum(to(ops.where(ops.lt(i, to(0, torch.int64)), True,
                               ops.ge(i, to(v, torch.int64))), torch.int64))
    out = ops.where(ops.gt(bad, to(0, torch.int64)), to(float("nan"), wide), out)
    return to(ops.reshape(out, [v, *rest]), dt)
