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
