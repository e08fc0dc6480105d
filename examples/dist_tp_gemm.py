"""Tensor-parallel GEMM on a dp x tp mesh, from the guide's mesh examples, scaled down.

    torchrun --nproc-per-node 4 examples/dist_tp_gemm.py     # dp = 2, tp = 2
    torchrun --nproc-per-node 2 examples/dist_tp_gemm.py     # dp = 1, tp = 2

NCCL on GPUs, gloo on CPU (chosen from the devices). Every rank runs

* the compiler-partitioned program: a global-view Graph IR function whose batch is
  split over ``dp`` and whose weight is split by columns over ``tp``; ``spmd-partition``
  inserts the collectives;
* the guide's hand-written form, ``y_local = x @ W_shard; y = all_gather(y_local, axis="tp")``,

and checks both against numpy on the full matrices.
"""

from __future__ import annotations

import numpy as np
import torch

from tessera import dist
from tessera.dist.executor import parse, partitioned, run_spmd

M, K, N = 16, 32, 64


def program(dp: int, tp: int) -> str:
    t = "tensor<{}x{}xf32>".format
    return f"""
func.func @tp_gemm(%x: {t(M, K)} {{tessera.shard = #tessera.shard<[[dp], []]>}},
                   %w: {t(K, N)} {{tessera.shard = #tessera.shard<[[], [tp]]>}}) -> {t(M, N)}
    attributes {{tessera.mesh = #tessera.mesh<dp = {dp}, tp = {tp}>}} {{
  %y = tgraph.matmul %x, %w : ({t(M, K)}, {t(K, N)}) -> {t(M, N)}
  %r = tgraph.relu %y : ({t(M, N)}) -> {t(M, N)}
  func.return %r : {t(M, N)}
}}
func.func @guide(%x: {t(M, K)}, %w_shard: {t(K, N // tp)}) -> {t(M, N)}
    attributes {{tessera.mesh = #tessera.mesh<dp = {dp}, tp = {tp}>}} {{
  %y_local = tgraph.matmul %x, %w_shard : ({t(M, K)}, {t(K, N // tp)}) -> {t(M, N // tp)}
  %y = tgraph.all_gather %y_local axis = "tp" dim = 1 : ({t(M, N // tp)}) -> {t(M, N)}
  func.return %y : {t(M, N)}
}}
"""


def main() -> dict[str, np.ndarray]:
    rank = dist.init()
    world = torch.distributed.get_world_size()
    tp = 2 if world % 2 == 0 else 1
    dp = world // tp
    devices = [f"cuda:{i}" for i in range(world)] if torch.cuda.is_available() else ["cpu"] * world
    mesh = dist.mesh(devices=devices, axes=("dp", "tp"), shape=(dp, tp))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((K, N)).astype(np.float32)
    module = parse(program(dp, tp))
    (y,) = run_spmd(module, "tp_gemm", [x, w], mesh)
    w_shard = dist.shard(w, dist.ShardSpec(partition=("col",), mesh_axes=("tp",)), mesh, rank)
    (y_guide,) = run_spmd(module, "guide", [x, w_shard], mesh)
    ref = np.maximum(x.astype(np.float64) @ w.astype(np.float64), 0)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(y_guide, x @ w, rtol=1e-5, atol=1e-4)
    if rank == 0:
        print(f"{mesh!r}, backend {mesh.backend}")
        print(partitioned(module, "tp_gemm").body.block.first_op)
        print(f"tp_gemm and the guide's all_gather form match numpy on {world} ranks")
    return {"y": y, "y_guide": y_guide}


if __name__ == "__main__":
    main()
    torch.distributed.destroy_process_group()
