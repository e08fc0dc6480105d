"""Data movement in lower-graph-to-tile (tile_datamove): reshape as a host view (no
kernel), vector copies for transpose / slice / concat, the shared-memory tiled
transpose, run by the Tile IR interpreter at odd shapes against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.ir import tile as tt
from tessera.passes.tile_datamove import NARROW_TRANSPOSE, collapse_permutation, reshape_groups
from tests.passes.test_lower_graph_to_tile import NP, lower, rand, run1, ty

RNG = np.random.default_rng(7)


def kernels(m):
    return [op.sym_name.data for op in m.body.block.ops if isinstance(op, tt.KernelOp)]


@pytest.mark.parametrize("src,dst", [
    ((2, 3, 4), (6, 4)), ((6, 4), (2, 3, 2, 2)), ((4, 6), (3, 8)), ((1, 6, 1), (6,)),
    ((6,), (1, 2, 3, 1, 1)), ((1, 1), ()), ((), (1, 1)), ((5, 7), (35,)),
])
def test_reshape_groups(src, dst):
    gs, gd = reshape_groups(src, dst)
    assert len(gs) == len(gd)
    if not src or not dst:  # rank 0: no groups (memref.collapse_shape's [] form)
        assert gs == gd == []
        return
    assert [d for grp in gs for d in grp] == list(range(len(src)))
    assert [d for grp in gd for d in grp] == list(range(len(dst)))
    for a, b in zip(gs, gd):
        assert np.prod([src[d] for d in a]) == np.prod([dst[d] for d in b])


def test_reshape_groups_rejects_sizes():
    with pytest.raises(ValueError):
        reshape_groups((2, 3), (7,))


@pytest.mark.parametrize("elem", ["f32", "bf16", "i32", "f64"])
def test_reshape_chain_has_no_kernel(elem):
    x = rand(RNG, (3, 5, 7), elem, lo=-9, hi=9)
    text = f"""func.func @f(%x: {ty((3, 5, 7), elem)}) -> {ty((7, 15), elem)} {{
      %0 = tgraph.add %x, %x : ({ty((3, 5, 7), elem)}, {ty((3, 5, 7), elem)}) -> {ty((3, 5, 7), elem)}
      %1 = tgraph.reshape %0 : ({ty((3, 5, 7), elem)}) -> {ty((105,), elem)}
      %2 = tgraph.reshape %1 : ({ty((105,), elem)}) -> {ty((1, 15, 7, 1), elem)}
      %3 = tgraph.reshape %2 : ({ty((1, 15, 7, 1), elem)}) -> {ty((7, 15), elem)}
      func.return %3 : {ty((7, 15), elem)} }}"""
    m = lower(text)
    assert kernels(m) == ["f_add_0"]
    (r,) = run1(text, x)
    np.testing.assert_array_equal(r, (x + x).reshape(7, 15))


def test_returned_reshape_of_argument_is_a_copy():
    x = rand(RNG, (6, 35))
    text = f"""func.func @f(%x: {ty((6, 35))}) -> ({ty((5, 42))}, {ty((210,))}, {ty((6, 35))}) {{
      %0 = tgraph.reshape %x : ({ty((6, 35))}) -> {ty((5, 42))}
      %1 = tgraph.mul %x, %x : ({ty((6, 35))}, {ty((6, 35))}) -> {ty((6, 35))}
      %2 = tgraph.reshape %1 : ({ty((6, 35))}) -> {ty((210,))}
      func.return %0, %2, %1 : {ty((5, 42))}, {ty((210,))}, {ty((6, 35))} }}"""
    m = lower(text)
    # a copy for the view of %x, one for the second view of %1's buffer
    assert sorted(kernels(m)) == ["f_copy_0", "f_copy_1", "f_mul_0"]
    a, b, c = run1(text, x)
    np.testing.assert_array_equal(a, x.reshape(5, 42))
    np.testing.assert_array_equal(b, (x * x).reshape(210))
    np.testing.assert_array_equal(c, x * x)
    assert not np.shares_memory(b, c)


def test_reshape_of_empty_and_rank0():
    text = f"""func.func @f(%x: {ty((0, 3))}, %s: {ty((1, 1))}) -> ({ty((3, 0))}, {ty(())}) {{
      %0 = tgraph.reshape %x : ({ty((0, 3))}) -> {ty((3, 0))}
      %1 = tgraph.neg %s : ({ty((1, 1))}) -> {ty((1, 1))}
      %2 = tgraph.reshape %1 : ({ty((1, 1))}) -> {ty(())}
      func.return %0, %2 : {ty((3, 0))}, {ty(())} }}"""
    a, b = run1(text, np.zeros((0, 3), np.float32), np.float32([[1.5]]))
    assert a.shape == (3, 0)
    assert b.shape == () and float(b) == -1.5


@pytest.mark.parametrize("shape,perm,elem", [
    ((3, 33, 5, 16), (0, 2, 1, 3), "bf16"),   # last dim kept: vector copy
    ((2, 7, 3, 5), (2, 0, 1, 3), "f32"),
    ((33, 65), (1, 0), "f32"),                # ragged 32x32 tiles
    ((67, 130), (1, 0), "bf16"),              # ragged 64x64 tiles
    ((2, 3, 37, 9), (0, 3, 1, 2), "f16"),
    ((5, 3, 7), (2, 1, 0), "f64"),
    ((4, 3, 70), (2, 0, 1), "i32"),
    ((3, 2, 5), (1, 2, 0), "i1"),
    ((2, 6, 7, 7), (0, 2, 3, 1), "bf16"),     # NCHW -> NHWC: [2, 6, 49] -> [2, 49, 6]
    ((2, 5, 3, 1, 3, 1), (0, 2, 4, 1, 3, 5), "f32"),  # size-1 dims dropped
    ((4, 1, 3), (1, 0, 2), "bf16"),           # only a size-1 dim moves: a copy
    ((2, 3, 4, 5), (2, 3, 0, 1), "f32"),      # two runs swap
    ((3, 5, 2, 2, 2), (0, 2, 4, 1, 3), "bf16"),  # rows of 2 both ways: no tiles
])
def test_transpose(shape, perm, elem):
    x = rand(RNG, shape, "f32", lo=-9, hi=9)
    x = (x > 0) if elem == "i1" else x.astype(NP[elem])
    out = tuple(shape[p] for p in perm)
    text = f"""func.func @f(%x: {ty(shape, elem)}) -> {ty(out, elem)} {{
      %0 = tgraph.transpose %x permutation = {list(perm)} : ({ty(shape, elem)}) -> {ty(out, elem)}
      func.return %0 : {ty(out, elem)} }}"""
    m = lower(text)
    body = str(m)
    cshape, cperm = collapse_permutation(shape, perm)
    narrow = bool(cperm) and min(cshape[-1], cshape[cperm[-1]]) < NARROW_TRANSPOSE
    if not cperm or cperm[-1] == len(cperm) - 1 or narrow:
        # a kept last dim: a vector copy; short rows either side: an element per lane
        assert "ttile.alloc_shared" not in body
    else:
        assert "ttile.alloc_shared" in body and "ttile.barrier" in body
    (r,) = run1(text, x)
    np.testing.assert_array_equal(r, np.transpose(x, perm))


@pytest.mark.parametrize("shape,perm,want", [
    ((8, 64, 7, 7), (0, 2, 3, 1), ([8, 64, 49], [0, 2, 1])),
    ((8, 64, 7, 7), (1, 0, 2, 3), ([8, 64, 49], [1, 0, 2])),
    ((4, 1024, 7, 1, 7, 1), (0, 2, 4, 1, 3, 5), ([4, 1024, 49], [0, 2, 1])),
    ((2, 3, 4), (0, 1, 2), ([24], [0])),
    ((1, 1), (1, 0), ([], [])),
    ((2, 3, 4, 5), (3, 2, 1, 0), ([2, 3, 4, 5], [3, 2, 1, 0])),
])
def test_collapse_permutation(shape, perm, want):
    assert collapse_permutation(shape, perm) == want


@pytest.mark.parametrize("shape,start,limit,stride,elem", [
    ((4, 40), (1, 8), (3, 40), (1, 1), "bf16"),   # aligned: 8-wide vectors
    ((4, 41), (1, 3), (4, 38), (2, 1), "f32"),    # unaligned start
    ((3, 5, 24), (0, 1, 4), (3, 5, 20), (1, 3, 1), "f16"),
    ((6, 9), (1, 0), (6, 9), (2, 2), "f64"),      # strided last dim
])
def test_slice(shape, start, limit, stride, elem):
    x = rand(RNG, shape, elem)
    sl = tuple(slice(a, b, c) for a, b, c in zip(start, limit, stride))
    out = x[sl].shape
    text = f"""func.func @f(%x: {ty(shape, elem)}) -> {ty(out, elem)} {{
      %0 = tgraph.slice %x start = {list(start)} limit = {list(limit)} stride = {list(stride)} : ({ty(shape, elem)}) -> {ty(out, elem)}
      func.return %0 : {ty(out, elem)} }}"""
    (r,) = run1(text, x)
    np.testing.assert_array_equal(r, x[sl])


@pytest.mark.parametrize("elem,d", [("bf16", 16), ("f32", 16), ("f16", 5)])
def test_slices_read_through_a_deferred_transpose(elem, d):
    """An attention's q, k, v out of a permuted projection (``[B, N, 3, H, D]`` ->
    ``[3, B, H, N, D]``, one slice each): the transpose keeps the last dim, all its users
    are slices, so each slice reads the projection through the permutation and the
    transposed copy is never made. Beside it, the same types with a transpose that has
    another user: it is made, and its slice (same types) gets its own kernel."""
    b, n, h = 2, 5, 4
    src, tr = (b, n, 3, h, d), (3, b, h, n, d)
    one = (1, b, h, n, d)
    x = rand(RNG, src, elem)
    y = rand(RNG, src, elem)

    def sl(v, i):
        return (f"tgraph.slice {v} start = [{i}, 0, 0, 0, 0] limit = [{i + 1}, {b}, {h}, {n}, {d}]"
                f" stride = [1, 1, 1, 1, 1] : ({ty(tr, elem)}) -> {ty(one, elem)}")

    text = f"""func.func @f(%x: {ty(src, elem)}, %y: {ty(src, elem)}) -> ({ty(one, elem)}, {ty(one, elem)}, {ty(one, elem)}, {ty(one, elem)}, {ty(tr, elem)}) {{
      %t = tgraph.transpose %x permutation = [2, 0, 3, 1, 4] : ({ty(src, elem)}) -> {ty(tr, elem)}
      %q = {sl("%t", 0)}
      %k = {sl("%t", 1)}
      %v = {sl("%t", 2)}
      %u = tgraph.transpose %y permutation = [2, 0, 3, 1, 4] : ({ty(src, elem)}) -> {ty(tr, elem)}
      %w = {sl("%u", 1)}
      func.return %q, %k, %v, %w, %u : {ty(one, elem)}, {ty(one, elem)}, {ty(one, elem)}, {ty(one, elem)}, {ty(tr, elem)} }}"""
    names = kernels(lower(text))
    assert sum("transpose" in k for k in names) == 1, names  # only %u's
    assert sum("slice_t" in k for k in names) >= 1 and any(
        "slice_" in k and "slice_t" not in k for k in names), names
    q, k, v, w, u = run1(text, x, y)
    t = np.transpose(x, (2, 0, 3, 1, 4))
    for got, i in ((q, 0), (k, 1), (v, 2)):
        np.testing.assert_array_equal(got, t[i:i + 1])
    np.testing.assert_array_equal(u, np.transpose(y, (2, 0, 3, 1, 4)))
    np.testing.assert_array_equal(w, u[1:2])


@pytest.mark.parametrize("shapes,axis,elem", [
    (((3, 16), (3, 8), (3, 24)), 1, "bf16"),      # aligned offsets on the last dim
    (((3, 5), (3, 3), (3, 7)), 1, "f32"),         # unaligned
    (((2, 3, 8), (5, 3, 8)), 0, "f16"),
    (((2, 1, 3), (2, 4, 3)), 1, "f64"),
])
def test_concat(shapes, axis, elem):
    xs = [rand(RNG, s, elem) for s in shapes]
    out = np.concatenate(xs, axis=axis)
    args = ", ".join(f"%x{i}: {ty(s, elem)}" for i, s in enumerate(shapes))
    names = ", ".join(f"%x{i}" for i in range(len(shapes)))
    tys = ", ".join(ty(s, elem) for s in shapes)
    text = f"""func.func @f({args}) -> {ty(out.shape, elem)} {{
      %0 = tgraph.concat {names} axis = {axis} : ({tys}) -> {ty(out.shape, elem)}
      func.return %0 : {ty(out.shape, elem)} }}"""
    (r,) = run1(text, *xs)
    np.testing.assert_array_equal(r, out)


_PTX_TEXT = f"""func.func @f(%x: {ty((8, 33, 3, 64), "bf16")}, %y: {ty((37, 70))}, %z: {ty((5, 41), "f16")}) -> ({ty((8, 3, 33, 64), "bf16")}, {ty((70, 37))}, {ty((5, 16), "f16")}, {ty((5, 82), "f16")}, {ty((99, 3, 64), "bf16")}) {{
  %0 = tgraph.reshape %x : ({ty((8, 33, 3, 64), "bf16")}) -> {ty((8, 33, 192), "bf16")}
  %1 = tgraph.reshape %0 : ({ty((8, 33, 192), "bf16")}) -> {ty((8, 33, 3, 64), "bf16")}
  %2 = tgraph.transpose %1 permutation = [0, 2, 1, 3] : ({ty((8, 33, 3, 64), "bf16")}) -> {ty((8, 3, 33, 64), "bf16")}
  %3 = tgraph.transpose %y permutation = [1, 0] : ({ty((37, 70))}) -> {ty((70, 37))}
  %4 = tgraph.slice %z start = [0, 8] limit = [5, 24] stride = [1, 1] : ({ty((5, 41), "f16")}) -> {ty((5, 16), "f16")}
  %5 = tgraph.concat %z, %z axis = 1 : ({ty((5, 41), "f16")}, {ty((5, 41), "f16")}) -> {ty((5, 82), "f16")}
  %6 = tgraph.slice %x start = [0, 0, 0, 0] limit = [3, 33, 3, 64] stride = [1, 1, 1, 1] : ({ty((8, 33, 3, 64), "bf16")}) -> {ty((3, 33, 3, 64), "bf16")}
  %7 = tgraph.reshape %6 : ({ty((3, 33, 3, 64), "bf16")}) -> {ty((99, 3, 64), "bf16")}
  func.return %2, %3, %4, %5, %7 : {ty((8, 3, 33, 64), "bf16")}, {ty((70, 37))}, {ty((5, 16), "f16")}, {ty((5, 82), "f16")}, {ty((99, 3, 64), "bf16")} }}"""


def _target_module():
    from tessera.passes.lower_tile_to_target import LowerTileToTargetPass
    from tests.passes.test_lower_graph_to_tile import context

    m = lower(_PTX_TEXT)
    LowerTileToTargetPass().apply(context(), m)
    return m


def test_launch_module_with_views_round_trips():
    from tessera.runtime import program_cache

    m = _target_module()
    text = program_cache.launch_module_text(m)
    assert "memref.collapse_shape" in text and "memref.expand_shape" in text
    assert str(program_cache.parse_launch_module(text)) == text


def test_data_movement_ptx_assembles():
    from tessera.passes.emit_ptx import emit_ptx
    from tessera.runtime import ptxas

    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found")
    ptx = emit_ptx(_target_module())
    assert "ld.global.v4.b32" in ptx or "ld.global.nc.v4.b32" in ptx
    assert "bar.sync" in ptx
    ptxas.check(ptx)


@pytest.mark.parametrize("elem", ["i1", "i8", "f16", "i32", "f64", "i64"])
def test_data_movement_ptx_assembles_per_type(elem):
    from tessera.passes.emit_ptx import emit_ptx
    from tessera.passes.lower_tile_to_target import LowerTileToTargetPass
    from tessera.runtime import ptxas
    from tests.passes.test_lower_graph_to_tile import context

    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found")
    a, b, c, s = (ty(sh, elem) for sh in ((5, 37, 41), (5, 41, 37), (37, 5, 41), (5, 37, 20)))
    m = lower(f"""func.func @f(%x: {a}) -> ({b}, {c}, {s}) {{
      %0 = tgraph.transpose %x permutation = [0, 2, 1] : ({a}) -> {b}
      %1 = tgraph.transpose %x permutation = [1, 0, 2] : ({a}) -> {c}
      %2 = tgraph.slice %x start = [0, 0, 4] limit = [5, 37, 24] stride = [1, 1, 1] : ({a}) -> {s}
      func.return %0, %1, %2 : {b}, {c}, {s} }}""")
    LowerTileToTargetPass().apply(context(), m)
    ptxas.check(emit_ptx(m))


@pytest.mark.parametrize("src,dst,elem", [
    ((), (3, 5, 16), "bf16"),          # a scalar: splat vectors of 8
    ((5, 1), (2, 5, 12), "f32"),       # the last dim broadcast: splat vectors of 4
    ((1, 24), (3, 4, 24), "f16"),      # rows repeated: whole vectors
    ((7,), (3, 7), "f32"),             # odd last dim: one element at a time
    ((2, 1, 3), (2, 4, 3), "f64"),
    ((1, 1), (9, 1), "i32"),
    ((3, 1), (3, 5), "i1"),
    ((1,), (1, 1), "f32"),             # all ones: a one-element copy
    ((3, 1, 1), (2, 3, 1, 4), "bf16"),
])
def test_broadcast(src, dst, elem):
    x = rand(RNG, src, "f32", lo=-9, hi=9)
    x = (x > 0) if elem == "i1" else x.astype(NP[elem])
    text = f"""func.func @f(%x: {ty(src, elem)}) -> {ty(dst, elem)} {{
      %0 = tgraph.broadcast %x : ({ty(src, elem)}) -> {ty(dst, elem)}
      func.return %0 : {ty(dst, elem)} }}"""
    m = lower(text)
    assert kernels(m) == ["f_broadcast_0"]
    if elem in ("bf16", "f32") and dst[-1] % 4 == 0 and (not src or src[-1] == 1):
        assert "vector.broadcast" in str(m)
    (r,) = run1(text, np.asarray(x))
    np.testing.assert_array_equal(r, np.broadcast_to(x, dst))


def _grids(m):
    return [[int(v) for v in op.grid.get_values()] if hasattr(op.grid, "get_values")
            else list(op.grid) for op in m.walk() if isinstance(op, tt.LaunchOp)]


@pytest.mark.parametrize("gyz", [65535, 4, 2])
def test_copies_of_large_tensors_spread_leading_dims_over_grid_y_z(monkeypatch, gyz):
    """Tensors whose vectors a 32-bit linear index cannot number (here: a lowered limit)
    put their leading dims on grid y (and z) and keep 32-bit indices; when those do not
    fit on y and z either (gyz = 2: 4 tiles for 15 rows), the index is 64-bit."""
    from tessera.passes import tile_datamove

    monkeypatch.setattr(tile_datamove, "COPY_GROUP", 32)  # 128 vectors a tile
    monkeypatch.setattr(tile_datamove, "INDEX_LIMIT", 256)
    monkeypatch.setattr(tile_datamove, "GRID_YZ", gyz)
    x = rand(RNG, (5, 3, 7, 40), "bf16")
    y = rand(RNG, (5, 3, 7, 1), "bf16")
    s = rand(RNG, (1, 7, 40), "bf16")
    a, b, c, d = (ty(sh, "bf16") for sh in ((5, 3, 7, 40), (5, 3, 7, 41), (3, 5, 7, 40),
                                           (5, 3, 7, 33)))
    text = f"""func.func @f(%x: {a}, %y: {ty((5, 3, 7, 1), "bf16")}, %s: {ty((1, 7, 40), "bf16")}) -> ({b}, {c}, {d}, {a}) {{
      %0 = tgraph.concat %x, %y axis = 3 : ({a}, {ty((5, 3, 7, 1), "bf16")}) -> {b}
      %1 = tgraph.transpose %x permutation = [1, 0, 2, 3] : ({a}) -> {c}
      %2 = tgraph.slice %0 start = [0, 0, 0, 8] limit = [5, 3, 7, 41] stride = [1, 1, 1, 1] : ({b}) -> {d}
      %3 = tgraph.broadcast %s : ({ty((1, 7, 40), "bf16")}) -> {a}
      func.return %0, %1, %2, %3 : {b}, {c}, {d}, {a} }}"""
    m = lower(text)
    # concat's %y part (105 vectors) fits in 32 bits; the others have 525 or more
    grids = _grids(m)
    split = [gr[1] * gr[2] > 1 for gr in grids]
    expect = {65535: [True, False, True, True, True],  # concat x, concat y, transpose, ...
              4: [False, False, True, False, True],    # 15 rows fit on 4 x 4 tiles
              2: [False] * 5}[gyz]
    assert split == expect, grids
    assert all(gr[1] <= gyz and gr[2] <= 4 for gr in grids), grids
    assert any(gr[2] > 1 for gr in grids) == (gyz == 4), grids
    r0, r1, r2, r3 = run1(text, x, y, s)
    np.testing.assert_array_equal(r0, np.concatenate([x, y], axis=3))
    np.testing.assert_array_equal(r1, np.transpose(x, (1, 0, 2, 3)))
    np.testing.assert_array_equal(r2, np.concatenate([x, y], axis=3)[..., 8:41])
    np.testing.assert_array_equal(r3, np.broadcast_to(s, (5, 3, 7, 40)))


def test_broadcast_and_split_grid_ptx_assembles(monkeypatch):
    from tessera.passes import tile_datamove
    from tessera.passes.emit_ptx import emit_ptx
    from tessera.passes.lower_tile_to_target import LowerTileToTargetPass
    from tessera.runtime import ptxas
    from tests.passes.test_lower_graph_to_tile import context

    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found")
    monkeypatch.setattr(tile_datamove, "INDEX_LIMIT", 2048)
    monkeypatch.setattr(tile_datamove, "GRID_YZ", 7)
    a, b, c = ty((9, 5, 64), "bf16"), ty((9, 5, 1), "bf16"), ty((9, 5, 65), "bf16")
    m = lower(f"""func.func @f(%x: {a}, %y: {b}, %s: {ty((), "bf16")}) -> ({a}, {c}, {a}) {{
      %0 = tgraph.broadcast %y : ({b}) -> {a}
      %1 = tgraph.concat %x, %y axis = 2 : ({a}, {b}) -> {c}
      %2 = tgraph.broadcast %s : ({ty((), "bf16")}) -> {a}
      func.return %0, %1, %2 : {a}, {c}, {a} }}""")
    assert any(int(op.grid.get_values()[2]) > 1 for op in m.walk()
               if isinstance(op, tt.LaunchOp))
    LowerTileToTargetPass().apply(context(), m)
    ptx = emit_ptx(m)
    assert "%ctaid.y" in ptx and "%ctaid.z" in ptx and "st.global.v4.b32" in ptx
    ptxas.check(ptx)


@pytest.mark.parametrize("src,dst,runs", [
    ((), (4, 5, 6), ([1], [120])),
    ((1, 197, 768), (8, 197, 768), ([1, 151296], [8, 151296])),
    ((5, 1), (2, 5, 12), ([1, 5, 1], [2, 5, 12])),
    ((2, 1, 1, 3), (2, 4, 1, 3), ([2, 1, 3], [2, 4, 3])),
    ((1, 1), (1, 1), ([], [])),
])
def test_broadcast_runs(src, dst, runs):
    from tessera.passes.tile_datamove import broadcast_runs

    assert broadcast_runs(src, dst) == runs


@pytest.mark.parametrize("shape,dims,elem", [
    ((5, 7), (0,), "f32"),
    ((5, 7), (1,), "f32"),                 # the last dim: one element per lane
    ((3, 4, 3, 3), (2, 3), "bf16"),        # a 3x3 weight's flip
    ((2, 3, 5, 16), (1, 2), "f16"),        # last dim kept: vectors
    ((4, 6, 7), (0, 1, 2), "f64"),
])
def test_reverse(shape, dims, elem):
    x = rand(RNG, shape, elem)
    text = f"""func.func @f(%x: {ty(shape, elem)}) -> {ty(shape, elem)} {{
      %0 = tgraph.reverse %x dims = {list(dims)} : ({ty(shape, elem)}) -> {ty(shape, elem)}
      func.return %0 : {ty(shape, elem)} }}"""
    (r,) = run1(text, x)
    np.testing.assert_array_equal(r, np.flip(x, dims))


@pytest.mark.parametrize("elem", ["bf16", "f32"])
def test_reverse_reads_through_a_deferred_transpose(elem):
    """A convolution's input-gradient weight, ``reverse(transpose(w, [1, 0, 2, 3]), [2,
    3])``: the batch-channel swap keeps the last dim and its one user is the reverse, so
    the pair is one copy (no transpose kernel)."""
    src, tr = (6, 4, 3, 5), (4, 6, 3, 5)
    w = rand(RNG, src, elem)
    text = f"""func.func @f(%w: {ty(src, elem)}) -> {ty(tr, elem)} {{
      %t = tgraph.transpose %w permutation = [1, 0, 2, 3] : ({ty(src, elem)}) -> {ty(tr, elem)}
      %r = tgraph.reverse %t dims = [2, 3] : ({ty(tr, elem)}) -> {ty(tr, elem)}
      func.return %r : {ty(tr, elem)} }}"""
    names = kernels(lower(text))
    assert len(names) == 1 and "reverse_t" in names[0], names
    (r,) = run1(text, w)
    np.testing.assert_array_equal(r, np.flip(np.transpose(w, (1, 0, 2, 3)), (2, 3)))


def test_reverse_ptx_assembles():
    from tessera.passes.emit_ptx import emit_ptx
    from tessera.passes.lower_tile_to_target import LowerTileToTargetPass
    from tessera.runtime import ptxas
    from tests.passes.test_lower_graph_to_tile import context

    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found")
    a, b = ty((6, 4, 3, 3), "bf16"), ty((4, 6, 3, 3), "bf16")
    c = ty((3, 5, 40), "f32")
    m = lower(f"""func.func @f(%w: {a}, %x: {c}) -> ({b}, {c}) {{
      %t = tgraph.transpose %w permutation = [1, 0, 2, 3] : ({a}) -> {b}
      %r = tgraph.reverse %t dims = [2, 3] : ({b}) -> {b}
      %y = tgraph.reverse %x dims = [0, 1] : ({c}) -> {c}
      func.return %r, %y : {b}, {c} }}""")
    LowerTileToTargetPass().apply(context(), m)
    ptx = emit_ptx(m)
    assert "v4" in ptx  # the second copy keeps its last dim: vectors
    ptxas.check(ptx)


@pytest.mark.parametrize("elem", ["bf16", "f32"])
def test_slice_reads_through_an_interleaving_transpose(elem):
    """A convolution input gradient's stride phases, ``[N, G, Ph, Pw, C, rows, cols] ->
    [N, G, C, rows, Ph, cols, Pw]`` (the source's last dim next to last), cropped by a
    slice: one copy that reads the phases through the permutation (no transpose)."""
    src, tr, out = (2, 1, 2, 2, 3, 5, 6), (2, 1, 3, 5, 2, 6, 2), (2, 1, 3, 4, 2, 5, 2)
    y = rand(RNG, src, elem)
    text = f"""func.func @f(%y: {ty(src, elem)}) -> {ty(out, elem)} {{
      %t = tgraph.transpose %y permutation = [0, 1, 4, 5, 2, 6, 3] : ({ty(src, elem)}) -> {ty(tr, elem)}
      %s = tgraph.slice %t start = [0, 0, 0, 1, 0, 1, 0] limit = [2, 1, 3, 5, 2, 6, 2] stride = [1, 1, 1, 1, 1, 1, 1] : ({ty(tr, elem)}) -> {ty(out, elem)}
      func.return %s : {ty(out, elem)} }}"""
    names = kernels(lower(text))
    assert len(names) == 1 and "slice_i" in names[0], names
    (r,) = run1(text, y)
    np.testing.assert_array_equal(r, np.transpose(y, (0, 1, 4, 5, 2, 6, 3))[:, :, :, 1:, :, 1:])


def test_slice_of_a_matrix_transpose_is_not_read_through():
    """A transpose whose last dim is long and comes from another source dim (a matrix
    transpose): an element-wise read through it would stride across rows, so it is made
    (tiled) and the slice copies it."""
    x = rand(RNG, (40, 24))
    text = f"""func.func @f(%x: {ty((40, 24))}) -> {ty((20, 40))} {{
      %t = tgraph.transpose %x permutation = [1, 0] : ({ty((40, 24))}) -> {ty((24, 40))}
      %s = tgraph.slice %t start = [2, 0] limit = [22, 40] stride = [1, 1] : ({ty((24, 40))}) -> {ty((20, 40))}
      func.return %s : {ty((20, 40))} }}"""
    names = kernels(lower(text))
    assert any("transpose" in k for k in names) and not any("slice_i" in k for k in names)
    (r,) = run1(text, x)
    np.testing.assert_array_equal(r, x.T[2:22])
