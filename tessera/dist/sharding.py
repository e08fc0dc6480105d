"""Shard specifications and moving between global and sharded values.

``ShardSpec(partition=("row", "col"), mesh_axes=("tp", "pp"))`` splits a
tensor's row dimension over mesh axis ``tp`` and its column dimension over
``pp``. ``partition`` entries name tensor dimensions: ``"row"`` (second to last),
``"col"`` (last), ``"batch"`` (first) or an int index; ``mesh_axes`` entries are
an axis name or a tuple of names (the first is major). ``ShardSpec()`` is the
replicated layout. In the IR a spec is ``#tessera.shard<[[tp], [pp]]>``.

Blocks are contiguous: along a dimension split over axes ``(a, b)``, the rank at
coordinates ``(i, j)`` holds block ``i * size(b) + j`` of ``P = size(a) * size(b)``
blocks.

**Uneven dims.** A dim of size ``n`` that ``P`` does not divide is split into blocks of
``c = ceil(n / P)``: block ``b`` holds elements ``[b*c, min((b+1)*c, n))``, so the last
blocks are short (possibly empty) and every element of padding lies at the global
tail (:func:`block_range`). The *padded* block of every rank has ``c`` elements, zeros
past its valid part; it is what :func:`local_shape` gives, what ``dist.tensor`` holds
and what per-rank programs compute on, so every rank runs the same program. The
*ragged* block is the valid part only (``shard(..., padded=False)``,
:func:`valid_shape`). The guide's 1e6 rows over 72 devices are 71 blocks of 13889 rows
and one of 13881; 8192 columns over ``tp = 9`` are 8 blocks of 911 and one of 904.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tessera.dist.mesh import Mesh, MeshError
from tessera.errors import TesseraError
from tessera.ir.attrs import REDUCTIONS, ShardSpecAttr

_DIM_NAMES = ("row", "col", "batch")


class ShardingError(TesseraError, ValueError):
    """A layout that does not fit a tensor or a mesh (dim not divisible, unknown axis)."""


class ShardSpec:
    """How a tensor is partitioned over mesh axes (see the module docstring)."""

    def __init__(
        self,
        partition: Sequence[str | int] = (),
        mesh_axes: Sequence[str | Sequence[str]] = (),
        *,
        partial: Sequence[str] = (),
        partial_op: str = "sum",
    ):
        if isinstance(partition, str | int):
            partition = (partition,)
        if isinstance(mesh_axes, str):
            mesh_axes = (mesh_axes,)
        if len(partition) != len(mesh_axes):
            raise ShardingError(
                f"ShardSpec: {len(partition)} partitioned dims {tuple(partition)} but "
                f"{len(mesh_axes)} mesh axes {tuple(mesh_axes)}"
            )
        for p in partition:
            if not isinstance(p, int) and p not in _DIM_NAMES:
                raise ShardingError(
                    f"ShardSpec: unknown partition {p!r}; use 'row', 'col', 'batch' or a dim index"
                )
        if partial_op not in REDUCTIONS:
            raise ShardingError(
                f"ShardSpec: unknown partial reduction '{partial_op}'; valid: {', '.join(REDUCTIONS)}"
            )
        self.partition: tuple[str | int, ...] = tuple(partition)
        self.mesh_axes: tuple[tuple[str, ...], ...] = tuple(
            (m,) if isinstance(m, str) else tuple(m) for m in mesh_axes
        )
        self.partial: tuple[str, ...] = tuple(partial)
        self.partial_op = partial_op
        used = [a for m in self.mesh_axes for a in m] + list(self.partial)
        if len(set(used)) != len(used):
            raise ShardingError(f"ShardSpec: a mesh axis is used twice in {used}")

    @staticmethod
    def replicated() -> ShardSpec:
        return ShardSpec()

    def dim_index(self, p: str | int, ndim: int) -> int:
        """The tensor dimension that partition entry ``p`` names for a rank-``ndim`` tensor."""
        if ndim == 0:
            raise ShardingError(f"ShardSpec: partition {p!r}: a rank-0 tensor cannot be split")
        if isinstance(p, int):
            if not -ndim <= p < ndim:
                raise ShardingError(
                    f"ShardSpec: partition dim {p} is out of range for a rank-{ndim} tensor"
                )
            return p % ndim
        if p == "batch":
            return 0
        if p == "col":
            return ndim - 1
        return max(ndim - 2, 0)

    def splits(self, ndim: int) -> list[list[str]]:
        """For each of ``ndim`` dims, the mesh axes it is split over."""
        out: list[list[str]] = [[] for _ in range(ndim)]
        for p, axes in zip(self.partition, self.mesh_axes):
            d = self.dim_index(p, ndim)
            if out[d]:
                raise ShardingError(f"ShardSpec: dimension {d} is partitioned twice")
            out[d] = list(axes)
        return out

    def to_attr(self, ndim: int) -> ShardSpecAttr:
        """The IR attribute for a rank-``ndim`` tensor."""
        return ShardSpecAttr.get(self.splits(ndim), self.partial, self.partial_op)

    @staticmethod
    def from_attr(attr: ShardSpecAttr) -> ShardSpec:
        sp = attr.splits()
        dims = [i for i, s in enumerate(sp) if s]
        return ShardSpec(
            partition=dims,
            mesh_axes=[tuple(sp[i]) for i in dims],
            partial=attr.partial(),
            partial_op=attr.partial_op.data or "sum",
        )

    def is_replicated(self) -> bool:
        return not self.mesh_axes and not self.partial

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShardSpec) and (
            self.partition, self.mesh_axes, self.partial, self.partial_op
        ) == (other.partition, other.mesh_axes, other.partial, other.partial_op)

    def __hash__(self) -> int:
        return hash((self.partition, self.mesh_axes, self.partial))

    def __repr__(self) -> str:
        if self.is_replicated():
            return "ShardSpec()"
        s = f"ShardSpec(partition={self.partition}, mesh_axes={self.mesh_axes}"
        if self.partial:
            s += f", partial={self.partial}, partial_op={self.partial_op!r}"
        return s + ")"


Layout = ShardSpec | ShardSpecAttr


def _splits(layout: Layout, ndim: int) -> tuple[list[list[str]], list[str], str]:
    if isinstance(layout, ShardSpecAttr):
        sp = layout.splits()
        if len(sp) != ndim:
            raise ShardingError(f"sharding {layout} has {len(sp)} dims, the tensor has {ndim}")
        return sp, layout.partial(), layout.partial_op.data or "sum"
    return layout.splits(ndim), list(layout.partial), layout.partial_op


def _check_axes(mesh: Mesh, axes: Sequence[str]) -> None:
    for a in axes:
        try:
            mesh.axis_index(a)
        except MeshError as e:
            raise ShardingError(str(e)) from None


def block_size(n: int, parts: int) -> int:
    """Elements in each (padded) block of a dim of size ``n`` split into ``parts``."""
    return -(-n // parts)


def block_range(n: int, parts: int, b: int) -> tuple[int, int]:
    """``[start, stop)`` of block ``b`` of a dim of size ``n`` split into ``parts``
    ceil-sized blocks (the last ones short or empty when ``parts`` does not divide ``n``)."""
    if not 0 <= b < parts:
        raise ShardingError(f"block {b} is outside a split into {parts} parts")
    c = block_size(n, parts)
    return min(b * c, n), min((b + 1) * c, n)


def _parts(mesh: Mesh, axes: Sequence[str]) -> int:
    n = 1
    for a in axes:
        n *= mesh.axis_size(a)
    return n


def is_even(shape: Sequence[int], layout: Layout, mesh: Mesh) -> bool:
    """Whether every split dim of ``shape`` divides into equal blocks."""
    sp, partial, _ = _splits(layout, len(shape))
    _check_axes(mesh, [a for d in sp for a in d] + partial)
    return all(n % _parts(mesh, axes) == 0 for n, axes in zip(shape, sp))


def local_shape(shape: Sequence[int], layout: Layout, mesh: Mesh) -> tuple[int, ...]:
    """The per-rank (padded) block shape: ``ceil(n / parts)`` along each split dim."""
    sp, partial, _ = _splits(layout, len(shape))
    _check_axes(mesh, [a for d in sp for a in d] + partial)
    return tuple(block_size(n, _parts(mesh, axes)) for n, axes in zip(shape, sp))


def block_slices(shape: Sequence[int], layout: Layout, mesh: Mesh, rank: int) -> tuple[slice, ...]:
    """The global index of the valid part of ``rank``'s block."""
    sp, _, _ = _splits(layout, len(shape))
    out = []
    for n, axes in zip(shape, sp):
        b, parts = block_index(mesh, axes, rank)
        out.append(slice(*block_range(n, parts, b)))
    return tuple(out)


def valid_shape(shape: Sequence[int], layout: Layout, mesh: Mesh, rank: int) -> tuple[int, ...]:
    """The shape of the valid (ragged) part of ``rank``'s block."""
    return tuple(s.stop - s.start for s in block_slices(shape, layout, mesh, rank))


def block_index(mesh: Mesh, axes: Sequence[str], rank: int) -> tuple[int, int]:
    """(block number, number of blocks) of ``rank`` along a dim split over ``axes``."""
    c = mesh.coords(rank)
    idx, n = 0, 1
    for a in axes:
        s = mesh.axis_size(a)
        idx = idx * s + c[a]
        n *= s
    return idx, n


def pad_block(block: Any, shape: Sequence[int]) -> Any:
    """``block`` (numpy or torch) extended with zeros at the end of each dim to ``shape``."""
    if tuple(block.shape) == tuple(shape):
        return block
    if isinstance(block, np.ndarray):
        out = np.zeros(tuple(shape), dtype=block.dtype)
    else:
        import torch

        out = torch.zeros(tuple(shape), dtype=block.dtype, device=block.device)
    out[tuple(slice(0, n) for n in block.shape)] = block
    return out


def shard(value: Any, layout: Layout, mesh: Mesh, rank: int, *, padded: bool = True) -> Any:
    """The block of global ``value`` (numpy array or torch tensor) that ``rank`` holds:
    padded with zeros to :func:`local_shape` (default) or, with ``padded=False``, its valid
    part only (see the module docstring on uneven dims).

    For a partial layout the rank at coordinate 0 of every partial axis holds the
    value and the others hold zeros (so a reduction recovers it exactly).
    """
    shape = tuple(value.shape)
    sp, partial, op = _splits(layout, len(shape))
    loc = local_shape(shape, layout, mesh)
    out = value[block_slices(shape, layout, mesh, rank)]
    out = out.copy() if isinstance(out, np.ndarray) else out.clone()
    if padded:
        out = pad_block(out, loc)
    if partial:
        c = mesh.coords(rank)
        if any(c[a] for a in partial):
            if op != "sum":
                raise ShardingError(f"shard: cannot split a value into '{op}' partials")
            out[...] = 0
    return out


def shard_all(value: Any, layout: Layout, mesh: Mesh) -> list[Any]:
    """The blocks of every rank, in rank order."""
    return [shard(value, layout, mesh, r) for r in range(mesh.size)]


def _reduce_ordered(vals: Sequence[np.ndarray], op: str) -> np.ndarray:
    """Rank-ordered left fold: ((v0 op v1) op v2) ..."""
    acc = np.array(vals[0], copy=True)
    for v in vals[1:]:
        if op in ("sum", "mean"):
            acc = acc + v
        elif op == "prod":
            acc = acc * v
        elif op == "max":
            acc = np.maximum(acc, v)
        elif op == "min":
            acc = np.minimum(acc, v)
        else:
            raise ShardingError(f"unknown reduction '{op}'")
    if op == "mean":
        acc = (acc / len(vals)).astype(acc.dtype)
    return acc


def unshard(
    shards: Sequence[Any], layout: Layout, mesh: Mesh, shape: Sequence[int] | None = None
) -> np.ndarray:
    """The global value from every rank's block (``shards[r]`` of rank ``r``).

    Blocks may be padded or ragged. ``shape`` is the global shape; without it, a dim
    is the sum of the blocks' sizes along it (right for ragged and for equal blocks;
    give ``shape`` for padded blocks of an uneven dim).

    Partial layouts are reduced in rank order, the same order as the deterministic
    collectives, so the result is bitwise what ``all_reduce`` would give.
    """
    if len(shards) != mesh.size:
        raise ShardingError(f"unshard: {len(shards)} shards for a mesh of {mesh.size} ranks")
    arrs = [np.asarray(s) for s in shards]
    ndim = arrs[0].ndim
    sp, partial, op = _splits(layout, ndim)
    _check_axes(mesh, [a for d in sp for a in d] + partial)
    if shape is None:
        gshape = []
        for d, axes in enumerate(sp):
            seen: dict[int, int] = {}
            for r in range(mesh.size):
                seen[block_index(mesh, axes, r)[0]] = arrs[r].shape[d]
            gshape.append(sum(seen.values()))
    else:
        gshape = [int(n) for n in shape]
        if len(gshape) != ndim:
            raise ShardingError(f"unshard: shape {tuple(shape)} has rank {len(gshape)}, the "
                                f"blocks {ndim}")
    if partial:
        groups: dict[tuple[int, ...], list[int]] = {}
        for r in range(mesh.size):
            c = mesh.coords(r)
            key = tuple(c[a] for a in mesh.axes if a not in partial)
            groups.setdefault(key, []).append(r)
        reduced = list(arrs)
        for members in groups.values():
            red = _reduce_ordered([arrs[r] for r in members], op)
            for r in members:
                reduced[r] = red
        arrs = reduced
    out = np.empty(gshape, dtype=arrs[0].dtype)
    for r in range(mesh.size):
        idx = block_slices(gshape, layout, mesh, r)
        want = tuple(s.stop - s.start for s in idx)
        if any(h < w for h, w in zip(arrs[r].shape, want)):
            raise ShardingError(
                f"unshard: rank {r} holds a block of shape {tuple(arrs[r].shape)}, but its part "
                f"of the global shape {tuple(gshape)} is {want}"
            )
        out[idx] = arrs[r][tuple(slice(0, w) for w in want)]
    return out
