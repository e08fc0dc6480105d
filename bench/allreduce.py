"""Deterministic all_reduce vs NCCL's all_reduce, 1 MiB to 1 GiB, timed with CUDA events.

    torchrun --nproc-per-node 2 bench/allreduce.py [--min-mib 1] [--max-mib 1024]
             [--iters 10] [--dtype float32] [--json bench_allreduce.json]

Each rank binds to the GPU of its LOCAL_RANK; before timing a size the ranks
synchronize and meet at a barrier; every iteration is timed with its own pair of
CUDA events on the current stream, and the time reported is the slowest rank's
median. Rank 0 prints a table (size, both times, algorithm bandwidth, whether the
deterministic result equals the rank-ordered sum bitwise) and writes it as JSON.
Without CUDA GPUs (at least two ranks, one GPU each) it exits with status 2 and
a message saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-mib", type=float, default=1)
    ap.add_argument("--max-mib", type=float, default=1024)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--json", default="bench_allreduce.json")
    args = ap.parse_args()

    import torch
    import torch.distributed as tdist

    if not torch.cuda.is_available():
        print("bench/allreduce.py: no CUDA GPU here; this benchmark needs NCCL on GPUs "
              "(launch with torchrun --nproc-per-node N on an N-GPU machine)", file=sys.stderr)
        return 2
    if "RANK" not in os.environ:
        print("bench/allreduce.py: launch with torchrun --nproc-per-node N", file=sys.stderr)
        return 2
    from tessera import dist

    rank = dist.init(backend="nccl")
    world = tdist.get_world_size()
    if world < 2:
        print("bench/allreduce.py: needs at least 2 ranks", file=sys.stderr)
        return 2
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(world)], axes=("dp",))
    mesh.device_mesh()
    dtype = getattr(torch, args.dtype)
    dev = torch.device("cuda", torch.cuda.current_device())
    rows = []
    mib = args.min_mib
    while mib <= args.max_mib:
        n = int(mib * 2**20) // torch.tensor([], dtype=dtype).element_size()
        g = torch.Generator(device=dev).manual_seed(1234 + rank)
        x = torch.randn(n, dtype=dtype, device=dev, generator=g)

        def det(x=x):
            return dist.all_reduce(x, "sum", "dp", mesh=mesh)

        def nccl(x=x):
            y = x.clone()
            tdist.all_reduce(y)
            return y

        times = {}
        for name, fn in (("deterministic", det), ("nccl", nccl)):
            for _ in range(args.warmup):
                fn()
            torch.cuda.synchronize()
            tdist.barrier(device_ids=[dev.index])
            events = []
            for _ in range(args.iters):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                events.append((start, end))
            torch.cuda.synchronize()
            median = statistics.median(s.elapsed_time(e) for s, e in events)
            slowest = torch.tensor([median], dtype=torch.float64, device=dev)
            tdist.all_reduce(slowest, op=tdist.ReduceOp.MAX)
            times[name] = float(slowest.item())
        a, b = det(), det()
        parts = [torch.empty_like(x) for _ in range(world)]
        tdist.all_gather(parts, x)
        ref = parts[0].clone()
        for p in parts[1:]:
            ref = ref + p
        rows.append({
            "mib": mib, "elements": n, "dtype": args.dtype, "world": world,
            "deterministic_ms": times["deterministic"], "nccl_ms": times["nccl"],
            "deterministic_gbps": mib * 2**20 / times["deterministic"] / 1e6,
            "nccl_gbps": mib * 2**20 / times["nccl"] / 1e6,
            "reproducible": bool(torch.equal(a, b)),
            "equals_rank_ordered_sum": bool(torch.equal(a, ref)),
        })
        del x, parts, ref, a, b
        torch.cuda.empty_cache()
        mib *= 4
    if rank == 0:
        print(f"all_reduce sum, {args.dtype}, {world} ranks, {torch.cuda.get_device_name()}")
        print(f"{'MiB':>8} {'det ms':>9} {'nccl ms':>9} {'det GB/s':>9} {'nccl GB/s':>9} "
              f"{'repro':>6} {'ordered':>8}")
        for r in rows:
            print(f"{r['mib']:>8g} {r['deterministic_ms']:>9.3f} {r['nccl_ms']:>9.3f} "
                  f"{r['deterministic_gbps']:>9.2f} {r['nccl_gbps']:>9.2f} "
                  f"{str(r['reproducible']):>6} {str(r['equals_rank_ordered_sum']):>8}")
        with open(args.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M:%S"), "device":
                       torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
        print(f"wrote {args.json}")
    tdist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
