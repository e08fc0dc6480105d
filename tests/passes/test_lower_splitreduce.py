"""Reductions to few outputs over many elements (tile_splitreduce): each output's
elements in chunks on several tiles, the partials combined in order by a second kernel;
run by the Tile IR interpreter against numpy in float64."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.ir import tile as tt
from tessera.passes import tile_splitreduce
from tests.passes.test_lower_graph_to_tile import NP, f64, lower, rand, run1, ty

RNG = np.random.default_rng(5)


def kernels(m):
    return [op.sym_name.data for op in m.body.block.ops if isinstance(op, tt.KernelOp)]


def grids(m):
    return [[int(v) for v in op.grid.get_values()] for op in m.walk()
            if isinstance(op, tt.LaunchOp)]


@pytest.fixture
def small(monkeypatch):
    """Split at interpreter sizes: tiles of 32 lanes, 64 elements an output at least."""
    monkeypatch.setattr(tile_splitreduce, "GROUP", 32)
    monkeypatch.setattr(tile_splitreduce, "MIN_ELEMENTS", 64)
    monkeypatch.setattr(tile_splitreduce, "MIN_ITERS", 2)
    monkeypatch.setattr(tile_splitreduce, "TARGET_TILES", 12)


@pytest.mark.parametrize("shape,axes,keep,chunks", [
    ((6, 7, 5, 11), [0, 1, 2, 3], False, 12),   # a loss: the mean of everything
    ((3, 40, 50), [1, 2], True, 4),              # a few long rows
    ((97, 2, 3), [0, 2], False, 5),              # the last axis and another
    ((2, 65), [0, 1], False, 3),                 # not a multiple of the chunk
])
@pytest.mark.parametrize("kind", ["sum", "mean", "max", "min"])
def test_split_reductions(small, shape, axes, keep, chunks, kind):
    x = rand(RNG, shape)
    want = getattr(np, kind)(f64(x), axis=tuple(axes), keepdims=keep)
    kd = " keepdims" if keep else ""
    text = f"""func.func @f(%x: {ty(shape)}) -> {ty(want.shape)} {{
      %0 = tgraph.{kind} %x axes = {axes}{kd} : ({ty(shape)}) -> {ty(want.shape)}
      func.return %0 : {ty(want.shape)} }}"""
    m = lower(text)
    assert kernels(m) == [f"f_{kind}_0", f"f_{kind}_combine_0"]
    outputs = int(np.prod(want.shape))
    assert grids(m)[0] == [outputs, chunks, 1]
    (r,) = run1(text, x)
    np.testing.assert_allclose(f64(r), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("elem,tol", [("bf16", 2e-2), ("f64", 1e-12), ("i32", 0)])
def test_split_sum_types(small, elem, tol):
    shape = (4, 9, 17)
    x = rand(RNG, shape, "f32", lo=-9, hi=9)
    x = np.round(x).astype(NP[elem]) if elem == "i32" else x.astype(NP[elem])
    want = f64(x).sum()
    text = f"""func.func @f(%x: {ty(shape, elem)}) -> {ty((), elem)} {{
      %0 = tgraph.sum %x axes = [0, 1, 2] : ({ty(shape, elem)}) -> {ty((), elem)}
      func.return %0 : {ty((), elem)} }}"""
    (r,) = run1(text, x)
    np.testing.assert_allclose(f64(r), want, rtol=tol, atol=tol * 10)


def test_fused_split_reduction(small):
    """``x.pow(2).mean()`` fused: the loss of a training step over a large output."""
    s = (5, 8, 9)
    x = rand(RNG, s)
    text = f"""func.func @f(%a: {ty(s)}) -> {ty(())} {{
      %0 = tgraph.fused %a : ({ty(s)}) -> {ty(())} {{
      ^bb0(%x: {ty(s)}):
        %1 = tgraph.mul %x, %x : ({ty(s)}, {ty(s)}) -> {ty(s)}
        %2 = tgraph.mean %1 axes = [0, 1, 2] : ({ty(s)}) -> {ty(())}
        tgraph.yield %2 : {ty(())}
      }}
      func.return %0 : {ty(())} }}"""
    m = lower(text)
    assert len(kernels(m)) == 2
    (r,) = run1(text, x)
    np.testing.assert_allclose(f64(r), (f64(x) ** 2).mean(), rtol=1e-5)


def test_chunks_and_applies():
    assert tile_splitreduce.chunks(1, 128 * 768 * 196) == tile_splitreduce.TARGET_TILES
    assert tile_splitreduce.chunks(8, 5000) == 3
    assert tile_splitreduce.applies((128, 768, 14, 14), [0, 1, 2, 3])
    assert not tile_splitreduce.applies((300, 5000), [1])     # enough outputs
    assert not tile_splitreduce.applies((8, 100), [1])        # short rows


def test_split_reduction_ptx_assembles():
    from tessera.passes.emit_ptx import emit_ptx
    from tessera.passes.lower_tile_to_target import LowerTileToTargetPass
    from tessera.runtime import ptxas
    from tests.passes.test_lower_graph_to_tile import context

    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found")
    s = (128, 768, 14, 14)
    m = lower(f"""func.func @f(%x: {ty(s, "bf16")}) -> {ty((), "f32")} {{
      %0 = tgraph.cast %x : ({ty(s, "bf16")}) -> {ty(s, "f32")}
      %1 = tgraph.mean %0 axes = [0, 1, 2, 3] : ({ty(s, "f32")}) -> {ty((), "f32")}
      func.return %1 : {ty((), "f32")} }}""")
    assert grids(m)[-2:] == [[1, 1056, 1], [1, 1, 1]]
    LowerTileToTargetPass().apply(context(), m)
    ptxas.check(emit_ptx(m))
