"""spmm, spmm_transpose and sddmm (tessera/passes/tile_sparse.py) through ``ts.jit`` on CUDA
tensors, against float64 products on the GPU.

Patterns: uniform density with empty rows, one very long row (every column), power-law
row lengths; N in {1, 7, 32, 33, 256, 257} and f32, f64, bf16, f16. Before each call the
caching allocator's free memory is filled with NaN, so an output element the kernels
leave unwritten shows as NaN. Each result is checked against float64 relative to the
sum of its terms' magnitudes, run twice (bitwise-identical results: no atomics, fixed
summation order), and spmm / spmm_transpose equal the CPU reference (same terms in CSR
order) bit for bit on one mid-sized case. Skipped without a CUDA device.
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

DT = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16,
      "f16": torch.float16}
TOL = {"f32": 2e-6, "f64": 1e-14, "bf16": 8e-3, "f16": 1e-3}
"""Error allowed relative to max(sum of the terms' magnitudes, 1)."""


def pattern(m: int, k: int, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, indices)`` (int32): ``uniform`` (2% density, every fifth row empty),
    ``long`` (row m/2 holds every column once, the others 0-3 entries) or ``power``
    (Pareto row lengths up to 2K, columns drawn with repetition)."""
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        counts = rng.binomial(k, 0.02, size=m)
        counts[::5] = 0
    elif kind == "long":
        counts = rng.integers(0, 4, size=m)
        counts[m // 2] = k
    else:
        counts = np.minimum((rng.pareto(1.1, size=m) * 3).astype(np.int64), 2 * k)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    indices = rng.integers(0, k, size=int(indptr[-1])).astype(np.int32)
    if kind == "long":
        a = int(indptr[m // 2])
        indices[a:a + k] = rng.permutation(k)
    return indptr, indices


def rand(shape, dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.rand(*shape, device="cuda", dtype=torch.float64, generator=gen) * 1.75 + 0.25
    sign = torch.rand(*shape, device="cuda", generator=gen) < 0.5
    return torch.where(sign, -x, x).to(dtype)


def poison() -> None:
    """Fill the caching allocator's free blocks with NaN (outputs reuse them)."""
    free = torch.cuda.mem_get_info()[0]
    blocks = [torch.full((1 << 24,), float("nan"), device="cuda")
              for _ in range(min(16, free // (1 << 28)))]
    del blocks


def close(got: torch.Tensor, want: torch.Tensor, scale: torch.Tensor, elem: str) -> None:
    g = got.double()
    assert g.shape == want.shape
    assert not torch.isnan(g).any(), "unwritten (NaN) elements"
    err = float(((g - want).abs() / scale.clamp(min=1.0)).max()) if g.numel() else 0.0
    assert err <= TOL[elem], err


def twice(fn, *args) -> torch.Tensor:
    poison()
    a = fn(*args)
    poison()
    b = fn(*args)
    torch.cuda.synchronize()
    assert torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)), \
        "two runs differ"
    return a


def operands(m, k, kind, seed):
    indptr, indices = pattern(m, k, kind, seed)
    rows = torch.from_numpy(np.repeat(np.arange(m), np.diff(indptr))).cuda()
    return (torch.from_numpy(indptr).cuda(), torch.from_numpy(indices).cuda(), rows,
            torch.from_numpy(indices.astype(np.int64)).cuda())


CASES = [
    # (elem, M, K, N, pattern)
    ("f32", 1500, 1200, 1, "uniform"), ("f32", 1500, 1200, 7, "power"),
    ("f32", 1500, 1200, 32, "long"), ("f32", 1500, 1200, 33, "uniform"),
    ("f32", 1500, 1200, 256, "power"), ("f32", 1500, 1200, 257, "long"),
    ("f64", 900, 700, 33, "power"), ("f64", 900, 700, 256, "long"),
    ("bf16", 900, 700, 32, "uniform"), ("bf16", 900, 700, 257, "power"),
    ("f16", 900, 700, 7, "long"), ("f16", 900, 700, 256, "uniform"),
]


@pytest.mark.parametrize(("elem", "m", "k", "n", "kind"), CASES)
def test_spmm(elem, m, k, n, kind):
    ip, ix, rows, cols = operands(m, k, kind, seed=m + n)
    v, d = rand((ix.numel(),), DT[elem], 1), rand((k, n), DT[elem], 2)
    got = twice(ts.jit(lambda p, i, x, y: ts.spmm(p, i, x, y, sparse_shape=(m, k))),
                ip, ix, v, d)
    assert got.dtype == DT[elem] and tuple(got.shape) == (m, n)
    terms = v.double()[:, None] * d.double()[cols]
    want = torch.zeros(m, n, dtype=torch.float64, device="cuda").index_add_(0, rows, terms)
    scale = torch.zeros_like(want).index_add_(0, rows, terms.abs())
    close(got, want, scale, elem)


@pytest.mark.parametrize(("elem", "m", "k", "n", "kind"), CASES[::2] + CASES[1::4])
def test_spmm_transpose(elem, m, k, n, kind):
    ip, ix, rows, cols = operands(m, k, kind, seed=m + n + 1)
    v, d = rand((ix.numel(),), DT[elem], 3), rand((m, n), DT[elem], 4)
    got = twice(ts.jit(lambda p, i, x, y: ts.spmm_transpose(p, i, x, y, sparse_shape=(m, k))),
                ip, ix, v, d)
    assert got.dtype == DT[elem] and tuple(got.shape) == (k, n)
    terms = v.double()[:, None] * d.double()[rows]
    want = torch.zeros(k, n, dtype=torch.float64, device="cuda").index_add_(0, cols, terms)
    scale = torch.zeros_like(want).index_add_(0, cols, terms.abs())
    close(got, want, scale, elem)


@pytest.mark.parametrize(("elem", "m", "k", "n", "kind"), CASES)
def test_sddmm(elem, m, k, n, kind):
    ip, ix, rows, cols = operands(m, k, kind, seed=m + n + 2)
    lhs, rhs = rand((m, n), DT[elem], 5), rand((k, n), DT[elem], 6)
    got = twice(ts.jit(lambda p, i, x, y: ts.sddmm(p, i, x, y, sparse_shape=(m, k))),
                ip, ix, lhs, rhs)
    assert got.dtype == DT[elem] and tuple(got.shape) == (ix.numel(),)
    terms = lhs.double()[rows] * rhs.double()[cols]
    close(got, terms.sum(1), terms.abs().sum(1), elem)


@pytest.mark.parametrize("op", ["spmm", "spmm_transpose"])
def test_gpu_equals_cpu_reference_bitwise(op):
    """The same products summed in the same (CSR) order: the GPU result is the CPU
    reference's, bit for bit."""
    m, k, n = 300, 200, 45
    ip, ix, _, _ = operands(m, k, "power", seed=7)
    v = rand((ix.numel(),), torch.float32, 8)
    d = rand((k if op == "spmm" else m, n), torch.float32, 9)
    fn = ts.jit(lambda p, i, x, y: getattr(ts, op)(p, i, x, y, sparse_shape=(m, k)))
    got = fn(ip, ix, v, d)
    cpu = fn(*(t.cpu().numpy() for t in (ip, ix, v, d)))
    np.testing.assert_array_equal(got.cpu().numpy(), np.asarray(cpu))


def test_large_sizes_finish():
    """The bench's largest shape (8192 x 8192 at 10%, N = 512) and one row of 2**20
    entries finish and are right."""
    m = k = 8192
    gen = torch.Generator(device="cuda").manual_seed(1)
    a = (torch.rand(m, k, device="cuda", generator=gen) < 0.1).float().to_sparse_csr()
    ip, ix = a.crow_indices().int(), a.col_indices().int()
    v, d = rand((ix.numel(),), torch.float32, 10), rand((k, 512), torch.float32, 11)
    got = ts.jit(lambda p, i, x, y: ts.spmm(p, i, x, y, sparse_shape=(m, k)))(ip, ix, v, d)
    ref = torch.sparse_csr_tensor(ip.long(), ix.long(), v.double(), (m, k)) @ d.double()
    assert float((got.double() - ref).abs().max()) <= 1e-4 * max(1.0, float(ref.abs().max()))
    nnz = 1 << 20
    ip = torch.tensor([0, nnz], dtype=torch.int32, device="cuda")
    ix = torch.randint(0, 64, (nnz,), device="cuda", dtype=torch.int32, generator=gen)
    v, d = rand((nnz,), torch.float32, 12), rand((64, 33), torch.float32, 13)
    got = ts.jit(lambda p, i, x, y: ts.spmm(p, i, x, y, sparse_shape=(1, 64)))(ip, ix, v, d)
    ref = (v.double()[:, None] * d.double()[ix.long()]).sum(0, keepdim=True)
    scale = (v.double()[:, None] * d.double()[ix.long()]).abs().sum(0, keepdim=True)
    close(got, ref, scale, "f32")
