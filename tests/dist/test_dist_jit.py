"""``@ts.jit`` and ``ts.grad`` on sharded values (tessera.dist.jit, tessera.dist.segments).

One gloo spawn of 2 ranks runs every program of ``tests/gpu/dist_programs.py`` (the
same script the 2-GPU check runs under torchrun on NCCL) through ``ts.jit`` with
``dist.tensor`` arguments, each checked on every rank against a float64 reference,
plus the guide's ``distributed_loss`` gradient and determinism across two calls.
Single-process tests check how per-rank programs split at collectives, that every
segment's PTX passes ptxas, and the errors.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

import tessera as ts
from tessera import dist
from tessera.dist.executor import parse, partitioned
from tessera.dist.launch import spawn
from tessera.dist.segments import CollectiveStep, Segment, SegmentedProgram
from tessera.runtime import ptxas

PROGRAMS = os.path.join(os.path.dirname(__file__), "..", "gpu", "dist_programs.py")


def _programs_module():
    spec = importlib.util.spec_from_file_location("dist_programs", PROGRAMS)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rank(rank: int, world: int) -> dict:
    progs = _programs_module()
    out = {"programs": progs.run_programs(rank, world, "cpu")}
    # a second call of the same compiled programs: cached, and bitwise identical
    again = progs.run_programs(rank, world, "cpu")
    out["same_bits"] = {
        k: progs.digest(v["out"]) == progs.digest(again[k]["out"]) for k, v in again.items()
    }
    mesh = dist.mesh(devices=["cpu"] * world, axes=("tp",))
    other = dist.mesh(devices=["cpu"] * world, axes=("dp",))
    a = dist.tensor((4, 8), dist.ShardSpec(("col",), ("tp",)), mesh, "f32")
    b = dist.tensor((8, 4), dist.ShardSpec(("row",), ("dp",)), other, "f32")
    try:
        ts.jit(lambda x, y: ts.matmul(x, y))(a, b)
    except dist.MeshError as e:
        out["two_meshes"] = str(e)
    try:
        ts.jit(lambda x: ts.relu(x), mesh={"tp": 4})(np.ones((2, 2), np.float32))
    except dist.MeshError as e:
        out["bad_world"] = str(e)
    return out


@pytest.fixture(scope="module")
def outs() -> list[dict]:
    return spawn(_rank, 2, timeout=150)


def test_every_program_matches_its_reference_on_every_rank(outs):
    names = {"tp_gemm", "tp_row", "guide", "dist_loss_grad", "dp_step", "mm2d", "grad_2d", "pipe"}
    for r, out in enumerate(outs):
        assert set(out["programs"]) == names
        for name, res in out["programs"].items():
            assert res["err"] <= 1e-3, f"{name} rank {r}"
    # the last pipeline stage (rank 1) has the result; rank 0 has none
    assert outs[0]["programs"]["pipe"]["out"] == []
    assert outs[1]["programs"]["pipe"]["out"][0].shape == (8, 16)


def test_replicated_results_are_bitwise_equal_across_ranks_and_calls(outs):
    for name in ("tp_gemm", "tp_row", "guide", "dp_step", "mm2d"):
        a, b = (o["programs"][name]["out"] for o in outs)
        assert all(x.tobytes() == y.tobytes() for x, y in zip(a, b)), name
    for r, out in enumerate(outs):
        assert all(out["same_bits"].values()), f"rank {r}: {out['same_bits']}"


def test_sharded_gradients_are_the_ranks_blocks(outs):
    # grad of a column-sharded weight: each rank holds its own column block
    g0, g1 = (o["programs"]["grad_2d"]["out"][0] for o in outs)
    assert g0.shape == g1.shape == (64, 64)
    assert g0.tobytes() != g1.tobytes()


def test_errors_name_the_meshes(outs):
    for out in outs:
        assert "laid out over different meshes" in out["two_meshes"]
        assert "the process group has 2 ranks" in out["bad_world"]


def test_distributed_call_needs_a_process_group():
    mesh = dist.mesh(devices=["cpu"] * 2, axes=("tp",))
    w = dist.tensor((4, 8), dist.ShardSpec(("col",), ("tp",)), mesh, "f32")
    with pytest.raises(dist.MeshError, match="needs an initialized torch.distributed"):
        ts.jit(lambda x, w: ts.matmul(x, w))(np.ones((2, 4), np.float32), w)


GRAD = """
func.func @loss_grad(%x: tensor<8x16xf32>, %w: tensor<16x32xf32> {tessera.shard = #tessera.shard<[[], [tp]]>}) -> tensor<16x32xf32> attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  %y = tgraph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %t = tgraph.tanh %y : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %s = tgraph.softmax %t axis = -1 : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %g = tgraph.matmul %x, %s transpose_lhs : (tensor<8x16xf32>, tensor<8x32xf32>) -> tensor<16x32xf32>
  func.return %g : tensor<16x32xf32>
}
"""


def _program() -> SegmentedProgram:
    mesh = dist.mesh(devices=["cpu"] * 2, axes=("tp",))
    return SegmentedProgram(partitioned(parse(GRAD), "loss_grad"), "loss_grad", mesh)


def test_per_rank_program_splits_at_collectives():
    prog = _program()
    kinds = [
        s.op.name if isinstance(s, CollectiveStep) else "segment" for s in prog.steps
    ]
    # matmul+tanh on this rank's column block, then an all_gather: softmax needs whole rows
    assert kinds[0] == "segment" and "tgraph.all_gather" in kinds
    first = prog.steps[0]
    assert isinstance(first, Segment)
    assert [str(v.type) for v in first.inputs] == ["tensor<8x16xf32>", "tensor<16x16xf32>"]
    for s in prog.segments:
        text = str(s.spec.traced)
        assert "tessera.shard" not in text and "all_gather" not in text


def test_every_segment_lowers_to_ptx_that_ptxas_accepts():
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found (set TESSERA_PTXAS or install nvidia-cuda-nvcc)")
    prog = _program()
    prog.compile("cuda")
    for s in prog.segments:
        text = s.spec.ir("ptx")
        assert ".visible .entry" in text, s.name
        ptxas.check(text)
