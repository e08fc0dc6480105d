"""The optimizer step over GPT-2 124M's parameter list (148 tensors, 124.4M parameters):
``tessera.optim.AdamW`` against ``torch.optim.AdamW(fused=True)`` and ``(foreach=True)``
in f32 and bf16, and ``tessera.optim.SGD`` (momentum 0.9) against torch's foreach and
fused SGD in f32.

Each row first checks: two steps from the same fresh random parameters and gradients
for Tessera and torch, both against a float64 torch reference (the error relative to
the largest parameter; Tessera's must be at most twice fused torch's plus 1e-7), and
Tessera's step run twice from the same start gives bitwise-identical parameters and
state. Then it times one step (triton's ``do_bench``, median). The table is printed last.

    python bench/optim.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def gpt2_shapes() -> list[tuple[int, ...]]:
    """GPT-2 124M's parameters in ``named_parameters`` order (Conv1D weights [in, out])."""
    d = 768
    shapes: list[tuple[int, ...]] = [(50257, d), (1024, d)]
    for _ in range(12):
        shapes += [(d,), (d,), (d, 3 * d), (3 * d,), (d, d), (d,), (d,), (d,),
                   (d, 4 * d), (4 * d,), (4 * d, d), (d,)]
    return shapes + [(d,), (d,)]


def _fresh(shapes, dtype, seed):
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    return [(torch.randn(*s, device="cuda", generator=gen) * 0.02).to(dtype) for s in shapes]


def _make(kind: str, impl: str, params):
    import torch

    import tessera.optim as topt

    if kind == "adamw":
        kw = {"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
        if impl == "tessera":
            return topt.AdamW(params, **kw)
        return torch.optim.AdamW(params, **kw, **{impl: True})
    kw = {"lr": 0.1, "momentum": 0.9}
    if impl == "tessera":
        return topt.SGD(params, **kw)
    return torch.optim.SGD(params, **kw, **{impl: True})


def _step(opt, params, grads) -> None:
    import tessera.optim as topt

    if isinstance(opt, topt.Optimizer):
        opt.step(grads)
        return
    for p, gr in zip(params, grads):
        p.grad = gr
    opt.step()


def check(kind: str, dtype, shapes) -> tuple[float, float]:
    """Errors against float64 of Tessera and fused torch; raises when Tessera is off or
    not bitwise reproducible."""
    import torch

    start = _fresh(shapes, dtype, 0)
    grads = [_fresh(shapes, dtype, 1), _fresh(shapes, dtype, 2)]
    runs = {}
    for impl, dt in (("tessera", dtype), ("tessera2", dtype), ("fused", dtype),
                     ("ref", torch.float64)):
        params = [p.clone().to(dt) for p in start]
        opt = _make(kind, "tessera" if impl.startswith("tessera") else
                    ("foreach" if impl == "ref" else impl), params)
        for gs in grads:
            _step(opt, params, [gr.to(dt) for gr in gs])
        torch.cuda.synchronize()
        runs[impl] = (params, opt)
    ref = runs["ref"][0]
    scale = max(p.abs().max().item() for p in ref)

    def err(ps):
        return max((a.double() - b).abs().max().item() for a, b in zip(ps, ref)) / scale

    e_ts, e_fused = err(runs["tessera"][0]), err(runs["fused"][0])
    for a, b in zip(runs["tessera"][0], runs["tessera2"][0]):
        if not torch.equal(a, b):
            raise AssertionError(f"{kind} {dtype}: two runs differ")
    for sa, sb in zip(runs["tessera"][1].state, runs["tessera2"][1].state):
        for name in sa:
            if name != "step" and not torch.equal(sa[name], sb[name]):
                raise AssertionError(f"{kind} {dtype}: state {name} differs between runs")
    if not e_ts <= 2 * e_fused + 1e-7:
        raise AssertionError(f"{kind} {dtype}: error {e_ts:.3e} against fused {e_fused:.3e}")
    del runs
    torch.cuda.empty_cache()
    return e_ts, e_fused


def time_step(kind: str, impl: str, dtype, shapes) -> float:
    import torch
    from triton.testing import do_bench

    params = _fresh(shapes, dtype, 3)
    grads = _fresh(shapes, dtype, 4)
    opt = _make(kind, impl, params)
    t0 = time.perf_counter()
    _step(opt, params, grads)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    ms = do_bench(lambda opt=opt, params=params, grads=grads: _step(opt, params, grads),
                  warmup=5, rep=50, return_mode="median")
    if impl == "tessera":
        print(f"  {kind} {dtype} tessera: first step {first:.1f} s", flush=True)
    del opt, params, grads
    torch.cuda.empty_cache()
    return ms


def main() -> None:
    import torch

    shapes = gpt2_shapes()
    n = sum(int(torch.tensor(s).prod()) for s in shapes)
    print(f"GPT-2 124M parameter list: {len(shapes)} tensors, {n / 1e6:.1f}M parameters",
          flush=True)
    rows = []
    cases = [("adamw", torch.float32, ("fused", "foreach")),
             ("adamw", torch.bfloat16, ("fused", "foreach")),
             ("sgd", torch.float32, ("fused", "foreach"))]
    for kind, dtype, peers in cases:
        e_ts, e_fused = check(kind, dtype, shapes)
        print(f"{kind} {dtype}: checked (error vs f64: tessera {e_ts:.2e}, fused torch "
              f"{e_fused:.2e}; bitwise equal over two runs)", flush=True)
        ours = time_step(kind, "tessera", dtype, shapes)
        peer = {p: time_step(kind, p, dtype, shapes) for p in peers}
        rows.append((kind, str(dtype).removeprefix("torch."), ours, peer))
    print(f"\n{'step':<6} {'dtype':<9} {'tessera ms':>10} {'fused ms':>9} {'foreach ms':>10} "
          f"{'vs fused':>8} {'vs foreach':>10}")
    for kind, dt, ours, peer in rows:
        print(f"{kind:<6} {dt:<9} {ours:10.3f} {peer['fused']:9.3f} {peer['foreach']:10.3f} "
              f"{peer['fused'] / ours:7.2f}x {peer['foreach'] / ours:9.2f}x")


if __name__ == "__main__":
    main()
