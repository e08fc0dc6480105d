"""The sm90 (TMA + wgmma) attention backward against the mma.sync one and SDPA, in one run:
gradients of ``ts.grad`` of flash attention checked against torch float64 first (ragged
lengths, causal or not, D 64/128, bf16/f16; outputs land in memory poisoned with NaN),
bitwise-identical gradients over two runs, then times at the bench's size, a table last.

    python bench/attention_bwd_sm90.py [--quick] [--no-check] [--variants]

``--variants`` also checks and times (causal) the kernel variants of
``tessera.passes.sm90.attention_bwd_sm90`` (``STAGES``, ``OVERLAP``, ``KEEP_P``,
``DQ_BLOCK_S``); run it
with ``TESSERA_NO_DISK_CACHE=1`` (the program cache does not see those constants).
"""

from __future__ import annotations

import argparse
import math
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHECKS = [  # b, h, sq, sk, d, elem, causal
    (1, 2, 67, 67, 64, "bf16", True),
    (2, 3, 130, 200, 64, "f16", False),
    (1, 2, 300, 130, 128, "bf16", True),
    (1, 2, 257, 1000, 128, "f16", True),
    (1, 2, 1000, 1000, 128, "bf16", True),
    (1, 2, 1000, 1000, 64, "bf16", False),
    (1, 1, 4097, 4097, 128, "bf16", True),
    (1, 1, 4097, 4097, 64, "f16", False),
]
TOL = {"bf16": 2e-2, "f16": 4e-3}
VARIANTS = [  # (STAGES, OVERLAP, KEEP_P, DQ_BLOCK_S) of tessera.passes.sm90.attention_bwd_sm90
    ("2 stages, no overlap", (2, False, False, 64)),
    ("3 stages", (3, False, False, 64)),
    ("overlap", (2, True, False, 64)),
    ("overlap 3 stages", (3, True, False, 64)),
    ("overlap keep_p 3 stages", (3, True, True, 64)),
    ("overlap dq128", (2, True, False, 128)),
]
VARIANT_CHECKS = [
    (1, 2, 1000, 1000, 128, "bf16", True),
    (2, 3, 257, 1000, 64, "f16", False),
]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-check", action="store_true")
    p.add_argument("--variants", action="store_true")
    a = p.parse_args()
    import torch

    import tessera as ts
    from tessera.options import CompileOptions
    from tessera.passes.sm90 import attention_bwd_sm90 as sm90_bwd

    types = {"bf16": torch.bfloat16, "f16": torch.float16}

    def grad_fn(causal: bool, wgmma: bool):
        opts = CompileOptions.from_env(sm90_kernels=True, sm90_attention_bwd=wgmma)
        f = ts.jit(lambda q, k, v, do: ts.sum(ts.flash_attention(q, k, v, causal=causal) * do),
                   options=opts)
        return ts.grad(f, argnums=(0, 1, 2))

    def reference(q, k, v, do, causal):
        q, k, v = (x.double().requires_grad_() for x in (q, k, v))
        sq, sk, d = q.shape[-2], k.shape[-2], q.shape[-1]
        s = q @ k.transpose(-1, -2) / math.sqrt(d)
        if causal:
            keep = torch.arange(sk, device="cuda")[None, :] <= torch.arange(sq, device="cuda")[:, None]
            s = s.masked_fill(~keep, float("-inf"))
        o = torch.softmax(s, -1) @ v
        return torch.autograd.grad(o, (q, k, v), do.double())

    def inputs(b, h, sq, sk, d, elem):
        dt = types[elem]
        q, do = (torch.randn(b, h, sq, d, device="cuda", dtype=dt) for _ in range(2))
        k, v = (torch.randn(b, h, sk, d, device="cuda", dtype=dt) for _ in range(2))
        return q, k, v, do

    def poison(nbytes: int) -> None:
        junk = torch.full((nbytes // 2,), float("nan"), device="cuda", dtype=torch.float16)
        del junk

    default = (sm90_bwd.STAGES, sm90_bwd.STAGES_D64, sm90_bwd.OVERLAP, sm90_bwd.KEEP_P,
               sm90_bwd.DQ_BLOCK_S)

    def set_variant(v) -> None:
        """A variant's stages at every head size, or the defaults (None)."""
        (sm90_bwd.STAGES, sm90_bwd.STAGES_D64, sm90_bwd.OVERLAP, sm90_bwd.KEEP_P,
         sm90_bwd.DQ_BLOCK_S) = default if v is None else (v[0], *v)

    lines: list[str] = []
    ok_all = True
    if a.variants and not a.no_check:  # each variant against float64 and bitwise first
        for name, v in VARIANTS:
            set_variant(v)
            for b, h, sq, sk, d, elem, causal in VARIANT_CHECKS:
                tag = f"variant {name}: B{b} H{h} Sq{sq} Sk{sk} D{d} {elem} causal={causal}"
                try:
                    step = grad_fn(causal, True)
                    q, k, v_, do = inputs(b, h, sq, sk, d, elem)
                    poison(64 << 20)
                    got = [x.clone() for x in step(q, k, v_, do)]
                    poison(64 << 20)
                    again = step(q, k, v_, do)
                    want = reference(q, k, v_, do, causal)
                    errs = [float((x.double() - w).abs().max() / w.abs().max())
                            if bool(torch.isfinite(x).all()) else float("nan")
                            for x, w in zip(got, want)]
                    same = all(torch.equal(x, y) for x, y in zip(got, again))
                    good = all(e_ < TOL[elem] for e_ in errs) and same
                    ok_all &= good
                    lines.append(f"{tag}: rel err " + " ".join(f"{e_:.2e}" for e_ in errs)
                                 + f" bitwise {'identical' if same else 'DIFFER'}"
                                 + ("  ok" if good else "  FAILED"))
                except Exception:
                    ok_all = False
                    lines.append(f"{tag}: ERROR {traceback.format_exc(limit=3)}")
                print(lines[-1], flush=True)
        set_variant(None)
    if not a.no_check:
        for b, h, sq, sk, d, elem, causal in CHECKS:
            name = f"B{b} H{h} Sq{sq} Sk{sk} D{d} {elem}{' causal' if causal else ''}"
            try:
                step = grad_fn(causal, True)
                q, k, v, do = inputs(b, h, sq, sk, d, elem)
                poison(64 << 20)
                got = step(q, k, v, do)
                torch.cuda.synchronize()
                ptx = step.inspect_ir("ptx")
                assert "attention_bwd_dkdv_sm90" in ptx and "attention_bwd_dq_sm90" in ptx
                want = reference(q, k, v, do, causal)
                errs = []
                for x, w in zip(got, want):
                    finite = bool(torch.isfinite(x).all())
                    errs.append(float((x.double() - w).abs().max() / w.abs().max()) if finite
                                else float("nan"))
                good = all(e_ < TOL[elem] for e_ in errs)
                ok_all &= good
                lines.append(f"check {name}: dq/dk/dv rel err "
                             + " ".join(f"{e_:.2e}" for e_ in errs)
                             + ("  ok" if good else "  FAILED"))
            except Exception:
                ok_all = False
                lines.append(f"check {name}: ERROR {traceback.format_exc(limit=3)}")
            print(lines[-1], flush=True)
        for causal in (True, False):
            try:
                step = grad_fn(causal, True)
                q, k, v, do = inputs(2, 4, 1000, 1000, 128, "bf16")
                first = [x.clone() for x in step(q, k, v, do)]
                poison(64 << 20)
                second = step(q, k, v, do)
                torch.cuda.synchronize()
                same = all(torch.equal(x, y) for x, y in zip(first, second))
                ok_all &= same
                lines.append(f"bitwise causal={causal}: {'identical' if same else 'DIFFER'}")
            except Exception:
                ok_all = False
                lines.append(f"bitwise: ERROR {traceback.format_exc(limit=3)}")
            print(lines[-1], flush=True)

    def bench(fn, quick: bool) -> float:
        """Median ms: triton's do_bench (L2 flushed) when available, else CUDA events."""
        try:
            from triton.testing import do_bench

            return float(do_bench(fn, warmup=10 if quick else 25, rep=40 if quick else 100,
                                  return_mode="median"))
        except ImportError:
            pass
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(10 if quick else 30):
            s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s0.record()
            fn()
            s1.record()
            s1.synchronize()
            times.append(s0.elapsed_time(s1))
        return sorted(times)[len(times) // 2]

    b, h, s, d = (1, 8, 1024, 128) if a.quick else (4, 16, 4096, 128)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rows = []
    for causal in (True, False):
        q, k, v, do = inputs(b, h, s, s, d, "bf16")

        def peer(q=q, k=k, v=v, do=do, causal=causal):
            qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
            return torch.autograd.grad(sdpa(qq, kk, vv, is_causal=causal), (qq, kk, vv), do)

        refs = peer()
        flops = 2.5 * 4.0 * b * h * s * s * d / (2 if causal else 1)
        case = f"{'causal' if causal else 'full'} bf16 B{b} H{h} S{s} D{d}"
        t_peer = bench(lambda: peer(), a.quick)
        rows.append((case, "SDPA fwd+bwd", t_peer, flops / t_peer / 1e9, 1.0, ""))
        impls = [("tessera mma.sync", False, None), ("tessera wgmma", True, None)]
        if a.variants and causal:
            impls += [(f"wgmma {name}", True, v) for name, v in VARIANTS]
        for label, wgmma, variant in impls:
            try:
                set_variant(variant)
                step = grad_fn(causal, wgmma)
                got = step(q, k, v, do)
                errs = [float((x.float() - r.float()).abs().max() / r.float().abs().max())
                        for x, r in zip(got, refs)]
                ms = bench(lambda step=step, args=(q, k, v, do): step(*args), a.quick)
                rows.append((case, label, ms, flops / ms / 1e9, t_peer / ms,
                             f"{max(errs):.1e}"))
            except Exception:
                rows.append((case, label, float("nan"), 0.0, 0.0,
                             "ERROR " + traceback.format_exc(limit=2).replace("\n", " | ")))
            print(rows[-1], flush=True)

        set_variant(None)

    # where the time goes: per-kernel CUDA times of one call of each path (causal)
    from torch.profiler import ProfilerActivity, profile

    q, k, v, do = inputs(b, h, s, s, d, "bf16")
    parts = []
    for label, wgmma in (("mma.sync", False), ("wgmma", True)):
        step = grad_fn(True, wgmma)
        step(q, k, v, do)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step(q, k, v, do)
            torch.cuda.synchronize()
        for ev in prof.key_averages():
            us = getattr(ev, "self_device_time_total", 0) or 0
            if us > 3:
                parts.append(f"  {label:9s} {us / 3 / 1000:9.4f} ms  {ev.key[:80]}")

    print()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for line in lines:
        print(line)
    print(f"all checks passed: {ok_all}")
    print("per-kernel ms of one causal ts.grad call:")
    for line in parts:
        print(line)
    print(f"{'case':34s} {'impl':18s} {'ms':>9s} {'TFLOP/s':>8s} {'x SDPA':>7s}  rel err (vs SDPA bf16)")
    for case, impl, ms, tf, ratio, note in rows:
        print(f"{case:34s} {impl:18s} {ms:9.4f} {tf:8.1f} {ratio:7.2f}  {note}")


if __name__ == "__main__":
    main()
