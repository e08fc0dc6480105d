"""Run a function on N local processes joined by a torch.distributed process group.

``spawn(fn, nprocs, *args)`` starts ``nprocs`` processes (torch.multiprocessing,
spawn start method), initializes the default process group in each (gloo on CPU,
NCCL when ``backend="nccl"``) on a free localhost port, calls
``fn(rank, nprocs, *args)`` and returns the per-rank results in rank order. A
rank that raises makes ``spawn`` raise with that rank's traceback; a run longer
than ``timeout`` seconds is killed and raises ``TimeoutError``, so a hang fails
instead of blocking.

``fn`` must be importable by the children (a module-level function).
"""

from __future__ import annotations

import os
import pickle
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

from tessera.dist.mesh import _free_port, require_gpus
from tessera.errors import TesseraError


class SpawnError(TesseraError, RuntimeError):
    """A rank of a spawned run failed."""


def _child(
    rank: int, fn: Callable[..., Any], nprocs: int, port: int, backend: str, out: str,
    args: tuple[Any, ...],
) -> None:
    import torch.distributed as tdist

    path = os.path.join(out, f"{rank}.pkl")
    try:
        if backend == "nccl":
            import torch

            torch.cuda.set_device(rank % torch.cuda.device_count())
        tdist.init_process_group(
            backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nprocs
        )
        try:
            res = fn(rank, nprocs, *args)
        finally:
            tdist.destroy_process_group()
        with open(path, "wb") as f:
            pickle.dump(("ok", res), f)
    except BaseException:
        with open(path, "wb") as f:
            pickle.dump(("error", traceback.format_exc()), f)
        raise SystemExit(1) from None


def spawn(
    fn: Callable[..., Any],
    nprocs: int,
    *args: Any,
    backend: str = "gloo",
    timeout: float = 120.0,
) -> list[Any]:
    """Run ``fn(rank, nprocs, *args)`` on ``nprocs`` processes; results in rank order."""
    import torch.multiprocessing as mp

    if backend == "nccl":
        require_gpus(f"spawn(backend='nccl') of {nprocs} processes")
    with tempfile.TemporaryDirectory(prefix="tessera-spawn-") as out:
        ctx = mp.start_processes(
            _child,
            args=(fn, nprocs, _free_port(), backend, out, args),
            nprocs=nprocs,
            join=False,
            start_method="spawn",
        )
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    if ctx.join(timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
                        break
                except Exception:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"spawn: {fn.__name__} on {nprocs} ranks did not finish in {timeout:.0f} s"
                    )
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            for p in ctx.processes:
                p.join(5)
        results: list[Any] = []
        errors: list[str] = []
        for r in range(nprocs):
            path = os.path.join(out, f"{r}.pkl")
            if not os.path.exists(path):
                errors.append(f"rank {r}: exited without a result")
                results.append(None)
                continue
            with open(path, "rb") as f:
                status, val = pickle.load(f)
            if status == "ok":
                results.append(val)
            else:
                errors.append(f"rank {r}:\n{val}")
                results.append(None)
        if errors:
            raise SpawnError(f"spawn: {fn.__name__} failed\n" + "\n".join(errors))
        return results
