"""``dedupe-kernels``: equal kernels merged, launches renamed, results unchanged on the
Tile IR interpreter; kernels that differ in any op, attribute or type are kept apart."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from xdsl.parser import Parser

from tessera.ir import tile as tt
from tessera.ir.context import default_context
from tessera.passes import lower_graph_to_tile
from tessera.passes.dedupe_kernels import dedupe_kernels
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tessera.runtime.graph_interpreter import run_function
from tessera.runtime.tile_interpreter import run_host

T = "tensor<8x16xf32>"
W = "tensor<16x16xf32>"
LAYERS = "\n".join(
    f"  %m{i} = tgraph.matmul %h{i}, %w{i} : ({T}, {W}) -> {T}\n"
    f"  %h{i + 1} = tgraph.tanh %m{i} : ({T}) -> {T}"
    for i in range(3)
)
MLP = (
    f"func.func @mlp(%h0: {T}, %w0: {W}, %w1: {W}, %w2: {W}, %b: tensor<8x16xbf16>) "
    f"-> ({T}, tensor<8x16xbf16>) {{\n{LAYERS}\n"
    f"  %c = tgraph.tanh %b : (tensor<8x16xbf16>) -> tensor<8x16xbf16>\n"
    f"  func.return %h3, %c : {T}, tensor<8x16xbf16>\n}}"
)


def _kernels(m) -> list[str]:
    return [op.sym_name.data for op in m.body.block.ops if isinstance(op, tt.KernelOp)]


def _launched(m) -> list[str]:
    return [op.callee.root_reference.data for op in m.walk() if isinstance(op, tt.LaunchOp)]


def test_three_equal_layers_launch_one_kernel_each_and_compute_the_same(monkeypatch) -> None:
    # without the lowering's own kernel memo, each layer lowers to kernels of its own
    monkeypatch.setattr(lower_graph_to_tile, "KERNEL_MEMO", False)
    ctx = default_context()
    m = Parser(ctx, MLP).parse_module()
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((8, 16)).astype(np.float32)] + [
        rng.standard_normal((16, 16)).astype(np.float32) for _ in range(3)
    ] + [rng.standard_normal((8, 16)).astype(ml_dtypes.bfloat16)]
    want = run_function(m, "mlp", args)
    LowerGraphToTile().apply(ctx, m)
    before = _kernels(m)
    undeduped = run_host(m, "mlp", args)
    removed = dedupe_kernels(m)
    m.verify()
    after = _kernels(m)
    # 3 matmuls and 3 f32 tanh kernels become one of each; the bf16 tanh stays its own
    assert len(before) == 7 and len(after) == 3, (before, after)
    assert set(removed.values()) <= set(after) and not set(removed) & set(after)
    assert set(_launched(m)) == set(after) and len(_launched(m)) == 7
    got = run_host(m, "mlp", args)
    for g, u, w, tol in zip(got, undeduped, want, (1e-5, 1e-2)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(u))  # bit for bit
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                   rtol=tol, atol=tol)
    # idempotent
    assert dedupe_kernels(m) == {}
