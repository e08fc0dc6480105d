"""The guide's tile kernels (examples/kernels) as PTX on a GPU, against numpy.

CUDA torch tensors select the GPU path: a call compiles the kernel's
shape-generic specialization (one per group size, constants and dtypes;
symbolic dims are kernel parameters), lowers it with lower-tile-to-target +
emit-ptx once, loads it with tessera.runtime.cuda and launches it on the current
stream. Outputs that the kernel writes entirely start as NaN, so unwritten
elements fail; references are computed in numpy float64 where the kernel's
rounding allows. Skipped without a CUDA device.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

import tessera as ts

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


def poison(shape, dtype=np.float32) -> np.ndarray:
    return np.full(shape, np.nan, dtype)


def f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float64)


def test_saxpy_one_module_serves_every_size(monkeypatch):
    from tessera.runtime import cuda as rt

    m = _load("saxpy")
    k = ts.kernel.from_source(m.SAXPY_GUIDE_TEXT)
    loads = []
    real = rt.load_module
    monkeypatch.setattr(rt, "load_module", lambda ptx, dev=0: loads.append(ptx) or real(ptx, dev))
    for n in (1, 127, 128, 1001, 65537):
        rng = np.random.default_rng(n)
        x, y = rnd(rng, n), rnd(rng, n)
        want = 1.75 * f64(x) + f64(y)
        ty = cuda(y)
        k(cuda(x), ty, 1.75)
        torch.cuda.synchronize()
        np.testing.assert_allclose(f64(host(ty)), want, rtol=1e-6, atol=2e-6)
    assert len(k._cache) == 1 and len(loads) == 1
    assert "memref<?xf32>" in str(next(iter(k._cache.values())).module)


def test_saxpy_non_contiguous_tensor_is_updated_in_place():
    m = _load("saxpy")
    rng = np.random.default_rng(9)
    x = rnd(rng, 300)
    base = cuda(rnd(rng, 600))
    y = base[::2]  # a strided view: runs on a copy, copied back
    before = host(base).copy()
    want = 1.75 * f64(x) + f64(before[::2])
    m.saxpy(cuda(x), y, 1.75)
    after = host(base)
    np.testing.assert_allclose(f64(after[::2]), want, rtol=1e-6, atol=2e-6)
    np.testing.assert_array_equal(after[1::2], before[1::2])


def test_tile_example():
    m = _load("tile_example")
    d = rnd(np.random.default_rng(1), 333)
    t = cuda(d)
    m.tile_example(t)
    np.testing.assert_array_equal(host(t), m.reference(d))


def test_process_chunks():
    m = _load("process_chunks")
    rng = np.random.default_rng(2)
    x = rnd(rng, 300)
    t = cuda(poison(300))
    m.process_chunks(cuda(x), t)
    want = f64(x) * f64(x) + 0.5 * f64(x) - 1.0
    np.testing.assert_allclose(f64(host(t)), want, rtol=1e-5, atol=1e-5)


def test_cooperative_reduction():
    m = _load("cooperative_reduction")
    for n in (1000, 77):
        d = rnd(np.random.default_rng(n), n)
        got = m.cooperative_reduction(cuda(d))
        assert isinstance(got, torch.Tensor) and got.is_cuda and got.numel() == 1
        np.testing.assert_allclose(float(got), f64(d).sum(), rtol=1e-5, atol=1e-4)


def test_cooperative_reduction_per_tile_results():
    m = _load("cooperative_reduction")
    d = rnd(np.random.default_rng(8), 300)
    got = m.cooperative_reduction(cuda(d), grid=3)
    assert isinstance(got, torch.Tensor) and tuple(got.shape) == (3,)
    for t in range(3):
        # tile t's lanes start at t * 128 + local_id and stride by the group size
        want = sum(f64(d[t * 128 + lane::128]).sum() for lane in range(128))
        np.testing.assert_allclose(float(got[t]), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("shape, bn", [((70, 67), 7), ((70, 68), 8)])
def test_memory_hierarchy_example(shape, bn):
    m = _load("memory_hierarchy_example")
    A = rnd(np.random.default_rng(4), shape)
    out, probe = cuda(poison((64, 64))), cuda(poison(2))
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
    trials = m.tp_axpy.last_trials
    assert len(trials) == 4 and all(tr.ok for tr in trials), trials
    assert all(tr.ms is not None and tr.ms > 0 for tr in trials)
    import json

    (entry,) = json.loads((tmp_path / "autotune.json").read_text()).values()
    assert entry["how"] == "gpu-timed"
    assert entry["config"] == min(trials, key=lambda tr: tr.ms).config
    # a second size reuses the compiled module; the tuner searches again (new shape)
    X2, Y2 = rnd(rng, 300, np.float16), rnd(rng, 300, np.float16)
    t2 = cuda(Y2)
    m.tp_axpy(cuda(X2), t2, -0.5)
    np.testing.assert_array_equal(host(t2), m.reference(X2, Y2, -0.5))
