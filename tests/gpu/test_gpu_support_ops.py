"""The derivative support ops on the GPU: tgraph.real / imag / complex and
tgraph.triangular_solve through ``ts.jit`` on CUDA tensors against torch in float64,
and ``ts.grad`` of a cholesky, an fft and an spmm loss (whose gradients use
triangular_solve, complex / real / imag / complex add, spmm_transpose and sddmm) on
CUDA tensors equal to the CPU result and to ``torch.autograd``. Skipped without a CUDA
device.

Tolerances: complex parts are data movement (exact); triangular solve
``max |X - X_ref| <= tol * n * cond(op(A)) * max |X_ref|``; gradients relative
``1e-10`` (f64) against the CPU result and torch.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402

TOL = {torch.float32: 1e-6, torch.float64: 1e-14}


def _rand(*shape: int, dtype: torch.dtype = torch.float64, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed + sum(shape))
    x = torch.randn(*shape, device="cuda", dtype=torch.float64, generator=gen)
    x = torch.where(x.abs() < 0.05, torch.full_like(x, 0.3), x)
    return x.to(dtype)


# --------------------------------------------------------------------------- complex parts


@ts.jit
def _parts(a, b):
    z = ts.complex(a, b)
    w = z + z
    return z, ts.real(w), ts.imag(z)


@pytest.mark.parametrize("shape,dtype", [((7, 13), torch.float32), ((3, 5, 301), torch.float64)])
def test_complex_parts_match_torch(shape, dtype):
    a, b = _rand(*shape, dtype=dtype), _rand(*shape, dtype=dtype, seed=1)
    z, r, i = _parts(a, b)
    torch.cuda.synchronize()
    assert z.is_cuda and z.dtype == (torch.complex64 if dtype == torch.float32
                                     else torch.complex128)
    assert torch.equal(z, torch.complex(a, b))
    assert torch.equal(r, a + a)
    assert torch.equal(i, b)


# --------------------------------------------------------------------------- triangular solve


@pytest.mark.parametrize("an,bn,dtype,upper,trans", [
    ((5, 5), (5, 3), torch.float64, False, False),
    ((2, 7, 7), (2, 7, 300), torch.float64, True, False),
    ((3, 9, 9), (3, 9, 4), torch.float32, False, True),
    ((33, 33), (33, 65), torch.float32, True, True),
])
def test_triangular_solve_matches_torch(an, bn, dtype, upper, trans):
    n = an[-1]
    a = (_rand(*an) + 3.0 * torch.eye(n, device="cuda", dtype=torch.float64)).to(dtype)
    _solve_and_check(a, _rand(*bn, dtype=dtype, seed=2), upper, trans)


def _solve_and_check(a, b, upper: bool, trans: bool) -> None:
    """``ts.triangular_solve`` through ``ts.jit`` on CUDA tensors, against float64."""

    @ts.jit
    def solve(u, v):
        return ts.triangular_solve(u, v, upper=upper, transpose_a=trans)

    x = solve(a, b)
    torch.cuda.synchronize()
    assert x.is_cuda and x.dtype == b.dtype and x.shape == b.shape
    _check_solve(x, a, b, upper, trans)


def _check_solve(got, a, b, upper: bool, trans: bool) -> None:
    t = torch.triu(a.double()) if upper else torch.tril(a.double())
    if trans:
        t = t.mT
    want = torch.linalg.solve_triangular(t, b.double(), upper=(upper != trans))
    cond = float(torch.linalg.cond(t).max())
    err = float((got.double() - want).abs().max())
    assert err <= TOL[got.dtype] * a.shape[-1] * cond * float(want.abs().max()), err


@pytest.mark.parametrize("an,bn,dtype,upper,trans", [
    ((300, 300), (300, 100), torch.float32, True, False),  # two panels, two column tiles
    ((2, 513, 513), (2, 513, 7), torch.float64, False, True),
    ((3, 129, 129), (3, 129, 1), torch.float32, False, False),
])
def test_blocked_triangular_solve_matches_torch(an, bn, dtype, upper, trans):
    """n > 64: the blocked kernels (tile_triangular_blocked), on well-conditioned
    triangles (off-diagonal entries of size 1 / sqrt(n))."""
    n = an[-1]
    a = (_rand(*an) / n ** 0.5 + 2.0 * torch.eye(n, device="cuda", dtype=torch.float64)).to(dtype)
    _solve_and_check(a, _rand(*bn, dtype=dtype, seed=3), upper, trans)


# --------------------------------------------------------------------------- gradients


def _chol_loss(a, c):
    return ts.sum(ts.cholesky(a) * c)


def _fft_loss(x, c):
    z = ts.fft(x)
    return ts.sum(ts.real(z) * ts.imag(z) * c)


def _spmm_loss(ip, ix, v, d, c):
    return ts.sum(ts.spmm(ip, ix, v, d, sparse_shape=(40, 9)) * c)


def _losses():
    rng = np.random.default_rng(3)
    b = rng.standard_normal((17, 17))
    counts = rng.integers(0, 6, size=40)
    counts[0] = counts[20] = 0
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    indices = rng.integers(0, 9, size=int(indptr[-1])).astype(np.int32)
    nnz = indices.size
    return {
        "cholesky": (_chol_loss, [b @ b.T + 17 * np.eye(17), rng.standard_normal((17, 17))], 0,
                     lambda a, c: (torch.linalg.cholesky(a) * c).sum()),
        "fft": (_fft_loss, [rng.standard_normal((5, 24)), rng.standard_normal((5, 24))], 0,
                lambda x, c: (torch.fft.fft(x).real * torch.fft.fft(x).imag * c).sum()),
        "spmm": (_spmm_loss, [indptr, indices, rng.standard_normal(nnz),
                              rng.standard_normal((9, 33)), rng.standard_normal((40, 33))],
                 (2, 3), None),
    }


@pytest.mark.parametrize("name", ["cholesky", "fft", "spmm"])
def test_grad_on_cuda_equals_cpu_and_torch(name):
    f, args, argnums, ref = _losses()[name]
    gf = ts.grad(f, argnums=argnums)
    cpu = gf(*args)
    gpu = gf(*[torch.as_tensor(a, device="cuda") for a in args])
    torch.cuda.synchronize()
    cpu = cpu if isinstance(cpu, tuple) else (cpu,)
    gpu = gpu if isinstance(gpu, tuple) else (gpu,)
    assert len(cpu) == len(gpu)
    for c, g_ in zip(cpu, gpu):
        assert g_.is_cuda
        c = np.asarray(c)
        err = np.abs(g_.double().cpu().numpy() - c).max()
        assert err <= 1e-10 * max(1.0, np.abs(c).max()), err
    if name == "spmm":  # the two sparse adjoints against dense torch
        ip, ix, v, d, c = args
        rows = torch.as_tensor(np.repeat(np.arange(40), np.diff(ip)))
        cols = torch.as_tensor(ix.astype(np.int64))
        vt, dt = torch.tensor(v, requires_grad=True), torch.tensor(d, requires_grad=True)
        dense = torch.zeros(40, 9, dtype=torch.float64).index_put((rows, cols), vt,
                                                                  accumulate=True)
        want = torch.autograd.grad(((dense @ dt) * torch.tensor(c)).sum(), (vt, dt))
    else:
        targs = [torch.tensor(a, requires_grad=True) for a in args]
        want = torch.autograd.grad(ref(*targs), (targs[0],))
    for g_, w in zip(gpu, want):
        err = float((g_.double().cpu() - w).abs().max())
        assert err <= 1e-10 * max(1.0, float(w.abs().max())), err


def test_sparse_gradients_are_deterministic():
    f, args, argnums, _ = _losses()["spmm"]
    gf = ts.grad(f, argnums=argnums)
    cuda_args = [torch.as_tensor(a, device="cuda") for a in args]
    a, b = gf(*cuda_args), gf(*cuda_args)
    torch.cuda.synchronize()
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def _conv_loss(x, w, b, c):
    return ts.sum(ts.conv2d(x, w, b, stride=(2, 1), padding=(1, 2)) * c)


def _svd_loss(a, cv):
    u, s, vh = ts.svd(a)
    return ts.sum(s * s * s) + ts.sum(vh * vh * cv)  # both terms sign-invariant


@pytest.mark.parametrize("name", ["conv2d", "svd"])
def test_conv2d_and_svd_gradients_on_cuda_equal_cpu(name):
    """The conv2d and svd adjoints (conv2d, matmul, transpose, elementwise and svd
    kernels) on CUDA tensors, against the CPU run and torch.autograd."""
    rng = np.random.default_rng(5)
    if name == "conv2d":
        x, w, b = rng.standard_normal((2, 3, 9, 8)), rng.standard_normal((4, 3, 3, 2)), \
            rng.standard_normal(4)
        c = rng.standard_normal((2, 4, 5, 11))
        args, argnums = [x, w, b, c], (0, 1, 2)
        f = _conv_loss

        def ref(x, w, b, c):
            y = torch.nn.functional.conv2d(x, w, b, stride=(2, 1), padding=(1, 2))
            return (y * c).sum()
    else:
        a = rng.standard_normal((7, 5))
        args, argnums = [a, rng.standard_normal((5, 5))], 0
        f = _svd_loss

        def ref(a, cv):
            u, s, vh = torch.linalg.svd(a, full_matrices=False)
            return (s * s * s).sum() + (vh * vh * cv).sum()
    gf = ts.grad(f, argnums=argnums)
    cpu = gf(*args)
    gpu = gf(*[torch.as_tensor(a, device="cuda") for a in args])
    torch.cuda.synchronize()
    cpu = cpu if isinstance(cpu, tuple) else (cpu,)
    gpu = gpu if isinstance(gpu, tuple) else (gpu,)
    targs = [torch.tensor(a, requires_grad=True) for a in args]
    idx = argnums if isinstance(argnums, tuple) else (argnums,)
    want = torch.autograd.grad(ref(*targs), [targs[i] for i in idx])
    for c, g_, w in zip(cpu, gpu, want):
        assert g_.is_cuda
        scale = max(1.0, float(w.abs().max()))
        assert float((g_.double().cpu() - torch.as_tensor(np.asarray(c))).abs().max()) <= 1e-9 * scale
        assert float((g_.double().cpu() - w).abs().max()) <= 1e-8 * scale
