"""Compile time by stage of a transformer's gradient, on the CPU (no GPU needed).

    python bench/compile_stages.py [--layers 6] [--tokens 2048] [--profile]

Builds ``ts.grad`` of a stack of pre-norm transformer layers (layer norm, fused q/k/v
projection, causal flash attention, output projection, gelu MLP; bf16, head size 64,
the sizes of GPT-2 small) for ``--tokens`` tokens, specializes it on meta arrays and
times each compile stage in turn: ``graph`` (the Graph IR passes), ``tile`` (kernels,
with the sm90 kernels forced on as on an H100), ``target`` and ``ptx``. The program cache
is off, so every stage runs. ``--profile`` prints the hottest functions of the slowest
stage (cProfile). ``bench/compile_time.py`` times the whole compile of a small block, cold
and warm, instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

D, HEADS = 768, 12
STAGES = ("graph", "tile", "target", "ptx")


def build(layers: int, tokens: int):
    """``(grad function, meta arguments)`` of the ``layers``-layer stack."""
    import ml_dtypes
    import numpy as np

    import tessera as ts

    def layer(x, wqkv, wo, w1, w2):
        q, k, v = ts.split_qkv(ts.matmul(ts.layernorm(x), wqkv), heads=HEADS)
        a = ts.flash_attention(q, k, v, causal=True)
        x = x + ts.matmul(ts.reshape(ts.transpose(a, (1, 0, 2)), (tokens, D)), wo)
        return x + ts.matmul(ts.gelu(ts.matmul(ts.layernorm(x), w1)), w2)

    def loss(x, weights):
        for i in range(layers):
            x = layer(x, *weights[4 * i:4 * i + 4])
        return ts.sum(ts.cast(x, "f32") * ts.cast(x, "f32"))

    # ts.grad differentiates positional parameters: one per weight
    names = [f"w{i}" for i in range(4 * layers)]
    namespace = {"loss": loss}
    exec(f"def model(x, {', '.join(names)}):\n    return loss(x, [{', '.join(names)}])\n",
         namespace)
    model = namespace["model"]

    bf16 = ml_dtypes.bfloat16
    args = [np.zeros((tokens, D), bf16)]
    for _ in range(layers):
        args += [np.zeros(s, bf16) for s in ((D, 3 * D), (D, D), (D, 4 * D), (4 * D, D))]
    return ts.grad(model, argnums=tuple(range(1, 1 + 4 * layers))), args


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    os.environ["TESSERA_SM90_MATMUL"] = "1"
    os.environ["TESSERA_NO_DISK_CACHE"] = "1"
    import torch  # noqa: F401  (imported by the sm90 lowering: not compile time)

    grad, args = build(a.layers, a.tokens)
    spec = grad.specialize(*args)
    times = {}
    for stage in STAGES:
        t0 = time.perf_counter()
        spec.ir(stage)
        times[stage] = time.perf_counter() - t0
    total = sum(times.values())
    print(f"{a.layers} layers, {a.tokens} tokens: "
          + ", ".join(f"{s} {t:.2f} s" for s, t in times.items()) + f"; total {total:.2f} s")
    if a.profile:
        import cProfile
        import pstats

        slowest = max(times, key=times.__getitem__)
        spec = build(a.layers, a.tokens)[0].specialize(*args)
        for stage in STAGES[:STAGES.index(slowest)]:
            spec.ir(stage)
        prof = cProfile.Profile()
        prof.runcall(spec.ir, slowest)
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
