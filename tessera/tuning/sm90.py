"""Tuned tile configs of the sm90 (TMA + wgmma) matmul, per device and shape.

Winners are stored in ``matmul_sm90.json`` under :func:`tessera.options.cache_root`,
keyed by :func:`cache_key` (device name, M, N, K and dtypes), as
``{"bn", "stages", "consumers", "group_m", "cluster", "seconds"}``.

* :func:`tiles_for` reads the winners of one device as ``CompileOptions.sm90_tiles``;
  an entry that is not a config of :func:`~tessera.passes.matmul_config.search_space`
  for its shape (an edited or stale file) is left out, so that shape uses the
  heuristic: a config outside the space is never run.
* :func:`autotune` times every config of the search space on the current GPU (after
  a correctness check against a float64 product) and records the fastest.
* :func:`complete` tunes, before lowering, the eligible matmuls of a Graph IR module
  that have no tuned config yet, when ``CompileOptions.autotune`` is on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from tessera.options import CompileOptions, TileConfig
from tessera.passes import matmul_config as mc
from tessera.tuning.store import JsonStore, store_path
from tessera.tuning.timer import time_cuda

FILE = "matmul_sm90.json"


def cache_path() -> Path:
    """The store of sm90 tile configs."""
    return store_path(FILE)


def cache_key(device: str, m: int, n: int, k: int, in_type: str, out_type: str) -> str:
    return f"{device}|{m}x{n}x{k}|{in_type}->{out_type}"


def _split(key: str) -> tuple[str, int, int, int, str, str] | None:
    """``cache_key``'s parts, None if ``key`` is not of its form."""
    try:
        device, shape, types = key.rsplit("|", 2)
        m, n, k = (int(x) for x in shape.split("x"))
        in_type, out_type = types.split("->")
    except ValueError:
        return None
    return device, m, n, k, in_type, out_type


def _config(entry: dict[str, Any]) -> mc.Sm90Config | None:
    try:
        return mc.from_numbers([
            entry["bn"], entry["stages"], entry["consumers"], entry.get("group_m", 8),
            entry.get("cluster", 1),
        ])
    except (KeyError, TypeError, ValueError):
        return None


def cached(key: str, path: Path | None = None) -> mc.Sm90Config | None:
    """The stored config of ``key`` if it is one of its shape's search space, else None."""
    parts = _split(key)
    entry = JsonStore(path or cache_path()).get(key)
    if parts is None or entry is None:
        return None
    cfg = _config(entry)
    _, m, n, k, _, _ = parts
    return cfg if cfg is not None and cfg in mc.search_space(m, n, k) else None


def store(key: str, cfg: mc.Sm90Config, seconds: float, path: Path | None = None) -> bool:
    """Record a winner (under the store's lock); False if the store is not writable."""
    n = mc.as_numbers(cfg)
    entry = {
        "bn": n[0], "stages": n[1], "consumers": n[2], "group_m": n[3], "cluster": n[4],
        "seconds": seconds,
    }
    return JsonStore(path or cache_path()).update(key, entry)


def tiles_for(device: str, path: Path | None = None) -> tuple[tuple[str, TileConfig], ...]:
    """The usable tuned configs of ``device`` as ``CompileOptions.sm90_tiles``."""
    out = []
    for key in JsonStore(path or cache_path()).read():
        parts = _split(key)
        if parts is None or parts[0] != device:
            continue
        cfg = cached(key, path)
        if cfg is not None:
            _, m, n, k, in_type, out_type = parts
            out.append((mc.shape_key(m, n, k, in_type, out_type), mc.as_numbers(cfg)))
    return tuple(sorted(out))


# --------------------------------------------------------------------------- tuning


def gemm_runner(gemm: Any) -> Callable[..., None]:
    """``run(c, a, b, *extra, stream=None)`` launching the sm90 kernel of ``gemm`` (a
    :class:`~tessera.passes.sm90.lower_matmul_sm90.Sm90Gemm`) on torch tensors (``extra``: the
    fused epilogue's bias, if any); built and loaded once per specialization and device
    (``run.plan`` is its launch plan)."""
    from tessera.passes.emit_ptx import emit_ptx
    from tessera.passes.sm90.lower_matmul_sm90 import build_kernel
    from tessera.runtime import tma

    name = "tessera_gemm_sm90"

    def build() -> tuple[Any, str]:
        kernel = build_kernel(name, gemm)
        return kernel, emit_ptx(kernel)

    boxes = gemm.boxes()
    pairs = [(boxes[2 * i], boxes[2 * i + 1]) for i in range(len(boxes) // 2)]
    return tma.kernel_runner(gemm, name, build, gemm.grid(), gemm.smem_bytes, pairs)


def autotune(
    m: int, n: int, k: int, in_type: str = "bf16", out_type: str = "bf16", reps: int = 20,
) -> mc.Sm90Config:
    """Time the search space on the current GPU; record and return the fastest correct config
    (the heuristic when none runs correctly)."""
    import torch

    from tessera.passes.sm90.lower_matmul_sm90 import Sm90Gemm
    from tessera.runtime import progress

    dev = torch.cuda.get_device_name()
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    a = torch.randn(m, k, device="cuda", dtype=tdt[in_type])
    b = torch.randn(k, n, device="cuda", dtype=tdt[in_type])
    ref = a.double() @ b.double()
    best: tuple[float, mc.Sm90Config] | None = None
    space = mc.search_space(m, n, k)
    bar = progress.bar(len(space), f"tuning sm90 matmul {m}x{n}x{k}")
    try:
        for cfg in space:
            bar.update(1)
            try:
                run = gemm_runner(Sm90Gemm(m, n, k, in_type, out_type, cfg))
                c = torch.full((m, n), float("nan"), device="cuda", dtype=tdt[out_type])
                run(c, a, b)
                torch.cuda.synchronize()
                err = float((c.double() - ref).norm() / ref.norm().clamp_min(1e-30))
                if not err < 2e-2:
                    continue
                seconds = time_cuda(lambda run=run, c=c: run(c, a, b), reps)
            except Exception:  # a config that does not build, load or launch is skipped
                continue
            if best is None or seconds < best[0]:
                best = (seconds, cfg)
    finally:
        bar.close()
    if best is None:
        return mc.heuristic(m, n, k)
    store(cache_key(dev, m, n, k, in_type, out_type), best[1], best[0])
    return best[1]


def complete(module: ModuleOp, options: CompileOptions) -> CompileOptions:
    """``options`` with tuned configs for every eligible matmul of the Graph IR ``module``
    that has none, tuning them now; unchanged unless ``options.autotune`` is on, the sm90
    kernels are enabled and the device is sm_90."""
    if not (options.autotune and options.sm90_kernels and options.arch == "sm_90"):
        return options
    from tessera.ir import graph as g
    from tessera.passes.sm90.lower_matmul_sm90 import eligible, gemm_for

    tiles = dict(options.sm90_tiles)
    for op in module.walk():
        if not isinstance(op, g.MatmulOp | g.MatmulEpilogueOp) or eligible(op) is not None:
            continue
        if op.tile_shape is not None and mc.Sm90Config.from_tile_shape(
            tuple(op.tile_shape.get_values())
        ):
            continue
        gemm = gemm_for(op)  # the problem the kernel solves (batches folded into M)
        if gemm.in_type not in ("bf16", "f16") or getattr(gemm, "b_type", None):
            continue  # the tuner times bf16/f16 products of one operand type
        if gemm.k % 8 or gemm.n % 8:
            continue  # it times 16-byte-aligned operands and results (the heuristic's here)
        m, n, k = gemm.m * gemm.batch, gemm.n, gemm.k
        key = mc.shape_key(m, n, k, gemm.in_type, gemm.out_type)
        if key not in tiles:
            tiles[key] = mc.as_numbers(autotune(m, n, k, gemm.in_type, gemm.out_type))
    if len(tiles) == len(options.sm90_tiles):
        return options
    return options.replace(sm90_tiles=tuple(tiles.items()))
