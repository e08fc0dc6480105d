"""ATen rules: embeddings, indexing by one integer tensor and indexed accumulation
(``embedding``, ``index.Tensor``, ``index_put``).

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
    Unsupported,
    opmath_dtype,
    out_dtype,
    rule,
    to,
    torch_dtype,
    ts_dtype,
    val,
)
from tessera.torch.static_values import static_value

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


ONEHOT_LIMIT = 1 << 24
"""The largest one-hot matrix (table rows x index positions) ``index_put`` is translated
with: the product costs ``2 V N P`` flops and ``4 V N`` bytes, which for GPT-2's embedding
backward at 8 x 1024 tokens (50257 x 8192) is 1.6 GB and several milliseconds, against a
fraction of a millisecond for torch's own kernel."""


def _index_put_check(node: torch.fx.Node) -> str | None:
    x, indices, values = val(node.args[0]), node.args[1], val(node.args[2])
    accumulate = node.kwargs.get("accumulate", node.args[3] if len(node.args) > 3 else False)
    if not accumulate:
        return "accumulate=False (duplicate indices would need torch's write order)"
    if x.dtype not in FLOAT_DTYPES or x.dim() == 0:
        return f"{x.dtype}{list(x.shape)} input"
    given = [k for k, i in enumerate(indices) if i is not None]
    if not given or given != list(range(given[0], given[-1] + 1)):
        return "index tensors at dims apart (consecutive ones are translated)"
    for k in given:
        if val(indices[k]).dtype not in _INDEX_DTYPES:
            return f"{val(indices[k]).dtype} indices"
    try:
        shape = list(torch.broadcast_shapes(*(val(indices[k]).shape for k in given)))
    except RuntimeError:
        return "index tensors that do not broadcast"
    d, e = given[0], given[-1] + 1
    want = [*x.shape[:d], *shape, *x.shape[e:]]
    if values.dtype != x.dtype or list(values.shape) != want:
        return f"values {values.dtype}{list(values.shape)}, expected {x.dtype}{want}"
    try:
        onehot = int(math.prod(x.shape[d:e])) * int(math.prod(shape))
    except TypeError:  # a symbolic size: the product's cost is not known
        return "symbolic index or table size"
    if onehot > ONEHOT_LIMIT:
        return (f"a {int(math.prod(x.shape[d:e]))} x {int(math.prod(shape))} one-hot product "
                f"(over {ONEHOT_LIMIT} elements: torch's scatter-add is cheaper)")
    return None


@rule(aten.index_put.default, aten._unsafe_index_put.default, check=_index_put_check)
def _index_put(
    node: torch.fx.Node, x: Any, indices: Any, values: Any, accumulate: bool = False
) -> TracedTensor:
    """``x.index_put([None, .., i_d, i_d+1, ..], values, accumulate=True)``: ``x[.., i_d[k],
    i_d+1[k], .., ..] += values[.., k, ..]`` for each position ``k`` of the index tensors
    (broadcast together) at the consecutive dims ``d, d+1, ..`` (the backward of
    ``index`` and of a bilinear ``interpolate``), as ``x + onehot(i)^T @ values`` with
    those dims of ``x`` read as one, ``i = i_d s_d+1 + i_d+1 ...``, and moved first (see
    the module docstring). An index outside its own dim makes the result NaN."""
    dt = out_dtype(node)
    wide = opmath_dtype(dt)
    given = [k for k, i in enumerate(indices) if i is not None]
    d, e = given[0], given[-1] + 1
    shape = list(torch.broadcast_shapes(*(torch.Size(indices[k].shape) for k in given)))
    v, pre, post = math.prod(x.shape[d:e]), list(x.shape[:d]), list(x.shape[e:])
    n, p, q = math.prod(shape), math.prod(pre), math.prod(post)
    i, bad = _flat_index(x, indices, given, shape)
    pos = ops.constant(np.arange(v, dtype=np.int64).reshape(v, 1), ts_dtype(torch.int64))
    onehot = to(ops.eq(pos, ops.reshape(i, [1, n])), wide)  # [V, N]
    vals = ops.reshape(to(values, wide), [p, n, q])
    if p > 1:
        vals = ops.transpose(vals, [1, 0, 2])
    upd = ops.matmul(onehot, ops.reshape(vals, [n, p * q]))  # [V, P Q]
    xf = ops.reshape(x, [*pre, v, *post])
    perm = [d, *range(d), *range(d + 1, d + 1 + len(post))]
    xt = ops.transpose(xf, perm) if d else xf
    out = ops.add(to(ops.reshape(xt, [v, p * q]), wide), upd)
    nbad = ops.sum(to(bad, torch.int64))
    out = ops.where(ops.gt(nbad, to(0, torch.int64)), to(float("nan"), wide), out)
    out = ops.reshape(out, [v, *pre, *post])
    if d:
        out = ops.transpose(out, [perm.index(k) for k in range(len(perm))])
    return to(ops.reshape(out, list(x.shape)), dt)


def _flat_index(x: TracedTensor, indices: Any, given: list[int],
                shape: list[int]) -> tuple[TracedTensor, TracedTensor]:
    """The integer index tensors at the consecutive dims ``given`` of ``x``, broadcast to
    ``shape``, as one flat ``[N]`` int64 index into those dims read as one (``i_d s_d+1 +
    i_d+1 ...``, negative indices counted from the end), and where any is outside its dim
    (``[N]`` bool)."""
    n = math.prod(shape)
    flat, bad = None, None
    for k in given:
        size = x.shape[k]
        i = to(indices[k], torch.int64)
        if list(indices[k].shape) != shape:
            i = ops.broadcast_to(i, shape)
        i = ops.reshape(i, [n])
        i = ops.where(ops.lt(i, to(0, torch.int64)), ops.add(i, to(size, torch.int64)), i)
        out = ops.where(ops.lt(i, to(0, torch.int64)), True, ops.ge(i, to(size, torch.int64)))
        bad = out if bad is None else ops.where(bad, True, out)
        flat = i if flat is None else ops.add(ops.mul(flat, to(size, torch.int64)), i)
    assert flat is not None and bad is not None
    return flat, bad


def _index_check(node: torch.fx.Node) -> str | None:
    x, indices = val(node.args[0]), node.args[1]
    given = [k for k, i in enumerate(indices) if i is not None]
    if not given or given != list(range(given[0], given[-1] + 1)):
        return "index tensors at dims apart (consecutive ones are translated)"
    for k in given:
        idx = val(indices[k])
        if idx.dtype not in _INDEX_DTYPES:
            return f"{idx.dtype} indices (integer indices are translated)"
    try:
        torch.broadcast_shapes(*(val(indices[k]).shape for k in given))
    except RuntimeError:
        return "index tensors that do not broadcast"
    if x.dtype not in (*FLOAT_DTYPES, torch.bool):
        return f"{x.dtype} input (float and bool tensors are translated)"
    return None


@rule(aten.index.Tensor, check=_index_check)
def _index(node: torch.fx.Node, x: Any, indices: Any) -> TracedTensor:
    """``x[:, .., i_d, i_d+1, ..]``: integer index tensors at consecutive dims, broadcast
    to one shape ``B``, pick along them; the result has ``x.shape[:d] + B + rest``. They
    become one index into those dims read as one (``i_d s_d+1 + i_d+1 ...``). A negative
    index counts from the end; one outside its dim gives NaN (torch raises). A bool
    ``x`` is picked as f32 zeros and ones, and only by indices the trace knows (built
    from constants, as ``transformers`` builds its masks) to lie in range."""
    given = [k for k, i in enumerate(indices) if i is not None]
    d, e = given[0], given[-1] + 1
    if torch_dtype(x) == torch.bool:  # no NaN to mark an index outside: known in range
        for k in given:
            known = static_value(indices[k])
            if known is None or known.size and not (
                (known >= -x.shape[k]).all() and (known < x.shape[k]).all()
            ):
                raise Unsupported("a bool tensor indexed by indices not known in range")
    shape = list(torch.broadcast_shapes(*(torch.Size(indices[k].shape) for k in given)))
    n = math.prod(shape)
    flat, bad = _flat_index(x, indices, given, shape)
    span = math.prod(x.shape[d:e])
    flat = ops.where(bad, to(span, torch.int64), flat)  # outside: NaN from the gather
    dt = torch_dtype(x)
    src = to(x, torch.float32) if dt == torch.bool else x
    src = ops.reshape(src, [*x.shape[:d], span, *x.shape[e:]])
    i = ops.reshape(flat, [1] * d + [n] + [1] * (x.ndim - e))
    picked = ops.take_along_axis(src, ops.broadcast_to(i, [*x.shape[:d], n, *x.shape[e:]]), d)
    if dt == torch.bool:  # NaN (an index outside) is not a bool: torch raises there
        picked = ops.ne(picked, to(0.0, torch.float32))
    return ops.reshape(picked, [*x.shape[:d], *shape, *x.shape[e:]])


def _float_or_bool_input(node: torch.fx.Node) -> str | None:
    x = val(node.args[0])
    return None if x.dtype in (*FLOAT_DTYPES, torch.bool) else f"{x.dtype} input"


def _pick_along(x: TracedTensor, d: int, idx: np.ndarray) -> TracedTensor:
    """``x`` picked along dim ``d`` at the in-range constant indices ``idx`` (1-D)."""
    n = len(idx)
    i = ops.constant(idx.astype(np.int64).reshape([1] * d + [n] + [1] * (x.ndim - d - 1)),
                     ts_dtype(torch.int64))
    dt = torch_dtype(x)
    src = to(x, torch.float32) if dt == torch.bool else x
    out = ops.take_along_axis(src, ops.broadcast_to(i, [*x.shape[:d], n, *x.shape[d + 1 :]]), d)
    return ops.ne(out, to(0.0, torch.float32)) if dt == torch.bool else out


@rule(aten.flip.default, check=_float_or_bool_input)
def _flip(node: torch.fx.Node, x: Any, dims: Any) -> TracedTensor:
    """``x`` reversed along ``dims`` (a ``cumsum``'s backward flips twice): a gather at
    the constant indices ``n-1 .. 0`` of each dim."""
    for d in sorted({int(d) % max(x.ndim, 1) for d in dims}):
        if x.ndim and x.shape[d] > 1:
            x = _pick_along(x, d, np.arange(x.shape[d])[::-1])
    return x


def _index_select_check(node: torch.fx.Node) -> str | None:
    x, idx = val(node.args[0]), val(node.args[2])
    if idx.dtype not in _INDEX_DTYPES or idx.dim() > 1:
        return f"indices {idx.dtype}{list(idx.shape)}"
    if x.dim() == 0 and idx.numel() != 1:
        return f"{idx.numel()} indices into a 0-d tensor"
    return None if x.dtype in FLOAT_DTYPES else f"{x.dtype} input (float tensors are translated)"


@rule(aten.index_select.default, check=_index_select_check)
def _index_select(node: torch.fx.Node, x: Any, dim: int, idx: Any) -> TracedTensor:
    """``torch.index_select``: ``x[:, .., idx]`` along ``dim`` (its backward, ``index_add``,
    decomposes to the accumulating ``index_put``)."""
    flat_idx = ops.reshape(idx, [math.prod(idx.shape)])
    if x.ndim == 0:  # torch reads a 0-d tensor as one element; the result is 0-d again
        return ops.reshape(_index(node, ops.reshape(x, [1]), [flat_idx]), [])
    d = int(dim) % x.ndim
    return _index(node, x, [None] * d + [flat_idx])


def _arg_check(node: torch.fx.Node) -> str | None:
    x = val(node.args[0])
    if x.dtype not in (*FLOAT_DTYPES, *_INDEX_DTYPES):
        return f"{x.dtype} input"
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    n = x.numel() if dim is None else (x.shape[int(dim) % x.dim()] if x.dim() else 1)
    if not isinstance(n, int):
        return "a symbolic size"
    return "an empty reduction (torch raises)" if n == 0 else None


def _arg_extreme(x: TracedTensor, dim: Any, keepdim: bool, largest: bool) -> TracedTensor:
    """The position of the first largest (smallest) element along ``dim`` (None: of the
    flattened tensor), int64: ``argmax`` / ``argmin``. A NaN counts as the extreme, so
    the first NaN's position is the result, as torch's."""
    rank = x.ndim
    if dim is None:
        x = ops.reshape(x, [max(1, math.prod(x.shape))])
        d = 0
    elif rank == 0:
        x, d = ops.reshape(x, [1]), 0
    else:
        d = int(dim) % rank
    n = x.shape[d]
    m = ops.max(x, axis=d, keepdims=True) if largest else ops.min(x, axis=d, keepdims=True)
    hit = ops.eq(x, m)
    if torch_dtype(x) in FLOAT_DTYPES:
        nan = ops.ne(x, x)
        any_nan = ops.gt(ops.sum(to(nan, torch.int64), axis=d, keepdims=True), to(0, torch.int64))
        hit = ops.where(any_nan, nan, hit)
    shape = [1] * x.ndim
    shape[d] = n
    pos = ops.constant(np.arange(n, dtype=np.int64).reshape(shape), ts_dtype(torch.int64))
    first = ops.min(ops.where(hit, pos, to(n, torch.int64)), axis=d, keepdims=True)
    if dim is None or rank == 0:
        return ops.reshape(first, [1] * rank if keepdim else [])
    return first if keepdim else ops.reshape(first, [k for i, k in enumerate(first.shape) if i != d])


@rule(aten.argmax.default, check=_arg_check)
def _argmax(node: torch.fx.Node, x: Any, dim: Any = None, keepdim: bool = False) -> TracedTensor:
    """``torch.argmax`` (CLIP's and the sequence-classification heads' pooled token): see
    :func:`_arg_extreme`."""
    return _arg_extreme(x, dim, bool(keepdim), largest=True)


@rule(aten.argmin.default, check=_arg_check)
def _argmin(node: torch.fx.Node, x: Any, dim: Any = None, keepdim: bool = False) -> TracedTensor:
    """``torch.argmin``: see :func:`_arg_extreme`."""
    return _arg_extreme(x, dim, bool(keepdim), largest=False)


def _max_dim_check(node: torch.fx.Node) -> str | None:
    x = val(node.args[0])
    if x.dim() == 0:
        return "a 0-d input"
    return _arg_check(node)


def _extreme_along(node: torch.fx.Node, x: Any, dim: int, keepdim: bool,
                   largest: bool) -> tuple[TracedTensor, TracedTensor]:
    """``(values, indices)`` of ``torch.max(x, dim)`` / ``torch.min``: the first extreme's
    position (:func:`_arg_extreme`, a NaN counting as the extreme) and the value there."""
    idx = _arg_extreme(x, dim, True, largest)
    d = int(dim) % x.ndim
    if torch_dtype(x) in FLOAT_DTYPES:
        vals = ops.take_along_axis(x, idx, d)
    else:
        vals = ops.max(x, axis=d, keepdims=True) if largest else ops.min(x, axis=d, keepdims=True)
    if not keepdim:
        shape = [k for i, k in enumerate(idx.shape) if i != d]
        idx, vals = ops.reshape(idx, shape), ops.reshape(vals, shape)
    return vals, idx


@rule(aten.max.dim, check=_max_dim_check)
def _max_dim(node: torch.fx.Node, x: Any, dim: int, keepdim: bool = False) -> Any:
    """``torch.max(x, dim)``: see :func:`_extreme_along` (Switch Transformers' router)."""
    return _extreme_along(node, x, dim, bool(keepdim), largest=True)


@rule(aten.min.dim, check=_max_dim_check)
def _min_dim(node: torch.fx.Node, x: Any, dim: int, keepdim: bool = False) -> Any:
    """``torch.min(x, dim)``: see :func:`_extreme_along`."""
    return _extreme_along(node, x, dim, bool(keepdim), largest=False)
