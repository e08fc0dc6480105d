"""Where the time of ``ts.grad`` of causal attention goes: per-kernel CUDA times (torch
profiler) of one gradient call at the bench's size, next to SDPA's forward and backward.

    python bench/attention_bwd_parts.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--warps", type=int, help="warps per dkdv/dq tile (an experiment: give "
                   "each value its own TESSERA_CACHE_DIR, the program cache does not see it)")
    a = p.parse_args()
    if a.warps:
        from tessera.passes import tile_attention_bwd

        tile_attention_bwd.WARPS = a.warps
    import torch
    from torch.profiler import ProfilerActivity, profile

    import tessera as ts

    b, h, s, d = (1, 8, 1024, 128) if a.quick else (4, 16, 4096, 128)
    step = ts.grad(lambda q, k, v, do: ts.sum(ts.flash_attention(q, k, v, causal=True) * do),
                   argnums=(0, 1, 2))
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    step(q, k, v, do)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step(q, k, v, do)
        torch.cuda.synchronize()
    totals: dict[str, float] = {}
    for ev in prof.key_averages():
        if ev.device_type.name == "CUDA" or getattr(ev, "self_device_time_total", 0):
            us = getattr(ev, "self_device_time_total", None) or ev.self_cuda_time_total
            totals[ev.key] = totals.get(ev.key, 0.0) + us / 3 / 1000
    from tessera.passes import tile_attention_bwd

    print(f"per-kernel ms of one ts.grad call, causal bf16 B{b} H{h} S{s} D{d}, "
          f"{tile_attention_bwd.WARPS} warps per dkdv/dq tile:")
    for key, ms in sorted(totals.items(), key=lambda kv: -kv[1]):
        if ms > 0.001:
            print(f"  {ms:9.4f}  {key[:90]}")


if __name__ == "__main__":
    main()
