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
