"""Distributed Tessera: meshes, shard specifications, sharded tensors, collectives.

::

    from tessera import dist
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(4)], axes=("dp", "tp"), shape=(2, 2))
    W = dist.tensor((8192, 8192), layout=dist.ShardSpec(partition=("col",), mesh_axes=("tp",)),
                    mesh=mesh, dtype="bf16")

A mesh is a description until a collective runs; then it creates one
torch.distributed process group per axis (NCCL for CUDA, gloo for CPU).
Collectives are deterministic (fixed, rank-ordered reduction) unless asked
otherwise. :mod:`tessera.dist.executor` runs a Graph IR program per rank.
See docs/DISTRIBUTED.md.
"""

from tessera.dist.collectives import (
    CollectiveError,
    all_gather,
    all_reduce,
    all_slice,
    all_to_all,
    ordered_reduce,
    rank_ordered_reduce,
    recv,
    reduce_scatter,
    reduction_order,
    send,
)
from tessera.dist.mesh import (
    GPUUnavailableError,
    Mesh,
    MeshError,
    current_mesh,
    init,
    mesh,
    use_mesh,
)
from tessera.dist.sharding import (
    ShardingError,
    ShardSpec,
    local_shape,
    shard,
    shard_all,
    unshard,
)
from tessera.dist.tensor import DistTensor, from_local, from_shards, tensor
from tessera.dist.topology import ORDERS, ReductionOrder, Topology, choose_order

__all__ = [
    "CollectiveError", "DistTensor", "GPUUnavailableError", "Mesh", "MeshError", "ShardSpec",
    "ShardingError",
    "all_gather", "all_reduce", "all_slice", "all_to_all", "current_mesh", "from_local",
    "from_shards", "init", "local_shape", "mesh", "rank_ordered_reduce", "recv",
    "ORDERS", "ReductionOrder", "Topology", "choose_order", "ordered_reduce", "reduction_order",
    "reduce_scatter", "send", "shard", "shard_all", "tensor", "unshard", "use_mesh",
]
