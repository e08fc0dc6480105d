"""``ts.jit`` functions inside torch autograd: gradients from Tessera's VJP program."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tessera as ts


@ts.jit
def _mlp(x, w1, b1, w2):
    h = ts.gelu(x @ w1 + b1)
    return ts.softmax(h @ w2, axis=-1), ts.sum(h, axis=-1)


def _params(dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(4, 8), (8, 16), (16,), (16, 3)]
    return [torch.randn(s, dtype=dtype, generator=g, requires_grad=True) for s in shapes]


def _torch_mlp(x, w1, b1, w2):
    h = torch.nn.functional.gelu(x @ w1 + b1, approximate="tanh")
    return torch.softmax(h @ w2, -1), h.sum(-1)


def test_results_carry_grad_fn():
    y, s = _mlp(*_params())
    assert y.requires_grad and s.requires_grad
    assert type(y.grad_fn).__name__ == "JitFunctionBackward"


def test_gradients_match_torch_float64():
    ps = _params()
    y, s = _mlp(*ps)
    (y[:, 0].sum() + (s * s).sum()).backward()
    got = [p.grad.clone() for p in ps]
    ref = [p.detach().clone().requires_grad_() for p in ps]
    yr, sr = _torch_mlp(*ref)
    (yr[:, 0].sum() + (sr * sr).sum()).backward()
    for a, r in zip(got, ref):
        np.testing.assert_allclose(a.numpy(), r.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_gradcheck():
    ps = _params()
    assert torch.autograd.gradcheck(lambda *a: _mlp(*a)[0], tuple(ps))


def test_only_inputs_that_require_grad_get_gradients():
    x, w1, b1, w2 = _params()
    x = x.detach()
    y, _ = _mlp(x, w1, b1, w2)
    y.sum().backward()
    assert x.grad is None and w1.grad is not None


def test_no_grad_mode_and_plain_tensors_give_plain_results():
    ps = _params()
    with torch.no_grad():
        y, _ = _mlp(*ps)
    assert not y.requires_grad
    y2, _ = _mlp(*[p.detach() for p in ps])
    assert not y2.requires_grad
    torch.testing.assert_close(y, y2)


def test_static_arguments_pass_through():
    @ts.jit
    def scaled(x, w, k: int):
        return ts.sum((x @ w) * float(k))

    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 4, dtype=torch.float64, generator=g)
    w = torch.randn(4, 2, dtype=torch.float64, generator=g, requires_grad=True)
    scaled(x, w, 3).backward()
    np.testing.assert_allclose(w.grad.numpy(), 3 * x.sum(0)[:, None].expand(4, 2).numpy())


def test_training_loop_with_torch_optim_matches_eager():
    """SGD on a ts.jit loss follows the same trajectory as the same loss in torch."""

    @ts.jit
    def loss_fn(x, y, w, b):
        return ts.mean((ts.tanh(x @ w + b) - y) ** 2)

    g = torch.Generator().manual_seed(2)
    x = torch.randn(16, 5, dtype=torch.float64, generator=g)
    y = torch.randn(16, 1, dtype=torch.float64, generator=g)
    w0 = torch.randn(5, 1, dtype=torch.float64, generator=g)
    runs = []
    for use_tessera in (True, False):
        w = w0.clone().requires_grad_()
        b = torch.zeros(1, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.SGD([w, b], lr=0.1)
        losses = []
        for _ in range(5):
            opt.zero_grad()
            if use_tessera:
                loss = loss_fn(x, y, w, b)
            else:
                loss = ((torch.tanh(x @ w + b) - y) ** 2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.detach().item())
        runs.append((losses, w.detach().clone()))
    (l1, w1), (l2, w2) = runs
    np.testing.assert_allclose(l1, l2, rtol=1e-12)
    np.testing.assert_allclose(w1.numpy(), w2.numpy(), rtol=1e-12)
    assert l1[-1] < l1[0]


def test_integer_results_are_not_differentiable():
    @ts.jit
    def f(x):
        return x * 2.0, ts.cast(x > 0.0, ts.int64)

    x = torch.randn(5, requires_grad=True)
    a, b = f(x)
    assert a.requires_grad and not b.requires_grad
    a.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((5,), 2.0))


def test_float32_gradients_within_tolerance():
    ps = [p.detach().float().requires_grad_() for p in _params()]
    y, _ = _mlp(*ps)
    y.pow(2).sum().backward()
    ref = [p.detach().double().requires_grad_() for p in ps]
    yr, _ = _torch_mlp(*ref)
    yr.pow(2).sum().backward()
    for a, r in zip(ps, ref):
        np.testing.assert_allclose(a.grad.numpy(), r.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_sharded_function_is_refused_not_cut():
    """A function with a mesh cannot go through torch autograd: a TesseraError says so
    instead of returning results with the graph silently cut."""

    @ts.jit(mesh={"dp": 2})
    def f(x):
        return ts.all_reduce(x * 2.0, "sum", "dp")

    with pytest.raises(ts.TesseraError, match="sharded"):
        f(torch.randn(4, requires_grad=True))


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])


def test_numpy_arguments_beside_tensors_that_require_grad():
    @ts.jit
    def f(x, w):
        return ts.sum(x @ w)

    x = np.ones((2, 3))
    w = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    f(x, w).backward()
    torch.testing.assert_close(w.grad, torch.full((3, 4), 2.0, dtype=torch.float64))


def test_ts_grad_of_tensors_that_require_grad_is_differentiable_again():
    """ts.grad called on tensors that require grad: the gradient is right and carries a
    grad_fn, whose backward (the VJP of the gradient program) gives second derivatives."""

    @ts.jit
    def f(x):
        return ts.sum(ts.tanh(x) * x)

    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    g = ts.grad(f)(x)
    value, g2 = ts.value_and_grad(f)(x)
    ref = torch.autograd.grad((torch.tanh(x) * x).sum(), x, create_graph=True)[0]
    torch.testing.assert_close(g, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g2, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(value, (torch.tanh(x) * x).sum(), rtol=1e-12, atol=1e-12)
    assert g.requires_grad
    g.sum().backward()
    second = x.grad.clone()
    x.grad = None
    ref.sum().backward()
    torch.testing.assert_close(second, x.grad, rtol=1e-12, atol=1e-12)
