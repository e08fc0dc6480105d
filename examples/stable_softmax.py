"""The guide's numerically_stable_softmax: bf16 in and out, computed in f32.

Run: python examples/stable_softmax.py
"""

import ml_dtypes
import numpy as np

import tessera as ts


@ts.jit
def numerically_stable_softmax(x: ts.Tensor["B", "S", ts.bf16]) -> ts.Tensor["B", "S", ts.bf16]:
    """Numerically stable softmax with explicit precision control"""
    # Convert to FP32 for stability
    x_f32 = ts.cast(x, ts.f32)

    # Safe operations
    x_max = ts.max(x_f32, axis=-1, keepdims=True)
    exp_x = ts.exp(x_f32 - x_max)  # Prevent overflow
    sum_exp = ts.sum(exp_x, axis=-1, keepdims=True)

    # Safe division with epsilon
    softmax = exp_x / (sum_exp + 1e-10)

    # Cast back to BF16
    return ts.cast(softmax, ts.bf16)


def main() -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((6, 33)) * 30).astype(ml_dtypes.bfloat16)  # large logits
    y = numerically_stable_softmax(x)
    print(numerically_stable_softmax.inspect_ir("graph"))
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    want = e / e.sum(axis=-1, keepdims=True)
    err = float(np.max(np.abs(y.astype(np.float64) - want)))
    print(f"softmax {tuple(y.shape)} {y.dtype}: max abs error vs float64 = {err:.3e}")
    assert y.dtype == np.dtype(ml_dtypes.bfloat16) and np.all(np.isfinite(y.astype(np.float32)))
    assert err < 4e-3, err  # bf16 has 8 significant bits


if __name__ == "__main__":
    main()
