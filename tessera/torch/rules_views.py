"""ATen rules: strided views of a tensor's storage (``as_strided``, its scatter),
``copy`` and uninitialized tensors (``empty``, ``new_empty_strided``).

AOTAutograd leaves ``as_strided`` where a view's strides matter to torch (a
``keepdim`` mean viewed with channels-last strides, the gradient of a squeezed view).
Its meaning is storage indexing: element ``(i0, i1, ...)`` of the view is storage
element ``offset + sum(i_k stride_k)``. A Tessera value has no storage, so a rule may
only translate it when the operand's storage is its own contiguous data, which the
node's fake tensor says: contiguous, at storage offset 0, with a storage of exactly its
elements. Then storage order is Tessera's row-major order, the view is a gather of the
flattened operand at indices known at trace time, and that gather is a slice (plus a
reshape) whenever the indices run consecutively, as they do for views that only relabel
size-1 dimensions.

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
    TracedTensor,
    Unsupported,
    int_list,
    out_dtype,
    rule,
    to,
    torch_dtype,
    val,
)

aten = torch.ops.aten

MAX_RUNS = 64
"""The most runs of consecutive storage indices a strided view is translated with (each
run is one slice of the flattened operand)."""


def _own_storage(t: Any) -> str | None:
    """None when ``t`` (a fake tensor) is contiguous data that fills its storage from
    offset 0, else why not."""
    if not isinstance(t, torch.Tensor):
        return "operand without a fake tensor"
    if not all(isinstance(s, int) for s in t.shape):
        return "symbolic shape"
    if not t.is_contiguous() or t.storage_offset() != 0:
        return "operand is a strided view of another tensor"
    try:
        nbytes = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError, AttributeError):
        return "operand storage unknown"
    if nbytes != t.numel() * t.element_size():
        return "operand storage larger than the operand"
    return None


def storage_indices(size: Sequence[int], stride: Sequence[int], offset: int) -> np.ndarray:
    """The storage index of each element of the view ``(size, stride, offset)``."""
    idx = np.full([int(s) for s in size], int(offset), dtype=np.int64)
    for k, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[k] = int(n)
        idx = idx + (np.arange(int(n), dtype=np.int64) * int(s)).reshape(shape)
    return idx


def _runs(flat: np.ndarray) -> list[tuple[int, int]]:
    """``flat`` as runs ``[a, b)`` of consecutive integers."""
    runs: list[tuple[int, int]] = []
    for v in flat.tolist():
        if runs and runs[-1][1] == v:
            runs[-1] = (runs[-1][0], v + 1)
        else:
            runs.append((v, v + 1))
    return runs


def _view_args(node: torch.fx.Node) -> tuple[Any, list[int], list[int], int]:
    scatter = node.target is aten.as_strided_scatter.default
    args = list(node.args)
    base = args[0]
    rest = args[2:] if scatter else args[1:]
    size, stride = int_list(rest[0]), int_list(rest[1])
    offset = rest[2] if len(rest) > 2 and rest[2] is not None else node.kwargs.get("storage_offset")
    return base, size, stride, int(offset or 0)


def _strided_check(node: torch.fx.Node) -> str | None:
    base, size, stride, offset = _view_args(node)
    bad = _own_storage(val(base))
    if bad:
        return bad
    n = val(base).numel()
    idx = storage_indices(size, stride, offset)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        return "view outside the operand's storage"
    if idx.size and len(_runs(idx.reshape(-1))) > MAX_RUNS:
        return f"more than {MAX_RUNS} runs of consecutive storage elements"
    if node.target is aten.as_strided_scatter.default and len(np.unique(idx)) != idx.size:
        return "a scatter to overlapping storage"
    return None


def _gather(flat: TracedTensor, runs: list[tuple[int, int]]) -> TracedTensor:
    parts = [ops.slice(flat, [a], [b]) for a, b in runs]
    return parts[0] if len(parts) == 1 else ops.concat(parts, axis=0)


@rule(aten.as_strided.default, aten.as_strided_copy.default, check=_strided_check, compute=False)
def _as_strided(
    node: torch.fx.Node, a: Any, size: Sequence[int], stride: Sequence[int],
    storage_offset: Any = None,
) -> TracedTensor:
    idx = storage_indices(int_list(size), int_list(stride), int(storage_offset or 0))
    flat = ops.reshape(a, [math.prod(a.shape)])
    if idx.size == 0:
        raise Unsupported("an empty strided view")
    return ops.reshape(_gather(flat, _runs(idx.reshape(-1))), list(idx.shape))


@rule(aten.as_strided_scatter.default, check=_strided_check, compute=False)
def _as_strided_scatter(
    node: torch.fx.Node, base: Any, src: Any, size: Sequence[int], stride: Sequence[int],
    storage_offset: Any = None,
) -> TracedTensor:
    """``base`` with the elements of the view replaced by ``src``: the base's runs
    outside the view and ``src``'s elements in storage order, concatenated."""
    idx = storage_indices(int_list(size), int_list(stride), int(storage_offset or 0)).reshape(-1)
    n = math.prod(base.shape)
    flat = ops.reshape(base, [n])
    s = ops.reshape(to(src, torch_dtype(base)), [idx.size])
    order = np.argsort(idx, kind="stable")  # src element of each view position, by storage
    pieces: list[TracedTensor] = []
    pos = 0
    for a, b in _runs(idx[order]):
        if a > pos:
            pieces.append(ops.slice(flat, [pos], [a]))
        pieces.append(_gather(s, _runs(order[np.searchsorted(idx[order], a):][: b - a])))
        pos = b
    if pos < n:
        pieces.append(ops.slice(flat, [pos], [n]))
    out = pieces[0] if len(pieces) == 1 else ops.concat(pieces, axis=0)
    return ops.reshape(out, list(base.shape))


@rule(aten.copy.default, compute=False)
def _copy(node: torch.fx.Node, dst: Any, src: Any, non_blocking: bool = False) -> TracedTensor:
    """``dst.copy_(src)`` as a value: ``src`` broadcast to ``dst``'s shape, in its dtype."""
    dt = out_dtype(node)
    s = to(src, dt)
    shape = list(dst.shape)
    return s if list(s.shape) == shape else ops.broadcast_to(s, shape)


def _empty_check(node: torch.fx.Node) -> str | None:
    v = val(node)
    if not all(isinstance(d, int) for d in v.shape):
        return "symbolic shape"
    return None


@rule(aten.new_empty_strided.default, aten.empty_strided.default, aten.new_empty.default,
      aten.empty.memory_format, check=_empty_check)
def _empty(node: torch.fx.Node, *args: Any, **kwargs: Any) -> TracedTensor:
    """A fresh tensor whose values torch leaves unspecified (a buffer the graph then
    overwrites, as the backward of a strided slice assignment does): zeros, a constant of
    the program."""
    v = val(node)
    z = to(0, out_dtype(node))
    return z if v.dim() == 0 else ops.broadcast_to(z, [int(d) for d in v.shape])


__all__ = ["storage_indices", "MAX_RUNS"]
