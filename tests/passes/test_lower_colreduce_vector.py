"""tile_colreduce's vector kernel: plain reductions over consecutive axes followed by kept
ones, with the kept columns a multiple of a 16-byte vector, read 16 bytes per lane through
an ``[A, R, C]`` view. Each case is lowered, run by the Tile IR interpreter and compared
with numpy float64 on random non-zero inputs; the kernels go through ptxas."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.parser import Parser

from tessera.ir import tile as tt
from tessera.passes import tile_colreduce
from tessera.passes.emit_ptx import emit_ptx, kernels
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tessera.passes.lower_tile_to_target import LowerTileToTargetPass
from tessera.runtime import ptxas
from tessera.runtime.tile_interpreter import run_host
from tests.passes.test_lower_graph_to_tile import BF16, NP, context, f64, rand

NUMPY = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}
CASES = [  # kind, shape, axes, keepdims, element type, splits expected (>1: two kernels)
    ("sum", (300, 64), [0], False, "bf16"),
    ("mean", (3, 170, 24), [1], True, "f32"),
    ("max", (2, 3, 50, 16), [1, 2], False, "f16"),
    ("min", (513, 8), [0], False, "bf16"),
    ("sum", (4, 2, 40, 1, 40), [1, 2], False, "f32"),
    ("sum", (70000, 16), [0], False, "bf16"),
]


def _ty(shape, elem):
    return "tensor<" + "".join(f"{d}x" for d in shape) + elem + ">"


def _out_shape(shape, axes, keep):
    return tuple(1 if k in axes else d for k, d in enumerate(shape)) if keep else tuple(
        d for k, d in enumerate(shape) if k not in axes)


def _lower(kind, shape, axes, keep, elem):
    out = _out_shape(shape, axes, keep)
    text = (f"func.func @f(%x: {_ty(shape, elem)}) -> {_ty(out, elem)} {{\n"
            f"  %0 = tgraph.{kind} %x axes = {list(axes)}{' keepdims' if keep else ''} : "
            f"({_ty(shape, elem)}) -> {_ty(out, elem)}\n"
            f"  func.return %0 : {_ty(out, elem)}\n}}")
    ctx = context()
    m = Parser(ctx, text).parse_module()
    LowerGraphToTile().apply(ctx, m)
    m.verify()
    return m, out


@pytest.mark.parametrize(("kind", "shape", "axes", "keep", "elem"), CASES)
def test_vector_column_reduction(kind, shape, axes, keep, elem):
    m, out = _lower(kind, shape, axes, keep, elem)
    width = 8 if elem != "f32" else 4
    loads = {str(op.results[0].type) for op in m.walk() if isinstance(op, tt.LoadVectorOp)}
    assert loads == {f"vector<{width}x{elem}>"}, loads
    rng = np.random.default_rng(len(shape) * 101 + shape[0])
    x = rand(rng, shape, elem)
    (got,) = run_host(m, "f", [x])
    ref = NUMPY[kind](f64(x), axis=tuple(axes), keepdims=keep)
    assert got.shape == out and got.dtype == np.dtype({**NP, "bf16": BF16}[elem])
    tol = {"bf16": 8e-3, "f16": 1e-3, "f32": 1e-6}[elem]
    # a sum's rounding scales with the sum of magnitudes (one rounding of the result too)
    scale = NUMPY[kind](np.abs(f64(x)), axis=tuple(axes), keepdims=keep)
    err = np.abs(f64(got) - ref)
    assert (err <= tol * np.maximum(np.abs(ref), scale if kind in ("sum", "mean") else 1.0)
            ).all(), float(err.max())


def test_splits_and_ptx():
    """Many rows: split over tiles, the splits' partials folded by a second kernel (its
    loads unrolled); both kernels assemble with ptxas."""
    a, r, c = 1, 70000, 16
    s = tile_colreduce.splits(a, r, c, 8)
    assert s > 1
    m, _ = _lower("sum", (r, c), [0], False, "bf16")
    names = [op.sym_name.data for op in m.walk() if isinstance(op, tt.KernelOp)]
    assert names == ["f_sum_part_0", "f_sum_0"], names
    ctx = context()
    LowerTileToTargetPass().apply(ctx, m)
    if ptxas.find_ptxas() is None:
        pytest.skip("no ptxas")
    for k in kernels(m):
        ptxas.check(emit_ptx(m, k.sym_name.data))


def test_not_taken():
    """Columns not a multiple of the vector, few rows, a non-column reduction: other kernels."""
    for shape, axes in (((300, 5), [0]), ((20, 64), [0]), ((4, 5, 6), [0, 2])):
        m, _ = _lower("sum", shape, axes, False, "bf16")
        assert not any(isinstance(op, tt.LoadVectorOp) for op in m.walk()), (shape, axes)


def _fused_module(rows_shape, c, elem, body_mean: bool):
    """A layer norm's weight gradient (``sum(dy * (x - mean) * rstd * w, rows)``, with
    per-row mean and rstd and a per-column w) as one ``tgraph.fused`` column reduction."""
    full = (*rows_shape, c)
    st = (*rows_shape, 1)
    t, ts_, tw = _ty(full, elem), _ty(st, "f32"), _ty((c,), elem)
    axes = list(range(len(rows_shape)))
    out = _ty((c,), "f32")
    red = "mean" if body_mean else "sum"
    text = f"""func.func @f(%dy: {t}, %x: {t}, %m: {ts_}, %r: {ts_}, %w: {tw}) -> {out} {{
  %0 = tgraph.fused %dy, %x, %m, %r, %w : ({t}, {t}, {ts_}, {ts_}, {tw}) -> {out} {{
  ^bb0(%a: {t}, %b: {t}, %mm: {ts_}, %rr: {ts_}, %ww: {tw}):
    %1 = tgraph.cast %a : ({t}) -> {_ty(full, "f32")}
    %2 = tgraph.cast %b : ({t}) -> {_ty(full, "f32")}
    %3 = tgraph.sub %2, %mm : ({_ty(full, "f32")}, {ts_}) -> {_ty(full, "f32")}
    %4 = tgraph.mul %3, %rr : ({_ty(full, "f32")}, {ts_}) -> {_ty(full, "f32")}
    %5 = tgraph.mul %1, %4 : ({_ty(full, "f32")}, {_ty(full, "f32")}) -> {_ty(full, "f32")}
    %6 = tgraph.cast %ww : ({tw}) -> {_ty((c,), "f32")}
    %7 = tgraph.mul %5, %6 : ({_ty(full, "f32")}, {_ty((c,), "f32")}) -> {_ty(full, "f32")}
    %8 = tgraph.{red} %7 axes = {axes} : ({_ty(full, "f32")}) -> {out}
    tgraph.yield %8 : {out}
  }}
  func.return %0 : {out}
}}"""
    return _lowered(text)


def _lowered(text: str):
    """The Tile IR of the Graph IR ``text``."""
    ctx = context()
    m = Parser(ctx, text).parse_module()
    LowerGraphToTile().apply(ctx, m)
    m.verify()
    return m


@pytest.mark.parametrize(("rows_shape", "c", "elem", "mean"), [
    ((300,), 64, "bf16", False),  # one split
    ((4, 25216 // 4), 768, "bf16", False),  # ViT's [B, S] rows: split, two kernels
    ((37, 11), 32, "f32", True),
])
def test_fused_column_reduction(rows_shape, c, elem, mean):
    """A fused body closed by a column reduction reads its full-shape leaves as 16-byte
    vectors, its per-row leaves once per row and its per-column leaf as vectors; the
    result matches float64."""
    m = _fused_module(rows_shape, c, elem, mean)
    width = 8 if elem != "f32" else 4
    loads = {str(op.results[0].type) for op in m.walk() if isinstance(op, tt.LoadVectorOp)}
    assert loads == {f"vector<{width}x{elem}>"}, loads
    rng = np.random.default_rng(c)
    full = (*rows_shape, c)
    dy, x = rand(rng, full, elem), rand(rng, full, elem)
    mu = rng.normal(size=(*rows_shape, 1)).astype(np.float32)
    r = (rng.random(size=(*rows_shape, 1)) + 0.5).astype(np.float32)
    w = rand(rng, (c,), elem)
    (got,) = run_host(m, "f", [dy, x, mu, r, w])
    terms = f64(dy) * (f64(x) - f64(mu)) * f64(r) * f64(w)
    axes = tuple(range(len(rows_shape)))
    ref = terms.mean(axis=axes) if mean else terms.sum(axis=axes)
    scale = np.abs(terms).mean(axis=axes) if mean else np.abs(terms).sum(axis=axes)
    assert got.shape == (c,)
    assert (np.abs(f64(got) - ref) <= 1e-5 * scale).all()


def test_fused_column_reduction_not_taken():
    """A leaf broadcast some other way (per leading row block only) keeps the scalar
    kernel: no vector loads."""
    t, tb, out = _ty((4, 50, 64), "bf16"), _ty((4, 1, 1), "bf16"), _ty((4, 64), "f32")
    text = f"""func.func @f(%x: {t}, %b: {tb}) -> {out} {{
  %0 = tgraph.fused %x, %b : ({t}, {tb}) -> {out} {{
  ^bb0(%a: {t}, %bb: {tb}):
    %1 = tgraph.mul %a, %bb : ({t}, {tb}) -> {t}
    %2 = tgraph.cast %1 : ({t}) -> {_ty((4, 50, 64), "f32")}
    %3 = tgraph.sum %2 axes = [1] : ({_ty((4, 50, 64), "f32")}) -> {out}
    tgraph.yield %3 : {out}
  }}
  func.return %0 : {out}
}}"""
    m = _lowered(text)
    assert not any(isinstance(op, tt.LoadVectorOp) for op in m.walk())
    rng = np.random.default_rng(3)
    x, b = rand(rng, (4, 50, 64), "bf16"), rand(rng, (4, 1, 1), "bf16")
    (got,) = run_host(m, "f", [x, b])
    ref = (f64(x) * f64(b)).sum(axis=1)
    assert (np.abs(f64(got) - ref) <= 1e-2 * np.abs(f64(x) * f64(b)).sum(axis=1)).all()


def test_fused_column_reduction_ptx():
    """The fused vector kernels (partials and the splits' fold) assemble with ptxas."""
    m = _fused_module((4, 25216 // 4), 768, "bf16", False)
    names = [op.sym_name.data for op in m.walk() if isinstance(op, tt.KernelOp)]
    assert names == ["f_fused_part_0", "f_fused_0"], names
    LowerTileToTargetPass().apply(context(), m)
    if ptxas.find_ptxas() is None:
        pytest.skip("no ptxas")
    for k in kernels(m):
        ptxas.check(emit_ptx(m, k.sym_name.data))
