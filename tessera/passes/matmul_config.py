"""Tile shapes for the sm90 (TMA + wgmma) matmul: the heuristic and the autotuner.

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
* warps: 4 per warpgroup, ``1 + BM/64`` warpgroups (one producer).
* ``group_m = 8``: CTAs walk the output in groups of 8 tile rows so that the B
  panel of a group stays in L2.

**Autotuner** (:func:`autotune`): times every config of :func:`search_space` on the
current GPU (CUDA events, median of a few runs, after a correctness check against
``torch.matmul``) and records the winner in ``$TESSERA_CACHE_DIR/matmul_sm90.json``
(default ``~/.cache/tessera``) keyed by device name, M, N, K and dtypes.
:func:`sm90_config` consults that cache first, tunes on a miss when
``TESSERA_AUTOTUNE=1`` and a Hopper GPU is present, and otherwise uses the
heuristic. Progress is shown only on a terminal.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

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
        return (self.bm + self.bn) * 64 * 2

    def epilogue_bytes(self) -> int:
        """The output tile staged in shared memory for the TMA-store epilogue (16-bit)."""
        return self.bm * self.bn * 2

    def smem_bytes(self) -> int:
        return self.stages * self.stage_bytes() + self.epilogue_bytes()

    def valid(self) -> bool:
        return (
            self.bn in (64, 128, 192, 256) and self.consumers in (1, 2)
            and 2 <= self.stages <= 8 and self.smem_bytes() <= SMEM_BUDGET
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
    stages = max(3, min(5, (SMEM_BUDGET - bm * bn * 2) // stage))
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


# --------------------------------------------------------------------------- persistent cache


def cache_path() -> Path:
    root = os.environ.get("TESSERA_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "tessera"
    )
    return Path(root) / "matmul_sm90.json"


def cache_key(device: str, m: int, n: int, k: int, in_type: str, out_type: str) -> str:
    return f"{device}|{m}x{n}x{k}|{in_type}->{out_type}"


def load_cache(path: Path | None = None) -> dict[str, Any]:
    try:
        data = json.loads((path or cache_path()).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def store(key: str, cfg: Sm90Config, seconds: float, path: Path | None = None) -> None:
    """Record a winner (read-modify-write, replaced atomically; silent if not writable)."""
    path = path or cache_path()
    data = load_cache(path)
    data[key] = {**asdict(cfg), "seconds": seconds}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass


def cached(key: str) -> Sm90Config | None:
    entry = load_cache().get(key)
    if not isinstance(entry, dict):
        return None
    try:
        cfg = Sm90Config(
            bn=int(entry["bn"]), stages=int(entry["stages"]),
            consumers=int(entry["consumers"]), group_m=int(entry.get("group_m", 8)),
            cluster=int(entry.get("cluster", 1)),
        )
    except (KeyError, TypeError, ValueError):
        return None
    return cfg if cfg.valid() else None


def _device_name() -> str | None:
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0):
            return torch.cuda.get_device_name()
    except Exception:
        pass
    return None


def sm90_config(m: int, n: int, k: int, in_type: str = "bf16", out_type: str = "bf16") -> Sm90Config:
    """The tuned config from the cache, a fresh tuning (``TESSERA_AUTOTUNE=1``), or the heuristic."""
    dev = _device_name()
    if dev is not None:
        key = cache_key(dev, m, n, k, in_type, out_type)
        found = cached(key)
        if found is not None:
            return found
        if os.environ.get("TESSERA_AUTOTUNE", "") not in ("", "0"):
            return autotune(m, n, k, in_type, out_type)
    return heuristic(m, n, k)


# --------------------------------------------------------------------------- tuning


def autotune(
    m: int, n: int, k: int, in_type: str = "bf16", out_type: str = "bf16", reps: int = 20,
) -> Sm90Config:
    """Time :func:`search_space` on the current GPU; record and return the fastest correct config."""
    import torch

    from tessera.passes.lower_matmul_sm90 import Sm90Gemm
    from tessera.runtime import progress, tma

    dev = torch.cuda.get_device_name()
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    a = torch.randn(m, k, device="cuda", dtype=tdt[in_type])
    b = torch.randn(k, n, device="cuda", dtype=tdt[in_type])
    ref = (a.double() @ b.double())
    best: tuple[float, Sm90Config] | None = None
    space = search_space(m, n, k)
    bar = progress.bar(len(space), f"tuning sm90 matmul {m}x{n}x{k}")
    try:
        for cfg in space:
            bar.update(1)
            gemm = Sm90Gemm(m, n, k, in_type, out_type, cfg)
            try:
                run = tma.gemm_runner(gemm)
                c = torch.full((m, n), float("nan"), device="cuda", dtype=tdt[out_type])
                run(c, a, b)
                torch.cuda.synchronize()
                err = float((c.double() - ref).norm() / ref.norm().clamp_min(1e-30))
                if not err < 2e-2:
                    continue
                seconds = _time(lambda run=run, c=c: run(c, a, b), reps)
            except Exception:
                continue
            if best is None or seconds < best[0]:
                best = (seconds, cfg)
    finally:
        bar.close()
    if best is None:
        return heuristic(m, n, k)
    store(cache_key(dev, m, n, k, in_type, out_type), best[1], best[0])
    return best[1]


def _time(fn: Any, reps: int) -> float:
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    return times[len(times) // 2]
