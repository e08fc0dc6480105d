"""Complex elementwise arithmetic (tessera.passes.tile_complex): add, sub, mul, div, neg,
select and fused bodies of them on complex tensors lower to Tile IR; the Tile IR
interpreter's result equals numpy's complex128 arithmetic on random inputs (broadcasts,
odd sizes, two tiles), every kernel passes ptxas -arch=sm_90a, and the Graph IR
interpreter agrees."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera.runtime.tile_interpreter import run_host
from tests.passes.test_lower_graph_to_tile import lower
from tests.passes.test_lower_linalg_ops import NP, as_complex, check_ptx, graph_reference, rand, ty

RNG = np.random.default_rng(20)


def crand(shape, elem) -> np.ndarray:
    """Interleaved (real, imaginary) pairs, never zero."""
    return np.stack([rand(shape, elem), rand(shape, elem)], axis=-1)


def binary_text(op: str, a, b, out, elem) -> str:
    ca, cb, co = (ty(s, f"complex<{elem}>") for s in (a, b, out))
    return f"""func.func @f(%x: {ca}, %y: {cb}) -> {co} {{
  %0 = tgraph.{op} %x, %y : ({ca}, {cb}) -> {co}
  func.return %0 : {co} }}"""


NUMPY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
CASES = [
    ("mul", (7,), (7,), (7,), "f64"),
    ("mul", (3, 5), (1, 5), (3, 5), "f32"),
    ("mul", (300,), (300,), (300,), "f64"),  # two tiles
    ("div", (2, 9), (2, 9), (2, 9), "f64"),
    ("div", (4, 3), (3,), (4, 3), "f32"),
    ("add", (5, 2), (5, 2), (5, 2), "f64"),
    ("sub", (1, 6), (4, 6), (4, 6), "f64"),
]


@pytest.mark.parametrize("op,a,b,out,elem", CASES)
def test_binary_matches_numpy_complex128(op, a, b, out, elem):
    x, y = crand(a, elem), crand(b, elem)
    if op == "div":  # divisors with |re| < |im| and |re| >= |im| (both branches of Smith's)
        y[..., 0] *= np.where(RNG.random(b) < 0.5, 10.0, 0.1)
    text = binary_text(op, a, b, out, elem)
    (got,) = run_host(lower(text), "f", [x, y])
    assert got.shape == (*out, 2) and got.dtype == NP[elem]
    want = NUMPY[op](as_complex(x), as_complex(y))  # complex128
    tol = 1e-14 if elem == "f64" else 1e-6
    np.testing.assert_allclose(as_complex(got), want, rtol=tol, atol=tol)
    ct = np.complex128 if elem == "f64" else np.complex64
    (ref,) = graph_reference(text, [as_complex(x).astype(ct), as_complex(y).astype(ct)])
    np.testing.assert_allclose(as_complex(got), ref, rtol=tol, atol=tol)


def test_div_by_zero_is_numpys():
    text = binary_text("div", (3,), (3,), (3,), "f64")
    x = crand((3,), "f64")
    y = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, -3.0]])
    (got,) = run_host(lower(text), "f", [x, y])
    with np.errstate(all="ignore"):
        want = as_complex(x) / as_complex(y)
    parts = np.stack([want.real, want.imag], axis=-1)
    assert np.array_equal(got, parts, equal_nan=True)


def fused_text(elem: str) -> str:
    """``select(p > 0, -(x * y) / z + x, x - y)``, as fuse-elementwise leaves it."""
    c, t, b = ty((4, 5), f"complex<{elem}>"), ty((4, 5), elem), ty((4, 5), "i1")
    return f"""func.func @f(%x: {c}, %y: {c}, %z: {c}, %p: {t}, %q: {t}) -> {c} {{
  %r = tgraph.fused %x, %y, %z, %p, %q : ({c}, {c}, {c}, {t}, {t}) -> {c} {{
  ^bb0(%a: {c}, %b: {c}, %d: {c}, %u: {t}, %v: {t}):
    %m = tgraph.mul %a, %b : ({c}, {c}) -> {c}
    %n = tgraph.neg %m : ({c}) -> {c}
    %q1 = tgraph.div %n, %d : ({c}, {c}) -> {c}
    %s = tgraph.add %q1, %a : ({c}, {c}) -> {c}
    %w = tgraph.sub %a, %b : ({c}, {c}) -> {c}
    %k = tgraph.gt %u, %v : ({t}, {t}) -> {b}
    %o = tgraph.select %k, %s, %w : ({b}, {c}, {c}) -> {c}
    tgraph.yield %o : {c}
  }}
  func.return %r : {c} }}"""


@pytest.mark.parametrize("elem", ["f64", "f32"])
def test_fused_body_on_pairs(elem):
    x, y, z = (crand((4, 5), elem) for _ in range(3))
    p, q = rand((4, 5), elem), rand((4, 5), elem)
    m = lower(fused_text(elem))
    assert "cfused" in str(m)
    (got,) = run_host(m, "f", [x, y, z, p, q])
    X, Y, Z = (as_complex(v) for v in (x, y, z))
    want = np.where(p > q, -(X * Y) / Z + X, X - Y)
    tol = 1e-14 if elem == "f64" else 1e-5
    np.testing.assert_allclose(as_complex(got), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("text", [
    binary_text("mul", (7,), (7,), (7,), "f32"),
    binary_text("div", (4, 3), (3,), (4, 3), "f64"),
    fused_text("f32"),
])
def test_ptxas_accepts(text):
    check_ptx(text)


def test_jit_fft_product_lowers_and_matches():
    @ts.jit
    def spectrum(x, y):
        a, b = ts.fft(x), ts.fft(y)
        return a * b / (a - b) + a

    x, y = RNG.standard_normal(16), RNG.standard_normal(16)
    got = spectrum(x, y)
    assert "cfused" in spectrum.inspect_ir("tile")
    A, B = np.fft.fft(x), np.fft.fft(y)
    np.testing.assert_allclose(got, A * B / (A - B) + A, rtol=1e-10, atol=1e-10)


def test_complex_pow_is_reported():
    c = ty((4,), "complex<f32>")
    text = f"""func.func @f(%x: {c}) -> {c} {{
      %0 = tgraph.pow %x, %x : ({c}, {c}) -> {c}
      func.return %0 : {c} }}"""
    with pytest.raises(NotImplementedError, match=r"tgraph.pow has no Tile IR lowering "
                                                  r"\(complex tensors"):
        lower(text)


def test_python_scalars_with_complex_tensors_on_the_tile_interpreter():
    from xdsl.parser import Parser

    from tessera.ir.context import default_context
    from tessera.passes.lower_graph_to_tile import LowerGraphToTile

    @ts.jit
    def f(x):
        X = ts.fft(x)
        return (-X * 2.0 + 1) / (1 + 2j) - 3

    x = RNG.standard_normal((3, 16))
    X = np.fft.fft(x)
    want = (-X * 2.0 + 1) / (1 + 2j) - 3
    np.testing.assert_allclose(f(x), want, rtol=1e-13, atol=1e-13)  # Graph IR interpreter
    ctx = default_context()
    m = Parser(ctx, f.inspect_ir("graph")).parse_module()
    LowerGraphToTile().apply(ctx, m)
    (got,) = run_host(m, "f", [x])
    np.testing.assert_allclose(as_complex(got), want, rtol=1e-13, atol=1e-13)
    with pytest.raises(ts.TesseraTypeError, match="cannot combine True with a complex tensor"):
        ts.jit(lambda x: ts.fft(x) * True)(x)
