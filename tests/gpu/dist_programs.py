"""Sharded programs of the guide run through ``@ts.jit`` on every rank, checked against
float64 numpy references, with a hash of each rank's outputs (for run-to-run checks).

    torchrun --nproc-per-node 2 tests/gpu/dist_programs.py --json out.json

On CUDA GPUs (one per rank, NCCL) each program's segments run as PTX on the rank's GPU;
without CUDA the same programs run on the numpy interpreter over gloo. Programs:

* ``tp_gemm``: ``relu(x @ W)``, ``W`` column-sharded over ``tp`` (a ``dist.tensor``);
* ``tp_row``: ``x @ W + b`` with the contraction dim split (a deterministic all_reduce);
* ``guide``: the hand-written ``all_gather(x @ W_shard, axis="tp")`` in ``@ts.jit(mesh=...)``;
* ``dp_step``: ``ts.value_and_grad`` of an mse loss with the batch split over ``dp``,
  then an SGD update;
* ``grad_2d`` / ``mm2d``: a (dp, tp) mesh: gradient of a sharded weight (a ``DistTensor``
  with the weight's layout) and ``softmax(x @ W)`` with both operands sharded;
* ``dist_loss_grad``: the guide's ``distributed_loss`` (all_gather forward, reduce_scatter
  backward) through ``ts.grad``;
* ``pipe``: a 2-stage pipeline (``tessera.stage``) with send/recv.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from typing import Any

import numpy as np

import tessera as ts
from tessera import dist
from tessera.dist.executor import parse, run_compiled

M, K, N = 32, 64, 128


def _data(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _host(x: Any) -> np.ndarray | None:
    if x is None:
        return None
    if isinstance(x, dist.DistTensor):
        x = x.local
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _close(name: str, got: Any, ref: np.ndarray, rank: int) -> float:
    """Max abs error of ``got`` (float32) against the float64 ``ref``; raises if too large."""
    g = _host(got)
    assert g is not None, f"{name}: rank {rank} got no result"
    if g.shape != ref.shape:
        raise AssertionError(f"{name}: rank {rank} result shape {g.shape}, expected {ref.shape}")
    err = float(np.abs(g.astype(np.float64) - ref).max())
    tol = 1e-4 * max(1.0, float(np.abs(ref).max()))
    if not err <= tol:
        raise AssertionError(f"{name}: rank {rank} max error {err:.3g} > {tol:.3g}")
    return err


def pipeline_text(axes: str, tp: bool) -> str:
    t = "tensor<{}x{}xf32>".format
    w1 = "{tessera.shard = #tessera.shard<[[], [tp]]>}" if tp else ""
    w2 = "{tessera.shard = #tessera.shard<[[tp], []]>}" if tp else ""
    return f"""
func.func @pipe(%x: {t(8, 16)}, %w1: {t(16, 32)} {w1}, %w2: {t(32, 16)} {w2}) -> {t(8, 16)} attributes {{tessera.mesh = #tessera.mesh<{axes}>}} {{
  %h = tgraph.matmul %x, %w1 {{tessera.stage = 0 : i64}} : ({t(8, 16)}, {t(16, 32)}) -> {t(8, 32)}
  %a = tgraph.tanh %h {{tessera.stage = 0 : i64}} : ({t(8, 32)}) -> {t(8, 32)}
  %y = tgraph.matmul %a, %w2 {{tessera.stage = 1 : i64}} : ({t(8, 32)}, {t(32, 16)}) -> {t(8, 16)}
  func.return %y : {t(8, 16)}
}}
"""


def run_programs(rank: int, world: int, device: str) -> dict[str, dict[str, Any]]:
    """Run every program on this rank (inside a process group of ``world`` ranks).

    Returns ``{program: {"out": [arrays], "err": max error}}``; raises AssertionError
    naming the program and rank when a result differs from its reference.
    """
    if world % 2:
        raise SystemExit(f"dist_programs: needs an even number of ranks, got {world}")
    devices = [f"cuda:{i}" for i in range(world)] if device == "cuda" else ["cpu"] * world
    f32 = np.float32
    x, w, b = _data(1, M, K).astype(f32), _data(2, K, N).astype(f32), _data(3, N).astype(f32)
    x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
    col = dist.ShardSpec(partition=("col",), mesh_axes=("tp",))
    row = dist.ShardSpec(partition=("row",), mesh_axes=("tp",))
    out: dict[str, dict[str, Any]] = {}

    def record(name: str, got: list[Any], refs: list[np.ndarray | None]) -> None:
        errs = [_close(name, g, r, rank) for g, r in zip(got, refs) if r is not None]
        out[name] = {"out": [_host(g) for g in got], "err": max(errs, default=0.0)}

    tp_mesh = dist.mesh(devices=devices, axes=("tp",))
    blk = N // world

    W = dist.tensor((K, N), col, tp_mesh, "f32", data=w)

    @ts.jit
    def tp_gemm(x, W):
        return ts.relu(ts.matmul(x, W))

    record("tp_gemm", [tp_gemm(x, W)], [np.maximum(x64 @ w64, 0)])

    @ts.jit
    def tp_row(x, W, b):
        return ts.matmul(x, W) + b

    Xc = dist.tensor((M, K), col, tp_mesh, "f32", data=x)
    Wr = dist.tensor((K, N), row, tp_mesh, "f32", data=w)
    record("tp_row", [tp_row(Xc, Wr, b)], [x64 @ w64 + b64])

    @ts.jit(mesh=tp_mesh)
    def guide(x, w_shard):
        y_local = ts.matmul(x, w_shard)
        return ts.all_gather(y_local, axis="tp", dim=1)

    record("guide", [guide(x, W.local)], [x64 @ w64])

    @ts.jit(mesh=tp_mesh)
    def distributed_loss(x, W):
        y = ts.matmul(x, W)
        y = ts.all_gather(y, axis="tp", dim=1)
        return ts.sum(y**2)

    # per-rank program: the gradient of the sum over ranks of each rank's loss
    g_ref = world * 2.0 * x64.T @ (x64 @ w64)
    record("dist_loss_grad", [ts.grad(distributed_loss, argnums=1)(x, W)],
           [g_ref[:, rank * blk:(rank + 1) * blk]])

    dp_mesh = dist.mesh(devices=devices, axes=("dp",))
    xd, yd, wd = _data(4, M, 8).astype(f32), _data(5, M, 4).astype(f32), _data(6, 8, 4).astype(f32)
    batch = dist.ShardSpec(partition=("batch",), mesh_axes=("dp",))

    @ts.jit
    def mse_loss(x, W, y):
        return ts.mse(ts.matmul(x, W), y)

    loss, gw = ts.value_and_grad(mse_loss, argnums=1)(
        dist.tensor((M, 8), batch, dp_mesh, "f32", data=xd), wd,
        dist.tensor((M, 4), batch, dp_mesh, "f32", data=yd),
    )
    xd64, yd64, wd64 = (a.astype(np.float64) for a in (xd, yd, wd))
    e = xd64 @ wd64 - yd64
    g_dp = 2.0 * xd64.T @ e / e.size
    w_new = _host(gw)
    assert w_new is not None
    record("dp_step", [loss, wd - 0.1 * w_new], [np.mean(e**2), wd64 - 0.1 * g_dp])

    mesh2 = dist.mesh(devices=devices, axes=("dp", "tp"), shape=(world // 2, 2))
    Xb = dist.tensor((M, K), dist.ShardSpec(("batch",), ("dp",)), mesh2, "f32", data=x)
    W2 = dist.tensor((K, N), col, mesh2, "f32", data=w)

    @ts.jit
    def mm2d(x, W):
        return ts.softmax(ts.matmul(x, W), axis=-1)

    s = x64 @ w64
    p = np.exp(s - s.max(-1, keepdims=True))
    record("mm2d", [mm2d(Xb, W2)], [p / p.sum(-1, keepdims=True)])

    @ts.jit
    def sq_loss(x, W):
        return ts.sum(ts.matmul(x, W) ** 2)

    gW2 = ts.grad(sq_loss, argnums=1)(Xb, W2)
    assert isinstance(gW2, dist.DistTensor) and gW2.layout.partition == col.partition
    c = mesh2.coords(rank)["tp"]
    half = N // 2
    record("grad_2d", [gW2], [(2.0 * x64.T @ s)[:, c * half:(c + 1) * half]])

    pp = 2
    axes = "pp = 2" if world == 2 else f"pp = 2, tp = {world // pp}"
    mesh_pp = dist.mesh(devices=devices, axes=("pp", "tp"), shape=(pp, world // pp))
    if world == 2:
        mesh_pp = dist.mesh(devices=devices, axes=("pp",))
    xp, w1, w2 = _data(7, 8, 16).astype(f32), _data(8, 16, 32).astype(f32), _data(9, 32, 16).astype(f32)
    (y,) = run_compiled(parse(pipeline_text(axes, world > 2)), "pipe", [xp, w1, w2], mesh_pp, device)
    last = mesh_pp.coords(rank)["pp"] == pp - 1
    ref = np.tanh(xp.astype(np.float64) @ w1) @ w2
    if last:
        record("pipe", [y], [ref])
    else:
        assert y is None, f"pipe: rank {rank} is not on the last stage but got a result"
        out["pipe"] = {"out": [], "err": 0.0}
    return out


def digest(arrays: list[np.ndarray | None]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        if a is not None:
            h.update(str(a.dtype).encode() + str(a.shape).encode())
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="write {program: [hash per rank]} here")
    args = ap.parse_args()
    import torch
    import torch.distributed as tdist

    rank = dist.init()
    world = tdist.get_world_size()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    outs = run_programs(rank, world, device)
    mine = {k: (digest(v["out"]), v["err"]) for k, v in outs.items()}
    every: list[Any] = [None] * world
    tdist.all_gather_object(every, mine)
    if rank == 0:
        table = {k: [every[r][k][0] for r in range(world)] for k in mine}
        errs = {k: max(every[r][k][1] for r in range(world)) for k in mine}
        name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
        print(f"dist_programs: {world} ranks, {device} ({name}, {tdist.get_backend()})")
        for k in table:
            print(f"  {k:<15} max err {errs[k]:9.2e}  hashes {' '.join(table[k])}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"world": world, "device": name, "hashes": table, "max_err": errs}, f,
                          indent=1)
    tdist.barrier()
    tdist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
