"""The store and timer of ``@kernel.autotune`` (:mod:`tessera.frontend.kernel_autotune`).

Winners are kept in ``autotune.json`` under :func:`tessera.options.cache_root`, one
entry per signature (kernel, source hash, device, shapes and dtypes, other
constants): ``{"config": {...}, "how": "gpu-timed" | "cpu-first", "trials": [...]}``.
A stored config that is not a point of the kernel's current search space (an edited
file, or a space that changed) is never used: :func:`cached_config` returns None and
the kernel is tuned again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tessera.tuning.store import JsonStore, store_path
from tessera.tuning.timer import time_cuda

FILE = "autotune.json"


def cache_path() -> Path:
    """Where tuned kernel configs are stored."""
    return store_path(FILE)


def cached_config(
    key: str, space: Sequence[dict[str, Any]], path: Path | None = None
) -> dict[str, Any] | None:
    """The stored winner of ``key`` if it is one of ``space``, else None."""
    entry = JsonStore(path or cache_path()).get(key)
    cfg = entry.get("config") if entry is not None else None
    if not isinstance(cfg, dict):
        return None
    return cfg if any(cfg == point for point in space) else None


def record(key: str, entry: dict[str, Any], path: Path | None = None) -> bool:
    """Store the winner of ``key`` (under the store's lock); False if not writable."""
    return JsonStore(path or cache_path()).update(key, entry)


def time_ms(fn: Callable[[], Any], warmup: int, rep: int) -> float:
    """Milliseconds one ``fn()`` takes on the GPU (:func:`tessera.tuning.timer.time_cuda`)."""
    return time_cuda(fn, reps=rep, warmup=warmup) * 1e3
