"""The guide's "Tile Groups and Synchronization" kernel: a tile-level sum.

A kernel annotated ``-> ts.f32`` returns lane 0's value of each tile (through
a hidden output buffer); value-returning kernels run one tile by default, so
``cooperative_reduction(data)`` is the sum of ``data``.
"""

import numpy as np

import tessera as ts


@ts.kernel
def cooperative_reduction(data: ts.Tensor["N", ts.f32]) -> ts.f32:  # noqa: F821
    # Allocate shared memory for tile group
    shared_sum = ts.tile.alloc_shared((128,), ts.f32)

    # Each tile computes partial sum
    tile_id = ts.tile.linear_id()
    local_sum = 0.0

    for i in ts.tile.range(tile_id, N, ts.tile.group_size()):  # noqa: F821
        local_sum += data[i]

    # Store to shared memory
    shared_sum[ts.tile.local_id()] = local_sum

    # Synchronize tile group
    ts.tile.barrier()

    # Cooperative reduction
    stride = ts.tile.group_size() // 2
    while stride > 0:
        if ts.tile.local_id() < stride:
            shared_sum[ts.tile.local_id()] += shared_sum[ts.tile.local_id() + stride]
        ts.tile.barrier()
        stride //= 2

    return shared_sum[0]


def reference(data: np.ndarray) -> float:
    return float(np.sum(data, dtype=np.float64))
