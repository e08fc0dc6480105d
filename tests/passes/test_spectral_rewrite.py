"""spectral-rewrite (tessera.passes.spectral_rewrite): each rewrite computes what the
program computed before, checked on the Graph IR interpreter against numpy in float64 on
random inputs; the conv-via-fft program also runs lowered on the Tile IR interpreter;
the cost rule decides as documented; and @ts.jit's default pipeline applies the pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from xdsl.parser import Parser

import tessera as ts
from tessera.ir.context import default_context
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tessera.passes.spectral_rewrite import SpectralRewritePass, conv_costs
from tessera.runtime.graph_interpreter import run_function
from tessera.runtime.tile_interpreter import run_host

RNG = np.random.default_rng(31)


def ty(shape, elem="f64") -> str:
    return f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}{elem}>"


def rewrite(text: str, **opts):
    ctx = default_context()
    m = Parser(ctx, text).parse_module()
    m.verify()
    SpectralRewritePass(**opts).apply(ctx, m)
    m.verify()
    return m


def both(text: str, args, **opts):
    """(results before, results after, rewritten module) on the Graph IR interpreter."""
    m0 = Parser(default_context(), text).parse_module()
    m1 = rewrite(text, **opts)
    return run_function(m0, "f", args), run_function(m1, "f", args), m1


def test_inverse_pair_is_the_input_exactly():
    t, c = ty((3, 16)), ty((3, 16), "complex<f64>")
    text = f"""func.func @f(%x: {t}) -> {t} {{
      %0 = tgraph.fft %x : ({t}) -> {c}
      %1 = tgraph.fft %0 inverse : ({c}) -> {c}
      %2 = tgraph.real %1 : ({c}) -> {t}
      func.return %2 : {t} }}"""
    x = RNG.standard_normal((3, 16))
    (before,), (after,), m = both(text, [x])
    assert "tgraph.fft" not in str(m)
    assert np.array_equal(after, x)  # exact: no transform left
    np.testing.assert_allclose(before, x, rtol=0, atol=1e-14)  # the pair: rounding only


def test_forward_after_inverse_of_complex():
    c = ty((5, 6), "complex<f64>")
    text = f"""func.func @f(%z: {c}) -> {c} {{
      %0 = tgraph.fft2d %z inverse : ({c}) -> {c}
      %1 = tgraph.fft2d %0 : ({c}) -> {c}
      func.return %1 : {c} }}"""
    z = RNG.standard_normal((5, 6)) + 1j * RNG.standard_normal((5, 6))
    (before,), (after,), _ = both(text, [z])
    assert np.array_equal(after, z)
    np.testing.assert_allclose(before, z, atol=1e-14)


@pytest.mark.parametrize("inverse", [False, True])
def test_parseval_sum(inverse):
    t, c, r = ty((4, 32)), ty((4, 32), "complex<f64>"), ty((4, 1))
    inv = " inverse" if inverse else ""
    text = f"""func.func @f(%x: {t}) -> {r} {{
      %0 = tgraph.fft %x{inv} : ({t}) -> {c}
      %re = tgraph.real %0 : ({c}) -> {t}
      %im = tgraph.imag %0 : ({c}) -> {t}
      %a = tgraph.mul %re, %re : ({t}, {t}) -> {t}
      %b = tgraph.mul %im, %im : ({t}, {t}) -> {t}
      %p = tgraph.add %a, %b : ({t}, {t}) -> {t}
      %s = tgraph.sum %p axes = [1] keepdims : ({t}) -> {r}
      func.return %s : {r} }}"""
    x = RNG.standard_normal((4, 32))
    (before,), (after,), m = both(text, [x])
    assert "tgraph.fft" not in str(m)
    f = np.fft.ifft(x) if inverse else np.fft.fft(x)
    want = (np.abs(f) ** 2).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(after, want, rtol=1e-12)
    np.testing.assert_allclose(before, want, rtol=1e-12)


def conv_text(x, w, pad, bias: bool, elem="f64") -> str:
    ho, wo = x[2] + 2 * pad[0] - w[2] + 1, x[3] + 2 * pad[1] - w[3] + 1
    o, b = (x[0], w[0], ho, wo), ty((w[0],), elem)
    arg = f", %b: {b}" if bias else ""
    use = f" bias %b : {b}" if bias else ""
    return f"""func.func @f(%x: {ty(x, elem)}, %w: {ty(w, elem)}{arg}) -> {ty(o, elem)} {{
      %0 = tgraph.conv2d %x, %w{use} stride = [1, 1] padding = [{pad[0]}, {pad[1]}] : {ty(x, elem)}, {ty(w, elem)} -> {ty(o, elem)}
      func.return %0 : {ty(o, elem)} }}"""


def torch_conv(x, w, b, pad) -> np.ndarray:
    t = [None if v is None else torch.tensor(v, dtype=torch.float64) for v in (x, w, b)]
    return torch.nn.functional.conv2d(*t, padding=pad).numpy()


@pytest.mark.parametrize("x,w,pad,bias", [
    ((1, 2, 18, 18), (2, 2, 15, 15), (7, 7), True),  # chosen by the cost rule
    ((2, 3, 7, 9), (4, 3, 3, 5), (1, 2), False),  # forced (margin 0): odd, uneven sizes
])
def test_conv_via_fft_matches_torch(x, w, pad, bias):
    X, W = RNG.standard_normal(x), RNG.standard_normal(w)
    B = RNG.standard_normal(w[0]) if bias else None
    args = [X, W] + ([B] if bias else [])
    text = conv_text(x, w, pad, bias)
    margin = 1.0 if x[2] == 18 else 0.0
    (before,), (after,), m = both(text, args, conv_via_fft=True, fft_conv_margin=margin)
    assert "tgraph.conv2d" not in str(m) and "tgraph.fft2d" in str(m)
    want = torch_conv(X, W, B, pad)
    np.testing.assert_allclose(before, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(after, want, rtol=1e-10, atol=1e-11)
    # and lowered: the Tile IR interpreter runs the fft kernels and the complex product
    LowerGraphToTile().apply(default_context(), m)
    (tiled,) = run_host(m, "f", args)
    np.testing.assert_allclose(tiled, want, rtol=1e-10, atol=1e-11)


def test_cost_rule():
    # 15x15 kernel, 32x32 padded (powers of two): FFT 540672 < direct 583200
    assert conv_costs((1, 2, 18, 18), (2, 2, 15, 15), (7, 7)) == (583200.0, 540672.0)
    # 3x3 kernel: direct wins by far
    direct, fft = conv_costs((1, 4, 32, 32), (4, 4, 3, 3), (1, 1))
    assert direct == 2 * 16 * 32 * 32 * 9 and fft > 10 * direct
    # 30 = 2 x 3 x 5: mixed radix, 5 n log2 n
    f1 = 5 * 30 * np.log2(30)
    assert conv_costs((1, 1, 30, 30), (1, 1, 15, 15), (0, 0))[1] == pytest.approx(
        3 * (30 * f1 * 2) + 7 * 30 * 30)
    # 37 (prime): Bluestein, two transforms of 128 points and three products
    f1 = 2 * 5 * 128 * 7 + 18 * 128
    assert conv_costs((1, 1, 37, 37), (1, 1, 3, 3), (0, 0))[1] == pytest.approx(
        3 * (37 * f1 * 2) + 7 * 37 * 37)
    # too long for one transform tile: kept even with margin 0
    m = rewrite(conv_text((1, 1, 4100, 4), (1, 1, 3, 3), (1, 1), False, "f32"),
                fft_conv_margin=0.0)
    assert "tgraph.conv2d" in str(m)


def test_jit_default_pipeline_folds_the_pair():
    @ts.jit
    def roundtrip(x):
        return ts.real(ts.ifft(ts.fft(x)))

    x = RNG.standard_normal((2, 8))
    assert np.array_equal(roundtrip(x), x)
    assert "tgraph.fft" not in roundtrip.inspect_ir("graph")


def test_jit_parseval_in_the_guides_spelling():
    @ts.jit
    def energy(x):
        X = ts.fft(x)
        return ts.sum(ts.real(X) * ts.real(X) + ts.imag(X) ** 2, axis=-1)

    x = RNG.standard_normal((3, 16))
    np.testing.assert_allclose(energy(x), (np.abs(np.fft.fft(x)) ** 2).sum(-1), rtol=1e-12)
    assert "tgraph.fft" not in energy.inspect_ir("graph")
