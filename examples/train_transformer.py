"""Train a small causal transformer language model with ``ts.value_and_grad``.

One block (rmsnorm -> qkv -> causal flash attention -> out-proj -> residual -> rmsnorm ->
gelu MLP -> residual) and a vocabulary projection, trained on a synthetic next-token
task (sequences that count upwards modulo the vocabulary from a random start). The loss
and every weight's gradient come from one traced function; ``ts.optim.SGD`` with
momentum updates the f32 master weights (one multi-tensor kernel on the GPU). On a CUDA GPU the step runs in bf16 through Tessera's
PTX kernels; without one, on the CPU reference interpreter in f32.

    python examples/train_transformer.py [steps]

prints the loss every few steps (it goes down) and the tokens per second.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import tessera as ts

VOCAB, DIM, HEADS, SEQ, BATCH = 32, 64, 4, 32, 8
GPU_DIM, GPU_SEQ, GPU_BATCH = 512, 256, 16


def lm_loss(tokens, targets, emb, wqkv, wo, w1, w2, wout):
    """Mean cross-entropy of next-token logits; ``tokens``/``targets`` are one-hot
    ``[B, S, V]``."""
    b, s, _ = tokens.shape
    d = emb.shape[1]
    x = tokens @ emb  # [B, S, D]
    q, k, v = _heads(ts.rmsnorm(x) @ wqkv, b, s, d)
    a = ts.flash_attention(q, k, v, causal=True)  # [B, H, S, D/H]
    x = x + ts.reshape(ts.transpose(a, (0, 2, 1, 3)), (b, s, d)) @ wo
    x = x + ts.gelu(ts.rmsnorm(x) @ w1) @ w2
    p = ts.softmax(x @ wout)  # [B, S, V]
    return -ts.sum(targets * ts.log(p + 1e-6)) / (b * s)


def _heads(qkv, b, s, d):
    """[B, S, 3D] -> three [B, H, S, D/H]."""
    t = ts.transpose(ts.reshape(qkv, (b, s, 3, HEADS, d // HEADS)), (2, 0, 3, 1, 4))
    return t[0], t[1], t[2]


def batch(rng: np.random.Generator, b: int, s: int) -> tuple[np.ndarray, np.ndarray]:
    """One-hot inputs and next-token targets of counting sequences."""
    start = rng.integers(0, VOCAB, (b, 1))
    seq = (start + np.arange(s + 1)) % VOCAB
    eye = np.eye(VOCAB, dtype=np.float32)
    return eye[seq[:, :-1]], eye[seq[:, 1:]]


def init(d: int, rng: np.random.Generator) -> list[np.ndarray]:
    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    return [w(VOCAB, d), w(d, 3 * d), w(d, d), w(d, 4 * d), w(4 * d, d), w(d, VOCAB)]


def train(steps: int, gpu: bool, lr: float = 0.1, momentum: float = 0.9) -> list[float]:
    rng = np.random.default_rng(0)
    d, s, b = (GPU_DIM, GPU_SEQ, GPU_BATCH) if gpu else (DIM, SEQ, BATCH)
    masters = init(d, rng)
    step = ts.value_and_grad(lm_loss, argnums=(2, 3, 4, 5, 6, 7))
    if gpu:
        import torch

        masters = [torch.from_numpy(p).cuda() for p in masters]
    # one multi-tensor kernel updates every f32 master weight (the CPU reference without a GPU)
    opt = ts.optim.SGD(masters, lr=lr, momentum=momentum)
    losses: list[float] = []
    tokens = 0
    t0 = None
    for i in range(steps):
        x, y = batch(rng, b, s)
        if gpu:
            import torch

            args = [torch.from_numpy(a).cuda().bfloat16() for a in (x, y)]
            params = [p.bfloat16() for p in masters]
        else:
            args, params = [x, y], masters
        loss, grads = step(*args, *params)
        losses.append(float(loss))
        opt.step([g.float() for g in grads] if gpu else grads)
        if i == 1:  # the first steps compile; time the rest
            if gpu:
                torch.cuda.synchronize()
            t0, tokens = time.perf_counter(), 0
        tokens += b * s
        if i % max(1, steps // 10) == 0 or i == steps - 1:
            print(f"step {i:4d}  loss {losses[-1]:.4f}", flush=True)
    if gpu:
        torch.cuda.synchronize()
    if t0 is not None and tokens:
        rate = tokens / (time.perf_counter() - t0)
        where = "GPU bf16" if gpu else "CPU reference f32"
        print(f"{rate:,.0f} tokens/s ({where}, B={b} S={s} D={d})")
    return losses


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    losses = train(steps, gpu)
    print(f"loss: {losses[0]:.4f} -> {losses[-1]:.4f} after {steps} steps")
    assert losses[-1] < 0.5 * losses[0], "the loss did not go down"


if __name__ == "__main__":
    main()
