"""The guide's "Basic Tile Operations" kernel: double every element in place.

``ts.Tensor[...]`` arguments are writable (the guide writes ``data[tile_id] *= 2.0``).
"""

import numpy as np

import tessera as ts


@ts.kernel
def tile_example(data: ts.Tensor["N", ts.f32]):  # noqa: F821
    # Get tile identification
    tile_id = ts.tile.linear_id()
    group_id = ts.tile.group_id()  # noqa: F841
    lane_id = ts.tile.lane_id()  # noqa: F841

    # Tile-level operations
    if tile_id < N:  # noqa: F821
        # Each tile processes one element
        data[tile_id] *= 2.0


def reference(data: np.ndarray) -> np.ndarray:
    return data * np.float32(2.0)


if __name__ == "__main__":
    d = np.random.default_rng(0).standard_normal(333).astype(np.float32)
    want = reference(d)
    tile_example(d)
    print("max error:", float(np.abs(d - want).max()))
