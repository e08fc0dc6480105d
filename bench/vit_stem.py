"""The kernels of a ViT-B/16 training step's stem on the GPU, at batch 128 in bf16:
Tessera against torch (eager), each checked first.

    python bench/vit_stem.py                 # GPU; --cases a,b to pick some

* ``bcast_rows``: ``[1,197,768] -> [128,197,768]`` (a position embedding's broadcast);
* ``bcast_huge``, ``concat_huge``, ``slice_huge``, ``transpose_huge``: the data movement
  of the stride-16 dilation that the patch-embedding weight gradient used to build
  (4.3e9 elements each: 32-bit indices over a grid of y = 128 rows);
* ``colsum``: ``sum`` over ``[128,197]`` of ``[128,197,768]`` (a bias gradient);
* ``patch_embed``: forward and backward of the 16 x 16 stride-16 convolution
  ``[128,3,224,224] -> [128,768,14,14]`` through ``torch.compile(backend="tessera")``
  (the weight gradient one GEMM over the image's patches; the image needs no gradient).

Data movement is checked exactly against torch on outputs poisoned with NaN first; the
sum and the gradients against float64 (relative to the largest magnitude). Times are
medians of CUDA-event timings after warm-up; ``GB/s`` counts the bytes read and
written once. The table is printed last.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.models import _time_ms  # noqa: E402  (CUDA events, median)

B = 128


def _checked(fn: Any, args: list[Any]) -> Any:
    """``fn``'s result on the checked path (outputs poisoned with NaN first)."""
    from tessera.runtime import cuda

    spec = fn.specialize(*args)
    (out,) = cuda.run_host(spec.ir("target"), spec.name, list(args), poison=True,
                           ptx=spec.ir("ptx"))
    return out


def _movement(name: str, fn: Any, args: list[Any], peer: Callable[[], Any]) -> tuple:
    import torch

    want = peer()
    got = _checked(fn, args)
    ok = got.shape == want.shape and bool(torch.equal(got, want))
    del got
    fast = fn(*args)
    ok = ok and bool(torch.equal(fast, want))
    nbytes = sum(a.numel() * a.element_size() for a in args) + want.numel() * want.element_size()
    del fast, want
    torch.cuda.empty_cache()
    t_ts = _time_ms(lambda: fn(*args), 10)
    t_pt = _time_ms(peer, 10)
    return name, ok, "exact" if ok else "DIFFERS", t_ts, t_pt, nbytes / t_ts / 1e6


def case_bcast_rows() -> tuple:
    import torch

    import tessera as ts

    x = torch.randn(1, 197, 768, device="cuda").to(torch.bfloat16)

    @ts.jit
    def f(x):
        return ts.broadcast_to(x, [B, 197, 768])

    return _movement("bcast_rows", f, [x], lambda: x.expand(B, 197, 768).contiguous())


def case_bcast_huge() -> tuple:
    import torch

    import tessera as ts

    x = torch.randn((), device="cuda").to(torch.bfloat16)
    shape = [B, 768, 209, 14, 15]

    @ts.jit
    def f(x):
        return ts.broadcast_to(x, shape)

    return _movement("bcast_huge", f, [x], lambda: x.expand(*shape).contiguous())


def case_concat_huge() -> tuple:
    import torch

    import tessera as ts

    a = torch.randn(B, 768, 209, 14, 1, device="cuda").to(torch.bfloat16)
    b = torch.randn(B, 768, 209, 14, 15, device="cuda").to(torch.bfloat16)

    @ts.jit
    def f(a, b):
        return ts.concat([a, b], axis=4)

    return _movement("concat_huge", f, [a, b], lambda: torch.cat([a, b], dim=4))


def case_slice_huge() -> tuple:
    import torch

    import tessera as ts

    x = torch.randn(B, 768, 209, 224, device="cuda").to(torch.bfloat16)

    @ts.jit
    def f(x):
        return ts.slice(x, [0, 0, 0, 0], [B, 768, 209, 209])

    return _movement("slice_huge", f, [x], lambda: x[..., :209].contiguous())


def case_transpose_huge() -> tuple:
    import torch

    import tessera as ts

    x = torch.randn(B, 768, 209, 209, device="cuda").to(torch.bfloat16)

    @ts.jit
    def f(x):
        return ts.transpose(x, [1, 0, 2, 3])

    return _movement("transpose_huge", f, [x], lambda: x.permute(1, 0, 2, 3).contiguous())


def case_colsum() -> tuple:
    import torch

    import tessera as ts

    x = torch.randn(B, 197, 768, device="cuda").to(torch.bfloat16)

    @ts.jit
    def f(x):
        return ts.sum(x, axis=(0, 1))

    ref = x.double().sum((0, 1))
    got = _checked(f, [x])
    err = ((got.double() - ref).abs().max() / ref.abs().max()).item()
    ok = err < 1e-2
    t_ts = _time_ms(lambda: f(x))
    t_pt = _time_ms(lambda: x.sum((0, 1)))
    nbytes = x.numel() * 2 + 768 * 2
    return "colsum", ok, f"{err:.1e}", t_ts, t_pt, nbytes / t_ts / 1e6


def case_patch_embed() -> tuple:
    import torch
    import torch.nn.functional as F

    import tessera.torch as tt

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, 3, 224, 224, device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.randn(768, 3, 16, 16, device="cuda", generator=g) * 0.05).to(torch.bfloat16)
    b = torch.randn(768, device="cuda", generator=g).to(torch.bfloat16)

    def loss(x, w, b):
        return F.conv2d(x, w, b, stride=16).float().pow(2).mean()

    compiled = tt.compile(loss)
    wt, bt = w.clone().requires_grad_(), b.clone().requires_grad_()

    def step(fn: Callable[..., Any]) -> None:
        wt.grad = bt.grad = None
        fn(x, wt, bt).backward()

    step(compiled)
    got = [wt.grad.double(), bt.grad.double()]
    rep = tt.last_report()
    w64, b64 = w.double().requires_grad_(), b.double().requires_grad_()
    loss(x.double(), w64, b64).backward()
    err = max(((a - r.grad).abs().max() / r.grad.abs().max()).item()
              for a, r in zip(got, (w64, b64)))
    ok = err < 3e-2 and rep.graph_breaks == 0
    t_ts = _time_ms(lambda: step(compiled))
    t_pt = _time_ms(lambda: step(loss))
    return "patch_embed", ok, f"{err:.1e}", t_ts, t_pt, None


CASES = {
    "bcast_rows": case_bcast_rows, "colsum": case_colsum, "patch_embed": case_patch_embed,
    "bcast_huge": case_bcast_huge, "concat_huge": case_concat_huge,
    "slice_huge": case_slice_huge, "transpose_huge": case_transpose_huge,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    import torch

    rows = []
    for name in args.cases.split(","):
        try:
            rows.append(CASES[name]())
        except Exception as e:  # a failing case is a row, not the end of the run
            traceback.print_exc()
            rows.append((name, False, f"{type(e).__name__}: {str(e)[:80]}", None, None, None))
        torch.cuda.empty_cache()
        print(rows[-1], flush=True)
    print(f"\n{torch.cuda.get_device_name()}  batch {B}, bf16")
    print(f"{'case':15} {'check':>10} {'tessera ms':>11} {'torch ms':>9} {'ratio':>6} {'GB/s':>7}")
    for name, ok, check, t_ts, t_pt, gbs in rows:
        def f(v: float | None, w: int, p: int = 3) -> str:
            return f"{v:{w}.{p}f}" if v is not None else " " * (w - 1) + "-"
        ratio = t_pt / t_ts if t_ts and t_pt else None
        print(f"{name:15} {(check if ok else 'FAIL ' + check):>10} {f(t_ts, 11)} {f(t_pt, 9)} "
              f"{f(ratio, 6, 2)} {f(gbs, 7, 0)}")


if __name__ == "__main__":
    main()
