"""Checking GPU kernels against the Tile IR interpreter, launch by launch.

While checking is on, every kernel launch of a compiled program on CUDA tensors runs
twice: on the GPU, and on the Tile IR interpreter
(:mod:`tessera.runtime.tile_interpreter`) over host copies of the same arguments, taken
just before the launch. The kernel's tensor arguments after both runs must agree (to the
dtype's tolerance: the GPU's approximate ``exp``/``rsqrt`` differ from numpy's by a few
ulps); the first that does not raises :class:`KernelMismatch`, naming the kernel, its
host function, the argument, how many elements differ and the first of them. So a wrong
result is traced to the one kernel, and the one lowering below Tile IR, that produced it:
if every launch was checked (:meth:`KernelChecker.summary` counts those that were not)
and agrees, a wrong answer comes from the Tile IR (or the graph above it), not the PTX.

    with tessera.runtime.kernel_check.checking() as check:
        f(x_cuda)
    print(check.summary())

or ``TESSERA_CHECK_KERNELS=1`` for a whole process. Each launch synchronizes the device
and copies its arguments to the host, and the interpreter runs every lane in numpy: this
is a debugging mode for small inputs. Kernels the interpreter cannot run (the sm90
TMA/wgmma kernels, kernels whose arguments alias) run unchecked and are counted by
reason in :meth:`KernelChecker.summary`. Checking and a ``ts.profiler`` session do not
nest: both take the runtime's launch hook (:data:`tessera.runtime.cuda.LAUNCH_HOOK`).
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from tessera.errors import TesseraError
from tessera.runtime.convert import is_torch_tensor, to_numpy

TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-9, 1e-12),
    "float32": (1e-4, 1e-6),
    "float16": (2e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
    "float8_e4m3fn": (0.25, 0.0),
    "float8_e5m2": (0.25, 0.0),
}
"""``dtype -> (rtol, atol)``: a GPU element ``g`` agrees with the interpreter's ``r`` when
``|g - r| <= atol + rtol * |r|`` (NaN agrees with NaN); other dtypes must be equal."""


class KernelMismatch(TesseraError, RuntimeError):
    """A kernel's results on the GPU differ from the Tile IR interpreter's."""


class KernelChecker:
    """The runtime's launch hook (:data:`tessera.runtime.cuda.LAUNCH_HOOK`) while checking.

    ``checked`` counts the launches compared; ``unchecked`` counts the others by reason."""

    def __init__(self, tolerances: dict[str, tuple[float, float]] | None = None) -> None:
        self.tolerances = {**TOLERANCES, **(tolerances or {})}
        self.spec: Any = None
        self.checked = 0
        self.unchecked: Counter[str] = Counter()
        self._kernels: weakref.WeakKeyDictionary[Any, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )
        """Each Tile IR module's kernels by name (keyed by the module itself: the id of a
        freed specialization can be reused by the next one)."""

    # the launch hook's interface (tessera.runtime.cuda.HostPlan._step)

    def specialization(self, spec: Any) -> None:
        self.spec = spec

    def launch(
        self, host: str, kernel: Any, grid: Sequence[int], values: list[Any], run: Callable[[], None]
    ) -> None:
        """Launch ``kernel`` (``run()``) and compare its tensor arguments with the Tile IR
        interpreter's run of the same kernel on copies taken before the launch."""
        name = kernel.sym_name.data
        tile_kernel, why = self._tile_kernel(name)
        if tile_kernel is None or _aliased(values):
            self.unchecked[why or "aliased arguments"] += 1
            run()
            return
        before = [_host_copy(v) for v in values]
        run()
        after = [_host_copy(v) if is_torch_tensor(v) else None for v in values]
        from tessera.runtime.tile_interpreter.host import run_kernel

        try:
            run_kernel(self.spec.ir("tile"), name, before, grid)
        except Exception as e:  # noqa: BLE001 - an op the interpreter lacks: unchecked
            self.unchecked[f"the interpreter cannot run it ({type(e).__name__})"] += 1
            return
        for i, (got, want) in enumerate(zip(after, before)):
            if got is not None:
                problem = self._compare(got, want)
                if problem:
                    raise KernelMismatch(
                        f"kernel @{name} (grid {list(grid)}) of @{host}: argument {i} "
                        f"({want.dtype}{list(want.shape)}) differs from the Tile IR "
                        f"interpreter: {problem}"
                    )
        self.checked += 1

    # ------------------------------------------------------------------

    def summary(self) -> str:
        """One line: how many launches were checked, and why the others were not."""
        parts = [f"{self.checked} kernel launches checked against the Tile IR interpreter"]
        parts += [f"{n} unchecked: {why}" for why, n in sorted(self.unchecked.items())]
        return "; ".join(parts)

    def _tile_kernel(self, name: str) -> tuple[Any, str | None]:
        if self.spec is None:
            return None, "no compiled specialization was announced"
        module = self.spec.ir("tile")
        table = self._kernels.get(module)
        if table is None:
            table = self._kernels[module] = {
                op.sym_name.data: op for op in module.walk() if op.name == "ttile.kernel"
            }
        k = table.get(name)
        return (k, None) if k is not None else (None, "no Tile IR kernel of that name")

    def _compare(self, got: np.ndarray, want: np.ndarray) -> str | None:
        """None when ``got`` (GPU) agrees with ``want`` (interpreter), else what differs."""
        name = str(want.dtype)
        tol = self.tolerances.get(name)
        if tol is None:
            bad = got != want
        else:
            g, w = got.astype(np.float64), want.astype(np.float64)
            both_nan = np.isnan(g) & np.isnan(w)
            with np.errstate(invalid="ignore"):
                diff = np.where(both_nan, 0.0, np.abs(g - w))
                diff = np.where(np.isnan(diff), np.inf, diff)  # NaN against a number
                same_inf = np.isinf(g) & (g == w)
                diff = np.where(same_inf, 0.0, diff)
            bad = diff > tol[1] + tol[0] * np.abs(np.nan_to_num(w))
        if not bad.any():
            return None
        flat = np.flatnonzero(bad)
        k = int(flat[0])
        idx = np.unravel_index(k, want.shape) if want.ndim else ()
        return (
            f"{flat.size} of {want.size} elements, the first at index {list(map(int, idx))}: "
            f"GPU {got.reshape(-1)[k].item()!r}, interpreter {want.reshape(-1)[k].item()!r}"
        )


def _aliased(values: Sequence[Any]) -> bool:
    """True when two tensor arguments share memory (the interpreter's copies would not)."""
    ptrs = [v.data_ptr() for v in values if is_torch_tensor(v) and v.numel()]
    return len(set(ptrs)) != len(ptrs)


def _host_copy(v: Any) -> Any:
    """A numpy copy of a tensor argument (bf16/fp8 as ml_dtypes); scalars as they are."""
    if not is_torch_tensor(v):
        return v
    if v.device.type == "cuda":
        import torch

        torch.cuda.synchronize(v.device)
    return np.array(to_numpy(v.detach().cpu()), copy=True)


def check_process() -> KernelChecker:
    """Check every launch from now on (``TESSERA_CHECK_KERNELS=1``); the summary is
    written to stderr when the process exits."""
    import atexit
    import sys

    from tessera.runtime import cuda

    if isinstance(cuda.LAUNCH_HOOK, KernelChecker):
        return cuda.LAUNCH_HOOK
    if cuda.LAUNCH_HOOK is not None:
        raise TesseraError("TESSERA_CHECK_KERNELS=1: the runtime's launch hook is taken")
    checker = cuda.LAUNCH_HOOK = KernelChecker()
    atexit.register(lambda: sys.stderr.write(f"tessera: {checker.summary()}\n"))
    return checker


@contextmanager
def checking(tolerances: dict[str, tuple[float, float]] | None = None) -> Iterator[KernelChecker]:
    """Check every kernel launch in the block (see the module's docstring); yields the
    :class:`KernelChecker`, whose :meth:`~KernelChecker.summary` says what was checked.
    ``tolerances`` overrides entries of :data:`TOLERANCES`."""
    from tessera.runtime import cuda

    if cuda.LAUNCH_HOOK is not None:
        raise TesseraError(
            "kernel checking: the runtime's launch hook is taken (a ts.profiler session "
            "or another checking block is active); the two do not nest"
        )
    checker = KernelChecker(tolerances)
    cuda.LAUNCH_HOOK = checker
    try:
        yield checker
    finally:
        cuda.LAUNCH_HOOK = None
