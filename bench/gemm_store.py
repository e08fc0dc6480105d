"""The sm90 GEMM's two stores of results TMA does not store, against torch.matmul.

    python bench/gemm_store.py                 # GPU: check, time, print the table last
    python bench/gemm_store.py --dry-run       # no GPU: compile every program, ptxas

For each case the product runs through ``ts.jit`` with ``CompileOptions.sm90_store``
``staged`` (the result moves through shared memory and leaves in coalesced row stores,
:mod:`tessera.passes.sm90.staged_store`) and ``registers`` (``st.global`` from the wgmma
accumulators), and as ``torch.matmul`` (cuBLAS; f32 with TF32 off), on the same inputs in
one process:

* ``[8192, 768] @ [768, 50257]`` bf16 (GPT-2's logits, vocabulary 50257: odd N, 2-byte
  stores; B's rows are no 16-byte multiple, so both Tessera rows include B's padded copy)
  and ``x @ wte.T`` (the weight as stored, ``[50257, 768]``: no copy);
* ``[4096, 4096] @ [4096, 4100]`` bf16 (``N % 8 == 4``: 8-byte stores; B padded);
* ``4096^3`` f32 (the 3xTF32 product, f32 result: 16-byte stores).

Every output is first computed with its buffers NaN-filled and compared with float64
(``|C - ref| / |ref|``) and the two stores' outputs bitwise; a result over the tolerance is
not timed. Timing: CUDA events around each call, median of 30 after a warm-up. ``x torch``
is torch's time over the row's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import tessera as ts  # noqa: E402
from bench.models import _time_ms  # noqa: E402  (CUDA events, median)
from tessera.options import CompileOptions  # noqa: E402

CASES = {  # name: (expression, A shape, B shape, dtype)
    "lm_head": ("a @ b", (8192, 768), (768, 50257), "bf16"),
    "lm_head_wT": ("a @ b.T", (8192, 768), (50257, 768), "bf16"),
    "n4100": ("a @ b", (4096, 4096), (4096, 4100), "bf16"),
    "f32": ("a @ b", (4096, 4096), (4096, 4096), "f32"),
}
TOL = {"bf16": 1e-2, "f32": 1e-5}
STORES = ("staged", "registers")


def _options(store: str, gpu: bool) -> CompileOptions:
    if gpu:
        return CompileOptions.from_env(sm90_store=store)
    return CompileOptions(sm90_kernels=True, sm90_store=store, arch="sm_90")


def _title(name: str) -> str:
    expr, ash, bsh, dt = CASES[name]
    b = f"[{bsh[0]},{bsh[1]}]" + (".T" if expr.endswith(".T") else "")
    return f"{dt} [{ash[0]},{ash[1]}]@{b}"


def dry_run(names: list[str]) -> list[str]:
    """Compile both programs of each case for sm_90a and assemble them (no GPU)."""
    import ml_dtypes
    import numpy as np

    from tessera.runtime import ptxas

    np_types = {"bf16": ml_dtypes.bfloat16, "f32": np.float32}
    lines = [f"{'case':34}  {'impl':18}  status"]
    for name in names:
        expr, ash, bsh, dt = CASES[name]
        args = [np.zeros(ash, np_types[dt]), np.zeros(bsh, np_types[dt])]
        for store in STORES:
            fn = ts.jit(eval(f"lambda a, b: {expr}"), options=_options(store, False))
            ptx = fn.specialize(*args).ir("ptx")
            ptxas.check(ptx)
            staged = any("wgmma" in k and "ld.shared" in k for k in ptx.split(".visible .entry"))
            lines.append(f"{_title(name):34}  {'tessera ' + store:18}  compiled, ptxas ok"
                         + (", staged" if staged else ""))
    return lines


def rel_err(c, ref) -> float:
    """``|c - ref| / |ref|``; NaN when ``c`` has a non-finite element (an unwritten one)."""
    import torch

    if not bool(torch.isfinite(c).all()):
        return float("nan")
    return float((c.double() - ref).norm() / ref.norm())


def run(names: list[str]) -> list[str]:
    import torch

    from tessera.runtime import cuda

    torch.backends.cuda.matmul.allow_tf32 = False  # the f32 peer is full f32 (SGEMM)
    tdt = {"bf16": torch.bfloat16, "f32": torch.float32}
    lines = [f"{'case':34}  {'impl':18}  {'ms':>8}  {'TFLOP/s':>8}  {'x torch':>7}  "
             f"{'rel err':>8}  note"]
    for name in names:
        expr, ash, bsh, dt = CASES[name]
        gen = torch.Generator(device="cuda").manual_seed(len(lines))
        a = torch.randn(ash, device="cuda", generator=gen).to(tdt[dt])
        b = (torch.randn(bsh, device="cuda", generator=gen) / 8).to(tdt[dt])
        peer = eval(f"lambda a, b: {expr}")
        ref = peer(a.double(), b.double())
        m, k = ash
        n = bsh[0] if expr.endswith(".T") else bsh[1]
        flops = 2.0 * m * n * k

        t_torch = _time_ms(lambda a=a, b=b, peer=peer: peer(a, b), 30)
        lines.append(f"{_title(name):34}  {'torch.matmul':18}  {t_torch:8.3f}  "
                     f"{flops / t_torch / 1e9:8.1f}  {1.0:7.2f}  {rel_err(peer(a, b), ref):8.1e}")
        outs = {}
        for store in STORES:
            fn = ts.jit(eval(f"lambda a, b: {expr}"), options=_options(store, True))
            spec = fn.specialize(a, b)
            c = cuda.run_host(spec.ir("target"), spec.name, [a, b], poison=True,
                              ptx=spec.ir("ptx"))[0]
            torch.cuda.synchronize()
            err = rel_err(c, ref)
            outs[store] = c
            label = f"{_title(name):34}  {'tessera ' + store:18}"
            if not err < TOL[dt]:
                lines.append(f"{label}  {'-':>8}  {'-':>8}  {'-':>7}  {err:8.1e}  WRONG, not timed")
                continue
            ms = _time_ms(lambda fn=fn, a=a, b=b: fn(a, b), 30)
            note = ""
            if store == "registers" and "staged" in outs:
                note = "bitwise = staged" if torch.equal(outs["staged"], c) else "DIFFERS from staged"
            lines.append(f"{label}  {ms:8.3f}  {flops / ms / 1e9:8.1f}  {t_torch / ms:7.2f}  "
                         f"{err:8.1e}  {note}")
        del a, b, ref, outs
        torch.cuda.empty_cache()
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    p.add_argument("--dry-run", action="store_true", help="compile and assemble only (no GPU)")
    args = p.parse_args(argv)
    names = [c for c in args.cases.split(",") if c]
    unknown = [c for c in names if c not in CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; cases: {', '.join(CASES)}")
    t0 = time.time()
    lines = dry_run(names) if args.dry_run else run(names)
    print(f"# sm90 GEMM stores ({time.time() - t0:.0f} s)")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
