"""conv2d, spmm, randn and poisson through ``ts.jit`` on CUDA tensors.

conv2d and spmm are compared with torch in float64 on random odd shapes (fp32 within
1e-5, bf16 within 1e-2, relative to max(|ref|, 1)); spmm's fixed CSR summation order
also makes the GPU equal the CPU reference bit for bit. randn and poisson must equal
the CPU reference run of the same function (``tessera/numerics/random.py``) bit for
bit. Skipped without a CUDA device.
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
from tessera.numerics import cast_array  # noqa: E402
from tessera.numerics.random import poisson_array, randn_array  # noqa: E402

F = torch.nn.functional


def _rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed + sum(shape))
    x = torch.randn(*shape, device="cuda", dtype=torch.float64, generator=gen)
    x = torch.where(x.abs() < 0.05, torch.full_like(x, 0.3), x)
    return x.to(dtype)


def _close(got: torch.Tensor, want: torch.Tensor, tol: float) -> None:
    assert got.shape == want.shape
    assert torch.isfinite(got.double()).all(), "non-finite (unwritten?) elements"
    err = (got.double() - want).abs() / want.abs().clamp(min=1.0)
    assert float(err.max()) < tol, float(err.max())


def _cpu(t: torch.Tensor) -> np.ndarray:
    """A CUDA tensor as a numpy array for the CPU reference path (bf16 through ml_dtypes)."""
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.cpu().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.cpu().numpy()


def _bits(x: torch.Tensor | np.ndarray) -> np.ndarray:
    a = _cpu(x) if isinstance(x, torch.Tensor) else np.asarray(x)
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float64: 1e-12}


# --------------------------------------------------------------------------- conv2d


@pytest.mark.parametrize(
    ("xs", "ws", "stride", "padding", "bias", "dtype"),
    [
        ((2, 3, 37, 29), (5, 3, 3, 3), (1, 1), (1, 1), True, torch.float32),
        ((3, 7, 19, 23), (9, 7, 5, 2), (2, 3), (2, 0), False, torch.float32),
        ((1, 16, 33, 31), (13, 16, 3, 3), (2, 2), (1, 1), True, torch.float32),
        ((2, 5, 21, 17), (6, 5, 3, 3), (1, 2), (0, 1), True, torch.bfloat16),
        ((2, 4, 13, 11), (3, 4, 2, 3), (1, 1), (1, 1), True, torch.float64),
    ],
)
def test_conv2d_matches_torch(xs, ws, stride, padding, bias, dtype) -> None:
    @ts.jit
    def conv(x, w, b):
        return ts.conv2d(x, w, b, stride=stride, padding=padding)

    @ts.jit
    def conv_nobias(x, w):
        return ts.conv2d(x, w, stride=stride, padding=padding)

    x, w, b = _rand(*xs, dtype=dtype), _rand(*ws, dtype=dtype, seed=1), _rand(ws[0], dtype=dtype, seed=2)
    got = conv(x, w, b) if bias else conv_nobias(x, w)
    torch.cuda.synchronize()
    assert got.device == x.device and got.dtype == dtype
    want = F.conv2d(x.double(), w.double(), b.double() if bias else None, stride=stride,
                    padding=padding)
    _close(got, want, TOL[dtype])


# --------------------------------------------------------------------------- spmm


def _csr(m: int, k: int, density: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = rng.uniform(size=(m, k)) < density
    mask[1] = False  # an empty row
    indptr = np.concatenate([[0], np.cumsum(mask.sum(1))]).astype(np.int32)
    indices = np.nonzero(mask)[1].astype(np.int32)
    vals = rng.uniform(0.2, 2.0, indices.size) * np.where(rng.uniform(size=indices.size) < 0.5,
                                                          -1.0, 1.0)
    return indptr, indices, vals


@pytest.mark.parametrize(
    ("m", "k", "n", "density", "dtype"),
    [(37, 53, 29, 0.2, torch.float32), (101, 300, 131, 0.05, torch.float32),
     (19, 23, 70, 0.4, torch.bfloat16), (13, 17, 45, 0.3, torch.float64)],
)
def test_spmm_matches_torch_and_cpu(m, k, n, density, dtype) -> None:
    @ts.jit
    def spmm(p, i, v, d):
        return ts.spmm(p, i, v, d, sparse_shape=(m, k))

    ip, ix, vals = _csr(m, k, density, seed=m)
    p = torch.from_numpy(ip).cuda()
    i = torch.from_numpy(ix).cuda()
    v = torch.from_numpy(vals).to(dtype).cuda()
    d = _rand(k, n, dtype=dtype)
    got = spmm(p, i, v, d)
    torch.cuda.synchronize()
    assert got.dtype == dtype and tuple(got.shape) == (m, n)
    a = np.zeros((m, k))
    a[np.repeat(np.arange(m), np.diff(ip)), ix] = v.double().cpu().numpy()
    _close(got, torch.from_numpy(a).cuda() @ d.double(), TOL[dtype])
    cpu = spmm(ip, ix, _cpu(v), _cpu(d))
    np.testing.assert_array_equal(_bits(got), _bits(cpu))


# --------------------------------------------------------------------------- random


@pytest.mark.parametrize(
    ("shape", "dtype", "seed", "offset"),
    [((37, 29), torch.float32, 3, 5), ((1000, 257), torch.float32, 11, 0),
     ((301,), torch.bfloat16, 0, 2), ((7, 9, 5), torch.float64, 2**40 + 7, 1),
     ((65,), torch.float16, 5, 9)],
)
def test_randn_equals_cpu_reference(shape, dtype, seed, offset) -> None:
    tdt = {torch.float32: ts.fp32, torch.bfloat16: ts.bf16, torch.float64: ts.fp64,
           torch.float16: ts.fp16}[dtype]

    @ts.jit
    def sample(x):
        return ts.randn(shape, tdt, seed=seed, offset=offset)

    x = _rand(3)
    got = sample(x)
    torch.cuda.synchronize()
    assert got.is_cuda and got.dtype == dtype and tuple(got.shape) == shape
    cpu = sample(_cpu(x))
    np.testing.assert_array_equal(_bits(got), _bits(cpu))
    want = randn_array(shape, seed, offset)
    np.testing.assert_array_equal(_cpu(got).astype(np.float64),
                                  cast_array(want, _cpu(got).dtype).astype(np.float64))
    again = sample(x)
    assert torch.equal(got, again)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_poisson_equals_cpu_reference(dtype) -> None:
    @ts.jit
    def sample(lam):
        return ts.poisson(lam, seed=9, offset=4)

    gen = torch.Generator(device="cuda").manual_seed(5)
    lam = torch.rand(37, 53, device="cuda", dtype=torch.float64, generator=gen) * 40.0
    lam[0, :6] = torch.tensor([0.0, 1e-3, 9.999, 10.0, 1e3, 1e6], dtype=torch.float64)
    lam = lam.to(dtype)
    got = sample(lam)
    torch.cuda.synchronize()
    assert got.is_cuda and got.dtype == dtype and got.shape == lam.shape
    cpu = sample(_cpu(lam))
    np.testing.assert_array_equal(_bits(got), _bits(cpu))
    want = poisson_array(_cpu(lam).astype(np.float64), 9, 4)
    np.testing.assert_array_equal(_cpu(got).astype(np.float64),
                                  cast_array(want, _cpu(got).dtype).astype(np.float64))


def test_poisson_large_sample_statistics() -> None:
    @ts.jit
    def sample(lam):
        return ts.poisson(lam, seed=1, offset=0)

    for rate in (2.5, 40.0):
        lam = torch.full((513, 1000), rate, device="cuda")
        x = sample(lam).double()
        n = x.numel()
        assert abs(float(x.mean()) - rate) < 5 * (rate / n) ** 0.5
        assert abs(float(x.var()) - rate) < 5 * ((rate + 2 * rate**2) / n) ** 0.5
