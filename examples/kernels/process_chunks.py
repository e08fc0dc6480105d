"""The guide's "Tile Ranges and Iteration" kernel.

The guide leaves ``process`` undefined; here it is a plain Python helper,
which the kernel compiler inlines from its source (``@ts.kernel.func`` marks
it as meant for kernels). ``ts.tile.range`` shares its iterations out
(tessera/frontend/kernel_worksharing.py): the chunk loop goes round the tiles
of the grid and each chunk's elements round the lanes of its tile, so every
output element is computed once.
"""

import numpy as np

import tessera as ts


@ts.kernel.func
def process(v):
    return v * v + 0.5 * v - 1.0


@ts.kernel
def process_chunks(input: ts.Tensor["N", ts.f32],  # noqa: A002, F821
                   output: ts.Tensor["N", ts.f32]):  # noqa: F821
    # Process data in chunks
    CHUNK_SIZE = 128

    for chunk_start in ts.tile.range(0, N, CHUNK_SIZE):  # noqa: F821
        # Each tile group processes a chunk
        chunk_end = min(chunk_start + CHUNK_SIZE, N)  # noqa: F821

        # Cooperative processing within tile group
        for i in ts.tile.range(chunk_start, chunk_end):
            output[i] = process(input[i])


def reference(x: np.ndarray) -> np.ndarray:
    return (x * x + np.float32(0.5) * x - np.float32(1.0)).astype(np.float32)
