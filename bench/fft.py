"""``tgraph.fft`` / ``tgraph.fft2d`` through ``ts.jit`` against ``torch.fft`` (cuFFT).

    python bench/fft.py [--reps R] [--only NAME]

Each case is first checked against ``torch.fft`` in float64 (fresh random inputs; the
normwise relative error of the whole result), then Tessera's compiled function and the
torch peer are timed on the same CUDA tensor in the same process (CUDA events, median
of ``--reps``). The table is printed last; ratio = torch time / Tessera time (above 1:
Tessera is faster). Inputs are real, as ``torch.fft.fft`` of a real tensor (cuFFT
returns the full complex spectrum).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

import torch

import tessera as ts

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.models import _time_ms  # noqa: E402  (CUDA events, median)

CASES = [
    # name, shape, dtype, 2-D, inverse
    ("fft2d 64x512x512 f32", (64, 512, 512), torch.float32, True, False),
    ("fft 4096x4096 f32", (4096, 4096), torch.float32, False, False),
    ("fft 1024x1000 f32", (1024, 1000), torch.float32, False, False),
    ("ifft2d 64x512x512 f32", (64, 512, 512), torch.float32, True, True),
    ("fft 256x4096 f64", (256, 4096), torch.float64, False, False),
    ("fft 64x65536 f32", (64, 65536), torch.float32, False, False),
    ("fft 1024x1009 f32", (1024, 1009), torch.float32, False, False),
]


def peer(two_d: bool, inverse: bool):
    if two_d:
        return torch.fft.ifft2 if inverse else torch.fft.fft2
    return torch.fft.ifft if inverse else torch.fft.fft


def case(name, shape, dtype, two_d, inverse, reps) -> dict:
    op = ts.fft2d if two_d else ts.fft
    fn = ts.jit(lambda x: op(x, inverse=inverse))
    ref_fn = peer(two_d, inverse)
    x = torch.randn(shape, device="cuda", dtype=dtype)
    t0 = time.perf_counter()
    fn(torch.full_like(x, float("nan")))  # compiles; leaves NaN where a result was
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    got = fn(x)
    want = ref_fn(x.double())
    err = float(torch.linalg.vector_norm(got.to(torch.complex128) - want)
                / torch.linalg.vector_norm(want))
    t_ts = _time_ms(lambda: fn(x), reps)
    t_torch = _time_ms(lambda: ref_fn(x), reps)
    return {"name": name, "err": err, "ts": t_ts, "torch": t_torch, "compile": compile_s}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", default=None, help="run the cases whose name contains this")
    args = ap.parse_args()
    rows = []
    for c in CASES:
        if args.only and args.only not in c[0]:
            continue
        try:
            r = case(*c, args.reps)
        except Exception:  # one failing case does not hide the others
            traceback.print_exc()
            r = {"name": c[0], "err": float("nan"), "ts": float("nan"),
                 "torch": float("nan"), "compile": float("nan")}
        print(f"{r['name']}: rel err {r['err']:.2e}, tessera {r['ts']:.3f} ms, "
              f"torch {r['torch']:.3f} ms, compile {r['compile']:.1f} s", flush=True)
        rows.append(r)
    print(f"\n{torch.cuda.get_device_name()}, median of {args.reps}")
    print(f"{'case':<24} {'rel err':>9} {'tessera ms':>11} {'cuFFT ms':>9} {'ratio':>6}")
    for r in rows:
        ratio = r["torch"] / r["ts"] if r["ts"] == r["ts"] else float("nan")
        print(f"{r['name']:<24} {r['err']:>9.1e} {r['ts']:>11.3f} {r['torch']:>9.3f} "
              f"{ratio:>6.2f}")


if __name__ == "__main__":
    main()
