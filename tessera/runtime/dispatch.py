"""Where a compiled call runs: the CPU reference interpreter or a GPU backend.

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
