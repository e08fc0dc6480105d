"""``lower-graph-to-tile``'s kernel memo: an op equal to one lowered before (the next
layer of a model) launches the earlier op's kernels instead of building its own. With
``CHECK_KERNEL_MEMO`` every kernel is built anyway and compared with the one reused."""

from __future__ import annotations

import numpy as np
from xdsl.parser import Parser

from tessera.ir import tile as tt
from tessera.ir.context import default_context
from tessera.passes import lower_graph_to_tile
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tessera.runtime.graph_interpreter import run_function
from tessera.runtime.tile_interpreter import run_host

T = "tensor<8x16xf32>"
W = "tensor<16x16xf32>"


def _program(layers: int) -> str:
    body = "\n".join(
        f"  %m{i} = tgraph.matmul %h{i}, %w{i} : ({T}, {W}) -> {T}\n"
        f"  %s{i} = tgraph.softmax %m{i} axis = -1 : ({T}) -> {T}\n"
        f"  %h{i + 1} = tgraph.add %s{i}, %h{i} : ({T}, {T}) -> {T}"
        for i in range(layers)
    )
    ws = ", ".join(f"%w{i}: {W}" for i in range(layers))
    return (f"func.func @net(%h0: {T}, {ws}) -> {T} {{\n{body}\n"
            f"  func.return %h{layers} : {T}\n}}")


def _lower(layers: int):
    ctx = default_context()
    m = Parser(ctx, _program(layers)).parse_module()
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((8, 16)).astype(np.float32)] + [
        rng.standard_normal((16, 16)).astype(np.float32) for _ in range(layers)
    ]
    want = run_function(m, "net", args)
    LowerGraphToTile().apply(ctx, m)
    m.verify()
    kernels = [op for op in m.body.block.ops if isinstance(op, tt.KernelOp)]
    launches = [op for op in m.walk() if isinstance(op, tt.LaunchOp)]
    return m, args, want, kernels, launches


def test_equal_layers_launch_the_first_layers_kernels(monkeypatch) -> None:
    monkeypatch.setattr(lower_graph_to_tile, "CHECK_KERNEL_MEMO", True)
    # the first layer reads a function argument, the others the previous layer's result
    _, _, _, two, two_launches = _lower(2)
    m, args, want, four, launches = _lower(4)
    assert len(four) == len(two)  # layers 3 and 4 add launches, not kernels
    assert len(launches) == 2 * len(two_launches)
    got = run_host(m, "net", args)
    np.testing.assert_allclose(np.asarray(got[0], np.float64), np.asarray(want[0], np.float64),
                               rtol=1e-5, atol=1e-5)


def test_without_the_memo_every_layer_has_its_kernels(monkeypatch) -> None:
    monkeypatch.setattr(lower_graph_to_tile, "KERNEL_MEMO", False)
    _, _, _, one, _ = _lower(1)
    _, _, _, four, _ = _lower(4)
    assert len(four) == 4 * len(one)
