"""Which arguments ``ts.grad`` differentiates: the rule of docs/AUTODIFF.md, on the guide's
examples as written."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tessera as ts
from tessera.autodiff.api import PARAMETERS, is_data_name


@ts.jit
@ts.autodiff
def loss_function(x, W, b, y_true):
    """Automatic differentiation example"""
    # Forward pass
    y_pred = ts.matmul(x, W) + b
    y_pred = ts.relu(y_pred)
    loss = ts.mse(y_pred, y_true)
    return loss


def _data():
    rng = np.random.default_rng(7)
    return [rng.standard_normal(s) for s in ((6, 3), (3, 2), (2,), (6, 2))]


def _torch(x, W, b, y):
    t = [torch.tensor(a, requires_grad=True) for a in (x, W, b)]
    ls = torch.nn.functional.mse_loss(torch.relu(t[0] @ t[1] + t[2]), torch.tensor(y))
    ls.backward()
    return ls.item(), [a.grad.numpy() for a in t]


def test_guide_basic_autodiff_returns_the_parameter_gradients() -> None:
    x, W, b, y_true = _data()
    # Compute gradients
    grad_fn = ts.grad(loss_function)
    grad_W, grad_b = grad_fn(x, W, b, y_true)
    value, (_, tW, tb) = _torch(x, W, b, y_true)
    np.testing.assert_allclose(grad_W, tW, rtol=1e-10)
    np.testing.assert_allclose(grad_b, tb, rtol=1e-10)
    v, (vW, vb) = ts.value_and_grad(loss_function)(x, W, b, y_true)
    np.testing.assert_allclose(v, value, rtol=1e-12)
    np.testing.assert_array_equal(vW, grad_W)
    np.testing.assert_array_equal(vb, grad_b)


def test_one_parameter_gives_one_gradient_and_plain_functions_follow_jax() -> None:
    x, W, _, _ = _data()

    @ts.jit
    @ts.autodiff
    def distributed_like(x, W):
        return ts.sum(ts.matmul(x, W) ** 2)

    grad_W = ts.grad(distributed_like)(x, W)
    np.testing.assert_allclose(grad_W, 2 * x.T @ (x @ W), rtol=1e-12)

    def loss_fn(W):  # the guide's tessera.grad(loss_fn)(W): not marked, argnums=0
        return ts.sum(ts.tanh(W))

    gW = ts.grad(loss_fn)(W)
    np.testing.assert_allclose(gW, 1 - np.tanh(W) ** 2, rtol=1e-12)
    np.testing.assert_allclose(ts.grad(lambda x, W: ts.sum(x * W))(W, x[:3, :2]), x[:3, :2])


def test_explicit_choices_override_the_default() -> None:
    x, W, b, y = _data()
    _, (tx, tW, _) = _torch(x, W, b, y)
    np.testing.assert_allclose(ts.grad(loss_function, argnums=0)(x, W, b, y), tx, rtol=1e-10)
    (gW,) = ts.grad(loss_function, wrt=("W",))(x, W, b, y)
    np.testing.assert_allclose(gW, tW, rtol=1e-10)

    @ts.autodiff(wrt="x")
    def declared(x, W):
        return ts.sum(ts.matmul(x, W))

    np.testing.assert_allclose(ts.grad(declared)(x, W), np.ones((6, 2)) @ W.T, rtol=1e-12)
    with pytest.raises(ts.TesseraTypeError, match="give argnums or wrt, not both"):
        ts.grad(loss_function, argnums=1, wrt="W")


def test_all_data_arguments_fall_back_to_the_first() -> None:
    @ts.autodiff
    def f(x, y_true):
        return ts.mse(ts.tanh(x), y_true)

    x, y = np.linspace(-1, 1, 4), np.zeros(4)
    np.testing.assert_allclose(ts.grad(f)(x, y), 2 * np.tanh(x) * (1 - np.tanh(x) ** 2) / 4,
                               rtol=1e-12)
    assert repr(ts.grad(f)).endswith("argnums=parameters>") and repr(PARAMETERS) == "parameters"


@pytest.mark.parametrize(("name", "data"), [
    ("x", True), ("X", True), ("y_true", True), ("x_batch", True), ("inputs", True),
    ("labels", True), ("W", False), ("b", False), ("Wqkv", False), ("weights", False),
    ("xy", False),
])
def test_data_names(name: str, data: bool) -> None:
    assert is_data_name(name) is data
