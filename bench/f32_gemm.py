"""f32 GEMMs on Hopper: accuracy against float64 and speed against cuBLAS.

Prints two tables (run on the GPU machine; ``python bench/f32_gemm.py``):

* accuracy: ``M = N = 2048`` and ``K`` = 4096 / 8192, random N(0, 1) operands; for
  torch's f32 matmul with TF32 off (cuBLAS SGEMM) and on, and Tessera's default f32
  product (3xTF32) and its TF32 product (``allow_tf32``): the worst element's error over
  the largest |C| and the normwise relative error, both against float64;
* speed: ``4096^3`` in every layout and ``8192^3`` NN, median milliseconds (CUDA events)
  and the ratio torch time / Tessera time, the peer being torch with TF32 off for the
  f32 rows and on for the tf32 rows, in the same process.

Outputs of every Tessera call are checked first (NaN-poisoned, against float64).
``--configs`` times the tf32 products with other tile configs too (a sweep).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

os.environ.setdefault("TESSERA_NO_DISK_CACHE", "1")  # a swept config is not in the key

import torch  # noqa: E402

import tessera as ts  # noqa: E402
from tessera.options import CompileOptions  # noqa: E402
from tessera.passes import matmul_config as mc  # noqa: E402
from tessera.passes.sm90 import lower_matmul_sm90 as lm  # noqa: E402
from tessera.runtime import cuda  # noqa: E402


def compiled(expr: str, allow_tf32: bool, args: list[torch.Tensor], config: str = ""):
    """The jit function of ``expr``, compiled now; ``config``
    (``bn,stages,consumers,group_m,cluster``) replaces the tile config of the tf32 kernels."""
    fn = ts.jit(eval(f"lambda a, b: {expr}", {"ts": ts}),
                options=CompileOptions.from_env(allow_tf32=allow_tf32))
    old = lm.tf32_config
    if config:
        bn, stages, consumers, group_m, cluster = (int(x) for x in config.split(","))
        cfg = mc.Sm90Config(bn=bn, stages=stages, consumers=consumers, group_m=group_m,
                            cluster=cluster)  # Sm90Gemm checks it (copies, staging)
        lm.tf32_config = lambda *_: cfg  # type: ignore[assignment]
    try:
        spec = fn.specialize(*args)
        spec.ir("ptx")
    finally:
        lm.tf32_config = old
    return fn, spec


def poisoned(spec, args: list[torch.Tensor]) -> torch.Tensor:
    return cuda.run_host(spec.ir("target"), spec.name, args, poison=True, ptx=spec.ir("ptx"))[0]


def timed(fn, reps: int = 30) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def torch_mm(expr: str, tf32: bool):
    peer = eval(f"lambda a, b: {expr}")

    def run(a, b):
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            return peer(a, b)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old

    return run


VARIANTS = {"tessera 3xtf32": False, "tessera tf32": True}
"""name -> allow_tf32."""


def accuracy(ks: list[int]) -> list[str]:
    lines = [f"{'K':>5}  {'impl':28}  {'max|err|/max|C|':>16}  {'normwise':>10}"]
    for k in ks:
        gen = torch.Generator(device="cuda").manual_seed(k)
        a = torch.randn(2048, k, device="cuda", generator=gen)
        b = torch.randn(k, 2048, device="cuda", generator=gen)
        ref = a.double() @ b.double()
        scale = float(ref.abs().max())
        outs = {"torch f32 (tf32 off)": torch_mm("a @ b", False)(a, b),
                "torch tf32 (tf32 on)": torch_mm("a @ b", True)(a, b)}
        for name, tf32 in VARIANTS.items():
            _, spec = compiled("a @ b", tf32, [a, b])
            outs[name] = poisoned(spec, [a, b])
        for name, c in outs.items():
            d = c.double() - ref
            ok = bool(torch.isfinite(c).all())
            lines.append(f"{k:>5}  {name:28}  {float(d.abs().max()) / scale:16.3e}  "
                         f"{float(d.norm() / ref.norm()):10.3e}" + ("" if ok else "  NaN!"))
        del a, b, ref, outs
    return lines


def speed(cases: list[tuple[str, int]], variants: list[str], configs: list[str]) -> list[str]:
    lines = [f"{'case':22}  {'impl':28}  {'ms':>8}  {'TFLOP/s':>8}  {'x peer':>6}  {'rel err':>8}"]
    for expr, n in cases:
        ta, tb = expr.startswith("a.T"), expr.endswith("b.T")
        layout = ("T" if ta else "N") + ("T" if tb else "N")
        gen = torch.Generator(device="cuda").manual_seed(n)
        a = torch.randn(n, n, device="cuda", generator=gen)
        b = torch.randn(n, n, device="cuda", generator=gen)
        ref = eval(f"lambda a, b: {expr}")(a.double(), b.double())
        flops = 2.0 * n**3
        peers = {}
        for tf32 in (False, True):
            mm = torch_mm(expr, tf32)
            peers[tf32] = timed(lambda mm=mm, a=a, b=b: mm(a, b))
            name = f"torch {'tf32' if tf32 else 'f32'}"
            err = float((mm(a, b).double() - ref).norm() / ref.norm())
            lines.append(f"{layout} {n}^3{'':14}"[:22] + f"  {name:28}  {peers[tf32]:8.3f}  "
                         f"{flops / peers[tf32] / 1e9:8.1f}  {'1.00':>6}  {err:8.1e}")
        runs = [(name, "") for name in variants]
        runs += [(name, c) for name in variants for c in configs]
        for name, config in runs:
            tf32 = VARIANTS[name]
            label = f"{layout} {n}^3{'':14}"[:22] + f"  {f'{name} {config}'.strip():28}"
            try:
                fn, spec = compiled(expr, tf32, [a, b], config)
            except Exception as e:  # a swept config this kernel cannot take
                lines.append(f"{label}  {str(e)[:60]}")
                continue
            c = poisoned(spec, [a, b])
            err = float((c.double() - ref).norm() / ref.norm()) if torch.isfinite(c).all() \
                else float("nan")
            ms = timed(lambda fn=fn, a=a, b=b: fn(a, b))
            lines.append(f"{label}  {ms:8.3f}  {flops / ms / 1e9:8.1f}  {peers[tf32] / ms:6.2f}  "
                         f"{err:8.1e}")
        del a, b, ref
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ks", default="4096,8192")
    p.add_argument("--sizes", default="4096")
    p.add_argument("--layouts", default="a @ b,a @ b.T,a.T @ b,a.T @ b.T")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--configs", default="", help="tile configs of the tf32 kernels to sweep, "
                   "'bn,stages,consumers,group_m,cluster' separated by ';'")
    p.add_argument("--no-accuracy", action="store_true")
    args = p.parse_args(argv)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    if not args.no_accuracy:
        print("\n".join(accuracy([int(k) for k in args.ks.split(",") if k])), flush=True)
    cases = [(e, int(n)) for n in args.sizes.split(",") for e in args.layouts.split(",")]
    configs = [c for c in args.configs.split(";") if c]
    print("\n".join(speed(cases, args.variants.split(","), configs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
