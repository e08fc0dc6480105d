"""The guide's "Double Buffering Pattern" GEMM.

``BM``, ``BN`` and ``BK`` are compile-time constants passed by keyword:
``double_buffered_gemm(A, B, C, BM=32, BN=16, BK=16)``. A list of equal
``alloc_shared`` buffers is one shared allocation with a leading stage dim, so
``smem_a[write_stage]`` may use a stage computed at run time.
``C += ts.tile.mma(a, b)`` adds the BM x BN product to the top-left BM x BN
block of ``C`` (tensor-core m16n8k16 fragments for bf16; lanes whose element
lies outside ``C`` do not store).

One change from the guide: a ``barrier()`` at the end of the loop body, so no
warp starts overwriting a stage that another warp is still reading (the guide's
loop races on a real GPU). As in the guide, the loop consumes the stage loaded
in the previous iteration, so the block loaded last is never multiplied: the
kernel computes ``C[:BM, :BN] += A[:BM, :K'] @ B[:K', :BN]`` with ``K'`` the
start of the last block (see :func:`reference`).
"""

import numpy as np

import tessera as ts


@ts.kernel
def double_buffered_gemm(A: ts.Tensor["M", "K", ts.bf16],  # noqa: F821
                         B: ts.Tensor["K", "N", ts.bf16],  # noqa: F821
                         C: ts.Tensor["M", "N", ts.f32]):  # noqa: F821
    # Allocate double buffers
    smem_a = [
        ts.tile.alloc_shared((BM, BK), ts.bf16),  # noqa: F821
        ts.tile.alloc_shared((BM, BK), ts.bf16)  # noqa: F821
    ]
    smem_b = [
        ts.tile.alloc_shared((BK, BN), ts.bf16),  # noqa: F821
        ts.tile.alloc_shared((BK, BN), ts.bf16)  # noqa: F821
    ]

    # Pipeline stages
    write_stage = 0
    compute_stage = 1

    # Prefetch first blocks
    ts.tile.cp_async(smem_a[write_stage], A[0:BM, 0:BK])  # noqa: F821
    ts.tile.cp_async(smem_b[write_stage], B[0:BK, 0:BN])  # noqa: F821

    for k in ts.tile.range(BK, K, BK):  # noqa: F821
        # Start loading next blocks
        write_stage, compute_stage = compute_stage, write_stage
        ts.tile.cp_async(smem_a[write_stage], A[0:BM, k:k+BK])  # noqa: F821
        ts.tile.cp_async(smem_b[write_stage], B[k:k+BK, 0:BN])  # noqa: F821

        # Wait for previous load and compute
        ts.tile.cp_wait_group(0)
        ts.tile.barrier()

        # Compute on current blocks
        C += ts.tile.mma(smem_a[compute_stage], smem_b[compute_stage])

        # Added: no stage is overwritten while a warp still reads it.
        ts.tile.barrier()


def reference(A: np.ndarray, B: np.ndarray, C: np.ndarray, BM: int, BN: int, BK: int
              ) -> np.ndarray:
    M, K = A.shape
    N = B.shape[1]
    a = np.zeros((BM, K), np.float64)
    b = np.zeros((K, BN), np.float64)
    a[: min(M, BM)] = A[:BM].astype(np.float64)
    b[:, : min(N, BN)] = B[:, :BN].astype(np.float64)
    acc = np.zeros((BM, BN), np.float64)
    for k in range(BK, K, BK):
        kb = k - BK
        acc += a[:, kb:kb + BK] @ b[kb:kb + BK]
    out = C.astype(np.float64)
    out[: min(M, BM), : min(N, BN)] += acc[: min(M, BM), : min(N, BN)]
    return out
