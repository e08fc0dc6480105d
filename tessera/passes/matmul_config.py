"""Tile shapes for the sm90 (TMA + wgmma) matmul: the heuristic and tuned configs.

**Heuristic** (:func:`heuristic`, used when tuning is off and the matmul has no
usable ``tile_shape``):

* ``BM = 128`` (two consumer warpgroups of 64 rows each) unless ``M <= 64``,
  then ``BM = 64`` (one consumer warpgroup).
* ``BN`` of 256 or 128, whichever needs the fewest waves of tiles over the SMs
  (:data:`NUM_SMS`) weighted by the tile's measured speed (:data:`BN_SPEED`; 128 when
  ``N <= 128``, 64 when ``N <= 64``). Wider tiles reuse each A box over more columns
  (fewer bytes per FLOP); narrower ones keep small problems spread over the SMs.
* ``cluster = 2`` (CTA pairs multicasting B) when M or N is ragged and the tile rows
  pair up: measured 1.0-1.4x faster there, 0.98x on square multiples of the tile.
* ``BK = 64``: one 128-byte swizzle row of bf16/f16 per stage (the TMA box and
  the wgmma descriptors share the 128-byte swizzle).
* ``stages``: as many as fit in :data:`SMEM_BUDGET` next to the ``BM x BN`` output
  tile that the TMA-store epilogue stages in shared memory, at most 5 and at least 3.
  With ``N % 8 != 0`` (no 16-byte rows of C: a vocabulary of 50257) the kernel stores
  from registers with ``st.global`` and stages no output tile, so more stages fit
  (``BN = 256``: 4 instead of 3).
* warps: 4 per warpgroup, ``1 + BM/64`` warpgroups (one producer).
* ``group_m = 8``: CTAs walk the output in groups of 8 tile rows so that the B
  panel of a group stays in L2.

**Tuned configs** come from the autotuner (:mod:`tessera.tuning.sm90`), which
times every config of :func:`search_space` on the GPU and records the winner per
device and shape. The compiler passes the current device's winners to the
lowering as ``lower-graph-to-tile``'s ``sm90_tiles`` option
(``CompileOptions.sm90_tiles``); :func:`sm90_config` takes the one of the shape
when it is a config of :func:`search_space`, and the heuristic otherwise. This
module does no I/O and reads no environment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tessera.passes.tile_builder import cdiv

NUM_SMS = 132
"""SMs of an H100 SXM / H200 (the heuristic's occupancy target)."""
SMEM_BUDGET = 220 * 1024
"""Shared memory the stages may use (227 KiB per block on sm_90, minus barriers and slack)."""


@dataclass(frozen=True)
class Sm90Config:
    """A tile configuration: ``BM = 64 * consumers``, ``BN``, ``stages`` (``BK`` is 64)."""

    bn: int = 256
    stages: int = 4
    consumers: int = 2
    group_m: int = 8
    cluster: int = 1
    """CTAs per cluster along M (1 or 2): a pair of CTAs computing vertically adjacent
    tiles each load half of the shared B boxes and multicast them to both."""

    @property
    def bm(self) -> int:
        return 64 * self.consumers

    def stage_bytes(self) -> int:
        """One stage: a 128-byte row of K (64 16-bit, 32 f32 elements) per row of A and B."""
        return (self.bm + self.bn) * 64 * 2

    def epilogue_bytes(self) -> int:
        """The output tile staged in shared memory for the TMA-store epilogue (16-bit)."""
        return self.bm * self.bn * 2

    def smem_bytes(self, copies: int = 1, staging: bool = True) -> int:
        """Shared memory of the stages (``copies`` of each operand: 2 for 3xTF32's hi and
        lo) and, with ``staging``, the output tile (f32 results are stored from
        registers)."""
        return self.stages * self.stage_bytes() * copies + staging * self.epilogue_bytes()

    def valid(self, copies: int = 1, staging: bool = True) -> bool:
        return (
            self.bn in (64, 128, 192, 256) and self.consumers in (1, 2)
            and 2 <= self.stages <= 8 and self.smem_bytes(copies, staging) <= SMEM_BUDGET
            and self.group_m >= 1 and self.cluster in (1, 2)
            and (self.bn // 64) % self.cluster == 0
        )

    @staticmethod
    def from_tile_shape(shape: tuple[int, ...]) -> Sm90Config | None:
        """The config for a ``tile_shape = [BM, BN, BK]`` hint, None if sm90 cannot use it."""
        if len(shape) != 3:
            return None
        bm, bn, bk = shape
        if bk != 64 or bm not in (64, 128):
            return None
        cfg = Sm90Config(bn=bn, consumers=bm // 64, stages=3)
        room = SMEM_BUDGET - cfg.epilogue_bytes()
        best = max((s for s in range(3, 6) if s * cfg.stage_bytes() <= room), default=None)
        if best is None:
            return None
        cfg = Sm90Config(bn=bn, consumers=bm // 64, stages=best)
        return cfg if cfg.valid() else None


BN_SPEED = {64: 0.85, 128: 0.93, 256: 1.0}
"""Throughput of a ``128 x BN`` tile relative to ``128 x 256`` (H100/H200 sweeps:
docs/PERFORMANCE.md)."""


def heuristic(m: int, n: int, k: int) -> Sm90Config:
    """The documented default (module docstring)."""
    consumers = 1 if m <= 64 else 2
    bm = 64 * consumers
    rows = cdiv(m, bm)
    if n <= 64:
        bn = 64
    else:
        # fewest waves of tiles over the SMs, weighted by the tile's speed
        def cost(bn: int) -> float:
            waves = cdiv(rows * cdiv(n, bn), NUM_SMS)
            return waves * bn / BN_SPEED[bn]

        bn = min((256, 128), key=cost) if n > 128 else 128
    stage = (bm + bn) * 64 * 2
    staging = bm * bn * 2 if n % 8 == 0 else 0  # no TMA-store tile for rows of C not 16 B
    stages = max(3, min(5, (SMEM_BUDGET - staging) // stage))
    # ragged shapes: CTA pairs sharing B (multicast) measured up to 1.4x faster
    ragged = m % bm != 0 or n % bn != 0
    cluster = 2 if consumers == 2 and ragged and rows % 2 == 0 and (bn // 64) % 2 == 0 else 1
    return Sm90Config(bn=bn, stages=stages, consumers=consumers, cluster=cluster)


def search_space(m: int, n: int, k: int) -> list[Sm90Config]:
    """The configs the autotuner tries (small: BN x stages x consumers that fit)."""
    out = []
    for consumers in ((1,) if m <= 64 else (2, 1)):
        for cluster in ((1, 2) if consumers == 2 else (1,)):
            for bn in (128, 256):
                for stages in (3, 4, 5):
                    c = Sm90Config(bn=bn, stages=stages, consumers=consumers, cluster=cluster)
                    if c.valid():
                        out.append(c)
    h = heuristic(m, n, k)
    return [h, *[c for c in out if c != h]]


# --------------------------------------------------------------------------- tuned configs


def shape_key(m: int, n: int, k: int, in_type: str, out_type: str) -> str:
    """The key of one matmul shape in a tile table: ``"MxNxK:in->out"``."""
    return f"{m}x{n}x{k}:{in_type}->{out_type}"


def as_numbers(cfg: Sm90Config) -> tuple[int, int, int, int, int]:
    """``cfg`` as ``(bn, stages, consumers, group_m, cluster)``."""
    return (cfg.bn, cfg.stages, cfg.consumers, cfg.group_m, cfg.cluster)


def from_numbers(numbers: Sequence[int]) -> Sm90Config | None:
    """The config of ``(bn, stages, consumers, group_m, cluster)``; None if not valid."""
    if len(numbers) != 5:
        return None
    bn, stages, consumers, group_m, cluster = (int(x) for x in numbers)
    cfg = Sm90Config(bn=bn, stages=stages, consumers=consumers, group_m=group_m, cluster=cluster)
    return cfg if cfg.valid() else None


def format_tiles(tiles: Sequence[tuple[str, Sequence[int]]]) -> tuple[str, ...]:
    """``(shape key, numbers)`` pairs (``CompileOptions.sm90_tiles``) as the entries
    :func:`parse_tiles` reads: ``"MxNxK:in->out=bn,stages,consumers,group_m,cluster"``."""
    return tuple(f"{key}={','.join(str(int(x)) for x in cfg)}" for key, cfg in tiles)


def parse_tiles(tiles: Sequence[str]) -> dict[str, Sm90Config]:
    """A tile table from ``"MxNxK:in->out=bn,stages,consumers,group_m,cluster"`` entries
    (the ``sm90_tiles`` option); malformed or invalid entries are left out."""
    out: dict[str, Sm90Config] = {}
    for entry in tiles:
        key, _, numbers = entry.partition("=")
        try:
            cfg = from_numbers([int(x) for x in numbers.split(",")])
        except ValueError:
            continue
        if cfg is not None:
            out[key] = cfg
    return out


def sm90_config(
    m: int, n: int, k: int, in_type: str = "bf16", out_type: str = "bf16",
    tiles: Sequence[str] = (),
) -> Sm90Config:
    """The tuned config of this shape in ``tiles`` when it is one of :func:`search_space`
    (a config outside it is never used), else the heuristic."""
    found = parse_tiles(tiles).get(shape_key(m, n, k, in_type, out_type))
    if found is not None and found in search_space(m, n, k):
        return found
    return heuristic(m, n, k)
