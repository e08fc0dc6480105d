"""The register-resident row kernels (tessera/passes/tile_rowwise.py) and the
tensor-core flash attention (tessera/passes/tile_attention.py): results of the Tile IR
interpreter against numpy in float64 on ragged shapes, which kernel is chosen, and
ptxas on the kernels with the structure of the bench sizes (registers do not depend on
the sequence length or the number of rows)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp, bf16, f32
from xdsl.dialects.builtin import f64 as xf64
from xdsl.parser import Parser

from tessera.ir import tile as tt
from tessera.passes import tile_attention
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tessera.passes.pipelines import default_context, lower_to_target, to_ptx
from tessera.passes.tile_rowwise import plan_row
from tessera.runtime import ptxas
from tessera.runtime.tile_interpreter import run_host

NP = {"f32": np.float32, "bf16": np.dtype(ml_dtypes.bfloat16), "f16": np.float16}
TOL = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}


def ty(shape, elem) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{elem}>"


def lower(text: str) -> ModuleOp:
    ctx = default_context()
    m = Parser(ctx, text).parse_module()
    LowerGraphToTile().apply(ctx, m)
    m.verify()
    return m


def kernels(m: ModuleOp) -> list[tt.KernelOp]:
    return [k for k in m.body.block.ops if isinstance(k, tt.KernelOp)]


def f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def rel_err(got, want) -> float:
    return float(np.max(np.abs(f64(got) - want)) / np.max(np.abs(want)))


RNG = np.random.default_rng(7)


# --------------------------------------------------------------------------- rows


def test_plan_row():
    p = plan_row(8192, bf16)
    assert p is not None and (p.width, p.lanes, p.rows_per_tile, p.per_lane) == (8, 512, 1, 2)
    assert p.scope == "group"
    p = plan_row(300, bf16)
    assert p is not None and (p.width, p.lanes, p.rows_per_tile, p.scope) == (8, 32, 4, "warp")
    assert p.ragged  # 300 = 4 + 37 * 8: chunks of 8 from the first aligned element
    p = plan_row(32768, f32)
    assert p is not None and (p.lanes, p.per_lane * p.width) == (1024, 32)
    p = plan_row(32767, f32)  # ragged: 16-byte chunks, scalar edges
    assert p is not None and (p.width, p.ragged, p.lanes) == (4, True, 1024)
    p = plan_row(21, bf16)  # short ragged row: the largest width dividing n
    assert p is not None and (p.width, p.ragged) == (1, False)
    assert plan_row(32769 * 2, f32) is None  # past the registers: tile_rowstream
    assert plan_row(65536, bf16) is None
    assert plan_row(64, xf64) is None


@pytest.mark.parametrize(
    "shape,elem", [((5, 300), "bf16"), ((3, 8192), "bf16"), ((2, 3, 2050), "f16"), ((9, 37), "f32")]
)
def test_rows_match_float64(shape, elem):
    n = shape[-1]
    x = RNG.normal(0.0, 2.0, size=shape).astype(NP[elem])
    w, b = (RNG.normal(1.0, 0.5, size=(n,)).astype(NP[elem]) for _ in range(2))
    m = rows_module(shape, elem)
    plan = plan_row(n, Parser(default_context(), elem).parse_type())
    assert plan is not None
    check_rows(m, x, w, b, elem)
    for k in kernels(m):
        assert k.group_size_value() == plan.group_size
        assert any(isinstance(o, tt.LoadVectorOp) for o in k.walk())


def rows_module(shape, elem) -> ModuleOp:
    n = shape[-1]
    t, tw = ty(shape, elem), ty((n,), elem)
    return lower(f"""func.func @f(%x: {t}, %w: {tw}, %b: {tw}) -> ({t}, {t}, {t}) {{
      %0 = tgraph.softmax %x axis = -1 : ({t}) -> {t}
      %1 = tgraph.rmsnorm %x weight %w : {tw} eps = 1.000000e-06 : {t} -> {t}
      %2 = tgraph.layernorm %x weight %w : {tw} bias %b : {tw} eps = 1.000000e-05 : {t} -> {t}
      func.return %0, %1, %2 : {t}, {t}, {t} }}""")


def check_rows(m, x, w, b, elem) -> None:
    """The three row ops of :func:`rows_module` against numpy in float64."""
    sm, rms, ln = run_host(m, "f", [x, w, b])
    X, W, B = f64(x), f64(w), f64(b)
    e = np.exp(X - X.max(-1, keepdims=True))
    mu = X.mean(-1, keepdims=True)
    want_ln = (X - mu) / np.sqrt(((X - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * W + B
    assert rel_err(sm, e / e.sum(-1, keepdims=True)) < TOL[elem]
    assert rel_err(rms, X / np.sqrt((X * X).mean(-1, keepdims=True) + 1e-6) * W) < TOL[elem]
    assert rel_err(ln, want_ln) < TOL[elem]


@pytest.mark.parametrize(
    "shape,elem,kind",
    [
        ((3, 1), "bf16", "register"),
        ((5, 63), "bf16", "register"),
        ((5, 64), "f32", "register"),
        ((3, 1000), "bf16", "register"),
        ((3, 1001), "bf16", "register"),  # ragged: 16-byte chunks and scalar edges
        ((2, 3, 1001), "f32", "register"),
        ((7, 4099), "f16", "register"),  # ragged, one tile per row
        ((2, 50257), "bf16", "split"),  # streaming, rows split across tiles
        ((2, 70001), "f32", "split"),  # 1024-lane tiles (a long row)
    ],
)
def test_rows_any_width(shape, elem, kind):
    n = shape[-1]
    x = (RNG.normal(0.0, 2.0, size=shape) + 3.0).astype(NP[elem])
    w, b = (RNG.normal(1.0, 0.5, size=(n,)).astype(NP[elem]) for _ in range(2))
    m = rows_module(shape, elem)
    names = [k.sym_name.data for k in kernels(m)]
    assert any("stats" in nm for nm in names) == (kind == "split"), names
    check_rows(m, x, w, b, elem)


@pytest.mark.parametrize(
    "shape,elem",
    [((5, 1), "bf16"), ((7, 63), "bf16"), ((3, 1001), "f32"), ((2, 3, 4099), "f16"),
     ((2, 50257), "bf16"), ((70001,), "f32")],
)
def test_row_reductions_any_width(shape, elem):
    """Last-axis sum / max (keepdims) / min / mean with the row kernels (tile_rowreduce):
    registers, streaming, or split over tiles (a 1-D input is one row)."""
    t = ty(shape, elem)
    ro = ty(shape[:-1], elem) if len(shape) > 1 else f"tensor<{elem}>"
    rk = ty((*shape[:-1], 1), elem)
    m = lower(f"""func.func @f(%x: {t}) -> ({ro}, {rk}, {ro}, {ro}) {{
      %0 = tgraph.sum %x axes = [-1] : ({t}) -> {ro}
      %1 = tgraph.max %x axes = [-1] keepdims : ({t}) -> {rk}
      %2 = tgraph.min %x axes = [-1] : ({t}) -> {ro}
      %3 = tgraph.mean %x axes = [-1] : ({t}) -> {ro}
      func.return %0, %1, %2, %3 : {ro}, {rk}, {ro}, {ro} }}""")
    # one kernel per op reads the rows, with 16-byte vectors (split rows add a combiner)
    readers = [k for k in kernels(m) if any(isinstance(o, tt.LoadVectorOp) for o in k.walk())]
    assert len(readers) == 4
    x = (RNG.normal(0.0, 2.0, size=shape) + 1.0).astype(NP[elem])
    s, mx, mn, me = run_host(m, "f", [x])
    X = f64(x)
    scale = np.abs(X).sum(-1).max()
    assert np.abs(f64(s) - X.sum(-1)).max() <= TOL[elem] * scale
    assert np.array_equal(f64(mx), X.max(-1, keepdims=True))
    assert np.array_equal(f64(mn), X.min(-1))
    assert np.abs(f64(me) - X.mean(-1)).max() <= TOL[elem] * scale / shape[-1]


def test_rows_streaming_one_tile_per_row(monkeypatch):
    """Enough rows: one streaming kernel (statistics and write in one tile), looping
    over 16-byte chunks of a ragged row."""
    from tessera.passes import tile_rowstream

    monkeypatch.setattr(tile_rowstream, "TARGET_TILES", 2)
    shape = (3, 33001)
    x = (RNG.normal(0.0, 2.0, size=shape) - 5.0).astype(NP["bf16"])
    w, b = (RNG.normal(1.0, 0.5, size=(shape[-1],)).astype(NP["bf16"]) for _ in range(2))
    m = rows_module(shape, "bf16")
    ks = kernels(m)
    assert len(ks) == 3 and all(k.group_size_value() == tile_rowstream.STREAM_LANES for k in ks)
    assert all(any(isinstance(o, tt.LoadVectorOp) for o in k.walk()) for k in ks)
    check_rows(m, x, w, b, "bf16")


def test_plan_stream():
    from tessera.passes.tile_rowstream import plan_stream

    p = plan_stream(151936, 4096, bf16)
    assert p is not None and (p.width, p.ragged, p.segments) == (8, False, 1)
    assert p.seg_steps * p.step * p.width >= 151936
    p = plan_stream(262144, 1, f32)
    assert p is not None and p.segments > 1
    assert p.segments * p.seg_steps * p.step * p.width >= 262144
    p = plan_stream(50257, 2, bf16)
    assert p is not None and p.ragged and p.segments > 1
    assert plan_stream(50257, 2, xf64) is None


def test_rows_outside_the_fast_path_use_the_strided_kernel():
    t = ty((4, 6), "f32")
    m = lower(f"""func.func @f(%x: {t}) -> {t} {{
      %0 = tgraph.softmax %x axis = 0 : ({t}) -> {t}
      func.return %0 : {t} }}""")
    (k,) = kernels(m)
    assert not any(isinstance(o, tt.LoadVectorOp) for o in k.walk())
    x = RNG.normal(size=(4, 6)).astype(np.float32)
    (r,) = run_host(m, "f", [x])
    e = np.exp(f64(x) - f64(x).max(0))
    assert rel_err(r, e / e.sum(0)) < 1e-5


# --------------------------------------------------------------------------- attention


def attention(q, k, v, scale, causal):
    s = np.einsum("...qd,...kd->...qk", q, k) * scale
    if causal:
        sq, sk = s.shape[-2:]
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def _attention_text(qs, ks, elem, causal, scale=None) -> str:
    tq, tk = ty(qs, elem), ty(ks, elem)
    extra = (f" scale = {scale:e}" if scale is not None else "") + (" causal" if causal else "")
    return f"""func.func @f(%q: {tq}, %k: {tk}, %v: {tk}) -> {tq} {{
      %0 = tgraph.flash_attention %q, %k, %v{extra} : ({tq}, {tk}, {tk}) -> {tq}
      func.return %0 : {tq} }}"""


@pytest.mark.parametrize(
    "qs,sk,elem,causal,bq",
    [
        ((1, 2, 80, 64), 80, "bf16", False, None),
        ((1, 2, 80, 64), 80, "bf16", True, None),
        ((2, 70, 128), 100, "f16", True, 128),
        ((1, 130, 64), 200, "bf16", False, 128),
    ],
)
def test_attention_matches_float64(qs, sk, elem, causal, bq, monkeypatch):
    if bq is not None:
        monkeypatch.setattr(tile_attention, "choose_block_q", lambda sq: bq)
    ks = (*qs[:-2], sk, qs[-1])
    q, k, v = (RNG.normal(size=s).astype(NP[elem]) for s in (qs, ks, ks))
    m = lower(_attention_text(qs, ks, elem, causal))
    (kern,) = kernels(m)
    assert kern.group_size_value() == (bq or 64) // 16 * 32
    assert any(isinstance(o, tt.MmaOp) for o in kern.walk())
    (o,) = run_host(m, "f", [q, k, v])
    want = attention(f64(q), f64(k), f64(v), 1 / math.sqrt(qs[-1]), causal)
    assert rel_err(o, want) < TOL[elem]


def test_attention_scale_and_fallback():
    qs = (1, 40, 64)
    q, k, v = (RNG.normal(size=qs).astype(NP["bf16"]) for _ in range(3))
    m = lower(_attention_text(qs, qs, "bf16", False, scale=0.3))
    (o,) = run_host(m, "f", [q, k, v])
    assert rel_err(o, attention(f64(q), f64(k), f64(v), 0.3, False)) < 1e-2
    # head size 32 and f32 operands keep the scalar kernel
    for shape, elem in (((1, 40, 32), "bf16"), ((1, 40, 64), "f32")):
        (kern,) = kernels(lower(_attention_text(shape, shape, elem, True)))
        assert not any(isinstance(o, tt.MmaOp) for o in kern.walk())


# --------------------------------------------------------------------------- ptxas


def _ptxas_v(text: str) -> dict[str, tuple[int, int]]:
    """ptxas -v on the lowered module: kernel -> (registers, spill bytes)."""
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found")
    ptx = to_ptx(lower_to_target(lower(text)), verify=False)
    return {k: (r.registers, r.spill_bytes) for k, r in ptxas.resources(ptx).items()}


def test_ptxas_rows_bench_shape():
    t = ty((32768, 8192), "bf16")
    got = _ptxas_v(f"""func.func @f(%x: {t}) -> ({t}, {t}) {{
      %0 = tgraph.softmax %x axis = -1 : ({t}) -> {t}
      %1 = tgraph.rmsnorm %x eps = 1.000000e-06 : {t} -> {t}
      func.return %0, %1 : {t}, {t} }}""")
    assert set(got) == {"f_softmax_0", "f_rmsnorm_0"}
    assert all(spill == 0 for _, spill in got.values()), got


def test_ptxas_attention_causal():
    # head size 64 keeps the test short; the bench dry run (tests/test_bench.py) assembles
    # the head size 128 kernels
    qs = (4, 16, 2048, 64)
    got = _ptxas_v(_attention_text(qs, qs, "bf16", True))
    ((regs, spill),) = got.values()
    assert spill == 0 and regs <= 255, got
