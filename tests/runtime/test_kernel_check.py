"""Kernel checking (tessera.runtime.kernel_check) on the CPU: the launch hook is driven as
the GPU runtime drives it, with a launch that runs the Tile IR interpreter on CPU torch
tensors in place (a correct kernel) or that corrupts one element afterwards (a wrong
one). The GPU run of the same hook is tests/gpu/test_kernel_check_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera.errors import TesseraError
from tessera.options import RuntimeOptions
from tessera.runtime import cuda, kernel_check
from tessera.runtime.kernel_check import KernelChecker, KernelMismatch
from tessera.runtime.tile_interpreter.host import run_kernel

torch = pytest.importorskip("torch")


def _compiled(dtype: type = np.float32):
    """A one-kernel program and its launch: (spec, kernel op, grid, [out, x] tensors; the
    kernel takes its result buffer first)."""

    @ts.jit
    def f(x):
        return ts.exp(x) * 2.0 + 1.0

    x = np.random.default_rng(0).standard_normal((5, 33)).astype(dtype)
    f(x)
    spec = f._last
    launch = next(op for op in spec.ir("target").walk() if op.name == "ttarget.launch")
    name = launch.callee.root_reference.data
    kernel = next(
        op for op in spec.ir("tile").walk()
        if op.name == "ttile.kernel" and op.sym_name.data == name
    )
    x_t = torch.from_numpy(x.reshape(-1).copy())
    values = [torch.full_like(x_t, float("nan")), x_t]
    return spec, kernel, tuple(launch.grid_value()), values


def _interpreted(spec, kernel, grid, values):
    """The launch as the interpreter runs it, in place on the tensors' memory."""
    return lambda: run_kernel(spec.ir("tile"), kernel.sym_name.data,
                              [v.numpy() for v in values], grid)


def test_a_correct_launch_is_checked():
    spec, kernel, grid, values = _compiled()
    check = KernelChecker()
    check.specialization(spec)
    check.launch("f", kernel, grid, values, _interpreted(spec, kernel, grid, values))
    assert check.checked == 1 and not check.unchecked
    x = values[1].double()
    np.testing.assert_allclose(values[0].double(), torch.exp(x) * 2 + 1, rtol=1e-6,
                               equal_nan=False)
    assert check.summary().startswith("1 kernel launches checked")


@pytest.mark.parametrize("dtype,delta", [(np.float32, 1e-3), (np.float64, 1e-8)])
def test_a_wrong_element_is_located(dtype, delta):
    spec, kernel, grid, values = _compiled(dtype)
    run = _interpreted(spec, kernel, grid, values)

    def wrong() -> None:
        run()
        values[0][7] += delta * (1 + abs(values[0][7].item()))

    check = KernelChecker()
    check.specialization(spec)
    with pytest.raises(KernelMismatch) as e:
        check.launch("f", kernel, grid, values, wrong)
    msg = str(e.value)
    assert f"kernel @{kernel.sym_name.data}" in msg and "of @f: argument 0" in msg
    assert "1 of 165 elements, the first at index [7]" in msg


def test_rounding_differences_within_the_tolerance_pass():
    spec, kernel, grid, values = _compiled()
    run = _interpreted(spec, kernel, grid, values)

    def one_ulp_off() -> None:
        run()
        values[0].copy_(torch.nextafter(values[0], torch.full_like(values[0], np.inf)))

    check = KernelChecker()
    check.specialization(spec)
    check.launch("f", kernel, grid, values, one_ulp_off)
    assert check.checked == 1


def test_nan_agrees_only_with_nan():
    check = KernelChecker()
    a = np.array([np.nan, 1.0, np.inf], np.float32)
    assert check._compare(a, a.copy()) is None
    assert "GPU nan" in check._compare(np.array([np.nan], np.float32), np.array([1.0], np.float32))
    assert check._compare(np.array([-np.inf], np.float32), np.array([np.inf], np.float32))
    assert check._compare(np.array([3], np.int64), np.array([4], np.int64))


def test_launches_it_cannot_check_still_run_and_are_counted():
    spec, kernel, grid, values = _compiled()
    ran = []
    check = KernelChecker()
    check.launch("f", kernel, grid, values, lambda: ran.append(1))  # no specialization yet
    check.specialization(spec)
    check.launch("f", kernel, grid, [values[0], values[0]], lambda: ran.append(2))  # aliased
    assert ran == [1, 2] and check.checked == 0
    assert check.unchecked == {"no compiled specialization was announced": 1,
                               "aliased arguments": 1}
    assert "1 unchecked: aliased arguments" in check.summary()


def test_checking_installs_and_removes_the_hook():
    assert cuda.LAUNCH_HOOK is None
    with kernel_check.checking() as check:
        assert cuda.LAUNCH_HOOK is check
        with pytest.raises(TesseraError, match="do not nest"):
            with kernel_check.checking():
                pass
        with pytest.raises(TesseraError, match="profiler session cannot time"):
            with ts.profiler.session():
                pass
        assert cuda.LAUNCH_HOOK is check
    assert cuda.LAUNCH_HOOK is None


def test_the_environment_switch():
    assert RuntimeOptions.from_env({"TESSERA_CHECK_KERNELS": "1"}).check_kernels
    assert not RuntimeOptions.from_env({}).check_kernels
