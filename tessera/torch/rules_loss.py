"""ATen rules: indexing by class (``gather``, ``scatter``) and the cross-entropy ops.

``aten.gather`` becomes ``tgraph.take_along_axis``. ``aten.scatter`` with one index per
position along its dim (what ``nll_loss``'s backward decomposes to) becomes a compare
against the positions and a select, elementwise ops that fuse with their neighbours. The
custom ops of :mod:`tessera.torch.cross_entropy` become a streaming log-sum-exp, a gather
and one fused elementwise gradient kernel. An index outside its dim gives NaN (the
gather's element, the scatter's row) where torch would raise: never a plausible value.

The rules register themselves in :data:`tessera.torch.aten_ops.RULES` when this module
is imported (``aten_ops`` imports it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.fx

from tessera.frontend import ops
from tessera.torch import cross_entropy as _cross_entropy  # noqa: F401  (defines tessera::cross_entropy_rows)
from tessera.torch.aten_ops import (
    FLOAT_DTYPES,
    TracedTensor,
    fail_at_run_time_if,
    opmath_dtype,
    rule,
    to,
    torch_dtype,
    ts_dtype,
    val,
)

aten = torch.ops.aten


def _positions(n: int, axis: int, rank: int) -> TracedTensor:
    """``0 .. n-1`` along ``axis`` of a rank-``rank`` int64 tensor (size 1 elsewhere)."""
    shape = [1] * rank
    shape[axis] = n
    return ops.constant(np.arange(n, dtype=np.int64).reshape(shape), ts_dtype(torch.int64))


def _outside(idx: TracedTensor, n: int) -> TracedTensor:
    """Where an int64 index is outside ``[0, n)``."""
    return ops.where(ops.lt(idx, to(0, torch.int64)), True, ops.ge(idx, to(n, torch.int64)))


def _gather_check(node: torch.fx.Node) -> str | None:
    x, index = val(node.args[0]), val(node.args[2])
    if x.dtype not in (*FLOAT_DTYPES, torch.int64, torch.int32):
        return f"{x.dtype} input"
    if index.dtype not in (torch.int64, torch.int32):
        return f"{index.dtype} indices"
    if x.dim() == 0 or index.dim() != x.dim():
        return "0-d input or indices of another rank"
    if node.kwargs.get("sparse_grad") or (len(node.args) > 3 and node.args[3]):
        return "sparse_grad"
    return None


INT_GATHER_EXACT = 2**53
"""int64 values a gather carries exactly (through float64)."""


@rule(aten.gather.default, check=_gather_check)
def _gather(node: torch.fx.Node, x: Any, dim: int, index: Any, **kw: Any) -> TracedTensor:
    """``torch.gather``: ``tgraph.take_along_axis`` (NaN for an index outside the dim).

    An integer input (BERT's token type ids, gathered at its position ids) is gathered
    as float64, exact for int32 and for int64 values of magnitude at most 2^53. An
    integer result has no NaN to mark an index outside the dim, so there each call
    checks its indices (and an int64 input its magnitudes) and raises a ``TesseraError``
    where torch raises (see ``aten_ops.fail_at_run_time_if``)."""
    dt = torch_dtype(x)
    if dt in FLOAT_DTYPES:
        return ops.take_along_axis(x, index, int(dim))
    d = int(dim) % x.ndim
    idx = to(index, torch.int64)
    fail_at_run_time_if(_outside(idx, x.shape[d]), f"an index outside [0, {x.shape[d]})")
    if dt == torch.int64:
        big = to(INT_GATHER_EXACT, torch.int64)
        fail_at_run_time_if(ops.where(ops.gt(x, big), True, ops.lt(x, ops.neg(big))),
                            "an int64 value beyond 2^53 (gathered through float64)")
    ok = ops.where(_outside(idx, x.shape[d]), to(0, torch.int64), idx)
    return to(ops.take_along_axis(to(x, torch.float64), ok, d), dt)


def _scatter_check(node: torch.fx.Node) -> str | None:
    x, dim, index = val(node.args[0]), int(node.args[1]), val(node.args[2])
    if x.dtype not in FLOAT_DTYPES:
        return f"{x.dtype} input"
    if node.kwargs.get("reduce") is not None:
        return "reduce="
    if index.dim() != x.dim() or x.dim() == 0:
        return "indices of another rank"
    d = dim % x.dim()
    if index.shape[d] != 1 or any(
        a != b for k, (a, b) in enumerate(zip(index.shape, x.shape)) if k != d
    ):
        return f"indices {list(index.shape)} are not one per position along dim {d} of {list(x.shape)}"
    if node.target is aten.scatter.src and list(val(node.args[3]).shape) != list(index.shape):
        return "src of another shape than the indices"
    return None


@rule(aten.scatter.value, aten.scatter.src, check=_scatter_check)
def _scatter(node: torch.fx.Node, x: Any, dim: int, index: Any, value: Any) -> TracedTensor:
    """``x`` with ``value`` (a number, or ``src`` of the indices' shape) written at each
    row's index along ``dim``: ``where(positions == index, value, x)``. A row whose index
    is outside the dim becomes NaN (torch raises)."""
    dt = torch_dtype(x)
    d = int(dim) % x.ndim
    n = x.shape[d]
    idx = to(index, torch.int64)
    hit = ops.eq(_positions(n, d, x.ndim), idx)
    r = ops.where(hit, to(value, dt), x)
    return ops.where(_outside(idx, n), to(float("nan"), dt), r)


SCATTER_ADD_LIMIT = 1 << 24
"""The largest one-hot tensor (index positions x the dim's size) ``scatter_add`` is
translated with."""


def _scatter_add_check(node: torch.fx.Node) -> str | None:
    x, dim, index, src = val(node.args[0]), node.args[1], val(node.args[2]), val(node.args[3])
    if x.dtype not in FLOAT_DTYPES or src.dtype != x.dtype:
        return f"{x.dtype} input, {src.dtype} source"
    if index.dtype not in (torch.int64, torch.int32):
        return f"{index.dtype} indices"
    if x.dim() == 0 or index.dim() != x.dim() or src.dim() != x.dim():
        return "0-d input or operands of other ranks"
    d = int(dim) % x.dim()
    shapes = [list(t.shape) for t in (x, index, src)]
    if not all(isinstance(k, int) for sh in shapes for k in sh):
        return "symbolic sizes"
    if any(index.shape[k] > src.shape[k] or (k != d and index.shape[k] > x.shape[k])
           for k in range(x.dim())):
        return f"indices {list(index.shape)} larger than the source or the input"
    if index.numel() * x.shape[d] > SCATTER_ADD_LIMIT:
        return f"a one-hot tensor over {SCATTER_ADD_LIMIT} elements"
    return None


@rule(aten.scatter_add.default, check=_scatter_add_check)
def _scatter_add(node: torch.fx.Node, x: Any, dim: int, index: Any, src: Any) -> TracedTensor:
    """``x`` plus ``src[p]`` added at ``p`` with its ``dim`` coordinate replaced by
    ``index[p]``, for each position ``p`` of ``index`` (``src`` read at the indices'
    positions only): the backward of ``gather`` (DeBERTa's relative attention). With
    ``dim`` moved last, ``sum over k of src[.., k] * (index[.., k] == j)`` for each
    ``j`` of the dim: a one-hot tensor of the indices' positions times the dim's size,
    summed in a fixed order (no atomics). The other dims of the indices may be shorter
    than ``x``'s: the rest gets nothing. An index outside the dim makes the result NaN
    (torch raises)."""
    dt = torch_dtype(x)
    wide = opmath_dtype(dt)
    r = x.ndim
    d = int(dim) % r
    n = x.shape[d]
    ishape = list(index.shape)
    if list(src.shape) != ishape:
        src = ops.slice(src, [0] * r, ishape)
    perm = [*[k for k in range(r) if k != d], d]
    back = [perm.index(k) for k in range(r)]
    idx = to(index, torch.int64)
    if d != r - 1:
        idx, src = ops.transpose(idx, perm), ops.transpose(src, perm)
    lead = list(idx.shape[:-1])
    k = idx.shape[-1]
    pos = ops.constant(np.arange(n, dtype=np.int64).reshape([1] * r + [n]), ts_dtype(torch.int64))
    hit = ops.eq(ops.reshape(idx, [*lead, k, 1]), pos)  # [.., K, N]
    vals = ops.reshape(to(src, wide), [*lead, k, 1])
    upd = ops.sum(ops.where(hit, vals, to(0.0, wide)), axis=r - 1)  # [.., N]
    for a, (have, want) in enumerate(zip(lead, [x.shape[q] for q in perm[:-1]])):
        if have < want:  # positions the indices do not reach get nothing
            zs = list(upd.shape)
            zs[a] = want - have
            upd = ops.concat([upd, ops.broadcast_to(to(0.0, wide), zs)], axis=a)
    if d != r - 1:
        upd = ops.transpose(upd, back)
    out = ops.add(to(x, wide), upd)
    nbad = ops.sum(to(_outside(idx, n), torch.int64))
    out = ops.where(ops.gt(nbad, to(0, torch.int64)), to(float("nan"), wide), out)
    return to(out, dt)


# --------------------------------------------------------------------------- cross-entropy


def _ce_check_args(x: Any, t: Any) -> str | None:
    if x.dtype not in FLOAT_DTYPES or x.dim() != 2:
        return f"logits {x.dtype}{list(x.shape)}"
    if t.dtype != torch.int64 or t.dim() != 1:
        return f"targets {t.dtype}{list(t.shape)}"
    return None


def _ce_check(node: torch.fx.Node) -> str | None:
    return _ce_check_args(val(node.args[0]), val(node.args[1]))


def _ce_backward_check(node: torch.fx.Node) -> str | None:
    return _ce_check_args(val(node.args[1]), val(node.args[2]))


def _wide(x: TracedTensor) -> torch.dtype:
    return torch.float64 if torch_dtype(x) == torch.float64 else torch.float32


@rule(torch.ops.tessera.cross_entropy_rows.default, check=_ce_check)
def _ce_rows(node: torch.fx.Node, x: Any, t: Any, ignore_index: int) -> tuple[TracedTensor, ...]:
    """Per-row loss and log-sum-exp: one streaming pass over the logits (f32 sums, an f32
    result from 16-bit logits) and a gather of the targets' logits."""
    n = x.shape[0]
    wide = _wide(x)
    lse = ops.logsumexp(x, 1, wide=True)
    valid = ops.ne(t, to(int(ignore_index), torch.int64))
    safe = ops.where(valid, t, to(0, torch.int64))
    picked = ops.reshape(ops.take_along_axis(x, ops.reshape(safe, [n, 1]), 1), [n])
    loss = ops.where(valid, ops.sub(lse, to(picked, wide)), to(0.0, wide))
    return loss, lse


@rule(torch.ops.tessera.cross_entropy_rows_backward.default, check=_ce_backward_check)
def _ce_rows_backward(
    node: torch.fx.Node, grad: Any, x: Any, t: Any, lse: Any, ignore_index: int
) -> TracedTensor:
    """``grad * (exp(x - lse) - onehot(target))`` per row in the logits' dtype (0 on
    ignored rows, NaN on rows whose target is outside the classes): elementwise ops on
    the logits and per-row values that fuse into one kernel."""
    n, c = x.shape
    wide = _wide(x)
    valid = ops.ne(t, to(int(ignore_index), torch.int64))
    gv = ops.where(valid, to(grad, wide), to(0.0, wide))
    gv = ops.where(ops.where(valid, _outside(t, c), False), to(float("nan"), wide), gv)
    p = ops.exp(ops.sub(to(x, wide), ops.reshape(to(lse, wide), [n, 1])))
    hit = ops.eq(_positions(c, 1, 2), ops.reshape(t, [n, 1]))
    d = ops.where(hit, ops.sub(p, to(1.0, wide)), p)
    return to(ops.mul(d, ops.reshape(gv, [n, 1])), torch_dtype(x))

