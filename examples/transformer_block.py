"""A transformer block from the guide: rmsnorm -> qkv gemm -> split heads ->
flash attention -> output gemm, traced once and run on the CPU reference.

Run: python examples/transformer_block.py
"""

import numpy as np

import tessera as ts

HEADS = 4


@ts.jit
def block(x, Wqkv, Wo):
    h = ts.rmsnorm_safe(x)
    qkv = ts.gemm(h, Wqkv)  # [S, 3 * D]
    q, k, v = ts.split_qkv(qkv, heads=HEADS)  # each [H, S, D / H]
    y = ts.flash_attention(q, k, v, causal=True)  # [H, S, D / H]
    y = ts.reshape(ts.transpose(y, (1, 0, 2)), (y.shape[1], -1))  # merge heads: [S, D]
    return ts.gemm(y, Wo) + x  # residual


def reference(x, Wqkv, Wo):
    x = x.astype(np.float64)
    h = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)
    qkv = h @ Wqkv
    s, d = x.shape
    dh = d // HEADS
    q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(s, HEADS, dh).transpose(1, 0, 2) for i in range(3))
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(dh)
    scores = np.where(np.triu(np.ones((s, s), bool), 1), -np.inf, scores)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    y = (p @ v).transpose(1, 0, 2).reshape(s, d)
    return y @ Wo + x


def main() -> None:
    rng = np.random.default_rng(0)
    S, D = 17, 32
    x = rng.standard_normal((S, D)).astype(np.float32)
    Wqkv = (rng.standard_normal((D, 3 * D)) / np.sqrt(D)).astype(np.float32)
    Wo = (rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32)
    out = block(x, Wqkv, Wo)
    print(block.inspect_ir("graph"))
    err = float(np.max(np.abs(out - reference(x, Wqkv, Wo))))
    print(f"transformer block {tuple(out.shape)} {out.dtype}: max abs error vs float64 = {err:.3e}")
    assert err < 1e-4, err


if __name__ == "__main__":
    main()
