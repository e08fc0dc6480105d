"""Row kernels at any width and the linear-algebra primitives at their largest bench
sizes on CUDA tensors, against torch in float64. Skipped without a CUDA device.

* softmax / rmsnorm / layernorm on rows of 1 to 262144 elements, odd widths included
  (ragged rows: 16-byte chunks and scalar edges; streaming kernels past the registers;
  rows split across tiles when rows are few), against float64 torch;
* svd (the one-tile and the tile-per-pair Jacobi kernels) and cholesky (the blocked
  kernels) at the bench sizes, each within a time limit (compile included): the
  launch sequences are fixed and every loop is bounded, so nothing can hang.
  Tolerances as tests/gpu/test_gpu_linalg_ops.py.
"""

from __future__ import annotations

import math
import time

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


@ts.jit
def _reductions(x):
    return ts.sum(x, axis=-1), ts.max(x, axis=-1), ts.mean(x, axis=-1)


@pytest.mark.parametrize(
    "rows,n,dtype",
    [(9, 63, torch.bfloat16), (33, 1001, torch.float32), (300, 50257, torch.bfloat16),
     (2, 151936, torch.float32)],
)
def test_row_reductions_any_width(rows, n, dtype):
    gen = torch.Generator(device="cuda").manual_seed(rows + n)
    x = (torch.randn(rows, n, device="cuda", generator=gen) + 1).to(dtype)
    s, mx, me = _reductions(x)
    X = x.double()
    scale = float(X.abs().sum(-1).max())
    assert float((s.double() - X.sum(-1)).abs().max()) <= TOL[dtype] * scale
    assert torch.equal(mx.double(), X.max(-1).values)
    assert float((me.double() - X.mean(-1)).abs().max()) <= TOL[dtype] * scale / n


# --------------------------------------------------------------------------- linalg at size


@ts.jit
def _svd(a):
    return ts.op.svd(a)


@ts.jit
def _cholesky(a):
    return ts.op.cholesky(a)


@pytest.mark.parametrize(
    "shape,limit_s",
    [((256, 32, 32), 60.0), ((1024, 1024), 120.0), ((4096, 4096), 300.0)],
    ids=["256x32x32", "1024x1024", "4096x4096"],
)
def test_svd_at_size_finishes(shape, limit_s):
    """The bench sizes (4096 x 4096 is the largest) within a time limit, compile
    included: every kernel and the host's launch sequence are bounded."""
    gen = torch.Generator(device="cuda").manual_seed(sum(shape))
    a = torch.randn(*shape, device="cuda", generator=gen)
    t = time.perf_counter()
    u, s, vh = _svd(a)
    torch.cuda.synchronize()
    assert time.perf_counter() - t < limit_s
    ad = a.double()
    k = s.shape[-1]
    r = max(shape[-2:])
    eye = torch.eye(k, device="cuda", dtype=torch.float64)
    ortho = 1e-5 * math.sqrt(r)
    assert float((u.double().mT @ u.double() - eye).abs().max()) <= ortho
    assert float((vh.double() @ vh.double().mT - eye).abs().max()) <= ortho
    s_ref = torch.linalg.svdvals(ad)
    smax = float(s_ref.max())
    assert float((s.double() - s_ref).abs().max()) <= 1e-5 * math.sqrt(r) * smax
    rec = (u.double() * s.double().unsqueeze(-2)) @ vh.double()
    assert float((rec - ad).abs().max()) <= 1e-5 * math.sqrt(r) * smax


@pytest.mark.parametrize(
    "shape,limit_s", [((64, 512, 512), 60.0), ((4096, 4096), 120.0), ((3, 1000, 1000), 60.0)],
    ids=["64x512x512", "4096x4096", "3x1000x1000"],
)
def test_cholesky_at_size_finishes(shape, limit_s):
    n = shape[-1]
    gen = torch.Generator(device="cuda").manual_seed(n)
    g = torch.randn(*shape, device="cuda", dtype=torch.float64, generator=gen)
    a = g @ g.mT / n + torch.eye(n, device="cuda", dtype=torch.float64)
    t = time.perf_counter()
    got = _cholesky(a.float())
    torch.cuda.synchronize()
    assert time.perf_counter() - t < limit_s
    want = torch.linalg.cholesky(a)
    # a = g g^T / n + I: eigenvalues in [1, |a|_F], so cond(a) <= |a|_F
    cond = float(torch.linalg.matrix_norm(a).max())
    err = float((got.double() - want).abs().max())
    assert err <= 1e-5 * cond * float(want.abs().max())
    assert float(torch.triu(got, 1).abs().max()) == 0.0
