"""Roofline ceilings measured on the device, and the roofline plot.

Ceilings are measured when asked, never typed in:

* on a GPU (torch CUDA): peak bandwidth from a large device-to-device copy
  (``dst.copy_(src)``, 256 MiB, read + write bytes counted), peak FLOP/s from
  a large ``torch.matmul`` (4096², float32 and bfloat16), both timed with CUDA
  events, best of several runs;
* on the CPU: the same with numpy (``np.copyto`` of 64 MiB, a 1024² float32
  ``np.matmul``), timed with ``time.perf_counter``.

:func:`plot` draws achieved FLOP/s against arithmetic intensity (FLOPs per
byte) on log axes with the ceilings ``min(peak FLOP/s, intensity × bandwidth)``,
with matplotlib's Agg canvas (no display needed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Ceilings:
    """Measured peaks of one device: bandwidth in bytes/s, FLOP/s per dtype label."""

    device: str
    bandwidth: float
    flops: dict[str, float] = field(default_factory=dict)
    how: str = ""


def _best(fn: Any, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure_cpu(copy_mib: int = 64, matmul_n: int = 1024, reps: int = 5) -> Ceilings:
    """numpy copy bandwidth and float32 matmul FLOP/s on this CPU."""
    n = copy_mib * (1 << 20) // 4
    src = np.ones(n, np.float32)
    dst = np.empty_like(src)
    t_copy = _best(lambda: np.copyto(dst, src), reps)
    a = np.ones((matmul_n, matmul_n), np.float32)
    b = np.ones((matmul_n, matmul_n), np.float32)
    t_mm = _best(lambda: np.matmul(a, b), max(2, reps // 2))
    return Ceilings(
        device="cpu",
        bandwidth=2 * src.nbytes / t_copy,
        flops={"float32": 2 * matmul_n**3 / t_mm},
        how=f"np.copyto {copy_mib} MiB; np.matmul {matmul_n}x{matmul_n} float32",
    )


def measure_gpu(copy_mib: int = 256, matmul_n: int = 4096, reps: int = 5) -> Ceilings:
    """torch device copy bandwidth and matmul FLOP/s (float32, bfloat16) on the current GPU."""
    import torch

    dev = torch.device("cuda", torch.cuda.current_device())

    def timed(fn: Any) -> float:
        fn()
        best = float("inf")
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            best = min(best, s.elapsed_time(e) / 1e3)
        return best

    src = torch.ones(copy_mib * (1 << 20) // 4, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    t_copy = timed(lambda: dst.copy_(src))
    flops = {}
    for dt in (torch.float32, torch.bfloat16):
        a = torch.ones((matmul_n, matmul_n), dtype=dt, device=dev)
        b = torch.ones((matmul_n, matmul_n), dtype=dt, device=dev)
        flops[str(dt).removeprefix("torch.")] = 2 * matmul_n**3 / timed(lambda a=a, b=b: a @ b)
    return Ceilings(
        device=torch.cuda.get_device_name(dev),
        bandwidth=2 * copy_mib * (1 << 20) / t_copy,
        flops=flops,
        how=f"tensor.copy_ {copy_mib} MiB; torch.matmul {matmul_n}x{matmul_n}",
    )


@dataclass(frozen=True)
class Point:
    """One profiled kernel or op: its label, FLOPs, bytes and time (seconds)."""

    label: str
    flops: int
    bytes: int
    seconds: float

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds


def plot(points: list[Point], ceilings: Ceilings, path: str | Path, title: str = "") -> Path:
    """Draw ``points`` under ``ceilings`` as a PNG at ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    xs = [p.intensity for p in points] or [1.0]
    lo = min(min(xs) / 4, 1e-2)
    hi = max(max(xs) * 4, 1e2)
    peak = max(ceilings.flops.values())
    for p in ceilings.flops.values():
        hi = max(hi, 4 * p / ceilings.bandwidth)
    grid = np.logspace(np.log10(lo), np.log10(hi), 200)
    for label, pf in sorted(ceilings.flops.items(), key=lambda kv: -kv[1]):
        ax.plot(grid, np.minimum(pf, grid * ceilings.bandwidth), lw=1.5,
                label=f"{label} peak {pf / 1e9:.1f} GFLOP/s")
    ax.plot(grid, grid * ceilings.bandwidth, ":", color="gray", lw=1,
            label=f"bandwidth {ceilings.bandwidth / 1e9:.1f} GB/s")
    for p in points:
        ax.scatter([p.intensity], [p.flops_per_s], s=25, zorder=3)
        ax.annotate(p.label, (p.intensity, p.flops_per_s), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ymin = min([p.flops_per_s for p in points] + [peak]) / 10
    ax.set_ylim(ymin, peak * 3)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte, from the IR)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(title or f"roofline on {ceilings.device}", fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="lower right")
    fig.text(0.01, 0.01, f"ceilings measured: {ceilings.how}", fontsize=6, color="gray")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out
