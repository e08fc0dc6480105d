"""Time the streaming row kernels (tessera/passes/tile_rowstream.py) over lane counts
and unroll factors on wide bf16 rows, against x.clone() (the copy bandwidth). Each
config sets the lanes of every streaming tile (STREAM_LANES and WIDE_STREAM_LANES).

    python bench/row_stream_sweep.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONFIGS = ((512, 4), (1024, 4), (1024, 2), (256, 8))
SHAPES = ((4096, 50257), (2048, 151936))


def main() -> None:
    import torch
    from triton.testing import do_bench

    import tessera as ts
    from tessera.passes import tile_rowstream

    for r, c in SHAPES:
        x = torch.randn(r, c, device="cuda", dtype=torch.bfloat16)
        copy = do_bench(lambda x=x: x.clone(), return_mode="median")
        print(f"{r}x{c}: copy {copy:.4f} ms", flush=True)
        for lanes, unroll in CONFIGS:
            tile_rowstream.STREAM_LANES = tile_rowstream.WIDE_STREAM_LANES = lanes
            tile_rowstream.STREAM_UNROLL = unroll

            def sm(t):
                return ts.softmax(t, axis=-1)

            f = ts.jit(sm)
            f(x)
            ms = do_bench(lambda f=f, x=x: f(x), return_mode="median")
            print(f"  lanes {lanes:4d} unroll {unroll}: {ms:.4f} ms = {copy / ms:.2f} of copy",
                  flush=True)


if __name__ == "__main__":
    main()
