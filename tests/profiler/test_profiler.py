"""ts.profiler on the CPU reference path: the transformer block example profiled,
its table, Chrome trace and roofline; IR costs; hooks off outside sessions; collectives."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import func

import tessera as ts
from tessera.ir import graph as g
from tessera.options import DEFAULT_GRAPH_PASSES
from tessera.profiler import costs
from tessera.profiler.roofline import Ceilings, Point, plot

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import transformer_block  # noqa: E402

S, D, H = 17, 32, transformer_block.HEADS
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _inputs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((S, D)).astype(np.float32)
    wqkv = (rng.standard_normal((D, 3 * D)) / np.sqrt(D)).astype(np.float32)
    wo = (rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32)
    return x, wqkv, wo


@pytest.fixture(scope="module")
def profiled():
    """A fresh compile of the example's block, profiled over two calls."""
    fn = ts.jit(transformer_block.block.fn)
    args = _inputs()
    with ts.profiler.session() as prof:
        out1 = fn(*args)
        out2 = fn(*args)
    ref = transformer_block.reference(*args)
    assert np.max(np.abs(out1 - ref)) < 1e-4 and np.array_equal(out1, out2)
    graph_ops = [
        op for f in fn._last.ir("graph").walk() if isinstance(f, func.FuncOp)
        for op in f.body.block.ops if op.dialect_name() == "tgraph"
    ]
    return prof, graph_ops


def test_table_lists_every_op_and_pass(profiled):
    prof, graph_ops = profiled
    text = prof.table(file=open("/dev/null", "w"))
    assert "CPU reference ops" in text and "Compile" in text
    for kind in ("rmsnorm", "matmul", "flash_attention", "matmul_epilogue", "transpose"):
        assert f"\n{kind} (" in text
    for name in DEFAULT_GRAPH_PASSES:
        assert f"pass {name} " in text
    rows = prof.rows("op")
    assert len(rows) == len(graph_ops) and all(r.calls == 2 for r in rows)
    mm = next(r for r in rows if r.name == "tgraph.matmul")
    assert mm.flops == 2 * (2 * S * 3 * D * D) and mm.total_us > 0
    assert f"{mm.flops / 1e6:.3f}" in text  # MFLOP column


def test_chrome_trace_structure(profiled, tmp_path):
    prof, graph_ops = profiled
    path = prof.export_chrome_trace(tmp_path / "trace.json")
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    for e in xs:
        assert {"name", "cat", "ts", "dur", "pid", "tid", "args"} <= set(e)
        assert e["dur"] > 0 and e["ts"] >= 0
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert all(e["tid"] in tracks for e in xs)  # every event sits on a named track
    ops = [e for e in xs if e["cat"] == "op" and e["args"]["depth"] == 0]
    assert len(ops) == 2 * len(graph_ops)
    assert sorted(e["name"] for e in ops) == sorted(2 * [op.name for op in graph_ops])
    passes = [e["name"] for e in xs if e["cat"] == "pass"]
    assert passes == list(DEFAULT_GRAPH_PASSES)
    # bytes and FLOPs in the args follow the shapes of the example
    dh = D // H
    f4 = 4
    by_name = {e["name"]: e["args"] for e in ops}
    mm = by_name["tgraph.matmul"]
    assert mm["flops"] == 2 * S * 3 * D * D
    assert mm["bytes"] == f4 * (S * D + D * 3 * D + S * 3 * D)
    att = by_name["tgraph.flash_attention"]
    pairs = S * (S + 1) // 2  # causal
    assert att["flops"] == H * (2 * pairs * dh * 2 + 5 * pairs + S * dh)
    assert att["bytes"] == f4 * 4 * (H * S * dh)
    epi = by_name["tgraph.matmul_epilogue"]
    assert epi["flops"] == 2 * S * D * D + S * D
    assert epi["bytes"] == f4 * (S * D + D * D + S * D + S * D)
    rms = by_name["tgraph.rmsnorm"]
    assert rms["flops"] == 3 * S * D + S and rms["bytes"] == f4 * 2 * S * D
    for e in ops:
        if e["name"] in ("tgraph.transpose", "tgraph.reshape", "tgraph.slice"):
            assert e["args"]["flops"] == 0
        assert e["args"]["gbytes_per_s"] == pytest.approx(e["args"]["bytes"] / e["dur"] / 1e3)


def test_roofline_png(profiled, tmp_path):
    prof, _ = profiled
    path = prof.roofline(tmp_path / "roof.png")
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5000
    c = prof.ceilings()
    assert c.device == "cpu" and c.bandwidth > 0 and c.flops["float32"] > 0
    labels = {p.label for p in prof.roofline_points()}
    assert {"matmul", "flash_attention", "matmul_epilogue", "rmsnorm"} <= labels


def test_hooks_removed_after_session():
    from tessera.dist import collectives
    from tessera.frontend import jit
    from tessera.runtime import cuda, graph_interpreter

    fn = ts.jit(lambda x: ts.exp(x) + x)
    x = np.ones((4, 4), np.float32)
    with ts.profiler.session() as outer:
        assert graph_interpreter.LISTENER_FACTORY is not None
        assert cuda.LAUNCH_HOOK is not None and collectives.COLLECTIVE_HOOK is not None
        with ts.profiler.session() as inner:
            fn(x)
        fn(x)
    assert graph_interpreter.LISTENER_FACTORY is None and cuda.LAUNCH_HOOK is None
    assert collectives.COLLECTIVE_HOOK is None and not jit.COMPILE_OBSERVERS
    assert ts.profiler.active() == []
    n_outer, n_inner = len(outer.events), len(inner.events)
    assert n_inner > 0 and n_outer > n_inner
    fn(x)
    assert len(outer.events) == n_outer  # nothing recorded once the session is over


def test_collective_latency_and_bytes():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    with ts.profiler.session() as prof:
        y = ts.dist.all_reduce(x)
    np.testing.assert_array_equal(y, x)
    (row,) = prof.rows("collective")
    assert row.name == "all_reduce" and row.calls == 1 and row.bytes == x.nbytes
    assert row.total_us > 0
    assert "Collectives" in prof.table(file=open("/dev/null", "w"))


# ------------------------------------------------------------------ IR costs


def _func(text: str):
    from tessera.dist.executor import parse

    m = parse(text)
    (f,) = [o for o in m.walk() if isinstance(o, func.FuncOp)]
    return [o for o in f.body.block.ops if o.dialect_name() == "tgraph"]


def test_costs_from_shapes():
    ops = _func("""
func.func @f(%a: tensor<2x8x4xbf16>, %b: tensor<2x5x4xbf16>, %x: tensor<6x10xf32>) -> tensor<6xf32> {
  %m = tgraph.matmul %a, %b transpose_rhs : (tensor<2x8x4xbf16>, tensor<2x5x4xbf16>) -> tensor<2x8x5xbf16>
  %s = tgraph.sum %x axes = [1] : (tensor<6x10xf32>) -> tensor<6xf32>
  %f = tgraph.fused %x : (tensor<6x10xf32>) -> tensor<6xf32> {
  ^bb0(%y: tensor<6x10xf32>):
    %e = tgraph.exp %y : (tensor<6x10xf32>) -> tensor<6x10xf32>
    %r = tgraph.max %e axes = [1] : (tensor<6x10xf32>) -> tensor<6xf32>
    tgraph.yield %r : tensor<6xf32>
  }
  %t = tgraph.add %s, %f : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  func.return %t : tensor<6xf32>
}
""")
    mm, sm, fused, add = (costs.op_cost(o) for o in ops)
    assert mm.flops == 2 * 2 * 8 * 5 * 4
    assert mm.bytes_read == 2 * (2 * 8 * 4 + 2 * 5 * 4) and mm.bytes_written == 2 * 2 * 8 * 5
    assert sm.flops == 60 - 6 and sm.bytes == 4 * (60 + 6)
    assert fused.flops == 60 + (60 - 6) and fused.bytes == 4 * (60 + 6)
    assert add.flops == 6 and add.bytes == 4 * 18
    same = _func("""
func.func @g(%x: tensor<3xf32>) -> tensor<3xf32> {
  %y = tgraph.mul %x, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return %y : tensor<3xf32>
}
""")
    assert costs.op_cost(same[0]).bytes_read == 12  # one operand read once


def test_attention_pairs_and_unknowns():
    ops = _func("""
func.func @f(%q: tensor<3x4xf32>, %k: tensor<5x4xf32>, %v: tensor<5x2xf32>) -> (tensor<3x2xf32>, tensor<3x2xf32>) {
  %a = tgraph.flash_attention %q, %k, %v : (tensor<3x4xf32>, tensor<5x4xf32>, tensor<5x2xf32>) -> tensor<3x2xf32>
  %c = tgraph.flash_attention %q, %k, %v causal : (tensor<3x4xf32>, tensor<5x4xf32>, tensor<5x2xf32>) -> tensor<3x2xf32>
  func.return %a, %c : tensor<3x2xf32>, tensor<3x2xf32>
}
""")
    dense, causal = (costs.flops(o) for o in ops)
    assert dense == 2 * 15 * 4 + 2 * 15 * 2 + 5 * 15 + 3 * 2
    pairs = 1 + 2 + 3
    assert causal == 2 * pairs * 4 + 2 * pairs * 2 + 5 * pairs + 3 * 2
    assert isinstance(ops[0], g.FlashAttentionOp)
    rand = _func("""
func.func @r() -> tensor<4xf32> {
  %x = tgraph.randn seed = 1 : tensor<4xf32>
  func.return %x : tensor<4xf32>
}
""")
    assert costs.op_cost(rand[0]).flops is None and costs.op_cost(rand[0]).bytes == 16


def test_kernel_flops_follow_kernel_names():
    from tessera.passes import ALL_PASSES
    from tessera.passes.pipelines import default_context

    text = """
func.func @f(%a: tensor<8x4xf32>, %b: tensor<4x8xf32>) -> tensor<8x8xf32> {
  %m = tgraph.matmul %a, %b : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %n = tgraph.matmul %m, %m : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %e = tgraph.exp %n : (tensor<8x8xf32>) -> tensor<8x8xf32>
  func.return %e : tensor<8x8xf32>
}
"""
    from tessera.dist.executor import parse
    from tessera.ir import tile as tt

    graph = parse(text)
    lowered = graph.clone()
    ALL_PASSES["lower-graph-to-tile"]()().apply(default_context(), lowered)
    names = [k.sym_name.data for k in lowered.walk() if isinstance(k, tt.KernelOp)]
    table = costs.kernel_flops(graph, "f", names)
    assert table["f_matmul_0"] == 2 * 8 * 8 * 4 and table["f_matmul_1"] == 2 * 8 * 8 * 8
    assert table["f_exp_0"] == 64
    assert set(table) <= set(names)
    # a kind whose kernel count differs from its op count is left unknown
    assert "f_matmul_1" not in costs.kernel_flops(graph, "f", ["f_matmul_0"])


def test_roofline_plot_from_points(tmp_path):
    c = Ceilings("test-device", bandwidth=1e10, flops={"float32": 1e11}, how="given")
    out = plot([Point("a", 10**6, 10**5, 1e-3), Point("b", 10**8, 10**5, 1e-2)], c,
               tmp_path / "r.png")
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert math.isclose(Point("a", 10, 5, 2.0).intensity, 2.0)
