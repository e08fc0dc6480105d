"""Gradients on the GPU equal the CPU reference ones. Skipped without a CUDA device.

The same ``ts.grad`` function is called with CUDA tensors (lowered and run as
PTX) and with numpy arrays (numpy interpreter); float32 results must agree to
float32 accuracy, and two GPU runs must be bitwise identical.
"""

import numpy as np
import pytest

import tessera as ts

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@ts.jit
@ts.autodiff(wrt=("W", "b"))
def loss_function(x, W, b, y_true):
    y_pred = ts.matmul(x, W) + b
    y_pred = ts.relu(y_pred)
    return ts.mse(y_pred, y_true)


@ts.jit
def mlp_loss(x, W1, b1, W2, b2, y_true):
    h = ts.gelu(ts.matmul(x, W1) + b1)
    return ts.mse(ts.softmax(ts.matmul(h, W2) + b2, axis=-1), y_true)


def _arrays(shapes, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) * 0.5 for s in shapes]


@pytest.mark.parametrize(
    "fn, argnums, shapes",
    [
        (loss_function, None, [(64, 32), (32, 16), (16,), (64, 16)]),
        (mlp_loss, (1, 2, 3, 4), [(32, 64), (64, 128), (128,), (128, 16), (16,), (32, 16)]),
    ],
    ids=["guide_loss", "mlp"],
)
def test_gpu_gradients_match_cpu(fn, argnums, shapes) -> None:
    args = _arrays(shapes, 0)
    grad_fn = ts.grad(fn, argnums=argnums)
    cpu = grad_fn(*args)
    gpu_args = [torch.tensor(a, device="cuda") for a in args]
    gpu = grad_fn(*gpu_args)
    gpu_again = grad_fn(*gpu_args)
    for c, g, g2 in zip(cpu, gpu, gpu_again):
        assert isinstance(g, torch.Tensor) and g.is_cuda
        np.testing.assert_allclose(g.cpu().numpy(), c, rtol=1e-4, atol=1e-5)
        assert torch.equal(g, g2)
