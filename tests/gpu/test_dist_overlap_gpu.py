"""Compute/communication overlap on CUDA (tessera.dist.overlap): the collectives of a
compiled per-rank program run on a communication stream of their own, ordered by events,
while the compute that does not need them runs on the compute stream; results are
bitwise those of the ordered run. One rank (any GPU; the collective is the identity but
still goes through the streams) and two ranks over NCCL (two GPUs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tessera import dist
from tessera.dist.launch import spawn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

T = "tensor<64x64xf32>"
TEXT = f"""
func.func @ov(%x: {T}, %w: {T}, %v: {T}) -> {T} attributes {{tessera.mesh = #tessera.mesh<dp = WORLD>}} {{
  %g = tgraph.matmul %x, %w : ({T}, {T}) -> {T}
  %h = tgraph.tanh %v : ({T}) -> {T}
  %k = tgraph.matmul %h, %h : ({T}, {T}) -> {T}
  %r = tgraph.all_reduce %g op = "sum" axis = "dp" : ({T}) -> {T}
  %s = tgraph.add %r, %k : ({T}, {T}) -> {T}
  func.return %s : {T}
}}
"""


def _args(rank: int) -> list[np.ndarray]:
    rng = np.random.default_rng(100 + rank)
    return [rng.standard_normal((64, 64)).astype(np.float32) for _ in range(3)]


def _rank(rank: int, world: int) -> dict:
    from tessera.dist.executor import parse, partitioned
    from tessera.dist.segments import SegmentedProgram

    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(world)], axes=("dp",))
    mod = partitioned(parse(TEXT.replace("WORLD", str(world))), "ov")
    dev = torch.device("cuda", torch.cuda.current_device())
    args = [torch.from_numpy(a).to(dev) for a in _args(rank)]
    on = SegmentedProgram(mod, "ov", mesh, overlap=True)
    off = SegmentedProgram(mod, "ov", mesh, overlap=False)
    y_on = [on.run(args, "cuda")[0] for _ in range(3)]
    y_off = off.run(args, "cuda")[0]
    torch.cuda.synchronize()
    return {
        "streams": on.streams,
        "off_streams": off.streams,
        "equal": all(torch.equal(y, y_off) for y in y_on),
        "y": y_off.cpu().numpy(),
    }


def _check(outs: list[dict], world: int) -> None:
    xs = [a[0].astype(np.float64) @ a[1].astype(np.float64) for a in map(_args, range(world))]
    for r, out in enumerate(outs):
        assert out["streams"] == ["compute", "comm", "compute", "compute"], out["streams"]
        assert out["off_streams"] == []  # the ordered path uses no second stream
        assert out["equal"], f"rank {r}: overlapped results differ from the ordered run"
        h = np.tanh(_args(r)[2].astype(np.float64))
        np.testing.assert_allclose(out["y"], sum(xs) + h @ h, rtol=1e-4, atol=1e-3)


def test_overlap_streams_one_rank():
    _check(spawn(_rank, 1, backend="nccl", timeout=300), 1)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_overlap_streams_two_ranks_nccl():
    _check(spawn(_rank, 2, backend="nccl", timeout=300), 2)
