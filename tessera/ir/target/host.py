"""Host-side kernel launches: ``ttarget.launch`` and ``ttarget.launch_ex`` (dynamic
shared memory and TMA tensor maps), and how host values are passed as parameters."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    SymbolRefAttr,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, prop_def, var_operand_def
from xdsl.traits import SymbolTable
from xdsl.utils.exceptions import VerifyException

from tessera.ir.target.base import i64_attr
from tessera.ir.target.facts import MAX_SHARED_BYTES, TYPE_BITS
from tessera.ir.target.kernel import FuncOp
from tessera.ir.target.types import ParamType


def host_param_type(t: Attribute) -> str | None:
    """The ``.param`` type a host value of type ``t`` is passed as (None if it cannot be)."""
    if isinstance(t, MemRefType) or isinstance(t, IndexType):
        return "u64"
    if isinstance(t, IntegerType):
        return {1: "u32", 8: "u32", 16: "u32", 32: "s32", 64: "s64"}.get(t.width.data)
    if isinstance(t, Float32Type):
        return "f32"
    if isinstance(t, Float64Type):
        return "f64"
    return None


@irdl_op_definition
class LaunchOp(IRDLOperation):
    """Host side: run a kernel over a grid of CTAs of ``maxntid`` threads each::

        ttarget.launch @k(%x, %n) grid = [4, 1, 1] : (memref<512xf32>, index)

    Memref arguments are passed as ``.u64`` device pointers, scalars by value;
    the argument list must match the kernel's parameters.
    """

    name = "ttarget.launch"

    callee = prop_def(SymbolRefAttr)
    args = var_operand_def()
    grid = prop_def(DenseArrayBase.constr(i64))
    assembly_format = "$callee `(` $args `)` `grid` `=` $grid attr-dict `:` `(` type($args) `)`"

    def __init__(self, callee: str, args: Sequence[SSAValue], grid: Sequence[int]):
        super().__init__(
            operands=[list(args)],
            properties={
                "callee": SymbolRefAttr(callee),
                "grid": DenseArrayBase.from_list(i64, list(grid)),
            },
        )

    def grid_value(self) -> tuple[int, int, int]:
        g = tuple(self.grid.get_values())
        return (g + (1, 1, 1))[:3]  # type: ignore[return-value]

    def kernel(self) -> FuncOp | None:
        found = SymbolTable.lookup_symbol(self, self.callee)
        return found if isinstance(found, FuncOp) else None

    def verify_(self) -> None:
        g = tuple(self.grid.get_values())
        if not 1 <= len(g) <= 3 or any(x < 1 for x in g):
            raise VerifyException(f"ttarget.launch: grid must be 1 to 3 positive sizes, got {list(g)}")
        if any(x > 65535 for x in g[1:]) or g[0] > 2**31 - 1:
            raise VerifyException(f"ttarget.launch: grid {list(g)} exceeds the CUDA limits")
        k = self.kernel()
        if k is None:
            raise VerifyException(f"ttarget.launch: no ttarget.func named {self.callee}")
        if g[0] % k.cluster_size:
            raise VerifyException(
                f"ttarget.launch: grid x size {g[0]} is not a multiple of the cluster size "
                f"{k.cluster_size} of {self.callee}"
            )
        params = k.block.args
        if len(params) != len(self.args):
            raise VerifyException(
                f"ttarget.launch: kernel {self.callee} takes {len(params)} parameters, "
                f"got {len(self.args)} arguments"
            )
        for i, (p, a) in enumerate(zip(params, self.args)):
            assert isinstance(p.type, ParamType)
            want = host_param_type(a.type)
            if want is None or TYPE_BITS[want] != TYPE_BITS[p.type.ty.data]:
                raise VerifyException(
                    f"ttarget.launch: argument {i} of type {a.type} cannot be passed as "
                    f".param .{p.type.ty.data} to {self.callee}"
                )


@irdl_op_definition
class LaunchExOp(IRDLOperation):
    """Host side: launch a kernel with dynamic shared memory and TMA tensor maps::

        ttarget.launch_ex @k(%a, %b, %c) grid = [132, 1, 1] smem = 197632
            boxes = [64, 128, 64, 64, 0, 0] : (memref<..>, memref<..>, memref<..>)

    ``boxes`` holds an (inner, outer) box size per argument: a memref whose box is
    non-zero is passed as a 2-D ``CUtensorMap`` of the memref seen as [rows, last dim]
    (rows the product of the leading dims; 128-byte swizzle, zero fill out of
    bounds) built by the runtime for a ``!ttarget.param<tmap>`` parameter; (0, 0)
    passes it like ``ttarget.launch`` does.
    """

    name = "ttarget.launch_ex"

    callee = prop_def(SymbolRefAttr)
    args = var_operand_def()
    grid = prop_def(DenseArrayBase.constr(i64))
    smem = prop_def(IntegerAttr[I64])
    boxes = prop_def(DenseArrayBase.constr(i64))
    assembly_format = (
        "$callee `(` $args `)` `grid` `=` $grid `smem` `=` $smem `boxes` `=` $boxes attr-dict "
        "`:` `(` type($args) `)`"
    )

    def __init__(
        self, callee: str, args: Sequence[SSAValue], grid: Sequence[int], smem: int,
        boxes: Sequence[int],
    ):
        super().__init__(
            operands=[list(args)],
            properties={
                "callee": SymbolRefAttr(callee),
                "grid": DenseArrayBase.from_list(i64, list(grid)),
                "smem": i64_attr(smem),
                "boxes": DenseArrayBase.from_list(i64, list(boxes)),
            },
        )

    def grid_value(self) -> tuple[int, int, int]:
        g = tuple(self.grid.get_values())
        return (g + (1, 1, 1))[:3]  # type: ignore[return-value]

    def box(self, i: int) -> tuple[int, int]:
        b = tuple(self.boxes.get_values())
        return b[2 * i], b[2 * i + 1]

    def kernel(self) -> FuncOp | None:
        found = SymbolTable.lookup_symbol(self, self.callee)
        return found if isinstance(found, FuncOp) else None

    def verify_(self) -> None:
        where = "ttarget.launch_ex"
        g = tuple(self.grid.get_values())
        if not 1 <= len(g) <= 3 or any(x < 1 for x in g):
            raise VerifyException(f"{where}: grid must be 1 to 3 positive sizes, got {list(g)}")
        if not 0 <= self.smem.value.data <= MAX_SHARED_BYTES:
            raise VerifyException(f"{where}: smem must be in [0, 227 KiB], got {self.smem.value.data}")
        if len(self.boxes.get_values()) != 2 * len(self.args):
            raise VerifyException(f"{where}: boxes needs two sizes per argument")
        k = self.kernel()
        if k is None:
            raise VerifyException(f"{where}: no ttarget.func named {self.callee}")
        if g[0] % k.cluster_size:
            raise VerifyException(
                f"{where}: grid x size {g[0]} is not a multiple of the cluster size "
                f"{k.cluster_size} of {self.callee}"
            )
        params = k.block.args
        if len(params) != len(self.args):
            raise VerifyException(
                f"{where}: kernel {self.callee} takes {len(params)} parameters, got {len(self.args)}"
            )
        for i, (p, a) in enumerate(zip(params, self.args)):
            assert isinstance(p.type, ParamType)
            is_map = self.box(i) != (0, 0)
            if is_map != (p.type.ty.data == "tmap"):
                raise VerifyException(
                    f"{where}: argument {i} has box {list(self.box(i))} but the parameter is "
                    f".{p.type.ty.data}; tensor maps go with !ttarget.param<tmap> parameters"
                )
            if is_map:
                if not isinstance(a.type, MemRefType) or len(a.type.get_shape()) < 2:
                    raise VerifyException(
                        f"{where}: argument {i}: a tensor map needs a memref of rank >= 2"
                    )
                continue
            want = host_param_type(a.type)
            if want is None or TYPE_BITS[want] != TYPE_BITS[p.type.ty.data]:
                raise VerifyException(
                    f"{where}: argument {i} of type {a.type} cannot be passed as "
                    f".param .{p.type.ty.data} to {self.callee}"
                )
