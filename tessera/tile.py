"""``ts.tile``: the builtins of tile kernels (``@ts.kernel``), as named in the guide.

Everything here is meaningful only inside a kernel body, which the front end
compiles to Tile IR (see docs/KERNELS.md); called from plain Python these
raise an error. Both spellings of the guide work::

    import tessera as ts                       from tessera import kernel, tile, tshared
    i = ts.tile.linear_id()                    i = tile.linear_id()
    ts.tile.barrier()                          tbarrier()
    ts.tile.cp_async(smem, A[0:64, k:k+32])    cp_async.shared.global_(smem, A[0:64, k:k+32])
"""

from __future__ import annotations

from tessera.frontend.kernel_intrinsics import Intrinsic
from tessera.frontend.kernel_signature import mut

# Lane and tile coordinates (index values).
linear_id = Intrinsic("linear_id", "tile_id * group_size + local_id: the lane's global index")
group_id = Intrinsic("group_id", "this tile's index in the grid (CUDA blockIdx.x)")
tile_id = Intrinsic("tile_id", "same as group_id")
num_groups = Intrinsic("num_groups", "number of tiles in the grid (CUDA gridDim.x)")
local_id = Intrinsic("local_id", "the lane's index in its tile, 0 <= local_id < group_size")
lane_id = Intrinsic("lane_id", "the lane's index in its warp, local_id % 32")
warp_id = Intrinsic("warp_id", "the warp's index in the tile, local_id // 32")
group_size = Intrinsic("group_size", "lanes per tile (a compile-time int)")

# Loops.
range = Intrinsic("range", "range(start, stop, step, prefetch=n): a loop run by each lane")  # noqa: A001

# Memory.
alloc_shared = Intrinsic("alloc_shared", "alloc_shared(shape, dtype, swizzle=, alignment=)")
alloc_register = Intrinsic("alloc_register", "alloc_register(dtype): a lane-local zero")
load = Intrinsic("load", "load(ref, index=i, mask=m, other=0): one element")
store = Intrinsic("store", "store(ref, index=i, value=v, mask=m): one element")
load_vector = Intrinsic("load_vector", "load_vector(ref[...], width=W): W elements")
store_vector = Intrinsic("store_vector", "store_vector(ref[...], vec)")
cp_async = Intrinsic(
    "cp_async",
    "cp_async(dst_shared, src_window): global -> shared copy shared by the tile's lanes",
    aliases={"shared": "cp_async", "global_": "cp_async", "global": "cp_async"},
)
cp_commit_group = Intrinsic("cp_commit_group", "close the pending async copies into a group")
cp_wait_group = Intrinsic("cp_wait_group", "cp_wait_group(n): at most n groups pending")

# Synchronisation and cross-lane operations.
barrier = Intrinsic("barrier", "all lanes of the tile arrive; shared writes become visible")
shuffle_xor = Intrinsic("shuffle_xor", "shuffle_xor(v, offset): value of lane lane_id ^ offset")
reduce = Intrinsic("reduce", "reduce(v, kind='sum', scope='group'|'warp')")
mma = Intrinsic("mma", "mma(a, b, accum=f32): the product of two windows, C += mma(a, b)")

# Math on scalars.
exp = Intrinsic("exp")
log = Intrinsic("log")
sqrt = Intrinsic("sqrt")
rsqrt = Intrinsic("rsqrt")
tanh = Intrinsic("tanh")
sin = Intrinsic("sin")
cos = Intrinsic("cos")
erf = Intrinsic("erf")
floor = Intrinsic("floor")
ceil = Intrinsic("ceil")
where = Intrinsic("where", "where(cond, a, b): a where cond else b (both evaluated)")
cast = Intrinsic("cast", "cast(x, dtype)")


class _SharedNamespace:
    """``tshared``: ``tshared.alloc[f16](BM, BK, swizzle="xor")`` or ``tshared.alloc(shape, dtype)``."""

    alloc = Intrinsic("shared_alloc", "tshared.alloc[dtype](*shape, swizzle=, alignment=)")


tshared = _SharedNamespace()
tbarrier = barrier

__all__ = [
    "alloc_register", "alloc_shared", "barrier", "cast", "ceil", "cos", "cp_async",
    "cp_commit_group", "cp_wait_group", "erf", "exp", "floor", "group_id", "group_size",
    "lane_id", "linear_id", "load", "load_vector", "local_id", "log", "mma", "mut",
    "num_groups", "range", "reduce", "rsqrt", "shuffle_xor", "sin", "sqrt", "store",
    "store_vector", "tanh", "tbarrier", "tile_id", "tshared", "warp_id", "where",
]
