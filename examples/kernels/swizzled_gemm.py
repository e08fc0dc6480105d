"""The guide's "GEMM with swizzled layout" snippet (Chapter 2.6) as a kernel.

The snippet's ``A_tile`` and ``B_tile`` are the top-left windows of ``A`` and
``B``; ``BM``, ``BN``, ``BK`` are compile-time constants
(``swizzled_gemm(A, B, C, BM=32, BN=16, BK=32)``).
"""

from __future__ import annotations

import numpy as np

from tessera import cp_async, f16, f32, kernel, mut, tbarrier, tile, tshared


@kernel
def swizzled_gemm(A: f16[M, K], B: f16[K, N], C: mut[f32[M, N]]):  # noqa: F821
    A_tile = A[0:BM, 0:BK]  # noqa: F821
    B_tile = B[0:BK, 0:BN]  # noqa: F821
    sA = tshared.alloc[f16](BM, BK, swizzle="xor")  # noqa: F821
    sB = tshared.alloc[f16](BK, BN, swizzle="xor")  # noqa: F821
    cp_async.shared.global_(sA, A_tile)
    cp_async.shared.global_(sB, B_tile)
    tbarrier()
    C += tile.mma(sA, sB, accum=f32)


def reference(A: np.ndarray, B: np.ndarray, C: np.ndarray, BM: int, BN: int, BK: int
              ) -> np.ndarray:
    M, K = A.shape
    N = B.shape[1]
    a = np.zeros((BM, BK))
    b = np.zeros((BK, BN))
    a[: min(M, BM), : min(K, BK)] = A[:BM, :BK]
    b[: min(K, BK), : min(N, BN)] = B[:BK, :BN]
    out = C.astype(np.float64)
    out[: min(M, BM), : min(N, BN)] += (a @ b)[: min(M, BM), : min(N, BN)]
    return out
