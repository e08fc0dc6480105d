"""Chapter 2's attention operator graph: traced to Graph IR, fused, and run on the GPU
(torch CUDA tensors through PTX) when there is one, else on the CPU reference interpreter.

Run: python examples/attention.py
"""

import numpy as np

from tessera import graph, op


@graph.module("attention")
def attention(Q, K, V):
    S = op.matmul(Q, K.T)
    A = op.softmax(S)
    return op.matmul(A, V)


def reference(Q, K, V):
    S = Q.astype(np.float64) @ K.astype(np.float64).T
    A = np.exp(S - S.max(axis=-1, keepdims=True))
    A /= A.sum(axis=-1, keepdims=True)
    return A @ V.astype(np.float64)


def main() -> None:
    import torch

    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((64, 32)).astype(np.float32) for _ in range(3))
    if torch.cuda.is_available():
        where = f"GPU ({torch.cuda.get_device_name()})"
        out = attention(*(torch.from_numpy(t).cuda() for t in (Q, K, V))).cpu().numpy()
    else:
        where = "CPU reference interpreter"
        out = attention(Q, K, V)
    print(attention.inspect_ir("graph"))
    err = float(np.max(np.abs(out.astype(np.float64) - reference(Q, K, V))))
    print(
        f"attention {tuple(out.shape)} {out.dtype} on {where}: "
        f"max abs error vs numpy float64 = {err:.3e}"
    )
    assert err < 1e-5, err


if __name__ == "__main__":
    main()
