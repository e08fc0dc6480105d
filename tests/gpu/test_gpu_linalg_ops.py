"""fft, fft2d, cholesky and svd through ``ts.jit`` on CUDA tensors, against torch.fft /
torch.linalg in float64, on random sizes (powers of two and not). Skipped without a
CUDA device.

Tolerances (fp32; f64 cases use 1e-12 in place of 1e-5):

* fft / fft2d: every output within ``1e-5 * sum |x|`` over its transformed line (or
  plane; times ``1/n`` for the inverse), a bound on ``|X_k|``: the DFT is perfectly
  conditioned, so this is the float64 reference's magnitude scale.
* cholesky: ``max |L - L_ref| <= 1e-5 * cond(A) * max |L_ref|``.
* svd: ``|S - S_ref| <= 1e-5 * sqrt(max(m, n)) * S_max`` (singular values are
  perfectly conditioned in absolute terms), the same for ``U diag(S) Vh - A``; columns
  of U and rows of Vh orthonormal within ``1e-5 * sqrt(max(m, n))``; singular vectors
  equal torch's up to sign within that tolerance divided by the gap to the nearest
  other singular value (relative to ``S_max``).
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402
from tessera import op  # noqa: E402

TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def _rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed + sum(shape))
    x = torch.randn(*shape, device="cuda", dtype=torch.float64, generator=gen)
    x = torch.where(x.abs() < 0.05, torch.full_like(x, 0.3), x)
    return x.to(dtype)


# --------------------------------------------------------------------------- fft


@ts.jit
def _fft(x):
    return op.fft(x)


@ts.jit
def _ifft(x):
    return op.ifft(x)


@ts.jit
def _fft2d(x):
    return op.fft2d(x)


@ts.jit
def _ifft2d(x):
    return op.ifft2d(x)


@ts.jit
def _fft_round_trip(x):
    return op.ifft(op.fft(x))


FFT = {"fft": (_fft, torch.fft.fft, (-1,)), "ifft": (_ifft, torch.fft.ifft, (-1,)),
       "fft2d": (_fft2d, torch.fft.fft2, (-2, -1)), "ifft2d": (_ifft2d, torch.fft.ifft2, (-2, -1))}


@pytest.mark.parametrize("name,shape,dtype", [
    ("fft", (5, 8), torch.float32),
    ("fft", (3, 1024), torch.float32),
    ("fft", (7, 100), torch.float32),
    ("fft", (2, 3, 257), torch.float32),
    ("fft", (1, 2048), torch.float32),
    ("fft", (4, 96), torch.float64),
    ("fft", (9, 1), torch.float32),
    ("ifft", (6, 64), torch.float32),
    ("ifft", (6, 45), torch.float64),
    ("fft2d", (3, 32, 16), torch.float32),
    ("fft2d", (2, 12, 20), torch.float32),
    ("fft2d", (17, 9), torch.float64),
    ("ifft2d", (2, 64, 30), torch.float32),
])
def test_fft_matches_torch(name, shape, dtype):
    fn, ref, axes = FFT[name]
    x = _rand(*shape, dtype=dtype)
    got = fn(x)
    torch.cuda.synchronize()
    assert got.is_cuda and got.dtype == (torch.complex64 if dtype == torch.float32
                                         else torch.complex128)
    assert tuple(got.shape) == shape
    x64 = x.double()
    want = ref(x64)
    scale = x64.abs().sum(dim=axes, keepdim=True)
    if name.startswith("i"):
        scale = scale / math.prod(shape[a] for a in axes)
    err = (got.to(torch.complex128) - want).abs()
    assert torch.isfinite(err).all(), "non-finite (unwritten?) elements"
    assert bool((err <= TOL[dtype] * scale).all()), float((err / scale).max())


def test_fft_of_complex_values_round_trips():
    x = _rand(4, 60)
    got = _fft_round_trip(x)
    torch.cuda.synchronize()
    assert got.dtype == torch.complex64
    err = (got.to(torch.complex128) - x.double()).abs()
    mean_abs = x.double().abs().mean(-1, keepdim=True)  # sum |x| / n along each line
    assert bool((err <= 2e-5 * mean_abs).all()), float((err / mean_abs).max())


def test_fft_is_deterministic():
    x = _rand(8, 300)
    a, b = _fft(x), _fft(x)
    torch.cuda.synchronize()
    assert torch.equal(torch.view_as_real(a), torch.view_as_real(b))


# --------------------------------------------------------------------------- cholesky


@ts.jit
def _cholesky(a):
    return op.cholesky(a)


def _spd(*shape: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    b = _rand(*shape, dtype=torch.float64, seed=seed)
    n = shape[-1]
    return (b @ b.transpose(-1, -2) + n * torch.eye(n, device="cuda", dtype=torch.float64)).to(dtype)


@pytest.mark.parametrize("shape,dtype", [
    ((1, 1), torch.float32), ((7, 7), torch.float32), ((3, 33, 33), torch.float32),
    ((64, 64), torch.float32), ((2, 100, 100), torch.float32), ((5, 31, 31), torch.float64),
    # several panels of 256: trailing updates, a partial last block and panel
    ((600, 600), torch.float32), ((2, 513, 513), torch.float64), ((3, 257, 257), torch.float32),
])
def test_cholesky_matches_torch(shape, dtype):
    a = _spd(*shape, dtype=dtype)
    got = _cholesky(a)
    torch.cuda.synchronize()
    a64 = a.double()
    want = torch.linalg.cholesky(a64)
    cond = float(torch.linalg.cond(a64).max())
    err = float((got.double() - want).abs().max())
    assert err <= TOL[dtype] * cond * float(want.abs().max()), err
    assert bool((torch.triu(got, 1) == 0).all())


def test_cholesky_not_positive_definite_is_nan():
    a = _spd(6, 6, dtype=torch.float32)
    a[3, 3] = -50.0
    got = _cholesky(a)
    torch.cuda.synchronize()
    assert torch.isfinite(got[:, :3]).all()
    assert torch.isnan(torch.tril(got)[3:, 3:].diagonal()).all()


# --------------------------------------------------------------------------- svd


@ts.jit
def _svd(a):
    return op.svd(a)


@pytest.mark.parametrize("shape,dtype", [
    ((5, 3), torch.float32), ((3, 5), torch.float32), ((2, 17, 9), torch.float32),
    ((33, 20), torch.float32), ((4, 100, 7), torch.float32), ((48, 30), torch.float32),
    ((6, 40), torch.float64), ((1, 1), torch.float32),
    # past 48 columns: the blocked kernels (f32) and the pair kernels (f64)
    ((130, 97), torch.float32), ((2, 64, 150), torch.float32), ((100, 60), torch.float64),
])
def test_svd_matches_torch(shape, dtype):
    a = _rand(*shape, dtype=dtype)
    u, s, vh = _svd(a)
    torch.cuda.synchronize()
    *_, m, n = shape
    k = min(m, n)
    assert tuple(u.shape) == (*shape[:-2], m, k) and tuple(s.shape) == (*shape[:-2], k)
    assert tuple(vh.shape) == (*shape[:-2], k, n)
    a64 = a.double()
    un, sn, vhn = torch.linalg.svd(a64, full_matrices=False)
    smax = float(sn.max())
    tol = TOL[dtype] * math.sqrt(max(m, n))
    u64, s64, vh64 = u.double(), s.double(), vh.double()
    assert bool((s64[..., 1:] <= s64[..., :-1]).all()), "singular values not descending"
    assert float((s64 - sn).abs().max()) <= tol * smax
    rec = (u64 * s64.unsqueeze(-2)) @ vh64
    assert float((rec - a64).abs().max()) <= tol * smax
    eye = torch.eye(k, device="cuda", dtype=torch.float64)
    assert float((u64.transpose(-1, -2) @ u64 - eye).abs().max()) <= tol
    assert float((vh64 @ vh64.transpose(-1, -2) - eye).abs().max()) <= tol
    # vectors up to sign, each within tol / (relative gap to its neighbours)
    sign = torch.sign((u64 * un).sum(-2))  # [..., k]
    big = torch.full_like(sn[..., :1], math.inf)
    gaps = torch.minimum(torch.cat([big, sn[..., :-1] - sn[..., 1:]], -1),
                         torch.cat([sn[..., :-1] - sn[..., 1:], big], -1)) / smax
    vec_tol = 10 * tol / gaps.clamp(min=1e-3) + tol
    du = (u64 * sign.unsqueeze(-2) - un).abs().amax(-2)  # per column
    dv = (vh64 * sign.unsqueeze(-1) - vhn).abs().amax(-1)  # per row
    assert bool((du <= vec_tol).all()) and bool((dv <= vec_tol).all())
