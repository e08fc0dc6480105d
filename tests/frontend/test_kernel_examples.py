"""The guide's tile kernels (examples/kernels) on the Tile IR interpreter, against numpy.

Inputs are random (never zeros) and sizes odd where the kernel allows it.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "kernels"
sys.path.insert(0, str(EXAMPLES))


def _load(name: str):
    return importlib.import_module(name)


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))


def rnd(rng, shape, dtype=np.float32):
    return (rng.standard_normal(shape) + 0.1).astype(dtype)


@pytest.mark.parametrize("n", [1, 127, 1001])
def test_saxpy(n):
    m = _load("saxpy")
    rng = np.random.default_rng(n)
    x, y = rnd(rng, n), rnd(rng, n)
    want = m.reference(x, y, 1.75)
    m.saxpy(x, y, 1.75)
    np.testing.assert_array_equal(y, want)


def test_saxpy_guide_text_verbatim():
    m = _load("saxpy")
    rng = np.random.default_rng(3)
    x, y = rnd(rng, 77), rnd(rng, 77)
    want = m.reference(x, y, -0.5)
    m.saxpy_from_guide(x, y, -0.5)
    np.testing.assert_array_equal(y, want)


def test_saxpy_torch_cpu_tensors_update_in_place():
    torch = pytest.importorskip("torch")
    m = _load("saxpy")
    x = torch.randn(133) + 0.1
    y = torch.randn(133) + 0.1
    want = m.reference(x.numpy(), y.numpy().copy(), 3.0)
    m.saxpy(x, y, 3.0)
    np.testing.assert_array_equal(y.numpy(), want)


@pytest.mark.parametrize("n", [5, 333])
def test_tile_example(n):
    m = _load("tile_example")
    d = rnd(np.random.default_rng(n), n)
    want = m.reference(d)
    m.tile_example(d)
    np.testing.assert_array_equal(d, want)


@pytest.mark.parametrize("n", [3, 300])
def test_process_chunks(n):
    m = _load("process_chunks")
    rng = np.random.default_rng(n)
    x, out = rnd(rng, n), rnd(rng, n)
    m.process_chunks(x, out)
    np.testing.assert_allclose(out, m.reference(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n", [1, 129, 1000])
def test_cooperative_reduction_returns_the_sum(n):
    m = _load("cooperative_reduction")
    d = rnd(np.random.default_rng(n), n)
    got = m.cooperative_reduction(d)
    assert np.isscalar(got) or np.ndim(got) == 0
    np.testing.assert_allclose(float(got), m.reference(d), rtol=1e-5, atol=1e-4)


def test_cooperative_reduction_per_tile_results():
    m = _load("cooperative_reduction")
    d = rnd(np.random.default_rng(7), 300)
    got = m.cooperative_reduction(d, grid=3)
    assert got.shape == (3,)
    # tile t's lanes start at t * 128 + local_id and stride by the group size
    for t in range(3):
        want = sum(float(np.sum(d[t * 128 + lane::128], dtype=np.float64)) for lane in range(128))
        np.testing.assert_allclose(got[t], want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "shape, i, j, bm, bn",
    [((70, 67), 3, 5, 10, 7),     # odd row length: element copies
     ((70, 68), 69, 67, 10, 8),   # aligned rows: 16-byte cp.async chunks
     ((33, 20), 1, 2, 5, 4)],     # window past the end of A: zeros
)
def test_memory_hierarchy_example(shape, i, j, bm, bn):
    m = _load("memory_hierarchy_example")
    A = rnd(np.random.default_rng(shape[1]), shape)
    out, probe = np.full((64, 64), 7.0, np.float32), np.zeros(2, np.float32)
    m.memory_hierarchy_example(A, i, j, bm, bn, out, probe)
    want_block, want_probe = m.reference(A, i, j, bm, bn)
    np.testing.assert_array_equal(out, want_block)
    np.testing.assert_array_equal(probe, want_probe)


def test_optimized_memory_access():
    m = _load("optimized_memory_access")
    rng = np.random.default_rng(11)
    src = rnd(rng, (133, 12), ml_dtypes.bfloat16)
    dst = rnd(rng, (133, 12), ml_dtypes.bfloat16)
    want = m.reference(src, dst, 3)
    m.optimized_memory_access(src, dst, 3)
    np.testing.assert_array_equal(dst.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize(
    "M, K, N, tiles",
    [(37, 80, 19, dict(BM=32, BN=16, BK=16)),   # odd N: element copies of B
     (64, 64, 32, dict(BM=64, BN=32, BK=16)),
     (20, 50, 24, dict(BM=16, BN=8, BK=16))],   # K not a multiple of BK
)
def test_double_buffered_gemm(M, K, N, tiles):
    m = _load("double_buffered_gemm")
    rng = np.random.default_rng(M + K + N)
    A = rnd(rng, (M, K), ml_dtypes.bfloat16)
    B = rnd(rng, (K, N), ml_dtypes.bfloat16)
    C = rnd(rng, (M, N))
    want = m.reference(A, B, C, **tiles)
    m.double_buffered_gemm(A, B, C, **tiles)
    np.testing.assert_allclose(C, want, rtol=1e-5, atol=1e-4)


def test_double_buffered_gemm_uses_tensor_cores():
    m = _load("double_buffered_gemm")
    ir = m.double_buffered_gemm.inspect_ir("tile", BM=32, BN=16, BK=16)
    assert "ttile.mma" in ir and "ttile.copy_async" in ir
    assert "memref<2x32x16xbf16, #tessera.smem>" in ir


def test_swizzled_gemm():
    m = _load("swizzled_gemm")
    rng = np.random.default_rng(5)
    A, B = rnd(rng, (37, 40), np.float16), rnd(rng, (40, 21), np.float16)
    C = rnd(rng, (37, 21))
    want = m.reference(A, B, C, 32, 16, 32)
    m.swizzled_gemm(A, B, C, BM=32, BN=16, BK=32)
    np.testing.assert_allclose(C, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("n", [100, 1000])
def test_tp_axpy_autotuned(n, capsys):
    m = _load("tp_axpy")
    rng = np.random.default_rng(n)
    X, Y = rnd(rng, n, np.float16), rnd(rng, n, np.float16)
    want = m.reference(X, Y, 0.75)
    m.tp_axpy(X, Y, 0.75)
    np.testing.assert_array_equal(Y, want)
    err = capsys.readouterr().err
    assert "no GPU" in err and "picked the first" in err
