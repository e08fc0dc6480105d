"""The guide's mixed_precision_gemm: FP8 (e4m3) inputs, FP32 accumulation and output.

Run: python examples/mixed_precision_gemm.py
"""

import ml_dtypes
import numpy as np

import tessera as ts

FP8_F32 = ts.fp8_e4m3 @ ts.accum(ts.f32)


@ts.jit
def mixed_precision_gemm(
    A: ts.Tensor["M", "K", FP8_F32],
    B: ts.Tensor["K", "N", FP8_F32],
) -> ts.Tensor["M", "N", ts.f32]:
    """FP8 inputs, FP32 accumulation and output"""
    return ts.gemm(A, B)  # Automatic precision handling


def main() -> None:
    rng = np.random.default_rng(0)
    A = rng.standard_normal((48, 80)).astype(ml_dtypes.float8_e4m3fn)
    B = rng.standard_normal((80, 24)).astype(ml_dtypes.float8_e4m3fn)
    C = mixed_precision_gemm(A, B)
    print(mixed_precision_gemm.inspect_ir("graph"))
    want = A.astype(np.float64) @ B.astype(np.float64)
    err = float(np.max(np.abs(C.astype(np.float64) - want)))
    print(f"mixed_precision_gemm {tuple(C.shape)} {C.dtype}: max abs error vs float64 = {err:.3e}")
    assert C.dtype == np.float32 and err < 1e-4, err


if __name__ == "__main__":
    main()
