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
  through the staged store's chunk buffers (:data:`STAGED_STORE_BYTES` per 64 rows)
  instead of the whole tile, so more stages fit (``BN = 256``: 4 instead of 3).
* warps: 4 per warpgroup, ``1 + BM/64`` warpgroups (one producer).
* ``group_m = 8``: CTAs walk the output in groups of 8 tile rows so that the B
  panel of a group stays in L2.

**Split-K** (:func:`split_k`, on when ``CompileOptions.split_k``): when the output has too
few ``BM x BN`` tiles to occupy the SMs (``M = N = 512..1024`` with a long K, the weight
gradients of training where K is the token count, decode shapes with ``M <= 16``), the K
loop is cut into ``S`` contiguous ranges. Work unit ``u`` of ``tiles * S`` computes split
``u // tiles`` of tile ``u % tiles`` and stores its f32 partial product in a workspace
``[S, M, N]``; a second kernel adds the ``S`` partials of each element in split order
(``s = 0, 1, ...``: deterministic, no atomics) and applies the epilogue and the cast.
``S`` minimizes a cost estimate (:func:`split_cost`, in seconds):

* main kernel: ``waves * (kps * t_ktile + T_TILE)`` with ``waves = ceil(tiles * S /
  SMs)``, ``kps = ceil(ktiles / S)`` K stages per unit, ``t_ktile`` the larger of the
  stage's tensor-core time (``2 BM BN BK`` FLOPs at :data:`SM_FLOPS` times the dtype's
  rate and the tile's :data:`BN_SPEED`) and ``LATENCY / stages`` (a CTA keeps ``stages``
  loads in flight: Little's law), and ``T_TILE`` a tile's pipeline fill and store; never
  less than reading A and B once from HBM (:data:`HBM_BYTES_PER_S`);
* reduction (``S > 1``): one more launch (``T_LAUNCH``) plus writing and reading the
  ``S`` f32 partials and writing C at HBM speed.

``S = 1`` unless some ``S`` is estimated at most :data:`SPLIT_GAIN` of its time; each
split keeps at least :data:`MIN_SPLIT_KTILES` stages, ``S <= MAX_SPLITS``, and only
unbatched products with ``M x N`` at most :data:`MAX_SPLIT_OUTPUT` elements split.

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
STAGED_STORE_BYTES = 64 * (128 + 32)
"""Shared memory of the staged store per 64 rows of the tile, at most (f32 results:
``tessera.passes.sm90.staged_store.staged_bytes``): reserved next to the stages when
rows of C are no 16-byte multiple and no TMA-store tile is staged."""


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

    def smem_bytes(self, copies: int = 1, staging: bool | int = True) -> int:
        """Shared memory of the stages (``copies`` of each operand: 2 for 3xTF32's hi and
        lo) and the output's staging: ``True`` the TMA store's tile
        (:meth:`epilogue_bytes`), ``False`` none, or a byte count (the staged store's
        buffers, :data:`STAGED_STORE_BYTES` per 64 rows at most)."""
        out = self.epilogue_bytes() if staging is True else int(staging)
        return self.stages * self.stage_bytes() * copies + out

    def valid(self, copies: int = 1, staging: bool | int = True) -> bool:
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
    # no TMA-store tile for rows of C not 16 B: the staged store's smaller buffers
    staging = bm * bn * 2 if n % 8 == 0 else consumers * STAGED_STORE_BYTES
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


# --------------------------------------------------------------------------- split-K

SM_FLOPS = 989e12 / 132
"""Dense bf16 tensor-core FLOP/s of one H100 SXM SM (989 TFLOP/s over 132 SMs)."""
RATE = {"bf16": 1.0, "f16": 1.0, "e4m3": 2.0, "e5m2": 2.0, "tf32": 0.5, "3xtf32": 0.5 / 3}
"""Tensor-core throughput of an input type relative to bf16 (3xTF32: three products)."""
HBM_BYTES_PER_S = 3.0e12
"""HBM bandwidth reached by copies on an H100 SXM (3.35 TB/s peak)."""
LATENCY = 2.0e-6
"""Time from a TMA load's issue to its data in shared memory under load (seconds)."""
T_TILE = 2.0e-6
"""A tile's pipeline fill and epilogue store (seconds)."""
T_LAUNCH = 3.0e-6
"""One more kernel on the stream, with its tail (seconds)."""
SPLIT_GAIN = 0.85
"""Split only when the estimate is at most this fraction of the unsplit one."""
MAX_SPLITS = 16
MIN_SPLIT_KTILES = 4
"""Fewest K stages one split computes (a shorter one is mostly pipeline fill)."""
MAX_SPLIT_OUTPUT = 1 << 24
"""Largest ``M x N`` that may split (its f32 workspace is ``S x 64 MiB`` at most)."""


def split_cost(
    m: int, n: int, k: int, cfg: Sm90Config, splits: int, in_type: str = "bf16",
    out_bytes: int = 2, sms: int = NUM_SMS,
) -> float:
    """Estimated seconds of the product with K cut into ``splits`` ranges (module
    docstring); ``splits = 1`` is the plain kernel."""
    elem = {"e4m3": 1, "e5m2": 1, "tf32": 4, "3xtf32": 4}.get(in_type, 2)
    box_k = 128 // elem
    ktiles = cdiv(k, box_k)
    kps = cdiv(ktiles, splits)
    splits = cdiv(ktiles, kps)  # every split non-empty
    tiles = cdiv(m, cfg.bm) * cdiv(n, cfg.bn)
    waves = cdiv(tiles * splits, sms)
    compute = 2 * cfg.bm * cfg.bn * box_k / (SM_FLOPS * RATE.get(in_type, 1.0)
                                              * BN_SPEED.get(cfg.bn, 1.0))
    t_ktile = max(compute, LATENCY / cfg.stages)
    copies = 2 if in_type == "3xtf32" else 1
    reads = (m + n) * k * elem * copies / HBM_BYTES_PER_S
    main = max(waves * (kps * t_ktile + T_TILE), reads)
    if splits == 1:
        return main
    return main + T_LAUNCH + (2 * splits * 4 + out_bytes) * m * n / HBM_BYTES_PER_S


def split_k(
    m: int, n: int, k: int, cfg: Sm90Config, in_type: str = "bf16", out_bytes: int = 2,
    sms: int = NUM_SMS, batch: int = 1, max_splits: int = MAX_SPLITS,
) -> int:
    """How many K ranges (at most ``max_splits``) the product is cut into (1: no split;
    module docstring)."""
    if batch != 1 or m * n > MAX_SPLIT_OUTPUT:
        return 1
    elem = {"e4m3": 1, "e5m2": 1, "tf32": 4, "3xtf32": 4}.get(in_type, 2)
    ktiles = cdiv(k, 128 // elem)
    base = split_cost(m, n, k, cfg, 1, in_type, out_bytes, sms)
    best, best_t = 1, base * SPLIT_GAIN
    for s in range(2, max_splits + 1):
        kps = cdiv(ktiles, s)
        if kps < MIN_SPLIT_KTILES or cdiv(ktiles, kps) != s:
            continue  # too short, or the same split as a smaller S
        t = split_cost(m, n, k, cfg, s, in_type, out_bytes, sms)
        if t < best_t:
            best, best_t = s, t
    return best
