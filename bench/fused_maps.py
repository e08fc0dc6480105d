"""Fused kernels holding index maps against torch, by kernel time (torch.profiler):
a rotary embedding of a transposed projection (LLaMA-1B's q: 4 x 2048 tokens, 32 heads of
64), the same for GPT-2 / ViT head shapes, and an attention's q, k, v gradients stacked
and transposed back into the projection's layout (ViT-B/16). Each result is checked
against float64 first. Peers: torch eager and ``torch.compile`` (Inductor)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.colreduce import _kernel_ms  # noqa: E402


def main() -> int:
    import torch

    import tessera as ts

    torch.manual_seed(0)

    def rope_ts(x, cos, sin):
        t = ts.transpose(x, 0, 2, 1, 3)
        d = t.shape[-1]
        return t * cos + ts.concat([-t[..., d // 2:], t[..., : d // 2]], axis=-1) * sin

    def rope_torch(x, cos, sin):
        t = x.transpose(1, 2)
        d = t.shape[-1]
        return t * cos + torch.cat([-t[..., d // 2:], t[..., : d // 2]], -1) * sin

    rows = []
    for what, (b, s, h, d) in (("LLaMA-1B q", (4, 2048, 32, 64)), ("GPT-2", (8, 1024, 12, 64)),
                               ("ViT-B/16", (128, 197, 12, 64))):
        x = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        cos, sin = (torch.randn(s, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        X = x.double()
        want = rope_torch(X, cos.double(), sin.double())
        f = ts.jit(rope_ts)
        c = torch.compile(rope_torch)
        for name, fn in (("tessera", f), ("inductor", c)):
            got = fn(x, cos, sin)
            err = float((got.double() - want).abs().max() / want.abs().max())
            assert err < 1e-2, (what, name, err)
        mb = x.numel() * 2 * 2 / 1e6
        args = (x, cos, sin)
        t_ts = _kernel_ms(lambda f=f, a=args: f(*a))
        t_e = _kernel_ms(lambda a=args: rope_torch(*a))
        t_c = _kernel_ms(lambda c=c, a=args: c(*a))
        rows.append((f"rope {what} {b}x{s}x{h}x{d}", t_e, t_c, t_ts, mb))
    b, h, s, d = 128, 12, 197, 64
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    f = ts.jit(lambda q, k, v: ts.transpose(ts.concat(
        [q.reshape(1, b, h, s, d), k.reshape(1, b, h, s, d), v.reshape(1, b, h, s, d)], 0),
        1, 3, 0, 2, 4))

    def stack_torch(q, k, v):
        return torch.stack([q, k, v]).permute(1, 3, 0, 2, 4).contiguous()

    c = torch.compile(stack_torch)
    assert torch.equal(f(q, k, v), stack_torch(q, k, v))
    assert torch.equal(c(q, k, v), stack_torch(q, k, v))
    rows.append((f"qkv grads stacked {b}x{h}x{s}x{d}", _kernel_ms(lambda: stack_torch(q, k, v)),
                 _kernel_ms(lambda: c(q, k, v)), _kernel_ms(lambda: f(q, k, v)),
                 q.numel() * 2 * 3 * 2 / 1e6))
    print(f"{torch.cuda.get_device_name()}  kernel ms per call; GB/s = bytes read + written "
          "once / Tessera time")
    print(f"{'case':40s} {'eager':>8s} {'inductor':>9s} {'tessera':>8s} {'GB/s':>7s} "
          f"{'x eager':>8s} {'x ind.':>7s}")
    for name, te, tc, tt_, mb in rows:
        print(f"{name:40s} {te:8.3f} {tc:9.3f} {tt_:8.3f} {mb / tt_:7.0f} {te / tt_:8.2f} "
              f"{tc / tt_:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
