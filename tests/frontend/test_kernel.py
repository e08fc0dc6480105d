"""The @ts.kernel front end: annotations, typing, control flow, launch convention,
errors with source lines, autotune caching. Kernels run on the Tile IR interpreter."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import tessera as ts
from tessera import f32, kernel, mut, tile
from tessera.frontend.kernel_source import KernelCompileError

K = ts.kernel.from_source


def rnd(n, seed=0, dtype=np.float32):
    return (np.random.default_rng(seed).standard_normal(n) + 0.25).astype(dtype)


@kernel
def scale(x: f32[n], y: mut[f32[n]], a: f32):  # noqa: F821
    i = tile.linear_id()
    if i < n:  # noqa: F821
        y[i] = a * x[i]


@kernel
def bad_write(x: f32[n]):  # noqa: F821
    i = tile.linear_id()
    x[i] = 1.0


# ------------------------------------------------------------------ annotations


def test_annotation_spellings():
    k = K("""
@kernel
def f(a: f32[n], b: "mut f32[n]", c: mut[ts.f16[n]], d: ts.Tensor["n", 4, ts.i32],
      s: int, t: float, u: ts.bf16):
    pass
""")
    p = {q.name: q for q in k.params}
    assert (p["a"].mutable, p["b"].mutable, p["c"].mutable, p["d"].mutable) == (
        False, True, True, True)
    assert p["c"].dtype == ts.f16 and p["d"].dims == ("n", 4)
    assert str(p["s"].ir_type) == "index" and str(p["t"].ir_type) == "f32"
    ir = k.inspect_ir("tile")
    assert "%d: memref<?x4xi32>" in ir and "%u: f32" in ir and "%n: index" in ir
    assert "arith.truncf %u : f32 to bf16" in ir


def test_guide_mut_syntax_from_text():
    k = K("""
@kernel
def g(x: f32[n], y: mut f32[n]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] + 1.0
""")
    x, y = rnd(50, 1), rnd(50, 2)
    k(x, y)
    np.testing.assert_array_equal(y, x + np.float32(1.0))


# ------------------------------------------------------------------ errors


def test_write_to_read_only_argument_quotes_the_line():
    with pytest.raises(KernelCompileError) as e:
        bad_write.inspect_ir("tile")
    msg = str(e.value)
    assert "test_kernel.py:" in msg and "cannot write to 'x'" in msg
    assert "x[i] = 1.0" in msg
    line = int(msg.split("test_kernel.py:")[1].split(":")[0])
    assert open(__file__).read().splitlines()[line - 1].strip() == "x[i] = 1.0"


@pytest.mark.parametrize("body, expect", [
    ("y[0] = zzz", "name 'zzz' is not defined"),
    ("y[0] = BM", "pass it as a compile-time constant"),
    ("for i in range(4):\n        break", "break is not supported"),
    ("y[0] = (lambda q: q)(1.0)", "'Lambda' expressions are not supported"),
    ("try:\n        pass\n    except Exception:\n        pass", "'Try' statements are not supported"),
    ("y[1.5] = 1.0", "an index must be an integer"),
    ("y[0] = x", "cannot store"),
    ("y = y + 1.0", "operator + is not defined on Ref"),
    ("if tile.local_id() < 3:\n        q = 1.0\n    y[0] = q", "may be undefined"),
    ("s = tshared.alloc\n    tbarrier()", "a bare tshared.alloc has no shape or dtype, and no "
     "cp_async copies into 's'"),
])
def test_errors_quote_the_kernel_line(body, expect):
    text = f"""
@kernel
def e(x: f32[n], y: mut f32[n]):
    {body}
"""
    with pytest.raises(KernelCompileError) as ei:
        K(text, file="errs.py").inspect_ir("tile")
    msg = str(ei.value)
    assert expect in msg, msg
    assert msg.startswith("errs.py:") and "\n    " in msg


def test_argument_errors_name_the_call():
    x, y = rnd(10), rnd(11)
    with pytest.raises(ts.ShapeError, match="symbolic dim 'n' bound to two sizes"):
        scale(x, y, 1.0)
    with pytest.raises(ts.TesseraTypeError, match="has dtype fp64"):
        scale(x.astype(np.float64), rnd(10), 1.0)
    with pytest.raises(ts.TesseraTypeError, match="missing arguments: a"):
        scale(x, rnd(10))


def test_intrinsics_outside_kernels_raise():
    with pytest.raises(RuntimeError, match="only be used inside a @ts.kernel"):
        ts.tile.linear_id()


# ------------------------------------------------------------------ semantics


def test_python_integer_semantics_and_true_division():
    k = K("""
@kernel
def ar(a: ts.Tensor["n", ts.i64], b: ts.Tensor["n", ts.i64], q: ts.Tensor["n", ts.i64],
       r: ts.Tensor["n", ts.i64], d: ts.Tensor["n", ts.f32], q3: ts.Tensor["n", ts.i64]):
    i = tile.linear_id()
    if i < n:
        q[i] = a[i] // b[i]
        r[i] = a[i] % b[i]
        d[i] = a[i] / b[i]
        q3[i] = a[i] // 3 + a[i] % 4 + (a[i] // 8) * 2 ** 3
""")
    rng = np.random.default_rng(4)
    a = rng.integers(-50, 50, 37)
    b = rng.integers(1, 9, 37) * rng.choice([-1, 1], 37)
    q, r, q3 = (np.zeros(37, np.int64) for _ in range(3))
    d = np.zeros(37, np.float32)
    k(a, b, q, r, d, q3)
    np.testing.assert_array_equal(q, a // b)
    np.testing.assert_array_equal(r, a % b)
    np.testing.assert_allclose(d, a / b, rtol=1e-6)
    np.testing.assert_array_equal(q3, a // 3 + a % 4 + (a // 8) * 8)


def test_control_flow_carries_values():
    k = K("""
@kernel
def cf(x: f32[n], y: mut f32[n], k: int):
    i = tile.linear_id()
    if i < n:
        acc = 0
        j = 0
        while j < k:
            acc += x[i] * j
            j += 1
        if x[i] > 0.0:
            v = max(acc, 1.5)
        else:
            v = min(acc, -1.5)
        for t in range(3):
            v = v * 0.5 + t
        y[i] = v
""")
    x, y = rnd(45, 6), np.zeros(45, np.float32)
    k(x, y, 4)
    acc = x * 6.0
    v = np.where(x > 0, np.maximum(acc, 1.5), np.minimum(acc, -1.5))
    for t in range(3):
        v = v * 0.5 + t
    np.testing.assert_allclose(y, v, rtol=1e-6)
    ir = k.inspect_ir("tile")
    assert "scf.while" in ir and "scf.for" in ir and "-> (f32)" in ir


def test_helpers_are_inlined_and_constants_fold():
    def helper(v, w=2.0):
        u = v * w
        return u + 1.0

    k = ts.kernel.from_source("""
@kernel
def h(x: f32[n], y: mut f32[n]):
    i = tile.linear_id()
    if i < n and W > 1:
        y[i] = helper(x[i]) + helper(x[i], w=W) + tile.exp(x[i]) * 0.0
""", {"helper": helper, "W": 3})
    x, y = rnd(20, 8), np.zeros(20, np.float32)
    k(x, y)
    np.testing.assert_allclose(y, (x * 2 + 1) + (x * 3 + 1), rtol=1e-6)


def test_warp_shuffle_and_group_reduce():
    k = K("""
@kernel
def red(x: f32[n], out: mut f32[n]):
    i = tile.linear_id()
    v = tile.load(x, index=i, mask=i < n, other=0.0)
    s = tile.reduce(v, kind="sum", scope="group")
    w = tile.reduce(v, kind="max", scope="warp")
    o = tile.shuffle_xor(v, 1)
    if i < n:
        tile.store(out, index=i, value=s + 1000.0 * w + 1000000.0 * o)
""")
    x, out = rnd(100, 9), np.zeros(100, np.float32)
    k[(2,), 64](x, out)
    xp = np.concatenate([x, np.zeros(28, np.float32)]).reshape(2, 64)
    s = np.repeat(xp.sum(1), 64)
    w = np.repeat(xp.reshape(4, 32).max(1), 32)
    o = xp.reshape(-1)[np.arange(128) ^ 1]
    want = (s + 1000.0 * w + 1e6 * o)[:100]
    np.testing.assert_allclose(out, want, rtol=1e-5)


# ------------------------------------------------------------------ launch convention


def test_default_and_explicit_grids():
    x = rnd(300, 10)
    y = np.zeros(300, np.float32)
    scale(x, y, 2.0)  # ceil(300 / 128) = 3 tiles
    np.testing.assert_array_equal(y, 2 * x)
    y[:] = 0
    scale[1](x, y, 2.0)  # only the first 128 lanes
    np.testing.assert_array_equal(y[:128], 2 * x[:128])
    assert not y[128:].any()
    y[:] = 0
    scale[(2,), 64](x, y, 2.0)
    np.testing.assert_array_equal(y[:128], 2 * x[:128])
    assert not y[128:].any()
    y[:] = 0
    scale(x, y, 2.0, grid=5, group_size=64)
    np.testing.assert_array_equal(y, 2 * x)
    ck = scale.compile(group_size=64)
    assert scale.grid_for(ck, {"n": 300}, None) == (5, 1, 1)
    assert "group_size = 64" in str(ck.module)


def test_kernel_without_linear_id_runs_one_tile():
    k = K("""
@kernel
def one(y: mut f32[n]):
    if tile.local_id() == 0:
        y[0] = tile.group_id() + 10.0
""")
    y = rnd(3, 11)
    k(y)
    assert y[0] == 10.0


def test_inspect_ir_levels():
    ir = scale.inspect_ir("tile")
    assert "ttile.kernel @scale(%x: memref<?xf32>, %y: memref<?xf32>, %a: f32, %n: index)" in ir
    assert "ttarget.func @scale" in scale.inspect_ir("target")
    ptx = scale.inspect_ir("ptx")  # shape-generic: n is the fourth parameter
    assert ".entry scale" in ptx and ".param .u64 scale_param_3" in ptx
    assert "memref<1000xf32>" in scale.inspect_ir("tile", n=1000)
    with pytest.raises(ValueError, match="unknown IR level 'llvm'"):
        scale.inspect_ir("llvm")


# ------------------------------------------------------------------ autotune


def test_autotune_picks_checks_and_caches(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    text = """
@kernel.autotune(space=dict(U=[1, 2, 0], group_size=[64, 128]))
def tuned(x: f32[n], y: mut f32[n]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] * (2.0 / U)
"""
    k = K(text)
    x, y = rnd(99, 12), np.zeros(99, np.float32)
    k(x, y)
    np.testing.assert_allclose(y, 2 * x, rtol=1e-6)
    assert "picked the first: {'U': 1, 'group_size': 64}" in capsys.readouterr().err
    ok = {(t.config["U"], t.config["group_size"]): t.ok for t in k.last_trials}
    assert ok[(1, 64)] and not ok[(2, 64)] and not ok[(0, 128)]  # U=2 disagrees, U=0 is inf
    data = json.loads((tmp_path / "autotune.json").read_text())
    (entry,) = data.values()
    assert entry["config"] == {"U": 1, "group_size": 64} and entry["how"] == "cpu-first"
    k2 = K(text)  # a fresh object reads the disk cache: no search, no message
    y[:] = 0
    k2(x, y)
    np.testing.assert_allclose(y, 2 * x, rtol=1e-6)
    assert capsys.readouterr().err == "" and k2.last_trials == []
    assert os.path.exists(tmp_path / "autotune.json")


def test_constants_that_compare_equal_are_different_specializations():
    """Kernel constants key the specialization cache by identity, not ``==``: ``2`` and
    ``2.0`` type differently, ``0.0`` and ``-0.0`` compute differently."""
    from tessera.frontend.kernel import _freeze

    assert _freeze({"c": 2}) != _freeze({"c": 2.0})
    assert _freeze({"c": 0.0}) != _freeze({"c": -0.0})
    assert _freeze({"c": [1, 2]}) != _freeze({"c": [1.0, 2]})
    assert _freeze({"c": float("nan")}) == _freeze({"c": float("nan")})
    assert _freeze({"c": 3, "d": (1, "x")}) == _freeze({"d": (1, "x"), "c": 3})
