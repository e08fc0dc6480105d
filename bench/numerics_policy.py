"""Rounding-policy casts and packed fp6/fp4 GEMMs on the GPU: first correctness (outputs
poisoned with NaN; casts bit for bit against ``cast_array``, GEMMs against a float64
product of the dequantized operands), then timings (CUDA events, median of 30) against
the torch peer, a table last.

Usage (GPU machine): ``python bench/numerics_policy.py [--n 4194304] [--gemm 4096]``
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from xdsl.parser import Parser

import tessera as ts
from tessera.ir.context import default_context
from tessera.numerics import cast_array
from tessera.numerics.pack import pack_fp4, pack_fp6
from tessera.passes.emit_ptx import emit_ptx
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tessera.passes.pipelines import lower_to_target
from tessera.runtime import cuda


def lowered(text: str, name: str, sm90: bool = False) -> cuda.HostPlan:
    ctx = default_context()
    m = Parser(ctx, text).parse_module()
    LowerGraphToTile(sm90=sm90).apply(ctx, m)
    target = lower_to_target(m)
    return cuda.host_plan(target, name, emit_ptx(target))


def median_ms(fn, iters: int = 30) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return float(np.median(times))


IR = {ts.bf16: "bf16", ts.fp4_e2m1: "f4E2M1FN", ts.fp6_e2m3: "f6E2M3FN"}


def cast_case(n: int, dst: ts.DType, rows: list) -> None:
    pol = dst @ ts.stochastic_round
    rt = f"tensor<{n}x{IR[dst]}, #tessera.policy<{IR[dst]}, rounding = stochastic>>"
    text = (f"func.func @c(%x: tensor<{n}xf32>) -> {rt} {{\n  %y = tgraph.cast %x seed = 7 : "
            f"(tensor<{n}xf32>) -> {rt}\n  func.return %y : {rt}\n}}")
    plan = lowered(text, "c")
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    xt = torch.from_numpy(x).cuda()
    (y,) = plan.run([xt], True)
    want = cast_array(x, pol, seed=7)
    if dst == ts.fp4_e2m1:
        ok = np.array_equal(y.cpu().numpy().view(np.uint8), pack_fp4(want))
    else:
        ok = np.array_equal(y.view(torch.int16).cpu().numpy().view(np.uint16), want.view(np.uint16))
    ms = median_ms(lambda: plan.run([xt]))
    peer = median_ms(lambda: xt.to(torch.bfloat16))
    rows.append((f"cast f32->{dst!r} @stochastic_round, n={n}", "bitwise" if ok else "MISMATCH",
                 ms, f"torch .to(bf16) (nearest) {peer:.3f}", 4 * n / ms / 1e6))


def gemm_case(s: int, d: ts.DType, sm90: bool, rows: list) -> None:
    a = cast_array(np.random.default_rng(2).standard_normal((s, s)).astype(np.float32), d)
    b = cast_array(np.random.default_rng(3).standard_normal((s, s)).astype(np.float32), d)
    pack = pack_fp4 if d == ts.fp4_e2m1 else pack_fp6
    el = IR[d]
    text = (f"func.func @mm(%a: tensor<{s}x{s}x{el}>, %b: tensor<{s}x{s}x{el}>) -> "
            f"tensor<{s}x{s}xf32> {{\n  %c = tgraph.matmul %a, %b : (tensor<{s}x{s}x{el}>, "
            f"tensor<{s}x{s}x{el}>) -> tensor<{s}x{s}xf32>\n  func.return %c : "
            f"tensor<{s}x{s}xf32>\n}}")
    plan = lowered(text, "mm", sm90)
    pa = torch.from_numpy(pack(a)).cuda().view(torch.int8)
    pb = torch.from_numpy(pack(b)).cuda().view(torch.int8)
    (c,) = plan.run([pa, pb], True)
    a64 = torch.from_numpy(a.astype(np.float64)).cuda()
    b64 = torch.from_numpy(b.astype(np.float64)).cuda()
    ref = a64 @ b64
    u32 = 2.0**-24
    bound = s * u32 / (1 - s * u32) * (a64.abs() @ b64.abs()) + u32 * ref.abs()
    ok = bool(((c.double() - ref).abs() <= bound).all())
    ms = median_ms(lambda: plan.run([pa, pb]))
    ab, bb = a64.to(torch.bfloat16), b64.to(torch.bfloat16)
    peer = median_ms(lambda: torch.matmul(ab, bb))
    tf = 2 * s**3 / ms / 1e9
    path = "sm90 unpack kernels + wgmma" if sm90 else "mma.sync, unpack in smem fill"
    rows.append((f"{d!r} GEMM {s}^3 ({path})", "bound ok" if ok else "BOUND FAILED", ms,
                 f"torch bf16 matmul of dequantized {peer:.3f}", tf))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 22)
    ap.add_argument("--gemm", type=int, default=4096)
    args = ap.parse_args()
    rows: list = []
    cast_case(args.n, ts.bf16, rows)
    cast_case(args.n, ts.fp4_e2m1, rows)
    for d in (ts.fp4_e2m1, ts.fp6_e2m3):
        gemm_case(args.gemm, d, False, rows)
        gemm_case(args.gemm, d, True, rows)
    print(f"device: {torch.cuda.get_device_name()}")
    print(f"{'case':62s} {'check':13s} {'ms':>8s}  {'peer (ms)':42s} {'GB/s | TFLOP/s':>14s}")
    for name, check, ms, peer, rate in rows:
        print(f"{name:62s} {check:13s} {ms:8.3f}  {peer:42s} {rate:14.1f}")


if __name__ == "__main__":
    main()
