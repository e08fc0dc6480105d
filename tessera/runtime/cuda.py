"""Run Target IR programs on an NVIDIA GPU through the CUDA driver (cuda.bindings).

* :func:`load_module` turns PTX into a loaded ``CUmodule`` with
  ``cuModuleLoadDataEx``, passing the JIT error/info log buffers so a rejected
  PTX raises :class:`CudaError` with the assembler's message. Loaded modules are
  kept per process (:class:`tessera.runtime.cache.ModuleCache`). When ptxas is
  available the cubin is built by ptxas in a subprocess and cached on disk
  (:mod:`tessera.runtime.cache`, keyed by PTX hash, arch, ptxas and driver
  versions); otherwise the driver JIT-compiles the PTX.
* :func:`launch` runs one kernel on ``torch.cuda.current_stream()``.
* :func:`run_host` runs the host ``func.func`` of a lowered module (``memref.alloc``,
  ``memref.get_global``, ``memref.collapse_shape`` / ``expand_shape`` (torch views),
  ``arith.constant``, ``ttarget.launch``, host collectives such
  as ``ttarget.all_reduce`` through :mod:`tessera.runtime.host_collectives`,
  ``func.return``) on torch CUDA tensors and returns torch tensors.

Arguments: torch tensors on the current CUDA device, with the dtype and shape of
the memref parameter. A CPU tensor, a tensor on another device, or a wrong
dtype/shape raises :class:`LaunchError`. A non-contiguous input, or one whose data
does not start on a 16-byte boundary (a view at an offset), is copied to a
contiguous, aligned one first (inputs are only read, so the copy is invisible);
kernels may then use 16-byte vector and async accesses on every buffer. Outputs
are ``torch.empty`` on the same device; with ``poison=True`` float outputs are
filled with NaN before any kernel runs (tests use this to catch unwritten
elements). Every driver call is checked; a failure raises :class:`CudaError`
with the ``CUresult`` name and message. Set ``TESSERA_CUDA_SYNC=1`` to
synchronize after each launch so that an asynchronous fault is reported at the
launch that caused it (read when a launch is prepared, i.e. on a host plan's
first run, not on every call).

Repeated calls: :meth:`HostPlan.runner` turns a plan into one closure that checks
its arguments against the plan's static shapes and dtypes, allocates outputs, reads
torch's raw current stream once and refills each launch's preallocated parameter
buffer (:class:`KernelLaunch`); ``ts.jit`` keeps it per signature
(:func:`specialization_runner`). Arguments it does not accept go through
:meth:`HostPlan.run` and its checks.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from math import prod
from typing import Any

from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import (
    BFloat16Type,
    ComplexType,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    TensorType,
)
from xdsl.ir import Attribute, SSAValue

from tessera.errors import TesseraError
from tessera.ir import host_collectives as hc
from tessera.ir import target as tt
from tessera.options import RuntimeOptions
from tessera.runtime import arena, cache

LOG_SIZE = 1 << 16

LAUNCH_HOOK: Any = None
"""Set by ``ts.profiler`` while a session is active and by kernel checking
(:mod:`tessera.runtime.kernel_check`), else None. ``LAUNCH_HOOK.specialization(spec)``
is told which compiled specialization runs next; ``LAUNCH_HOOK.launch(host, kernel, grid, values,
run)`` is called instead of each kernel launch and calls ``run()`` to launch it."""


class CudaError(TesseraError, RuntimeError):
    """A CUDA driver call failed; the message names the call and the CUresult."""


class LaunchError(TesseraError, ValueError):
    """The arguments cannot be passed to the kernel (device, dtype, shape, count)."""


# --------------------------------------------------------------------------- driver


def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError as e:  # pragma: no cover - cuda-python is a dependency
        raise CudaError(f"cuda-python is not installed: {e}") from None
    return driver


_RAW_LAUNCH: list[Any] = []


def raw_launch() -> Any:
    """``cuLaunchKernel`` of the driver library through ctypes (the same library
    cuda-python loaded), or None while the driver is a stand-in (tests) or the symbol
    cannot be had. A launch through it costs a foreign call instead of cuda-python's
    argument conversion and result enum: microseconds per kernel, two thousand kernels
    a training step.

    The function has no ``argtypes``: ctypes then passes a Python int as a C ``int``
    without converting it through a ctypes object per argument (the grid, block and
    shared-memory sizes, all below 2^31, which the ABI passes as the ``unsigned int``
    the driver declares), so the caller passes the pointers (function handle, stream,
    parameter array) as ``ctypes.c_void_p`` objects made once (:func:`void_p`) and the
    ``extra`` argument as None. On an H200 an empty kernel's launch took 4.98 us this way
    against 8.31 us with ``argtypes`` (docs/PERFORMANCE.md, 2026-12-04)."""
    if getattr(_driver(), "__name__", None) != "cuda.bindings.driver":
        return None
    if not _RAW_LAUNCH:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            fn = lib["cuLaunchKernel"]  # a function object of its own (no shared argtypes)
            fn.restype = ctypes.c_int
        except (OSError, AttributeError):
            fn = None
        _RAW_LAUNCH.append(fn)
    return _RAW_LAUNCH[0]


_VOID_P: dict[int, ctypes.c_void_p] = {}


def void_p(address: int) -> ctypes.c_void_p:
    """A ``ctypes.c_void_p`` of ``address``, made once per address (the raw launch's
    stream argument: a handful of streams, one object each)."""
    found = _VOID_P.get(address)
    if found is None:
        if len(_VOID_P) > 4096:  # streams made and dropped by the thousand: start over
            _VOID_P.clear()
        found = _VOID_P[address] = ctypes.c_void_p(address)
    return found


def function_handle(function: Any) -> int | None:
    """The ``CUfunction`` handle of a cuda-python function object, or None."""
    try:
        return int(function)
    except (TypeError, ValueError):
        return None


def check_raw(code: int, what: str) -> None:
    """Raise :class:`CudaError` for a raw driver result code other than success."""
    if code:
        check((_driver().CUresult(code),), what)


def check(result: Any, what: str) -> Any:
    """Unpack a cuda.bindings ``(CUresult, value...)`` tuple, raising :class:`CudaError`."""
    d = _driver()
    err = result[0] if isinstance(result, tuple) else result
    if err != d.CUresult.CUDA_SUCCESS:
        _, name = d.cuGetErrorName(err)
        _, msg = d.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(err)
        msg = msg.decode() if isinstance(msg, bytes) else ""
        raise CudaError(f"{what} failed: {name}: {msg}")
    if isinstance(result, tuple):
        rest = result[1:]
        return rest[0] if len(rest) == 1 else (rest or None)
    return None


_initialized = False


def init() -> None:
    """Initialize the driver (once); raise :class:`CudaError` if there is no driver or GPU."""
    global _initialized
    if _initialized:
        return
    try:
        check(_driver().cuInit(0), "cuInit")
    except CudaError:
        raise
    except Exception as e:  # the driver library itself is missing
        raise CudaError(f"cuInit failed: no usable CUDA driver ({type(e).__name__}: {e})") from None
    _initialized = True


def driver_version() -> str:
    init()
    return str(check(_driver().cuDriverGetVersion(), "cuDriverGetVersion"))


def _set_context(device: int) -> None:
    """Make the device's primary context (the one torch uses) current on this thread."""
    d = _driver()
    init()
    dev = check(d.cuDeviceGet(device), "cuDeviceGet")
    ctx = check(d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def device_arch(device: int) -> str:
    """``sm_XY`` (``sm_90a`` for Hopper) of a device."""
    d = _driver()
    init()
    dev = check(d.cuDeviceGet(device), "cuDeviceGet")
    attr = d.CUdevice_attribute
    major = check(
        d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
        "cuDeviceGetAttribute",
    )
    minor = check(
        d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
        "cuDeviceGetAttribute",
    )
    arch = f"sm_{major}{minor}"
    return arch + "a" if arch == "sm_90" else arch


# --------------------------------------------------------------------------- modules

_MODULES = cache.ModuleCache()


def _load_image(image: bytes, what: str) -> Any:
    """``cuModuleLoadDataEx`` with JIT logs; a failure carries the JIT error log."""
    d = _driver()
    errors = bytearray(LOG_SIZE)
    info = bytearray(LOG_SIZE)
    opt = d.CUjit_option
    options = [
        opt.CU_JIT_ERROR_LOG_BUFFER,
        opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        opt.CU_JIT_INFO_LOG_BUFFER,
        opt.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
        opt.CU_JIT_LOG_VERBOSE,
    ]
    values = [errors, LOG_SIZE, info, LOG_SIZE, 1]
    res = d.cuModuleLoadDataEx(image, len(options), options, values)
    try:
        return check(res, f"cuModuleLoadDataEx ({what})")
    except CudaError as e:
        log = errors.split(b"\0", 1)[0].decode(errors="replace").strip()
        raise CudaError(f"{e}\n{log}" if log else str(e)) from None


def load_module(ptx: str, device: int = 0) -> Any:
    """The loaded ``CUmodule`` for ``ptx`` on ``device`` (cached per process)."""
    _set_context(device)
    found = _MODULES.get(ptx, device)
    if found is not None:
        return found
    module = None
    from tessera.runtime import ptxas

    if ptxas.find_ptxas() is not None and RuntimeOptions.from_env().disk_cache:
        arch = device_arch(device)
        key = cache.cache_key(ptx, arch, ptxas.version(), driver_version())
        try:
            cubin = cache.cubin_for(
                ptx, arch, ptxas.version(), driver_version(), lambda: ptxas.assemble(ptx, arch)
            )
            module = _load_image(cubin, "cubin")
        except CudaError as e:
            cache.discard_cubin(key)  # rebuilt by the next process instead of failing again
            warnings.warn(
                f"tessera: cached cubin did not load ({e}); loading the PTX through the driver JIT",
                stacklevel=2,
            )
    if module is None:
        module = _load_image(ptx.encode() + b"\0", "PTX")
    _MODULES.put(ptx, device, module)
    return module


def get_function(module: Any, name: str) -> Any:
    return check(_driver().cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")


# --------------------------------------------------------------------------- arguments

_CTYPES = {
    "u64": ctypes.c_uint64, "s64": ctypes.c_int64, "b64": ctypes.c_uint64,
    "u32": ctypes.c_uint32, "s32": ctypes.c_int32, "b32": ctypes.c_uint32,
    "f32": ctypes.c_float, "f64": ctypes.c_double,
}


def torch_dtype(t: Attribute) -> Any:
    """The torch dtype storing elements of IR type ``t``."""
    import torch

    if isinstance(t, Float32Type):
        return torch.float32
    if isinstance(t, Float64Type):
        return torch.float64
    if isinstance(t, BFloat16Type):
        return torch.bfloat16
    if isinstance(t, Float16Type):
        return torch.float16
    if isinstance(t, IntegerType):
        w = t.width.data
        table = {1: torch.bool, 8: torch.int8, 16: torch.int16, 32: torch.int32, 64: torch.int64}
        if w in table:
            return table[w]
    if isinstance(t, IndexType):
        return torch.int64
    name = str(t)
    if name == "f8E4M3FN":
        return torch.float8_e4m3fn
    if name == "f8E5M2":
        return torch.float8_e5m2
    raise LaunchError(f"no torch dtype for element type {t}")


ALIGNMENT = 16
"""Bytes every buffer passed to a kernel is aligned to (the widest vector access)."""


def torch_device(index: int) -> Any:
    """The torch device of CUDA device ``index`` (outputs are allocated there; the CPU
    benchmark of the host path, ``bench/host_path.py``, replaces this)."""
    import torch

    return torch.device("cuda", index)


def device_getter() -> Callable[[], int]:
    """The cheapest call returning torch's current CUDA device index."""
    import torch

    return getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def stream_getter() -> Callable[[int], int]:
    """The cheapest call ``get(device) -> handle`` of torch's current stream on a device
    (the raw ``cudaStream_t`` as an int, no ``torch.cuda.Stream`` object)."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda device: torch.cuda.current_stream(device).cuda_stream


def check_tensor(x: Any, t: MemRefType, where: str, device: int) -> Any:
    """Validate a tensor argument for a memref parameter (a ``?`` dim takes any size);
    returns a contiguous, 16-byte aligned tensor."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise LaunchError(f"{where}: expected a torch CUDA tensor, got {type(x).__name__}")
    if x.device.type != "cuda":
        raise LaunchError(f"{where}: tensor is on {x.device}, expected a CUDA tensor (cuda:{device})")
    if x.device.index != device:
        raise LaunchError(f"{where}: tensor is on {x.device}, expected cuda:{device}")
    want = torch_dtype(t.element_type)
    if x.dtype != want:
        raise LaunchError(f"{where}: dtype {x.dtype}, expected {want}")
    shape = tuple(t.get_shape())
    if len(x.shape) != len(shape) or any(
        want >= 0 and got != want for got, want in zip(x.shape, shape)
    ):
        spelled = tuple("?" if d < 0 else d for d in shape)
        raise LaunchError(f"{where}: shape {tuple(x.shape)}, expected {spelled}")
    if not x.is_contiguous():
        x = x.contiguous()
    if x.data_ptr() % ALIGNMENT:
        x = x.clone()
    return x


def _param_ctypes(kernel: tt.FuncOp) -> list[Any]:
    """The ctypes class of each parameter of ``kernel``."""
    out = []
    for p in kernel.block.args:
        assert isinstance(p.type, tt.ParamType)
        out.append(_CTYPES[p.type.ty.data])
    return out


def _pack(types: Sequence[Any], values: Sequence[Any]) -> tuple[int, list[Any]]:
    """The ``void**`` array for ``cuLaunchKernel`` and the ctypes objects it points to
    (tensors by address, the rest by value as ``types`` says)."""
    import torch

    keep: list[Any] = []
    for cty, v in zip(types, values, strict=True):
        if isinstance(v, torch.Tensor):
            keep.append(ctypes.c_uint64(v.data_ptr()))
        elif isinstance(v, bool):
            keep.append(cty(int(v)))
        else:
            keep.append(cty(v))
    array = (ctypes.c_void_p * max(1, len(keep)))(*[ctypes.addressof(k) for k in keep])
    keep.append(array)
    return ctypes.addressof(array), keep


def pack_params(kernel: tt.FuncOp, values: Sequence[Any]) -> tuple[int, list[Any]]:
    """The ``void**`` array for launching ``kernel`` with ``values``, and what it points to."""
    return _pack(_param_ctypes(kernel), values)


def launch(
    function: Any, kernel: tt.FuncOp, grid: Sequence[int], values: Sequence[Any],
    stream: int | None = None,
) -> None:
    """Launch ``function`` (the loaded ``kernel``) on ``grid`` with ``values`` (once; a
    host plan keeps a :class:`KernelLaunch` instead)."""
    KernelLaunch(function, kernel, grid)(values, stream)


class KernelLaunch:
    """One kernel launch with what does not change between calls resolved once: the loaded
    function, grid and block, and a ``void**`` parameter array over one preallocated ctypes
    slot per parameter. A launch only stores the values into the slots (tensors by
    address) and calls ``cuLaunchKernel``; the slots are refilled under a lock, since the
    driver copies them during the call.

    ``tensors`` says, per parameter, whether it always gets a tensor (a host plan knows
    this from the IR); without it each value is inspected."""

    def __init__(
        self, function: Any, kernel: tt.FuncOp, grid: Sequence[int],
        tensors: Sequence[bool] | None = None,
    ) -> None:
        self.function = function
        self.kernel = kernel
        self.name = kernel.sym_name.data
        self.ctypes = _param_ctypes(kernel)
        self.grid = (tuple(grid) + (1, 1, 1))[:3]
        self.block = kernel.maxntid.data
        self._slots = [cty() for cty in self.ctypes]
        self._array = (ctypes.c_void_p * max(1, len(self._slots)))(
            *[ctypes.addressof(v) for v in self._slots]
        )
        self._params = ctypes.addressof(self._array)
        if tensors is not None and len(tensors) != len(self._slots):
            raise LaunchError(
                f"{self.name}: {len(tensors)} argument kinds for {len(self._slots)} parameters"
            )
        self._tensors = None if tensors is None else tuple(bool(t) for t in tensors)
        self._lock = threading.Lock()
        d = _driver()
        self._launch = d.cuLaunchKernel
        self._ok = d.CUresult.CUDA_SUCCESS
        self._streams: dict[int, Any] = {}
        self._what = f"cuLaunchKernel({self.name})"
        self._sync = RuntimeOptions.from_env().cuda_sync
        raw, handle = raw_launch(), function_handle(function)
        self._raw = (
            (raw, ctypes.c_void_p(handle), ctypes.c_void_p(self._params))
            if raw is not None and handle is not None else None
        )

    def __call__(self, values: Sequence[Any], stream: int | None = None) -> None:
        """Launch on ``stream`` (a raw ``CUstream`` handle; default: torch's current stream)."""
        if stream is None:
            import torch

            stream = torch.cuda.current_stream().cuda_stream
        self.launch(values, stream)

    def _stream(self, stream: int) -> Any:
        found = self._streams.get(stream)
        if found is None:
            found = self._streams[stream] = _driver().CUstream(stream)
        return found

    def launch(self, values: Sequence[Any], stream: int) -> None:
        """Launch with ``values`` (one per parameter) on the raw stream handle ``stream``."""
        if len(values) != len(self._slots):
            raise LaunchError(f"{self.name}: takes {len(self._slots)} arguments, got {len(values)}")
        gx, gy, gz = self.grid
        if self._raw is not None and self._tensors is not None and not self._sync:
            raw, handle, params = self._raw
            cu_stream = void_p(stream)
            with self._lock:
                for slot, is_tensor, v in zip(self._slots, self._tensors, values):
                    slot.value = v.data_ptr() if is_tensor else (int(v) if isinstance(v, bool) else v)
                code = raw(handle, gx, gy, gz, self.block, 1, 1, 0, cu_stream, params, None)
            if code:
                check_raw(code, self._what)
            return
        cu_stream = self._streams.get(stream)
        if cu_stream is None:
            cu_stream = self._stream(stream)
        with self._lock:
            if self._tensors is None:
                for slot, v in zip(self._slots, values):
                    ptr = getattr(v, "data_ptr", None)
                    slot.value = ptr() if ptr is not None else (int(v) if isinstance(v, bool) else v)
            else:
                for slot, is_tensor, v in zip(self._slots, self._tensors, values):
                    slot.value = v.data_ptr() if is_tensor else (int(v) if isinstance(v, bool) else v)
            res = self._launch(
                self.function, gx, gy, gz, self.block, 1, 1, 0, cu_stream, self._params, 0
            )
        if res[0] is not self._ok:  # enum members are singletons; check() compares by value
            check(res, self._what)
        if self._sync:
            check(_driver().cuStreamSynchronize(cu_stream), f"kernel {self.name}")


# --------------------------------------------------------------------------- host programs


def _global_tensor(module: ModuleOp, op: memref.GetGlobalOp, device: Any) -> Any:
    import numpy as np
    import torch

    sym = op.name_.root_reference.data
    for g in module.walk():
        if isinstance(g, memref.GlobalOp) and g.sym_name.data == sym:
            init = g.initial_value
            if not isinstance(init, DenseIntOrFPElementsAttr):
                raise LaunchError(f"memref.global @{sym} has no constant initial value")
            t = op.memref.type
            assert isinstance(t, MemRefType)
            vals = np.array(init.get_values(), dtype=np.float64 if _is_float(t.element_type) else np.int64)
            shape = tuple(t.get_shape())
            vals = np.broadcast_to(vals, shape) if vals.size == 1 else vals.reshape(shape)
            return torch.tensor(vals, device=device).to(torch_dtype(t.element_type)).contiguous()
    raise LaunchError(f"memref.get_global: no memref.global @{sym}")


def _is_float(t: Attribute) -> bool:
    return isinstance(t, Float16Type | BFloat16Type | Float32Type | Float64Type) or str(t).startswith("f")


def run_host(
    module: ModuleOp, name: str, args: Sequence[Any], poison: bool = False, ptx: str | None = None
) -> list[Any]:
    """Run the host function ``name`` of a Target-level module on torch CUDA tensors.

    The host function is turned into a :class:`HostPlan` once per (module, function,
    device) and cached, so a repeated call only checks its arguments and launches.
    """
    return host_plan(module, name, ptx).run(args, poison)


def host_plan(module: ModuleOp, name: str, ptx: str | None = None) -> HostPlan:
    """The :class:`HostPlan` of host function ``name`` for the current device (cached)."""
    import torch

    device = torch.cuda.current_device()  # initializes CUDA in torch if nothing has yet
    key = (name, device)
    plans = _PLANS.setdefault(module, {})
    plan = plans.get(key)
    if plan is None:
        plan = plans[key] = HostPlan(module, name, device, ptx)
    return plan


_PLANS: weakref.WeakKeyDictionary[ModuleOp, dict[tuple[str, int], HostPlan]] = (
    weakref.WeakKeyDictionary()
)


class HostPlan:
    """A host function compiled to a list of steps: argument checks, output allocations,
    constants and kernel launches on slots of an environment list."""

    def __init__(self, module: ModuleOp, name: str, device: int, ptx: str | None) -> None:
        host = None
        for op in module.body.block.ops:
            if isinstance(op, func.FuncOp) and op.sym_name.data == name:
                host = op
        if host is None:
            raise LaunchError(f"run_host: no host function @{name} in the module")
        self.name = name
        self.device = device
        dev = torch_device(device)
        kernels = {
            k.sym_name.data: k for k in module.body.block.ops if isinstance(k, tt.FuncOp)
        }
        if kernels and ptx is None:
            raise LaunchError(
                f"run_host: the module of @{name} has kernels ({', '.join(sorted(kernels))}); "
                "pass their PTX as ptx= (tessera.passes.pipelines.to_ptx of the module)"
            )
        cu_module = load_module(ptx, device) if kernels and ptx is not None else None
        slots: dict[SSAValue, int] = {}

        def slot(v: SSAValue) -> int:
            return slots.setdefault(v, len(slots))

        params = host.body.block.args
        self.params: list[tuple[int, MemRefType | None]] = [
            (slot(p), p.type if isinstance(p.type, MemRefType) else None) for p in params
        ]
        self.dev = dev
        # (shape, torch dtype) of each static-shaped tensor parameter, for the fast check
        self.fast_specs: list[tuple[tuple[int, ...], Any] | None] = [
            (tuple(t.get_shape()), torch_dtype(t.element_type))
            if t is not None and all(d >= 0 for d in t.get_shape())
            else None
            for _, t in self.params
        ]
        self.steps: list[tuple[Any, ...]] = []
        self.results: list[int] = []
        functions: dict[str, Any] = {}
        for op in host.body.block.ops:
            if isinstance(op, memref.AllocOp):
                t = op.memref.type
                assert isinstance(t, MemRefType)
                dt = torch_dtype(t.element_type)
                self.steps.append(("alloc", slot(op.memref), tuple(t.get_shape()), dt, dev))
            elif isinstance(op, memref.GetGlobalOp):
                self.steps.append(("value", slot(op.memref), _global_tensor(module, op, dev)))
            elif isinstance(op, memref.CollapseShapeOp | memref.ExpandShapeOp):
                # a reshape of a dense buffer: a torch view of it (no kernel, no copy)
                t = op.result.type
                assert isinstance(t, MemRefType)
                self.steps.append(
                    ("view", slot(op.result), slot(op.operands[0]), tuple(t.get_shape()))
                )
            elif isinstance(op, arith.ConstantOp):
                v = op.value
                if not isinstance(v, IntegerAttr | FloatAttr):
                    raise LaunchError(f"@{name}: host constant {v} is not a scalar")
                self.steps.append(("value", slot(op.result), v.value.data))
            elif isinstance(op, tt.LaunchOp | tt.LaunchExOp):
                kname = op.callee.root_reference.data
                kernel = kernels.get(kname)
                if kernel is None:
                    raise LaunchError(f"@{name}: {op.name} of unknown kernel @{kname}")
                if kname not in functions:
                    functions[kname] = get_function(cu_module, kname)
                arg_slots = [slot(a) for a in op.args]
                kind = "launch" if isinstance(op, tt.LaunchOp) else "launch_ex"
                fn = functions[kname]
                if kind == "launch":
                    tensors = [isinstance(a.type, MemRefType) for a in op.args]
                    fn = KernelLaunch(fn, kernel, op.grid_value(), tensors)
                self.steps.append((kind, op, kernel, fn, tuple(op.grid_value()), arg_slots))
            elif isinstance(op, func.ReturnOp):
                self.results = [slot(v) for v in op.arguments]
            elif isinstance(op, memref.DeallocOp):
                pass
            elif isinstance(op, hc.HostCollectiveOp):
                from tessera.runtime.host_collectives import run_host_collective

                ins, outs = [slot(a) for a in op.operands], [slot(r) for r in op.results]
                self.steps.append(("collective", op, run_host_collective, ins, outs))
            else:
                raise LaunchError(f"@{name}: host op {op.name} cannot run on the GPU runtime")
        self.nslots = len(slots)
        self.frees = self._frees()
        self._runner: Callable[[Sequence[Any]], list[Any] | None] | None = None
        self.graphs: Any = None
        """The :class:`~tessera.runtime.cuda_graphs.GraphCache` of :meth:`runner`, once
        made (None: graphs off)."""

    def _frees(self) -> list[tuple[int, ...]]:
        """For each step, the buffers (``alloc`` slots) it is the last user of: the run drops
        them after that step, so a long program holds only its live intermediates (torch's
        caching allocator reuses their memory for later allocations on the same stream,
        after the kernels already queued there). Results are never dropped."""
        allocated = {step[1] for step in self.steps if step[0] in ("alloc", "view")}
        last: dict[int, int] = {}
        for i, step in enumerate(self.steps):
            if step[0] == "alloc":
                used = [step[1]]
            elif step[0] == "view":  # a view keeps its buffer's memory alive itself
                used = [step[1], step[2]]
            elif step[0] in ("launch", "launch_ex"):
                used = step[5]
            elif step[0] == "collective":
                used = [*step[3], *step[4]]
            else:
                used = []
            for slot in used:
                last[slot] = i
        keep = set(self.results)
        frees: list[list[int]] = [[] for _ in self.steps]
        for slot, i in last.items():
            if slot in allocated and slot not in keep:
                frees[i].append(slot)
        return [tuple(f) for f in frees]

    def runner(self) -> Callable[[Sequence[Any]], list[Any] | None] | None:
        """The plan as one closure for repeated calls, or None when the plan has no fast
        form (a parameter of dynamic shape).

        ``run(args)`` returns the results, or None without doing anything when an argument
        is not what the plan was built for (not a plain torch tensor, another device,
        dtype or shape, or one that requires grad while grad mode is on: autograd must
        see that call; one not contiguous or not 16-byte aligned is copied, as on the
        checked path), when the current
        device is not the plan's, or while ``ts.profiler`` watches launches: the caller
        then takes :meth:`run`, which checks, copies or raises as usual. Constants are
        placed once; per call it checks the arguments, allocates outputs, reads the raw
        current stream once and launches each kernel through its prebuilt parameter
        buffer.
        """
        if self._runner is not None:
            return self._runner
        import torch

        from tessera.runtime import tma

        checks: list[tuple[int, tuple[int, ...] | None, Any]] = []
        for (s, t), spec in zip(self.params, self.fast_specs):
            if t is not None and spec is None:
                return None
            checks.append((s, *spec) if spec is not None else (s, None, None))
        base: list[Any] = [None] * self.nslots
        # per launch: (launch, argument slots, buffers allocated (dtype) or viewed (the
        # source slot) just before it, in order, buffers dropped just after it)
        Alloc = tuple[int, tuple[int, ...], Any, int]
        launches: list[tuple[Callable[[Sequence[Any], int], None], list[int], tuple[Alloc, ...],
                             tuple[int, ...]]] = []
        pending: list[Alloc] = []
        pending_frees: list[int] = []
        for step, frees in zip(self.steps, self.frees):
            if step[0] == "alloc":
                pending.append((step[1], step[2], step[3], -1))
                continue
            if step[0] == "view":
                pending.append((step[1], step[3], None, step[2]))
                pending_frees.extend(frees)
                continue
            if step[0] == "value":
                base[step[1]] = step[2]
                continue
            if step[0] == "launch":
                launch = step[3].launch
            elif step[0] == "collective":
                return None  # host collectives run on the checked path
            else:
                _, op, kernel, fn, _, _ = step
                launch = tma.plan_for(op, kernel, fn).launch
            launches.append((launch, step[5], tuple(pending), (*pending_frees, *frees)))
            pending = []
            pending_frees = []
        tail = tuple(pending)  # results allocated and never launched on (empty results)
        results = list(self.results)
        # a view that only plain kernel launches read needs no torch view: a launch passes
        # a tensor's address, which its view shares (flat views of multi-tensor updates)
        shaped = set(results) | {
            s for step in self.steps if step[0] == "launch_ex" for s in step[5]
        }
        launches = [
            (launch, arg_slots, tuple(
                (s, shape, dtype, -2 - src) if src >= 0 and s not in shaped else
                (s, shape, dtype, src) for s, shape, dtype, src in allocs
            ), frees)
            for launch, arg_slots, allocs, frees in launches
        ]
        arena_total, in_arena = self._arena(launches, results, tail)
        launches_ex = [
            (launch, arg_slots, tuple(a for a in allocs if a[0] not in in_arena),
             tuple((s, in_arena[s]) for s, *_ in allocs if s in in_arena), frees)
            for launch, arg_slots, allocs, frees in launches
        ]
        uint8 = torch.uint8
        nparams = len(checks)
        dev, device, index = self.dev, self.device, torch.empty(0, device=self.dev).get_device()
        tensor_type, empty, grad_enabled = torch.Tensor, torch.empty, torch.is_grad_enabled
        current_device, current_stream = device_getter(), stream_getter()
        module = sys.modules[__name__]
        graphs = self.graphs = self._graphs()
        # what a call's launches depend on besides the plan: its tensor arguments' and
        # outputs' addresses and its other arguments' values (the arena's address is
        # added per call)
        key_inputs = tuple(s for s, shape, _ in checks if shape is not None)
        key_values = tuple(s for s, shape, _ in checks if shape is None)
        key_outputs = tuple(s for *_, allocs, _, _ in launches_ex for s, _, _, src in allocs
                            if src == -1) + tuple(s for s, _, _, src in tail if src < 0)
        all_launches = tuple((launch, arg_slots) for launch, arg_slots, *_ in launches_ex)

        def launch_all(env: list[Any], stream: int) -> None:
            for launch, arg_slots in all_launches:
                launch([env[s] for s in arg_slots], stream)

        def run(args: Sequence[Any]) -> list[Any] | None:
            if len(args) != nparams or module.LAUNCH_HOOK is not None:
                return None
            env = base.copy()
            for (s, shape, dtype), a in zip(checks, args):
                if shape is not None:
                    if (
                        type(a) is not tensor_type
                        or a.dtype is not dtype
                        or a.shape != shape
                        or a.get_device() != index
                        # a call that autograd must record takes jit's autograd path
                        or (a.requires_grad and grad_enabled())
                    ):
                        return None
                    # as the checked path: a contiguous, 16-byte aligned copy if needed
                    if not a.is_contiguous():
                        a = a.contiguous()
                    if a.data_ptr() % ALIGNMENT:
                        a = a.clone()
                env[s] = a
            if current_device() != device:
                return None
            stream = current_stream(device)
            if graphs is not None and graphs.enabled:
                return run_graph(env, stream)
            # the intermediates' one allocation, held until every launch is queued (then
            # back to torch's cache, reused after these kernels on this stream)
            block = empty((arena_total,), dtype=uint8, device=dev) if arena_total else None
            at = block.data_ptr() if block is not None else 0
            # the arena's buffers at this address, made once: torch's caching allocator
            # mostly hands a plan's arena the same block call after call
            cached = arena_buffers
            if cached[0] != at:
                cached = (at, [tuple((s, spec.at(at)) for s, spec in placed)
                               for _, _, _, placed, _ in launches_ex])
                set_arena_buffers(cached)
            for (launch, arg_slots, allocs, _, frees), bufs in zip(launches_ex, cached[1]):
                for s, buf in bufs:
                    env[s] = buf
                if allocs:
                    place(env, at, (), allocs)
                launch([env[s] for s in arg_slots], stream)
                for s in frees:
                    env[s] = None
            place(env, at, (), tail)
            return [env[s] for s in results]

        arena_buffers: tuple[int | None, list[tuple[tuple[int, Any], ...]]] = (None, [])

        def set_arena_buffers(value: tuple[int | None, list[tuple[tuple[int, Any], ...]]]) -> None:
            nonlocal arena_buffers
            arena_buffers = value

        def place(env: list[Any], at: int, placed: Sequence[tuple[int, Any]],
                  allocs: Sequence[tuple[int, Any, Any, int]]) -> None:
            """Buffers of the arena at ``at`` and allocated or viewed ones into ``env``."""
            for s, spec in placed:
                env[s] = spec.at(at)
            for s, shape, dtype, src in allocs:
                if src == -1:
                    env[s] = empty(shape, dtype=dtype, device=dev)
                elif src >= 0:
                    env[s] = env[src].view(shape)
                else:  # the source itself (same address): see ``shaped``
                    env[s] = env[-2 - src]

        def run_graph(env: list[Any], stream: int) -> list[Any]:
            """The call with every buffer placed first, then its launches recorded,
            replayed or issued one by one (:mod:`tessera.runtime.cuda_graphs`). The plan
            keeps one arena per stream (calls on a stream are ordered), so that its
            address, part of the key, repeats."""
            assert graphs is not None
            block = graphs.arenas.get(stream)
            if block is None and arena_total:
                block = graphs.arenas[stream] = empty((arena_total,), dtype=uint8, device=dev)
            at = block.data_ptr() if block is not None else 0
            for _, _, allocs, placed, _ in launches_ex:
                place(env, at, placed, allocs)
            place(env, at, (), tail)
            try:
                key = (at, *[env[s].data_ptr() for s in key_inputs],
                       *[env[s].data_ptr() for s in key_outputs],
                       *[env[s] for s in key_values])
                hash(key)
            except TypeError:  # an argument value that is not hashable: no graph
                key = None
            exe = graphs.get(key) if key is not None else None
            if exe is None and key is not None and graphs.should_capture(key):
                exe = graphs.capture(key, lambda s: launch_all(env, s))
            if exe is not None:
                graphs.launch(exe, stream)
            else:
                launch_all(env, stream)
            return [env[s] for s in results]

        self._runner = run
        return run

    def _graphs(self) -> Any:
        """The CUDA graphs of :meth:`runner` (:mod:`tessera.runtime.cuda_graphs`), or None
        where they are off: without ``TESSERA_CUDA_GRAPHS=1`` or a first run inside
        ``cuda_graphs.requested_here()``, under
        ``TESSERA_CUDA_SYNC=1``, or with a stand-in driver (no ``libcuda`` launch)."""
        from tessera.runtime.cuda_graphs import GraphCache, requested

        opts = RuntimeOptions.from_env()
        if not (opts.cuda_graphs or requested()) or opts.cuda_sync or raw_launch() is None:
            return None

        graphs = GraphCache(_driver(), self.name)
        weakref.finalize(self, graphs.close).atexit = False  # the driver may be gone then
        return graphs

    def _arena(
        self, launches: Sequence[tuple[Any, Sequence[int], Sequence[tuple[int, Any, Any, int]],
                                       Any]],
        results: Sequence[int], tail: Sequence[tuple[int, Any, Any, int]] = (),
    ) -> tuple[int, dict[int, arena.BufferSpec]]:
        """The arena of :meth:`runner` (:mod:`tessera.runtime.arena`): its size and the
        buffer of each intermediate placed in it. Placed are buffers allocated for a
        launch (and their views) that no result shares; a view lives in its buffer's
        bytes, which stay reserved through the last launch of any of its views."""
        root: dict[int, int] = {}
        first: dict[int, int] = {}
        spec: dict[int, tuple[tuple[int, ...], Any]] = {}
        for i, (_, _, allocs, _) in enumerate(launches):
            for s, shape, dtype, src in allocs:
                if src == -1:
                    root[s], first[s] = s, i
                    spec[s] = (tuple(shape), dtype)
                else:  # a view (src >= 0) or the source itself (-2 - src)
                    source = src if src >= 0 else -2 - src
                    if source in root:
                        root[s] = root[source]
                        spec[s] = (tuple(shape), spec[source][1])
        for s, _, _, src in tail:  # results made after the last launch: views too
            if src >= 0 and src in root:
                root[s] = root[src]
        shared = {root[s] for s in results if s in root}
        last: dict[int, int] = {}
        for i, (_, arg_slots, _, _) in enumerate(launches):
            for s in arg_slots:
                r = root.get(s)
                if r is not None:
                    last[r] = i
        roots = sorted((r for r in first if r not in shared and r in last), key=first.get)
        sizes = []
        for r in roots:
            shape, dtype = spec[r]
            sizes.append((prod(shape) * dtype.itemsize, first[r], last[r]))
        offsets, total = arena.first_fit(sizes)
        where = dict(zip(roots, offsets))
        placed: dict[int, arena.BufferSpec] = {}
        for s, r in root.items():
            if r in where:
                shape, dtype = spec[s]
                placed[s] = arena.BufferSpec(where[r], shape, dtype,
                                             arena.contiguous_strides(shape), dtype.itemsize)
        return total, placed

    def run(self, args: Sequence[Any], poison: bool = False) -> list[Any]:
        import torch


        if len(args) != len(self.params):
            raise LaunchError(f"@{self.name}: takes {len(self.params)} arguments, got {len(args)}")
        env: list[Any] = [None] * self.nslots
        for i, ((s, t), a) in enumerate(zip(self.params, args)):
            spec = self.fast_specs[i]
            if (
                spec is not None
                and type(a) is torch.Tensor
                and a.device == self.dev
                and a.dtype is spec[1]
                and a.shape == spec[0]
                and a.is_contiguous()
                and not a.data_ptr() % ALIGNMENT
            ):
                env[s] = a
            elif t is not None:
                env[s] = check_tensor(a, t, f"@{self.name} argument {i}", self.device)
            else:
                env[s] = a
        # torch's current stream, read once: no step of a plan changes it
        stream = torch.cuda.current_stream(self.dev).cuda_stream
        for step, frees in zip(self.steps, self.frees):
            self._step(env, step, poison, stream)
            for s in frees:
                env[s] = None
        return [env[s] for s in self.results]

    def _step(self, env: list[Any], step: tuple[Any, ...], poison: bool, stream: int) -> None:
        """Run one step of the plan on ``env`` (the checked path), launching on the raw
        stream handle ``stream``."""
        import torch

        from tessera.runtime import tma

        kind = step[0]
        if kind == "alloc":
            _, s, shape, dt, dev = step
            out = torch.empty(shape, dtype=dt, device=dev)
            if poison and out.is_floating_point():
                out.fill_(float("nan"))
            env[s] = out
        elif kind == "value":
            env[step[1]] = step[2]
        elif kind == "view":
            env[step[1]] = env[step[2]].view(step[3])
        elif kind == "collective":  # over torch.distributed (NCCL), on torch's stream
            _, op, run_collective, ins, outs = step
            for s, v in zip(outs, run_collective(op, [env[s] for s in ins], device="cuda")):
                env[s] = v
        else:
            _, op, kernel, fn, grid, arg_slots = step
            values = [env[s] for s in arg_slots]
            if LAUNCH_HOOK is None and kind == "launch":
                fn.launch(values, stream)
                return
            if kind == "launch":
                def go(fn=fn, values=values) -> None:
                    fn.launch(values, stream)
            else:
                def go(op=op, kernel=kernel, fn=fn, values=values) -> None:
                    tma.run_launch_ex(op, kernel, fn, values, stream)
            if LAUNCH_HOOK is None:
                go()
            else:
                LAUNCH_HOOK.launch(self.name, kernel, grid, values, go)


# --------------------------------------------------------------------------- compiled specializations


def run_specialization(spec: Any, args: list[Any]) -> Any:
    """``tessera.runtime.dispatch.GPU_BACKEND``: run a compiled specialization on CUDA tensors."""
    ptx = spec.ir("ptx")  # first: on a program cache hit nothing else is lowered
    module = spec.launch_module()
    if LAUNCH_HOOK is not None:
        LAUNCH_HOOK.specialization(spec)
    results = _as_complex(spec, run_host(module, spec.name, args, ptx=ptx))
    return tuple(results) if spec.returns_tuple else results[0]


_COMPLEX_RESULTS: weakref.WeakKeyDictionary[ModuleOp, tuple[bool, ...]] = (
    weakref.WeakKeyDictionary()
)


def _complex_results(spec: Any) -> tuple[bool, ...]:
    """Which results of ``spec`` are complex tensors in Graph IR. Below Graph IR those
    are stored as interleaved (real, imaginary) pairs, ``memref<... x 2 x fT>``
    (``tessera.passes.tile_fft``), which the caller sees through ``torch.view_as_complex``.
    Read off the traced module, so a program cache hit lowers nothing for it."""
    traced = spec.ir("traced")
    flags = _COMPLEX_RESULTS.get(traced)
    if flags is None:
        fn = next(
            op for op in traced.body.block.ops
            if isinstance(op, func.FuncOp) and op.sym_name.data == spec.name
        )
        flags = tuple(
            isinstance(t, TensorType) and isinstance(t.element_type, ComplexType)
            for t in fn.function_type.outputs.data
        )
        _COMPLEX_RESULTS[traced] = flags
    return flags


def _as_complex(spec: Any, results: Sequence[Any]) -> list[Any]:
    """``results`` with the complex ones viewed as torch complex tensors."""
    flags = _complex_results(spec)
    if not any(flags):
        return list(results)
    import torch

    return [torch.view_as_complex(r) if c else r for r, c in zip(results, flags)]


def specialization_runner(spec: Any) -> Callable[[Sequence[Any]], Any] | None:
    """``run_specialization.runner`` (:func:`tessera.runtime.dispatch.gpu_runner`): a closure
    running ``spec`` on the current device for repeated calls (see :meth:`HostPlan.runner`);
    it returns None when the arguments need the checked path."""
    ptx = spec.ir("ptx")
    run = host_plan(spec.launch_module(), spec.name, ptx).runner()
    if run is None:
        return None
    if any(_complex_results(spec)):
        plain = run

        def run(args: Sequence[Any]) -> Any:
            out = plain(args)
            return None if out is None else _as_complex(spec, out)

    if spec.returns_tuple:
        def call(args: Sequence[Any]) -> Any:
            out = run(args)
            return None if out is None else tuple(out)
    else:
        def call(args: Sequence[Any]) -> Any:
            out = run(args)
            return None if out is None else out[0]
    return call


run_specialization.runner = specialization_runner  # type: ignore[attr-defined]


def install() -> None:
    """Make this the GPU backend of compiled functions (:mod:`tessera.runtime.dispatch`)."""
    from tessera.runtime import dispatch

    if dispatch.GPU_BACKEND is None:
        dispatch.GPU_BACKEND = run_specialization
        if RuntimeOptions.from_env().check_kernels:
            from tessera.runtime import kernel_check

            kernel_check.check_process()
