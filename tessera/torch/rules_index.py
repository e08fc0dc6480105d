"""ATen rules: ``index.Tensor`` with one integer index tensor, as a gather.

Vision transformers (Swin, BEiT, LeViT) read their relative position bias as
``table[index]``, with ``index`` an int64 buffer: ``aten.index.Tensor(table, [index])``.
With one index tensor at dim ``d`` (the other entries ``None``), the result is
``x.shape[:d] + index.shape + x.shape[d+1:]``: a ``take_along_axis`` of ``x`` along ``d``
with the flattened index broadcast over the other dims, then a reshape. Negative
indices count from the end, as in torch. An index outside the dim reads NaN (torch
raises), so a bad index is never a silent finite value.

The rules register themselves in :data:`tessera.torch.aten_ops.RULES` when this module
is imported (``aten_ops`` imports it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from tessera.frontend import ops
from tessera.torch.aten_ops import FLOAT_DTYPES, TracedTensor, rule, to, torch_dtype, val

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


__all__: list[str] = []
