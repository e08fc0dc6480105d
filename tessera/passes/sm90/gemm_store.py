"""The three ways the sm90 GEMM stores C, after the fused epilogue (``Sm90Gemm.c_store``).

* :class:`TmaStore`: 16-bit results with ``N % 8 == 0`` are staged as the C tensor map's
  swizzled ``64 x 64`` boxes and stored by TMA (``cp.async.bulk.tensor``).
* :func:`staged_store_of` / :func:`staged_tile`: the results TMA does not store (f32
  results, split-K partials, ``N % 8 != 0``) move through a padded shared-memory chunk
  per consumer warpgroup and leave in coalesced row stores
  (:mod:`tessera.passes.sm90.staged_store`, the default).
* :func:`register_store`: the same results stored from the accumulator registers with
  ``st.global``, a pair of the wgmma fragment per store (``Sm90Gemm.store =
  "registers"``, ``CompileOptions.sm90_store``). Same bits as the staged store.

:func:`c_staging_bytes` is the shared memory each takes, after the ring's stages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from xdsl.ir import SSAValue

from tessera.ir import target as tt
from tessera.passes.matmul_config import Sm90Config
from tessera.passes.sm90 import builders, staged_store
from tessera.passes.sm90.asm import TargetAsm
from tessera.passes.sm90.constants import BOX_MN, SWIZZLE_BYTES, WARPGROUP_THREADS, WGMMA_M
from tessera.passes.sm90.epilogue import EpilogueEmitter

if TYPE_CHECKING:
    from tessera.passes.sm90.lower_matmul_sm90 import Sm90Gemm

STORES = ("staged", "registers")
"""How results TMA does not store leave the kernel (``Sm90Gemm.store``,
``CompileOptions.sm90_store``): through shared memory (default) or from registers."""


def c_staging_bytes(cfg: Sm90Config, c_store: str, out_type: str) -> int:
    """Shared memory the output store of ``c_store`` (``Sm90Gemm.c_store``) stages through:
    the TMA store's ``BM x BN`` 16-bit tile, the staged store's ``BM`` rows of one chunk,
    or nothing."""
    if c_store == "tma":
        return cfg.epilogue_bytes()
    if c_store == "staged":
        return staged_store.staged_bytes(cfg.consumers, staged_store.STORE_TYPES[out_type])
    return 0


def staged_store_of(
    e: TargetAsm, gemm: Sm90Gemm, c_param: SSAValue, sbase: SSAValue, tid: SSAValue,
    cw: SSAValue,
) -> staged_store.StagedStore:
    """The staged store of consumer warpgroup ``cw``: its buffer follows the stages (where
    the TMA store's tile would be), one per consumer warpgroup."""
    esize = staged_store.STORE_TYPES[gemm.out_type]
    bm, bn = gemm.bm, gemm.cfg.bn
    shape = staged_store.StoreShape(
        gemm.out_type, gemm.m, gemm.n, gemm.n, bn,
        ragged_rows=gemm.m % bm != 0, ragged_cols=gemm.n % bn != 0,
    )
    buf = e.mad32(cw, staged_store.staged_bytes(1, esize), e.add32(sbase, gemm.c_offset))
    t = e.bin(tt.AndOp, "b32", tid, WARPGROUP_THREADS - 1)
    return staged_store.StagedStore(
        e, shape, buf, t, lambda: staged_store.warpgroup_sync(e, cw, gemm.cfg.consumers),
        builders.global_pointer(e, c_param),
    )


def staged_tile(
    e: TargetAsm, store: staged_store.StagedStore, tid: SSAValue, cw: SSAValue, m0: SSAValue,
    n0: SSAValue, acc: Sequence[SSAValue], fused: EpilogueEmitter | None = None,
    c_rows: SSAValue | None = None,
) -> None:
    """Consumer warpgroup ``cw``'s slice of the tile at ``(m0, n0)`` through ``store``:
    the fused epilogue's values (``fused``: its own view of the fragment) converted to the
    result type; ``c_rows`` rows further down C (a split-K range's partials)."""
    if fused is not None:
        _, warp, lane = builders.fragment_lanes(e, tid)
        fused.tile(builders.fragment_row(e, m0, cw, warp, lane),
                   e.add32(n0, builders.fragment_col(e, lane)))

    def pair(j: int, h: int) -> tuple[SSAValue, SSAValue]:
        lo, hi = acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]
        return fused.pair(j, h, lo, hi) if fused is not None else (lo, hi)

    store.tile(e.mad32(cw, WGMMA_M, m0), n0, pair, c_rows)


class TmaStore:
    """The TMA-store epilogue of one consumer warpgroup.

    The warpgroup's ``64 x BN`` slice of the output tile is staged in shared memory as
    ``BN / 64`` boxes of ``64 x 64`` 16-bit elements in the 128-byte swizzled layout of
    the C tensor map (16-byte chunk ``k`` of row ``r`` at chunk ``k ^ (r % 8)``): each
    thread's ``st.shared.b32`` of two packed elements then hits a distinct bank. One
    thread stores the boxes with ``cp.async.bulk.tensor`` (clipped at the tensor's
    edges) and the warpgroup goes on to its next tile while they drain; before the
    staging area is written again, ``cp.async.bulk.wait_group.read`` and a named
    barrier of the warpgroup make sure the previous stores have read it.
    """

    BOX_BYTES = BOX_MN * BOX_MN * 2

    def __init__(
        self, e: TargetAsm, gemm: Sm90Gemm, c_param: SSAValue, sbase: SSAValue, tid: SSAValue,
        cw: SSAValue, leader: SSAValue, fused: EpilogueEmitter | None = None,
    ) -> None:
        self.e, self.gemm, self.cw, self.leader, self.fused = e, gemm, cw, leader, fused
        self.tmap = builders.tensor_map(e, c_param)
        _, warp, lane = builders.fragment_lanes(e, tid)
        row = e.add32(e.mul32(warp, 16), e.bin(tt.ShrOp, "u32", lane, 2))  # r (h = 0)
        self.row, self.col = row, e.mul32(e.bin(tt.AndOp, "b32", lane, 3), 2)
        swz = e.bin(tt.ShrOp, "u32", lane, 2)  # r % 8
        # this warpgroup's staging area, then the thread's row and its 4-byte column pair
        self.base = e.add32(sbase, gemm.c_offset)
        self.slice = e.mad32(cw, gemm.bm // gemm.cfg.consumers * gemm.cfg.bn * 2, self.base)
        rowbase = e.mad32(row, SWIZZLE_BYTES, e.mad32(e.bin(tt.AndOp, "b32", lane, 3), 4,
                                                      self.slice))
        # address of 16-byte chunk k (k = 0..7) of the thread's row, swizzled
        self.chunk = [e.mad32(e.bin(tt.XorOp, "b32", swz, k), 16, rowbase) for k in range(8)]

    def tile(self, m0: SSAValue, n0: SSAValue, acc: Sequence[SSAValue]) -> None:
        """Stage the accumulators of the tile at (m0, n0) and start its TMA stores."""
        e, gemm = self.e, self.gemm
        fused = self.fused
        if fused is not None:
            fused.tile(e.add32(e.mad32(self.cw, 64, m0), self.row), e.add32(n0, self.col))
        e.add(tt.BulkWaitOp(0, read=True))  # the previous tile's stores have read the area
        self._sync()
        for j in range(gemm.cfg.bn // 8):
            box, k = divmod(j, 8)
            for h in (0, 1):
                lo, hi = acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]
                if fused is not None:
                    lo, hi = fused.pair(j, h, lo, hi)
                packed = builders.pack_pair(e, lo, hi, gemm.out_type)
                offset = box * self.BOX_BYTES + h * 8 * SWIZZLE_BYTES
                e.add(tt.StOp("shared.b32", self.chunk[k], [packed], offset))
        e.add(tt.FenceOp("proxy_async"))  # the writes are visible to the TMA unit
        self._sync()
        row = e.mad32(self.cw, 64, m0)
        for box in range(gemm.cfg.bn // BOX_MN):
            src = e.add32(self.slice, box * self.BOX_BYTES) if box else self.slice
            col = e.add32(n0, box * BOX_MN) if box else n0
            e.add(tt.CpAsyncBulkTensorStoreOp(self.tmap, col, row, src, guard=self.leader))
        e.add(tt.FenceOp("bulk_commit"))

    def _sync(self) -> None:
        """A barrier of this warpgroup's 128 threads (named barrier 1 + warpgroup index)."""
        staged_store.warpgroup_sync(self.e, self.cw, self.gemm.cfg.consumers)


def register_store(
    e: TargetAsm, gemm: Sm90Gemm, c_param: SSAValue, tid: SSAValue, cw: SSAValue, m0: SSAValue,
    n0: SSAValue, acc: Sequence[SSAValue], fused: EpilogueEmitter | None = None,
    c_rows: SSAValue | None = None,
) -> None:
    """Store the wgmma D fragment (after the fused epilogue, converted to the result type),
    masked when ragged; ``c_rows`` rows further down C (a split-K range's partials)."""
    esize = 4 if gemm.out_type == "f32" else 2
    _, warp, lane = builders.fragment_lanes(e, tid)
    row0 = builders.fragment_row(e, m0, cw, warp, lane)
    col0 = e.add32(n0, builders.fragment_col(e, lane))
    if fused is not None:
        fused.tile(row0, col0)
    ptr = builders.global_pointer(e, c_param)
    if c_rows is not None:
        builders.advance_pointer(e, ptr, c_rows, gemm.n * esize)
    builders.advance_pointer(e, ptr, row0, gemm.n * esize)
    builders.advance_pointer(e, ptr, col0, esize)
    bn = gemm.cfg.bn
    ragged_m, ragged_n = gemm.m % gemm.bm != 0, gemm.n % bn != 0
    rows = [e.setp("lt", e.add32(row0, 8 * h), gemm.m) if ragged_m else None for h in (0, 1)]
    cols = [e.setp("lt", e.add32(col0, 8 * j), gemm.n) if ragged_n else None for j in range(bn // 8)]
    # odd N: a pair is only element-aligned and its second column may be the first past N
    split = gemm.n % 2 == 1
    cols_hi = [e.setp("lt", e.add32(col0, 8 * j + 1), gemm.n) if split else None
               for j in range(bn // 8)]
    for j in range(bn // 8):
        for h in (0, 1):
            lo, hi = acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]
            if fused is not None:
                lo, hi = fused.pair(j, h, lo, hi)
            guard = _both(e, rows[h], cols[j])
            guard_hi = _both(e, rows[h], cols_hi[j]) if split else None
            offset = (8 * h * gemm.n + 8 * j) * esize
            builders.store_pair(e, ptr, lo, hi, gemm.out_type, offset, guard, guard_hi, split)


def _both(e: TargetAsm, a: SSAValue | None, b: SSAValue | None) -> SSAValue | None:
    if a is None or b is None:
        return a if b is None else b
    p = e.reg("pred")
    e.add(tt.AndOp("pred", p, a, b))
    return p
