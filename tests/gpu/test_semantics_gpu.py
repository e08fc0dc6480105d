"""torch semantics on CUDA tensors: rank-0 results, transpose's torch swap, true
division and int64 sums of integer inputs, the sign of zero of relu and round, and
-inf / NaN constants, each against torch on the same device. Skipped without a CUDA
device."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402

SPECIAL = [-0.0, 0.0, -0.4, 0.4, -0.5, 0.5, -1.5, 2.5, -2.5, -1.0, 3.7, float("inf"),
           float("-inf"), float("nan")]


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.device == want.device and got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(torch.signbit(got), torch.signbit(want))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["relu", "round"])
def test_signed_zeros_on_cuda(name: str, dtype: torch.dtype) -> None:
    """Against torch; relu against torch on the CPU: torch's CUDA relu turns -0.0 into +0.0
    while its CPU relu keeps -0.0, and Tessera gives the same bits on both devices
    (docs/SEMANTICS.md)."""
    x = torch.tensor(SPECIAL, device="cuda", dtype=dtype)
    want = getattr(torch, name)(x.cpu()).cuda() if name == "relu" else getattr(torch, name)(x)
    _same(ts.jit(getattr(ts, name))(x), want)


def test_rank0_result_on_cuda() -> None:
    x = torch.arange(12, device="cuda", dtype=torch.float32).reshape(3, 4)
    r = ts.jit(lambda x: ts.sum(x))(x)
    assert r.shape == torch.Size([]) and r.device == x.device
    torch.testing.assert_close(r, x.sum())


def test_transpose_and_integer_semantics_on_cuda() -> None:
    x = torch.arange(6, device="cuda", dtype=torch.float32).reshape(2, 3)
    _same(ts.jit(lambda x: ts.transpose(x, 0, 1))(x), x.transpose(0, 1).contiguous())
    a = torch.tensor([1, 2, 7, -7], device="cuda", dtype=torch.int32)
    b = torch.full_like(a, 2)
    _same(ts.jit(lambda x, y: x / y)(a, b), a / b)
    m = torch.tensor([True, False, True, True], device="cuda")
    r = ts.jit(lambda x: ts.sum(x))(m)
    assert r.dtype == torch.int64 and int(r) == 3


def test_infinite_constants_on_cuda() -> None:
    x = torch.tensor([1.0, float("-inf"), float("nan")], device="cuda")
    f = ts.jit(lambda x: ts.maximum(x, -ts.inf) + ts.constant(0.0, like=x))
    _same(f(x), torch.maximum(x, torch.tensor(float("-inf"), device="cuda")))


def test_pow_of_negative_bases_on_cuda() -> None:
    """``pow`` as C's powf: a negative base to an integer power keeps its sign rule (GELU's
    ``x ** 3``), to a non-integer power is NaN; ``x ** 0 = 1 ** y = 1``; ``0 ** y`` is 0 or
    inf. Against torch on the GPU, within the approximate exp2/log2's error."""
    base = torch.tensor([-2.0, -2.0, -2.0, -3.5, -0.5, -1.0, 0.0, 0.0, 0.0, 1.0, float("nan"),
                         -2.0, 7.0, -1e-3, -40.0], device="cuda")
    expo = torch.tensor([3.0, 2.0, 0.5, 3.0, -3.0, 1e9 + 1, 0.0, -1.0, 2.0, float("nan"), 0.0,
                         -2.0, 1.5, 3.0, 5.0], device="cuda")
    got = ts.jit(lambda x, y: ts.pow(x, y))(base, expo)
    want = torch.pow(base.double(), expo.double()).float()
    torch.testing.assert_close(got, want, rtol=2e-6, atol=0, equal_nan=True)
    x = torch.randn(4099, device="cuda") * 4
    torch.testing.assert_close(ts.jit(lambda t: ts.pow(t, 3.0))(x), x.double().pow(3).float(),
                               rtol=2e-6, atol=1e-30)
