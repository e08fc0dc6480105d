"""Shape operator functions: ``transpose``, ``reshape``, ``broadcast_to``, ``slice``,
``flip``, indexing, ``concat``, ``split_qkv``."""

from __future__ import annotations

import builtins
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import (
    IntegerAttr,
    IntegerType,
    i64,
)

from tessera.frontend.errors import ShapeError, TesseraTypeError, located
from tessera.frontend.ops.base import (
    _check_same_elem,
    _dense_props,
    _emit,
    _int,
    _ints,
    _is_array,
    _norm_axis,
    _operands,
    _shape,
    _tensor_arg,
)
from tessera.frontend.tracing import TracedTensor, current_trace, result_type
from tessera.ir import graph as g
from tessera.ir.graph.base import _is_float as _is_float_type

# --------------------------------------------------------------------------- shape ops


def transpose(x: Any, *dims: Any) -> TracedTensor:
    """Permute dims.

    ``transpose(x)`` swaps the last two dims; ``transpose(x, d0, d1)`` swaps two
    dims (torch style, at every rank: ``transpose(x, 0, 1)`` of a matrix is its
    transpose); ``transpose(x, perm)`` with a list or tuple, or ``transpose(x, *perm)``
    with a full permutation of three or more dims, reorders all dims (numpy style).
    """
    x = _tensor_arg(x, "transpose")
    rank = x.ndim
    if len(dims) == 1 and isinstance(dims[0], tuple | list):
        perm = _ints(dims[0], "transpose permutation")
    elif not dims:
        if rank < 2:
            raise ShapeError(located(f"transpose: needs rank >= 2, got {g.fmt_shape(x.shape)}"))
        perm = [*range(rank - 2), rank - 1, rank - 2]
    elif len(dims) == 2:
        a, b = (_norm_axis("transpose", _int(d, "transpose dim"), rank) for d in dims)
        perm = list(range(rank))
        perm[a], perm[b] = perm[b], perm[a]
    else:
        perm = _ints(dims, "transpose permutation")
    if sorted(p % builtins.max(rank, 1) for p in perm) != list(range(rank)) or len(perm) != rank:
        raise ShapeError(
            located(f"transpose permutation {perm} is not a permutation of {rank} dims")
        )
    perm = [p % rank for p in perm]
    shape = [x.shape[p] for p in perm]
    return _emit(
        g.TransposeOp,
        x.trace,
        operands=[x.value],
        result_types=[result_type(shape, x.type)],
        properties=_dense_props("permutation", perm),
    )


def reshape(x: Any, shape: Sequence[int]) -> TracedTensor:
    """Same elements in row-major order, new ``shape`` (one dim may be -1)."""
    x = _tensor_arg(x, "reshape")
    shape = _ints(shape, "reshape shape")
    n = int(np.prod(x.shape, dtype=np.int64))
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise ShapeError(located(f"reshape: bad target shape {shape}"))
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or n % known:
            raise ShapeError(
                located(f"reshape cannot reshape {g.fmt_shape(x.shape)} ({n} elements) to {shape}")
            )
        shape[shape.index(-1)] = n // known
    return _emit(g.ReshapeOp, x.trace, operands=[x.value], result_types=[result_type(shape, x.type)])


def broadcast_to(x: Any, shape: Sequence[int]) -> TracedTensor:
    """Broadcast ``x`` to ``shape`` with numpy rules."""
    x = _tensor_arg(x, "broadcast_to")
    return _emit(
        g.BroadcastOp,
        x.trace,
        operands=[x.value],
        result_types=[result_type(_shape(shape, "broadcast_to shape"), x.type)],
    )


def slice(  # noqa: A001
    x: Any, start: Sequence[int], limit: Sequence[int], stride: Sequence[int] | None = None
) -> TracedTensor:
    """Static strided slice ``x[start:limit:stride]`` per dimension."""
    x = _tensor_arg(x, "slice")
    stride = [1] * len(start) if stride is None else list(stride)
    shape = [
        builtins.max(0, (b - a + c - 1) // c) if c > 0 else 0
        for a, b, c in zip(start, limit, stride)
    ]
    if len(shape) != x.ndim or len(limit) != x.ndim or len(stride) != x.ndim:
        raise ShapeError(located(f"slice: start/limit/stride need {x.ndim} entries each"))
    props = _dense_props("start", start)
    props.update(_dense_props("limit", limit))
    props.update(_dense_props("stride", stride))
    return _emit(
        g.SliceOp,
        x.trace,
        operands=[x.value],
        result_types=[result_type(shape, x.type)],
        properties=props,
    )


def flip(x: Any, dims: Sequence[int]) -> TracedTensor:
    """``x`` with the order of its elements reversed along each of ``dims`` (as
    ``torch.flip``; negative dims count from the end). One ``tgraph.reverse``; dims of
    one element are dropped, and ``x`` itself comes back when none is left."""
    x = _tensor_arg(x, "flip")
    dims = _ints(dims, "flip dims")
    ds = [_norm_axis("flip", d, x.ndim) for d in dims]
    if len(set(ds)) != len(ds):
        raise ShapeError(located(f"flip: dims {dims} repeat a dim"))
    ds = sorted(d for d in ds if x.shape[d] > 1)
    if not ds:
        return x
    return _emit(
        g.ReverseOp,
        x.trace,
        operands=[x.value],
        result_types=[result_type(list(x.shape), x.type)],
        properties=_dense_props("dims", ds),
    )


def _index_array(i: Any) -> np.ndarray | None:
    """A static integer or bool index array (numpy, list, CPU torch tensor), else None."""
    if isinstance(i, list):
        i = np.asarray(i)
        if i.size == 0:
            i = i.astype(np.int64)
    elif _is_array(i):
        from tessera.runtime.convert import to_numpy

        i = to_numpy(i, where="index")
    if not isinstance(i, np.ndarray):
        return None
    if i.dtype.kind not in "biu":
        raise TesseraTypeError(located(f"index: an index array must hold ints or bools, got {i.dtype}"))
    return i


def _gather(x: TracedTensor, dim: int, arr: np.ndarray) -> TracedTensor:
    """``x`` indexed along ``dim`` by the 1-D static int or bool array ``arr`` (numpy's
    ``x[..., arr, ...]``), as a concatenation of slices (one per run of consecutive
    indices)."""
    n = x.shape[dim]
    if arr.dtype == np.bool_:
        if arr.ndim != 1 or arr.shape[0] != n:
            raise ShapeError(
                located(f"index: a bool mask of shape {list(arr.shape)} for dim {dim} of size {n}")
            )
        arr = np.flatnonzero(arr)
    if arr.ndim != 1:
        raise TesseraTypeError(
            located(f"index: only 1-D index arrays are supported, got shape {list(arr.shape)}")
        )
    bad = (arr < -n) | (arr >= n)
    if np.any(bad):
        v = int(arr[np.argmax(bad)])
        raise ShapeError(located(f"index {v} out of range for dim {dim} of size {n}"))
    idx = [int(v) % n for v in arr]
    runs: list[tuple[int, int]] = []
    for v in idx:
        if runs and runs[-1][1] == v:
            runs[-1] = (runs[-1][0], v + 1)
        else:
            runs.append((v, v + 1))
    if not runs:
        runs = [(0, 0)]
    parts = []
    for a, b in runs:
        start, limit = [0] * x.ndim, list(x.shape)
        start[dim], limit[dim] = a, b
        parts.append(slice(x, start, limit))
    return parts[0] if len(parts) == 1 else concat(parts, axis=dim)


def getitem(x: TracedTensor, index: Any) -> TracedTensor:
    """``x[...]`` with ints, slices (positive steps), one Ellipsis and at most one 1-D
    static index array (ints or a bool mask; numpy, list or CPU torch): gather, slice,
    then reshape."""
    idx = index if isinstance(index, tuple) else (index,)
    if builtins.sum(1 for i in idx if i is Ellipsis) > 1:
        raise TesseraTypeError(located("index: at most one Ellipsis"))
    k = next((k for k, i in enumerate(idx) if i is Ellipsis), None)
    if k is not None:
        fill = x.ndim - (len(idx) - 1)
        idx = idx[:k] + (builtins.slice(None),) * fill + idx[k + 1 :]
    if len(idx) > x.ndim:
        raise ShapeError(located(f"index: too many indices for rank {x.ndim}"))
    idx = idx + (builtins.slice(None),) * (x.ndim - len(idx))
    arrays = {d: a for d, i in enumerate(idx) if (a := _index_array(i)) is not None}
    for d in [d for d, a in arrays.items() if a.ndim == 0 and a.dtype != np.bool_]:
        idx = idx[:d] + (int(arrays.pop(d)),) + idx[d + 1 :]
    if len(arrays) > 1:
        raise TesseraTypeError(located("index: at most one index array is supported"))
    if arrays:
        ((d, arr),) = arrays.items()
        x = _gather(x, d, arr)
        idx = idx[:d] + (builtins.slice(None),) + idx[d + 1 :]
    start, limit, stride, keep = [], [], [], []
    for d, (i, n) in enumerate(zip(idx, x.shape)):
        if isinstance(i, builtins.slice):
            a, b, c = i.indices(n)
            if c < 1:
                raise TesseraTypeError(located("index: negative slice steps are not supported"))
            b = builtins.max(a, b)
            start.append(a), limit.append(b), stride.append(c)
            keep.append((b - a + c - 1) // c)
        elif isinstance(i, numbers.Integral):
            j = int(i) + n if i < 0 else int(i)
            if not 0 <= j < n:
                raise ShapeError(located(f"index {int(i)} out of range for dim {d} of size {n}"))
            start.append(j), limit.append(j + 1), stride.append(1)
        else:
            raise TesseraTypeError(
                located(f"index: unsupported index {i!r}; use ints, slices or ...")
            )
    y = slice(x, start, limit, stride)
    return y if list(y.shape) == keep else reshape(y, keep)


def concat(xs: Sequence[Any], axis: int = 0) -> TracedTensor:
    """Concatenate tensors along ``axis``."""
    if not isinstance(xs, list | tuple) or not xs:
        current_trace("concat")
        raise TesseraTypeError(located("concat: expects a non-empty list of tensors"))
    ts_ = _operands("concat", *xs)
    _check_same_elem("concat", *ts_)
    if ts_[0].ndim == 0:
        raise ShapeError(
            located("concat: rank-0 tensors cannot be concatenated; reshape them to [1] first")
        )
    ax = _norm_axis("concat", axis, ts_[0].ndim)
    shape = list(ts_[0].shape)
    for i, t in enumerate(ts_):
        if t.ndim != len(shape) or any(
            a != b for j, (a, b) in enumerate(zip(t.shape, ts_[0].shape)) if j != ax
        ):
            raise ShapeError(
                located(
                    f"concat operand {i} has shape {g.fmt_shape(t.shape)}, incompatible with "
                    f"{g.fmt_shape(ts_[0].shape)} outside axis {ax}"
                )
            )
    shape[ax] = builtins.sum(t.shape[ax] for t in ts_)
    return _emit(
        g.ConcatOp,
        ts_[0].trace,
        operands=[[t.value for t in ts_]],
        result_types=[result_type(shape, ts_[0].type)],
        properties={"axis": IntegerAttr(ax, i64)},
    )


def split_qkv(qkv: Any, heads: int) -> tuple[TracedTensor, TracedTensor, TracedTensor]:
    """Split a fused ``[..., S, 3*H*Dh]`` projection into q, k, v of shape ``[..., H, S, Dh]``."""
    x = _tensor_arg(qkv, "split_qkv")
    if x.ndim < 2:
        raise ShapeError(located(f"split_qkv needs rank >= 2, got {g.fmt_shape(x.shape)}"))
    *batch, s, f = x.shape
    if heads < 1 or f % (3 * heads):
        raise ShapeError(
            located(f"split_qkv last dim {f} is not divisible by 3 * heads = {3 * heads}")
        )
    width = f // 3
    dh = width // heads
    out = []
    for part in range(3):
        start = [0] * x.ndim
        limit = list(x.shape)
        start[-1], limit[-1] = part * width, (part + 1) * width
        p = slice(x, start, limit)
        p = reshape(p, [*batch, s, heads, dh])
        r = len(batch)
        p = transpose(p, [*range(r), r + 1, r, r + 2])
        out.append(p)
    return out[0], out[1], out[2]




def take_along_axis(x: Any, indices: Any, axis: int) -> TracedTensor:
    """``x`` gathered along ``axis`` at integer ``indices`` (``torch.gather(x, axis,
    indices)``, ``numpy.take_along_axis``): the result has the shape of ``indices``, whose
    other dims are at most ``x``'s. An index outside ``[0, x.shape[axis])`` gives NaN
    (see ``tgraph.take_along_axis``). ``x`` must be a float tensor, ``indices`` i32/i64."""
    x = _tensor_arg(x, "take_along_axis")
    ix = _tensor_arg(indices, "take_along_axis", "indices")
    if x.ndim == 0 or ix.ndim != x.ndim:
        raise ShapeError(located(
            f"take_along_axis: indices {g.fmt_shape(ix.shape)} and input {g.fmt_shape(x.shape)} "
            "need the same rank (at least 1)"
        ))
    ax = _norm_axis("take_along_axis", axis, x.ndim)
    if any(d != ax and a > b for d, (a, b) in enumerate(zip(ix.shape, x.shape))):
        raise ShapeError(located(
            f"take_along_axis: indices {g.fmt_shape(ix.shape)} larger than input "
            f"{g.fmt_shape(x.shape)} outside axis {ax}"
        ))
    et, it = g.elem_of(x.type), g.elem_of(ix.type)
    if not _is_float_type(et):
        raise TesseraTypeError(located(f"take_along_axis: input must be a float tensor, got {et}"))
    if not isinstance(it, IntegerType) or it.width.data not in (32, 64):
        raise TesseraTypeError(located(f"take_along_axis: indices must be int32 or int64, got {it}"))
    return _emit(
        g.TakeAlongAxisOp,
        x.trace,
        operands=[x.value, ix.value],
        result_types=[result_type(list(ix.shape), x.type)],
        properties={"axis": IntegerAttr(ax, i64)},
    )
