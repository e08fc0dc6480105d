"""``dist.tensor``: a tensor laid out over a mesh, holding only this rank's shard.

A :class:`DistTensor` always knows its global shape, layout, mesh and dtype.
Its storage depends on where it lives:

* In a process of an initialized process group whose world matches the mesh,
  ``.local`` is this rank's block: the block of ``data`` if one was given, else
  zeros allocated on first access (so describing a 10^12-element weight costs
  nothing until a rank touches its shard).
* In a single process without a process group, a DistTensor is a *description*.
  ``.local`` raises; ``.shard(rank)`` and ``.shards()`` give any rank's block (of
  ``data``, or zeros), so one process can prepare every rank's input, and
  ``.numpy()`` gives the global value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tessera.dist.mesh import Mesh
from tessera.dist.sharding import (
    ShardingError,
    ShardSpec,
    local_shape,
    pad_block,
    shard,
    unshard,
)
from tessera.ir.dtypes import DType, dtype_of


class DistTensor:
    """A global tensor of ``shape`` split over ``mesh`` as ``layout`` says."""

    def __init__(
        self,
        shape: Sequence[int],
        layout: ShardSpec,
        mesh: Mesh,
        dtype: DType,
        data: np.ndarray | None = None,
        local: np.ndarray | None = None,
    ):
        self.shape = tuple(int(s) for s in shape)
        self.layout = layout
        self.mesh = mesh
        self.dtype = dtype
        self.local_shape = local_shape(self.shape, layout, mesh)
        if data is not None and tuple(data.shape) != self.shape:
            raise ShardingError(
                f"dist.tensor: data has shape {tuple(data.shape)}, expected {self.shape}"
            )
        if local is not None and tuple(local.shape) != self.local_shape:
            raise ShardingError(
                f"dist.tensor: local block has shape {tuple(local.shape)}, expected "
                f"{self.local_shape} (global {self.shape} with {layout})"
            )
        self._data = None if data is None else np.asarray(data, dtype=dtype.np_dtype)
        self._local = local

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the global tensor (never allocated as a whole on a rank)."""
        return math.prod(self.shape) * self.dtype.np_dtype.itemsize

    def _zeros(self) -> np.ndarray:
        return np.zeros(self.local_shape, dtype=self.dtype.np_dtype)

    def shard(self, rank: int) -> np.ndarray:
        """The block that ``rank`` holds (of ``data``, or zeros)."""
        if self._data is not None:
            return shard(self._data, self.layout, self.mesh, rank)
        return self._zeros()

    def shards(self) -> list[np.ndarray]:
        """Every rank's block, in rank order."""
        return [self.shard(r) for r in range(self.mesh.size)]

    @property
    def local(self) -> np.ndarray:
        """This rank's block (needs a process group matching the mesh)."""
        if self._local is None:
            if not self.mesh.is_initialized():
                raise ShardingError(
                    "dist.tensor: no torch.distributed process group, so there is no local "
                    f"shard; this tensor is a description of {self.shape} over {self.mesh!r} "
                    "(use .shard(rank) or .shards())"
                )
            self._local = self.shard(self.mesh.check_world())
        return self._local

    def numpy(self) -> np.ndarray:
        """The global value: ``data`` if held, else gathered from every rank's block."""
        if self._data is not None:
            return self._data.copy()
        if not self.mesh.is_initialized():
            return np.zeros(self.shape, dtype=self.dtype.np_dtype)
        from tessera.dist.collectives import all_gather

        mine = self.local
        sp = self.layout.splits(self.ndim)
        blocks = mine
        for d in range(self.ndim):
            for a in reversed(sp[d]):
                blocks = all_gather(blocks, a, d, mesh=self.mesh)
        if self.layout.partial:
            from tessera.dist.collectives import all_reduce

            for a in self.layout.partial:
                blocks = all_reduce(blocks, self.layout.partial_op, a, mesh=self.mesh)
        return blocks[tuple(slice(0, n) for n in self.shape)]  # padding lies at the tail

    @property
    def valid_local(self) -> np.ndarray:
        """This rank's block without the padding of uneven dims (the ragged block)."""
        from tessera.dist.sharding import valid_shape

        want = valid_shape(self.shape, self.layout, self.mesh, self.mesh.check_world())
        return self.local[tuple(slice(0, n) for n in want)]

    def __repr__(self) -> str:
        return (
            f"DistTensor(shape={self.shape}, dtype={self.dtype}, layout={self.layout}, "
            f"mesh={self.mesh!r}, local_shape={self.local_shape})"
        )


def tensor(
    shape: Sequence[int],
    layout: ShardSpec | None = None,
    mesh: Mesh | None = None,
    dtype: Any = "f32",
    *,
    data: Any = None,
) -> DistTensor:
    """``dist.tensor(shape=..., layout=ShardSpec(...), mesh=mesh, dtype="bf16")``.

    ``data`` (a global numpy array or torch tensor) gives the values; without it the
    blocks are zeros. ``layout`` defaults to replicated.
    """
    if mesh is None:
        from tessera.dist.mesh import current_mesh

        mesh = current_mesh()
        if mesh is None:
            raise ShardingError("dist.tensor: needs a mesh (mesh=..., or inside `with mesh:`)")
    dt = dtype_of(dtype, where="dist.tensor")
    if data is not None and not isinstance(data, np.ndarray):
        data = data.detach().cpu().numpy() if hasattr(data, "detach") else np.asarray(data)
    return DistTensor(shape, layout or ShardSpec(), mesh, dt, data=data)


def from_local(
    local: Any, shape: Sequence[int], layout: ShardSpec, mesh: Mesh, dtype: Any = None
) -> DistTensor:
    """Wrap this rank's block ``local`` of a global tensor of ``shape`` (padded, or the
    valid part of an uneven block, which is padded with zeros)."""
    if not isinstance(local, np.ndarray):
        local = local.detach().cpu().numpy() if hasattr(local, "detach") else np.asarray(local)
    dt = dtype_of(dtype if dtype is not None else local.dtype, where="dist.from_local")
    want = local_shape(shape, layout, mesh)
    if local.ndim == len(want) and all(h <= w for h, w in zip(local.shape, want)):
        local = pad_block(local, want)
    return DistTensor(shape, layout, mesh, dt, local=local)


def from_shards(
    shards: Sequence[np.ndarray], layout: ShardSpec, mesh: Mesh, shape: Sequence[int] | None = None
) -> DistTensor:
    """A single-process DistTensor from every rank's block (``shape`` for padded blocks of
    uneven dims, see :func:`tessera.dist.sharding.unshard`)."""
    g = unshard(shards, layout, mesh, shape)
    if layout.partial:
        layout = ShardSpec(partition=layout.partition, mesh_axes=layout.mesh_axes)
    return DistTensor(g.shape, layout, mesh, dtype_of(g.dtype), data=g)
