"""The Python autodiff API: ts.grad, ts.value_and_grad, ts.jvp, @ts.autodiff, ts.custom_vjp."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import tessera as ts


@ts.jit
@ts.autodiff
def loss_function(x, W, b, y_true):
    """The guide's autodiff example."""
    y_pred = ts.matmul(x, W) + b
    y_pred = ts.relu(y_pred)
    loss = ts.mse(y_pred, y_true)
    return loss


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in ((5, 3), (3, 2), (2,), (5, 2))]


def _torch_loss_grads(x, W, b, y):
    tx, tW, tb = (torch.tensor(v, requires_grad=True) for v in (x, W, b))
    loss = torch.nn.functional.mse_loss(torch.relu(tx @ tW + tb), torch.tensor(y))
    loss.backward()
    return loss.item(), tx.grad.numpy(), tW.grad.numpy(), tb.grad.numpy()


def test_guide_loss_function_grad_with_argnums() -> None:
    x, W, b, y = _data()
    grad_fn = ts.grad(loss_function, argnums=(1, 2))
    grad_W, grad_b = grad_fn(x, W, b, y)
    _, _, tW, tb = _torch_loss_grads(x, W, b, y)
    np.testing.assert_allclose(grad_W, tW, rtol=1e-10)
    np.testing.assert_allclose(grad_b, tb, rtol=1e-10)
    # parameter names work too
    gW2, gb2 = ts.grad(loss_function, argnums=("W", "b"))(x, W, b, y)
    np.testing.assert_array_equal(gW2, grad_W)
    np.testing.assert_array_equal(gb2, grad_b)
    np.testing.assert_allclose(ts.grad(loss_function, argnums=0)(x, W, b, y),
                               _torch_loss_grads(*_data())[1], rtol=1e-10)


def test_autodiff_decorator_records_default_argnums_and_value_and_grad() -> None:
    @ts.jit
    @ts.autodiff(wrt=("W", "b"))
    def loss(x, W, b, y_true):
        return ts.mse(ts.relu(ts.matmul(x, W) + b), y_true)

    x, W, b, y = _data(1)
    grad_W, grad_b = ts.grad(loss)(x, W, b, y)  # the guide's call, argnums from @autodiff
    value, (vW, vb) = ts.value_and_grad(loss)(x, W, b, y)
    tl, _, tW, tb = _torch_loss_grads(x, W, b, y)
    np.testing.assert_allclose(value, tl, rtol=1e-12)
    for got, want in ((grad_W, tW), (grad_b, tb), (vW, tW), (vb, tb)):
        np.testing.assert_allclose(got, want, rtol=1e-10)


def test_gradient_is_a_compiled_function_with_inspectable_ir() -> None:
    x, W, b, y = (a.astype(np.float32) for a in _data())
    grad_fn = ts.grad(loss_function, argnums=(1, 2))
    grad_fn(x, W, b, y)
    traced = grad_fn.inspect_ir("traced")
    assert "func.func @loss_function_grad(" in traced
    assert "-> (tensor<3x2xf32>, tensor<2xf32>)" in traced
    graph = grad_fn.inspect_ir("graph")
    assert "@loss_function_grad" in graph
    assert grad_fn.inspect_ir("traced") == traced  # same graph every time
    a = grad_fn(x, W, b, y)
    c = grad_fn(x, W, b, y)
    assert all(p.tobytes() == q.tobytes() for p, q in zip(a, c))


def test_torch_cpu_tensors_in_torch_tensors_out() -> None:
    x, W, b, y = (torch.tensor(a) for a in _data(2))
    gW = ts.grad(loss_function, argnums=1)(x, W, b, y)
    assert isinstance(gW, torch.Tensor)
    np.testing.assert_allclose(gW.numpy(), _torch_loss_grads(*_data(2))[2], rtol=1e-10)


def test_jvp_matches_torch() -> None:
    x, W, b, y = _data(3)
    rng = np.random.default_rng(9)
    tangents = [rng.standard_normal(a.shape) for a in (x, W, b, y)]
    out, tout = ts.jvp(loss_function, (x, W, b, y), tangents)

    def f(x, W, b, y):
        return torch.nn.functional.mse_loss(torch.relu(x @ W + b), y)

    want, want_t = torch.func.jvp(
        f, tuple(torch.tensor(a) for a in (x, W, b, y)), tuple(torch.tensor(t) for t in tangents)
    )
    np.testing.assert_allclose(out, want.item(), rtol=1e-12)
    np.testing.assert_allclose(tout, want_t.item(), rtol=1e-10)


@ts.custom_vjp
def custom_gelu(x):
    """GELU with custom backward pass"""
    return 0.5 * x * (1 + ts.tanh(0.79788456 * (x + 0.044715 * x**3)))


def custom_gelu_fwd(x):
    y = custom_gelu(x)
    return y, (x, y)  # Save for backward


def custom_gelu_bwd(saved, grad_output):
    x, y = saved
    # Custom gradient computation
    cdf = 0.5 * (1 + ts.tanh(0.79788456 * (x + 0.044715 * x**3)))
    pdf = ts.exp(-0.5 * x**2) / math.sqrt(2 * ts.pi)
    grad_input = grad_output * (cdf + x * pdf)
    return grad_input


custom_gelu.defvjp(custom_gelu_fwd, custom_gelu_bwd)


def test_custom_vjp_uses_the_user_backward() -> None:
    x = np.linspace(-3.0, 3.0, 13)
    tx = torch.tensor(x)
    y = custom_gelu(x)  # on arrays: runs as ts.jit
    np.testing.assert_allclose(
        y, torch.nn.functional.gelu(tx, approximate="tanh").numpy(), rtol=1e-6, atol=1e-8
    )
    g = ts.grad(lambda x, c: ts.sum(custom_gelu(x) * c))(x, np.full(13, 2.0))
    cdf = 0.5 * (1 + np.tanh(0.79788456 * (x + 0.044715 * x**3)))
    pdf = np.exp(-0.5 * x**2) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(g, 2.0 * (cdf + x * pdf), rtol=1e-12)
    # differs from differentiating the forward formula, so the custom rule was used
    tx.requires_grad_(True)
    (torch.nn.functional.gelu(tx, approximate="tanh") * 2.0).sum().backward()
    assert np.max(np.abs(g - tx.grad.numpy())) > 1e-4
    # the marker op names the rule in the traced IR
    assert 'tessera.custom_vjp = "custom_gelu#' in ts.jit(lambda x: custom_gelu(x)).trace(x).__str__()


def test_custom_vjp_without_rule_is_differentiated_normally() -> None:
    @ts.custom_vjp
    def square(x):
        return x * x

    x = np.array([1.0, -2.0, 3.0])
    np.testing.assert_allclose(ts.grad(lambda x: ts.sum(square(x)))(x), 2 * x)


def test_errors_name_the_problem() -> None:
    x, W, b, y = _data()
    with pytest.raises(ts.TesseraError, match="must return one floating-point scalar"):
        ts.grad(lambda x: x * 2.0)(x)
    with pytest.raises(ts.TesseraTypeError, match="argnums 7 out of range for 4 positional"):
        ts.grad(loss_function, argnums=7)(x, W, b, y)
    with pytest.raises(ts.TesseraTypeError, match="parameter 'n' is not a tensor argument"):
        ts.grad(lambda x, n: ts.sum(x * float(n)), argnums=1)(x, 3)
    with pytest.raises(ts.TesseraTypeError, match="no parameter named 'V'"):
        ts.grad(loss_function, argnums="V")(x, W, b, y)
    with pytest.raises(ts.TesseraError, match=r"tgraph.all_slice .* is not differentiable"):
        with ts.dist.use_mesh({"tp": 1}):
            ts.grad(lambda a: ts.sum(ts.all_slice(a, axis="tp", dim=0)))(np.eye(3))


def test_train_mlp_example_loss_falls() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "train_mlp.py"
    spec = importlib.util.spec_from_file_location("train_mlp", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    losses = mod.train(steps=25, log_every=0)
    assert losses[-1] < 0.5 * losses[0]
    assert all(np.isfinite(losses))
