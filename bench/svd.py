"""Singular value decompositions of f32 matrices on the GPU: Tessera (``op.svd``) against
``torch.linalg.svd(a, full_matrices=False)`` (cuSOLVER). Each result is checked first
against float64 (``|U S Vh - A| / |A|``, ``max |U^T U - I|``, ``max |Vh Vh^T - I|``, the
singular values against ``torch.linalg.svdvals``; all under 1e-5), then both are timed
(CUDA events, median). ``--inner`` and ``--sweeps`` set the blocked kernels' inner Jacobi
sweeps per visit and the most outer sweeps (module constants of
``tessera/passes/tile_svd_blocked.py`` and ``tile_svd_parallel.py``) and ``--block-cols``
the columns per block, for comparing them.

    python bench/svd.py [--shapes 16x128x96,1024x1024,4096x4096] [--inner 1] [--sweeps 18]
                        [--block-cols 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.models import _time_ms  # noqa: E402  (CUDA events, median)

# the sweep counts are module constants, not part of the program cache's key
os.environ["TESSERA_NO_DISK_CACHE"] = "1"

TOL = 1e-5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="16x128x96,4x256x256,700x1024,1500x600,1024x1024,"
                                        "2048x2048,4096x4096")
    ap.add_argument("--inner", type=int, default=None)
    ap.add_argument("--sweeps", type=int, default=None)
    ap.add_argument("--block-cols", type=int, default=None,
                    help="columns per block of the blocked kernels (a multiple of 8)")
    args = ap.parse_args()

    import torch

    import tessera as ts
    from tessera import op
    from tessera.passes import tile_svd_blocked, tile_svd_parallel

    if args.inner is not None:
        tile_svd_blocked.INNER_MAX_SWEEPS = args.inner
    if args.sweeps is not None:
        tile_svd_parallel.PARALLEL_MAX_SWEEPS = args.sweeps
    if args.block_cols is not None:
        tile_svd_blocked.block_cols = lambda k: args.block_cols

    @ts.jit
    def svd(a):
        return op.svd(a)

    rows = []
    for text in args.shapes.split(","):
        shape = tuple(int(x) for x in text.split("x"))
        gen = torch.Generator(device="cuda").manual_seed(sum(shape))
        a = torch.randn(*shape, device="cuda", generator=gen)
        t = time.perf_counter()
        u, s, vh = svd(a)
        torch.cuda.synchronize()
        first = time.perf_counter() - t
        ad = a.double()
        rec = float(((u.double() * s.double().unsqueeze(-2)) @ vh.double() - ad).norm() / ad.norm())
        eye = torch.eye(s.shape[-1], device="cuda", dtype=torch.float64)
        uo = float((u.double().mT @ u.double() - eye).abs().max())
        vo = float((vh.double() @ vh.double().mT - eye).abs().max())
        ref = torch.linalg.svdvals(ad)
        serr = float((s.double() - ref).abs().max() / ref.max())
        ok = max(rec, uo, vo, serr) < TOL
        reps = 2 if max(shape[-2:]) >= 4096 else 5
        peer = _time_ms(lambda a=a: torch.linalg.svd(a, full_matrices=False), reps)
        mine = _time_ms(lambda a=a: svd(a), reps) if ok else float("nan")
        rows.append((text, peer, mine, rec, uo, vo, serr, first, ok))
        print(rows[-1], flush=True)
    print(f"\n{torch.cuda.get_device_name()}  ratio = cuSOLVER time / Tessera time")
    print("shape | cuSOLVER ms | Tessera ms | ratio | |USVh-A|/|A| | U'U-I | VhVh'-I | S err "
          "| first call s | ok")
    for text, peer, mine, rec, uo, vo, serr, first, ok in rows:
        print(f"{text} | {peer:.2f} | {mine:.2f} | {peer / mine:.2f} | {rec:.1e} | {uo:.1e} | "
              f"{vo:.1e} | {serr:.1e} | {first:.1f} | {ok}")


if __name__ == "__main__":
    main()
