"""tgraph.fft / tgraph.fft2d on the GPU through ts.jit at every algorithm's lengths
(tessera/passes/fft_plan.py): mixed-radix Stockham with several lines per tile, the
four-step transform, Bluestein in one tile and through the four-step; forward and
inverse, f32 and f64, against torch.fft in float64 on fresh random inputs. Each
compiled function first runs on NaNs, so a result element a kernel fails to write
shows as NaN when the caching allocator hands the same block back."""

from __future__ import annotations

import time

import pytest
import torch

import tessera as ts

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

EPS = {torch.float32: 2.0**-23, torch.float64: 2.0**-52}


def run(op, x: torch.Tensor, inverse: bool) -> torch.Tensor:
    fn = ts.jit(lambda t: op(t, inverse=inverse))
    fn(torch.full_like(x, float("nan")))
    out = fn(x)
    torch.cuda.synchronize()
    return out


def check(got: torch.Tensor, want: torch.Tensor, dims: tuple[int, ...], dtype, n: int):
    assert got.is_cuda and got.is_complex() and got.shape == want.shape
    assert torch.isfinite(torch.view_as_real(got)).all()
    err = torch.linalg.vector_norm(got.to(torch.complex128) - want, dim=dims)
    ref = torch.linalg.vector_norm(want, dim=dims)
    tol = 4 * EPS[dtype] * max(1.0, torch.tensor(float(n)).log2().item())
    assert (err <= tol * ref).all(), (err / ref).max().item()


LENGTHS = [8, 64, 512, 4096, 2**16, 12, 30, 49, 97, 1000, 1009, 1031, 143, 6000, 2**20]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("n", LENGTHS)
def test_fft_lengths_on_gpu(n, dtype):
    inverse = (LENGTHS.index(n) + (dtype == torch.float64)) % 2 == 1  # each way per length
    batch = max(1, min(257, 2**22 // n))  # odd batches where the length allows
    x = torch.randn(batch, n, device="cuda", dtype=dtype)
    got = run(ts.fft, x, inverse)
    want = (torch.fft.ifft if inverse else torch.fft.fft)(x.double())
    check(got, want, (-1,), dtype, n)


SHAPES_2D = [(8, 512, 512), (3, 64, 4096), (5, 97, 30), (2, 1000, 49), (4096, 12),
             (3, 1009, 64), (2, 8192, 8)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", SHAPES_2D)
def test_fft2d_on_gpu(shape, dtype):
    inverse = (SHAPES_2D.index(shape) + (dtype == torch.float64)) % 2 == 1
    x = torch.randn(shape, device="cuda", dtype=dtype)
    got = run(ts.fft2d, x, inverse)
    want = (torch.fft.ifft2 if inverse else torch.fft.fft2)(x.double())
    check(got, want, (-2, -1), dtype, shape[-1] * shape[-2])


@pytest.mark.parametrize("n", [64, 1000, 1009, 2**16])
def test_complex_input_on_gpu(n):
    """The inverse of a complex spectrum (its square: ifft(fft(x)) alone is rewritten
    to x by spectral-rewrite)."""
    @ts.jit
    def both(x):
        y = ts.fft(x)
        return y, ts.fft(y * y, inverse=True)

    x = torch.randn(33, n, device="cuda", dtype=torch.float32)
    both(torch.full_like(x, float("nan")))
    y, back = both(x)
    spec = torch.fft.fft(x.double())
    check(y, spec, (-1,), torch.float32, n)
    check(back, torch.fft.ifft(spec * spec), (-1,), torch.float32, 4 * n)


def test_fft_is_deterministic_on_gpu():
    x = torch.randn(64, 1009, device="cuda")
    fn = ts.jit(lambda t: ts.fft(t))
    assert torch.equal(fn(x), fn(x))


def test_largest_documented_lengths_finish():
    """2**22 points (f32) and 2**20 (f64) in one line: bounded, and within a minute."""
    for n, dtype in ((2**22, torch.float32), (2**20, torch.float64)):
        x = torch.randn(1, n, device="cuda", dtype=dtype)
        t0 = time.perf_counter()
        got = run(ts.fft, x, False)
        assert time.perf_counter() - t0 < 60
        check(got, torch.fft.fft(x.double()), (-1,), dtype, n)
