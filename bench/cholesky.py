"""Cholesky factors of f32 SPD matrices on the GPU: Tessera's blocked kernels
(``tessera/passes/tile_cholesky_blocked.py``) against ``torch.linalg.cholesky``
(cuSOLVER), for each block and panel width given, with the time of each kernel kind from
``torch.profiler``. Each result is checked against float64 first.

    python bench/cholesky.py [--blocks 32] [--panels 128,256] [--sizes 1x4096,64x256,1x8192]
        [--updates mma,fma,mma64x128a] [--factors every,lane]
    python bench/cholesky.py --solve 1,64,512 [--sizes ...] [--solve-panels 64,256]

``--solve K,...`` times the blocked triangular solve (``tile_triangular_blocked``) of the
lower factor against ``torch.linalg.solve_triangular`` instead, for each right-hand side
width K (and each panel height given).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.models import _time_ms  # noqa: E402  (CUDA events, median)

# the block width is a module constant, not part of the program cache's key
os.environ["TESSERA_NO_DISK_CACHE"] = "1"


def _spd(b: int, n: int):
    import torch

    g = torch.randn(b, n, n, device="cuda", dtype=torch.float64)
    a = (g @ g.mT / n + torch.eye(n, device="cuda", dtype=torch.float64)).float()
    return a if b > 1 else a[0]


def _kernel_times(fn, a) -> dict[str, float]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn(a)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(a)
        torch.cuda.synchronize()
    kinds: dict[str, float] = defaultdict(float)
    for ev in prof.key_averages():
        if ev.device_type.name == "CUDA":
            name = ev.key
            for pre in ("cholesky_", "trsm_"):
                if pre in name:
                    name = name.split(pre)[-1].split("_")[0]
            kinds[name[:24]] += ev.device_time_total / 1000.0
    return dict(kinds)


def main() -> None:
    import torch

    import tessera as ts
    from tessera import op
    from tessera.passes import tile_cholesky_blocked as blocked

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", default="32")
    p.add_argument("--panels", default=str(blocked.PANEL))
    p.add_argument("--sizes", default="1x1024,1x2048,1x4096,1x8192,8x1024,64x256,64x512")
    p.add_argument("--tiles", default=str(blocked.UPDATE_TILE), help="64,128: update blocks")
    p.add_argument("--solve", default="", help="right-hand side widths: time the solves")
    p.add_argument("--solve-panels", default="", help="rows per panel of the solves "
                   "(default: the module's PANEL)")
    p.add_argument("--updates", default="mma,fma",
                   help="f32 update kernels to compare: fma, mma (3xTF32 tensor cores, the "
                        "module's settings) or mma<tile>x<lanes>[p|a] (p: register prefetch, a: "
                        "double-buffered copy_async, neither: loads and stores)")
    p.add_argument("--factors", default="every" if blocked.FACTOR_EVERY_PIVOT else "lane",
                   help="factor kernels to compare: every (each lane takes the pivot from "
                        "the block's row) or lane (lane k publishes it)")
    args = p.parse_args()
    if args.solve:
        _solves(args)
        return
    rows = []
    for spec in args.sizes.split(","):
        b, n = (int(x) for x in spec.split("x"))
        a = _spd(b, n)
        ref = torch.linalg.cholesky(a.double())
        peer = _time_ms(lambda a=a: torch.linalg.cholesky(a), 20)
        variants = [
            (int(b_), int(p_), int(t_), u_, f_)
            for b_ in args.blocks.split(",")
            for p_ in args.panels.split(",")
            for t_ in args.tiles.split(",")
            for u_ in args.updates.split(",")
            for f_ in args.factors.split(",")
        ]
        for block, panel, tile, upd, fac in variants:
            blocked.BLOCK, blocked.PANEL, blocked.UPDATE_TILE = block, panel, tile
            blocked.FACTOR_EVERY_PIVOT = fac == "every"
            blocked.UPDATE_MMA = upd.startswith("mma")
            if upd.startswith("mma") and upd != "mma":
                mt, ml = upd[3:].rstrip("pa").split("x")
                blocked.MMA_TILE, blocked.MMA_LANES = int(mt), int(ml)
                blocked.MMA_PREFETCH = upd.endswith("p")
                blocked.MMA_ASYNC = upd.endswith("a")
            label = f"{block}/{panel}/{tile if upd == 'fma' else upd}/{fac}"

            @ts.jit
            def chol(a):
                return op.cholesky(a)

            out = chol(a)
            torch.cuda.synchronize()
            err = float((out.double() - ref).norm() / ref.norm())
            if not err < 1e-5:
                rows.append((spec, label, peer, float("nan"), err, "MISMATCH"))
                continue
            ms = _time_ms(lambda a=a, chol=chol: chol(a), 20)
            # the host's time to issue one call (no synchronization): above ``ms``, the
            # call is host-bound
            t0 = time.perf_counter()
            for _ in range(5):
                chol(a)
            host = (time.perf_counter() - t0) / 5 * 1e3
            torch.cuda.synchronize()
            kinds = _kernel_times(chol, a)
            detail = f"host {host:.3f}; " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
            rows.append((spec, label, peer, ms, err, detail))
            print(spec, label, f"{ms:.3f} ms", detail, flush=True)
    print(f"\n{'size':>10} {'blk/pnl/t/pivot':>24} {'cuSOLVER ms':>11} {'tessera ms':>10} {'ratio':>6} {'rel err':>8}  kernels (ms)")
    for spec, block, peer, ms, err, detail in rows:
        print(f"{spec:>10} {block:>24} {peer:11.3f} {ms:10.3f} {peer / ms:6.2f} {err:8.1e}  {detail}")


def _solves(args) -> None:
    import torch

    import tessera as ts
    from tessera.passes import tile_triangular_blocked

    rows = []
    for spec in args.sizes.split(","):
        b, n = (int(x) for x in spec.split("x"))
        ell = torch.linalg.cholesky(_spd(b, n).double())
        panels = args.solve_panels or str(tile_triangular_blocked.PANEL)
        for k, tile, panel in ((int(x), int(t), int(p)) for x in args.solve.split(",")
                               for t in args.tiles.split(",") for p in panels.split(",")):
            tile_triangular_blocked.UPDATE_TILE = tile
            tile_triangular_blocked.PANEL = panel
            label = f"{k}/{tile}/{panel}"
            g = torch.randn(*([b] if b > 1 else []), n, k, device="cuda", dtype=torch.float64)
            a, rhs = ell.float(), g.float()
            ref = torch.linalg.solve_triangular(ell, g, upper=False)
            peer = _time_ms(
                lambda a=a, rhs=rhs: torch.linalg.solve_triangular(a, rhs, upper=False), 20
            )

            @ts.jit
            def solve(u, v):
                return ts.triangular_solve(u, v)

            out = solve(a, rhs)
            torch.cuda.synchronize()
            err = float((out.double() - ref).norm() / ref.norm())
            if not err < 1e-4:
                rows.append((spec, label, peer, float("nan"), err, "MISMATCH"))
                continue
            ms = _time_ms(lambda a=a, rhs=rhs, solve=solve: solve(a, rhs), 20)
            t0 = time.perf_counter()
            for _ in range(5):
                solve(a, rhs)
            host = (time.perf_counter() - t0) / 5 * 1e3
            torch.cuda.synchronize()
            kinds = _kernel_times(lambda a, solve=solve, rhs=rhs: solve(a, rhs), a)
            detail = f"host {host:.3f}; " + ", ".join(
                f"{k_} {v:.3f}" for k_, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
            rows.append((spec, label, peer, ms, err, detail))
            print(spec, label, f"{ms:.3f} ms", flush=True)
    print(f"\n{'size':>10} {'k/tile/pnl':>12} {'torch ms':>9} {'tessera ms':>10} {'ratio':>6} {'rel err':>8}")
    for spec, k, peer, ms, err, detail in rows:
        print(f"{spec:>10} {k:>12} {peer:9.3f} {ms:10.3f} {peer / ms:6.2f} {err:8.1e}  {detail}")


if __name__ == "__main__":
    main()
