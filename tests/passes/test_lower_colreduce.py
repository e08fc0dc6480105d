"""Reductions that keep the last axis (tile_colreduce): lanes along the kept elements,
the reduced elements in chunks whose partials a second kernel combines; run by the Tile
IR interpreter against numpy in float64."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.ir import tile as tt
from tessera.passes import tile_colreduce
from tests.passes.test_lower_graph_to_tile import NP, f64, lower, rand, run1, ty

RNG = np.random.default_rng(11)


def kernels(m):
    return [op.sym_name.data for op in m.body.block.ops if isinstance(op, tt.KernelOp)]


def grids(m):
    return [[int(v) for v in op.grid.get_values()] for op in m.walk()
            if isinstance(op, tt.LaunchOp)]


@pytest.mark.parametrize("shape,axes,keep,chunked", [
    ((6, 37, 40), [0, 1], False, True),     # a bias gradient: [tokens, features] -> [features]
    ((9, 5, 48), [0], True, True),          # a position-embedding gradient (keepdims)
    ((3, 70, 2, 33), [1], False, True),     # a middle axis
    ((4, 3, 5, 64), [0, 2], True, True),    # two axes apart
    ((2, 40), [0], False, False),           # too few rows for two chunks: one kernel
])
@pytest.mark.parametrize("kind", ["sum", "mean", "max", "min"])
def test_column_reductions(monkeypatch, shape, axes, keep, chunked, kind):
    monkeypatch.setattr(tile_colreduce, "TARGET_LANES", 1024)  # several chunks at these sizes
    monkeypatch.setattr(tile_colreduce, "MIN_CHUNK", 4)
    x = rand(RNG, shape)
    want = getattr(np, kind)(f64(x), axis=tuple(axes), keepdims=keep)
    kd = " keepdims" if keep else ""
    text = f"""func.func @f(%x: {ty(shape)}) -> {ty(want.shape)} {{
      %0 = tgraph.{kind} %x axes = {axes}{kd} : ({ty(shape)}) -> {ty(want.shape)}
      func.return %0 : {ty(want.shape)} }}"""
    m = lower(text)
    names = kernels(m)
    assert names == ([f"f_{kind}_0", f"f_{kind}_combine_0"] if chunked else [f"f_{kind}_0"])
    cols = int(np.prod(want.shape))
    assert grids(m)[0][0] == -(-cols // tile_colreduce.GROUP)
    assert (grids(m)[0][1] > 1) == chunked
    (r,) = run1(text, x)
    np.testing.assert_allclose(f64(r), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("elem,tol", [("bf16", 2e-2), ("f64", 1e-12), ("i32", 0)])
def test_column_sum_types(monkeypatch, elem, tol):
    monkeypatch.setattr(tile_colreduce, "TARGET_LANES", 128)
    monkeypatch.setattr(tile_colreduce, "MIN_CHUNK", 8)
    shape = (5, 29, 36)
    x = rand(RNG, shape, "f32", lo=-9, hi=9)
    x = np.round(x).astype(NP[elem]) if elem == "i32" else x.astype(NP[elem])
    want = f64(x).sum(axis=(0, 1))
    text = f"""func.func @f(%x: {ty(shape, elem)}) -> {ty((36,), elem)} {{
      %0 = tgraph.sum %x axes = [0, 1] : ({ty(shape, elem)}) -> {ty((36,), elem)}
      func.return %0 : {ty((36,), elem)} }}"""
    (r,) = run1(text, x)
    np.testing.assert_allclose(f64(r), want, rtol=tol, atol=tol * 10)


def test_fused_column_reduction(monkeypatch):
    """A fused body ending in a reduction over leading axes (a LayerNorm weight gradient)
    reads its operands through the same column kernels."""
    monkeypatch.setattr(tile_colreduce, "TARGET_LANES", 256)
    monkeypatch.setattr(tile_colreduce, "MIN_CHUNK", 4)
    s, o = (4, 33, 64), (64,)
    a, b = rand(RNG, s), rand(RNG, s)
    text = f"""func.func @f(%a: {ty(s)}, %b: {ty(s)}) -> {ty(o)} {{
      %0 = tgraph.fused %a, %b : ({ty(s)}, {ty(s)}) -> {ty(o)} {{
      ^bb0(%x: {ty(s)}, %y: {ty(s)}):
        %1 = tgraph.mul %x, %y : ({ty(s)}, {ty(s)}) -> {ty(s)}
        %2 = tgraph.sum %1 axes = [0, 1] : ({ty(s)}) -> {ty(o)}
        tgraph.yield %2 : {ty(o)}
      }}
      func.return %0 : {ty(o)} }}"""
    m = lower(text)
    assert len(kernels(m)) == 2
    (r,) = run1(text, a, b)
    np.testing.assert_allclose(f64(r), (f64(a) * f64(b)).sum(axis=(0, 1)), rtol=1e-5, atol=1e-5)


def test_chunks():
    assert tile_colreduce.chunks(25216, 768) == 170  # ViT-B/16 bias gradients at batch 128
    assert tile_colreduce.chunks(128, 197 * 768) == 1
    assert tile_colreduce.chunks(40, 768) == 1
    assert not tile_colreduce.applies((8, 16), [0])       # a column too few
    assert not tile_colreduce.applies((8, 64), [1])       # the last axis: row kernels
    assert tile_colreduce.applies((8, 64), [0])


def test_column_reduction_ptx_assembles():
    from tessera.passes.emit_ptx import emit_ptx
    from tessera.passes.lower_tile_to_target import LowerTileToTargetPass
    from tessera.runtime import ptxas
    from tests.passes.test_lower_graph_to_tile import context

    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found")
    m = lower(f"""func.func @f(%x: {ty((128, 197, 768), "bf16")}) -> ({ty((768,), "bf16")}, {ty((1, 197, 768), "bf16")}) {{
      %0 = tgraph.sum %x axes = [0, 1] : ({ty((128, 197, 768), "bf16")}) -> {ty((768,), "bf16")}
      %1 = tgraph.mean %x axes = [0] keepdims : ({ty((128, 197, 768), "bf16")}) -> {ty((1, 197, 768), "bf16")}
      func.return %0, %1 : {ty((768,), "bf16")}, {ty((1, 197, 768), "bf16")} }}""")
    assert grids(m) == [[3, 170, 1], [3, 1, 1], [591, 1, 1]]
    LowerTileToTargetPass().apply(context(), m)
    ptxas.check(emit_ptx(m))
