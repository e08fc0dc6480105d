"""lower-graph-to-tile for conv2d, spmm, randn and poisson.

Each program is lowered, run by the Tile IR interpreter and compared with the Graph IR
interpreter and with torch/numpy in float64 on random non-zero inputs of odd shapes
(not multiples of the tile sizes); randn and poisson must equal the Graph IR
interpreter bit for bit, and their samplers are checked statistically. Every kernel
also goes to PTX and through ptxas.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tessera.ir import tile as tt
from tessera.numerics import cast_array
from tessera.numerics.random import (
    POISSON_MAX_RATE,
    NumpyOps,
    cos_2pi,
    log,
    log_factorial,
    poisson_array,
    randn_array,
)
from tessera.passes.emit_ptx import emit_ptx, kernels
from tessera.passes.lower_tile_to_target import LowerTileToTargetPass
from tessera.passes.pipelines import default_context
from tessera.runtime import ptxas
from tessera.runtime.graph_interpreter import run_function
from tessera.runtime.tile_interpreter import run_host
from tests.passes.test_lower_graph_to_tile import NP, context, f64, lower, rand, ty

RNG = np.random.default_rng(20)


def both(text: str, args: list[np.ndarray]) -> tuple[list[np.ndarray], list]:
    """Run ``text`` (function ``f``) lowered on the Tile IR interpreter and on the Graph IR
    interpreter."""
    graph = Parser(context(), text).parse_module()
    want = run_function(graph, "f", [a.copy() for a in args])
    got = run_host(lower(text), "f", [a.copy() for a in args])
    return got, list(want) if isinstance(want, list | tuple) else [want]


def bits(x: np.ndarray) -> np.ndarray:
    """The bytes of ``x`` (bitwise comparisons; NaN equals NaN of the same encoding)."""
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)


def kernel_ops(m: ModuleOp) -> list[tt.KernelOp]:
    return [o for o in m.walk() if isinstance(o, tt.KernelOp)]


def close(got: np.ndarray, want: np.ndarray, rtol: float) -> None:
    """``|got - want| <= rtol * max(|want|, 1)`` elementwise, and no NaN."""
    g, w = f64(got), f64(want)
    assert g.shape == w.shape
    assert not np.isnan(g).any(), "unwritten (NaN) elements"
    err = np.abs(g - w) / np.maximum(np.abs(w), 1.0)
    assert float(err.max()) <= rtol, float(err.max())


TOL = {"f32": 1e-5, "f64": 1e-12, "bf16": 1e-2, "f16": 2e-3}


# --------------------------------------------------------------------------- conv2d

CONV = [
    # (elem, input NCHW, weight OIHW, stride, padding, bias)
    ("f32", (2, 3, 11, 9), (5, 3, 3, 2), (2, 2), (1, 1), True),
    ("f32", (1, 4, 7, 13), (3, 4, 3, 3), (1, 1), (0, 2), False),
    ("f32", (3, 1, 5, 5), (1, 1, 5, 5), (1, 1), (2, 2), True),
    ("f64", (2, 5, 9, 6), (7, 5, 2, 3), (3, 1), (1, 0), True),
    ("bf16", (2, 6, 10, 11), (4, 6, 3, 3), (1, 2), (1, 1), True),
    ("f16", (1, 3, 8, 7), (2, 3, 1, 3), (2, 1), (0, 1), False),
]


def conv_text(elem, xs, ws, stride, pad, bias) -> tuple[str, tuple[int, ...]]:
    ho = (xs[2] + 2 * pad[0] - ws[2]) // stride[0] + 1
    wo = (xs[3] + 2 * pad[1] - ws[3]) // stride[1] + 1
    os_ = (xs[0], ws[0], ho, wo)
    bias_arg = f", %b: {ty((ws[0],), elem)}" if bias else ""
    bias_use = f" bias %b : {ty((ws[0],), elem)}" if bias else ""
    text = f"""func.func @f(%x: {ty(xs, elem)}, %w: {ty(ws, elem)}{bias_arg}) -> {ty(os_, elem)} {{
      %0 = tgraph.conv2d %x, %w{bias_use} stride = [{stride[0]}, {stride[1]}] padding = [{pad[0]}, {pad[1]}] : {ty(xs, elem)}, {ty(ws, elem)} -> {ty(os_, elem)}
      func.return %0 : {ty(os_, elem)} }}"""
    return text, os_


@pytest.mark.parametrize(("elem", "xs", "ws", "stride", "pad", "bias"), CONV)
def test_conv2d(elem, xs, ws, stride, pad, bias):
    text, os_ = conv_text(elem, xs, ws, stride, pad, bias)
    x, w, b = rand(RNG, xs, elem), rand(RNG, ws, elem), rand(RNG, (ws[0],), elem)
    args = [x, w, b] if bias else [x, w]
    (got,), (want,) = both(text, args)
    assert got.dtype == NP[elem] and got.shape == os_
    ref = torch.nn.functional.conv2d(
        torch.tensor(f64(x)), torch.tensor(f64(w)), torch.tensor(f64(b)) if bias else None,
        stride=stride, padding=pad,
    ).numpy()
    close(got, ref, TOL[elem])
    close(got, want, TOL[elem])


def test_conv2d_integer_is_refused():
    s = "tensor<1x2x4x4xi32>, tensor<1x2x3x3xi32> -> tensor<1x1x2x2xi32>"
    text = f"""func.func @f(%x: tensor<1x2x4x4xi32>, %w: tensor<1x2x3x3xi32>) -> tensor<1x1x2x2xi32> {{
      %0 = tgraph.conv2d %x, %w stride = [1, 1] padding = [0, 0] : {s}
      func.return %0 : tensor<1x1x2x2xi32> }}"""
    with pytest.raises(NotImplementedError, match=r"tgraph.conv2d has no Tile IR lowering "
                       r"\(element type i32"):
        lower(text)


# --------------------------------------------------------------------------- spmm


def csr(m: int, k: int, density: float, empty_rows: int = 0):
    mask = RNG.uniform(size=(m, k)) < density
    mask[:empty_rows] = False
    vals = np.where(RNG.uniform(size=(m, k)) < 0.5, -1.0, 1.0) * RNG.uniform(0.2, 2.0, (m, k))
    indptr = np.concatenate([[0], np.cumsum(mask.sum(1))])
    indices = np.nonzero(mask)[1]
    return mask, vals[mask], indptr, indices


SPMM = [
    # (elem, M, K, N, density, index type)
    ("f32", 13, 17, 45, 0.3, "i32"),
    ("f32", 7, 300, 131, 0.05, "i64"),
    ("f32", 40, 9, 3, 0.6, "i32"),
    ("f64", 21, 33, 70, 0.2, "i32"),
    ("bf16", 19, 23, 37, 0.4, "i32"),
    ("f16", 5, 8, 200, 0.5, "i64"),
]


def spmm_text(elem, m, k, n, nnz, it) -> str:
    pt, xt = f"tensor<{m + 1}x{it}>", f"tensor<{nnz}x{it}>"
    vt, dt, rt = ty((nnz,), elem), ty((k, n), elem), ty((m, n), elem)
    return f"""func.func @f(%p: {pt}, %i: {xt}, %v: {vt}, %d: {dt}) -> {rt} {{
      %0 = tgraph.spmm %p, %i, %v, %d sparse_shape = [{m}, {k}] : ({pt}, {xt}, {vt}, {dt}) -> {rt}
      func.return %0 : {rt} }}"""


@pytest.mark.parametrize(("elem", "m", "k", "n", "density", "it"), SPMM)
def test_spmm(elem, m, k, n, density, it):
    mask, vals, indptr, indices = csr(m, k, density, empty_rows=2)
    v = vals.astype(NP[elem])
    d = rand(RNG, (k, n), elem)
    idt = np.int32 if it == "i32" else np.int64
    text = spmm_text(elem, m, k, n, indices.size, it)
    (got,), (want,) = both(text, [indptr.astype(idt), indices.astype(idt), v, d])
    a = np.zeros((m, k))
    a[mask] = f64(v)
    close(got, a @ f64(d), TOL[elem])
    # same products, summed in the same (CSR) order and precision: bit for bit
    np.testing.assert_array_equal(f64(got), f64(want))
    (kern,) = kernel_ops(lower(text))
    assert kern.group_size.value.data == 128  # rows of 1-32 lanes (tests/passes/test_lower_sparse.py)


def test_spmm_all_zero_rows():
    d = rand(RNG, (4, 5))
    pt, xt = "tensor<4xi32>", "tensor<0xi32>"
    text = f"""func.func @f(%p: {pt}, %i: {xt}, %v: tensor<0xf32>, %d: {ty((4, 5))}) -> {ty((3, 5))} {{
      %0 = tgraph.spmm %p, %i, %v, %d sparse_shape = [3, 4] : ({pt}, {xt}, tensor<0xf32>, {ty((4, 5))}) -> {ty((3, 5))}
      func.return %0 : {ty((3, 5))} }}"""
    (got,), _ = both(text, [np.zeros(4, np.int32), np.zeros(0, np.int32),
                                         np.zeros(0, np.float32), d])
    np.testing.assert_array_equal(got, np.zeros((3, 5), np.float32))


# --------------------------------------------------------------------------- randn


def randn_text(elem, shape, seed, offset) -> str:
    off = f" offset = {offset}" if offset is not None else ""
    t = ty(shape, elem)
    return f"""func.func @f() -> {t} {{
      %0 = tgraph.randn seed = {seed}{off} : {t}
      func.return %0 : {t} }}"""


RANDN = [("f32", (37, 29), 3, 5), ("f64", (3, 5, 7), 11, None), ("bf16", (300,), 0, 2),
     ("f16", (1, 17), 2**40 + 7, -3), ("f32", (), 9, 1)]


@pytest.mark.parametrize(("elem", "shape", "seed", "offset"), RANDN)
def test_randn_equals_reference(elem, shape, seed, offset):
    text = randn_text(elem, shape, seed, offset)
    (got,), (want,) = both(text, [])
    assert got.dtype == NP[elem] and got.shape == shape
    np.testing.assert_array_equal(bits(got), bits(want))
    ref = randn_array(shape, seed, offset or 0)
    np.testing.assert_array_equal(bits(got), bits(cast_array(ref, NP[elem])))


def test_randn_statistics():
    z = randn_array((400, 500), seed=7, offset=3).ravel()
    n = z.size
    assert abs(z.mean()) < 5 / math.sqrt(n)
    assert abs(z.var() - 1) < 5 * math.sqrt(2 / n)
    assert abs((z**3).mean()) < 5 * math.sqrt(15 / n)
    assert abs((z**4).mean() - 3) < 5 * math.sqrt(96 / n)
    # empirical CDF against the normal CDF (Kolmogorov-Smirnov bound at ~1e-6)
    zs = np.sort(z)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(zs[::97] / math.sqrt(2)))
    ecdf = (np.arange(n)[::97] + 1) / n
    assert np.max(np.abs(cdf - ecdf)) < 2.65 / math.sqrt(n)
    # streams: other offset or seed are different, same op is the same
    assert not np.array_equal(randn_array((50,), 7, 4), randn_array((50,), 7, 3))
    assert not np.array_equal(randn_array((50,), 8, 3), randn_array((50,), 7, 3))
    np.testing.assert_array_equal(randn_array((50,), 7, 3), z[:50])


def test_polynomial_log_and_cos_are_accurate():
    o = NumpyOps(0, 0)
    x = np.exp(np.linspace(-700, 700, 20001))
    np.testing.assert_allclose(log(o, x), np.log(x), rtol=4e-16, atol=4e-16)
    t = np.linspace(1e-9, 1 - 1e-9, 20001)
    np.testing.assert_allclose(cos_2pi(o, t), np.cos(2 * np.pi * t), rtol=0, atol=2e-15)
    k = np.arange(0.0, 3000.0)
    want = np.array([math.lgamma(v + 1) for v in k])
    np.testing.assert_allclose(log_factorial(o, k), want, rtol=1e-14, atol=1e-15)


# --------------------------------------------------------------------------- poisson


def test_poisson_equals_reference_all_regimes():
    lam = np.concatenate([
        [0.0, 1e-3, 9.999, 10.0, 12.5, 1e3, 1e6, 3e12], RNG.uniform(0.05, 30.0, 493)
    ]).reshape(3, 167)
    text = """func.func @f(%l: tensor<3x167xf64>) -> tensor<3x167xf64> {
      %0 = tgraph.poisson %l seed = 9 offset = 1 : (tensor<3x167xf64>) -> tensor<3x167xf64>
      func.return %0 : tensor<3x167xf64> }"""
    (got,), (want,) = both(text, [lam])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, poisson_array(lam, 9, 1))
    assert np.all(got == np.round(got)) and np.all(got >= 0)
    assert got.ravel()[0] == 0.0


def poisson_text(elem, shape, seed) -> str:
    t = ty(shape, elem)
    return f"""func.func @f(%l: {t}) -> {t} {{
      %0 = tgraph.poisson %l seed = {seed} : ({t}) -> {t}
      func.return %0 : {t} }}"""


@pytest.mark.parametrize("elem", ["f32", "bf16", "f16"])
def test_poisson_narrow_types(elem):
    lam = rand(RNG, (5, 41), elem, lo=0.1, hi=40.0)
    text = poisson_text(elem, (5, 41), 4)
    (got,), (want,) = both(text, [lam])
    assert got.dtype == NP[elem]
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("rate", [0.05, 0.7, 3.5, 9.99, 10.0, 17.3, 250.0, 1e5])
def test_poisson_mean_and_variance(rate):
    n = 100_000
    x = poisson_array(np.full(n, rate), seed=12, offset=int(rate * 100))
    # 5 standard errors of the sample mean and variance of a Poisson(rate) sample
    assert abs(x.mean() - rate) < 5 * math.sqrt(rate / n)
    var_se = math.sqrt((rate + 2 * rate**2) / n)  # fourth central moment rate + 3 rate^2
    assert abs(x.var() - rate) < 5 * var_se


@pytest.mark.parametrize("rate", [2.5, 31.0])
def test_poisson_pmf_chi_square(rate):
    n = 200_000
    x = poisson_array(np.full(n, rate), seed=3, offset=0).astype(np.int64)
    ks = np.arange(int(rate + 6 * math.sqrt(rate)) + 2)
    pmf = np.exp(ks * math.log(rate) - rate - np.array([math.lgamma(k + 1) for k in ks]))
    keep = pmf * n >= 20
    obs = np.array([(x == k).sum() for k in ks[keep]])
    exp = pmf[keep] * n
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    dof = int(keep.sum())
    assert chi2 < dof + 6 * math.sqrt(2 * dof), (chi2, dof)


def test_poisson_bad_rates_raise_on_cpu():
    for bad in (-1.0, math.nan, math.inf, POISSON_MAX_RATE * 2):
        with pytest.raises(ValueError, match="tgraph.poisson: rates must be finite"):
            poisson_array(np.array([1.0, bad]), 0)


def test_random_unsupported_type_is_refused():
    text = """func.func @f() -> tensor<4xf8E4M3FN> {
      %0 = tgraph.randn seed = 1 : tensor<4xf8E4M3FN>
      func.return %0 : tensor<4xf8E4M3FN> }"""
    with pytest.raises(NotImplementedError, match=r"tgraph.randn has no Tile IR lowering "
                       r"\(element type f8E4M3FN"):
        lower(text)


# --------------------------------------------------------------------------- ptxas


def test_all_kernels_pass_ptxas():
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found (set TESSERA_PTXAS or install nvidia-cuda-nvcc)")
    texts = [conv_text(*c)[0] for c in CONV]
    texts += [spmm_text(e, m, k, n, 2 * m + 1, it) for e, m, k, n, _, it in SPMM]
    texts += [randn_text(*c) for c in RANDN]
    texts += [poisson_text(e, (3, 167), 1) for e in ("f64", "f32", "bf16", "f16")]
    combined = ModuleOp([])
    for n, text in enumerate(texts):
        m = lower(text.replace("func.func @f(", f"func.func @f{n}("))
        assert len(kernel_ops(m)) == 1
        LowerTileToTargetPass().apply(default_context(), m)
        for k in kernels(m):
            combined.body.block.add_op(k.clone())
    joined = emit_ptx(combined)
    assert joined.count(".visible .entry") == len(texts)
    ptxas.check(joined)
    for needle in ("mul.lo.s64", "sqrt.rn.f64", "cvt.rzi.s64.f64", "div.rn.f64"):
        assert needle in joined
    assert "fma.rn.f64" not in joined  # the float64 sampler arithmetic is never contracted
