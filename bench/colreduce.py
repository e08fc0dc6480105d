"""Column reductions (``[A, R, C]`` summed over ``R``: bias and norm-weight gradients of a
backward pass) against torch, in one run: each result checked against float64 first,
then timed by the GPU's own kernel durations (torch.profiler, CUPTI: the sum of a call's
kernels, averaged over 20 calls; a call of these sizes takes longer to issue than to
run, so wall-clock timings would measure the host), with the bytes read per ms.

    python bench/colreduce.py

Rows: the plain sums of bf16 activations that a ViT-B/16 (128 x 197 tokens) and GPT-2
(8 x 1024 tokens) training step takes for its bias gradients (tile_colreduce's vector
kernel; ``scalar ms``: the same function compiled without it, the scalar column kernel),
and a layer norm weight gradient (a fused product summed over rows: the scalar column
kernel either way). Run with ``TESSERA_NO_DISK_CACHE=1`` so that both compile.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _kernel_ms(fn, calls: int = 20) -> float:
    """The GPU time of ``fn``'s kernels per call (torch.profiler's CUDA events)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    us = sum(ev.device_time_total for ev in prof.events()
             if ev.device_type == torch.autograd.DeviceType.CUDA)
    return us / calls / 1e3


def main() -> int:
    import torch

    import tessera as ts

    torch.manual_seed(0)
    rows = []
    cases = []
    for tokens, cols, what in ((25216, 768, "ViT"), (25216, 2304, "ViT qkv"),
                               (25216, 3072, "ViT fc1"), (8192, 768, "GPT-2"),
                               (8192, 3072, "GPT-2 fc1")):
        x = torch.randn(tokens, cols, device="cuda", dtype=torch.bfloat16)
        cases.append((f"{what} bias grad bf16 [{tokens},{cols}]", ts.jit(lambda x: ts.sum(x, 0)),
                      (x,), lambda x=x: x.sum(0), x.double().sum(0), x.numel() * 2))
    x3 = torch.randn(128, 197, 768, device="cuda", dtype=torch.bfloat16)
    cases.append(("ViT bias grad bf16 [128,197,768] axes (0,1)",
                  ts.jit(lambda x: ts.sum(x, (0, 1))), (x3,), lambda: x3.sum((0, 1)),
                  x3.double().sum((0, 1)), x3.numel() * 2))
    xf = torch.randn(25216, 768, device="cuda")
    cases.append(("f32 [25216,768]", ts.jit(lambda x: ts.sum(x, 0)), (xf,), lambda: xf.sum(0),
                  xf.double().sum(0), xf.numel() * 4))
    y = torch.randn(128, 197, 768, device="cuda", dtype=torch.bfloat16)
    cases.append(("LN dgamma bf16 [128,197,768] (fused)",
                  ts.jit(lambda x, y: ts.sum(ts.cast(x, ts.f32) * ts.cast(y, ts.f32), (0, 1))),
                  (x3, y), lambda: (x3.float() * y.float()).sum((0, 1)),
                  (x3.double() * y.double()).sum((0, 1)), x3.numel() * 4))
    from tessera.passes import tile_colreduce

    vector = tile_colreduce.lower_vector_columns
    for name, fn, args, peer, ref, nbytes in cases:
        # the same function compiled without the vector kernel (the scalar column kernel)
        tile_colreduce.lower_vector_columns = lambda *a: False
        try:
            scalar = ts.jit(fn.fn)
            s_out = scalar(*args)
        finally:
            tile_colreduce.lower_vector_columns = vector
        out = fn(*args)
        torch.cuda.synchronize()
        err = float((out.double() - ref).abs().max() / ref.abs().max())
        s_err = float((s_out.double() - ref).abs().max() / ref.abs().max())
        ok = err < 1e-2 and s_err < 1e-2
        ms = _kernel_ms(lambda fn=fn, args=args: fn(*args)) if ok else float("nan")
        s_ms = _kernel_ms(lambda f=scalar, args=args: f(*args)) if ok else float("nan")
        t_ms = _kernel_ms(peer)
        rows.append((name, ms, s_ms, t_ms, nbytes / ms / 1e6 if ok else 0.0, err, ok))
        print(rows[-1], flush=True)
    clone = torch.empty_like(xf)
    c_ms = _kernel_ms(lambda: clone.copy_(xf))
    print(f"\n{torch.cuda.get_device_name()}; copy {xf.numel() * 8 / c_ms / 1e6:.0f} GB/s "
          "(read + write); ratio = torch time / Tessera time")
    print(f"{'case':46} {'tessera ms':>10} {'scalar ms':>9} {'torch ms':>9} {'ratio':>6} "
          f"{'GB/s':>6}  check")
    for name, ms, s_ms, t, gbs, err, ok in rows:
        print(f"{name:46} {ms:10.4f} {s_ms:9.4f} {t:9.4f} {t / ms:6.2f} {gbs:6.0f}  "
              f"{'ok' if ok else 'WRONG'} {err:.1e}")
    return 0 if all(r[-1] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
