"""The one timer of the tuners: CUDA events around each run, the median of ``reps``."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any


def time_cuda(fn: Callable[[], Any], reps: int = 20, warmup: int = 3) -> float:
    """Seconds one ``fn()`` takes on the current CUDA stream: ``warmup`` untimed runs, then
    the median of ``reps`` runs each timed with a pair of CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)
