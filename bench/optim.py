"""The optimizer step over GPT-2 124M's parameter list (148 tensors, 124.4M parameters):
``tessera.optim.AdamW`` against ``torch.optim.AdamW(fused=True)`` and ``(foreach=True)``
in f32 and bf16, and ``tessera.optim.SGD`` (momentum 0.9) against torch's foreach and
fused SGD in f32.

Each row first checks: two steps from the same fresh random parameters and gradients
for Tessera and torch, both against a float64 torch reference (the error relative to
the largest parameter; Tessera's must be at most twice fused torch's plus 1e-7), and
Tessera's step run twice from the same start gives bitwise-identical parameters and
state. Then it times one step (triton's ``do_bench``, median), and Tessera's launches
alone (replayed from a CUDA graph: the GPU time without the Python of ``step``). The
table is printed last; ``--unroll2`` adds AdamW rows with two vectors per lane.

    python bench/optim.py [--unroll2]
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


def kernel_ms(kind: str, dtype, shapes) -> float:
    """Tessera's launches of one step alone: captured in a CUDA graph after a step, with
    the arguments of that step (no Python between steps); NaN when capture fails."""
    import torch
    from triton.testing import do_bench

    params = _fresh(shapes, dtype, 3)
    grads = _fresh(shapes, dtype, 4)
    opt = _make(kind, "tessera", params)
    _step(opt, params, grads)
    step = opt.state[0]["step"] + 1
    calls = []
    for key, group, idx, ps, states in opt._fast:
        h = opt._device_hyper(key, step, ps[0].device)
        calls.append((group, [*ps, *(grads[i] for i in idx), *states, h]))

    def run() -> None:
        for group, args in calls:
            if group.fast(args) is None:
                raise AssertionError("the prepared call declined the arguments")

    try:
        run()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run()
        ms = do_bench(graph.replay, warmup=5, rep=50, return_mode="median")
    except Exception as e:  # noqa: BLE001 - a diagnostic column
        print(f"  graph capture failed: {type(e).__name__}: {e}", flush=True)
        ms = float("nan")
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
        kern = kernel_ms(kind, dtype, shapes)
        peer = {p: time_step(kind, p, dtype, shapes) for p in peers}
        rows.append((kind, str(dtype).removeprefix("torch."), ours, kern, peer))
        print(f"  {rows[-1]}", flush=True)
    table(rows)
    if "--unroll2" in sys.argv:  # the same kernels with two vectors per lane
        from tessera.optim import _COMPILED
        from tessera.passes import tile_optim

        tile_optim.UNROLL = 2
        _COMPILED.clear()
        rows2 = []
        for kind, dtype, _ in cases[:2]:
            check(kind, dtype, shapes)
            ours = time_step(kind, "tessera", dtype, shapes)
            kern = kernel_ms(kind, dtype, shapes)
            fused = time_step(kind, "fused", dtype, shapes)
            rows2.append((kind + "/u2", str(dtype).removeprefix("torch."), ours, kern,
                          {"fused": fused, "foreach": float("nan")}))
            print(f"  {rows2[-1]}", flush=True)
        table(rows + rows2)


def table(rows) -> None:
    print(f"\n{'step':<9} {'dtype':<9} {'tessera ms':>10} {'kernels ms':>10} {'fused ms':>9} "
          f"{'foreach ms':>10} {'vs fused':>8} {'vs foreach':>10}")
    for kind, dt, ours, kern, peer in rows:
        print(f"{kind:<9} {dt:<9} {ours:10.3f} {kern:10.3f} {peer['fused']:9.3f} "
              f"{peer['foreach']:10.3f} {peer['fused'] / ours:7.2f}x "
              f"{peer['foreach'] / ours:9.2f}x", flush=True)


if __name__ == "__main__":
    main()
