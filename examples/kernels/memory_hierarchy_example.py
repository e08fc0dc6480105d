"""The guide's "Memory Hierarchy Operations" kernel.

Changes from the guide, so that the kernel compiles and its effect can be
checked: the guide uses ``i``, ``j``, ``block_m`` and ``block_n`` without
defining them, so they are scalar arguments here; and the guide's kernel has no
output, so ``out`` (the 64 x 64 block copied to shared memory) and ``probe``
(the register and the global value) are written at the end.

``cp_async`` copies a 64 x 64 window of ``A`` into shared memory, the tile's
lanes sharing the work: 16-byte ``cp.async`` chunks when the rows allow it
(checked at run time), element copies otherwise; rows or columns past the end
of ``A`` read as zeros.
"""

import numpy as np

import tessera as ts


@ts.kernel
def memory_hierarchy_example(A: ts.Tensor["M", "N", ts.f32],  # noqa: F821
                             i: int, j: int, block_m: int, block_n: int,
                             out: ts.Tensor[64, 64, ts.f32],
                             probe: ts.Tensor[2, ts.f32]):
    # 1. Register allocation (tile-local)
    reg_value = ts.tile.alloc_register(ts.f32)

    # 2. Shared memory allocation (group-local)
    shared_tile = ts.tile.alloc_shared((64, 64), ts.f32, swizzle="xor")

    # 3. Global memory access
    global_value = A[i, j]

    # 4. Async memory operations
    ts.tile.cp_async(shared_tile, A[block_m:block_m+64, block_n:block_n+64])
    ts.tile.cp_commit_group()
    ts.tile.cp_wait_group(0)

    # Added: make the results visible.
    ts.tile.barrier()
    for e in ts.tile.range(ts.tile.local_id(), 64 * 64, ts.tile.group_size()):
        out[e // 64, e % 64] = shared_tile[e // 64, e % 64]
    if ts.tile.local_id() == 0:
        probe[0] = reg_value + 1.0
        probe[1] = global_value


def reference(A: np.ndarray, i: int, j: int, block_m: int, block_n: int):
    block = np.zeros((64, 64), np.float32)
    part = A[block_m:block_m + 64, block_n:block_n + 64]
    block[: part.shape[0], : part.shape[1]] = part
    return block, np.array([1.0, A[i, j]], np.float32)
