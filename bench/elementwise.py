"""Single elementwise kernels (casts, broadcasts, selects) and column reductions against torch
eager on the GPU: each case checked against float64 torch on fresh random inputs,
then timed (median of ``triton.testing.do_bench``), with the bytes moved per second.

    python bench/elementwise.py [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def cases() -> list[tuple[str, Callable[..., Any], list[tuple[tuple[int, ...], str]]]]:
    """(name, function on tensors, [(shape, dtype name)]): the same function runs
    through ``ts.jit`` (Tessera) and on torch tensors (eager and the float64 check)."""
    import torch

    import tessera as ts

    def cast32(x):
        return x.float() if isinstance(x, torch.Tensor) else ts.cast(x, ts.f32)

    return [
        ("cast bf16->f32 8192x50257", cast32, [((8192, 50257), "bfloat16")]),
        ("x - m[..,1] f32 8x1024x768", lambda x, m: x - m,
         [((8, 1024, 768), "float32"), ((8, 1024, 1), "float32")]),
        ("x * 0.5 bf16 8x1024x3072", lambda x: x * 0.5, [((8, 1024, 3072), "bfloat16")]),
        ("x + b[768] bf16 8x1024x768", lambda x, b: x + b,
         [((8, 1024, 768), "bfloat16"), ((768,), "bfloat16")]),
        ("x + pos[197,768] bf16 128x197x768", lambda x, p: x + p,
         [((128, 197, 768), "bfloat16"), ((197, 768), "bfloat16")]),
        ("x - m[..,1] bf16 8192x50257", lambda x, m: x - m,
         [((8192, 50257), "bfloat16"), ((8192, 1), "bfloat16")]),
        ("x * y bf16 8x1024x3072", lambda x, y: x * y,
         [((8, 1024, 3072), "bfloat16"), ((8, 1024, 3072), "bfloat16")]),
        ("sum axis 0 bf16 8192x768", lambda x: x.sum(0) if isinstance(x, torch.Tensor)
         else ts.sum(x, axis=0), [((8192, 768), "bfloat16")]),
        ("sum axis 0 bf16 8192x3072", lambda x: x.sum(0) if isinstance(x, torch.Tensor)
         else ts.sum(x, axis=0), [((8192, 3072), "bfloat16")]),
        ("sum heads bf16 4x8x4x2048x64", lambda x: x.sum(2) if isinstance(x, torch.Tensor)
         else ts.sum(x, axis=2), [((4, 8, 4, 2048, 64), "bfloat16")]),
        ("sum axis 0 f32 128x64x3136", lambda x: x.sum(0) if isinstance(x, torch.Tensor)
         else ts.sum(x, axis=0), [((128, 64, 3136), "float32")]),
    ]


def main() -> None:
    import torch
    from triton.testing import do_bench

    import tessera as ts

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for name, fn, specs in cases():
        gen = torch.Generator(device="cuda").manual_seed(0)
        xs = [torch.randn(s, device="cuda", dtype=getattr(torch, d), generator=gen)
              for s, d in specs]
        f = ts.jit(fn)
        out = f(*xs)
        ref = fn(*[x.double() for x in xs])
        eager = fn(*xs)
        err = float((out.double() - ref).abs().max() / ref.abs().max())
        eager_err = float((eager.double() - ref).abs().max() / ref.abs().max())
        ok = out.shape == ref.shape and out.dtype == eager.dtype and err <= max(2 * eager_err, 1e-6)
        t = do_bench(lambda f=f, xs=xs: f(*xs), return_mode="median")
        te = do_bench(lambda fn=fn, xs=xs: fn(*xs), return_mode="median")
        nbytes = sum(x.numel() * x.element_size() for x in xs) + out.numel() * out.element_size()
        rows.append({"case": name, "tessera_ms": t, "torch_ms": te, "err": err,
                     "eager_err": eager_err, "ok": ok, "tessera_gbs": nbytes / t / 1e6})
        print(rows[-1], flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    print(f"\n{torch.cuda.get_device_name()}  ratio = torch time / Tessera time")
    print(f"{'case':38s} {'tessera ms':>10s} {'torch ms':>9s} {'ratio':>6s} {'GB/s':>7s}  check")
    for r in rows:
        print(f"{r['case']:38s} {r['tessera_ms']:10.4f} {r['torch_ms']:9.4f} "
              f"{r['torch_ms'] / r['tessera_ms']:6.2f} {r['tessera_gbs']:7.0f}  "
              f"{'ok' if r['ok'] else 'WRONG'} {r['err']:.1e}")


if __name__ == "__main__":
    main()
