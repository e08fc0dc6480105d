"""The Python side of a cached ``@ts.jit`` GPU call, measured on a CPU-only machine.

    python bench/host_path.py                 # µs per call of the cached call path
    python bench/host_path.py --calls 50000 --repeat 7

It drives the real code path of a repeated call of ``ts.where(c, a, b)`` on three
1024-element tensors (``bench/run.py``'s ``host_overhead`` case): ``CompiledFunction``,
the prepared per-signature call, the host plan's argument checks, the output allocation
and the kernel launch with its parameter buffer. Only what needs a GPU is stood in for
(:func:`stand_ins`): the tensors are CPU tensors treated as CUDA ones, outputs are
allocated on the CPU, the current device is 0, the current stream handle is 0, the
module load is skipped, and ``cuLaunchKernel`` is a Python function that returns
success. So the figures are the Python overhead alone: they leave out the cost of
cuda-python's ``cuLaunchKernel`` binding, of the CUDA caching allocator and of the
kernel itself, which only ``bench/run.py --cases host_overhead`` on a GPU measures.

Besides the full call (``jit call``), it reports the checked path that a call takes
when its arguments need checks or copies (``checked call``: ``HostPlan.run`` through
the GPU backend), for comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

N = 1024


class FakeDriver:
    """Stands in for ``cuda.bindings.driver``: launches succeed and are counted. With
    ``read`` set, each launch also reads back its first ``read`` parameters as 64-bit
    values (the driver copies them during the call) into ``last``, and appends them to
    ``params``."""

    CUresult = SimpleNamespace(CUDA_SUCCESS=0)

    def __init__(self, read: int = 0) -> None:
        self.launches = 0
        self.read = read
        self.last: tuple[Any, ...] | None = None
        self.params: list[list[int]] = []

    @staticmethod
    def CUstream(handle: int) -> int:  # noqa: N802 - the driver's name
        return handle

    def cuLaunchKernel(self, fn: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,  # noqa: N802
                       smem: int, stream: Any, params: int, extra: int) -> tuple[int]:
        self.launches += 1
        if self.read:
            ptrs = (ctypes.c_void_p * self.read).from_address(params)
            values = [ctypes.c_uint64.from_address(p).value for p in ptrs]
            self.last = (fn, (gx, gy, gz), (bx, by, bz), stream, values)
            self.params.append(values)
        return (0,)

    def cuStreamSynchronize(self, stream: Any) -> tuple[int]:  # noqa: N802
        return (0,)


@contextlib.contextmanager
def stand_ins(read: int = 0) -> Iterator[FakeDriver]:
    """Replace the GPU-only pieces of the runtime with CPU stand-ins (see the module
    docstring; ``read`` goes to :class:`FakeDriver`); everything is restored on exit."""
    import torch

    from tessera.runtime import convert, cuda, dispatch

    fake = FakeDriver(read)
    saved: list[tuple[Any, str, Any]] = []

    def patch(obj: Any, name: str, value: Any) -> None:
        saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    patch(convert, "is_cuda_tensor", convert.is_torch_tensor)
    patch(cuda, "_driver", lambda: fake)
    patch(cuda, "load_module", lambda ptx, device=0: "module")
    patch(cuda, "get_function", lambda module, name: f"function {name}")
    patch(cuda, "torch_device", lambda index: torch.device("cpu"))
    patch(cuda, "device_getter", lambda: (lambda: 0))
    patch(cuda, "stream_getter", lambda: (lambda device: 0))
    patch(torch.cuda, "current_device", lambda: 0)
    patch(torch.cuda, "current_stream", lambda device=None: SimpleNamespace(cuda_stream=0))
    patch(dispatch, "GPU_BACKEND", cuda.run_specialization)
    try:
        yield fake
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)


def where_function() -> Any:
    """``bench/run.py``'s host-overhead function: ``ts.where(c, a, b)``."""
    import tessera as ts

    @ts.jit
    def pick(c: Any, a: Any, b: Any) -> Any:
        return ts.where(c, a, b)

    return pick


def where_args(n: int = N) -> list[Any]:
    import torch

    a, b = torch.randn(n), torch.randn(n)
    return [a > 0, a, b]


def per_call_us(call: Callable[[], Any], calls: int, repeat: int) -> list[float]:
    """µs per call of ``call``, once per repetition of ``calls`` back-to-back calls."""
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return out


def measure(calls: int = 20000, repeat: int = 5) -> dict[str, list[float]]:
    """µs per call of the cached jit call and of the checked path, under :func:`stand_ins`."""
    from tessera.runtime import cuda

    results: dict[str, list[float]] = {}
    with stand_ins() as fake:
        pick = where_function()
        args = where_args()
        pick(*args)  # compiles (or reads the program cache) and prepares the call
        for _ in range(1000):
            pick(*args)
        before = fake.launches
        results["jit call"] = per_call_us(lambda: pick(*args), calls, repeat)
        if fake.launches - before != calls * repeat:
            raise RuntimeError("the cached call did not launch once per call")
        spec = pick.specialize(*args)
        results["checked call"] = per_call_us(
            lambda: cuda.run_specialization(spec, args), calls, repeat
        )
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=20000, help="calls per repetition")
    p.add_argument("--repeat", type=int, default=5, help="repetitions (min and median shown)")
    a = p.parse_args(argv)
    for name, us in measure(a.calls, a.repeat).items():
        print(f"{name:>13}: min {min(us):6.2f} us/call, median {statistics.median(us):6.2f} "
              f"({', '.join(f'{x:.2f}' for x in us)})")
    print("Python side only: cuLaunchKernel, the CUDA allocator and the kernel are stood in for.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
