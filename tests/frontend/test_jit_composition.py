"""A ``@ts.jit`` function called inside a traced function is inlined, with its
annotations, policies and mesh; ``ts.grad`` and ``ts.jvp`` differentiate through it."""


import numpy as np
import pytest
import torch

import tessera as ts


@ts.jit
def layer(
    x: ts.Tensor["B", "D", ts.f64],  # noqa: F821
    W: ts.Tensor["D", "K", ts.f64],  # noqa: F821
) -> ts.Tensor["B", "K", ts.f64]:  # noqa: F821
    return ts.tanh(ts.matmul(x, W))


@ts.jit
def model(x, W1, W2):
    return layer(layer(x, W1), W2)


@ts.jit
def loss(x, W1, W2, y_true):
    return ts.mse(model(x, W1, W2), y_true)


def _data():
    rng = np.random.default_rng(3)
    return rng.standard_normal((4, 3)), rng.standard_normal((3, 5)), rng.standard_normal((5, 2)), \
        rng.standard_normal((4, 2))


def _torch(x, W1, W2, y):
    t = [torch.tensor(a, requires_grad=True) for a in (x, W1, W2)]
    out = torch.tanh(torch.tanh(t[0] @ t[1]) @ t[2])
    ls = torch.nn.functional.mse_loss(out, torch.tensor(y))
    ls.backward()
    return out.detach().numpy(), ls.item(), [a.grad.numpy() for a in t]


def test_nested_jit_is_inlined_and_runs() -> None:
    x, W1, W2, y = _data()
    out, ref_loss, _ = _torch(x, W1, W2, y)
    np.testing.assert_allclose(model(x, W1, W2), out, rtol=1e-12)
    np.testing.assert_allclose(loss(x, W1, W2, y), ref_loss, rtol=1e-12)
    text = loss.inspect_ir("traced")
    assert text.count("tgraph.tanh") == 2 and "func.call" not in text
    assert text.count("func.func") == 1


def test_grad_and_jvp_go_through_jitted_parts() -> None:
    x, W1, W2, y = _data()
    _, _, (gx, gW1, gW2) = _torch(x, W1, W2, y)
    got = ts.grad(loss, argnums=(0, 1, 2))(x, W1, W2, y)
    for a, b in zip(got, (gx, gW1, gW2)):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    # a plain function calling jitted parts
    g = ts.grad(lambda W1: ts.sum(model(x, W1, W2) ** 2))(W1)
    tW1 = torch.tensor(W1, requires_grad=True)
    (torch.tanh(torch.tanh(torch.tensor(x) @ tW1) @ torch.tensor(W2)) ** 2).sum().backward()
    np.testing.assert_allclose(g, tW1.grad.numpy(), rtol=1e-10)
    # forward mode
    dW1 = np.ones_like(W1)
    _, tangent = ts.jvp(lambda W1: ts.sum(model(x, W1, W2)), (W1,), (dW1,))
    _, t_ref = torch.func.jvp(
        lambda w: torch.tanh(torch.tanh(torch.tensor(x) @ w) @ torch.tensor(W2)).sum(),
        (torch.tensor(W1),), (torch.tensor(dW1),))
    np.testing.assert_allclose(tangent, t_ref.numpy(), rtol=1e-10)


def test_a_gradient_inside_a_jitted_function_is_inlined() -> None:
    x, W1, W2, y = _data()
    _, _, (_, gW1, _) = _torch(x, W1, W2, y)

    @ts.jit
    def sgd_step(x, W1, W2, y_true):
        return W1 - 0.1 * ts.grad(loss, argnums=1)(x, W1, W2, y_true)

    np.testing.assert_allclose(sgd_step(x, W1, W2, y), W1 - 0.1 * gW1, rtol=1e-10)


def test_annotations_and_policies_of_the_callee_hold() -> None:
    @ts.jit
    def acc(a: ts.Tensor["N", ts.bf16 @ ts.accum(ts.f32)]):  # noqa: F821
        return ts.sum(a)

    @ts.jit
    def caller(a):
        return acc(a)

    a = np.arange(8, dtype=np.float32).astype(ts.bf16.np_dtype)
    text = caller.trace(a)
    assert "tgraph.cast" in str(text)  # the argument takes the callee's policy
    np.testing.assert_allclose(np.float64(caller(a)), 28.0)

    @ts.jit
    def bad_rank(x):
        return layer(x, x[0])

    with pytest.raises(ts.ShapeError, match=r"layer: argument 'W' has rank 1.*test_jit_composition"):
        bad_rank(np.ones((3, 3)))

    @ts.jit
    def bad_dtype(x):
        return layer(ts.cast(x, ts.f32), ts.cast(x, ts.f32))

    with pytest.raises(ts.TesseraTypeError, match=r"layer: argument 'x' has dtype .*annotation"):
        bad_dtype(np.ones((3, 3)))


def test_mesh_of_the_callee_becomes_the_callers() -> None:
    @ts.jit(mesh={"tp": 1})
    def gather(y):
        return ts.all_gather(y, axis="tp")

    @ts.jit
    def caller(y):
        return gather(y) * 2.0

    y = np.ones((2, 2))
    np.testing.assert_array_equal(caller(y), 2 * y)
    assert "tessera.mesh = #tessera.mesh<tp = 1>" in caller.inspect_ir("traced")

    @ts.jit(mesh={"tp": 1, "dp": 1})
    def other(y):
        return gather(y)

    with pytest.raises(ts.ShapeError, match="compiled for mesh"):
        other(y)


def test_jvp_inside_a_jitted_function_is_inlined() -> None:
    x, W1, W2, _ = _data()
    dW1 = np.full_like(W1, 0.5)

    @ts.jit
    def directional(x, W1, W2, dW1):
        _, tangent = ts.jvp(lambda W1: ts.sum(model(x, W1, W2)), (W1,), (dW1,))
        return tangent

    _, t_ref = torch.func.jvp(
        lambda w: torch.tanh(torch.tanh(torch.tensor(x) @ w) @ torch.tensor(W2)).sum(),
        (torch.tensor(W1),), (torch.tensor(dW1),))
    np.testing.assert_allclose(directional(x, W1, W2, dW1), t_ref.numpy(), rtol=1e-10)
    assert "func.func" in directional.inspect_ir("traced")


def test_gradients_of_closures_over_traced_values() -> None:
    x, W1, W2, y = _data()
    _, _, (_, gW1, gW2) = _torch(x, W1, W2, y)

    @ts.jit
    def step(x, W1, W2, y_true):
        # the lambdas close over x, W2, y_true of this trace: constants of their gradient
        g1 = ts.grad(lambda W1: ts.mse(model(x, W1, W2), y_true))(W1)
        g2 = ts.grad(lambda W2: ts.mse(model(x, W1, W2), y_true))(W2)
        return W1 - 0.1 * g1, W2 - 0.1 * g2

    n1, n2 = step(x, W1, W2, y)
    np.testing.assert_allclose(n1, W1 - 0.1 * gW1, rtol=1e-10)
    np.testing.assert_allclose(n2, W2 - 0.1 * gW2, rtol=1e-10)
    x2 = x + 1.0  # a second call traces again with the new closure values
    _, _, (_, gW1b, _) = _torch(x2, W1, W2, y)
    np.testing.assert_allclose(step(x2, W1, W2, y)[0], W1 - 0.1 * gW1b, rtol=1e-10)


def test_second_order_through_nested_grads() -> None:
    x = np.linspace(-1.0, 1.0, 5)

    @ts.jit
    def hessian_diag(x):
        return ts.grad(lambda z: ts.sum(ts.grad(lambda u: ts.sum(ts.tanh(u) * z))(z)))(x)

    t = np.tanh(x)
    # d/dz sum(tanh'(z) * z) = tanh''(z) z + tanh'(z)
    np.testing.assert_allclose(hessian_diag(x), -2 * t * (1 - t**2) * x + (1 - t**2), rtol=1e-10)
