"""conv2d on the Hopper kernels against cuDNN: correctness first, then a timing table.

    python bench/conv_sm90.py [--budget SECONDS]

1. Correctness: the implicit-GEMM path (``CompileOptions.implicit_conv``) at odd sizes
   (C not a multiple of 8, odd H/W, stride 2, padding 0/1/3, the 7x7 stem, 1x1, O not a
   multiple of 8, bias) in bf16 and f16 against ``F.conv2d`` in float64 on fresh random
   inputs; the memory the result will take is filled with NaN first (a freed NaN block
   the caching allocator hands out again), so an unwritten element shows.
2. Timing (median ms, triton's do_bench): ResNet-50 layer shapes at batch 32, bf16, NCHW:
   Tessera implicit GEMM, Tessera im2col + GEMM (the previous path, two shapes), cuDNN
   NCHW and cuDNN channels_last (``F.conv2d``). The table is printed last; ratio =
   cuDNN NCHW time / Tessera implicit time.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import traceback

import torch

import tessera as ts
from tessera.options import CompileOptions

F = torch.nn.functional

CHECKS = [
    # (x shape, w shape, stride, padding, bias)
    ((2, 3, 17, 15), (16, 3, 3, 3), 2, 1, True),
    ((2, 3, 33, 31), (16, 3, 7, 7), 2, 3, True),
    ((3, 32, 9, 10), (128, 32, 1, 1), 1, 0, True),
    ((2, 16, 15, 15), (24, 16, 3, 3), 2, 0, False),
    ((1, 4, 11, 7), (5, 4, 3, 2), 2, 0, True),
    ((2, 20, 13, 11), (40, 20, 3, 3), 1, 1, False),
    ((4, 64, 14, 14), (64, 64, 3, 3), 1, 1, False),
    ((2, 72, 9, 9), (200, 72, 3, 3), 1, 1, True),
    ((32, 64, 56, 56), (64, 64, 3, 3), 1, 1, False),
    ((8, 256, 14, 14), (256, 256, 3, 3), 1, 1, True),
]
RESNET = [
    # name, x shape, w shape, stride, padding (batch 32)
    ("stem 7x7 s2", (32, 3, 224, 224), (64, 3, 7, 7), 2, 3),
    ("l1 3x3", (32, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    ("l1 1x1 64->256", (32, 64, 56, 56), (256, 64, 1, 1), 1, 0),
    ("l1 1x1 256->64", (32, 256, 56, 56), (64, 256, 1, 1), 1, 0),
    ("l2 3x3 s2", (32, 128, 56, 56), (128, 128, 3, 3), 2, 1),
    ("l2 3x3", (32, 128, 28, 28), (128, 128, 3, 3), 1, 1),
    ("l3 3x3", (32, 256, 14, 14), (256, 256, 3, 3), 1, 1),
    ("l4 3x3", (32, 512, 7, 7), (512, 512, 3, 3), 1, 1),
    ("l4 1x1 512->2048", (32, 512, 7, 7), (2048, 512, 1, 1), 1, 0),
]
OLD_PATH = ("l1 3x3", "l3 3x3")


def conv_fn(stride: int, padding: int, bias: bool, implicit: bool):
    opts = CompileOptions.from_env(implicit_conv=implicit)
    if bias:
        return ts.jit(lambda x, w, b: ts.conv2d(x, w, b, stride=stride, padding=padding),
                      options=opts)
    return ts.jit(lambda x, w: ts.conv2d(x, w, stride=stride, padding=padding), options=opts)


def poison(nbytes: int) -> None:
    """Fill a block of ``nbytes`` with NaN and free it: the next allocation of that size
    reuses it."""
    t = torch.full((nbytes // 2 + 1,), float("nan"), device="cuda", dtype=torch.bfloat16)
    del t


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    o = out.double()
    if not bool(torch.isfinite(o).all()):
        return math.nan
    return float((o - ref).norm() / ref.norm())


def bench(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=10, rep=50, return_mode="median"))


def time_layer(name: str, xs, ws, st: int, pd: int) -> dict[str, float]:
    """Check, then time one layer shape: Tessera (implicit, and im2col for OLD_PATH), cuDNN
    NCHW and channels_last."""
    x = torch.randn(xs, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(ws, device="cuda", dtype=torch.bfloat16) / (ws[1] * ws[2] * ws[3]) ** 0.5
    row: dict[str, float] = {}
    ref = F.conv2d(x.double(), w.double(), stride=st, padding=pd)
    flops = 2.0 * ref.numel() * ws[1] * ws[2] * ws[3]
    fn = conv_fn(st, pd, False, True)
    poison(ref.numel() * 2)
    row["err"] = err = rel(fn(x, w), ref)
    row["tessera"] = bench(lambda: fn(x, w)) if err < 1e-2 else math.nan
    if name in OLD_PATH:
        old = conv_fn(st, pd, False, False)
        eo = rel(old(x, w), ref)
        row["old"] = bench(lambda: old(x, w)) if eo < 1e-2 else math.nan
    row["cudnn"] = bench(lambda: F.conv2d(x, w, stride=st, padding=pd))
    xc = x.to(memory_format=torch.channels_last)
    wc = w.to(memory_format=torch.channels_last)
    row["cudnn_cl"] = bench(lambda: F.conv2d(xc, wc, stride=st, padding=pd))
    row["tflops"] = flops / row["tessera"] / 1e9
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=250.0)
    args = ap.parse_args()
    t0 = time.time()
    torch.manual_seed(0)
    dev = torch.cuda.get_device_name()
    print(f"device: {dev}", flush=True)
    failures = 0
    for dtype in (torch.bfloat16, torch.float16):
        for xs, ws, st, pd, bias in CHECKS:
            if dtype == torch.float16 and xs[0] >= 8:
                continue  # the big shapes once (bf16)
            x = torch.randn(xs, device="cuda", dtype=dtype)
            w = torch.randn(ws, device="cuda", dtype=dtype) / (ws[1] * ws[2] * ws[3]) ** 0.5
            b = torch.randn(ws[0], device="cuda", dtype=dtype) if bias else None
            fn = conv_fn(st, pd, bias, True)
            try:
                ref = F.conv2d(x.double(), w.double(), b.double() if bias else None,
                               stride=st, padding=pd)
                poison(ref.numel() * 2)
                y = fn(x, w, b) if bias else fn(x, w)
                torch.cuda.synchronize()
                ptx = fn.inspect_ir("ptx")
                took = "cp.async.cg" in ptx and "wgmma.mma_async" in ptx
                err = rel(y, ref)
                ok = took and y.shape == ref.shape and err < 1e-2
            except Exception:
                traceback.print_exc()
                ok, err, took = False, math.nan, False
            failures += not ok
            print(f"check {str(dtype)[6:]} x{list(xs)} w{list(ws)} s{st} p{pd} "
                  f"bias={bias}: rel err {err:.2e} implicit={took} "
                  f"{'ok' if ok else 'FAIL'}", flush=True)
    print(f"correctness: {failures} failures ({time.time() - t0:.0f} s)", flush=True)

    rows = []
    torch.backends.cudnn.benchmark = True
    for name, xs, ws, st, pd in RESNET:
        if time.time() - t0 > args.budget:
            print(f"time budget spent: {name} and later shapes not timed", flush=True)
            break
        row: dict[str, float | str] = {"name": name}
        try:
            row.update(time_layer(name, xs, ws, st, pd))
        except Exception:
            traceback.print_exc()
        rows.append(row)
        print(f"timed {name}: {row}", flush=True)

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    print()
    print(f"conv2d bf16 NCHW, batch 32, {dev}: median ms (triton do_bench); "
          "ratio = cuDNN NCHW / Tessera implicit")
    print(f"{'layer':<18} {'shape':<34} {'tessera':>8} {'im2col':>8} {'cuDNN':>8} "
          f"{'cuDNN-CL':>8} {'ratio':>6} {'ratio-CL':>8} {'TFLOP/s':>8} {'rel err':>8}")
    for (name, xs, ws, st, pd), row in zip(RESNET, rows):
        tes, cud, cl = row.get("tessera"), row.get("cudnn"), row.get("cudnn_cl")
        ratio = cud / tes if tes and cud else None
        ratio_cl = cl / tes if tes and cl else None
        shape = f"{'x'.join(map(str, xs[1:]))} k{ws[0]}x{ws[2]}x{ws[3]} s{st}p{pd}"
        print(f"{name:<18} {shape:<34} {f(tes):>8} {f(row.get('old')):>8} {f(cud):>8} "
              f"{f(cl):>8} {f(ratio):>6} {f(ratio_cl):>8} {f(row.get('tflops')):>8} "
              f"{row.get('err', math.nan):>8.1e}")
    print(f"correctness failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
