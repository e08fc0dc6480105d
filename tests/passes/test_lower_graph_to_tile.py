"""lower-graph-to-tile: Graph IR lowered to Tile IR, run by the Tile IR interpreter,
compared with numpy float64 on random inputs (odd shapes, ragged tiles)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.arith import Arith
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.dialects.func import Func
from xdsl.dialects.math import Math
from xdsl.dialects.memref import MemRef
from xdsl.dialects.scf import Scf
from xdsl.dialects.vector import Vector
from xdsl.parser import Parser

from tessera.ir import tile as tt
from tessera.ir.attrs import Tessera
from tessera.ir.graph import Graph
from tessera.ir.tile import Tile
from tessera.passes.lower_graph_to_tile import LOWERED_OPS, LowerGraphToTile
from tessera.runtime.tile_interpreter import run_host

BF16 = np.dtype(ml_dtypes.bfloat16)
NP = {"f32": np.float32, "f64": np.float64, "bf16": BF16, "f16": np.float16, "i32": np.int32,
      "i1": np.bool_}


def context() -> Context:
    ctx = Context()
    for d in (Builtin, Func, Graph, Tessera, Tile, Arith, Math, Scf, MemRef, Vector):
        ctx.load_dialect(d)
    return ctx


def lower(text: str) -> ModuleOp:
    ctx = context()
    m = Parser(ctx, text).parse_module()
    m.verify()
    LowerGraphToTile().apply(ctx, m)
    m.verify()
    # the printed module parses back
    Parser(ctx, str(m)).parse_module().verify()
    return m


def ty(shape, elem="f32") -> str:
    return f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}{elem}>"


def rand(rng, shape, elem="f32", lo=-2.0, hi=2.0):
    x = rng.uniform(lo, hi, size=shape)
    x = np.where(np.abs(x) < 0.05, 0.3, x)  # never zero
    return x.astype(NP[elem])


def run1(text, *args):
    m = lower(text)
    return run_host(m, "f", list(args))


def f64(x):
    return np.asarray(x).astype(np.float64)


RNG = np.random.default_rng(0)


# --------------------------------------------------------------------------- elementwise

BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcast_f32(name):
    a, b = rand(RNG, (37, 53)), rand(RNG, (53,))
    text = f"""func.func @f(%a: {ty((37, 53))}, %b: {ty((53,))}) -> {ty((37, 53))} {{
      %0 = tgraph.{name} %a, %b : ({ty((37, 53))}, {ty((53,))}) -> {ty((37, 53))}
      func.return %0 : {ty((37, 53))} }}"""
    (r,) = run1(text, a, b)
    np.testing.assert_allclose(f64(r), BINARY[name](f64(a), f64(b)), rtol=1e-6)


def test_pow_and_compare_and_select():
    a, b = rand(RNG, (3, 1, 5), lo=0.5, hi=2.0), rand(RNG, (4, 1))
    s = (3, 4, 5)
    text = f"""func.func @f(%a: {ty((3, 1, 5))}, %b: {ty((4, 1))}) -> ({ty(s)}, {ty(s, 'i1')}, {ty(s, 'i1')}, {ty(s)}) {{
      %0 = tgraph.pow %a, %b : ({ty((3, 1, 5))}, {ty((4, 1))}) -> {ty(s)}
      %1 = tgraph.lt %a, %b : ({ty((3, 1, 5))}, {ty((4, 1))}) -> {ty(s, 'i1')}
      %2 = tgraph.ne %a, %b : ({ty((3, 1, 5))}, {ty((4, 1))}) -> {ty(s, 'i1')}
      %3 = tgraph.select %1, %a, %b : ({ty(s, 'i1')}, {ty((3, 1, 5))}, {ty((4, 1))}) -> {ty(s)}
      func.return %0, %1, %2, %3 : {ty(s)}, {ty(s, 'i1')}, {ty(s, 'i1')}, {ty(s)} }}"""
    p, lt, ne, sel = run1(text, a, b)
    A, B = f64(a), f64(b)
    np.testing.assert_allclose(f64(p), A**B, rtol=1e-5)
    np.testing.assert_array_equal(lt, A < B)
    np.testing.assert_array_equal(ne, A != B)
    np.testing.assert_array_equal(f64(sel), np.where(A < B, A, B))


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


UNARY = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh, "relu": lambda x: np.maximum(x, 0),
    "gelu": _gelu, "silu": lambda x: x / (1 + np.exp(-x)),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_f32(name):
    positive = name in ("log", "sqrt", "rsqrt")
    x = rand(RNG, (7, 33), lo=0.1 if positive else -3, hi=3)
    text = f"""func.func @f(%x: {ty((7, 33))}) -> {ty((7, 33))} {{
      %0 = tgraph.{name} %x : ({ty((7, 33))}) -> {ty((7, 33))}
      func.return %0 : {ty((7, 33))} }}"""
    (r,) = run1(text, x)
    np.testing.assert_allclose(f64(r), UNARY[name](f64(x)), rtol=2e-6, atol=1e-6)


def test_bf16_elementwise_computes_in_f32_and_rounds():
    a, b = rand(RNG, (9, 17), "bf16"), rand(RNG, (9, 17), "bf16")
    text = f"""func.func @f(%a: {ty((9, 17), 'bf16')}, %b: {ty((9, 17), 'bf16')}) -> {ty((9, 17), 'bf16')} {{
      %0 = tgraph.mul %a, %b : ({ty((9, 17), 'bf16')}, {ty((9, 17), 'bf16')}) -> {ty((9, 17), 'bf16')}
      %1 = tgraph.exp %0 : ({ty((9, 17), 'bf16')}) -> {ty((9, 17), 'bf16')}
      func.return %1 : {ty((9, 17), 'bf16')} }}"""
    (r,) = run1(text, a, b)
    assert r.dtype == BF16
    prod = (f64(a) * f64(b)).astype(np.float32).astype(BF16)
    want = np.exp(f64(prod)).astype(np.float32).astype(BF16)
    np.testing.assert_array_equal(f64(r), f64(want))


def test_casts_and_integer_ops():
    x = rand(RNG, (6, 11), lo=-50, hi=50)
    i = RNG.integers(-40, 40, size=(6, 11)).astype(np.int32)
    j = RNG.integers(1, 7, size=(6, 11)).astype(np.int32) * np.where(RNG.random((6, 11)) < 0.5, -1, 1).astype(np.int32)
    s = (6, 11)
    text = f"""func.func @f(%x: {ty(s)}, %i: {ty(s, 'i32')}, %j: {ty(s, 'i32')}) -> ({ty(s, 'bf16')}, {ty(s, 'i32')}, {ty(s, 'f32')}, {ty(s, 'i32')}, {ty(s, 'i32')}) {{
      %0 = tgraph.cast %x : ({ty(s)}) -> {ty(s, 'bf16')}
      %1 = tgraph.cast %x : ({ty(s)}) -> {ty(s, 'i32')}
      %2 = tgraph.cast %i : ({ty(s, 'i32')}) -> {ty(s, 'f32')}
      %3 = tgraph.div %i, %j : ({ty(s, 'i32')}, {ty(s, 'i32')}) -> {ty(s, 'i32')}
      %4 = tgraph.neg %i : ({ty(s, 'i32')}) -> {ty(s, 'i32')}
      func.return %0, %1, %2, %3, %4 : {ty(s, 'bf16')}, {ty(s, 'i32')}, {ty(s, 'f32')}, {ty(s, 'i32')}, {ty(s, 'i32')} }}"""
    b, ci, cf, d, n = run1(text, x, i, j)
    np.testing.assert_array_equal(f64(b), f64(x.astype(BF16)))
    np.testing.assert_array_equal(ci, np.trunc(f64(x)).astype(np.int32))
    np.testing.assert_array_equal(cf, i.astype(np.float32))
    q = np.abs(i) // np.abs(j)
    np.testing.assert_array_equal(d, np.where((i < 0) != (j < 0), -q, q))
    np.testing.assert_array_equal(n, -i)


def test_constants_splat_and_dense():
    text = """func.func @f() -> (tensor<3x5xbf16>, tensor<2x2xf32>) {
      %0 = tgraph.constant dense<2.500000e+00> : tensor<f32> -> tensor<3x5xbf16>
      %1 = tgraph.constant dense<[[1.5, -2.0], [3.25, 4.0]]> : tensor<2x2xf32> -> tensor<2x2xf32>
      func.return %0, %1 : tensor<3x5xbf16>, tensor<2x2xf32> }"""
    a, b = run1(text)
    np.testing.assert_array_equal(f64(a), np.full((3, 5), 2.5))
    np.testing.assert_array_equal(b, [[1.5, -2.0], [3.25, 4.0]])


# --------------------------------------------------------------------------- reductions


@pytest.mark.parametrize(
    "shape,axes,keep",
    [((37, 53), [1], False), ((37, 53), [0], True), ((3, 41, 5), [0, 2], False),
     ((4, 9, 300), [-1], True), ((5, 6), [], False)],
)
@pytest.mark.parametrize("kind", ["sum", "max", "min", "mean"])
def test_reductions(shape, axes, keep, kind):
    x = rand(RNG, shape)
    ax = tuple(a % len(shape) for a in axes) if axes else tuple(range(len(shape)))
    want = getattr(np, kind)(f64(x), axis=ax, keepdims=keep)
    kd = " keepdims" if keep else ""
    text = f"""func.func @f(%x: {ty(shape)}) -> {ty(want.shape)} {{
      %0 = tgraph.{kind} %x axes = {list(axes)}{kd} : ({ty(shape)}) -> {ty(want.shape)}
      func.return %0 : {ty(want.shape)} }}"""
    (r,) = run1(text, x)
    np.testing.assert_allclose(f64(r), want, rtol=1e-5, atol=1e-5)


def test_bf16_sum_accumulates_in_f32():
    x = rand(RNG, (5, 700), "bf16")
    text = f"""func.func @f(%x: {ty((5, 700), 'bf16')}) -> {ty((5,), 'bf16')} {{
      %0 = tgraph.sum %x axes = [1] : ({ty((5, 700), 'bf16')}) -> {ty((5,), 'bf16')}
      func.return %0 : {ty((5,), 'bf16')} }}"""
    (r,) = run1(text, x)
    np.testing.assert_allclose(f64(r), f64(x).sum(1), rtol=1e-2, atol=2e-2)


@pytest.mark.parametrize("shape,axis", [((37, 53), -1), ((6, 300), 1), ((7, 4, 3), 0)])
def test_softmax(shape, axis):
    x = rand(RNG, shape, lo=-4, hi=4)
    text = f"""func.func @f(%x: {ty(shape)}) -> {ty(shape)} {{
      %0 = tgraph.softmax %x axis = {axis} : ({ty(shape)}) -> {ty(shape)}
      func.return %0 : {ty(shape)} }}"""
    (r,) = run1(text, x)
    X = f64(x)
    e = np.exp(X - X.max(axis=axis, keepdims=True))
    np.testing.assert_allclose(f64(r), e / e.sum(axis=axis, keepdims=True), rtol=1e-5, atol=1e-7)


def test_rmsnorm_and_layernorm():
    s = (5, 3, 47)
    x, w, b = rand(RNG, s), rand(RNG, (47,)), rand(RNG, (47,))
    text = f"""func.func @f(%x: {ty(s)}, %w: {ty((47,))}, %b: {ty((47,))}) -> ({ty(s)}, {ty(s)}, {ty(s)}) {{
      %0 = tgraph.rmsnorm %x weight %w : {ty((47,))} eps = 1.000000e-06 : {ty(s)} -> {ty(s)}
      %1 = tgraph.layernorm %x weight %w : {ty((47,))} bias %b : {ty((47,))} eps = 1.000000e-05 : {ty(s)} -> {ty(s)}
      %2 = tgraph.layernorm %x eps = 1.000000e-05 : {ty(s)} -> {ty(s)}
      func.return %0, %1, %2 : {ty(s)}, {ty(s)}, {ty(s)} }}"""
    rms, ln, ln2 = run1(text, x, w, b)
    X, W, B = f64(x), f64(w), f64(b)
    np.testing.assert_allclose(
        f64(rms), X / np.sqrt((X * X).mean(-1, keepdims=True) + 1e-6) * W, rtol=1e-5, atol=1e-6
    )
    mu = X.mean(-1, keepdims=True)
    norm = (X - mu) / np.sqrt(((X - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(f64(ln), norm * W + B, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(f64(ln2), norm, rtol=1e-5, atol=1e-5)


def test_mse_with_broadcast():
    p, t = rand(RNG, (13, 29)), rand(RNG, (29,))
    text = f"""func.func @f(%p: {ty((13, 29))}, %t: {ty((29,))}) -> tensor<f32> {{
      %0 = tgraph.mse %p, %t : ({ty((13, 29))}, {ty((29,))}) -> tensor<f32>
      func.return %0 : tensor<f32> }}"""
    (r,) = run1(text, p, t)
    np.testing.assert_allclose(float(r), ((f64(p) - f64(t)) ** 2).mean(), rtol=1e-5)


# --------------------------------------------------------------------------- shape ops


def test_shape_ops():
    x = rand(RNG, (4, 7, 3))
    v = rand(RNG, (3,))
    text = f"""func.func @f(%x: {ty((4, 7, 3))}, %v: {ty((3,))}) -> ({ty((3, 4, 7))}, {ty((12, 7))}, {ty((5, 3))}, {ty((2, 3, 2))}, {ty((4, 9, 3))}, {ty((4, 7, 3))}) {{
      %0 = tgraph.transpose %x permutation = [2, 0, 1] : ({ty((4, 7, 3))}) -> {ty((3, 4, 7))}
      %1 = tgraph.reshape %x : ({ty((4, 7, 3))}) -> {ty((12, 7))}
      %2 = tgraph.broadcast %v : ({ty((3,))}) -> {ty((5, 3))}
      %3 = tgraph.slice %x start = [1, 2, 0] limit = [4, 7, 3] stride = [2, 2, 1] : ({ty((4, 7, 3))}) -> {ty((2, 3, 3))}
      %4 = tgraph.slice %3 start = [0, 0, 1] limit = [2, 3, 3] stride = [1, 1, 1] : ({ty((2, 3, 3))}) -> {ty((2, 3, 2))}
      %5 = tgraph.slice %x start = [0, 0, 0] limit = [4, 2, 3] stride = [1, 1, 1] : ({ty((4, 7, 3))}) -> {ty((4, 2, 3))}
      %6 = tgraph.concat %x, %5 axis = 1 : ({ty((4, 7, 3))}, {ty((4, 2, 3))}) -> {ty((4, 9, 3))}
      func.return %0, %1, %2, %4, %6, %x : {ty((3, 4, 7))}, {ty((12, 7))}, {ty((5, 3))}, {ty((2, 3, 2))}, {ty((4, 9, 3))}, {ty((4, 7, 3))} }}"""
    tr, rs, bc, sl, cc, same = run1(text, x, v)
    np.testing.assert_array_equal(tr, np.transpose(x, (2, 0, 1)))
    np.testing.assert_array_equal(rs, x.reshape(12, 7))
    np.testing.assert_array_equal(bc, np.broadcast_to(v, (5, 3)))
    np.testing.assert_array_equal(sl, x[1:4:2, 2:7:2, :][:, :, 1:3])
    np.testing.assert_array_equal(cc, np.concatenate([x, x[:, :2]], axis=1))
    np.testing.assert_array_equal(same, x)


# --------------------------------------------------------------------------- matmul


def _mm_text(ash, bsh, osh, et, ot, extra=""):
    return f"""func.func @f(%a: {ty(ash, et)}, %b: {ty(bsh, et)}) -> {ty(osh, ot)} {{
      %0 = tgraph.matmul %a, %b{extra} : ({ty(ash, et)}, {ty(bsh, et)}) -> {ty(osh, ot)}
      func.return %0 : {ty(osh, ot)} }}"""


def test_matmul_f32_ragged():
    a, b = rand(RNG, (37, 53)), rand(RNG, (53, 29))
    (r,) = run1(_mm_text((37, 53), (53, 29), (37, 29), "f32", "f32"), a, b)
    np.testing.assert_allclose(f64(r), f64(a) @ f64(b), rtol=1e-5, atol=1e-5)


def test_matmul_bf16_ragged_unaligned_k_uses_masked_loads():
    a, b = rand(RNG, (37, 53), "bf16"), rand(RNG, (53, 29), "bf16")
    text = _mm_text((37, 53), (53, 29), (37, 29), "bf16", "f32")
    m = lower(text)
    names = {o.name for o in m.walk()}
    assert "ttile.mma" in names and "ttile.copy_async" not in names
    (r,) = run_host(m, "f", [a, b])
    np.testing.assert_allclose(f64(r), f64(a) @ f64(b), rtol=1e-5, atol=1e-4)


def test_matmul_bf16_aligned_uses_copy_async():
    a, b = rand(RNG, (40, 72), "bf16"), rand(RNG, (72, 24), "bf16")
    text = _mm_text((40, 72), (72, 24), (40, 24), "bf16", "f32", " tile_shape = [32, 32, 32]")
    m = lower(text)
    names = [o.name for o in m.walk()]
    assert "ttile.copy_async" in names and "ttile.mma" in names
    (r,) = run_host(m, "f", [a, b])
    np.testing.assert_allclose(f64(r), f64(a) @ f64(b), rtol=1e-5, atol=1e-4)


def test_matmul_f16_batched_broadcast_transposed_bf16_output():
    a, b = rand(RNG, (2, 1, 21, 37), "f16"), rand(RNG, (3, 19, 21), "f16")
    text = _mm_text((2, 1, 21, 37), (3, 19, 21), (2, 3, 37, 19), "f16", "f16",
                    " transpose_lhs transpose_rhs")
    (r,) = run1(text, a, b)
    want = np.swapaxes(f64(a), -1, -2) @ np.swapaxes(f64(b), -1, -2)
    np.testing.assert_allclose(f64(r), want, rtol=2e-3, atol=2e-3)


def test_matmul_f64_batched():
    a, b = rand(RNG, (3, 17, 20), "f64"), rand(RNG, (20, 33), "f64")
    (r,) = run1(_mm_text((3, 17, 20), (20, 33), (3, 17, 33), "f64", "f64",
                         " tile_shape = [16, 48, 8]"), a, b)
    np.testing.assert_allclose(r, a @ b, rtol=1e-12)


def test_matmul_bad_tile_shape_is_reported():
    text = _mm_text((32, 32), (32, 32), (32, 32), "bf16", "f32", " tile_shape = [48, 32, 16]")
    with pytest.raises(ValueError, match=r"tgraph.matmul: tile_shape \[48, 32, 16\]"):
        lower(text)


# --------------------------------------------------------------------------- attention


def _attention(q, k, v, scale, causal):
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        sq, sk = s.shape[-2:]
        s = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_f32(causal):
    q, k, v = rand(RNG, (2, 70, 8)), rand(RNG, (2, 45, 8)), rand(RNG, (2, 45, 5))
    c = " causal" if causal else ""
    text = f"""func.func @f(%q: {ty(q.shape)}, %k: {ty(k.shape)}, %v: {ty(v.shape)}) -> {ty((2, 70, 5))} {{
      %0 = tgraph.flash_attention %q, %k, %v{c} : ({ty(q.shape)}, {ty(k.shape)}, {ty(v.shape)}) -> {ty((2, 70, 5))}
      func.return %0 : {ty((2, 70, 5))} }}"""
    (r,) = run1(text, q, k, v)
    want = _attention(f64(q), f64(k), f64(v), 1 / math.sqrt(8), causal)
    np.testing.assert_allclose(f64(r), want, rtol=1e-5, atol=1e-5)


def test_flash_attention_bf16_scale():
    q, k, v = (rand(RNG, (1, 2, 9, 16), "bf16") for _ in range(3))
    t = ty((1, 2, 9, 16), "bf16")
    text = f"""func.func @f(%q: {t}, %k: {t}, %v: {t}) -> {t} {{
      %0 = tgraph.flash_attention %q, %k, %v scale = 2.500000e-01 : ({t}, {t}, {t}) -> {t}
      func.return %0 : {t} }}"""
    (r,) = run1(text, q, k, v)
    want = _attention(f64(q), f64(k), f64(v), 0.25, False)
    np.testing.assert_allclose(f64(r), want, rtol=2e-2, atol=2e-2)


# --------------------------------------------------------------------------- errors, structure


def test_unlowered_op_names_itself():
    # an fft longer than a four-step of two one-tile transforms (2048**2 points in f64)
    text = """func.func @f(%x: tensor<1x8388608xf64>) -> tensor<1x8388608xcomplex<f64>> {
      %0 = tgraph.fft %x : (tensor<1x8388608xf64>) -> tensor<1x8388608xcomplex<f64>>
      func.return %0 : tensor<1x8388608xcomplex<f64>> }"""
    with pytest.raises(NotImplementedError, match="tgraph.fft has no Tile IR lowering"):
        lower(text)


def test_host_function_shape():
    text = f"""func.func @f(%a: {ty((5, 7))}) -> {ty((5, 7))} {{
      %0 = tgraph.exp %a : ({ty((5, 7))}) -> {ty((5, 7))}
      %1 = tgraph.neg %0 : ({ty((5, 7))}) -> {ty((5, 7))}
      func.return %1 : {ty((5, 7))} }}"""
    m = lower(text)
    kernels = [o for o in m.walk() if isinstance(o, tt.KernelOp)]
    assert [k.sym_name.data for k in kernels] == ["f_exp_0", "f_neg_0"]
    launches = [o for o in m.walk() if isinstance(o, tt.LaunchOp)]
    assert [lo.grid_value() for lo in launches] == [(1, 1, 1), (1, 1, 1)]
    assert not any(o.dialect_name() == "tgraph" for o in m.walk())


def test_lowered_ops_listed():
    assert "tgraph.matmul" in LOWERED_OPS and "tgraph.flash_attention" in LOWERED_OPS
    assert "tgraph.conv2d" in LOWERED_OPS and "tgraph.spmm" in LOWERED_OPS


@pytest.mark.parametrize("width", [8, 1000, 40000])
def test_softmax_of_rows_masked_with_the_lowest_float(width):
    """Scores masked by adding ``finfo(f32).min`` (transformers' masks): a row with every
    score masked is uniform, as in torch, not NaN (``max * log2e`` overflows to -inf in
    f32, so the kernels subtract the maximum before scaling)."""
    lo = float(np.finfo(np.float32).min)
    x = rand(RNG, (3, width), "f32")
    x[0] = lo  # every score masked
    x[1, ::2] = lo
    text = f"""func.func @f(%x: {ty((3, width))}) -> {ty((3, width))} {{
      %0 = tgraph.softmax %x axis = 1 : ({ty((3, width))}) -> {ty((3, width))}
      func.return %0 : {ty((3, width))} }}"""
    (r,) = run1(text, x)
    want = np.exp(f64(x) - f64(x).max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(f64(r), want, rtol=1e-5, atol=1e-7)
