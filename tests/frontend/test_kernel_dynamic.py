"""Shape-generic tile kernels and the guide's verbatim kernel text.

* one specialization per dtype signature serves every size (the interpreter and
  the GPU run the same module; symbolic dims are ``?`` memref dims sized by
  ``index`` arguments named in the kernel's ``sizes``);
* ``inspect_ir("ptx")`` works before any call and ptxas accepts the PTX of
  every guide kernel;
* ``ts.kernel.from_source`` compiles the guide's saxpy and tp_axpy exactly as
  printed (``y: mut f32[n]``, ``cp_async.shared.global``, bare ``tshared.alloc``);
* bare ``tshared.alloc`` shape inference and its errors.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera.frontend.kernel_source import KernelCompileError
from tessera.runtime import ptxas

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "kernels"
sys.path.insert(0, str(EXAMPLES))

K = ts.kernel.from_source

# The guide's text (Chapter 2.1 and 2.3), character for character.
SAXPY_GUIDE = """\
@kernel
def saxpy(x: f32[n], y: mut f32[n], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]
"""

TP_AXPY_GUIDE = """\
@kernel.autotune(space=dict(BM=[128,256], stages=[2,3]))
def tp_axpy(X: f16[m], Y: mut f16[m], alpha: f16):
    s0 = tshared.alloc
    s1 = tshared.alloc
    for t in tile.range(m, step=128, prefetch=2):
        cp_async.shared.global(s1, X[t:t+128])
        tbarrier()
        if t > 0:
            for i in range(128):
                yv = alpha * s0[i] + tile.load(Y, index=t-128+i)
                tile.store(Y, index=t-128+i, value=yv)
        s0, s1 = s1, s0
    tbarrier()
"""

needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))


def rnd(rng, n, dtype=np.float32):
    return (rng.standard_normal(n) + 0.1).astype(dtype)


# ------------------------------------------------------------------ shape-generic kernels


def test_one_specialization_serves_every_size():
    k = K(SAXPY_GUIDE)
    rng = np.random.default_rng(0)
    for n in (1, 129, 1000):
        x, y = rnd(rng, n), rnd(rng, n)
        want = np.float32(0.5) * x + y
        k(x, y, 0.5)
        np.testing.assert_array_equal(y, want)
    (ck,) = k._cache.values()
    text = str(ck.module)
    assert "memref<?xf32>" in text and "sizes = [%n, %n]" in text


def test_dtype_signatures_specialize_separately():
    k = K("""
@kernel
def double(x: ts.Tensor["n"]):
    i = tile.linear_id()
    if i < n:
        x[i] = x[i] + x[i]
""")
    rng = np.random.default_rng(1)
    for dtype in (np.float32, np.float64, np.float32):
        for n in (3, 300):
            x = rnd(rng, n, dtype)
            want = x * 2
            k(x)
            np.testing.assert_array_equal(x, want)
    assert sorted(str(c.module).count("memref<?xf64>") > 0 for c in k._cache.values()) == [
        False, True]


def test_inspect_ir_before_any_call_is_the_generic_kernel():
    k = K(SAXPY_GUIDE)
    tile_ir = k.inspect_ir("tile")
    assert "ttile.kernel @saxpy(%x: memref<?xf32>, %y: memref<?xf32>, %alpha: f32, %n: index) " \
        "group_size = 128 sizes = [%n, %n] {" in tile_ir
    assert "ttarget.func @saxpy" in k.inspect_ir("target")
    ptx = k.inspect_ir("ptx")
    assert ".param .u64 saxpy_param_3" in ptx and "setp.lt.s64" in ptx
    static = k.inspect_ir("tile", n=64)
    assert "memref<64xf32>" in static and "sizes" not in static


@needs_ptxas
def test_saxpy_ptx_with_symbolic_n_passes_ptxas():
    m = importlib.import_module("saxpy")
    ptxas.check(m.saxpy.inspect_ir("ptx"))
    ptxas.check(K(SAXPY_GUIDE).inspect_ir("ptx"))


def test_two_dim_symbolic_sizes_lower_with_computed_strides():
    k = K("""
@kernel
def transpose(a: f32[m, n], b: mut f32[n, m]):
    i = tile.linear_id()
    if i < m * n:
        b[i % n, i // n] = a[i // n, i % n]
""")
    tile_ir = k.inspect_ir("tile")
    assert "sizes = [%m, %n, %n, %m]" in tile_ir
    target = k.inspect_ir("target")
    assert target.count('ttarget.mad "lo.s64"') >= 2
    a = rnd(np.random.default_rng(2), (5, 7))
    b = np.full((7, 5), np.nan, np.float32)
    k(a, b)
    np.testing.assert_array_equal(b, a.T)


GUIDE_KERNELS = [
    ("saxpy", "saxpy", {}),
    ("tile_example", "tile_example", {}),
    ("process_chunks", "process_chunks", {}),
    ("cooperative_reduction", "cooperative_reduction", {}),
    ("memory_hierarchy_example", "memory_hierarchy_example", {}),
    ("optimized_memory_access", "optimized_memory_access", {}),
    ("double_buffered_gemm", "double_buffered_gemm", dict(BM=32, BN=16, BK=16)),
    ("swizzled_gemm", "swizzled_gemm", dict(BM=32, BN=16, BK=32)),
    ("tp_axpy", "tp_axpy", dict(BM=128, stages=2)),
    ("tp_axpy", "tp_axpy_from_guide", dict(BM=128, stages=2)),
]


@needs_ptxas
@pytest.mark.parametrize("module, name, consts", GUIDE_KERNELS, ids=[g[1] for g in GUIDE_KERNELS])
def test_guide_kernels_generic_ptx_passes_ptxas(module, name, consts):
    k = getattr(importlib.import_module(module), name)
    ptx = k.inspect_ir("ptx", **consts)
    assert ".entry " in ptx
    ptxas.check(ptx)


# ------------------------------------------------------------------ the guide's text


@pytest.mark.parametrize("text", [SAXPY_GUIDE, TP_AXPY_GUIDE])
def test_guide_text_is_not_python(text):
    with pytest.raises(SyntaxError):
        ast.parse(text)


def test_examples_carry_the_guide_text_verbatim():
    assert importlib.import_module("saxpy").SAXPY_GUIDE_TEXT.strip() == SAXPY_GUIDE.strip()
    assert importlib.import_module("tp_axpy").TP_AXPY_GUIDE_TEXT.strip() == TP_AXPY_GUIDE.strip()


def test_saxpy_guide_text_verbatim():
    k = K(SAXPY_GUIDE)
    assert [p.mutable for p in k.params[:2]] == [False, True]
    rng = np.random.default_rng(3)
    x, y = rnd(rng, 333), rnd(rng, 333)
    want = np.float32(-1.25) * x + y
    k(x, y, -1.25)
    np.testing.assert_array_equal(y, want)


def test_tp_axpy_guide_text_verbatim(capsys):
    m = importlib.import_module("tp_axpy")
    k = K(TP_AXPY_GUIDE)
    assert type(k).__name__ == "AutotunedKernel" and k.space == {
        "BM": [128, 256], "stages": [2, 3]}
    tile_ir = k.inspect_ir("tile", BM=128, stages=2)
    # s0/s1 are inferred as f16[128] and restacked (they are swapped in the loop)
    assert "ttile.alloc_shared : memref<2x128xf16, #tessera.smem>" in tile_ir
    assert "ttile.copy_async" in tile_ir
    rng = np.random.default_rng(4)
    X, Y = rnd(rng, 1000, np.float16), rnd(rng, 1000, np.float16)
    want = m.reference(X, Y, 0.75)
    k(X, Y, 0.75)
    np.testing.assert_array_equal(Y, want)
    assert "picked the first" in capsys.readouterr().err


# ------------------------------------------------------------------ bare tshared.alloc


def test_bare_alloc_two_dim_window_and_constant_extent():
    k = K("""
@kernel
def stage(A: f32[m, 8], out: mut f32[4, 8]):
    s = tshared.alloc
    cp_async(s, A[0:4])
    tbarrier()
    i = tile.local_id()
    if i < 32:
        out[i // 8, i % 8] = s[i // 8, i % 8] * 2.0
""")
    assert "memref<4x8xf32, #tessera.smem>" in k.inspect_ir("tile")
    A = rnd(np.random.default_rng(5), (6, 8))
    out = np.zeros((4, 8), np.float32)
    k(A, out)
    np.testing.assert_array_equal(out, A[:4] * 2)


def test_bare_alloc_without_copy_is_an_error():
    k = K("""
@kernel
def nothing(X: f32[m]):
    s = tshared.alloc
    tbarrier()
""", file="bare.py")
    with pytest.raises(KernelCompileError, match=r"bare\.py:4: error: a bare tshared\.alloc has "
                       r"no shape or dtype, and no cp_async copies into 's'"):
        k.inspect_ir("tile")


def test_bare_alloc_with_symbolic_extent_is_an_error():
    k = K("""
@kernel
def whole(X: f32[m]):
    s = tshared.alloc
    cp_async(s, X)
    tbarrier()
""", file="sym.py")
    with pytest.raises(KernelCompileError, match=r"sym\.py:5: error: .*dim 'm' of 'X' is symbolic"):
        k.inspect_ir("tile")


def test_bare_alloc_with_conflicting_windows_is_an_error():
    k = K("""
@kernel
def two(X: f32[m]):
    s = tshared.alloc
    cp_async(s, X[0:64])
    cp_async(s, X[0:32])
    tbarrier()
""", file="two.py")
    with pytest.raises(KernelCompileError, match=r"two\.py:6: error: .*different shapes"):
        k.inspect_ir("tile")
