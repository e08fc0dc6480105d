"""``ts.erf`` and ``ts.logsumexp`` (added by docs/ARCHITECTURE.md's add-an-op recipe) on
CUDA tensors against torch in float64. Skipped without a CUDA device."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402


def test_erf_on_cuda() -> None:
    x = torch.cat([torch.randn(10007, device="cuda") * 3,
                   torch.tensor([0.0, -0.0, 1e-8, -1e-8, 0.999, 1.0, 1.001, 6.0, -9.0,
                                 float("inf"), float("-inf")], device="cuda")])
    got = ts.jit(ts.erf)(x)
    want = torch.erf(x.double())
    err = ((got.double() - want).abs() / want.abs().clamp_min(1e-30)).max().item()
    assert err < 1e-6, err


@pytest.mark.parametrize("shape,dim", [((37, 1001), -1), ((64, 50257), 1), ((5, 7, 3), 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_logsumexp_on_cuda(shape, dim, dtype) -> None:
    x = (torch.randn(shape, device="cuda", dtype=torch.float64) * 4).to(dtype)
    got = ts.jit(lambda t: ts.logsumexp(t, dim))(x)
    want = torch.logsumexp(x.double(), dim)
    assert got.dtype == dtype and got.shape == want.shape
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
