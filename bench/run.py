"""Tessera against cuBLAS, Triton, torch SDPA and torch eager/compile, in one run.

    python bench/run.py --out $OUT/bench.json            # full run (GPU)
    python bench/run.py --quick --out $OUT/bench.json    # smaller sizes, fewer reps
    python bench/run.py --dry-run                        # CPU: build and ptxas-check every Tessera case

Cases (docs/PERFORMANCE.md says how to read them):

* ``gemm``: bf16 in, fp32 accumulate, bf16 out, M=N=K in 2048/4096/8192, against
  ``torch.matmul`` (cuBLAS) and a plain Triton GEMM (:mod:`bench.triton_gemm`).
* ``attention``: forward, bf16, B=4 H=16 D=128, S in 2048/8192, causal and not,
  against ``torch.nn.functional.scaled_dot_product_attention``; FLOPs
  ``4 B H S^2 D``, halved when causal.
* ``conv2d_depthwise``: depthwise ``conv2d`` (``groups = C``) at batch 64, MobileNet's
  3x3 (56x56; 112x112 stride 2) and ConvNeXt's 7x7 layers, bf16 (and f32), against
  cuDNN; GB/s from one read of the input and one write of the result.
* ``softmax`` / ``rmsnorm``: bf16 32768x8192 along the last dim, against torch eager
  and ``torch.compile``; bytes = one read and one write.
* ``rows_wide``: softmax and rmsnorm, bf16, 4096 rows (2048 at 151936) of 4096, 50257
  and 151936 elements, against torch.compile, torch eager and ``x.clone()`` (the copy
  bandwidth of the same tensor).
* ``svd``: f32, 256 batched 32x32, 1024x1024 and 4096x4096 against torch.linalg.svd
  (cuSOLVER); checked by reconstruction and orthogonality, the first call's time noted.
* ``cholesky``: f32, 64 batched 256x256 and 512x512 and one 4096x4096, against
  torch.linalg.cholesky (cuSOLVER).
* ``elementwise``: a chain of 4 elementwise ops on fp32 against the device copy
  bandwidth (``torch.Tensor.copy_`` of a tensor of the same size).
* ``data_movement``: bf16 reshape chain, head-split permute, last-dim transpose, qkv
  slice and concat at GPT-2 sizes against torch's ``.contiguous()`` / ``cat`` and the
  ``copy_`` bandwidth of as many bytes; the note counts Tessera's kernels.
* ``host_overhead``: a cached compiled function of 3 small CUDA tensors; wall time
  per call over many back-to-back calls minus the kernel time per call (CUDA
  events around the same number of launches recorded by the profiler).
* ``compile``: ``examples/transformer_block.py``'s function from Python to PTX and
  to a loaded module, each in a fresh process (:mod:`bench.compile_time`): once with
  an empty cache directory (cold), then three times with the program and cubin
  caches that the first wrote (warm).

Each Tessera result is checked against the peer first (outputs poisoned with NaN,
relative error in float64); a mismatch is reported and not timed. Every case runs
under ``try``: a failure becomes an error row with its message. Timing is
``triton.testing.do_bench`` (median, L2 flushed between runs) or CUDA events.
The table is printed last; ``--out`` writes all rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOL_BF16 = 2e-2
"""Relative error (Frobenius, float64) a bf16 result may have against its reference."""


@dataclass
class Row:
    """One line of the result table."""

    case: str
    impl: str
    ms: float | None = None
    tflops: float | None = None
    gbs: float | None = None
    ratio: float | None = None
    rel_err: float | None = None
    status: str = "ok"
    note: str = ""


@dataclass
class Ctx:
    quick: bool
    dry: bool
    rows: list[Row]
    only: str = ""
    """Row cases of ``gemm_layouts`` to run: those whose name contains this ("": all)."""
    gate: Path | None = None
    """Cases that compile first (svd) wait for this file before timing anything."""

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        if not self.dry:  # progress: a run cut short still shows its finished rows
            print(f"[bench] {row.case} | {row.impl} | ms {_fmt(row.ms, '.4f')} | "
                  f"err {_fmt(row.rel_err, '.1e')} | {row.status} {row.note}",
                  file=sys.stderr, flush=True)
        return row


# --------------------------------------------------------------------------- helpers


def _torch() -> Any:
    import torch

    return torch


def bench(fn: Callable[[], Any], quick: bool) -> float:
    """Median milliseconds of ``fn`` (triton's do_bench when available, else CUDA events)."""
    torch = _torch()
    warmup, rep = (10, 40) if quick else (25, 150)
    try:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))
    except ImportError:
        pass
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(10 if quick else 30):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def bench_few(fn: Callable[[], Any], reps: int = 2, warm: bool = True) -> float:
    """Median milliseconds of ``reps`` calls (after one warm call unless ``warm`` is
    False), CUDA events: for calls of seconds, where do_bench's estimate and
    repetitions would take minutes."""
    torch = _torch()
    if warm:
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
    times.sort()
    return times[len(times) // 2]


def rel_err(out: Any, ref: Any) -> float:
    """``|out - ref| / |ref|`` in float64 (NaN if ``out`` has NaN: an unwritten element)."""
    torch = _torch()
    o, r = out.double(), ref.double()
    if not bool(torch.isfinite(o).all()):
        return math.nan
    return float((o - r).norm() / r.norm().clamp_min(1e-300))


def tessera_output(fn: Any, args: list[Any]) -> Any:
    """Run the compiled function once with NaN-poisoned outputs; return its (first) result."""
    from tessera.runtime import cuda

    torch = _torch()
    spec = fn.specialize(*args)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]  # static arguments are compiled in
    out = cuda.run_host(spec.ir("target"), spec.name, tensors, poison=True, ptx=spec.ir("ptx"))
    return out[0]


def compile_only(fn: Any, args: list[Any]) -> str:
    """Dry run: the PTX of ``fn`` for ``args`` (numpy stand-ins), checked by ptxas."""
    from tessera.runtime import ptxas

    spec = fn.specialize(*args)
    ptx = spec.ir("ptx")
    ptxas.check(ptx)
    return ptx


def stand_in(shape: tuple[int, ...], dtype: str) -> Any:
    import ml_dtypes
    import numpy as np

    dt = {"bf16": ml_dtypes.bfloat16, "f32": np.float32, "bool": np.bool_}[dtype]
    return np.zeros(shape, dtype=dt)


def run_tessera(
    ctx: Ctx, case: str, fn: Any, args: list[Any], ref: Any, tol: float,
    flops: float | None = None, nbytes: float | None = None, dry_args: list[Any] | None = None,
) -> Row:
    """Check a Tessera function against ``ref`` (poisoned outputs), then time it."""
    if ctx.dry:
        ptx = compile_only(fn, dry_args if dry_args is not None else args)
        note = "wgmma" if "wgmma.mma_async" in ptx else ("mma.sync" if "mma.sync" in ptx else "")
        return ctx.add(Row(case, "tessera", status="compiled", note=note))
    out = tessera_output(fn, args)
    err = rel_err(out, ref)
    if not err <= tol:
        return ctx.add(Row(case, "tessera", rel_err=err, status="mismatch",
                           note=f"relative error {err:.3g} > {tol:g}; not timed"))
    ms = bench(lambda: fn(*args), ctx.quick)
    return ctx.add(_rate(Row(case, "tessera", ms=ms, rel_err=err), flops, nbytes))


def _rate(row: Row, flops: float | None, nbytes: float | None) -> Row:
    if row.ms:
        if flops:
            row.tflops = flops / (row.ms * 1e-3) / 1e12
        if nbytes:
            row.gbs = nbytes / (row.ms * 1e-3) / 1e9
    return row


def timed_peer(
    ctx: Ctx, case: str, impl: str, fn: Callable[[], Any], ref: Any | None, tol: float,
    flops: float | None = None, nbytes: float | None = None,
) -> Row:
    err = None
    if ref is not None:
        err = rel_err(fn(), ref)
        if not err <= tol:
            return ctx.add(Row(case, impl, rel_err=err, status="mismatch",
                               note=f"peer relative error {err:.3g}"))
    ms = bench(fn, ctx.quick)
    return ctx.add(_rate(Row(case, impl, ms=ms, rel_err=err), flops, nbytes))


def guarded(ctx: Ctx, case: str, impl: str, body: Callable[[], Any]) -> None:
    """Run one measurement; an exception becomes an error row."""
    try:
        body()
    except Exception as e:  # one failure must not stop the run
        msg = f"{type(e).__name__}: {e}".strip().splitlines()
        ctx.add(Row(case, impl, status="error", note=" | ".join(msg[:3])[:300]))
        if os.environ.get("TESSERA_BENCH_TRACEBACK"):
            traceback.print_exc()


def ratios(rows: list[Row]) -> None:
    """``ratio`` = the peer's time / this row's time, per case, against the case's first peer."""
    by_case: dict[str, list[Row]] = {}
    for r in rows:
        by_case.setdefault(r.case, []).append(r)
    for rs in by_case.values():
        peer = next((r for r in rs if r.impl != "tessera" and r.ms), None)
        for r in rs:
            if peer is not None and r.ms:
                r.ratio = peer.ms / r.ms


# --------------------------------------------------------------------------- cases


def case_gemm(ctx: Ctx) -> None:
    import tessera as ts

    @ts.jit
    def mm(a, b):
        return ts.matmul(a, b)

    for n in [2048, 4096] if ctx.quick else [2048, 4096, 8192]:
        _gemm_one(ctx, mm, n)


def _gemm_one(ctx: Ctx, mm: Any, n: int) -> None:
    case = f"gemm bf16 {n}^3"
    flops = 2.0 * n**3
    if ctx.dry:
        dry = [stand_in((n, n), "bf16"), stand_in((n, n), "bf16")]
        guarded(ctx, case, "tessera", lambda: run_tessera(ctx, case, mm, [], None, TOL_BF16, dry_args=dry))
        return
    torch = _torch()
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ref = a.double() @ b.double()
    guarded(ctx, case, "torch.matmul (cuBLAS)", lambda: timed_peer(
        ctx, case, "torch.matmul (cuBLAS)", lambda: torch.matmul(a, b), ref, TOL_BF16, flops))

    def triton_row() -> None:
        from bench.triton_gemm import matmul as triton_matmul

        timed_peer(ctx, case, "triton", lambda: triton_matmul(a, b), ref, TOL_BF16, flops)

    guarded(ctx, case, "triton", triton_row)
    guarded(ctx, case, "tessera", lambda: run_tessera(ctx, case, mm, [a, b], ref, TOL_BF16, flops))


GEMM_LAYOUTS: list[tuple[str, str, tuple[int, ...], tuple[int, ...], str]] = [
    # (case, expression, stored A shape, stored B shape, dtype); M, N, K from the shapes
    ("gemm bf16 NT a@w.T 8192^3", "a @ b.T", (8192, 8192), (8192, 8192), "bf16"),
    ("gemm bf16 TN a.T@b 4096^3", "a.T @ b", (4096, 4096), (4096, 4096), "bf16"),
    ("gemm bf16 NT a@b.T 4096^3", "a @ b.T", (4096, 4096), (4096, 4096), "bf16"),
    ("gemm bf16 TT 4096^3", "a.T @ b.T", (4096, 4096), (4096, 4096), "bf16"),
    ("gemm bf16 NN 8192x14336x4096", "a @ b", (8192, 4096), (4096, 14336), "bf16"),
    ("gemm bf16 NT 8192x14336x4096", "a @ b.T", (8192, 4096), (14336, 4096), "bf16"),
    ("gemm bf16 NT 16384x1024x8192", "a @ b.T", (16384, 8192), (1024, 8192), "bf16"),
    ("gemm bf16 3-D x@w.T 8x1024x4096->4096", "a @ b.T", (8, 1024, 4096), (4096, 4096), "bf16"),
    ("gemm bf16 ragged 3000x5000x2000", "a @ b", (3000, 2000), (2000, 5000), "bf16"),
    ("gemm bf16 decode M=16 8192^2", "a @ b", (16, 8192), (8192, 8192), "bf16"),
    ("gemm bf16 decode M=16 8192^2 NT", "a @ b.T", (16, 8192), (8192, 8192), "bf16"),
    ("gemm bf16 batched 32x512x512x128", "a @ b", (32, 512, 128), (32, 128, 512), "bf16"),
    # GPT-2's LM head (a vocabulary of 50257: no 16-byte rows): logits = x @ wte.T, and its
    # gradients dX = dC @ wte, dW = dC.T @ x (dC's rows are 50257 long)
    ("gemm bf16 LM head NT 8192x50257x768", "a @ b.T", (8192, 768), (50257, 768), "bf16"),
    ("gemm bf16 LM head dX NN 8192x768x50257", "a @ b", (8192, 50257), (50257, 768), "bf16"),
    ("gemm bf16 LM head dW TN 50257x768x8192", "a.T @ b", (8192, 50257), (8192, 768), "bf16"),
    # f32: Tessera's default (3xTF32) against torch with TF32 off (cuBLAS SGEMM); tf32:
    # allow_tf32 on both sides
    ("gemm f32 NN 4096^3", "a @ b", (4096, 4096), (4096, 4096), "f32"),
    ("gemm f32 NT 4096^3", "a @ b.T", (4096, 4096), (4096, 4096), "f32"),
    ("gemm f32 TN 4096^3", "a.T @ b", (4096, 4096), (4096, 4096), "f32"),
    ("gemm f32 TT 4096^3", "a.T @ b.T", (4096, 4096), (4096, 4096), "f32"),
    ("gemm f32 NN 8192^3", "a @ b", (8192, 8192), (8192, 8192), "f32"),
    ("gemm f32 ragged 3000x5000x2000", "a @ b", (3000, 2000), (2000, 5000), "f32"),
    ("gemm tf32 NN 4096^3", "a @ b", (4096, 4096), (4096, 4096), "tf32"),
    ("gemm tf32 NT 4096^3", "a @ b.T", (4096, 4096), (4096, 4096), "tf32"),
    ("gemm tf32 TN 4096^3", "a.T @ b", (4096, 4096), (4096, 4096), "tf32"),
    ("gemm tf32 TT 4096^3", "a.T @ b.T", (4096, 4096), (4096, 4096), "tf32"),
    ("gemm tf32 NN 8192^3", "a @ b", (8192, 8192), (8192, 8192), "tf32"),
    # too few output tiles for the SMs: split-K (CompileOptions.split_k, default auto)
    ("gemm bf16 split-K NN 512x512x8192", "a @ b", (512, 8192), (8192, 512), "bf16"),
    ("gemm bf16 split-K NN 1024x1024x65536", "a @ b", (1024, 65536), (65536, 1024), "bf16"),
    ("gemm bf16 split-K dW TN 768x768x32768", "a.T @ b", (32768, 768), (32768, 768), "bf16"),
    ("gemm bf16 split-K decode NT 16x4096x4096", "a @ b.T", (16, 4096), (4096, 4096), "bf16"),
    ("gemm f32 split-K NN 512x512x8192", "a @ b", (512, 8192), (8192, 512), "f32"),
    ("gemm tf32 split-K NN 512x512x8192", "a @ b", (512, 8192), (8192, 512), "tf32"),
]
TOL_TF32 = 5e-3
"""TF32 products (10-bit mantissas) against float64."""


def case_gemm_layouts(ctx: Ctx) -> None:
    """Every GEMM layout and shape family through ``ts.jit`` against ``torch.matmul`` on the
    same stored operands (a transpose is a view for torch, a layout for Tessera)."""
    import tessera as ts
    from tessera.options import CompileOptions

    layouts = GEMM_LAYOUTS[:4] if ctx.quick else GEMM_LAYOUTS
    for case, expr, ash, bsh, dt in [r for r in layouts if ctx.only in r[0]]:
        tf32 = dt == "tf32"
        options = CompileOptions.from_env(allow_tf32=True) if tf32 else None
        fn = ts.jit(eval(f"lambda a, b: {expr}", {"ts": ts}), options=options)
        if tf32:
            dt = "f32"
        if ctx.dry:
            dry = [stand_in(ash, dt), stand_in(bsh, dt)]
            guarded(ctx, case, "tessera", lambda fn=fn, dry=dry, case=case: run_tessera(
                ctx, case, fn, [], None, TOL_BF16, dry_args=dry))
            continue
        torch = _torch()
        tdt = {"bf16": torch.bfloat16, "f32": torch.float32}[dt]
        a = torch.randn(ash, device="cuda", dtype=tdt)
        b = torch.randn(bsh, device="cuda", dtype=tdt)
        peer = _with_tf32(eval(f"lambda a, b: {expr}"), tf32)
        ref = peer(a.double(), b.double())
        k = ash[0] if expr.startswith("a.T") else ash[-1]
        flops = 2.0 * ref.numel() * k
        tol = TOL_BF16 if dt == "bf16" else TOL_TF32 if tf32 else 1e-5
        guarded(ctx, case, "torch.matmul (cuBLAS)", lambda a=a, b=b, ref=ref, case=case, peer=peer,
                flops=flops, tol=tol: timed_peer(ctx, case, "torch.matmul (cuBLAS)",
                                                 lambda: peer(a, b), ref, tol, flops))
        guarded(ctx, case, "tessera", lambda a=a, b=b, ref=ref, case=case, fn=fn, flops=flops,
                tol=tol: run_tessera(ctx, case, fn, [a, b], ref, tol, flops))
        del a, b, ref
    if not ctx.quick and not ctx.only:
        _linear_epilogue(ctx)
        for out in ("bf16", "f32"):
            _fp8_gemm(ctx, 8192, out)
        _fp8_gemm(ctx, 8192, "bf16", nn=True)


def _with_tf32(fn: Callable[..., Any], allow: bool) -> Callable[..., Any]:
    """``fn`` run with ``torch.backends.cuda.matmul.allow_tf32 = allow`` (restored after)."""

    def run(*args: Any) -> Any:
        torch = _torch()
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = allow
        try:
            return fn(*args)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old

    return run


def _fp8_gemm(ctx: Ctx, n: int, out: str, nn: bool = False) -> None:
    """fp8 e4m3 ``a @ b.T`` (both K-major) against ``torch._scaled_mm`` with unit scales;
    ``nn``: ``a @ b`` with B row-major, which both sides first copy K-major."""
    import tessera as ts

    case = f"gemm fp8 e4m3 {'NN' if nn else 'NT'} {n}^3 -> {out}"
    odt = {"bf16": ts.bf16, "f32": ts.f32}[out]
    fn = ts.jit(lambda a, b: ts.matmul(a, b, transpose_b=not nn, out_dtype=odt))
    if ctx.dry:
        import ml_dtypes
        import numpy as np

        dry = [np.zeros((n, n), ml_dtypes.float8_e4m3fn)] * 2
        guarded(ctx, case, "tessera", lambda: run_tessera(ctx, case, fn, [], None, TOL_BF16,
                                                          dry_args=dry))
        return
    torch = _torch()
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    tdt = {"bf16": torch.bfloat16, "f32": torch.float32}[out]
    ref = a.double() @ (b.double() if nn else b.double().T)
    flops = 2.0 * n**3
    if nn:  # the peer needs B column-major: a copy, timed with the product
        guarded(ctx, case, "torch._scaled_mm", lambda: timed_peer(
            ctx, case, "torch._scaled_mm",
            lambda: torch._scaled_mm(a, b.T.contiguous().T, scale_a=one, scale_b=one,
                                     out_dtype=tdt),
            ref, TOL_BF16, flops))
        guarded(ctx, case, "tessera", lambda: run_tessera(ctx, case, fn, [a, b], ref, TOL_BF16,
                                                          flops))
        return
    guarded(ctx, case, "torch._scaled_mm", lambda: timed_peer(
        ctx, case, "torch._scaled_mm",
        lambda: torch._scaled_mm(a, b.T, scale_a=one, scale_b=one, out_dtype=tdt),
        ref, TOL_BF16, flops))
    guarded(ctx, case, "torch._scaled_mm fast_accum", lambda: timed_peer(
        ctx, case, "torch._scaled_mm fast_accum",
        lambda: torch._scaled_mm(a, b.T, scale_a=one, scale_b=one, out_dtype=tdt,
                                 use_fast_accum=True),
        ref, TOL_BF16, flops))
    guarded(ctx, case, "tessera", lambda: run_tessera(ctx, case, fn, [a, b], ref, TOL_BF16, flops))


def _linear_epilogue(ctx: Ctx) -> None:
    """``gelu(x @ w.T + bias)``: nn.Linear + GELU (tanh) against torch eager."""
    import tessera as ts

    case, (m, n, k) = "linear+bias+gelu bf16 8192^3", (8192, 8192, 8192)
    fn = ts.jit(lambda x, w, bias: ts.gelu(x @ w.T + bias))
    if ctx.dry:
        dry = [stand_in((m, k), "bf16"), stand_in((n, k), "bf16"), stand_in((n,), "bf16")]
        guarded(ctx, case, "tessera", lambda: run_tessera(ctx, case, fn, [], None, TOL_BF16,
                                                          dry_args=dry))
        return
    torch = _torch()
    fnn = torch.nn.functional
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 64
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    ref = fnn.gelu(fnn.linear(x.double(), w.double(), bias.double()), approximate="tanh")
    flops = 2.0 * m * n * k
    guarded(ctx, case, "torch eager", lambda: timed_peer(
        ctx, case, "torch eager", lambda: fnn.gelu(fnn.linear(x, w, bias), approximate="tanh"),
        ref, TOL_BF16, flops))
    guarded(ctx, case, "tessera", lambda: run_tessera(ctx, case, fn, [x, w, bias], ref, TOL_BF16,
                                                      flops))


def case_mlp_step(ctx: Ctx) -> None:
    """A 2-layer gelu MLP's forward and backward (gradients of both weights) through
    ``ts.grad``, against torch eager autograd, for bf16 and f32."""
    import tessera as ts

    def loss(x, w1, w2, dy):
        return ts.sum(ts.gelu(x @ w1) @ w2 * dy)

    step = ts.grad(loss, argnums=(1, 2))
    t, d, f = (1024, 512, 2048) if ctx.quick else (4096, 2048, 8192)
    torch = None if ctx.dry else _torch()
    for dt in ("bf16", "f32"):
        case = f"mlp step {dt} {t}x{d}x{f}"
        flops = 3 * 2 * 2.0 * t * d * f  # forward + two backward GEMMs per layer
        if ctx.dry:
            dry = [stand_in(s, dt) for s in ((t, d), (d, f), (f, d), (t, d))]
            guarded(ctx, case, "tessera", lambda dry=dry, case=case: run_tessera(
                ctx, case, step, [], None, TOL_BF16, dry_args=dry))
            continue
        assert torch is not None
        tdt = {"bf16": torch.bfloat16, "f32": torch.float32}[dt]
        x = torch.randn(t, d, device="cuda", dtype=tdt)
        w1 = (torch.randn(d, f, device="cuda", dtype=tdt) / d**0.5)
        w2 = (torch.randn(f, d, device="cuda", dtype=tdt) / f**0.5)
        dy = torch.randn(t, d, device="cuda", dtype=tdt)

        def eager(x=x, w1=w1, w2=w2, dy=dy, tdt=tdt):
            a, b = w1.detach().requires_grad_(), w2.detach().requires_grad_()
            y = torch.nn.functional.gelu(x @ a, approximate="tanh") @ b
            return torch.autograd.grad(y, (a, b), dy)

        a64, b64 = w1.double().requires_grad_(), w2.double().requires_grad_()
        y64 = torch.nn.functional.gelu(x.double() @ a64, approximate="tanh") @ b64
        g1, g2 = torch.autograd.grad(y64, (a64, b64), dy.double())
        tol = TOL_BF16 if dt == "bf16" else 1e-4
        guarded(ctx, case, "torch eager", lambda eager=eager, case=case, tol=tol, g1=g1,
                flops=flops: timed_peer(ctx, case, "torch eager", lambda: eager()[0], g1, tol,
                                        flops))

        def ours(case=case, x=x, w1=w1, w2=w2, dy=dy, g1=g1, g2=g2, tol=tol, flops=flops):
            gw1, gw2 = step(x, w1, w2, dy)
            errs = (rel_err(gw1, g1), rel_err(gw2, g2))
            if not max(errs) <= tol:
                ctx.add(Row(case, "tessera", rel_err=max(errs), status="mismatch",
                            note=f"gradient errors {errs[0]:.3g}, {errs[1]:.3g}; not timed"))
                return
            ms = bench(lambda: step(x, w1, w2, dy), ctx.quick)
            ctx.add(_rate(Row(case, "tessera", ms=ms, rel_err=max(errs)), flops, None))

        guarded(ctx, case, "tessera", ours)
        del x, w1, w2, dy


def case_conv2d(ctx: Ctx) -> None:
    """conv2d (NCHW) through ``ts.jit`` against cuDNN (``F.conv2d``): ResNet-50 layers at
    batch 32 (``bench/conv_sm90.py`` times all of them, with kernel times)."""
    import tessera as ts

    shapes = [  # x, w, stride, padding, dtypes
        ((32, 64, 56, 56), (64, 64, 3, 3), 1, 1, ("bf16", "f32")),
        ((32, 256, 14, 14), (256, 256, 3, 3), 1, 1, ("bf16", "f32")),
        ((32, 3, 224, 224), (64, 3, 7, 7), 2, 3, ("bf16",)),
        ((32, 256, 56, 56), (64, 256, 1, 1), 1, 0, ("bf16",)),
        ((32, 512, 7, 7), (512, 512, 3, 3), 1, 1, ("bf16",)),
    ]
    torch = None if ctx.dry else _torch()
    for xs, ws, st, pd, dts in shapes[:1] if ctx.quick else shapes:
        fn = ts.jit(lambda x, w, st=st, pd=pd: ts.conv2d(x, w, stride=st, padding=pd))
        n, c, h, w_ = xs
        ho, wo = (h + 2 * pd - ws[2]) // st + 1, (w_ + 2 * pd - ws[3]) // st + 1
        flops = 2.0 * n * ws[0] * ho * wo * c * ws[2] * ws[3]
        for dt in dts:
            case = (f"conv2d {dt} {'x'.join(map(str, xs))} k{ws[0]}x{ws[2]}x{ws[3]}"
                    + (f" s{st}p{pd}" if (st, pd) != (1, 1) else ""))
            if ctx.dry:
                dry = [stand_in(xs, dt), stand_in(ws, dt)]
                guarded(ctx, case, "tessera", lambda dry=dry, case=case, fn=fn: run_tessera(
                    ctx, case, fn, [], None, TOL_BF16, dry_args=dry))
                continue
            assert torch is not None
            torch.backends.cudnn.allow_tf32 = False  # full f32 on both sides
            tdt = {"bf16": torch.bfloat16, "f32": torch.float32}[dt]
            x = torch.randn(xs, device="cuda", dtype=tdt)
            wt = torch.randn(ws, device="cuda", dtype=tdt) / (c * ws[2] * ws[3]) ** 0.5
            ref = torch.nn.functional.conv2d(x.double(), wt.double(), stride=st, padding=pd)
            tol = TOL_BF16 if dt == "bf16" else 1e-4
            guarded(ctx, case, "cuDNN", lambda x=x, wt=wt, ref=ref, case=case, tol=tol,
                    flops=flops, st=st, pd=pd: timed_peer(
                        ctx, case, "cuDNN",
                        lambda: torch.nn.functional.conv2d(x, wt, stride=st, padding=pd),
                        ref, tol, flops))
            guarded(ctx, case, "tessera", lambda x=x, wt=wt, ref=ref, case=case, tol=tol,
                    flops=flops, fn=fn: run_tessera(ctx, case, fn, [x, wt], ref, tol, flops))


def case_conv2d_depthwise(ctx: Ctx) -> None:
    """Depthwise conv2d (``groups = C``, the plane kernel) through ``ts.jit`` against cuDNN:
    MobileNet's and ConvNeXt's layers at batch 64, bf16 and f32; GB/s counts one read of
    the input and one write of the result."""
    import tessera as ts

    shapes = [  # x, kernel, stride, padding, dtypes
        ((64, 256, 56, 56), 3, 1, 1, ("bf16", "f32")),
        ((64, 96, 112, 112), 3, 2, 1, ("bf16",)),
        ((64, 96, 56, 56), 7, 1, 3, ("bf16",)),
    ]
    torch = None if ctx.dry else _torch()
    for xs, k, st, pd, dts in shapes[:1] if ctx.quick else shapes:
        n, c, h, w_ = xs
        fn = ts.jit(lambda x, w, st=st, pd=pd, c=c: ts.conv2d(x, w, stride=st, padding=pd,
                                                            groups=c))
        ho, wo = (h + 2 * pd - k) // st + 1, (w_ + 2 * pd - k) // st + 1
        flops = 2.0 * n * c * ho * wo * k * k
        for dt in dts:
            eb = 2 if dt == "bf16" else 4
            nbytes = float(eb * n * c * (h * w_ + ho * wo))
            case = (f"conv2d depthwise {dt} {'x'.join(map(str, xs))} k{k}x{k}"
                    + (f" s{st}p{pd}" if (st, pd) != (1, 1) else ""))
            if ctx.dry:
                dry = [stand_in(xs, dt), stand_in((c, 1, k, k), dt)]
                guarded(ctx, case, "tessera", lambda dry=dry, case=case, fn=fn: run_tessera(
                    ctx, case, fn, [], None, TOL_BF16, dry_args=dry))
                continue
            assert torch is not None
            tdt = {"bf16": torch.bfloat16, "f32": torch.float32}[dt]
            x = torch.randn(xs, device="cuda", dtype=tdt)
            wt = torch.randn((c, 1, k, k), device="cuda", dtype=tdt) / k
            ref = torch.nn.functional.conv2d(x.double(), wt.double(), stride=st, padding=pd,
                                             groups=c)
            tol = TOL_BF16 if dt == "bf16" else 1e-5
            guarded(ctx, case, "cuDNN", lambda x=x, wt=wt, ref=ref, case=case, tol=tol,
                    flops=flops, nbytes=nbytes, st=st, pd=pd, c=c: timed_peer(
                        ctx, case, "cuDNN",
                        lambda: torch.nn.functional.conv2d(x, wt, stride=st, padding=pd,
                                                           groups=c),
                        ref, tol, flops, nbytes))
            guarded(ctx, case, "tessera", lambda x=x, wt=wt, ref=ref, case=case, tol=tol,
                    flops=flops, nbytes=nbytes, fn=fn: run_tessera(
                        ctx, case, fn, [x, wt], ref, tol, flops, nbytes))


def case_attention_bwd(ctx: Ctx) -> None:
    """``ts.grad`` of causal attention (dQ, dK, dV) against SDPA's backward."""
    import tessera as ts

    b, h, s, d = (1, 8, 1024, 128) if ctx.quick else (4, 16, 4096, 128)
    case = f"attention bwd causal bf16 B{b} H{h} S{s} D{d}"
    step = ts.grad(lambda q, k, v, do: ts.sum(ts.flash_attention(q, k, v, causal=True) * do),
                   argnums=(0, 1, 2))
    flops = 2.5 * 4.0 * b * h * s * s * d  # backward ~2.5x the forward, causal halves both
    if ctx.dry:
        dry = [stand_in((b, h, s, d), "bf16")] * 4
        guarded(ctx, case, "tessera", lambda: run_tessera(ctx, case, step, [], None, TOL_BF16,
                                                          dry_args=dry))
        return
    torch = _torch()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))

    def peer(q=q, k=k, v=v):
        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
        return torch.autograd.grad(sdpa(qq, kk, vv, is_causal=True), (qq, kk, vv), do)

    refs = peer()  # the peer in bf16 as the reference (float64 S^2 would not fit)
    guarded(ctx, case, "SDPA backward", lambda: timed_peer(
        ctx, case, "SDPA backward", lambda: peer()[0], None, TOL_BF16, flops))

    def ours() -> None:
        got = step(q, k, v, do)
        errs = [rel_err(g_, r) for g_, r in zip(got, refs)]
        if not max(errs) <= 2e-2:
            ctx.add(Row(case, "tessera", rel_err=max(errs), status="mismatch",
                        note=f"gradient errors {errs} against SDPA; not timed"))
            return
        ms = bench(lambda: step(q, k, v, do), ctx.quick)
        ctx.add(_rate(Row(case, "tessera", ms=ms, rel_err=max(errs)), flops, None))

    guarded(ctx, case, "tessera", ours)


def case_attention(ctx: Ctx) -> None:
    import tessera as ts

    @ts.jit
    def attn(q, k, v, causal):
        return ts.flash_attention(q, k, v, causal=causal)

    for s in [2048] if ctx.quick else [2048, 8192]:
        for causal in (False, True):
            _attention_one(ctx, attn, s, causal)


def _attention_one(ctx: Ctx, attn: Any, s: int, causal: bool) -> None:
    B, H, D = 4, 16, 128
    case = f"attention S={s}{' causal' if causal else ''}"
    flops = 4.0 * B * H * s * s * D / (2 if causal else 1)
    if ctx.dry:
        dry = [*(stand_in((B, H, s, D), "bf16") for _ in range(3)), causal]
        guarded(ctx, case, "tessera", lambda: run_tessera(ctx, case, attn, [], None, TOL_BF16, dry_args=dry))
        return
    torch = _torch()
    import torch.nn.functional as F

    q, k, v = (torch.randn(B, H, s, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    peer = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    guarded(ctx, case, "torch SDPA", lambda: timed_peer(
        ctx, case, "torch SDPA", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        None, 0, flops))
    guarded(ctx, case, "tessera", lambda: run_tessera(
        ctx, case, attn, [q, k, v, causal], peer, TOL_BF16, flops))


def _rows_cols(ctx: Ctx) -> tuple[int, int]:
    return (8192, 8192) if ctx.quick else (32768, 8192)


def case_softmax(ctx: Ctx) -> None:
    import tessera as ts

    r, c = _rows_cols(ctx)
    case = f"softmax bf16 {r}x{c}"
    nbytes = 2.0 * r * c * 2

    @ts.jit
    def sm(x):
        return ts.softmax(x, axis=-1)

    if ctx.dry:
        guarded(ctx, case, "tessera", lambda: run_tessera(
            ctx, case, sm, [], None, TOL_BF16, dry_args=[stand_in((r, c), "bf16")]))
        return
    torch = _torch()
    x = torch.randn(r, c, device="cuda", dtype=torch.bfloat16)
    ref = torch.softmax(x.double(), dim=-1)
    eager = lambda: torch.softmax(x, dim=-1)  # noqa: E731
    guarded(ctx, case, "torch eager", lambda: timed_peer(ctx, case, "torch eager", eager, ref, TOL_BF16, nbytes=nbytes))
    compiled = _compile(lambda t: torch.softmax(t, dim=-1))
    guarded(ctx, case, "torch.compile", lambda: timed_peer(
        ctx, case, "torch.compile", lambda: compiled(x), ref, TOL_BF16, nbytes=nbytes))
    guarded(ctx, case, "tessera", lambda: run_tessera(ctx, case, sm, [x], ref, TOL_BF16, nbytes=nbytes))


def case_rmsnorm(ctx: Ctx) -> None:
    import tessera as ts

    r, c = _rows_cols(ctx)
    case = f"rmsnorm bf16 {r}x{c}"
    nbytes = 2.0 * r * c * 2

    @ts.jit
    def rms(x):
        return ts.rmsnorm(x, eps=1e-6)

    if ctx.dry:
        guarded(ctx, case, "tessera", lambda: run_tessera(
            ctx, case, rms, [], None, TOL_BF16, dry_args=[stand_in((r, c), "bf16")]))
        return
    torch = _torch()
    x = torch.randn(r, c, device="cuda", dtype=torch.bfloat16)

    def eager_rms(t: Any) -> Any:
        f = t.float()
        return (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-6)).to(t.dtype)

    xd = x.double()
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6)
    guarded(ctx, case, "torch eager", lambda: timed_peer(
        ctx, case, "torch eager", lambda: eager_rms(x), ref, TOL_BF16, nbytes=nbytes))
    compiled = _compile(eager_rms)
    guarded(ctx, case, "torch.compile", lambda: timed_peer(
        ctx, case, "torch.compile", lambda: compiled(x), ref, TOL_BF16, nbytes=nbytes))
    guarded(ctx, case, "tessera", lambda: run_tessera(ctx, case, rms, [x], ref, TOL_BF16, nbytes=nbytes))


ROW_WIDTHS = (4096, 50257, 151936)
"""Row widths of the ``rows_wide`` case: a hidden size, GPT-2's and Qwen's vocabularies."""


def _row_count(ctx: Ctx, c: int) -> int:
    rows = 1024 if ctx.quick else 4096
    return rows // 2 if c > 100000 else rows


def case_rows_wide(ctx: Ctx) -> None:
    """softmax and rmsnorm (bf16) at :data:`ROW_WIDTHS` against torch eager,
    ``torch.compile`` and a device copy of the same tensor (``x.clone()``: the copy
    bandwidth, one read and one write)."""
    import tessera as ts

    @ts.jit
    def sm(x):
        return ts.softmax(x, axis=-1)

    @ts.jit
    def rms(x):
        return ts.rmsnorm(x, eps=1e-6)

    for c in ROW_WIDTHS:
        r = _row_count(ctx, c)
        nbytes = 2.0 * r * c * 2
        for name, fn in (("softmax", sm), ("rmsnorm", rms)):
            _rows_wide_one(ctx, f"{name} bf16 {r}x{c}", name, fn, r, c, nbytes)


def _dry(ctx: Ctx, case: str, fn: Any, shape: tuple[int, ...], dtype: str) -> None:
    guarded(ctx, case, "tessera", lambda: run_tessera(
        ctx, case, fn, [], None, 0.0, dry_args=[stand_in(shape, dtype)]))


def _rows_wide_one(ctx: Ctx, case: str, name: str, fn: Any, r: int, c: int, nbytes: float) -> None:
    if ctx.dry:
        _dry(ctx, case, fn, (r, c), "bf16")
        return
    torch = _torch()
    x = torch.randn(r, c, device="cuda", dtype=torch.bfloat16)

    def eager(t: Any) -> Any:
        if name == "softmax":
            return torch.softmax(t, dim=-1)
        f = t.float()
        return (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-6)).to(t.dtype)

    ref = torch.empty(r, c, dtype=torch.float64, device="cuda")
    for i in range(0, r, 256):  # float64 reference in slices (memory)
        xd = x[i:i + 256].double()
        ref[i:i + 256] = (torch.softmax(xd, dim=-1) if name == "softmax"
                          else xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6))
    compiled = _compile(eager)
    guarded(ctx, case, "torch.compile", lambda: timed_peer(
        ctx, case, "torch.compile", lambda: compiled(x), ref, TOL_BF16, nbytes=nbytes))
    guarded(ctx, case, "torch eager", lambda: timed_peer(
        ctx, case, "torch eager", lambda: eager(x), ref, TOL_BF16, nbytes=nbytes))
    guarded(ctx, case, "copy", lambda: timed_peer(
        ctx, case, "copy (x.clone)", lambda: x.clone(), None, 0.0, nbytes=nbytes))
    guarded(ctx, case, "tessera", lambda: run_tessera(ctx, case, fn, [x], ref, TOL_BF16, nbytes=nbytes))


SVD_SIZES = ((256, 32, 32), (1, 1024, 1024), (1, 4096, 4096))
"""(batch, m, n) of the ``svd`` case."""


def case_svd(ctx: Ctx) -> None:
    """Singular values and vectors of f32 matrices against ``torch.linalg.svd``
    (cuSOLVER), checked first: ``|U S Vh - A| / |A|`` and the orthogonality of U."""
    import tessera as ts
    from tessera import op

    @ts.jit
    def svd(a):
        return op.svd(a)

    shapes = [(b, m, n) if b > 1 else (m, n) for b, m, n in SVD_SIZES]
    if ctx.dry:
        for shape in shapes:
            _dry(ctx, f"svd f32 {'x'.join(map(str, shape))}", svd, shape, "f32")
        return
    torch = _torch()
    inputs: dict[tuple[int, ...], tuple[Any, float]] = {}
    for shape in shapes:  # compile every size first (then --gate)
        a = torch.randn(*shape, device="cuda", dtype=torch.float32)
        t = time.perf_counter()
        guarded(ctx, f"svd f32 {'x'.join(map(str, shape))}", "-",
                lambda a=a: svd.specialize(a).ir("ptx"))
        inputs[shape] = (a, time.perf_counter() - t)
    wait_gate(ctx)
    for shape, (a, compile_s) in inputs.items():
        case = f"svd f32 {'x'.join(map(str, shape))}"
        guarded(ctx, case, "-", lambda case=case, a=a, c=compile_s: _svd_body(ctx, case, svd, a, c))


def wait_gate(ctx: Ctx, limit_s: float = 600.0) -> None:
    """Wait until ``ctx.gate`` exists (``--gate``; at most ``limit_s``)."""
    t = time.perf_counter()
    while ctx.gate is not None and not ctx.gate.exists() and time.perf_counter() - t < limit_s:
        time.sleep(0.5)


def _svd_body(ctx: Ctx, case: str, fn: Any, a: Any, compile_s: float) -> None:
    torch = _torch()
    peer = lambda: torch.linalg.svd(a, full_matrices=False)  # noqa: E731
    large = a.shape[-1] >= 4096
    if large:  # seconds per call: one warm call, one timed (the first call warms Tessera)
        ctx.add(Row(case, "torch.linalg.svd", ms=bench_few(peer, reps=1)))
    else:
        ctx.add(Row(case, "torch.linalg.svd", ms=bench(peer, True)))
    t = time.perf_counter()
    u, s, vh = fn(a)
    torch.cuda.synchronize()
    first = time.perf_counter() - t
    ad = a.double()
    rec = (u.double() * s.double().unsqueeze(-2)) @ vh.double()
    err = float((rec - ad).norm() / ad.norm())
    k = s.shape[-1]
    eye = torch.eye(k, device="cuda", dtype=torch.float64)
    uo = float((u.double().mT @ u.double() - eye).abs().max())
    vo = float((vh.double() @ vh.double().mT - eye).abs().max())
    note = f"max|U'U-I| {uo:.1e}, max|VhVh'-I| {vo:.1e}; compile {compile_s:.0f} s, first call {first:.2f} s"
    if not (err <= 1e-4 and max(uo, vo) <= 1e-4):
        ctx.add(Row(case, "tessera", rel_err=err, status="mismatch", note=note))
        return
    ms = bench_few(lambda: fn(a), reps=1, warm=False) if large else bench(lambda: fn(a), True)
    ctx.add(Row(case, "tessera", ms=ms, rel_err=err, note=note))


CHOLESKY_SIZES = ((64, 256), (64, 512), (1, 4096))
"""(batch, n) of the ``cholesky`` case."""


def case_cholesky(ctx: Ctx) -> None:
    """Cholesky factors of f32 SPD matrices against ``torch.linalg.cholesky``."""
    import tessera as ts
    from tessera import op

    @ts.jit
    def chol(a):
        return op.cholesky(a)

    for b, n in CHOLESKY_SIZES:
        shape = (b, n, n) if b > 1 else (n, n)
        case = f"cholesky f32 {'x'.join(map(str, shape))}"
        if ctx.dry:
            _dry(ctx, case, chol, shape, "f32")
        else:
            _cholesky_one(ctx, case, chol, b, n, shape)


def _cholesky_one(ctx: Ctx, case: str, chol: Any, b: int, n: int, shape: tuple[int, ...]) -> None:
    torch = _torch()
    g = torch.randn(*shape, device="cuda", dtype=torch.float64)
    a = (g @ g.mT / n + torch.eye(n, device="cuda", dtype=torch.float64)).float()
    ref = torch.linalg.cholesky(a.double())
    flops = b * n ** 3 / 3.0
    guarded(ctx, case, "torch.linalg.cholesky", lambda: timed_peer(
        ctx, case, "torch.linalg.cholesky", lambda: torch.linalg.cholesky(a), ref, 1e-4,
        flops=flops))
    guarded(ctx, case, "tessera", lambda: run_tessera(ctx, case, chol, [a], ref, 1e-4, flops))

def _compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    return _torch().compile(fn)


def case_elementwise(ctx: Ctx) -> None:
    import tessera as ts

    n = (1 << 24) if ctx.quick else (1 << 28)
    case = f"elementwise x4 fp32 {n}"
    nbytes = 2.0 * n * 4

    @ts.jit
    def chain(x):
        return ts.relu(x * 2.0 + 1.0) * 0.5

    if ctx.dry:
        guarded(ctx, case, "tessera", lambda: run_tessera(
            ctx, case, chain, [], None, 1e-5, dry_args=[stand_in((n,), "f32")]))
        return
    torch = _torch()
    x = torch.randn(n, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    guarded(ctx, case, "torch copy_ (bandwidth)", lambda: timed_peer(
        ctx, case, "torch copy_ (bandwidth)", lambda: y.copy_(x), None, 0, nbytes=nbytes))
    ref = torch.relu(x.double() * 2.0 + 1.0) * 0.5
    guarded(ctx, case, "torch eager", lambda: timed_peer(
        ctx, case, "torch eager", lambda: torch.relu(x * 2.0 + 1.0) * 0.5, ref, 1e-6, nbytes=nbytes))
    guarded(ctx, case, "tessera", lambda: run_tessera(ctx, case, chain, [x], ref, 1e-6, nbytes=nbytes))


def case_data_movement(ctx: Ctx) -> None:
    """Data movement in bf16 at GPT-2 124M inference sizes (batch 8 x 1024): a reshape
    chain (views: the one kernel is the copy the result needs, as it may not alias the
    argument), the head split permute ``[8,1024,12,64] -> [8,12,1024,64]``, a
    last-dim transpose, the qkv slice and a concat, each against torch's
    ``.contiguous()`` / ``cat`` and against ``copy_`` of as many bytes (the bandwidth
    bar). GB/s counts bytes read plus written."""
    import tessera as ts

    b = 2 if ctx.quick else 8
    s_, h, d = 1024, 12, 64
    e = h * d
    cases: list[tuple[str, Any, list[tuple[int, ...]], Callable[..., Any]]] = [
        (f"reshape chain bf16 [{b},{s_},{e}]",
         ts.jit(lambda x: ts.reshape(ts.reshape(ts.reshape(x, (b, s_, h, d)), (b * s_, e)),
                                     (b, s_, e))),
         [(b, s_, e)], lambda x: x.view(b, s_, h, d).view(b * s_, e).view(b, s_, e).clone()),
        (f"permute bf16 [{b},{s_},{h},{d}]->[{b},{h},{s_},{d}]",
         ts.jit(lambda x: ts.transpose(x, [0, 2, 1, 3])),
         [(b, s_, h, d)], lambda x: x.permute(0, 2, 1, 3).contiguous()),
        (f"transpose last bf16 [{b},{h},{s_},{d}]->[{b},{h},{d},{s_}]",
         ts.jit(lambda x: ts.transpose(x, [0, 1, 3, 2])),
         [(b, h, s_, d)], lambda x: x.transpose(-1, -2).contiguous()),
        (f"slice bf16 [{b},{s_},{3 * e}][..., {e}:{2 * e}]",
         ts.jit(lambda x: ts.slice(x, [0, 0, e], [b, s_, 2 * e])),
         [(b, s_, 3 * e)], lambda x: x[..., e:2 * e].contiguous()),
        (f"concat bf16 2x[{b},{s_},{e}] axis -1",
         ts.jit(lambda x, y: ts.concat([x, y], axis=-1)),
         [(b, s_, e), (b, s_, e)], lambda x, y: torch.cat([x, y], dim=-1)),
    ]
    torch = None if ctx.dry else _torch()
    for case, fn, shapes, peer in cases:
        if ctx.dry:
            guarded(ctx, case, "tessera", lambda fn=fn, shapes=shapes, case=case: run_tessera(
                ctx, case, fn, [], None, 0.0, dry_args=[stand_in(sh, "bf16") for sh in shapes]))
            continue
        assert torch is not None
        gen = torch.Generator(device="cuda").manual_seed(len(case))
        xs = [torch.randn(*sh, device="cuda", dtype=torch.bfloat16, generator=gen)
              for sh in shapes]
        ref = peer(*xs).double()
        nbytes = 2.0 * ref.numel() * 2
        src = torch.empty(ref.shape, device="cuda", dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        guarded(ctx, case, "torch copy_ (bandwidth)", lambda src=src, dst=dst, case=case, nbytes=nbytes: timed_peer(
            ctx, case, "torch copy_ (bandwidth)", lambda: dst.copy_(src), None, 0, nbytes=nbytes))
        guarded(ctx, case, "torch eager", lambda xs=xs, peer=peer, ref=ref, case=case, nbytes=nbytes: timed_peer(
            ctx, case, "torch eager", lambda: peer(*xs), ref, 0.0, nbytes=nbytes))

        def ours(fn=fn, xs=xs, ref=ref, case=case, nbytes=nbytes) -> None:
            row = run_tessera(ctx, case, fn, xs, ref, 0.0, nbytes=nbytes)
            launches = sum(op.name == "ttarget.launch"
                           for op in fn.specialize(*xs).ir("target").walk())
            row.note = (row.note + f" {launches} kernel(s)").strip()

        guarded(ctx, case, "tessera", ours)


def case_host_overhead(ctx: Ctx) -> None:
    import tessera as ts

    case = "host overhead (3 args)"
    n = 1024

    @ts.jit
    def pick(c, a, b):
        return ts.where(c, a, b)

    if ctx.dry:
        guarded(ctx, case, "tessera", lambda: run_tessera(
            ctx, case, pick, [], None, 0,
            dry_args=[stand_in((n,), "bool"), stand_in((n,), "f32"), stand_in((n,), "f32")]))
        return

    def body() -> None:
        torch = _torch()
        a = torch.randn(n, device="cuda")
        b = torch.randn(n, device="cuda")
        c = a > 0
        out = tessera_output(pick, [c, a, b])
        if not torch.equal(out, torch.where(c, a, b)):
            ctx.add(Row(case, "tessera", status="mismatch", note="where(c, a, b) differs from torch"))
            return
        calls = 2000 if ctx.quick else 10000
        for _ in range(50):
            pick(c, a, b)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            pick(c, a, b)
        torch.cuda.synchronize()
        per_call = (time.perf_counter() - t0) / calls
        kernel = _kernel_seconds(lambda: pick(c, a, b), 200)
        ctx.add(Row(case, "tessera", ms=per_call * 1e3,
                    note=f"host overhead {(per_call - kernel) * 1e6:.1f} us/call "
                         f"(wall {per_call * 1e6:.1f} us, kernels {kernel * 1e6:.1f} us)"))
        t0 = time.perf_counter()
        for _ in range(calls):
            torch.where(c, a, b)
        torch.cuda.synchronize()
        eager = (time.perf_counter() - t0) / calls
        ctx.add(Row(case, "torch eager", ms=eager * 1e3, note=f"wall {eager * 1e6:.1f} us/call"))

    guarded(ctx, case, "tessera", body)


def _kernel_seconds(fn: Callable[[], Any], calls: int) -> float:
    """Device time per call: the summed durations of the kernels the profiler saw."""
    torch = _torch()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    total_us = sum(
        e.device_time_total for e in prof.key_averages() if e.device_time_total > 0 and e.count
    )
    return total_us * 1e-6 / calls


def case_compile(ctx: Ctx) -> None:
    """Cold and warm compiles, each in a fresh process (:mod:`bench.compile_time`)."""
    from bench import compile_time

    case = "compile transformer_block"

    def body() -> None:
        cold, warm = compile_time.cold_and_warm(gpu=not ctx.dry, warm_runs=3)
        for label, r in [("cold", cold), *(("warm", w) for w in warm)]:
            total = r["ptx_s"] + r["launch_s"] + r["load_s"]
            ctx.add(Row(case, f"tessera ({label})", ms=total * 1e3,
                        note=f"python->ptx {r['ptx_s'] * 1e3:.0f} ms, launch module "
                             f"{r['launch_s'] * 1e3:.0f} ms, ptx->module {r['load_s'] * 1e3:.0f} ms, "
                             f"program cache {'hit' if r['program_cache_hit'] else 'miss'}"))

    guarded(ctx, case, "tessera", body)


CASES: dict[str, Callable[[Ctx], None]] = {
    "gemm": case_gemm,
    "gemm_layouts": case_gemm_layouts,
    "mlp_step": case_mlp_step,
    "conv2d": case_conv2d,
    "conv2d_depthwise": case_conv2d_depthwise,
    "attention_bwd": case_attention_bwd,
    "attention": case_attention,
    "softmax": case_softmax,
    "rmsnorm": case_rmsnorm,
    "rows_wide": case_rows_wide,
    "svd": case_svd,
    "cholesky": case_cholesky,
    "elementwise": case_elementwise,
    "data_movement": case_data_movement,
    "host_overhead": case_host_overhead,
    "compile": case_compile,
}


# --------------------------------------------------------------------------- output


def _fmt(v: float | None, spec: str) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def table(rows: list[Row]) -> str:
    head = ("case", "impl", "ms", "TFLOP/s", "GB/s", "x peer", "rel err", "status")
    body = [
        (r.case, r.impl, _fmt(r.ms, ".4f"), _fmt(r.tflops, ".1f"), _fmt(r.gbs, ".0f"),
         _fmt(r.ratio, ".2f"), _fmt(r.rel_err, ".1e"), r.status + (f": {r.note}" if r.note else ""))
        for r in rows
    ]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head) - 1)]
    lines = []
    for x in [head, *body]:
        lines.append("  ".join(x[i].ljust(widths[i]) for i in range(len(head) - 1)) + "  " + x[-1])
    return "\n".join(lines)


def environment(dry: bool) -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "dry_run": dry}
    try:
        env["commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except Exception:
        pass
    try:
        import torch

        env["torch"] = torch.__version__
        if torch.cuda.is_available():
            env["device"] = torch.cuda.get_device_name()
            env["capability"] = list(torch.cuda.get_device_capability())
    except Exception:
        pass
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:
        pass
    env["date"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    return env


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="write the rows as JSON here")
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repetitions")
    p.add_argument("--dry-run", action="store_true", help="compile every Tessera case and ptxas-check it (no GPU)")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    p.add_argument("--tune", action="store_true", help="autotune sm90 matmul tile shapes first (TESSERA_AUTOTUNE=1)")
    p.add_argument("--strict", action="store_true", help="exit 1 when a Tessera row is not ok")
    p.add_argument("--only", default="", help="gemm_layouts: only the rows whose case name "
                   "contains this (e.g. 'f32')")
    p.add_argument("--gate", type=Path, help="svd: compile, then wait for this file to exist before timing")
    args = p.parse_args(argv)
    if args.dry_run:
        os.environ.setdefault("TESSERA_SM90_MATMUL", "1")  # check the Hopper GEMM path too
    if args.tune:
        os.environ["TESSERA_AUTOTUNE"] = "1"
    ctx = Ctx(quick=args.quick, dry=args.dry_run, rows=[], only=args.only, gate=args.gate)
    t0 = time.perf_counter()
    for name in [c.strip() for c in args.cases.split(",") if c.strip()]:
        if name not in CASES:
            ctx.add(Row(name, "-", status="error", note=f"unknown case (known: {', '.join(CASES)})"))
            continue
        t = time.perf_counter()
        try:
            CASES[name](ctx)
        except Exception as e:
            ctx.add(Row(name, "-", status="error", note=f"{type(e).__name__}: {e}"[:300]))
        print(f"[bench] {name}: {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
        if not args.dry_run:
            try:
                _torch().cuda.empty_cache()
            except Exception:
                pass
    ratios(ctx.rows)
    result = {"environment": environment(args.dry_run), "seconds": time.perf_counter() - t0,
              "rows": [asdict(r) for r in ctx.rows]}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    print(table(ctx.rows))
    bad = [r for r in ctx.rows if r.impl == "tessera" and r.status not in ("ok", "compiled")]
    return 1 if args.strict and bad else 0


if __name__ == "__main__":
    sys.exit(main())
