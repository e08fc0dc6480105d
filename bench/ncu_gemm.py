"""One launch of each sm90 GEMM kernel under study, for Nsight Compute.

    ncu -k regex:tessera_gemm_sm90 --section SpeedOfLight --section WarpStateStats \\
        python bench/ncu_gemm.py

Launches (after one warm-up each, so ``-c``/``--launch-skip`` can pick the second):
the heuristic bf16 ``a @ w.T`` 8192^3 kernel and the fp8 e4m3 ``a @ b.T`` 8192^3 -> bf16
kernel, through ``tessera.tuning.sm90.gemm_runner``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from tessera.passes import matmul_config as mc  # noqa: E402
from tessera.passes.sm90.lower_matmul_sm90 import Sm90Gemm  # noqa: E402
from tessera.tuning import sm90  # noqa: E402


def main() -> None:
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    which = sys.argv[1:] or ["bf16", "fp8"]
    if "bf16" in which:
        run = sm90.gemm_runner(Sm90Gemm(n, n, n, "bf16", "bf16", mc.heuristic(n, n, n), b_t=True))
        run(c, a, w)
        run(c, a, w)
    if "fp8" in which:
        af, bf = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        run = sm90.gemm_runner(Sm90Gemm(n, n, n, "e4m3", "bf16", mc.Sm90Config(bn=128, stages=5),
                                        b_t=True))
        run(c, af, bf)
        run(c, af, bf)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
