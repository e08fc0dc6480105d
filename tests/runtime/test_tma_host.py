"""The sm90 host launch path on CPU, through a stand-in for the CUDA driver: a repeated
``ttarget.launch_ex`` encodes no tensor map and sets no function attribute again, and the
parameter array carries the right pointers and maps."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tessera.passes import matmul_config as mc  # noqa: E402
from tessera.passes.sm90.lower_matmul_sm90 import Sm90Gemm, build_kernel  # noqa: E402
from tessera.runtime import cuda, tma  # noqa: E402


class _AnyAttr:
    def __getattr__(self, name: str) -> str:
        return name


class FakeDriver:
    """Records the driver calls :mod:`tessera.runtime.tma` makes."""

    CUresult = SimpleNamespace(CUDA_SUCCESS=0)
    CUtensorMapDataType = _AnyAttr()
    CUtensorMapInterleave = _AnyAttr()
    CUtensorMapSwizzle = _AnyAttr()
    CUtensorMapL2promotion = _AnyAttr()
    CUtensorMapFloatOOBfill = _AnyAttr()
    CUfunction_attribute = _AnyAttr()

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.launches: list[tuple[Any, ...]] = []
        self._maps: list[Any] = []

    @staticmethod
    def cuuint64_t(v: int) -> int:
        return v

    cuuint32_t = cuuint64_t

    @staticmethod
    def CUstream(v: int) -> int:  # noqa: N802
        return v

    def cuTensorMapEncodeTiled(self, dtype: Any, rank: int, addr: int, dims: list[int], *rest: Any) -> tuple[int, Any]:  # noqa: N802
        self.calls.append("encode")
        buf = (ctypes.c_uint64 * 16)(addr, dims[0], dims[1], *rest[1])
        self._maps.append(buf)
        return 0, SimpleNamespace(getPtr=lambda: ctypes.addressof(buf))

    def cuFuncSetAttribute(self, fn: Any, attr: Any, value: int) -> tuple[int]:  # noqa: N802
        self.calls.append(f"attr {value}")
        return (0,)

    def cuLaunchKernel(self, fn: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,  # noqa: N802
                       smem: int, stream: Any, params: int, extra: int) -> tuple[int]:
        self.calls.append("launch")
        array = (ctypes.c_void_p * 3).from_address(params)
        maps = [tuple((ctypes.c_uint64 * 4).from_address(array[i])) for i in (0, 1, 2)]
        aligned = all(array[i] % 64 == 0 for i in (0, 1, 2))
        self.launches.append(((gx, gy, gz), bx, smem, stream, maps, aligned))
        return (0,)


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    fake = FakeDriver()
    monkeypatch.setattr(cuda, "_driver", lambda: fake)
    tma.clear_tensor_maps()
    return fake


def _plan(m: int, n: int, k: int) -> tuple[tma.LaunchExPlan, Sm90Gemm]:
    gemm = Sm90Gemm(m, n, k, "bf16", "bf16", mc.heuristic(m, n, k))
    kernel = build_kernel("g", gemm)
    boxes = gemm.boxes()
    pairs = [(boxes[2 * i], boxes[2 * i + 1]) for i in range(3)]
    return tma.LaunchExPlan(object(), kernel, gemm.grid(), gemm.smem_bytes, pairs), gemm


def test_repeated_launch_does_no_per_call_setup(driver: FakeDriver) -> None:
    plan, gemm = _plan(256, 512, 128)
    assert driver.calls == [f"attr {gemm.smem_bytes}"]
    a = torch.zeros(256, 128, dtype=torch.bfloat16)
    b = torch.zeros(128, 512, dtype=torch.bfloat16)
    c = torch.zeros(256, 512, dtype=torch.bfloat16)
    for _ in range(5):
        plan.launch([c, a, b], stream=7)
    assert driver.calls == [f"attr {gemm.smem_bytes}"] + ["encode"] * 3 + ["launch"] * 5
    grid, block, smem, stream, maps, aligned = driver.launches[-1]
    assert grid == gemm.grid() and block == gemm.threads and smem == gemm.smem_bytes
    assert stream == 7 and aligned
    assert maps[0] == (c.data_ptr(), 512, 256, 64)  # C: the TMA store's 64 x 64 boxes
    assert maps[1] == (a.data_ptr(), 128, 256, 64) and maps[2] == (b.data_ptr(), 512, 128, 64)


def test_new_buffers_get_new_maps(driver: FakeDriver) -> None:
    plan, _ = _plan(128, 128, 64)
    a = torch.zeros(128, 64, dtype=torch.bfloat16)
    b = torch.zeros(64, 128, dtype=torch.bfloat16)
    c = torch.zeros(128, 128, dtype=torch.bfloat16)
    plan.launch([c, a, b], stream=0)
    a2 = torch.ones(128, 64, dtype=torch.bfloat16)
    plan.launch([c, a2, b], stream=0)
    assert driver.calls.count("encode") == 4
    assert driver.launches[-1][4][1][0] == a2.data_ptr()
    with pytest.raises(cuda.LaunchError):
        plan.launch([c, a.t(), b], stream=0)  # not contiguous: no tensor map


def test_run_launch_ex_caches_the_plan_per_op(driver: FakeDriver) -> None:
    from tessera.ir import target as tt

    gemm = Sm90Gemm(128, 128, 64, "bf16", "bf16", mc.heuristic(128, 128, 64))
    kernel = build_kernel("g", gemm)
    op = tt.LaunchExOp("g", [], gemm.grid(), gemm.smem_bytes, gemm.boxes())
    fn = object()
    plan = tma.plan_for(op, kernel, fn)
    assert tma.plan_for(op, kernel, fn) is plan
    assert plan.kinds[1][1] == (64, 128) and plan.kinds[2][1] == (64, 64)


def test_a_training_steps_maps_stay_cached(driver: FakeDriver) -> None:
    """A step looks up its maps in the same order every time; a cache smaller than that
    working set (a LLaMA-style 1B step has about 2,100) would miss on every lookup."""
    plan, _ = _plan(128, 128, 64)
    b = torch.zeros(64, 128, dtype=torch.bfloat16)
    c = torch.zeros(128, 128, dtype=torch.bfloat16)
    inputs = [torch.zeros(128, 64, dtype=torch.bfloat16) for _ in range(3000)]
    for a in inputs:  # the first step encodes every map once
        plan.launch([c, a, b], stream=0)
    assert driver.calls.count("encode") == 3002
    for a in inputs:  # the next step finds them all
        plan.launch([c, a, b], stream=0)
    assert driver.calls.count("encode") == 3002


def test_a_launch_on_the_same_buffers_reuses_its_maps(driver: FakeDriver, monkeypatch) -> None:
    """Each tensor-map parameter remembers its last tensor: a launch on the same buffers
    builds no cache key; another buffer, a transposed view at the same address and shape
    (not contiguous: no map), or ``clear_tensor_maps`` go through the cache again."""
    plan, _ = _plan(128, 128, 128)
    looked_up = []
    real = tma.tensor_map

    def counting(x, box):
        looked_up.append(x.data_ptr())
        return real(x, box)

    monkeypatch.setattr(tma, "tensor_map", counting)
    a, b, c = (torch.zeros(128, 128, dtype=torch.bfloat16) for _ in range(3))
    plan.launch([c, a, b], stream=0)
    assert len(looked_up) == 3
    for _ in range(3):
        plan.launch([c, a, b], stream=0)
    assert len(looked_up) == 3
    a2 = torch.ones(128, 128, dtype=torch.bfloat16)
    plan.launch([c, a2, b], stream=0)
    assert looked_up[3:] == [a2.data_ptr()]
    assert driver.launches[-1][4][1][0] == a2.data_ptr()
    with pytest.raises(cuda.LaunchError):
        plan.launch([c, a2.t(), b], stream=0)  # same address and shape, not contiguous
    plan.launch([c, a, b], stream=0)
    assert driver.launches[-1][4][1][0] == a.data_ptr()
    n = len(looked_up)
    tma.clear_tensor_maps()
    plan.launch([c, a, b], stream=0)
    assert len(looked_up) == n + 3
