"""Split-K and tile-config experiments of the sm90 GEMM against cuBLAS / _scaled_mm.

    python bench/gemm_splitk.py --out $OUT/splitk.json            # GPU
    python bench/gemm_splitk.py --only split --budget 120

Sections (``--only`` picks some; the table is printed last, every row also in JSON):

* ``split``: shapes with too few output tiles for the SMs (M = N = 512..1024 with long K,
  weight gradients ``x.T @ dy`` with K = tokens, decode M = 1..16) and controls that fill
  the SMs, through ``ts.jit``: ``split_k=off``, ``auto`` (the cost rule; its S is shown)
  and fixed counts, against ``torch.matmul`` (cuBLAS).
* ``configs``: bf16 ``a @ w.T`` 8192^3 and fp8 e4m3 ``a @ b.T`` 8192^3 over tile configs
  launched directly (``tessera.tuning.sm90.gemm_runner``), against cuBLAS and
  ``torch._scaled_mm``.

Every Tessera result is first computed with its buffers NaN-filled (``run_host(poison=
True)`` or a NaN-filled C) and compared with float64 on the same inputs (``|C - ref| /
|ref|``); a result over the tolerance is reported and not timed. Timing: triton's
``do_bench`` (median, L2 flushed) else CUDA events. Ratio = peer ms / row ms.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import tessera as ts  # noqa: E402
from tessera.options import CompileOptions  # noqa: E402
from tessera.passes import matmul_config as mc  # noqa: E402
from tessera.passes.sm90.lower_matmul_sm90 import Sm90Gemm, gemm_for  # noqa: E402

TOL = {"bf16": 1e-2, "f32": 2e-6, "fp8": 1e-2}


@dataclass
class Row:
    case: str
    impl: str
    ms: float | None = None
    tflops: float | None = None
    ratio: float | None = None
    err: float | None = None
    status: str = "ok"
    note: str = ""


def timer() -> Callable[[Callable[[], Any]], float]:
    import torch

    try:
        from triton.testing import do_bench

        return lambda fn: float(do_bench(fn, warmup=10, rep=50, return_mode="median"))
    except ImportError:
        pass

    def events(fn: Callable[[], Any]) -> float:
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


def rel_err(out: Any, ref: Any) -> float:
    import torch

    o = out.double()
    if not bool(torch.isfinite(o).all()):
        return math.nan
    return float((o - ref).norm() / ref.norm().clamp_min(1e-300))


def poisoned(fn: Any, args: list[Any]) -> Any:
    """The first result of ``fn(*args)`` computed with every buffer NaN-filled first."""
    from tessera.runtime import cuda

    spec = fn.specialize(*args)
    return cuda.run_host(spec.ir("target"), spec.name, list(args), poison=True,
                         ptx=spec.ir("ptx"))[0]


class Bench:
    def __init__(self, budget: float):
        self.rows: list[Row] = []
        self.t0 = time.time()
        self.budget = budget
        self.time = timer()

    def left(self) -> bool:
        return time.time() - self.t0 < self.budget

    def add(self, case: str, impl: str, body: Callable[[], tuple[float | None, float, str]],
            flops: float, peer: float | None, tol: float) -> float | None:
        """Run ``body`` (returns ms or None, error, note); a row either way."""
        if not self.left():
            self.rows.append(Row(case, impl, status="skipped (budget)"))
            return None
        try:
            ms, err, note = body()
        except Exception as exc:  # a row, not a crash
            self.rows.append(Row(case, impl, status=f"error: {type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0][:120]}"))
            return None
        if not (err <= tol):
            self.rows.append(Row(case, impl, err=err, status="WRONG (not timed)", note=note))
            return None
        row = Row(case, impl, ms, flops / ms / 1e9 if ms else None,
                  peer / ms if peer and ms else None, err, note=note)
        self.rows.append(row)
        print(f"{case:34s} {impl:28s} {ms:9.4f} ms  x{row.ratio or 0:5.2f}  err {err:.1e} {note}",
              flush=True)
        return ms


# --------------------------------------------------------------------------- split-K

SPLIT_SHAPES = [
    # (layout, M, N, K, dtype, fixed split counts to try)
    ("NN", 512, 512, 8192, "bf16", ("2", "4")),
    ("NN", 1024, 1024, 8192, "bf16", ("4",)),
    ("NN", 1024, 1024, 65536, "bf16", ()),
    ("TN", 768, 768, 32768, "bf16", ("4",)),
    ("TN", 4096, 1024, 16384, "bf16", ()),
    ("NT", 16, 4096, 4096, "bf16", ()),
    ("NT", 16, 8192, 8192, "bf16", ("2", "4")),
    ("NT", 1, 8192, 8192, "bf16", ("4",)),
    ("NT", 64, 8192, 8192, "bf16", ("2",)),
    ("NN", 4096, 4096, 4096, "bf16", ()),
    ("NT", 512, 512, 8192, "fp8", ()),
    ("NN", 512, 512, 8192, "f32", ()),
    ("NN", 512, 512, 8192, "tf32", ()),
]


def _expr(layout: str) -> str:
    return {"NN": "a @ b", "NT": "a @ b.T", "TN": "a.T @ b", "TT": "a.T @ b.T"}[layout]


def split_section(b: Bench) -> None:
    import torch

    for layout, m, n, k, dt, forced in SPLIT_SHAPES:
        if not b.left():
            b.rows.append(Row(f"{layout} {m}x{n}x{k} {dt}", "-", status="skipped (budget)"))
            continue
        _split_one(b, layout, m, n, k, dt, forced)
        torch.backends.cuda.matmul.allow_tf32 = False


def _split_one(b: Bench, layout: str, m: int, n: int, k: int, dt: str,
               forced: tuple[str, ...]) -> None:
    import torch

    case = f"{layout} {m}x{n}x{k} {dt}"
    ta, tb = layout[0] == "T", layout[1] == "T"
    gen = torch.Generator(device="cuda").manual_seed(m + 7 * n + 13 * k)
    tdt = {"bf16": torch.bfloat16, "f32": torch.float32, "tf32": torch.float32,
           "fp8": torch.float32}[dt]
    a = torch.randn(*((k, m) if ta else (m, k)), device="cuda", generator=gen, dtype=tdt)
    bb = torch.randn(*((n, k) if tb else (k, n)), device="cuda", generator=gen, dtype=tdt)
    if dt == "fp8":
        a, bb = a.to(torch.float8_e4m3fn), bb.to(torch.float8_e4m3fn)
    ref = (a.double().T if ta else a.double()) @ (bb.double().T if tb else bb.double())
    flops = 2.0 * m * n * k
    expr = _expr(layout)
    if dt == "fp8":
        one = torch.ones((), device="cuda")
        peer_fn = lambda: torch._scaled_mm(a, bb.T, scale_a=one, scale_b=one,  # noqa: E731
                                           out_dtype=torch.bfloat16)
        peer_name = "torch._scaled_mm"
        fn_src = lambda a, b: ts.matmul(a, b, transpose_b=True, out_dtype=ts.bf16)  # noqa: E731
    else:
        torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        pa, pb = (a.T if ta else a), (bb.T if tb else bb)
        peer_fn = lambda: torch.matmul(pa, pb)  # noqa: E731
        peer_name = "cuBLAS" + (" tf32" if dt == "tf32" else "")
        fn_src = eval(f"lambda a, b: {expr}")

    def peer_body() -> tuple[float, float, str]:
        out = peer_fn()
        torch.cuda.synchronize()
        return b.time(peer_fn), rel_err(out, ref), ""

    peer = b.add(case, peer_name, peer_body, flops, None, 1.0)
    tol = TOL["f32" if dt == "f32" else "bf16" if dt != "fp8" else "fp8"]
    if dt == "tf32":
        tol = 2e-3
    for mode in ("off", "auto", *forced):
        opts = CompileOptions.from_env(split_k=mode, allow_tf32=dt == "tf32")
        fn = ts.jit(fn_src, options=opts)

        def body(fn: Any = fn, mode: str = mode) -> tuple[float, float, str]:
            out = poisoned(fn, [a, bb])
            torch.cuda.synchronize()
            err = rel_err(out, ref)
            ptx = fn.inspect_ir("ptx")
            note = "split" if "split_k_reduce" in ptx else "whole"
            if mode == "auto":
                note += f" S={_auto_splits(fn, a, bb)}"
            if not err <= tol:
                return 0.0, err, note
            fn(a, bb)
            return b.time(lambda: fn(a, bb)), err, note

        b.add(case, f"tessera split_k={mode}", body, flops, peer, tol)


def _auto_splits(fn: Any, a: Any, b: Any) -> int:
    """The S that the workspace of the compiled program shows (1 if none)."""
    import re

    text = str(fn.specialize(a, b).ir("tile"))
    # the reduction kernel's second parameter is the [S, M, N] workspace
    found = re.search(r"split_k_reduce_\d+\(%\S+: memref<\S+>, %\S+: memref<(\d+)x", text)
    return int(found.group(1)) if found else 1


# --------------------------------------------------------------------------- configs

BF16_CONFIGS = [
    # the heuristic's, then CTA pairs multicasting B and wider tile groups, twice each in
    # alternation (run-to-run spread of one config is ~5-10 % on this machine)
    mc.Sm90Config(bn=256, stages=3),
    mc.Sm90Config(bn=256, stages=3, cluster=2, group_m=16),
    mc.Sm90Config(bn=256, stages=3, cluster=2),
] * 2
FP8_CONFIGS = [
    (mc.Sm90Config(bn=128, stages=5), False),
    (mc.Sm90Config(bn=128, stages=5, cluster=2), False),
    (mc.Sm90Config(bn=128, stages=5, cluster=2, group_m=16), False),
    (mc.Sm90Config(bn=128, stages=5), True),
] * 2


def config_section(b: Bench, n: int = 8192) -> None:
    import torch

    from tessera.tuning import sm90

    gen = torch.Generator(device="cuda").manual_seed(5)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    ref = a.double() @ w.double().T
    flops = 2.0 * n**3
    case = f"bf16 a @ w.T {n}^3"
    peer = b.add(case, "cuBLAS", lambda: (b.time(lambda: a @ w.T), rel_err(a @ w.T, ref), ""),
                 flops, None, 1.0)
    fn = ts.jit(lambda a, w: a @ w.T)
    b.add(case, "tessera ts.jit (heuristic)",
          lambda: (b.time(lambda: fn(a, w)), rel_err(poisoned(fn, [a, w]), ref), ""),
          flops, peer, TOL["bf16"])
    for cfg in BF16_CONFIGS:
        b.add(case, _label(cfg), lambda cfg=cfg: _direct(
            b, sm90.gemm_runner(Sm90Gemm(n, n, n, "bf16", "bf16", cfg, b_t=True)), a, w, ref,
            torch.bfloat16), flops, peer, TOL["bf16"])
    del ref
    af = torch.randn(n, n, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    bf = torch.randn(n, n, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    ref = af.double() @ bf.double().T
    one = torch.ones((), device="cuda")
    case = f"fp8 e4m3 a @ b.T {n}^3 -> bf16"

    def smm(fast: bool = False) -> Any:
        return torch._scaled_mm(af, bf.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                use_fast_accum=fast)

    peer = b.add(case, "torch._scaled_mm", lambda: (b.time(smm), rel_err(smm(), ref), ""),
                 flops, None, 1.0)
    b.add(case, "_scaled_mm fast_accum",
          lambda: (b.time(lambda: smm(True)), rel_err(smm(True), ref), ""), flops, peer, 1.0)
    jf = ts.jit(lambda a, b: ts.matmul(a, b, transpose_b=True, out_dtype=ts.bf16))
    b.add(case, "tessera ts.jit (heuristic)",
          lambda: (b.time(lambda: jf(af, bf)), rel_err(poisoned(jf, [af, bf]), ref),
                   _label(gemm_for_jit(jf, af, bf))), flops, peer, TOL["fp8"])
    for cfg, overlap in FP8_CONFIGS:
        b.add(case, _label(cfg) + " overlap" * overlap, lambda cfg=cfg, overlap=overlap: _direct(
            b, sm90.gemm_runner(Sm90Gemm(n, n, n, "e4m3", "bf16", cfg, b_t=True,
                                         overlap=overlap)), af, bf, ref, torch.bfloat16),
              flops, peer, TOL["fp8"])


def gemm_for_jit(fn: Any, a: Any, b: Any) -> mc.Sm90Config:
    from tessera.ir import graph as g

    graph = fn.specialize(a, b).ir("graph")
    op = next(o for o in graph.walk() if isinstance(o, g.MatmulOp | g.MatmulEpilogueOp))
    return gemm_for(op).cfg


def _label(cfg: mc.Sm90Config) -> str:
    return (f"{cfg.bm}x{cfg.bn} s{cfg.stages} c{cfg.cluster} g{cfg.group_m}")


def _direct(b: Bench, run: Any, x: Any, y: Any, ref: Any, odt: Any) -> tuple[float, float, str]:
    import torch

    c = torch.full(ref.shape, float("nan"), device="cuda", dtype=odt)
    run(c, x, y)
    torch.cuda.synchronize()
    err = rel_err(c, ref)
    return b.time(lambda: run(c, x, y)), err, ""


# --------------------------------------------------------------------------- main


def table(rows: list[Row]) -> str:
    lines = [f"{'case':34s} {'impl':28s} {'ms':>9s} {'TFLOP/s':>8s} {'x peer':>7s} "
             f"{'rel err':>8s}  status / note"]
    for r in rows:
        ms = f"{r.ms:9.4f}" if r.ms else " " * 9
        tf = f"{r.tflops:8.1f}" if r.tflops else " " * 8
        ra = f"{r.ratio:7.2f}" if r.ratio else " " * 7
        er = f"{r.err:8.1e}" if r.err is not None else " " * 8
        lines.append(f"{r.case:34s} {r.impl:28s} {ms} {tf} {ra} {er}  {r.status} {r.note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--only", default="split,configs")
    p.add_argument("--budget", type=float, default=150.0)
    args = p.parse_args(argv)
    import torch

    env = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "ncu": shutil.which("ncu"), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(json.dumps(env), flush=True)
    b = Bench(args.budget)
    only = args.only.split(",")
    for name, section in (("split", split_section), ("configs", config_section)):
        if name in only:
            section(b)
    if args.out:
        args.out.write_text(json.dumps({"env": env, "rows": [asdict(r) for r in b.rows]},
                                       indent=1))
    print()
    print(table(b.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
