"""Deterministic collectives over torch.distributed.

Every reduction here has a fixed order that does not depend on NCCL's (or
gloo's) algorithm, protocol or channel count:

1. ``all_to_all``: rank ``j`` receives chunk ``j`` of every rank's flattened input,
2. a rank-ordered local fold ``((x_0 op x_1) op x_2) ...`` of those chunks,
3. ``all_gather`` of the reduced chunks.

Each element is therefore reduced exactly as ``x_0 + x_1 + ... + x_{n-1}`` left
to right, whatever the transport does, and the same inputs give bitwise-identical
outputs on every run and on every rank. ``deterministic=False`` uses
``torch.distributed.all_reduce`` instead.

The transport moves raw bytes, so any element type travels (bf16, fp8, fp6 ...);
the local fold runs in the caller's array library: numpy (with ml_dtypes) for
numpy arrays, torch for torch tensors (on their device).

The group of a collective is given by ``mesh`` + ``axis`` (a mesh axis), by an
explicit ``group``, or by the mesh made current with ``with mesh:``. On a group of one rank, or a mesh axis of size 1 without any
process group, every collective is the identity (a concatenation of one block,
a reduction of one value).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tessera.dist.mesh import Mesh, MeshError, current_mesh
from tessera.dist.topology import (
    OrderError,
    ReductionOrder,
    Topology,
    choose_order,
    named_order,
)
from tessera.errors import TesseraError
from tessera.ir.attrs import REDUCTIONS

COLLECTIVE_HOOK: Any = None
"""Set by ``ts.profiler`` while a session is active, else None: the public collectives
call ``COLLECTIVE_HOOK(name, run, x)`` instead of running, where ``run()`` runs the
collective and ``x`` is the array sent (None for ``recv``)."""


def _observed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Route a public collective through :data:`COLLECTIVE_HOOK` when one is set."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if COLLECTIVE_HOOK is None:
            return fn(*args, **kwargs)
        x = args[0] if args and fn.__name__ != "recv" else None
        return COLLECTIVE_HOOK(fn.__name__, lambda: fn(*args, **kwargs), x)

    return wrapper


class CollectiveError(TesseraError, RuntimeError):
    """A collective that cannot run as asked (no process group, bad shape, ...)."""


# --------------------------------------------------------------------------- groups


class _Group:
    """A resolved communication group: the torch group (None = world), its size, my
    index, and the global ranks and topology its reduction order is chosen from."""

    def __init__(
        self, pg: Any, size: int, index: int, device: Any,
        ranks: Sequence[int] | None = None, topo: Topology | None = None,
    ):
        self.pg = pg
        self.size = size
        self.index = index
        self.device = device
        self.ranks = list(ranks) if ranks is not None else list(range(size))
        self.topo = topo if topo is not None else Topology(max(size, 1), False)

    def order(self, name: str | None) -> ReductionOrder:
        """The reduction order: ``name`` when given, else the one chosen for the group."""
        if name is not None:
            return named_order(name, self.ranks, self.topo)
        return choose_order(self.ranks, self.topo)


def _resolve(
    what: str, axis: str | None, mesh: Mesh | None, group: Any
) -> _Group:
    import torch
    import torch.distributed as tdist

    if group is not None:
        n = tdist.get_world_size(group)
        dev = torch.device("cuda", torch.cuda.current_device()) if (
            tdist.get_backend(group) == "nccl"
        ) else torch.device("cpu")
        return _Group(group, n, tdist.get_rank(group), dev)
    if mesh is None:
        mesh = current_mesh()
    if mesh is None:
        if axis is not None:
            raise CollectiveError(
                f"{what}: axis '{axis}' given without a mesh; pass mesh=, or run inside "
                "`with mesh:`"
            )
        if not (tdist.is_available() and tdist.is_initialized()):
            return _Group(None, 1, 0, torch.device("cpu"))
        n = tdist.get_world_size()
        dev = torch.device("cuda", torch.cuda.current_device()) if (
            tdist.get_backend() == "nccl"
        ) else torch.device("cpu")
        return _Group(None, n, tdist.get_rank(), dev)
    if axis is None:
        raise CollectiveError(f"{what}: name the mesh axis (axes: {', '.join(mesh.axes)})")
    try:
        n = mesh.axis_size(axis)
    except MeshError as e:
        raise CollectiveError(f"{what}: {e}") from None
    mesh.check_devices()
    if not mesh.is_initialized():
        if n == 1:
            return _Group(None, 1, 0, torch.device("cpu"))
        raise CollectiveError(
            f"{what} over mesh axis '{axis}' (size {n}) needs an initialized torch.distributed "
            "process group: run one process per rank (torchrun, or tessera.dist.executor)"
        )
    rank = mesh.check_world()
    if n == 1:
        return _Group(None, 1, 0, mesh.device_of(rank))
    return _Group(mesh.group(axis), n, mesh.coords(rank)[axis], mesh.device_of(rank),
                  mesh.axis_group_ranks(axis, rank), mesh.topology())


# --------------------------------------------------------------------------- array helpers


def _is_torch(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _bytes(x: Any, device: Any) -> Any:
    """A flat uint8 torch tensor with the bytes of contiguous ``x``, on ``device``."""
    import torch

    if _is_torch(x):
        t = x.contiguous().reshape(-1)
        return t.view(torch.uint8).to(device)
    a = np.ascontiguousarray(x).reshape(-1)
    return torch.from_numpy(a.view(np.uint8).copy()).to(device)


def _from_bytes(b: Any, like: Any, shape: Sequence[int]) -> Any:
    """Typed array (numpy or torch like ``like``) of ``shape`` from uint8 tensor ``b``."""
    if _is_torch(like):
        return b.to(like.device).view(like.dtype).reshape(tuple(shape))
    dt = np.asarray(like).dtype
    return b.cpu().numpy().view(dt).reshape(tuple(shape))


def _fold(rows: Sequence[Any], op: str, order: ReductionOrder | None = None) -> Any:
    """Fold of ``rows`` (group order) with reduction ``op`` (numpy or torch) in ``order``
    (:mod:`tessera.dist.topology`; default: the rank-ordered left fold, ``ring``)."""
    if op not in REDUCTIONS:
        raise CollectiveError(f"unknown reduction '{op}'; valid: {', '.join(REDUCTIONS)}")
    torchy = _is_torch(rows[0])
    if torchy:
        import torch

        mx, mn = torch.maximum, torch.minimum
        first = rows[0].clone()
    else:
        mx, mn = np.maximum, np.minimum
        first = np.array(rows[0], copy=True)
    combine = {
        "sum": lambda a, b: a + b, "mean": lambda a, b: a + b, "prod": lambda a, b: a * b,
        "max": mx, "min": mn,
    }[op]
    acc = (order or ReductionOrder("ring")).fold([first, *rows[1:]], combine)
    if op == "mean":
        acc = acc / len(rows)
        acc = acc.to(rows[0].dtype) if torchy else acc.astype(rows[0].dtype)
    return acc


def _a2a_bytes(send: Any, g: _Group) -> Any:
    import torch
    import torch.distributed as tdist

    recv = torch.empty_like(send)
    tdist.all_to_all_single(recv, send, group=g.pg)
    return recv


def _gather_bytes(b: Any, g: _Group) -> Any:
    import torch
    import torch.distributed as tdist

    out = torch.empty(b.numel() * g.size, dtype=torch.uint8, device=b.device)
    gather = getattr(tdist, "all_gather_single", None) or tdist.all_gather_into_tensor
    gather(out, b, group=g.pg)
    return out


def _stack(parts: Sequence[Any]) -> Any:
    if _is_torch(parts[0]):
        import torch

        return torch.stack(list(parts))
    return np.stack(parts)


def _concat(parts: Sequence[Any], dim: int) -> Any:
    if _is_torch(parts[0]):
        import torch

        return torch.cat(list(parts), dim=dim)
    return np.concatenate(parts, axis=dim)


def _pad_dim(x: Any, dim: int, size: int) -> Any:
    """``x`` extended with zeros along ``dim`` to ``size`` (itself when already that size)."""
    from tessera.dist.sharding import pad_block

    shape = list(x.shape)
    if shape[dim] > size:
        raise CollectiveError(f"dim {dim} of size {shape[dim]} is larger than its block {size}")
    shape[dim] = size
    return pad_block(x, shape)


def _take(x: Any, dim: int, start: int, stop: int) -> Any:
    idx: list[Any] = [slice(None)] * x.ndim
    idx[dim] = slice(start, stop)
    return x[tuple(idx)]


def _split(x: Any, n: int, dim: int, what: str) -> list[Any]:
    """``n`` blocks of ``dim``; when ``n`` does not divide it, blocks of ``ceil(size / n)``
    with the last ones padded with zeros (the padded blocks of ``tessera.dist.sharding``)."""
    from tessera.dist.sharding import block_size

    k = block_size(x.shape[dim], n)
    x = _pad_dim(x, dim, k * n)
    return [_take(x, dim, i * k, (i + 1) * k) for i in range(n)]


def _valid(block: Any, size: int, n: int, index: int, dim: int) -> Any:
    """The valid part of padded block ``index`` of a dim of ``size`` split into ``n``."""
    from tessera.dist.sharding import block_range

    start, stop = block_range(size, n, index)
    return _take(block, dim, 0, stop - start)


def _norm_dim(dim: int, ndim: int, what: str) -> int:
    if not -ndim <= dim < ndim:
        raise CollectiveError(f"{what}: dim {dim} out of range for rank {ndim}")
    return dim % ndim


# --------------------------------------------------------------------------- collectives


@_observed
def all_reduce(
    x: Any,
    op: str = "sum",
    axis: str | None = None,
    *,
    mesh: Mesh | None = None,
    group: Any = None,
    deterministic: bool = True,
    order: str | None = None,
) -> Any:
    """Reduce ``x`` over the group; every rank gets the result (a new array/tensor).

    Deterministic by default: all_to_all, a local fold in the group's reduction order,
    all_gather. ``order`` (``ring``, ``tree``, ``hierarchical``) overrides the order
    chosen from the mesh's topology (:mod:`tessera.dist.topology`).
    """
    if op not in REDUCTIONS:
        raise CollectiveError(
            f"all_reduce: unknown reduction '{op}'; valid: {', '.join(REDUCTIONS)}"
        )
    g = _resolve("all_reduce", axis, mesh, group)
    ro = _order(g, order, "all_reduce")
    if g.size == 1:
        return x.clone() if _is_torch(x) else np.array(x, copy=True)
    if not deterministic:
        return _all_reduce_torch(x, op, g)
    shape = tuple(x.shape)
    n = math.prod(shape)
    chunk = -(-n // g.size)
    flat = x.reshape(-1)
    pad = chunk * g.size - n
    if pad:
        if _is_torch(x):
            import torch

            flat = torch.cat([flat, torch.zeros(pad, dtype=x.dtype, device=x.device)])
        else:
            flat = np.concatenate([flat, np.zeros(pad, dtype=flat.dtype)])
    recv = _a2a_bytes(_bytes(flat, g.device), g)
    rows = _from_bytes(recv, x, (g.size, chunk))
    red = _fold([rows[i] for i in range(g.size)], op, ro)
    full = _from_bytes(_gather_bytes(_bytes(red, g.device), g), x, (g.size * chunk,))
    return full[:n].reshape(shape)


def _all_reduce_torch(x: Any, op: str, g: _Group) -> Any:
    import torch
    import torch.distributed as tdist

    ops = {
        "sum": tdist.ReduceOp.SUM, "mean": tdist.ReduceOp.SUM, "prod": tdist.ReduceOp.PRODUCT,
        "max": tdist.ReduceOp.MAX, "min": tdist.ReduceOp.MIN,
    }
    if _is_torch(x):
        t = x.clone()
    else:
        a = np.ascontiguousarray(x)
        try:
            t = torch.from_numpy(a.copy())
        except TypeError:
            raise CollectiveError(
                f"all_reduce(deterministic=False): torch has no type for {a.dtype}"
            ) from None
    t = t.to(g.device)
    tdist.all_reduce(t, op=ops[op], group=g.pg)
    if op == "mean":
        t = (t / g.size).to(t.dtype)
    return t.to(x.device) if _is_torch(x) else t.cpu().numpy()


@_observed
def all_gather(
    x: Any,
    axis: str | None = None,
    dim: int = 0,
    *,
    mesh: Mesh | None = None,
    group: Any = None,
    size: int | None = None,
) -> Any:
    """Concatenate every rank's ``x`` along ``dim``, in rank order.

    ``size`` is the global size of ``dim`` when the blocks are uneven: each rank passes
    its padded block (``ceil(size / ranks)`` long) or its valid (ragged) part, and the
    result has ``size`` elements along ``dim``.
    """
    g = _resolve("all_gather", axis, mesh, group)
    dim = _norm_dim(dim, x.ndim, "all_gather")
    if size is not None:
        from tessera.dist.sharding import block_size

        x = _pad_dim(x, dim, block_size(int(size), g.size))
    if g.size == 1:
        out1 = x.clone() if _is_torch(x) else np.array(x, copy=True)
        return out1 if size is None else _take(out1, dim, 0, int(size))
    out = _from_bytes(_gather_bytes(_bytes(x, g.device), g), x, (g.size, *x.shape))
    full = _concat([out[i] for i in range(g.size)], dim)
    return full if size is None else _take(full, dim, 0, int(size))


@_observed
def reduce_scatter(
    x: Any,
    op: str = "sum",
    axis: str | None = None,
    dim: int = 0,
    *,
    mesh: Mesh | None = None,
    group: Any = None,
    deterministic: bool = True,
    padded: bool = True,
    order: str | None = None,
) -> Any:
    """Reduce over the group; rank ``r`` keeps block ``r`` of ``dim``.

    Deterministic: block ``r`` of every rank goes to rank ``r`` (all_to_all), which
    folds them in the group's reduction order (``order`` overrides it, as for
    :func:`all_reduce`). When the ranks do not divide ``dim``, blocks are
    ``ceil(size / ranks)`` long: padded with zeros, or only the valid part with
    ``padded=False``.
    """
    g = _resolve("reduce_scatter", axis, mesh, group)
    ro = _order(g, order, "reduce_scatter")
    dim = _norm_dim(dim, x.ndim, "reduce_scatter")
    if op not in REDUCTIONS:
        raise CollectiveError(
            f"reduce_scatter: unknown reduction '{op}'; valid: {', '.join(REDUCTIONS)}"
        )
    n = x.shape[dim]
    blocks = _split(x, g.size, dim, "reduce_scatter")
    if g.size == 1:
        out = _fold([blocks[0]], op)
    elif not deterministic:
        out = _split(_all_reduce_torch(x, op, g), g.size, dim, "reduce_scatter")[g.index]
    else:
        send = _stack(blocks)
        recv = _from_bytes(_a2a_bytes(_bytes(send, g.device), g), x, tuple(send.shape))
        out = _fold([recv[i] for i in range(g.size)], op, ro)
    return out if padded else _valid(out, n, g.size, g.index, dim)


@_observed
def all_to_all(
    x: Any,
    axis: str | None = None,
    split_dim: int = 0,
    concat_dim: int = 0,
    *,
    mesh: Mesh | None = None,
    group: Any = None,
) -> Any:
    """Split ``split_dim`` into one block per rank, send block ``j`` to rank ``j``, and
    concatenate the received blocks along ``concat_dim`` in rank order. When the ranks
    do not divide ``split_dim``, its blocks are ``ceil(size / ranks)`` long, padded with
    zeros."""
    g = _resolve("all_to_all", axis, mesh, group)
    split_dim = _norm_dim(split_dim, x.ndim, "all_to_all")
    concat_dim = _norm_dim(concat_dim, x.ndim, "all_to_all")
    blocks = _split(x, g.size, split_dim, "all_to_all")
    if g.size == 1:
        return x.clone() if _is_torch(x) else np.array(x, copy=True)
    send = _stack(blocks)
    recv = _from_bytes(_a2a_bytes(_bytes(send, g.device), g), x, tuple(send.shape))
    return _concat([recv[i] for i in range(g.size)], concat_dim)


@_observed
def all_slice(
    x: Any,
    axis: str | None = None,
    dim: int = 0,
    *,
    mesh: Mesh | None = None,
    group: Any = None,
    padded: bool = True,
) -> Any:
    """This rank's block ``r`` of ``dim`` (no communication): replicated -> sharded.
    Uneven blocks are padded with zeros, or the valid part only with ``padded=False``."""
    g = _resolve("all_slice", axis, mesh, group)
    dim = _norm_dim(dim, x.ndim, "all_slice")
    b = _split(x, g.size, dim, "all_slice")[g.index]
    if not padded:
        b = _valid(b, x.shape[dim], g.size, g.index, dim)
    return b.clone() if _is_torch(b) else np.array(b, copy=True)


def _peer(what: str, mesh: Mesh | None, axis: str, peer: int) -> int:
    mesh = mesh or current_mesh()
    if mesh is None:
        raise CollectiveError(f"{what}: axis '{axis}' given without a mesh")
    rank = mesh.check_world()
    c = mesh.coords(rank)
    n = mesh.axis_size(axis)
    to = c[axis] + peer
    if not 0 <= to < n:
        raise CollectiveError(
            f"{what}: rank {rank} is at {axis}={c[axis]}; peer {peer:+d} is outside the axis "
            f"(size {n})"
        )
    return mesh.rank_of({**c, axis: to})


@_observed
def send(x: Any, axis: str, peer: int = 1, *, mesh: Mesh | None = None) -> None:
    """Send ``x`` to the rank ``peer`` steps along mesh axis ``axis`` (blocking)."""
    import torch.distributed as tdist

    dst = _peer("send", mesh, axis, peer)
    m = mesh or current_mesh()
    assert m is not None
    tdist.send(_bytes(x, m.device_of(m.rank)), dst=dst)


@_observed
def recv(
    shape: Sequence[int], dtype: Any, axis: str, peer: int = -1, *, mesh: Mesh | None = None,
    like: Any = None,
) -> Any:
    """Receive a tensor of ``shape``/``dtype`` from the rank ``peer`` steps along ``axis``.

    ``dtype`` is a numpy dtype (the result is a numpy array) unless ``like`` is a torch
    tensor, whose type and device the result takes.
    """
    import torch
    import torch.distributed as tdist

    src = _peer("recv", mesh, axis, peer)
    m = mesh or current_mesh()
    assert m is not None
    if like is None:
        like = np.empty((0,), dtype=dtype)
    itemsize = like.element_size() if _is_torch(like) else np.dtype(like.dtype).itemsize
    buf = torch.empty(math.prod(shape) * itemsize, dtype=torch.uint8, device=m.device_of(m.rank))
    tdist.recv(buf, src=src)
    return _from_bytes(buf, like, shape)


def rank_ordered_reduce(values: Sequence[Any], op: str = "sum") -> Any:
    """The reference result of a deterministic all_reduce in the ``ring`` order: the
    rank-ordered left fold."""
    return _fold(list(values), op)


def ordered_reduce(values: Sequence[Any], op: str = "sum",
                   order: ReductionOrder | str = "ring") -> Any:
    """The reference result of a deterministic all_reduce of ``values`` (group order) in
    ``order`` (a :class:`~tessera.dist.topology.ReductionOrder`, or ``ring`` / ``tree``;
    a ``hierarchical`` order needs its nodes, so pass the object
    :func:`reduction_order` returns)."""
    ro = order if isinstance(order, ReductionOrder) else ReductionOrder(order)
    return _fold(list(values), op, ro)


def reduction_order(mesh: Mesh, axis: str, rank: int = 0) -> ReductionOrder:
    """The reduction order the deterministic collectives use on the group of ``axis``
    that holds ``rank`` (chosen from ``mesh.topology()``)."""
    from tessera.dist.topology import order_for

    return order_for(mesh, axis, rank)


def _order(g: _Group, name: str | None, what: str) -> ReductionOrder:
    try:
        return g.order(name)
    except OrderError as e:
        raise CollectiveError(f"{what}: {e}") from None
