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
from tessera.passes.sm90 import conv_implicit

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
    ((8, 20, 40, 40), (40, 20, 3, 3), 1, 1, False),
    ((1, 64, 6, 6), (64, 64, 3, 3), 1, 1, True),
    ((2, 64, 8, 8), (128, 64, 1, 1), 1, 0, False),
    ((3, 128, 4, 10), (64, 128, 1, 1), 1, 0, False),
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
F32_LAYERS = ("l1 3x3", "l3 3x3")
FENCE_AB = ("l1 3x3", "l3 3x3", "stem 7x7 s2")
"""Shapes also timed with the producer's other synchronization (``conv_implicit.SYNC``)."""


def conv_fn(stride: int, padding: int, bias: bool, implicit: bool, tf32: bool = False):
    opts = CompileOptions.from_env(implicit_conv=implicit, allow_tf32=tf32)
    if bias:
        return ts.jit(lambda x, w, b: ts.conv2d(x, w, b, stride=stride, padding=padding),
                      options=opts)
    return ts.jit(lambda x, w: ts.conv2d(x, w, stride=stride, padding=padding), options=opts)


def poison() -> None:
    """Fill 1 GiB of the caching allocator's large pool and 4 MiB of its small pool with
    NaN and free them: the next allocations (the result and the intermediate buffers)
    are carved from NaN memory, so an unwritten element shows."""
    nan = float("nan")
    big = torch.full((1 << 29,), nan, device="cuda", dtype=torch.bfloat16)
    small = [torch.full((1 << 19,), nan, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    del big, small


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    o = out.double()
    if not bool(torch.isfinite(o).all()):
        return math.nan
    return float((o - ref).norm() / ref.norm())


def gpu_ms(fn, reps: int = 20) -> tuple[float, dict[str, float]]:
    """Kernel time per call (ms, torch.profiler: the sum of the kernels' own device time
    over ``reps`` calls), and per kernel name."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    per: dict[str, float] = {}
    for ev in prof.key_averages():
        t = getattr(ev, "self_device_time_total", None)
        if t is None:
            t = ev.self_cuda_time_total
        if t > 0:
            per[ev.key[:40]] = t / reps / 1e3
    return sum(per.values()), per


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
    poison()
    row["err"] = err = rel(fn(x, w), ref)
    row["tessera"] = bench(lambda: fn(x, w)) if err < 1e-2 else math.nan
    row["tessera_gpu"], per = gpu_ms(lambda: fn(x, w))
    print(f"  {name} tessera kernels (ms/call): "
          + ", ".join(f"{k} {v:.4f}" for k, v in per.items()), flush=True)
    if name in FENCE_AB:
        conv_implicit.SYNC = "fence"
        try:
            fenced = conv_fn(st, pd, False, True)
            ef = rel(fenced(x, w), ref)
            row["fence"] = bench(lambda: fenced(x, w)) if ef < 1e-2 else math.nan
        finally:
            conv_implicit.SYNC = "noinc"
    if name in OLD_PATH:
        old = conv_fn(st, pd, False, False)
        eo = rel(old(x, w), ref)
        row["old"] = bench(lambda: old(x, w)) if eo < 1e-2 else math.nan
    row["cudnn"] = bench(lambda: F.conv2d(x, w, stride=st, padding=pd))
    row["cudnn_gpu"], _ = gpu_ms(lambda: F.conv2d(x, w, stride=st, padding=pd))
    xc = x.to(memory_format=torch.channels_last)
    wc = w.to(memory_format=torch.channels_last)
    row["cudnn_cl"] = bench(lambda: F.conv2d(xc, wc, stride=st, padding=pd))
    row["tflops"] = flops / row["tessera"] / 1e9
    return row


def time_f32(name: str, xs, ws, st: int, pd: int) -> dict[str, float]:
    """f32 (full accuracy on both sides: 3xTF32 against cuDNN with TF32 off): Tessera's
    implicit GEMM, its previous path (im2col + FMA GEMM) and cuDNN NCHW."""
    torch.backends.cudnn.allow_tf32 = False
    x = torch.randn(xs, device="cuda", dtype=torch.float32)
    w = torch.randn(ws, device="cuda", dtype=torch.float32) / (ws[1] * ws[2] * ws[3]) ** 0.5
    ref = F.conv2d(x.double(), w.double(), stride=st, padding=pd)
    row: dict[str, float] = {}
    fn = conv_fn(st, pd, False, True)
    poison()
    row["err"] = err = rel(fn(x, w), ref)
    row["tessera"] = bench(lambda: fn(x, w)) if err < 1e-5 else math.nan
    row["tessera_gpu"], _ = gpu_ms(lambda: fn(x, w))
    old = conv_fn(st, pd, False, False)
    eo = rel(old(x, w), ref)
    row["old"] = bench(lambda: old(x, w)) if eo < 1e-4 else math.nan
    row["cudnn"] = bench(lambda: F.conv2d(x, w, stride=st, padding=pd))
    row["cudnn_gpu"], _ = gpu_ms(lambda: F.conv2d(x, w, stride=st, padding=pd))
    row["cudnn_err"] = rel(F.conv2d(x, w, stride=st, padding=pd), ref)
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
    for sync, dtype, tf32 in (("noinc", torch.bfloat16, False), ("noinc", torch.float16, False),
                              ("noinc", torch.float32, False), ("noinc", torch.float32, True),
                              ("fence", torch.bfloat16, False)):
        conv_implicit.SYNC = sync
        # bf16/f16 against float64; f32: 3xTF32 at f32 accuracy, one TF32 product at TF32's
        tol = 1e-2 if dtype != torch.float32 else 5e-3 if tf32 else 1e-5
        for xs, ws, st, pd, bias in CHECKS:
            if dtype != torch.bfloat16 and xs[0] >= 8 or tf32 and xs[0] > 2:
                continue  # the big shapes once (bf16)
            if sync == "fence" and xs[0] < 4:
                continue  # (the fence producer passed every check before: docs/perf)
            x = torch.randn(xs, device="cuda", dtype=dtype)
            w = torch.randn(ws, device="cuda", dtype=dtype) / (ws[1] * ws[2] * ws[3]) ** 0.5
            b = torch.randn(ws[0], device="cuda", dtype=dtype) if bias else None
            fn = conv_fn(st, pd, bias, True, tf32)
            try:
                ref = F.conv2d(x.double(), w.double(), b.double() if bias else None,
                               stride=st, padding=pd)
                poison()
                y = fn(x, w, b) if bias else fn(x, w)
                torch.cuda.synchronize()
                ptx = fn.inspect_ir("ptx")
                took = "wgmma.mma_async" in ptx
                path = "implicit" if "cp.async.cg" in ptx else "gemm"
                err = rel(y, ref)
                ok = took and y.shape == ref.shape and err < tol
            except Exception:
                traceback.print_exc()
                ok, err, took, path = False, math.nan, False, "-"
            failures += not ok
            print(f"check {sync} {str(dtype)[6:]}{' tf32' if tf32 else ''} x{list(xs)} w{list(ws)} s{st} p{pd} "
                  f"bias={bias}: rel err {err:.2e} {path} "
                  f"{'ok' if ok else 'FAIL'}", flush=True)
    conv_implicit.SYNC = "noinc"
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

    f32_rows = []
    for name, xs, ws, st, pd in RESNET:
        if name not in F32_LAYERS:
            continue
        if time.time() - t0 > args.budget:
            print(f"time budget spent: f32 {name} not timed", flush=True)
            break
        try:
            f32_rows.append((name, time_f32(name, xs, ws, st, pd)))
        except Exception:
            traceback.print_exc()
        print(f"timed f32 {name}: {f32_rows[-1] if f32_rows else None}", flush=True)

    def f(v: float | None) -> str:
        return "-" if v is None or v != v else f"{v:.3f}"

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a and b and a == a and b == b else None

    print()
    print(f"conv2d bf16 NCHW, batch 32, {dev}. Wall: median ms per call (triton do_bench, "
          "host included); GPU: kernel ms per call (torch.profiler). ratio = cuDNN / "
          "Tessera (NCHW); CL = cuDNN channels_last; fence = the producer's other sync; "
          "im2col = the previous path")
    print(f"{'layer':<17} {'shape':<30} {'tessera':>8} {'cuDNN':>7} {'ratio':>6} "
          f"{'tes-gpu':>8} {'cud-gpu':>8} {'ratio':>6} {'CL':>7} {'fence':>7} {'im2col':>7} "
          f"{'TFLOP/s':>7} {'err':>7}")
    for (name, xs, ws, st, pd), row in zip(RESNET, rows):
        shape = f"{'x'.join(map(str, xs[1:]))} k{ws[0]}x{ws[2]}x{ws[3]} s{st}p{pd}"
        g = row.get
        print(f"{name:<17} {shape:<30} {f(g('tessera')):>8} {f(g('cudnn')):>7} "
              f"{f(ratio(g('cudnn'), g('tessera'))):>6} {f(g('tessera_gpu')):>8} "
              f"{f(g('cudnn_gpu')):>8} {f(ratio(g('cudnn_gpu'), g('tessera_gpu'))):>6} "
              f"{f(g('cudnn_cl')):>7} {f(g('fence')):>7} {f(g('old')):>7} "
              f"{f(g('tflops')):>7} {g('err', math.nan):>7.1e}")
    print()
    print("conv2d f32 NCHW, batch 32 (3xTF32; cuDNN with allow_tf32 off): wall ms, GPU ms, "
          "ratio = cuDNN / Tessera; im2col = the previous path (im2col + FMA GEMM)")
    print(f"{'layer':<17} {'tessera':>8} {'cuDNN':>7} {'ratio':>6} {'tes-gpu':>8} "
          f"{'cud-gpu':>8} {'ratio':>6} {'im2col':>7} {'err':>8} {'cuDNN err':>9}")
    for name, row in f32_rows:
        g = row.get
        print(f"{name:<17} {f(g('tessera')):>8} {f(g('cudnn')):>7} "
              f"{f(ratio(g('cudnn'), g('tessera'))):>6} {f(g('tessera_gpu')):>8} "
              f"{f(g('cudnn_gpu')):>8} {f(ratio(g('cudnn_gpu'), g('tessera_gpu'))):>6} "
              f"{f(g('old')):>7} {g('err', math.nan):>8.1e} {g('cudnn_err', math.nan):>9.1e}")
    print(f"correctness failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
