"""Distributed execution on CUDA GPUs with NCCL (needs at least 2 GPUs; skipped otherwise)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tessera import dist
from tessera.dist.launch import spawn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.device_count() < 2,
        reason="needs at least 2 CUDA GPUs",
    ),
]


def _nccl_rank(rank: int, world: int) -> dict:
    from tessera.dist.executor import parse, run_spmd

    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(world)], axes=("tp",))
    assert mesh.backend == "nccl"
    out: dict = {}
    g = torch.Generator(device="cuda").manual_seed(7 + rank)
    x = torch.randn(1 << 20, device="cuda", generator=g)
    runs = [dist.all_reduce(x, "sum", "tp", mesh=mesh) for _ in range(3)]
    out["repro"] = all(torch.equal(runs[0], r) for r in runs[1:])
    parts = [torch.empty_like(x) for _ in range(world)]
    torch.distributed.all_gather(parts, x)
    out["ordered"] = torch.equal(runs[0], dist.rank_ordered_reduce(parts))
    out["nondet_close"] = torch.allclose(
        dist.all_reduce(x, "sum", "tp", mesh=mesh, deterministic=False), runs[0],
        rtol=1e-5, atol=1e-4,
    )
    bf = x[:4096].to(torch.bfloat16)
    out["bf16_device"] = str(dist.all_reduce(bf, "sum", "tp", mesh=mesh).device)
    n = 16 * world
    text = f"""
func.func @col(%x: tensor<8x16xf32>, %w: tensor<16x{n}xf32> {{tessera.shard = #tessera.shard<[[], [tp]]>}}) -> tensor<8x{n}xf32> attributes {{tessera.mesh = #tessera.mesh<tp = {world}>}} {{
  %y = tgraph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x{n}xf32>) -> tensor<8x{n}xf32>
  func.return %y : tensor<8x{n}xf32>
}}
"""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((16, n)).astype(np.float32)
    (y,) = run_spmd(parse(text), "col", [a, b], mesh)
    out["col_err"] = float(np.abs(y - a @ b).max())
    return out


def test_nccl_deterministic_all_reduce_and_tp_gemm():
    world = min(torch.cuda.device_count(), 4)
    for r, out in enumerate(spawn(_nccl_rank, world, backend="nccl", timeout=240)):
        assert out["repro"], f"rank {r}: deterministic all_reduce differs across runs"
        assert out["ordered"], f"rank {r}: not bitwise the rank-ordered sum"
        assert out["nondet_close"]
        assert out["bf16_device"].startswith("cuda")
        assert out["col_err"] < 1e-4
