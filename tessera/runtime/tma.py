"""Host side of Hopper kernels: TMA tensor maps and launches with dynamic shared memory.

* :func:`encode_tensor_map` builds the 128-byte ``CUtensorMap`` of a 2-D row-major
  torch tensor with ``cuTensorMapEncodeTiled``: dims innermost first, 128-byte
  swizzle (the layout the wgmma descriptors of
  :mod:`tessera.passes.lower_matmul_sm90` assume), zero fill out of bounds.
* :func:`launch_ex` runs a ``ttarget.launch_ex``: raises the kernel's dynamic
  shared-memory limit once, passes ``!ttarget.param<tmap>`` parameters by value
  (64-byte aligned copies of the maps) and the rest like
  :func:`tessera.runtime.cuda.pack_params`.
* :func:`gemm_runner` loads one sm90 matmul kernel and returns ``run(c, a, b)``
  (the autotuner and the GPU tests use it).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from typing import Any

from tessera.ir import target as tt
from tessera.runtime import cuda

TENSOR_MAP_BYTES = 128

_SMEM_SET: set[tuple[int, int]] = set()


def _dtype_enum(x: Any) -> Any:
    import torch

    d = cuda._driver()
    t = d.CUtensorMapDataType
    table = {
        torch.bfloat16: t.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        torch.float16: t.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        torch.float32: t.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    }
    if x.dtype not in table:
        raise cuda.LaunchError(f"no TMA element type for {x.dtype}")
    return table[x.dtype]


def encode_tensor_map(x: Any, box: tuple[int, int]) -> ctypes.Array[ctypes.c_char]:
    """The ``CUtensorMap`` of the 2-D contiguous tensor ``x`` with a ``box = (inner, outer)``
    box, as a 64-byte aligned buffer of 128 bytes."""
    d = cuda._driver()
    if x.dim() != 2 or not x.is_contiguous():
        raise cuda.LaunchError("a tensor map needs a contiguous 2-D tensor")
    rows, cols = x.shape
    esize = x.element_size()
    if (cols * esize) % 16 or x.data_ptr() % 16:
        raise cuda.LaunchError(
            f"a tensor map needs 16-byte aligned rows and base: {tuple(x.shape)} {x.dtype}"
        )
    tmap = cuda.check(
        d.cuTensorMapEncodeTiled(
            _dtype_enum(x), 2, x.data_ptr(),
            [d.cuuint64_t(cols), d.cuuint64_t(rows)],
            [d.cuuint64_t(cols * esize)],
            [d.cuuint32_t(box[0]), d.cuuint32_t(box[1])],
            [d.cuuint32_t(1), d.cuuint32_t(1)],
            d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        ),
        "cuTensorMapEncodeTiled",
    )
    raw = ctypes.string_at(tmap.getPtr(), TENSOR_MAP_BYTES)
    buf = _aligned(TENSOR_MAP_BYTES, 64)
    ctypes.memmove(buf, raw, TENSOR_MAP_BYTES)
    return buf


def _aligned(size: int, align: int) -> Any:
    """A ctypes buffer of ``size`` bytes at an ``align``-byte aligned address."""
    store = (ctypes.c_char * (size + align))()
    addr = ctypes.addressof(store)
    pad = (-addr) % align
    view = (ctypes.c_char * size).from_buffer(store, pad)
    view._keep = store  # type: ignore[attr-defined]
    return view


def pack_params_ex(
    kernel: tt.FuncOp, values: Sequence[Any], boxes: Sequence[tuple[int, int]]
) -> tuple[int, list[Any]]:
    """The ``void**`` parameter array for ``cuLaunchKernel`` (tensor maps by value)."""
    import torch

    keep: list[Any] = []
    for p, v, box in zip(kernel.block.args, values, boxes, strict=True):
        assert isinstance(p.type, tt.ParamType)
        ty = p.type.ty.data
        if ty == "tmap":
            keep.append(encode_tensor_map(v, box))
        elif isinstance(v, torch.Tensor):
            keep.append(ctypes.c_uint64(v.data_ptr()))
        else:
            keep.append(cuda._CTYPES[ty](int(v) if isinstance(v, bool) else v))
    array = (ctypes.c_void_p * max(1, len(keep)))(*[ctypes.addressof(k) for k in keep])
    keep.append(array)
    return ctypes.addressof(array), keep


def launch_ex(
    function: Any, kernel: tt.FuncOp, grid: Sequence[int], smem: int, values: Sequence[Any],
    boxes: Sequence[tuple[int, int]], stream: int | None = None,
) -> None:
    """Launch ``function`` with ``smem`` bytes of dynamic shared memory and tensor maps."""
    import torch

    d = cuda._driver()
    key = (int(function), smem) if hasattr(function, "__int__") else (id(function), smem)
    if smem > 48 * 1024 and key not in _SMEM_SET:
        cuda.check(
            d.cuFuncSetAttribute(
                function, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem,
            ),
            f"cuFuncSetAttribute({kernel.sym_name.data}, max dynamic shared = {smem})",
        )
        _SMEM_SET.add(key)
    if stream is None:
        stream = torch.cuda.current_stream().cuda_stream
    params, keep = pack_params_ex(kernel, values, boxes)
    gx, gy, gz = (tuple(grid) + (1, 1, 1))[:3]
    cuda.check(
        d.cuLaunchKernel(
            function, gx, gy, gz, kernel.maxntid.data, 1, 1, smem, d.CUstream(stream), params, 0
        ),
        f"cuLaunchKernel({kernel.sym_name.data})",
    )
    del keep
    if os.environ.get("TESSERA_CUDA_SYNC"):
        cuda.check(d.cuStreamSynchronize(d.CUstream(stream)), f"kernel {kernel.sym_name.data}")


def run_launch_ex(op: tt.LaunchExOp, kernel: tt.FuncOp, function: Any, values: Sequence[Any]) -> None:
    """Run one host ``ttarget.launch_ex`` (called by :func:`tessera.runtime.cuda.run_host`)."""
    boxes = [op.box(i) for i in range(len(values))]
    launch_ex(function, kernel, op.grid_value(), op.smem.value.data, values, boxes)


def gemm_runner(gemm: Any) -> Callable[[Any, Any, Any], None]:
    """Load the sm90 kernel for ``gemm`` (a :class:`~tessera.passes.lower_matmul_sm90.Sm90Gemm`)
    and return ``run(c, a, b)`` launching it on torch tensors."""
    import torch

    from tessera.passes.emit_ptx import emit_ptx
    from tessera.passes.lower_matmul_sm90 import build_kernel

    kernel = build_kernel("tessera_gemm_sm90", gemm)
    module = cuda.load_module(emit_ptx(kernel), torch.cuda.current_device())
    function = cuda.get_function(module, "tessera_gemm_sm90")
    grid, smem, boxes = gemm.grid(), gemm.smem_bytes, gemm.boxes()
    pairs = [(boxes[2 * i], boxes[2 * i + 1]) for i in range(3)]

    def run(c: Any, a: Any, b: Any) -> None:
        launch_ex(function, kernel, grid, smem, [c, a, b], pairs)

    return run
