"""Attention forward and backward at the shapes of the benchmark models, against SDPA,
by kernel time.

    python bench/attention_shapes.py [--variants [all|fwd|bwd]]

For each shape (ViT-B/16 at batch 128: 197 tokens, no mask; GPT-2 at 8 x 1024 and
LLaMA-style 1B at 4 x 2048, causal, the latter with 8 key/value heads for 32 query
heads; and the head size 128 case B4 H16 S4096 causal): the forward alone (``ts.jit`` of ``ts.flash_attention`` against
``F.scaled_dot_product_attention``) and the forward plus backward (``ts.grad`` against
``torch.autograd.grad`` of SDPA), each first checked against float64 on the CPU at the
first batch entry, then timed by the sum of its kernels' durations per call
(torch.profiler), so host time is not counted on either side. Prints one table.

``--variants`` also times kernel variants (each checked against float64 first): the
forward's TMA stages and turns (``Sm90Attention`` fields) and the backward's ``VARIANTS`` of
``bench/attention_bwd_sm90.py``. Run it with ``TESSERA_NO_DISK_CACHE=1`` (the program
cache does not see those settings).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.colreduce import _kernel_ms  # noqa: E402

SHAPES = [  # (name, batch, heads, kv heads, tokens, head size, causal)
    ("ViT-B/16", 128, 12, 12, 197, 64, False),
    ("GPT-2", 8, 12, 12, 1024, 64, True),
    ("LLaMA-1B", 4, 32, 8, 2048, 64, True),
    ("B4 H16 S4096 D128", 4, 16, 16, 4096, 128, True),
]


def _sdpa(q, k, v, causal):
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                          enable_gqa=k.shape[1] != q.shape[1])


def _err(got, want) -> float:
    return float((got.double() - want).abs().max() / want.abs().max())


_REFS: dict[str, tuple] = {}

FWD_VARIANTS = (
    ("fwd 3 stages", {"stages": 3}),
    ("fwd 4 stages", {"stages": 4}),
    ("fwd with turns", {"pingpong": True}),
    ("fwd one CTA per tile", {"sms": 1 << 30}),
)
"""Forward kernel settings tried by ``--variants`` (``Sm90Attention`` fields; the
default is the spec's)."""


def main() -> int:
    import argparse

    from bench.attention_bwd_sm90 import VARIANTS
    from tessera.passes.sm90 import attention_bwd_sm90 as bwd
    from tessera.passes.sm90 import lower_attention_sm90 as fwd_mod

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", nargs="?", const="all", choices=("all", "fwd", "bwd"),
                    help="also time the forward's, the backward's or all kernel variants")
    a = ap.parse_args()
    defaults = (bwd.STAGES, bwd.STAGES_D64, bwd.OVERLAP, bwd.KEEP_P, bwd.DQ_BLOCK_S)
    spec_for = fwd_mod.spec_for
    runs: list[tuple[str, dict, tuple]] = [("default", {}, defaults)]
    if a.variants:
        if a.variants in ("all", "fwd"):
            runs += [(label, fields, defaults) for label, fields in FWD_VARIANTS]
        if a.variants in ("all", "bwd"):
            runs += [(f"bwd {name}", {}, (v[0], *v)) for name, v in VARIANTS]
    rows = []
    for label, fields, variant in runs:
        (bwd.STAGES, bwd.STAGES_D64, bwd.OVERLAP, bwd.KEEP_P, bwd.DQ_BLOCK_S) = variant
        fwd_mod.spec_for = (
            (lambda op, f=fields: _variant(spec_for(op), f)) if fields else spec_for)
        try:
            rows += [(f"{label}: {r[0]}", *r[1:]) for r in _measure()]
        finally:
            (bwd.STAGES, bwd.STAGES_D64, bwd.OVERLAP, bwd.KEEP_P, bwd.DQ_BLOCK_S) = defaults
            fwd_mod.spec_for = spec_for
    _table(rows)
    return 0




def _variant(spec, fields: dict):
    """``spec`` with ``fields`` replaced, or ``spec`` itself where that would not fit in
    shared memory (4 stages at head size 128)."""
    import dataclasses

    from tessera.ir.target.facts import MAX_SHARED_BYTES

    got = dataclasses.replace(spec, **fields)
    return got if got.smem_bytes <= MAX_SHARED_BYTES else spec


def _measure() -> list[tuple]:
    import torch

    import tessera as ts

    torch.manual_seed(0)
    rows = []
    for name, b, h, hkv, s, d, causal in SHAPES:
        q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        do = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
        fwd = ts.jit(lambda q, k, v, c=causal: ts.flash_attention(q, k, v, causal=c))
        grad = ts.grad(lambda q, k, v, do, c=causal: ts.sum(
            ts.flash_attention(q, k, v, causal=c) * do), argnums=(0, 1, 2))
        # float64 reference on the first batch entry
        if name not in _REFS:  # the same inputs in every run (seeded): computed once
            qd, kd, vd, dod = (t[:1].double().cpu().requires_grad_() for t in (q, k, v, do))
            out = _sdpa(qd, kd, vd, causal)
            _REFS[name] = (out.detach(), torch.autograd.grad(out, (qd, kd, vd), dod))
        ref, ref_grads = _REFS[name]
        got = fwd(q, k, v)
        got_grads = grad(q, k, v, do)
        errs = [_err(got[:1].cpu(), ref)] + [
            _err(g_[:1].cpu(), r) for g_, r in zip(got_grads, ref_grads)]

        def sdpa_step(q=q, k=k, v=v, do=do, causal=causal):
            qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
            return torch.autograd.grad(_sdpa(qq, kk, vv, causal), (qq, kk, vv), do)

        args = (q, k, v)
        t = {
            "sdpa fwd": _kernel_ms(lambda a=args, c=causal: _sdpa(*a, c)),
            "tessera fwd": _kernel_ms(lambda a=args, f=fwd: f(*a)),
            "sdpa fwd+bwd": _kernel_ms(sdpa_step),
            "tessera fwd+bwd": _kernel_ms(lambda a=(*args, do), g=grad: g(*a)),
        }
        rows.append((name, b, h, hkv, s, d, causal, max(errs), t))
        print(name, errs, t, flush=True)
    return rows


def _table(rows: list[tuple]) -> None:
    import torch

    dev = torch.cuda.get_device_name()
    print(f"\n{dev}: kernel ms per call (torch.profiler), ratio = SDPA / Tessera")
    print(f"{'shape':44s} {'sdpa fwd':>9s} {'tes fwd':>8s} {'ratio':>6s} "
          f"{'sdpa f+b':>9s} {'tes f+b':>8s} {'ratio':>6s} {'err':>8s}")
    for name, b, h, hkv, s, d, causal, err, t in rows:
        shape = f"{name} {b}x{h}/{hkv}x{s}x{d}{' c' if causal else ''}"
        print(f"{shape:44s} {t['sdpa fwd']:9.3f} {t['tessera fwd']:8.3f} "
              f"{t['sdpa fwd'] / t['tessera fwd']:6.2f} {t['sdpa fwd+bwd']:9.3f} "
              f"{t['tessera fwd+bwd']:8.3f} {t['sdpa fwd+bwd'] / t['tessera fwd+bwd']:6.2f} "
              f"{err:8.2e}")


if __name__ == "__main__":
    raise SystemExit(main())
