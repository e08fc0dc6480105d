"""The named numbers of the warpgroup-specialized Hopper kernels."""

from __future__ import annotations

from dataclasses import dataclass

WARPGROUP_THREADS = 128
"""Threads of a warpgroup: four warps issue one ``wgmma`` together."""
WARPGROUP_SHIFT = 7
"""``tid >> WARPGROUP_SHIFT`` is the thread's warpgroup (warpgroup 0 produces)."""
WARP_SHIFT = 5
"""``t >> WARP_SHIFT`` is the warp of thread ``t`` within its warpgroup."""
LANE_MASK = 31
"""``t & LANE_MASK`` is the thread's lane within its warp."""
WGMMA_M = 64
"""Rows of a ``wgmma`` tile: each consumer warpgroup owns 64 rows of the output."""
BOX_MN = 64
"""Rows of M or N per TMA box of the GEMM (and the width of an MN-major box)."""
WGMMA_K = 16
"""K of one 16-bit ``wgmma`` (``m64nNk16``)."""
ELEM_BYTES = 2
"""Bytes of a bf16/f16 element: the operands of both kernels (the wgmma descriptors,
TMA boxes and swizzle rows assume 16-bit elements)."""
SMEM_ALIGN = 1024
"""Alignment of the dynamic shared-memory base: a 128-byte-swizzle atom (8 rows of 128
bytes) must start on a 1024-byte boundary for TMA and the wgmma descriptors."""
SWIZZLE_BYTES = 128
"""The shared-memory swizzle of every operand tile (TMA ``SWIZZLE_128B`` and the
wgmma descriptors' layout type 1)."""
MBARRIER_BYTES = 8
"""Size of one shared-memory mbarrier."""
DESC_SWIZZLE_128 = 1 << 62
"""The layout-type field of a wgmma shared-memory descriptor for the 128-byte swizzle."""


@dataclass(frozen=True)
class RegisterBudget:
    """Per-thread registers after ``setmaxnreg``: the producer warpgroup gives registers
    up (``dec``), the consumer warpgroups take them (``inc``)."""

    producer: int
    consumer: int


GEMM_REGISTERS = RegisterBudget(producer=40, consumer=232)
"""The GEMM: one producer and up to two consumer warpgroups holding N/2 accumulators."""
ATTENTION_REGISTERS = RegisterBudget(producer=24, consumer=240)
"""Flash attention: two consumer warpgroups holding S, O and P fragments."""


def desc_hi(lbo: int, sbo: int) -> int:
    """The constant fields of a wgmma shared-memory descriptor (all but the start
    address): leading and stride byte offsets and the 128-byte swizzle."""
    return ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32 | DESC_SWIZZLE_128
