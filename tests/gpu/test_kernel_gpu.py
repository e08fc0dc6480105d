"""The guide's tile kernels (examples/kernels) as PTX on a GPU, against numpy.

CUDA torch tensors select the GPU path: each call compiles a static-shape
specialization, lowers it with lower-tile-to-target + emit-ptx, loads it with
tessera.runtime.cuda and launches it on the current stream. Skipped without a
CUDA device.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "kernels"
sys.path.insert(0, str(EXAMPLES))


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))


def _load(name: str):
    return importlib.import_module(name)


def rnd(rng, shape, dtype=np.float32):
    return (rng.standard_normal(shape) + 0.1).astype(dtype)


def cuda(a: np.ndarray):
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def host(t) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


@pytest.mark.parametrize("n", [1, 1001])
def test_saxpy(n):
    m = _load("saxpy")
    rng = np.random.default_rng(n)
    x, y = rnd(rng, n), rnd(rng, n)
    want = m.reference(x, y, 1.75)
    ty = cuda(y)
    m.saxpy(cuda(x), ty, 1.75)
    np.testing.assert_allclose(host(ty), want, rtol=1e-6, atol=1e-6)


def test_tile_example():
    m = _load("tile_example")
    d = rnd(np.random.default_rng(1), 333)
    t = cuda(d)
    m.tile_example(t)
    np.testing.assert_array_equal(host(t), m.reference(d))


def test_process_chunks():
    m = _load("process_chunks")
    rng = np.random.default_rng(2)
    x, out = rnd(rng, 300), rnd(rng, 300)
    t = cuda(out)
    m.process_chunks(cuda(x), t)
    np.testing.assert_allclose(host(t), m.reference(x), rtol=1e-5, atol=1e-5)


def test_cooperative_reduction():
    m = _load("cooperative_reduction")
    d = rnd(np.random.default_rng(3), 1000)
    got = m.cooperative_reduction(cuda(d))
    np.testing.assert_allclose(float(got), m.reference(d), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("shape, bn", [((70, 67), 7), ((70, 68), 8)])
def test_memory_hierarchy_example(shape, bn):
    m = _load("memory_hierarchy_example")
    A = rnd(np.random.default_rng(4), shape)
    out, probe = cuda(np.full((64, 64), 7.0, np.float32)), cuda(np.zeros(2, np.float32))
    m.memory_hierarchy_example(cuda(A), 3, 5, 10, bn, out, probe)
    want_block, want_probe = m.reference(A, 3, 5, 10, bn)
    np.testing.assert_array_equal(host(out), want_block)
    np.testing.assert_array_equal(host(probe), want_probe)


def test_optimized_memory_access():
    import ml_dtypes

    m = _load("optimized_memory_access")
    rng = np.random.default_rng(5)
    src = rnd(rng, (133, 12), ml_dtypes.bfloat16)
    dst = rnd(rng, (133, 12), ml_dtypes.bfloat16)
    want = m.reference(src, dst, 3)
    t = cuda(dst)
    m.optimized_memory_access(cuda(src), t, 3)
    np.testing.assert_array_equal(host(t).view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("M, K, N, tiles", [
    (37, 80, 19, dict(BM=32, BN=16, BK=16)),
    (64, 64, 32, dict(BM=64, BN=32, BK=16)),
])
def test_double_buffered_gemm(M, K, N, tiles):
    import ml_dtypes

    m = _load("double_buffered_gemm")
    rng = np.random.default_rng(M + K)
    A, B = rnd(rng, (M, K), ml_dtypes.bfloat16), rnd(rng, (K, N), ml_dtypes.bfloat16)
    C = rnd(rng, (M, N))
    want = m.reference(A, B, C, **tiles)
    t = cuda(C)
    m.double_buffered_gemm(cuda(A), cuda(B), t, **tiles)
    np.testing.assert_allclose(host(t), want, rtol=1e-4, atol=1e-3)


def test_swizzled_gemm():
    m = _load("swizzled_gemm")
    rng = np.random.default_rng(6)
    A, B = rnd(rng, (37, 40), np.float16), rnd(rng, (40, 21), np.float16)
    C = rnd(rng, (37, 21))
    want = m.reference(A, B, C, 32, 16, 32)
    t = cuda(C)
    m.swizzled_gemm(cuda(A), cuda(B), t, BM=32, BN=16, BK=32)
    np.testing.assert_allclose(host(t), want, rtol=1e-4, atol=1e-3)


def test_tp_axpy_autotuned_with_cuda_events(tmp_path):
    m = _load("tp_axpy")
    rng = np.random.default_rng(7)
    X, Y = rnd(rng, 1000, np.float16), rnd(rng, 1000, np.float16)
    want = m.reference(X, Y, 0.75)
    t = cuda(Y)
    m.tp_axpy(cuda(X), t, 0.75)
    np.testing.assert_array_equal(host(t), want)
    assert all(tr.ms is not None for tr in m.tp_axpy.last_trials if tr.ok)
    assert (tmp_path / "autotune.json").exists()
