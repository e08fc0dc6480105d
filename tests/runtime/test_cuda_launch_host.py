"""``KernelLaunch`` on CPU through a stand-in driver: parameters are packed by the kernel's
declared types, tensors by address, and grid/block come from the IR."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tessera.passes.pipelines import lower_to_target, lower_to_tile  # noqa: E402
from tessera.runtime import cuda  # noqa: E402


class FakeDriver:
    CUresult = SimpleNamespace(CUDA_SUCCESS=0)

    def __init__(self, nparams: int) -> None:
        self.nparams = nparams
        self.launches: list[tuple[Any, ...]] = []

    @staticmethod
    def CUstream(v: int) -> int:  # noqa: N802
        return v

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # noqa: N802
        # The parameter array lives only during the call: read the pointed-to values now.
        ptrs = (ctypes.c_void_p * self.nparams).from_address(params)
        values = [ctypes.c_uint64.from_address(p).value for p in ptrs]
        self.launches.append((fn, (gx, gy, gz), (bx, by, bz), stream, values))
        return (0,)


def _target_module():
    from xdsl.parser import Parser

    from tessera.passes.pipelines import default_context

    text = """
func.func @f(%a: tensor<37x45xf32>, %b: tensor<37x45xf32>) -> tensor<37x45xf32> {
  %c = tgraph.add %a, %b : (tensor<37x45xf32>, tensor<37x45xf32>) -> tensor<37x45xf32>
  func.return %c : tensor<37x45xf32>
}
"""
    return lower_to_target(lower_to_tile(Parser(default_context(), text).parse_module()))


def test_kernel_launch_packs_parameters(monkeypatch):
    from tessera.ir import target as tt

    module = _target_module()
    kernel = next(op for op in module.body.block.ops if isinstance(op, tt.FuncOp))
    nparams = len(kernel.block.args)
    fake = FakeDriver(nparams)
    monkeypatch.setattr(cuda, "_driver", lambda: fake)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: SimpleNamespace(cuda_stream=7))
    tensors = [torch.empty(37, 45) for _ in range(nparams)]
    run = cuda.KernelLaunch("fn", kernel, [5])
    run(tensors)
    run(tensors)
    assert len(fake.launches) == 2
    fn, grid, block, stream, values = fake.launches[0]
    assert (fn, grid, block, stream) == ("fn", (5, 1, 1), (kernel.maxntid.data, 1, 1), 7)
    assert values == [t.data_ptr() for t in tensors]
    assert fake.launches[1] == fake.launches[0]


class RawLaunch:
    """Stands in for the ctypes ``cuLaunchKernel`` (no ``argtypes``): records what a call
    would hand the C function, reading the parameter array during the call."""

    def __init__(self, nparams: int, code: int = 0) -> None:
        self.nparams, self.code = nparams, code
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        # pointers arrive as c_void_p objects (an int would be passed as a 32-bit int)
        assert all(isinstance(p, ctypes.c_void_p) for p in (fn, stream, params))
        assert all(type(v) is int and 0 <= v < 2**31 for v in (gx, gy, gz, bx, by, bz, smem))
        assert extra is None
        ptrs = (ctypes.c_void_p * self.nparams).from_address(params.value)
        values = [ctypes.c_uint64.from_address(p).value for p in ptrs]
        self.calls.append((fn.value, (gx, gy, gz), (bx, by, bz), smem, stream.value, values))
        return self.code


def test_raw_launch_passes_pointers_as_void_p(monkeypatch):
    from tessera.ir import target as tt

    module = _target_module()
    kernel = next(op for op in module.body.block.ops if isinstance(op, tt.FuncOp))
    nparams = len(kernel.block.args)
    raw = RawLaunch(nparams)
    monkeypatch.setattr(cuda, "_driver", lambda: FakeDriver(nparams))
    monkeypatch.setattr(cuda, "raw_launch", lambda: raw)
    monkeypatch.setattr(cuda, "function_handle", lambda fn: 0x7F00_0000_1234)
    tensors = [torch.empty(37, 45) for _ in range(nparams)]
    run = cuda.KernelLaunch("fn", kernel, [5], tensors=[True] * nparams)
    stream = 0x7F12_3456_7890  # a 64-bit handle: would be cut to 32 bits as an int
    run.launch(tensors, stream)
    run.launch(tensors[::-1], stream)
    first, second = raw.calls
    assert first[:5] == (0x7F00_0000_1234, (5, 1, 1), (kernel.maxntid.data, 1, 1), 0, stream)
    assert first[5] == [t.data_ptr() for t in tensors]
    assert second[5] == [t.data_ptr() for t in tensors[::-1]]


def test_raw_launch_failure_is_a_cuda_error(monkeypatch):
    from tessera.ir import target as tt

    module = _target_module()
    kernel = next(op for op in module.body.block.ops if isinstance(op, tt.FuncOp))
    nparams = len(kernel.block.args)

    class Driver(FakeDriver):
        class CUresult(int):  # noqa: N801 - the driver's name
            CUDA_SUCCESS = 0

        @staticmethod
        def cuGetErrorName(code):  # noqa: N802
            return 0, b"CUDA_ERROR_ILLEGAL_ADDRESS" if code == 700 else b"?"

        @staticmethod
        def cuGetErrorString(code):  # noqa: N802
            return 0, b"an illegal memory access was encountered"

    monkeypatch.setattr(cuda, "_driver", lambda: Driver(nparams))
    monkeypatch.setattr(cuda, "raw_launch", lambda: RawLaunch(nparams, code=700))
    monkeypatch.setattr(cuda, "function_handle", lambda fn: 1)
    run = cuda.KernelLaunch("fn", kernel, [5], tensors=[True] * nparams)
    with pytest.raises(cuda.CudaError, match=f"{kernel.sym_name.data}.*ILLEGAL_ADDRESS"):
        run.launch([torch.empty(37, 45) for _ in range(nparams)], 0)
