"""``@ts.kernel``: tile kernels written in Python, compiled to Tile IR, launched on a grid.

::

    @ts.kernel
    def saxpy(x: f32[n], y: mut[f32[n]], alpha: f32):
        i = tile.linear_id()
        if i < n:
            y[i] = alpha * x[i] + y[i]

    saxpy(x, y, 2.0)                          # grid = ceil(n / 128), group_size = 128
    saxpy[8](x, y, 2.0)                       # grid = 8 tiles
    saxpy[(8,), 256](x, y, 2.0)               # grid and group size
    saxpy(x, y, 2.0, grid=8, group_size=256)  # the same, by keyword
    print(saxpy.inspect_ir("tile"))

Launch convention (the same on CPU and GPU; docs/KERNELS.md):

* ``group_size`` (lanes per tile) defaults to 128 (or the decorator's
  ``group_size=``).
* ``grid`` defaults to ``ceil(D / group_size)`` tiles when the kernel uses
  ``linear_id()`` or shares a ``ts.tile.range`` loop out (kernel_worksharing), where D is the size of the first symbolic dim in parameter
  order (the first dim of the first tensor if none is symbolic); to one tile
  otherwise, and always to one tile for kernels that return a value.
* Keyword arguments that are not parameters are compile-time constants
  (``double_buffered_gemm(A, B, C, BM=64, BN=64, BK=32)``); each distinct set
  compiles once.
* numpy arrays and CPU torch tensors run on the Tile IR interpreter and are
  updated in place; CUDA torch tensors run as PTX on the current device. Both
  run the same shape-generic specialization (one per group size, constants
  and dtypes): symbolic dims are ``?`` memref dims sized by ``index``
  arguments, so one PTX kernel serves every size.
* A kernel annotated ``-> ts.f32`` returns what lane 0 of each tile returns
  (written to a hidden output buffer): a numpy scalar for a one-tile grid, an
  array with one entry per tile otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tessera.frontend.annotations import TensorAnnotation, bind_shape
from tessera.frontend.errors import ShapeError, TesseraTypeError, located
from tessera.frontend.jit import static_identity
from tessera.frontend.kernel_ast import ArgLayout, KernelCodegen
from tessera.frontend.kernel_signature import (
    KernelParam,
    ScalarParam,
    TensorParam,
    read_params,
    read_return,
)
from tessera.frontend.kernel_source import KernelSource
from tessera.ir.dtypes import DType, dtype_of

DEFAULT_GROUP_SIZE = 128


@dataclass
class CompiledKernel:
    """One compiled specialization: its module, argument layout and lane ops used."""

    module: ModuleOp
    name: str
    layout: ArgLayout
    lane_ops: set[str]
    group_size: int
    constexprs: dict[str, Any]
    has_return: bool
    scalar_dtypes: dict[str, DType] = field(default_factory=dict)

    def tile_ir(self) -> str:
        return str(self.module)


@dataclass
class LaunchConfig:
    """What ``kernel[grid, group_size]`` fixes for the next call."""

    grid: Any = None
    group_size: int | None = None


def _grid3(grid: Any) -> tuple[int, int, int]:
    g = (grid,) if isinstance(grid, int) else tuple(int(x) for x in grid)
    if not 1 <= len(g) <= 3 or min(g) < 1:
        raise TesseraTypeError(located(f"grid must be 1 to 3 sizes >= 1, got {grid!r}"))
    return (g + (1, 1))[:3]  # type: ignore[return-value]


def _freeze(v: Any) -> Any:
    """A cache key of constants: a dict by its sorted items, the values by identity
    (``static_identity``: ``2`` and ``2.0``, ``0.0`` and ``-0.0`` are different constants)."""
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return static_identity(v)


class Kernel:
    """A ``@ts.kernel`` function: compiles on demand, launches on numpy or CUDA tensors."""

    def __init__(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        source: KernelSource | None = None,
        group_size: int | None = None,
        grid: Any = None,
    ):
        if source is None:
            if fn is None:
                raise TypeError("Kernel needs a function or a source")
            source = KernelSource.from_function(fn)
        self.fn = fn
        self.source = source
        self.__name__ = source.fn_def.name
        self.__doc__ = getattr(fn, "__doc__", None)
        self.params: list[KernelParam] = read_params(source)
        self.ret: ScalarParam | None = read_return(source)
        self.group_size = group_size or DEFAULT_GROUP_SIZE
        self.default_grid = grid
        self._cache: dict[Any, CompiledKernel] = {}

    def __repr__(self) -> str:
        return f"<ts.kernel {self.__name__}({', '.join(p.name for p in self.params)})>"

    # ------------------------------------------------------------------ compiling

    def compile(
        self,
        *,
        group_size: int | None = None,
        arg_dtypes: dict[str, DType] | None = None,
        static_sizes: dict[str, int] | None = None,
        ret_len: int | None = None,
        **constexprs: Any,
    ) -> CompiledKernel:
        """Compile (or fetch from the cache) the specialization for these constants.

        Without ``static_sizes`` symbolic dims stay dynamic (``?``, sized by their
        ``index`` arguments): the one shape-generic specialization per group size,
        constants and dtypes that both the interpreter and the GPU run.
        ``static_sizes`` fixes symbolic dims in the memref types and ``ret_len``
        the length of the hidden return buffer (``inspect_ir(..., n=1000)``).
        """
        gs = group_size or self.group_size
        key = (
            gs,
            _freeze(constexprs),
            _freeze({k: v.name for k, v in (arg_dtypes or {}).items()}),
            _freeze(static_sizes or {}),
            ret_len if static_sizes is not None else None,
        )
        if key not in self._cache:
            cg = KernelCodegen(
                self.source, self.params, self.ret, group_size=gs, constexprs=constexprs,
                arg_dtypes=arg_dtypes, static_sizes=static_sizes,
                ret_len=ret_len if static_sizes is not None else None,
            )
            module, layout, lane_ops = cg.compile()
            scalars = {
                p.name: p.dtype for p in self.params
                if isinstance(p, ScalarParam) and p.dtype is not None
            }
            self._cache[key] = CompiledKernel(
                module, self.__name__, layout, lane_ops, gs, dict(constexprs),
                self.ret is not None, scalars,
            )
        return self._cache[key]

    def inspect_ir(self, level: str = "tile", *, group_size: int | None = None, **kw: Any) -> str:
        """The kernel's IR as text: ``"tile"`` (Tile IR), ``"target"`` or ``"ptx"``.

        Keyword arguments are compile-time constants (``BM=64``) or sizes of
        symbolic dims (``n=1024``), which make those dims static. Without sizes
        the dims stay dynamic (``?``) at every level: the PTX is the shape-generic
        kernel that CUDA calls launch, taking each symbolic dim as a ``.u64``
        parameter.
        """
        symbols = self.symbols()
        sizes = {k: kw.pop(k) for k in list(kw) if k in symbols}
        if level not in ("tile", "target", "ptx"):
            raise ValueError(f"unknown IR level '{level}'; valid: tile, target, ptx")
        ck = self.compile(group_size=group_size, static_sizes=sizes or None, **kw)
        if level == "tile":
            return str(ck.module)
        from tessera.frontend.kernel_target import lower_to_ptx, lower_to_target

        return str(lower_to_target(ck.module)) if level == "target" else lower_to_ptx(ck.module)

    def symbols(self) -> list[str]:
        """The symbolic dim names, in order of first appearance."""
        out: list[str] = []
        for p in self.params:
            if isinstance(p, TensorParam):
                out += [d for d in p.dims if isinstance(d, str) and d not in out]
        return out

    # ------------------------------------------------------------------ launching

    def __getitem__(self, launch: Any) -> Callable[..., Any]:
        """``k[grid]`` or ``k[grid, group_size]``: a launcher with those settings."""
        if isinstance(launch, tuple) and len(launch) == 2 and not all(
            isinstance(x, int) for x in launch
        ):
            grid, gs = launch
        elif isinstance(launch, tuple) and len(launch) == 2 and isinstance(launch[0], tuple):
            grid, gs = launch
        else:
            grid, gs = launch, None

        def launcher(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("grid", grid)
            if gs is not None:
                kwargs.setdefault("group_size", gs)
            return self(*args, **kwargs)

        return launcher

    def __call__(
        self, *args: Any, grid: Any = None, group_size: int | None = None, **kwargs: Any
    ) -> Any:
        call = self.bind(args, kwargs)
        gs = group_size or self.group_size
        ck = self.compile(group_size=gs, arg_dtypes=call.arg_dtypes, **call.constexprs)
        g = self.grid_for(ck, call.sizes, grid)
        if call.on_gpu:
            from tessera.frontend.kernel_target import launch_gpu

            return launch_gpu(ck, call, g)
        return run_cpu(ck, call, g)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> BoundCall:
        """Match a call's arguments to the parameters; check dtypes and shapes."""
        names = [p.name for p in self.params]
        if len(args) > len(names):
            raise TesseraTypeError(located(
                f"kernel '{self.__name__}' takes {len(names)} arguments, got {len(args)}"
            ))
        values: dict[str, Any] = dict(zip(names, args))
        constexprs: dict[str, Any] = {}
        for k, v in kwargs.items():
            if k in names:
                if k in values:
                    raise TesseraTypeError(located(f"argument '{k}' given twice"))
                values[k] = v
            else:
                constexprs[k] = v
        missing = [n for n in names if n not in values]
        if missing:
            raise TesseraTypeError(located(
                f"kernel '{self.__name__}' is missing arguments: {', '.join(missing)}"
            ))
        from tessera.runtime.convert import is_cuda_tensor

        on_gpu = any(is_cuda_tensor(values[n]) for n in names)
        bindings: dict[str, tuple[int, str]] = {}
        arg_dtypes: dict[str, DType] = {}
        for p in self.params:
            v = values[p.name]
            if isinstance(p, TensorParam):
                shape = tuple(getattr(v, "shape", ()))
                if not hasattr(v, "shape"):
                    raise TesseraTypeError(located(
                        f"argument '{p.name}' of kernel '{self.__name__}' must be an array or "
                        f"tensor ({p.spelling}), got {type(v).__name__}"
                    ))
                try:
                    got = dtype_of(v.dtype)
                except TypeError as e:
                    raise TesseraTypeError(located(str(e))) from None
                if p.dtype is not None and got != p.dtype:
                    raise TesseraTypeError(located(
                        f"argument '{p.name}' of kernel '{self.__name__}' has dtype {got.name}, "
                        f"but its annotation {p.spelling} says {p.dtype.name}"
                    ))
                if p.dtype is None:
                    arg_dtypes[p.name] = got
                try:
                    bind_shape(TensorAnnotation(p.dims, p.dtype), shape, bindings, p.name)
                except ShapeError as e:
                    raise ShapeError(located(str(e))) from None
                if on_gpu and not is_cuda_tensor(v):
                    raise TesseraTypeError(located(
                        f"argument '{p.name}' is on the CPU while other arguments are CUDA tensors"
                    ))
        sizes = {k: n for k, (n, _) in bindings.items()}
        return BoundCall(values, constexprs, arg_dtypes, sizes, on_gpu)

    def grid_for(self, ck: CompiledKernel, sizes: dict[str, int], grid: Any) -> tuple[int, int, int]:
        """The launch grid: the given one, the decorator's, or the default rule."""
        if grid is None:
            grid = self.default_grid
        if grid is not None:
            return _grid3(grid)
        if ck.has_return or not {"linear_id", "work_shared"} & ck.lane_ops:
            return (1, 1, 1)
        extent = self._leading_extent(sizes)
        return (max(1, math.ceil(extent / ck.group_size)), 1, 1)

    def _leading_extent(self, sizes: dict[str, int]) -> int:
        symbols = self.symbols()
        if symbols:
            return sizes[symbols[0]]
        for p in self.params:
            if isinstance(p, TensorParam) and p.dims:
                d = p.dims[0]
                return d if isinstance(d, int) else sizes[d]
        return 1

    # ------------------------------------------------------------------ decorators

    def autotune(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - see KernelDecorator
        raise AttributeError("use @ts.kernel.autotune(space=...) on the function")


@dataclass
class BoundCall:
    """A call's arguments matched to the kernel's parameters."""

    values: dict[str, Any]
    constexprs: dict[str, Any]
    arg_dtypes: dict[str, DType]
    sizes: dict[str, int]
    on_gpu: bool
    extras: dict[str, Any] = field(default_factory=dict)


def kernel_args(ck: CompiledKernel, call: BoundCall, grid: tuple[int, int, int],
                to_array: Callable[[str, Any], Any]) -> tuple[list[Any], Any]:
    """The ``ttile.kernel`` argument list of a call, and the hidden return buffer (or None)."""
    out: list[Any] = []
    ret: Any = None
    types = ck.layout.types
    for (kind, name), t in zip(ck.layout.entries, types):
        if kind == "param":
            out.append(to_array(name, _narrow(ck, name, call.values[name])))
        elif kind == "dim":
            out.append(call.sizes[name])
        else:
            from tessera.runtime.tile_interpreter import np_dtype

            ret = np.zeros(grid[0] * grid[1] * grid[2], np_dtype(t.element_type))  # type: ignore[union-attr]
            out.append(ret)
    return out, ret


def _narrow(ck: CompiledKernel, name: str, v: Any) -> Any:
    """A 16-bit float scalar argument rounded to its dtype (it is passed as f32)."""
    dt = ck.scalar_dtypes.get(name)
    if dt is not None and dt.is_float and dt.bits < 32 and not hasattr(v, "shape"):
        return np.float32(np.asarray(v, np.float64).astype(dt.np_dtype))
    return v


def run_cpu(ck: CompiledKernel, call: BoundCall, grid: tuple[int, int, int]) -> Any:
    """Run a specialization on the Tile IR interpreter; numpy arguments change in place."""
    from tessera.runtime.convert import is_torch_tensor, to_numpy
    from tessera.runtime.tile_interpreter import np_dtype, run_kernel

    copies: list[tuple[Any, np.ndarray]] = []
    scalar_types = dict(zip((n for k, n in ck.layout.entries), ck.layout.types))

    def to_array(name: str, v: Any) -> Any:
        if not hasattr(v, "shape") or isinstance(v, np.generic):
            return np_dtype(scalar_types[name]).type(v)
        arr = to_numpy(v, where=f"argument '{name}'")
        if is_torch_tensor(v) and not v.is_contiguous():
            copies.append((v, arr))
        elif not arr.flags.c_contiguous:
            c = np.ascontiguousarray(arr)
            copies.append((arr, c))
            return c
        return arr

    args, ret = kernel_args(ck, call, grid, to_array)
    run_kernel(ck.module, ck.name, args, grid)
    for orig, arr in copies:
        if is_torch_tensor(orig):
            import torch

            orig.copy_(torch.from_numpy(np.asarray(arr)))
        else:
            orig[...] = arr
    if ret is None:
        return None
    return ret[0] if ret.size == 1 else ret
