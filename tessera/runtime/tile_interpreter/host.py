"""Running Tile IR: a kernel over its grid (:func:`run_kernel`) and a host function
(:func:`run_host`: allocations, globals, launches, host collectives)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    MemRefType,
    ModuleOp,
)
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    PythonValues,
    impl,
    register_impls,
)
from xdsl.interpreters.func import FuncFunctions
from xdsl.ir import Attribute, Operation
from xdsl.traits import SymbolTable
from xdsl.utils.exceptions import InterpretationError

from tessera.errors import RUNTIME_ERRORS, data_error
from tessera.ir import host_collectives as hc
from tessera.ir import tile as tt
from tessera.runtime.tile_interpreter.lockstep import (
    KERNEL_FUNCTIONS,
    _constant_value,
)
from tessera.runtime.tile_interpreter.state import (
    LaunchData,
    LaunchState,
    _fail,
    np_dtype,
)

# --------------------------------------------------------------------------- entry points


def _find_kernel(module: ModuleOp, name: str) -> tt.KernelOp:
    op = SymbolTable.lookup_symbol(module, name)
    if not isinstance(op, tt.KernelOp):
        kernels = [k.sym_name.data for k in module.walk() if isinstance(k, tt.KernelOp)]
        raise KeyError(f"no ttile.kernel @{name} in the module (kernels: {', '.join(kernels)})")
    return op


def _check_arg(kernel: tt.KernelOp, k: int, t: Attribute, a: Any) -> Any:
    where = f"ttile.kernel @{kernel.sym_name.data}: argument {k}"
    if isinstance(t, MemRefType):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{where} expects a numpy array for {t}, got {type(a).__name__}")
        want = np_dtype(t.element_type)
        if a.dtype != want:
            raise TypeError(f"{where}: array has dtype {a.dtype}, expected {want} for {t}")
        shape = t.get_shape()
        if len(shape) != a.ndim or any(d >= 0 and d != s for d, s in zip(shape, a.shape)):
            raise TypeError(f"{where}: array has shape {list(a.shape)}, expected {t}")
        if not a.flags.c_contiguous:
            raise TypeError(f"{where}: array must be C-contiguous")
        return a
    return np_dtype(t).type(a)


def run_kernel(
    module: ModuleOp,
    kernel_name: str,
    args: Sequence[Any],
    grid: Sequence[int] | None = None,
) -> None:
    """Run ``ttile.kernel @kernel_name`` over ``grid`` (default: the kernel's ``grid``).

    Memref arguments are numpy arrays of the memref's dtype, modified in place;
    scalar arguments are Python or numpy numbers.
    """
    kernel = _find_kernel(module, kernel_name)
    _launch(module, kernel, list(args), grid)


def _launch(
    module: ModuleOp, kernel: tt.KernelOp, args: list[Any], grid: Sequence[int] | None
) -> None:
    if grid is None:
        grid = kernel.grid_value()
        if grid is None:
            raise ValueError(
                f"ttile.kernel @{kernel.sym_name.data} has no default grid; pass grid="
            )
    g = tuple(int(x) for x in grid) + (1,) * (3 - len(grid))
    if len(g) != 3 or min(g) < 1:
        raise ValueError(f"grid must be 1 to 3 sizes >= 1, got {list(grid)}")
    ins = kernel.function_type.inputs.data
    if len(args) != len(ins):
        raise TypeError(
            f"ttile.kernel @{kernel.sym_name.data} takes {len(ins)} arguments, got {len(args)}"
        )
    vals = tuple(_check_arg(kernel, k, t, a) for k, (t, a) in enumerate(zip(ins, args)))
    interp = Interpreter(module)
    for f in KERNEL_FUNCTIONS:
        interp.register_implementations(f())
    interp.set_data(
        LaunchData, "launch", LaunchState((g[0], g[1], g[2]), kernel.group_size_value())
    )
    name = f"ttile.kernel @{kernel.sym_name.data}"
    with np.errstate(all="ignore"):
        try:
            interp.run_ssacfg_region(kernel.body, vals, name)
        except (InterpretationError, *RUNTIME_ERRORS) as e:
            raise data_error(e, name) from None


# --------------------------------------------------------------------------- host


def _alloc(t: MemRefType, dyn: Sequence[int] = ()) -> np.ndarray:
    dims = iter(dyn)
    shape = [d if d >= 0 else int(next(dims)) for d in t.get_shape()]
    dt = np_dtype(t.element_type)
    a = np.zeros(shape, dt)
    if dt.kind == "f":
        a[...] = np.nan  # fresh buffers are undefined; NaN exposes unwritten outputs
    return a


def _view(a: np.ndarray, t: Attribute) -> np.ndarray:
    """Dense row-major ``a`` viewed with memref type ``t``'s shape (shares memory)."""
    assert isinstance(t, MemRefType)
    v = a.view()
    v.shape = tuple(t.get_shape())  # raises rather than copy
    return v


@register_impls
class HostFunctions(InterpreterFunctions):
    """Host-side ops of lowered programs: buffers, constants, launches."""

    @impl(memref.AllocOp)
    def run_alloc(self, interpreter: Interpreter, op: memref.AllocOp, args: PythonValues):
        t = op.memref.type
        assert isinstance(t, MemRefType)
        return (_alloc(t, [int(a) for a in args]),)

    @impl(memref.DeallocOp)
    def run_dealloc(self, interpreter: Interpreter, op: memref.DeallocOp, args: PythonValues):
        return ()

    @impl(memref.CollapseShapeOp)
    def run_collapse_shape(
        self, interpreter: Interpreter, op: memref.CollapseShapeOp, args: PythonValues
    ):
        return (_view(args[0], op.result.type),)

    @impl(memref.ExpandShapeOp)
    def run_expand_shape(
        self, interpreter: Interpreter, op: memref.ExpandShapeOp, args: PythonValues
    ):
        return (_view(args[0], op.result.type),)

    @impl(memref.GetGlobalOp)
    def run_get_global(
        self, interpreter: Interpreter, op: memref.GetGlobalOp, args: PythonValues
    ):
        g = SymbolTable.lookup_symbol(op, op.name_)
        if not isinstance(g, memref.GlobalOp):
            _fail(op, f"{op.name_} is not a memref.global")
        assert isinstance(g, memref.GlobalOp)
        t = g.type
        init = g.initial_value
        if not isinstance(init, DenseIntOrFPElementsAttr):
            _fail(op, f"memref.global {op.name_} has no initial value")
        assert isinstance(init, DenseIntOrFPElementsAttr)
        vals = np.asarray(init.get_values(), np_dtype(t.element_type))
        return (np.broadcast_to(vals.reshape(tuple(init.get_shape())), t.get_shape()).copy(),)

    @impl(arith.ConstantOp)
    def run_constant(self, interpreter: Interpreter, op: arith.ConstantOp, args: PythonValues):
        return (_constant_value(op),)

    @impl(tt.LaunchOp)
    def run_launch(self, interpreter: Interpreter, op: tt.LaunchOp, args: PythonValues):
        kernel = SymbolTable.lookup_symbol(op, op.callee)
        if not isinstance(kernel, tt.KernelOp):
            _fail(op, f"{op.callee} is not a ttile.kernel")
        assert isinstance(kernel, tt.KernelOp)
        _launch(interpreter.module, kernel, list(args), op.grid_value())
        return ()


@register_impls
class HostCollectiveFunctions(InterpreterFunctions):
    """Host collectives of lowered per-rank programs (``ttile.all_reduce`` ...), run by
    :func:`tessera.runtime.host_collectives.run_host_collective` on ``mesh`` (None: the
    mesh entered with ``with mesh:``, else the host function's ``tessera.mesh``)."""

    def __init__(self, mesh: Any = None):
        self.mesh = mesh

    def _run(self, op: Operation, args: PythonValues) -> PythonValues:
        from tessera.runtime.host_collectives import run_host_collective

        assert isinstance(op, hc.HostCollectiveOp)
        return run_host_collective(op, args, self.mesh)

    @impl(tt.AllReduceOp)
    def run_all_reduce(self, interpreter: Interpreter, op: tt.AllReduceOp, args: PythonValues):
        return self._run(op, args)

    @impl(tt.AllGatherOp)
    def run_all_gather(self, interpreter: Interpreter, op: tt.AllGatherOp, args: PythonValues):
        return self._run(op, args)

    @impl(tt.ReduceScatterOp)
    def run_reduce_scatter(
        self, interpreter: Interpreter, op: tt.ReduceScatterOp, args: PythonValues
    ):
        return self._run(op, args)

    @impl(tt.AllToAllOp)
    def run_all_to_all(self, interpreter: Interpreter, op: tt.AllToAllOp, args: PythonValues):
        return self._run(op, args)

    @impl(tt.SendOp)
    def run_send(self, interpreter: Interpreter, op: tt.SendOp, args: PythonValues):
        return self._run(op, args)

    @impl(tt.RecvOp)
    def run_recv(self, interpreter: Interpreter, op: tt.RecvOp, args: PythonValues):
        return self._run(op, args)

    @impl(tt.MeshCoordOp)
    def run_mesh_coord(self, interpreter: Interpreter, op: tt.MeshCoordOp, args: PythonValues):
        return self._run(op, args)


def run_host(
    module: ModuleOp, name: str, args: Sequence[Any], mesh: Any = None
) -> list[np.ndarray]:
    """Run host ``func.func @name`` on numpy inputs; returns its results as numpy arrays.

    Inputs are converted to the argument memrefs' dtypes (copied, never modified).
    Host collectives run on ``mesh`` (a :class:`tessera.dist.Mesh`; by default the one
    entered with ``with mesh:``, else the function's ``tessera.mesh``) over
    torch.distributed, so every rank of the mesh runs the function.
    """
    fn = SymbolTable.lookup_symbol(module, name)
    if not isinstance(fn, func.FuncOp):
        raise KeyError(f"no func.func @{name} in the module")
    ins = fn.function_type.inputs.data
    if len(args) != len(ins):
        raise TypeError(f"func.func @{name} takes {len(ins)} arguments, got {len(args)}")
    vals: list[Any] = []
    for k, (t, a) in enumerate(zip(ins, args)):
        if isinstance(t, MemRefType):
            arr = np.array(a, dtype=np_dtype(t.element_type), copy=True, order="C")
            shape = t.get_shape()
            if arr.ndim != len(shape) or any(
                d >= 0 and d != s for d, s in zip(shape, arr.shape)
            ):
                raise TypeError(
                    f"func.func @{name}: argument {k} has shape {list(arr.shape)}, expected {t}"
                )
            vals.append(arr)
        else:
            vals.append(np_dtype(t).type(a))
    interp = Interpreter(module)
    interp.register_implementations(FuncFunctions())
    interp.register_implementations(HostFunctions())
    interp.register_implementations(HostCollectiveFunctions(mesh))
    with np.errstate(all="ignore"):
        try:
            out = interp.call_op(fn, tuple(vals))
        except (InterpretationError, *RUNTIME_ERRORS) as e:
            raise data_error(e, f"func.func @{name}") from None
    return [np.asarray(o) for o in out]
