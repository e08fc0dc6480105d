"""Where a compiled call runs: a CPU interpreter or a GPU backend.

The GPU path is installed by the lowering/runtime code as :data:`GPU_BACKEND`;
until then a CUDA tensor argument raises ``NotImplementedError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

GPU_BACKEND: Callable[[Any, list[Any]], Any] | None = None
"""``backend(specialization, tensor_args) -> result(s)``: runs a compiled specialization
(:class:`tessera.frontend.jit.Specialization`) on CUDA torch tensors."""


def gpu_runner(spec: Any) -> Callable[[Any], Any] | None:
    """A fast runner of ``spec`` from the installed backend, None if it offers none.

    A backend offers one as its ``runner`` attribute: ``backend.runner(spec) -> run | None``,
    where ``run(args)`` repeats a GPU call of ``spec`` on the current device with all that
    does not depend on the tensors prepared once, and returns the result, or None when
    the arguments need the checked path (the backend itself)."""
    make = getattr(GPU_BACKEND, "runner", None)
    return make(spec) if make is not None else None


def run_on_gpu(spec: Any, args: list[Any]) -> Any:
    """Run ``spec`` on CUDA tensors through the installed GPU backend."""
    if GPU_BACKEND is None:
        from tessera.runtime import cuda

        cuda.install()
    if GPU_BACKEND is None:
        raise NotImplementedError(
            f"{spec.name}: CUDA tensor arguments need the GPU lowering, which is not "
            "available yet; pass numpy arrays or CPU torch tensors to run on the "
            "reference interpreter"
        )
    return GPU_BACKEND(spec, args)


def run_on_cpu(spec: Any, arrays: list[Any]) -> list[Any]:
    """Run ``spec`` on numpy ``arrays`` (one per tensor parameter): its Graph IR on the
    Graph IR interpreter, or with ``TESSERA_INTERPRET_TILE=1`` its Tile IR -- the GPU
    lowering's kernels and host function, as lowered without a device (no sm90
    kernels) -- on the Tile IR interpreter, to check that lowering without a GPU."""
    from tessera.options import RuntimeOptions

    if RuntimeOptions.from_env().interpret_tile:
        from tessera.runtime.tile_interpreter import run_host

        return run_host(spec.ir("tile"), spec.name, arrays)
    from tessera.runtime.graph_interpreter import run_function

    return run_function(spec.ir("graph"), spec.name, arrays)
