"""The sm90 GEMM kernel over its tile configurations, against cuBLAS, in one run.

    python bench/gemm_sweep.py --out $OUT/sweep.json      # GPU: M=N=K in 2048/4096/8192
    python bench/gemm_sweep.py --dry-run                  # CPU: build every config, ptxas -v

For each size (bf16 in, f32 accumulate, bf16 out, ``C = A @ B`` with M = N = K):

* ``cuBLAS``: ``torch.matmul``.
* one row per configuration of :func:`tessera.passes.matmul_config.search_space`
  (the heuristic's first, marked ``*``), the kernel launched directly through
  :func:`tessera.tuning.sm90.gemm_runner` (no front end);
* ``ts.jit``: the whole ``@ts.jit`` call (front end, host plan, launch), to show
  the host overhead next to the kernel.

Every result is first computed into an output filled with NaN and compared with
``A @ B`` in float64 (``|C - ref| / |ref|``, bf16 tolerance 1e-2); a mismatch is
reported and not timed. Timing: ``triton.testing.do_bench`` in median mode (L2
flushed between repetitions), else the median of CUDA-event-timed runs. ``host us``
is the wall time per call of 100 back-to-back calls without synchronizing (what
the host spends to enqueue one call). ``regs`` is the register count at kernel
entry (``cuFuncGetAttribute``, or ``ptxas -v`` in the dry run; ``setmaxnreg``
moves registers between warpgroups after entry).

The table is printed last; ``--out`` writes every row and the environment as JSON.
``--budget`` seconds bounds the timed part (configs past it are listed as skipped).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tessera.passes import matmul_config as mc  # noqa: E402
from tessera.passes.emit_ptx import emit_ptx  # noqa: E402
from tessera.passes.sm90.lower_matmul_sm90 import Sm90Gemm, build_kernel  # noqa: E402
from tessera.tuning import sm90  # noqa: E402

SIZES = (2048, 4096, 8192)
TOL = 1e-2
"""Relative error allowed for bf16 operands with f32 accumulation (METHOD: 1e-3 .. 1e-2)."""
HOST_CALLS = 100


@dataclass
class Row:
    """One line of the result table."""

    size: str
    impl: str
    config: str = ""
    ms: float | None = None
    tflops: float | None = None
    x_cublas: float | None = None
    rel_err: float | None = None
    host_us: float | None = None
    regs: int | None = None
    smem: int | None = None
    grid: int | None = None
    resident: int | None = None
    status: str = "ok"
    note: str = ""


def label(cfg: mc.Sm90Config) -> str:
    """``BMxBNxBK sN`` for a config."""
    return f"{cfg.bm}x{cfg.bn}x64 s{cfg.stages}" + (f" c{cfg.cluster}" if cfg.cluster > 1 else "")


Size = tuple[int, int, int]


def parse_size(text: str) -> Size:
    """``"4096"`` (M = N = K) or ``"3000x5000x2000"`` (M x N x K)."""
    parts = [int(p) for p in text.lower().split("x")]
    if len(parts) == 1:
        return (parts[0],) * 3  # type: ignore[return-value]
    if len(parts) != 3:
        raise ValueError(f"size {text!r}: expected N or MxNxK")
    return tuple(parts)  # type: ignore[return-value]


def size_name(size: Size) -> str:
    m, n, k = size
    return str(m) if m == n == k else f"{m}x{n}x{k}"


def configs(size: int | Size, max_configs: int | None) -> list[tuple[bool, mc.Sm90Config]]:
    """(is_heuristic, config) for ``M x N x K`` (an int: ``M = N = K``): the heuristic
    first, then the rest of the autotuner's search space."""
    m, n, k = (size,) * 3 if isinstance(size, int) else size
    h = mc.heuristic(m, n, k)
    out = [(c == h, c) for c in mc.search_space(m, n, k)]
    return out[:max_configs] if max_configs else out


def gemm(size: int | Size, cfg: mc.Sm90Config) -> Sm90Gemm:
    m, n, k = (size,) * 3 if isinstance(size, int) else size
    return Sm90Gemm(m, n, k, "bf16", "bf16", cfg)


# --------------------------------------------------------------------------- dry run

def ptxas_report(ptx: str, arch: str = "sm_90a") -> dict[str, Any]:
    """Registers, spills, stack frame and performance-loss notes of the one kernel in
    ``ptx`` (``tessera.runtime.ptxas.resources``; raises on rejection)."""
    from tessera.runtime import ptxas

    (rep,) = ptxas.resources(ptx, arch).values()
    return {"regs": rep.registers, "spill_bytes": rep.spill_bytes, "stack": rep.stack_bytes,
            "warnings": rep.losses}


def dry_run(sizes: list[Size], max_configs: int | None) -> list[Row]:
    """Build every config's PTX and check it with ``ptxas -v`` (no spills, no warnings)."""
    rows = []
    for n in sizes:
        for is_h, cfg in configs(n, max_configs):
            g = gemm(n, cfg)
            row = Row(size_name(n), "tessera sm90" + (" *" if is_h else ""), label(cfg), smem=g.smem_bytes,
                      grid=g.grid()[0], status="compiled")
            try:
                rep = ptxas_report(emit_ptx(build_kernel("tessera_gemm_sm90", g)))
                row.regs = rep["regs"]
                problems = []
                if rep["spill_bytes"] or rep["stack"]:
                    problems.append(f"{rep['spill_bytes']} spill bytes, {rep['stack']} stack bytes")
                problems += rep["warnings"]
                if problems:
                    row.status, row.note = "ptxas", "; ".join(problems)[:300]
            except Exception as e:
                row.status, row.note = "error", f"{type(e).__name__}: {e}"[:300]
            rows.append(row)
    return rows


# --------------------------------------------------------------------------- GPU run


def timer(warmup_ms: int, rep_ms: int) -> Callable[[Callable[[], Any]], float]:
    """Median milliseconds of a callable: triton's do_bench, else CUDA events."""
    import torch

    try:
        from triton.testing import do_bench

        return lambda fn: float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    except ImportError:
        pass

    def events(fn: Callable[[], Any]) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(30):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        times.sort()
        return times[len(times) // 2]

    return events


def host_us(fn: Callable[[], Any]) -> float:
    """Wall microseconds per call to enqueue ``fn`` (100 calls, synchronized before and after)."""
    import torch

    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(HOST_CALLS):
        fn()
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / HOST_CALLS * 1e6


def rel_err(out: Any, ref: Any) -> float:
    """``|out - ref| / |ref|`` in float64; NaN when ``out`` has a non-finite (unwritten) element."""
    import torch

    o = out.double()
    if not bool(torch.isfinite(o).all()):
        return math.nan
    return float((o - ref).norm() / ref.norm().clamp_min(1e-300))


def _regs(function: Any) -> int | None:
    try:
        from tessera.runtime import cuda

        d = cuda._driver()
        return int(cuda.check(
            d.cuFuncGetAttribute(d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, function),
            "cuFuncGetAttribute",
        ))
    except Exception:
        return None


def _one_size(size: Size, max_configs: int | None, bench: Callable[[Callable[[], Any]], float],
              deadline: float, budget: float, mm: Any, gen: Any) -> list[Row]:
    """cuBLAS, every config and the ``ts.jit`` call at ``M x N x K = size``."""
    import torch

    from tessera.ir import target as tt
    from tessera.runtime import cuda

    m, n, k = size
    name = size_name(size)
    flops = 2.0 * m * n * k
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    ref = a.double() @ b.double()
    rows: list[Row] = []

    def rate(row: Row, ms: float) -> None:
        row.ms, row.tflops = ms, flops / (ms * 1e-3) / 1e12

    cublas = Row(name, "cuBLAS", "torch.matmul")
    rows.append(cublas)
    try:
        cublas.rel_err = rel_err(torch.matmul(a, b), ref)
        rate(cublas, bench(lambda: torch.matmul(a, b)))
        cublas.host_us = host_us(lambda: torch.matmul(a, b))
    except Exception as e:
        cublas.status, cublas.note = "error", f"{type(e).__name__}: {e}"[:300]

    for is_h, cfg in configs(size, max_configs):
        g = gemm(size, cfg)
        row = Row(name, "tessera sm90" + (" *" if is_h else ""), label(cfg), smem=g.smem_bytes,
                  grid=g.grid()[0])
        rows.append(row)
        if time.perf_counter() > deadline:
            row.status, row.note = "skipped", f"time budget {budget:.0f} s spent"
            continue
        try:
            run = sm90.gemm_runner(g)
            row.regs = _regs(run.plan.function)  # type: ignore[attr-defined]
            try:
                row.resident = run.plan.resident_ctas()  # type: ignore[attr-defined]
            except Exception as e:
                row.note = f"resident CTAs unknown: {type(e).__name__}: {e}"[:200]
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            run(c, a, b)
            torch.cuda.synchronize()
            row.rel_err = rel_err(c, ref)
            if not row.rel_err <= TOL:
                row.status, row.note = "mismatch", f"relative error {row.rel_err:.3g}; not timed"
                continue
            rate(row, bench(lambda run=run, c=c: run(c, a, b)))
            row.host_us = host_us(lambda run=run, c=c: run(c, a, b))
        except Exception as e:
            row.status, row.note = "error", f"{type(e).__name__}: {e}"[:300]

    jit = Row(name, "ts.jit", "sm90_config")
    rows.append(jit)
    try:
        spec = mm.specialize(a, b)
        target = spec.ir("target")
        launch = next((o for o in target.walk() if isinstance(o, tt.LaunchExOp)), None)
        jit.config = label(mc.sm90_config(
            m, n, k, tiles=mc.format_tiles(spec.options.sm90_tiles)
        )) if launch is not None else "mma.sync"
        if launch is not None:
            jit.smem, jit.grid = launch.smem.value.data, launch.grid_value()[0]
        out = cuda.run_host(target, spec.name, [a, b], poison=True, ptx=spec.ir("ptx"))[0]
        torch.cuda.synchronize()
        jit.rel_err = rel_err(out, ref)
        if not jit.rel_err <= TOL:
            jit.status, jit.note = "mismatch", f"relative error {jit.rel_err:.3g}; not timed"
        else:
            mm(a, b)
            rate(jit, bench(lambda: mm(a, b)))
            jit.host_us = host_us(lambda: mm(a, b))
    except Exception as e:
        jit.status, jit.note = "error", f"{type(e).__name__}: {e}"[:300]
    return rows


def gpu_run(sizes: list[Size], max_configs: int | None, budget: float, warmup_ms: int,
            rep_ms: int) -> list[Row]:
    """Check and time cuBLAS, every sm90 config and the ``ts.jit`` call at each size."""
    import torch

    import tessera as ts

    @ts.jit
    def mm(a, b):
        return ts.matmul(a, b)

    bench = timer(warmup_ms, rep_ms)
    t0 = time.perf_counter()
    rows: list[Row] = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for n in sizes:
        rows += _one_size(n, max_configs, bench, t0 + budget, budget, mm, gen)
        torch.cuda.empty_cache()
        print(f"[sweep] {size_name(n)} done at {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    for size in sizes:
        n = size_name(size)
        peer = next((r for r in rows if r.size == n and r.impl == "cuBLAS" and r.ms), None)
        for r in rows:
            if peer is not None and r.size == n and r.ms:
                r.x_cublas = peer.ms / r.ms
    return rows


# --------------------------------------------------------------------------- output


def _fmt(v: float | int | None, spec: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def table(rows: list[Row]) -> str:
    """The rows as an aligned text table (status and note last)."""
    head = ("size", "impl", "config", "ms", "TFLOP/s", "x cuBLAS", "rel err", "host us", "regs",
            "smem", "grid", "resident", "status")
    body = [
        (str(r.size), r.impl, r.config, _fmt(r.ms, ".4f"), _fmt(r.tflops, ".1f"),
         _fmt(r.x_cublas, ".3f"), _fmt(r.rel_err, ".1e"), _fmt(r.host_us, ".1f"),
         _fmt(r.regs, "d"), _fmt(r.smem, "d"), _fmt(r.grid, "d"), _fmt(r.resident, "d"),
         r.status + (f": {r.note}" if r.note else ""))
        for r in rows
    ]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head) - 1)]
    return "\n".join(
        "  ".join(x[i].ljust(widths[i]) for i in range(len(head) - 1)) + "  " + x[-1]
        for x in [head, *body]
    )


def environment(dry: bool) -> dict[str, Any]:
    from bench.run import environment as env

    return {**env(dry), "tessera_cache_dir": os.environ.get("TESSERA_CACHE_DIR", "")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="write the rows as JSON here")
    p.add_argument("--dry-run", action="store_true", help="build every config and ptxas -v it (no GPU)")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated sizes: N (M = N = K) or MxNxK")
    p.add_argument("--max-configs", type=int, default=None, help="configs per size (heuristic first)")
    p.add_argument("--budget", type=float, default=150.0, help="seconds for the timed part")
    p.add_argument("--warmup-ms", type=int, default=10)
    p.add_argument("--rep-ms", type=int, default=40)
    args = p.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    t0 = time.perf_counter()
    if args.dry_run:
        rows = dry_run(sizes, args.max_configs)
    else:
        rows = gpu_run(sizes, args.max_configs, args.budget, args.warmup_ms, args.rep_ms)
    result = {"environment": environment(args.dry_run), "seconds": time.perf_counter() - t0,
              "rows": [asdict(r) for r in rows]}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    print(table(rows))
    bad = [r for r in rows if r.status not in ("ok", "compiled", "skipped")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
