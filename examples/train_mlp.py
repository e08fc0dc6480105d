"""Train a 2-layer MLP with Tessera's autodiff on the CPU reference path.

The loss is traced once into Graph IR; ``ts.value_and_grad`` turns it into a
gradient function with the ``autodiff`` pass, and ``ts.optim.SGD`` updates the
weights in place (one ``tgraph.sgd_update`` op, on the reference interpreter here).
Run ``python examples/train_mlp.py [steps]``.
"""

from __future__ import annotations

import sys

import numpy as np

import tessera as ts


@ts.jit
@ts.autodiff(wrt=("W1", "b1", "W2", "b2"))
def mlp_loss(x, W1, b1, W2, b2, y_true):
    """Mean squared error of a 2-layer tanh MLP."""
    h = ts.tanh(ts.matmul(x, W1) + b1)
    y_pred = ts.matmul(h, W2) + b2
    return ts.mse(y_pred, y_true)


def make_data(n: int = 64, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A smooth regression target: y = sin(x · a) + 0.5 cos(x · b)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, (n, 4)).astype(np.float32)
    a = np.array([1.5, -2.0, 0.5, 1.0], np.float32)
    b = np.array([-1.0, 0.5, 2.0, -0.5], np.float32)
    y = (np.sin(x @ a) + 0.5 * np.cos(x @ b))[:, None].astype(np.float32)
    return x, y


def init_params(hidden: int = 16, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((4, hidden)) * 0.5).astype(np.float32),
        np.zeros(hidden, np.float32),
        (rng.standard_normal((hidden, 1)) * 0.5).astype(np.float32),
        np.zeros(1, np.float32),
    ]


def train(steps: int = 200, lr: float = 0.2, log_every: int = 20) -> list[float]:
    """Full-batch SGD; returns the loss before each step."""
    x, y = make_data()
    params = init_params()
    step_fn = ts.value_and_grad(mlp_loss)  # argnums from @ts.autodiff: W1, b1, W2, b2
    opt = ts.optim.SGD(params, lr=lr)  # updates the arrays in place
    losses: list[float] = []
    for step in range(steps):
        loss, grads = step_fn(x, *params, y)
        losses.append(float(loss))
        opt.step(grads)
        if log_every and step % log_every == 0:
            print(f"step {step:4d}  loss {float(loss):.5f}")
    return losses


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    losses = train(n)
    print(f"loss: {losses[0]:.5f} -> {losses[-1]:.5f} after {n} steps")
