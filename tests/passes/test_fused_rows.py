"""``tile_fused_rows``: a fused body closed by a reduction over its trailing dims (batch
norm's per-plane statistics) as row kernels. Each case is lowered, run on the Tile IR
interpreter and checked against float64 on fresh random inputs; cases outside the
module's conditions must keep the generic kernel."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.parser import Parser

from tessera.ir import tile as tile_ir
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tessera.passes.pipelines import default_context
from tessera.runtime.tile_interpreter import run_host

NP = {"bf16": np.dtype(ml_dtypes.bfloat16), "f16": np.float16, "f32": np.float32,
      "f64": np.float64}
RNG = np.random.default_rng(21)


def ty(shape, elem: str) -> str:
    return f"tensor<{'x'.join(map(str, shape)) + 'x' if shape else ''}{elem}>"


def build(shape, elem, stat_shape, kind, axes, keep, second: str | None):
    """``kind(((cast(x) - m) * (cast(x) - m or y)), axes)``: ``x`` of ``shape``/``elem``,
    ``m`` per-row f32 of ``stat_shape``, ``y`` a second full leaf of type ``second``."""
    t, tf = ty(shape, elem), ty(shape, "f32")
    tm = ty(stat_shape, "f32")
    out_shape = [1 if k in axes else d for k, d in enumerate(shape)] if keep else [
        d for k, d in enumerate(shape) if k not in axes]
    to = ty(out_shape, "f32")
    args = [f"%x: {t}", f"%m: {tm}"]
    ins, types = ["%x", "%m"], [t, tm]
    if second:
        ty2 = ty(shape, second)
        args.append(f"%y: {ty2}")
        ins.append("%y")
        types.append(ty2)
    bb = ", ".join(f"%a{i}: {tt_}" for i, tt_ in enumerate(types))
    other = "%d"
    extra = ""
    if second:
        cast = (f"%y2 = tgraph.cast %a2 : ({types[2]}) -> {tf}" if second != "f32"
                else "")
        extra = cast
        other = "%y2" if second != "f32" else "%a2"
    red = {"sum": "sum", "max": "max", "min": "min", "mean": "mean"}[kind]
    kd = " keepdims" if keep else ""
    src = f"""func.func @f({', '.join(args)}) -> {to} {{
  %r = tgraph.fused {', '.join(ins)} : ({', '.join(types)}) -> {to} {{
  ^bb0({bb}):
    %c = {'tgraph.cast %a0 : (' + t + ') -> ' + tf if elem != 'f32' else 'tgraph.add %a0, %a0 : (' + t + ', ' + t + ') -> ' + tf}
    %d = tgraph.sub %c, %a1 : ({tf}, {tm}) -> {tf}
    {extra}
    %e = tgraph.mul %d, {other} : ({tf}, {tf}) -> {tf}
    %s = tgraph.{red} %e axes = {list(axes)}{kd} : ({tf}) -> {to}
    tgraph.yield %s : {to}
  }}
  func.return %r : {to}
}}"""
    return src, out_shape


def reference(x, m, y, elem, kind, axes, keep):
    c = x.astype(np.float64) * (1.0 if elem != "f32" else 2.0)
    d = c - m.astype(np.float64)
    e = d * (y.astype(np.float64) if y is not None else d)
    f = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}[kind]
    return f(e, axis=tuple(axes), keepdims=keep)


CASES = [
    # shape, elem, per-row stat shape, axes
    ((3, 5, 7, 7), "bf16", (1, 5, 1, 1), [2, 3]),  # ResNet's last stage: rows of 49
    ((2, 6, 14, 14), "bf16", (2, 6, 1, 1), [2, 3]),
    ((2, 3, 56, 56), "f16", (3, 1, 1), [2, 3]),  # 3136: a tile per row
    ((4, 1001), "bf16", (4, 1), [1]),  # ragged rows: vectors and scalar edges
    ((5, 3), "f32", (1,), [1]),
    ((2, 3, 4, 5), "f32", (2, 3, 4, 1), [3]),
    ((2, 3, 4, 5), "bf16", (), [1, 2, 3]),  # one row per sample
    ((6, 9), "bf16", (6, 1), [1]),
]


@pytest.mark.parametrize("shape, elem, stat, axes", CASES)
@pytest.mark.parametrize("kind", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("second", [None, "f32", "bf16"])
def test_matches_float64(shape, elem, stat, axes, kind, keep, second):
    src, out_shape = build(shape, elem, stat, kind, axes, keep, second)
    ctx = default_context()
    m = Parser(ctx, src).parse_module()
    LowerGraphToTile().apply(ctx, m)
    m.verify()
    names = [o.sym_name.data for o in m.body.block.ops if isinstance(o, tile_ir.KernelOp)]
    assert names == ["f_fused_rows_0"], names
    x = (RNG.normal(size=shape) * 2 + 0.5).astype(NP[elem])
    mm = RNG.normal(size=stat).astype(np.float32)
    y = RNG.normal(size=shape).astype(NP[second]) if second else None
    (got,) = run_host(m, "f", [x, mm, *([y] if y is not None else [])])
    want = reference(x, mm, y, elem, kind, axes, keep)
    assert got.shape == tuple(out_shape) and got.dtype == np.float32
    scale = np.abs(want).max() + 1.0
    assert np.abs(got.astype(np.float64) - want).max() <= 2e-6 * scale * (
        np.prod([shape[a] for a in axes]) ** 0.5)


def test_not_taken_for_other_shapes():
    """A reduction over leading dims, a leaf broadcast along the reduced dims' middle and
    a split reduction (one row of many elements) keep their own kernels."""
    ctx = default_context()
    leading, _ = build((4, 6, 8), "bf16", (1, 6, 8), "sum", [0], True, None)
    split, _ = build((1, 1 << 20), "bf16", (1, 1), "sum", [1], True, None)
    for src in (leading, split):
        m = Parser(ctx, src).parse_module()
        LowerGraphToTile().apply(ctx, m)
        names = [o.sym_name.data for o in m.body.block.ops if isinstance(o, tile_ir.KernelOp)]
        assert not any("fused_rows" in n for n in names), names


def build_many(shape, elem, stat_shape, axes, kinds, keep):
    """``tgraph.fused_reductions`` of ``x`` (``shape``/``elem``) and a per-row f32 ``m``:
    reduction ``i`` of kind ``kinds[i]`` reduces ``(cast(x) - m) ** (i + 1)`` over the
    trailing dims."""
    t, tf, tm = ty(shape, elem), ty(shape, "f32"), ty(stat_shape, "f32")
    out_shape = [1 if k in axes else d for k, d in enumerate(shape)] if keep else [
        d for k, d in enumerate(shape) if k not in axes]
    to = ty(out_shape, "f32")
    kd = " keepdims" if keep else ""
    lines = [f"%c = tgraph.cast %a0 : ({t}) -> {tf}" if elem != "f32"
             else f"%c = tgraph.add %a0, %a0 : ({t}, {t}) -> {tf}",
             f"%p1 = tgraph.sub %c, %a1 : ({tf}, {tm}) -> {tf}"]
    for i in range(2, len(kinds) + 1):
        lines.append(f"%p{i} = tgraph.mul %p{i - 1}, %p1 : ({tf}, {tf}) -> {tf}")
    for i, kind in enumerate(kinds):
        lines.append(f"%r{i} = tgraph.{kind} %p{i + 1} axes = {axes}{kd} : ({tf}) -> {to}")
    rs = ", ".join(f"%r{i}" for i in range(len(kinds)))
    tys = ", ".join([to] * len(kinds))
    body = "\n    ".join(lines)
    src = f"""func.func @f(%x: {t}, %m: {tm}) -> ({tys}) {{
  {rs} = tgraph.fused_reductions %x, %m : ({t}, {tm}) -> ({tys}) {{
  ^bb0(%a0: {t}, %a1: {tm}):
    {body}
    tgraph.yield {rs} : {tys}
  }}
  func.return {rs} : {tys}
}}"""
    return src, out_shape


MANY = [
    ((3, 5, 7, 7), "bf16", (1, 5, 1, 1), [2, 3], ["sum", "sum"]),
    ((2, 3, 37, 37), "f16", (2, 3, 1, 1), [2, 3], ["sum", "max", "mean"]),
    ((4, 1001), "f32", (4, 1), [1], ["min", "sum"]),
    ((2, 6, 56, 56), "bf16", (1, 6, 1, 1), [2, 3], ["sum", "sum"]),
    ((2, 3, 4, 5), "bf16", (), [1, 2, 3], ["max", "sum"]),
]


@pytest.mark.parametrize("shape, elem, stat, axes, kinds", MANY)
@pytest.mark.parametrize("keep", [True, False])
def test_fused_reductions_match_float64(shape, elem, stat, axes, kinds, keep):
    """Several reductions of one body: one row kernel, each result against float64, and
    the Graph IR interpreter agrees."""
    from tessera.runtime.graph_interpreter import run_function

    src, out_shape = build_many(shape, elem, stat, axes, kinds, keep)
    ctx = default_context()
    m = Parser(ctx, src).parse_module()
    m.verify()
    x = (RNG.normal(size=shape) * 2 + 0.5).astype(NP[elem])
    mm = RNG.normal(size=stat).astype(np.float32)
    c = x.astype(np.float64) * (1.0 if elem != "f32" else 2.0)
    d = c - mm.astype(np.float64)
    fns = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}
    want = [fns[k](d ** (i + 1), axis=tuple(axes), keepdims=keep) for i, k in enumerate(kinds)]
    interp = run_function(m, "f", [x, mm])
    LowerGraphToTile().apply(ctx, m)
    m.verify()
    names = [o.sym_name.data for o in m.body.block.ops if isinstance(o, tile_ir.KernelOp)]
    assert names == ["f_fused_rows_0"], names
    got = run_host(m, "f", [x, mm])
    n = np.prod([shape[a] for a in axes])
    for g_, i_, w in zip(got, interp, want):
        assert g_.shape == tuple(out_shape) and g_.dtype == np.float32
        scale = np.abs(w).max() + 1.0
        assert np.abs(g_.astype(np.float64) - w).max() <= 2e-6 * scale * n ** 0.5
        assert np.abs(np.asarray(i_, np.float64) - w).max() <= 2e-6 * scale * n ** 0.5


def test_fused_reductions_outside_the_row_kernels_is_a_located_error():
    """Reductions over a leading dim are not lowered as rows: the error names the op."""
    src = """func.func @f(%x: tensor<4x6xf32>) -> (tensor<6xf32>, tensor<6xf32>) {
  %s, %t = tgraph.fused_reductions %x : (tensor<4x6xf32>) -> (tensor<6xf32>, tensor<6xf32>) {
  ^bb0(%a: tensor<4x6xf32>):
    %1 = tgraph.sum %a axes = [0] : (tensor<4x6xf32>) -> tensor<6xf32>
    %2 = tgraph.max %a axes = [0] : (tensor<4x6xf32>) -> tensor<6xf32>
    tgraph.yield %1, %2 : tensor<6xf32>, tensor<6xf32>
  }
  func.return %s, %t : tensor<6xf32>, tensor<6xf32>
}"""
    ctx = default_context()
    m = Parser(ctx, src).parse_module()
    with pytest.raises(NotImplementedError, match="tgraph.fused_reductions has no Tile IR"):
        LowerGraphToTile().apply(ctx, m)


MOMENTS = [
    ((3, 5, 7, 7), "bf16", 2),
    ((2, 3, 37, 37), "f16", 2),
    ((4, 1001), "f32", 1),
    ((2, 2, 56, 56), "bf16", 2),
    ((3, 4, 5), "f32", 3),
    ((5, 2, 1, 9), "bf16", 2),
]


def _check_row_moments(shape: tuple[int, ...], elem: str, dims: int, offset: float) -> None:
    """``tgraph.row_moments`` lowered (on the Tile IR interpreter) and on the Graph IR
    interpreter: each row's mean and sum of squared deviations against float64."""
    from tessera.runtime.graph_interpreter import run_function

    kept = shape[: len(shape) - dims]
    to = ty(kept, "f32")
    src = f"""func.func @f(%x: {ty(shape, elem)}) -> ({to}, {to}) {{
  %m, %q = tgraph.row_moments %x dims = {dims} : {ty(shape, elem)} -> ({to}, {to})
  func.return %m, %q : {to}, {to}
}}"""
    ctx = default_context()
    m = Parser(ctx, src).parse_module()
    m.verify()
    x = (RNG.normal(size=shape) * 3 + offset).astype(NP[elem])
    rows = x.astype(np.float64).reshape(*kept, -1)
    mean = rows.mean(axis=-1)
    m2 = ((rows - mean[..., None]) ** 2).sum(axis=-1)
    interp = run_function(m, "f", [x])
    LowerGraphToTile().apply(ctx, m)
    m.verify()
    got = run_host(m, "f", [x])
    n = rows.shape[-1]
    for res in (got, interp):
        gm, gq = (np.asarray(r, np.float64) for r in res)
        assert gm.shape == tuple(kept) and gq.shape == tuple(kept)
        assert np.abs(gm - mean).max() <= 4e-7 * (abs(offset) + 10) * n ** 0.5
        assert np.abs(gq - m2).max() <= 1e-5 * (m2.max() + 1)


@pytest.mark.parametrize("shape, elem, dims", MOMENTS)
@pytest.mark.parametrize("offset", [0.0, 1000.0])
def test_row_moments_match_float64(shape, elem, dims, offset):
    """``tgraph.row_moments`` as one row kernel and on the Graph IR interpreter: each row's
    mean and sum of squared deviations against float64, also for data far from 0 (the
    deviations are taken from the row's own mean)."""
    _check_row_moments(shape, elem, dims, offset)


def test_row_moments_long_rows_take_the_strided_kernel():
    """Rows past the register kernel (65537 elements; 2^16 and up are too long for it)
    take the strided two-pass kernel: the same results against float64."""
    _check_row_moments((2, 65537), "bf16", 1, 40.0)
