"""Compile time of ``examples/transformer_block.py``'s ``block``, cold and warm, each in a
fresh process.

    python bench/compile_time.py              # CPU: Python -> PTX -> cubin (ptxas), 1 cold + 3 warm
    python bench/compile_time.py --gpu        # GPU: PTX -> loaded module instead of a cubin
    python bench/compile_time.py --once       # one measurement in this process, as JSON

Every measurement runs in a new Python process (``--once``) with
``TESSERA_CACHE_DIR`` set to one temporary folder: the first finds it empty (cold),
the later ones find the program and cubin caches written by the first (warm). In each
process numpy, torch and tessera are imported, and with ``--gpu`` the CUDA context and
the driver bindings initialized, before the clock starts (a GPU caller has them
loaded); the clock then covers a fresh ``ts.jit`` of the function, tracing,
and the PTX (``specialization.ir("ptx")``: lowered, or read from the program cache),
then the launch module the runtime runs (parsed from the cache on a hit), then the
PTX to a cubin (ptxas, through the cubin cache) or, with ``--gpu``, to a loaded module.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def once(gpu: bool) -> dict[str, Any]:
    """Measure one compile in this process (see the module docstring)."""
    import importlib.util

    import numpy as np
    import torch  # noqa: F401 - loaded before the clock, as in a GPU program

    import tessera as ts

    spec_ = importlib.util.spec_from_file_location(
        "transformer_block", ROOT / "examples" / "transformer_block.py"
    )
    assert spec_ is not None and spec_.loader is not None
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    s, d = 17, 32
    args = [np.zeros((s, d), np.float32), np.zeros((d, 3 * d), np.float32),
            np.zeros((d, d), np.float32)]
    device = None
    if gpu:  # CUDA context and driver bindings exist before the clock, as in any GPU program
        from tessera.runtime import cuda

        device = torch.cuda.current_device()
        torch.empty(1, device="cuda")
        cuda._driver()
    t0 = time.perf_counter()
    fn = ts.jit(mod.block.fn)
    spec = fn.specialize(*args)
    ptx = spec.ir("ptx")
    t1 = time.perf_counter()
    spec.launch_module()
    t2 = time.perf_counter()
    if gpu:
        from tessera.runtime import cuda

        cuda.load_module(ptx, device)
    else:
        from tessera.runtime import cache, ptxas

        if ptxas.find_ptxas() is not None:
            cache.cubin_for(ptx, "sm_90a", ptxas.version(), "cpu", lambda: ptxas.assemble(ptx))
    t3 = time.perf_counter()
    return {
        "ptx_s": t1 - t0, "launch_s": t2 - t1, "load_s": t3 - t2,
        "program_cache_hit": spec.launch_text is not None,
    }


def fresh_process(cache_dir: Path, gpu: bool) -> dict[str, Any]:
    """:func:`once` in a new Python process using ``cache_dir``."""
    env = {**os.environ, "TESSERA_CACHE_DIR": str(cache_dir)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("TESSERA_NO_DISK_CACHE", None)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--once", *(["--gpu"] if gpu else [])]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"compile_time --once failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cold_and_warm(gpu: bool, warm_runs: int = 3) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One cold and ``warm_runs`` warm measurements, each in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="tessera-compile-time-") as d:
        cold = fresh_process(Path(d), gpu)
        warm = [fresh_process(Path(d), gpu) for _ in range(warm_runs)]
    return cold, warm


def _ms(r: dict[str, Any]) -> str:
    total = r["ptx_s"] + r["launch_s"] + r["load_s"]
    return (f"{total * 1e3:7.1f} ms  (python->ptx {r['ptx_s'] * 1e3:.1f}, launch module "
            f"{r['launch_s'] * 1e3:.1f}, ptx->{'module' if r.get('gpu') else 'cubin'} "
            f"{r['load_s'] * 1e3:.1f}; program cache {'hit' if r['program_cache_hit'] else 'miss'})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--once", action="store_true", help="measure in this process, print JSON")
    p.add_argument("--gpu", action="store_true", help="load the module on the GPU")
    p.add_argument("--warm-runs", type=int, default=3)
    a = p.parse_args(argv)
    if a.once:
        print(json.dumps({**once(a.gpu), "gpu": a.gpu}))
        return 0
    cold, warm = cold_and_warm(a.gpu, a.warm_runs)
    print(f"cold: {_ms(cold)}")
    for r in warm:
        print(f"warm: {_ms(r)}")
    print(f"warm python->ptx median: {statistics.median(r['ptx_s'] for r in warm) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
