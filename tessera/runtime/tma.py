"""Host side of Hopper kernels: TMA tensor maps and launches with dynamic shared memory.

* :func:`encode_tensor_map` builds the 128-byte ``CUtensorMap`` of a row-major
  torch tensor seen as 2-D (the last dim by the product of the others) with ``cuTensorMapEncodeTiled``: dims innermost first, 128-byte
  swizzle (the layout the wgmma descriptors of
  :mod:`tessera.passes.sm90.lower_matmul_sm90` assume), zero fill out of bounds.
  :func:`tensor_map` keeps the encoded maps in a bounded cache keyed by address,
  shape, strides, dtype and box, so a repeated call on the same buffers encodes
  nothing (a map only describes those, so a hit is always the same map).
* :class:`LaunchExPlan` is everything about one ``ttarget.launch_ex`` that does not
  change between calls: the grid, block and shared-memory size read off the IR
  once, the kind of each parameter, a ``void**`` parameter array that is refilled
  in place, and the kernel's dynamic shared-memory limit raised once at
  construction. :meth:`LaunchExPlan.launch` only fills in pointers and tensor maps
  and calls ``cuLaunchKernel``.
* :func:`run_launch_ex` runs a host ``ttarget.launch_ex`` through the plan cached
  for that op and function; :func:`launch_ex` does the same for an explicit
  grid, shared-memory size and boxes.
* :func:`kernel_runner` loads one kernel given its ``ttarget.func`` and PTX (once per
  specialization and device) and returns ``run(*tensors)``
  (``tessera.tuning.sm90.gemm_runner`` builds the sm90 matmul kernels with it for the
  autotuner, the GPU tests and ``bench/gemm_sweep.py``).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from tessera.ir import target as tt
from tessera.options import RuntimeOptions
from tessera.runtime import cuda

TENSOR_MAP_BYTES = 128
SMEM_DEFAULT_LIMIT = 48 * 1024
"""Dynamic shared memory a kernel may use without ``cuFuncSetAttribute``."""
MAP_CACHE_SIZE = 16384
"""Encoded tensor maps kept (least recently used dropped first). A training step looks
up its maps in the same order every step, so when it uses more distinct maps than the
cache holds, every lookup misses. A LLaMA-style 1B step makes about 2,100 lookups (130
per layer, counted in its launch modules; how many are distinct depends on the
addresses torch hands out). An entry is a 128-byte map and its key."""

_MAPS: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_MAPS_LOCK = threading.Lock()
_STATS = {"encodes": 0, "smem_attribute_sets": 0}
"""Counters of the per-call work this module avoids (tests read them)."""


def _dtype_enum(x: Any) -> Any:
    import torch

    d = cuda._driver()
    t = d.CUtensorMapDataType
    table = {
        torch.bfloat16: t.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        torch.float16: t.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        torch.float32: t.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        # fp8 elements are moved as bytes (the wgmma instruction names their format)
        torch.float8_e4m3fn: t.CU_TENSOR_MAP_DATA_TYPE_UINT8,
        torch.float8_e5m2: t.CU_TENSOR_MAP_DATA_TYPE_UINT8,
    }
    if x.dtype not in table:
        raise cuda.LaunchError(f"no TMA element type for {x.dtype}")
    return table[x.dtype]


def encode_tensor_map(x: Any, box: tuple[int, int]) -> ctypes.Array[ctypes.c_char]:
    """The ``CUtensorMap`` of the contiguous tensor ``x`` seen as 2-D (its last dim by the
    product of the others) with a ``box = (inner, outer)`` box, as a 64-byte aligned
    buffer of 128 bytes."""
    d = cuda._driver()
    if x.dim() < 2 or not x.is_contiguous():
        raise cuda.LaunchError("a tensor map needs a contiguous tensor of rank >= 2")
    cols = x.shape[-1]
    rows = x.numel() // cols if cols else 0
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
    _STATS["encodes"] += 1
    raw = ctypes.string_at(tmap.getPtr(), TENSOR_MAP_BYTES)
    buf = _aligned(TENSOR_MAP_BYTES, 64)
    ctypes.memmove(buf, raw, TENSOR_MAP_BYTES)
    return buf


def tensor_map(x: Any, box: tuple[int, int]) -> ctypes.Array[ctypes.c_char]:
    """:func:`encode_tensor_map`, cached by (address, shape, strides, dtype, box)."""
    key = (x.data_ptr(), x.shape, x.stride(), x.dtype, box)
    with _MAPS_LOCK:
        found = _MAPS.get(key)
        if found is not None:
            _MAPS.move_to_end(key)
            return found
    buf = encode_tensor_map(x, box)
    with _MAPS_LOCK:
        _MAPS[key] = buf
        while len(_MAPS) > MAP_CACHE_SIZE:
            _MAPS.popitem(last=False)
    return buf


_GENERATION = [0]
"""Bumped by :func:`clear_tensor_maps`: a launch plan's last map per parameter
(``LaunchExPlan``) counts only within one generation."""


def clear_tensor_maps() -> None:
    """Forget every cached tensor map (also each launch plan's last ones)."""
    with _MAPS_LOCK:
        _MAPS.clear()
        _GENERATION[0] += 1


def _aligned(size: int, align: int) -> Any:
    """A ctypes buffer of ``size`` bytes at an ``align``-byte aligned address."""
    store = (ctypes.c_char * (size + align))()
    addr = ctypes.addressof(store)
    pad = (-addr) % align
    view = (ctypes.c_char * size).from_buffer(store, pad)
    view._keep = store  # type: ignore[attr-defined]
    return view


_TMAP, _PTR, _SCALAR = 0, 1, 2


class LaunchExPlan:
    """One kernel launch with tensor maps and dynamic shared memory, prepared once.

    ``boxes`` holds an ``(inner, outer)`` box per parameter; a ``tmap`` parameter is
    passed as the cached tensor map of its tensor with that box, a ``u64`` tensor
    by its address, other values as their ``.param`` type. The parameter array is
    owned by the plan and refilled under a lock on each launch (the driver copies
    the values during ``cuLaunchKernel``).
    """

    def __init__(
        self, function: Any, kernel: tt.FuncOp, grid: Sequence[int], smem: int,
        boxes: Sequence[tuple[int, int]],
    ) -> None:
        params = kernel.block.args
        if len(boxes) != len(params):
            raise cuda.LaunchError(
                f"{kernel.sym_name.data}: {len(boxes)} boxes for {len(params)} parameters"
            )
        self.function = function
        self.name = kernel.sym_name.data
        self.grid: tuple[int, int, int] = tuple((tuple(grid) + (1, 1, 1))[:3])  # type: ignore[assignment]
        self.block = int(kernel.maxntid.data)
        self.cluster = kernel.cluster_size
        if self.grid[0] % self.cluster:
            raise cuda.LaunchError(
                f"{self.name}: grid x size {self.grid[0]} is not a multiple of the cluster "
                f"size {self.cluster}"
            )
        self.smem = int(smem)
        self.kinds: list[tuple[int, tuple[int, int]]] = []
        self._slots: list[Any] = []
        self._array = (ctypes.c_void_p * max(1, len(params)))()
        self._keep: list[Any] = [None] * len(params)
        # per tensor-map parameter, the last tensor's (address, shape, dtype, generation)
        # and its map: a launch on the same buffer (a training step's, call after call)
        # reuses it without building the cache key
        self._last: list[tuple[Any, ...] | None] = [None] * len(params)
        for i, (p, box) in enumerate(zip(params, boxes)):
            assert isinstance(p.type, tt.ParamType)
            ty = p.type.ty.data
            if ty == "tmap":
                self.kinds.append((_TMAP, (int(box[0]), int(box[1]))))
                self._slots.append(None)
                continue
            slot = cuda._CTYPES[ty]()
            self.kinds.append((_PTR if ty in ("u64", "b64") else _SCALAR, (0, 0)))
            self._slots.append(slot)
            self._array[i] = ctypes.addressof(slot)
        self._params = ctypes.addressof(self._array)
        self._lock = threading.Lock()
        self._streams: dict[int, Any] = {}
        self._sync = RuntimeOptions.from_env().cuda_sync
        raw, handle = cuda.raw_launch(), cuda.function_handle(function)
        self._raw = (
            (raw, ctypes.c_void_p(handle), ctypes.c_void_p(self._params))
            if raw is not None and handle is not None else None
        )
        if self.smem > SMEM_DEFAULT_LIMIT:
            d = cuda._driver()
            cuda.check(
                d.cuFuncSetAttribute(
                    function,
                    d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    self.smem,
                ),
                f"cuFuncSetAttribute({self.name}, max dynamic shared = {self.smem})",
            )
            _STATS["smem_attribute_sets"] += 1

    def resident_ctas(self) -> int:
        """CTAs of this launch that the device can hold at once
        (``cuOccupancyMaxActiveClusters`` times the cluster size; for a persistent grid,
        a grid larger than this waits for whole clusters to finish)."""
        d = cuda._driver()
        cfg = d.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = self.grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = self.block, 1, 1
        cfg.sharedMemBytes = self.smem
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = (
            self.cluster, 1, 1,
        )
        cfg.attrs = [attr]
        cfg.numAttrs = 1
        n = cuda.check(
            d.cuOccupancyMaxActiveClusters(self.function, cfg),
            f"cuOccupancyMaxActiveClusters({self.name})",
        )
        return int(n) * self.cluster

    def _stream(self, stream: int) -> Any:
        found = self._streams.get(stream)
        if found is None:
            found = self._streams[stream] = cuda._driver().CUstream(stream)
        return found

    def launch(self, values: Sequence[Any], stream: int | None = None) -> None:
        """Launch on ``values`` (torch tensors or scalars, one per parameter)."""
        if len(values) != len(self.kinds):
            raise cuda.LaunchError(f"{self.name}: takes {len(self.kinds)} arguments, got {len(values)}")
        if stream is None:
            import torch

            stream = torch.cuda.current_stream().cuda_stream
        gx, gy, gz = self.grid
        raw = self._raw
        with self._lock:
            gen = _GENERATION[0]
            for i, ((kind, box), v) in enumerate(zip(self.kinds, values)):
                if kind == _TMAP:
                    last = self._last[i]
                    ptr = v.data_ptr()
                    if (last is not None and last[0] == ptr and last[1] == v.shape
                            and last[2] is v.dtype and last[3] == gen and v.is_contiguous()):
                        continue  # the parameter array still points at this map
                    buf = tensor_map(v, box)
                    self._last[i] = (ptr, v.shape, v.dtype, gen)
                    self._keep[i] = buf
                    self._array[i] = ctypes.addressof(buf)
                elif kind == _PTR:
                    self._slots[i].value = v.data_ptr() if hasattr(v, "data_ptr") else int(v)
                else:
                    self._slots[i].value = int(v) if isinstance(v, bool) else v
            if raw is not None and not self._sync:
                code = raw[0](raw[1], gx, gy, gz, self.block, 1, 1, self.smem,
                              cuda.void_p(stream), raw[2], None)
                if code:
                    cuda.check_raw(code, f"cuLaunchKernel({self.name})")
                return
            d = cuda._driver()
            cuda.check(
                d.cuLaunchKernel(
                    self.function, gx, gy, gz, self.block, 1, 1, self.smem,
                    self._stream(stream), self._params, 0,
                ),
                f"cuLaunchKernel({self.name})",
            )
        if self._sync:
            cuda.check(d.cuStreamSynchronize(self._stream(stream)), f"kernel {self.name}")


def _handle(function: Any) -> int:
    """A hashable identity of a ``CUfunction`` (its handle, else the object's id)."""
    try:
        return int(function)
    except (TypeError, ValueError):
        return id(function)


_OP_PLANS: weakref.WeakKeyDictionary[tt.LaunchExOp, dict[int, LaunchExPlan]] = (
    weakref.WeakKeyDictionary()
)
_KERNEL_PLANS: weakref.WeakKeyDictionary[tt.FuncOp, dict[tuple[Any, ...], LaunchExPlan]] = (
    weakref.WeakKeyDictionary()
)


def launch_ex(
    function: Any, kernel: tt.FuncOp, grid: Sequence[int], smem: int, values: Sequence[Any],
    boxes: Sequence[tuple[int, int]], stream: int | None = None,
) -> None:
    """Launch ``function`` with ``smem`` bytes of dynamic shared memory and tensor maps
    (through a :class:`LaunchExPlan` cached per kernel, function, grid, smem and boxes)."""
    per_kernel = _KERNEL_PLANS.get(kernel)
    if per_kernel is None:
        per_kernel = _KERNEL_PLANS[kernel] = {}
    key = (_handle(function), tuple(grid), smem, tuple((int(a), int(b)) for a, b in boxes))
    plan = per_kernel.get(key)
    if plan is None:
        plan = per_kernel[key] = LaunchExPlan(function, kernel, grid, smem, boxes)
    plan.launch(values, stream)


def plan_for(op: tt.LaunchExOp, kernel: tt.FuncOp, function: Any) -> LaunchExPlan:
    """The cached :class:`LaunchExPlan` of a host ``ttarget.launch_ex`` and its loaded function."""
    per_op = _OP_PLANS.get(op)
    if per_op is None:
        per_op = _OP_PLANS[op] = {}
    handle = _handle(function)
    plan = per_op.get(handle)
    if plan is None:
        boxes = [op.box(i) for i in range(len(kernel.block.args))]
        plan = per_op[handle] = LaunchExPlan(
            function, kernel, op.grid_value(), op.smem.value.data, boxes
        )
    return plan


def run_launch_ex(
    op: tt.LaunchExOp, kernel: tt.FuncOp, function: Any, values: Sequence[Any],
    stream: int | None = None,
) -> None:
    """Run one host ``ttarget.launch_ex`` (called by :func:`tessera.runtime.cuda.run_host`)
    on the raw stream handle ``stream`` (default: torch's current stream)."""
    plan_for(op, kernel, function).launch(values, stream)


_RUNNERS: dict[tuple[Any, int], Callable[..., None]] = {}


def kernel_runner(
    spec: Any,
    name: str,
    build: Callable[[], tuple[tt.FuncOp, str]],
    grid: Sequence[int],
    smem: int,
    boxes: Sequence[tuple[int, int]],
) -> Callable[..., None]:
    """``run(*tensors, stream=None)`` launching the kernel ``name`` that ``build()`` returns
    (its ``ttarget.func`` and PTX) with tensor maps of ``boxes``; built and loaded once per
    ``spec`` (a hashable description of the kernel) and device. ``run.plan`` is the
    :class:`LaunchExPlan`."""
    import torch

    device = torch.cuda.current_device()
    found = _RUNNERS.get((spec, device))
    if found is not None:
        return found
    kernel, ptx = build()
    module = cuda.load_module(ptx, device)
    function = cuda.get_function(module, name)
    plan = LaunchExPlan(function, kernel, grid, smem, boxes)

    def run(*tensors: Any, stream: int | None = None) -> None:
        plan.launch(tensors, stream)

    run.plan = plan  # type: ignore[attr-defined]
    _RUNNERS[(spec, device)] = run
    return run
