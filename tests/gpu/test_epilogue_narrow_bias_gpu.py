"""A bf16/f16 bias of an f32 product in the sm90 GEMM's epilogue (torch's ``addmm``:
``nn.Linear`` in 16 bits through ``torch.compile``), on the GPU against float64 rounded
once: row biases with even and odd N (the odd-N path loads bias elements one by one), a
full ``[M, N]`` bias, and the same through ``ts.jit``. Skipped without a GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.usefixtures("fresh_dynamo"),
]

import tessera as ts  # noqa: E402
import tessera.torch as tt  # noqa: E402


def _check(got: torch.Tensor, exact: torch.Tensor, share: float = 0.95) -> None:
    """Every element within one 16-bit step of float64 rounded once, and ``share`` of
    them equal to it (f32 sums in another order than float64's move a few across)."""
    want = exact.float().to(got.dtype).float()
    step = want.abs() * (2.0 ** -7 if got.dtype == torch.bfloat16 else 2.0 ** -10) + 1e-6
    assert ((got.float() - want).abs() <= step).all()
    assert (got.float() == want).float().mean() > share



@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("m", "k", "n"), [(256, 512, 384), (200, 320, 129)])
def test_linear_bias_in_the_epilogue(dtype, m, k, n):
    g = torch.Generator(device="cuda").manual_seed(0)
    lin = torch.nn.Linear(k, n, device="cuda", dtype=dtype)
    with torch.no_grad():
        lin.bias.copy_(torch.randn(n, device="cuda", generator=g) * 4)
    x = torch.randn(m, k, device="cuda", generator=g, dtype=dtype)
    with torch.no_grad():
        got = tt.compile(lin)(x)
    exact = x.double() @ lin.weight.double().T + lin.bias.double()
    _check(got, exact)


def test_full_bias_through_jit():
    g = torch.Generator(device="cuda").manual_seed(1)
    x, w = (torch.randn(s, device="cuda", generator=g).bfloat16() for s in ((128, 256), (192, 256)))
    b = torch.randn(128, 192, device="cuda", generator=g).bfloat16()

    @ts.jit
    def f(x, w, b):
        y = ts.matmul(x, w, transpose_b=True, out_dtype=ts.f32) + ts.cast(b, ts.f32)
        return ts.cast(ts.gelu(y), ts.bf16)

    got = f(x, w, b)
    exact = torch.nn.functional.gelu(x.double() @ w.double().T + b.double(), approximate="tanh")
    # the epilogue's gelu is the GPU's approximate tanh: 93% equal on the H200
    _check(got, exact, share=0.9)
