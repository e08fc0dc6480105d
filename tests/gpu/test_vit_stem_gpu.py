"""The kernels of a ViT training step's stem on the GPU: broadcasts (a splat along the
last dim, merged dims), column reductions (bias gradients), split reductions (a loss's
mean) through ``ts.jit`` on CUDA tensors, with NaN-poisoned outputs on the checked path,
and the patch embedding's weight gradient (one GEMM over the image's patches) through
``torch.compile(backend="tessera")`` against float64. Skipped without a CUDA device."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402
from tessera.runtime import cuda  # noqa: E402

DT = {"bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64}


def _rand(shape, dtype: str, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(tuple(shape), device="cuda", dtype=torch.float64, generator=gen)
    x = torch.where(x.abs() < 0.05, torch.full_like(x, 0.3), x)
    return x.to(DT[dtype])


def _checked(fn, args):
    spec = fn.specialize(*args)
    (out,) = cuda.run_host(spec.ir("target"), spec.name, list(args), poison=True,
                           ptx=spec.ir("ptx"))
    return out


@pytest.mark.parametrize("src,dst,dtype", [
    ((), (4, 33, 65), "bf16"),
    ((8, 197, 1), (8, 197, 768), "bf16"),
    ((1, 197, 768), (8, 197, 768), "f32"),
    ((5, 1, 7), (3, 5, 9, 7), "f64"),
])
def test_broadcast(src, dst, dtype):
    x = _rand(src, dtype, 1)

    @ts.jit
    def f(x):
        return ts.broadcast_to(x, list(dst))

    want = x.expand(*dst)
    for got in (_checked(f, [x]), f(x)):
        assert torch.equal(got, want)


@pytest.mark.parametrize("shape,axis,dtype,tol", [
    ((64, 197, 768), (0, 1), "bf16", 1e-2),   # a bias gradient: the column kernels
    ((64, 197, 768), (0,), "f32", 1e-5),      # a position-embedding gradient
    ((32, 768, 14, 14), (0, 1, 2, 3), "f32", 1e-5),  # a loss's sum: the split kernels
    ((3, 40000), (1,), "f64", 1e-12),
])
def test_reductions(shape, axis, dtype, tol):
    x = _rand(shape, dtype, 2)

    @ts.jit
    def f(x):
        return ts.sum(x, axis=axis)

    ref = x.double().sum(axis)
    for got in (_checked(f, [x]), f(x)):
        err = ((got.double() - ref).abs().max() / ref.abs().max()).item()
        assert err < tol, err


def test_mean_of_a_large_activation():
    x = _rand((32, 768, 14, 14), "f32", 3)

    @ts.jit
    def f(x):
        return ts.mean(x * x)

    got = _checked(f, [x])
    np.testing.assert_allclose(got.double().item(), (x.double() ** 2).mean().item(), rtol=1e-5)


def test_patch_embedding_weight_gradient():
    import torch.nn.functional as F

    import tessera.torch as tt

    x = _rand((16, 3, 224, 224), "bf16", 4)
    w = (_rand((768, 3, 16, 16), "bf16", 5) * 0.05).requires_grad_()
    b = _rand((768,), "bf16", 6).requires_grad_()

    def loss(x, w, b):
        return F.conv2d(x, w, b, stride=16).float().pow(2).mean()

    tt.compile(loss)(x, w, b).backward()
    assert tt.last_report().graph_breaks == 0
    w64, b64 = w.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    loss(x.double(), w64, b64).backward()
    for got, ref in ((w.grad, w64.grad), (b.grad, b64.grad)):
        err = ((got.double() - ref).abs().max() / ref.abs().max()).item()
        assert err < 3e-2, err
