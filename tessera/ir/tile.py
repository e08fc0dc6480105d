"""Tile IR (``ttile``): SIMT programs over a grid of tiles.

A ``ttile.kernel`` is a program executed by every lane (thread) of every tile
(CTA) of a grid, as in CUDA. Tensor arguments are ``memref`` values in global
memory; scalars are builtin scalars. Scalar math uses xDSL's ``arith`` and
``math`` dialects, control flow ``scf``; the ``ttile`` ops add what those lack:
lane/tile coordinates, shared memory, masked loads and stores, async copies,
barriers, warp shuffles, cross-lane reductions and tensor-core MMA. The host
side launches kernels with ``ttile.launch`` from a ``func.func``::

    ttile.kernel @axpy(%x: memref<100xf32>, %y: memref<100xf32>) group_size = 128 {
      %i = ttile.linear_id
      %n = arith.constant 100 : index
      %m = arith.cmpi ult, %i, %n : index
      %v = ttile.load %x[%i] mask %m : memref<100xf32> -> f32
      ttile.store %v, %y[%i] mask %m : f32, memref<100xf32>
      ttile.return
    }
    func.func @main(%x: memref<100xf32>) -> memref<100xf32> {
      %y = memref.alloc() : memref<100xf32>
      ttile.launch @axpy(%x, %y) grid = [1, 1, 1] : (memref<100xf32>, memref<100xf32>) -> ()
      func.return %y : memref<100xf32>
    }

docs/TILE_IR.md describes the execution model and every op.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    I64,
    BFloat16Type,
    DenseArrayBase,
    Float8E4M3FNType,
    Float8E5M2Type,
    Float16Type,
    Float32Type,
    FunctionType,
    IndexType,
    IntAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    NoneAttr,
    StringAttr,
    SymbolNameConstraint,
    SymbolRefAttr,
    VectorType,
    f32,
    i1,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SSAValue, TypeAttribute
from xdsl.irdl import (
    AnyAttr,
    AttrSizedOperandSegments,
    IRDLOperation,
    VarConstraint,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import (
    IsolatedFromAbove,
    IsTerminator,
    Pure,
    SymbolOpInterface,
    SymbolTable,
    SymbolUserOpInterface,
)
from xdsl.utils.exceptions import VerifyException

from tessera.ir import host_collectives as hc
from tessera.ir.attrs import SharedMemorySpaceAttr

WARP_SIZE = 32
"""Lanes per warp."""

MAX_GROUP_SIZE = 1024
"""Largest tile group (threads per CTA)."""

DIMS = ("x", "y", "z")
REDUCE_KINDS = ("sum", "max", "min")
REDUCE_SCOPES = ("warp", "group")
SWIZZLES = ("xor",)
COPY_ASYNC_BYTES = (4, 8, 16)


# --------------------------------------------------------------------------- helpers


def is_shared(t: Attribute) -> bool:
    """True for a memref in a tile's shared memory (memory space ``#tessera.smem``)."""
    return isinstance(t, MemRefType) and isinstance(t.memory_space, SharedMemorySpaceAttr)


def shared_memref(shape: Sequence[int], element_type: Attribute) -> MemRefType:
    """``memref<shape x element_type, #tessera.smem>``."""
    return MemRefType(element_type, list(shape), NoneAttr(), SharedMemorySpaceAttr())


def element_bytes(t: Attribute) -> int:
    """Size in bytes of a scalar element type (index counts as 8)."""
    if isinstance(t, IndexType):
        return 8
    width = getattr(t, "bitwidth", None)
    if width is None:
        width = getattr(t, "width", None)
        width = width.data if isinstance(width, IntAttr) else width
    if not isinstance(width, int):
        raise TypeError(f"no byte size for element type {t}")
    return max(1, (width + 7) // 8)


def enclosing_kernel(op: Operation) -> KernelOp | None:
    p = op.parent_op()
    while p is not None:
        if isinstance(p, KernelOp):
            return p
        p = p.parent_op()
    return None


def _check_in_kernel(op: Operation) -> None:
    if op.parent_op() is not None and enclosing_kernel(op) is None:
        raise VerifyException(f"{op.name}: must be inside a ttile.kernel")


def _check_access(
    op: Operation, ref: SSAValue, indices: Sequence[SSAValue], mask: SSAValue | None
) -> MemRefType:
    t = ref.type
    if not isinstance(t, MemRefType):
        raise VerifyException(f"{op.name}: expected a memref, got {t}")
    if len(indices) != t.get_num_dims():
        raise VerifyException(
            f"{op.name}: memref of rank {t.get_num_dims()} needs {t.get_num_dims()} indices, "
            f"got {len(indices)}"
        )
    for k, i in enumerate(indices):
        if not isinstance(i.type, IndexType):
            raise VerifyException(f"{op.name}: index {k} must have type index, got {i.type}")
    if mask is not None and mask.type != i1:
        raise VerifyException(f"{op.name}: mask must be i1, got {mask.type}")
    return t


def _parse_dim(parser: Parser, opname: str) -> str:
    return parser.parse_keyword_in(DIMS, f" ({opname} dimension)")


# --------------------------------------------------------------------------- kernel


# CUDA's grid limits: 2^31 - 1 blocks along x, 65535 along y and z.
GRID_LIMITS = (2**31 - 1, 65535, 65535)


def check_grid_limits(where: str, grid: Sequence[int]) -> None:
    """Raise a VerifyException naming ``where`` if ``grid`` exceeds CUDA's limits."""
    if any(n > limit for n, limit in zip(grid, GRID_LIMITS)):
        raise VerifyException(
            f"{where}: grid {list(grid)} exceeds the CUDA limits "
            f"(x <= {GRID_LIMITS[0]}, y and z <= {GRID_LIMITS[1]})"
        )

class KernelSymbolUser(SymbolUserOpInterface):
    def verify(self, op: Operation) -> None:
        assert isinstance(op, LaunchOp)
        callee = SymbolTable.lookup_symbol(op, op.callee)
        if callee is None:
            raise VerifyException(f"{op.name}: kernel {op.callee} not found")
        if not isinstance(callee, KernelOp):
            raise VerifyException(f"{op.name}: {op.callee} is not a ttile.kernel")
        want = callee.function_type.inputs.data
        got = tuple(a.type for a in op.args)
        if len(want) != len(got):
            raise VerifyException(
                f"{op.name}: kernel {op.callee} takes {len(want)} arguments, got {len(got)}"
            )
        for k, (w, g) in enumerate(zip(want, got)):
            if w != g:
                raise VerifyException(
                    f"{op.name}: argument {k} has type {g}, kernel {op.callee} expects {w}"
                )


@irdl_op_definition
class KernelOp(IRDLOperation):
    """A SIMT program run by ``group_size`` lanes in each tile of a grid.

    Syntax: ``ttile.kernel @name(%a: memref<?x64xf32>, %n: index) group_size = N
    (grid = [gx, gy, gz])? (sizes = [%n, ?, ...])? (attributes {...})? { ... ttile.return }``.
    Arguments are global-memory memrefs (static or ``?`` dims) and scalars
    (integer, index, float). ``grid`` is the default launch grid; a
    ``ttile.launch`` states its own.

    ``sizes`` names, for every ``?`` dim of the memref arguments (argument
    order, then dim order), the ``index`` argument that holds its size, or
    ``?`` when no argument does. Row-major addressing needs the size of every
    dim but the first, so code generation for a memref with a dynamic inner dim
    needs its size argument; the interpreter reads sizes from the arrays.
    """

    name = "ttile.kernel"
    body = region_def("single_block")
    sym_name = prop_def(SymbolNameConstraint())
    function_type = prop_def(FunctionType)
    group_size = prop_def(IntegerAttr[I64])
    grid = opt_prop_def(DenseArrayBase[I64])
    sizes = opt_prop_def(DenseArrayBase[I64])
    traits = traits_def(IsolatedFromAbove(), SymbolOpInterface())

    def __init__(
        self,
        name: str,
        arg_types: Sequence[Attribute],
        group_size: int,
        grid: Sequence[int] | None = None,
        body: Region | None = None,
        sizes: Sequence[int] | None = None,
    ):
        props: dict[str, Attribute] = {
            "sym_name": StringAttr(name),
            "function_type": FunctionType.from_lists(list(arg_types), []),
            "group_size": IntegerAttr(group_size, i64),
        }
        if grid is not None:
            props["grid"] = DenseArrayBase.from_list(i64, list(grid))
        if sizes is not None:
            props["sizes"] = DenseArrayBase.from_list(i64, list(sizes))
        if body is None:
            body = Region(Block(arg_types=arg_types))
        super().__init__(properties=props, regions=[body])

    @property
    def args(self) -> tuple[SSAValue, ...]:
        return tuple(self.body.block.args)

    def group_size_value(self) -> int:
        return self.group_size.value.data

    def grid_value(self) -> tuple[int, int, int] | None:
        if self.grid is None:
            return None
        g = tuple(self.grid.get_values())
        return (g[0], g[1], g[2])

    def dynamic_dims(self) -> list[tuple[int, int]]:
        """(argument, dim) of every ``?`` dim of the memref arguments, in ``sizes`` order."""
        out: list[tuple[int, int]] = []
        for k, t in enumerate(self.function_type.inputs.data):
            if isinstance(t, MemRefType):
                out += [(k, d) for d, n in enumerate(t.get_shape()) if n == DYNAMIC_INDEX]
        return out

    def size_args(self) -> dict[tuple[int, int], int]:
        """(argument, dim) of a ``?`` dim -> the argument holding its size (from ``sizes``)."""
        if self.sizes is None:
            return {}
        return {
            key: a for key, a in zip(self.dynamic_dims(), self.sizes.get_values()) if a >= 0
        }

    def verify_(self) -> None:
        gs = self.group_size.value.data
        if not 1 <= gs <= MAX_GROUP_SIZE:
            raise VerifyException(
                f"{self.name} @{self.sym_name.data}: group_size must be in [1, {MAX_GROUP_SIZE}], "
                f"got {gs}"
            )
        if self.sizes is not None:
            dyn = self.dynamic_dims()
            vals = list(self.sizes.get_values())
            if len(vals) != len(dyn):
                raise VerifyException(
                    f"{self.name} @{self.sym_name.data}: sizes has {len(vals)} entries, but the "
                    f"memref arguments have {len(dyn)} dynamic dims"
                )
            ins = self.function_type.inputs.data
            for (k, d), a in zip(dyn, vals):
                if a >= 0 and not (a < len(ins) and isinstance(ins[a], IndexType)):
                    raise VerifyException(
                        f"{self.name} @{self.sym_name.data}: the size of dim {d} of argument "
                        f"{k} must be an index argument, got argument {a}"
                    )
        if self.grid is not None:
            g = list(self.grid.get_values())
            if len(g) != 3 or min(g) < 1:
                raise VerifyException(
                    f"{self.name} @{self.sym_name.data}: grid must be three sizes >= 1, got {g}"
                )
            check_grid_limits(f"{self.name} @{self.sym_name.data}", g)
        if self.function_type.outputs.data:
            raise VerifyException(f"{self.name} @{self.sym_name.data}: kernels return nothing")
        block = self.body.block
        ins = self.function_type.inputs.data
        if tuple(a.type for a in block.args) != tuple(ins):
            raise VerifyException(
                f"{self.name} @{self.sym_name.data}: block arguments do not match the "
                "function type"
            )
        for k, t in enumerate(ins):
            if isinstance(t, MemRefType):
                if is_shared(t):
                    raise VerifyException(
                        f"{self.name} @{self.sym_name.data}: argument {k} is a shared-memory "
                        "memref; arguments live in global memory"
                    )
            elif not isinstance(t, IntegerType | IndexType) and not _is_float_type(t):
                raise VerifyException(
                    f"{self.name} @{self.sym_name.data}: argument {k} has type {t}; expected a "
                    "memref or a scalar"
                )
        last = block.last_op
        if not isinstance(last, ReturnOp):
            raise VerifyException(
                f"{self.name} @{self.sym_name.data}: body must end with ttile.return"
            )

    @classmethod
    def parse(cls, parser: Parser) -> KernelOp:
        name = parser.parse_symbol_name().data
        args = parser.parse_comma_separated_list(
            parser.Delimiter.PAREN, lambda: parser.parse_argument()
        )
        parser.parse_keyword("group_size")
        parser.parse_punctuation("=")
        gs = parser.parse_integer()
        grid = None
        if parser.parse_optional_keyword("grid") is not None:
            parser.parse_punctuation("=")
            grid = parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE, parser.parse_integer
            )
        sizes = None
        if parser.parse_optional_keyword("sizes") is not None:
            parser.parse_punctuation("=")
            names = [a.name.text[1:] for a in args]

            def size_arg() -> int:
                if parser.parse_optional_punctuation("?") is not None:
                    return -1
                ref = parser.parse_unresolved_operand()
                if ref.operand_name not in names:
                    parser.raise_error(f"'%{ref.operand_name}' is not a kernel argument")
                return names.index(ref.operand_name)

            sizes = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, size_arg)
        attrs = parser.parse_optional_attr_dict_with_keyword(
            ("sym_name", "function_type", "group_size", "grid", "sizes")
        )
        region = parser.parse_region(args)
        op = cls(name, [a.type for a in args], gs, grid, region, sizes)
        if attrs is not None:
            op.attributes.update(attrs.data)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_string("(")
        printer.print_list(self.body.block.args, printer.print_block_argument)
        printer.print_string(f") group_size = {self.group_size.value.data}")
        if self.grid is not None:
            printer.print_string(
                " grid = [" + ", ".join(str(x) for x in self.grid.get_values()) + "]"
            )
        if self.sizes is not None:
            printer.print_string(" sizes = [")
            args = self.body.block.args
            printer.print_list(
                self.sizes.get_values(),
                lambda a: printer.print_string("?") if a < 0 else printer.print_ssa_value(args[a]),
            )
            printer.print_string("]")
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, False, True)


def _is_float_type(t: Attribute) -> bool:
    from xdsl.dialects.builtin import AnyFloat

    return isinstance(t, AnyFloat)


@irdl_op_definition
class ReturnOp(IRDLOperation):
    """Ends a ``ttile.kernel``: the lane is done."""

    name = "ttile.return"
    traits = traits_def(IsTerminator())
    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__()

    def verify_(self) -> None:
        if self.parent_op() is not None and not isinstance(self.parent_op(), KernelOp):
            raise VerifyException(f"{self.name}: must terminate a ttile.kernel")


@irdl_op_definition
class LaunchOp(IRDLOperation):
    """Host side: run kernel ``@callee`` on ``grid = [gx, gy, gz]`` tiles, each of the
    kernel's ``group_size`` lanes, with ``args`` (memrefs are passed by reference).
    Launches on the same host function run in order."""

    name = "ttile.launch"
    callee = prop_def(SymbolRefAttr)
    args = var_operand_def()
    grid = prop_def(DenseArrayBase[I64])
    traits = traits_def(KernelSymbolUser())
    assembly_format = (
        "$callee `(` $args `)` `grid` `=` $grid attr-dict `:` `(` type($args) `)`"
    )

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
        return (g[0], g[1], g[2])

    def verify_(self) -> None:
        g = list(self.grid.get_values())
        if len(g) != 3 or min(g) < 1:
            raise VerifyException(f"{self.name}: grid must be three sizes >= 1, got {g}")
        check_grid_limits(self.name, g)
        if enclosing_kernel(self) is not None:
            raise VerifyException(f"{self.name}: cannot launch from inside a ttile.kernel")


# --------------------------------------------------------------------------- coordinates


class _DimIndexOp(IRDLOperation):
    dim = prop_def(StringAttr)
    result = result_def(IndexType)
    traits = traits_def(Pure())

    def __init__(self, dim: str = "x"):
        super().__init__(result_types=[IndexType()], properties={"dim": StringAttr(dim)})

    def dim_index(self) -> int:
        return DIMS.index(self.dim.data)

    def verify_(self) -> None:
        if self.dim.data not in DIMS:
            raise VerifyException(
                f"{self.name}: dimension must be x, y or z, got '{self.dim.data}'"
            )
        _check_in_kernel(self)

    @classmethod
    def parse(cls, parser: Parser) -> _DimIndexOp:
        d = _parse_dim(parser, cls.name)
        attrs = parser.parse_optional_attr_dict()
        op = cls(d)
        op.attributes.update(attrs)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.dim.data}")
        printer.print_op_attributes(self.attributes)


@irdl_op_definition
class TileIdOp(_DimIndexOp):
    """This tile's index in the grid along ``x``, ``y`` or ``z`` (CUDA ``blockIdx``)."""

    name = "ttile.tile_id"


@irdl_op_definition
class NumTilesOp(_DimIndexOp):
    """The grid size along ``x``, ``y`` or ``z`` (CUDA ``gridDim``)."""

    name = "ttile.num_tiles"


class _LaneIndexOp(IRDLOperation):
    result = result_def(IndexType)
    traits = traits_def(Pure())
    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__(result_types=[IndexType()])

    def verify_(self) -> None:
        _check_in_kernel(self)


@irdl_op_definition
class LocalIdOp(_LaneIndexOp):
    """This lane's index within its tile, ``0 <= local_id < group_size`` (``threadIdx.x``)."""

    name = "ttile.local_id"


@irdl_op_definition
class GroupSizeOp(_LaneIndexOp):
    """Lanes per tile: the kernel's ``group_size`` (``blockDim.x``)."""

    name = "ttile.group_size"


@irdl_op_definition
class LinearIdOp(_LaneIndexOp):
    """``tile_id x * group_size + local_id``: the lane's index over a 1-D grid."""

    name = "ttile.linear_id"


@irdl_op_definition
class LaneIdOp(_LaneIndexOp):
    """The lane's index within its warp of 32: ``local_id % 32``."""

    name = "ttile.lane_id"


@irdl_op_definition
class WarpIdOp(_LaneIndexOp):
    """The warp's index within the tile: ``local_id / 32``."""

    name = "ttile.warp_id"


# --------------------------------------------------------------------------- memory


@irdl_op_definition
class AllocSharedOp(IRDLOperation):
    """A buffer in the tile's shared memory, one per tile, shared by its lanes.

    The result type is ``memref<shape x T, #tessera.smem>`` (static shape).
    ``swizzle = "xor"`` asks for the XOR-swizzled physical layout (see
    docs/TILE_IR.md); indexing stays logical. ``alignment`` is in bytes.
    Contents are undefined until stored.
    """

    name = "ttile.alloc_shared"
    swizzle = opt_prop_def(StringAttr)
    alignment = opt_prop_def(IntegerAttr[I64])
    result = result_def(MemRefType)
    assembly_format = (
        "(`swizzle` `=` $swizzle^)? (`alignment` `=` $alignment^)? attr-dict `:` type($result)"
    )

    def __init__(
        self,
        shape: Sequence[int],
        element_type: Attribute,
        swizzle: str | None = None,
        alignment: int | None = None,
    ):
        props: dict[str, Attribute] = {}
        if swizzle is not None:
            props["swizzle"] = StringAttr(swizzle)
        if alignment is not None:
            props["alignment"] = IntegerAttr(alignment, i64)
        super().__init__(result_types=[shared_memref(shape, element_type)], properties=props)

    def verify_(self) -> None:
        t = self.result.type
        assert isinstance(t, MemRefType)
        if not is_shared(t):
            raise VerifyException(
                f"{self.name}: result must be in shared memory (memory space #tessera.smem)"
            )
        shape = t.get_shape()
        if any(d < 1 for d in shape):
            raise VerifyException(
                f"{self.name}: shape must be static and positive, got {list(shape)}"
            )
        if self.swizzle is not None:
            if self.swizzle.data not in SWIZZLES:
                raise VerifyException(
                    f"{self.name}: unknown swizzle '{self.swizzle.data}'; valid: xor"
                )
            try:
                row = shape[-1] * element_bytes(t.element_type) if shape else 0
            except TypeError:  # a complex or other aggregate element: no row in bytes
                row = -1
            if len(shape) < 2 or row % 16 or row < 0:
                raise VerifyException(
                    f"{self.name}: swizzle \"xor\" needs rank >= 2 and rows of a multiple of "
                    f"16 bytes, got shape {list(shape)} of {t.element_type}"
                )
        if self.alignment is not None:
            a = self.alignment.value.data
            if a < 1 or a & (a - 1):
                raise VerifyException(f"{self.name}: alignment must be a power of two, got {a}")
        _check_in_kernel(self)


@irdl_op_definition
class LoadOp(IRDLOperation):
    """``%v = ttile.load %ref[%i, ...] (mask %m (other %o)?)?``: read one element.

    Global or shared memory, from the memref's memory space. With a mask, lanes
    whose mask is false read nothing (their index need not be in bounds) and get
    ``other`` (zero when absent).
    """

    name = "ttile.load"
    T: ClassVar = VarConstraint("T", AnyAttr())
    ref = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    mask = opt_operand_def(i1)
    other = opt_operand_def(T)
    result = result_def(T)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = (
        "$ref `[` $indices `]` (`mask` $mask^)? (`other` $other^)? attr-dict "
        "`:` type($ref) `->` type($result)"
    )

    def __init__(
        self,
        ref: SSAValue,
        indices: Sequence[SSAValue],
        mask: SSAValue | None = None,
        other: SSAValue | None = None,
    ):
        t = ref.type
        assert isinstance(t, MemRefType)
        super().__init__(
            operands=[ref, list(indices), [mask] if mask else [], [other] if other else []],
            result_types=[t.element_type],
        )

    def verify_(self) -> None:
        t = _check_access(self, self.ref, self.indices, self.mask)
        if self.result.type != t.element_type:
            raise VerifyException(
                f"{self.name}: result type {self.result.type} differs from the element type "
                f"{t.element_type}"
            )
        if self.other is not None and self.mask is None:
            raise VerifyException(f"{self.name}: 'other' needs a mask")
        _check_in_kernel(self)


class _StoreBase(IRDLOperation, ABC):
    """Operands, syntax and builder shared by ``ttile.store`` and ``ttile.store_vector``:
    ``value, ref[indices] (mask m)?``."""

    value = operand_def()
    ref = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    mask = opt_operand_def(i1)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = (
        "$value `,` $ref `[` $indices `]` (`mask` $mask^)? attr-dict "
        "`:` type($value) `,` type($ref)"
    )

    def __init__(
        self,
        value: SSAValue,
        ref: SSAValue,
        indices: Sequence[SSAValue],
        mask: SSAValue | None = None,
    ):
        super().__init__(operands=[value, ref, list(indices), [mask] if mask else []])


@irdl_op_definition
class StoreOp(_StoreBase):
    """``ttile.store %v, %ref[%i, ...] (mask %m)?``: write one element (lanes whose
    mask is false write nothing). When several lanes store to one address, the
    value is one of theirs (unspecified which)."""

    name = "ttile.store"

    def verify_(self) -> None:
        t = _check_access(self, self.ref, self.indices, self.mask)
        if self.value.type != t.element_type:
            raise VerifyException(
                f"{self.name}: value type {self.value.type} differs from the element type "
                f"{t.element_type}"
            )
        _check_in_kernel(self)

def _check_vector_access(op: Operation, vt: Attribute, t: MemRefType) -> int:
    if not isinstance(vt, VectorType) or vt.get_num_dims() != 1:
        raise VerifyException(f"{op.name}: expected a 1-D vector type, got {vt}")
    if vt.element_type != t.element_type:
        raise VerifyException(
            f"{op.name}: vector element type {vt.element_type} differs from the memref "
            f"element type {t.element_type}"
        )
    w = vt.get_shape()[0]
    nbytes = w * element_bytes(t.element_type)
    if w < 1 or nbytes > 16 or nbytes & (nbytes - 1):
        raise VerifyException(
            f"{op.name}: a vector access must be 1, 2, 4, 8 or 16 bytes, got {w} x "
            f"{t.element_type}"
        )
    return w


@irdl_op_definition
class LoadVectorOp(IRDLOperation):
    """``%v = ttile.load_vector %ref[%i, ...] (mask %m)? : memref<..> -> vector<WxT>``:
    read W consecutive elements along the last dimension, starting at the index
    (which must be aligned to the access size). A false mask gives zeros."""

    name = "ttile.load_vector"
    ref = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    mask = opt_operand_def(i1)
    result = result_def(VectorType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = (
        "$ref `[` $indices `]` (`mask` $mask^)? attr-dict `:` type($ref) `->` type($result)"
    )

    def __init__(
        self, ref: SSAValue, indices: Sequence[SSAValue], width: int, mask: SSAValue | None = None
    ):
        t = ref.type
        assert isinstance(t, MemRefType)
        super().__init__(
            operands=[ref, list(indices), [mask] if mask else []],
            result_types=[VectorType(t.element_type, [width])],
        )

    @property
    def width(self) -> int:
        t = self.result.type
        assert isinstance(t, VectorType)
        return t.get_shape()[0]

    def verify_(self) -> None:
        t = _check_access(self, self.ref, self.indices, self.mask)
        if t.get_num_dims() < 1:
            raise VerifyException(f"{self.name}: needs a memref of rank >= 1")
        _check_vector_access(self, self.result.type, t)
        _check_in_kernel(self)


@irdl_op_definition
class StoreVectorOp(_StoreBase):
    """``ttile.store_vector %v, %ref[%i, ...] (mask %m)?``: write W consecutive
    elements along the last dimension (aligned to the access size)."""

    name = "ttile.store_vector"
    value = operand_def(VectorType)

    def verify_(self) -> None:
        t = _check_access(self, self.ref, self.indices, self.mask)
        if t.get_num_dims() < 1:
            raise VerifyException(f"{self.name}: needs a memref of rank >= 1")
        _check_vector_access(self, self.value.type, t)
        _check_in_kernel(self)


@irdl_op_definition
class CopyAsyncOp(IRDLOperation):
    """``ttile.copy_async %dst[...], %src[...] elems = N (valid %n)?``: this lane
    starts an asynchronous copy of N consecutive elements (along the last
    dimension) from global ``src`` to shared ``dst``, like PTX ``cp.async``. N
    elements are 4, 8 or 16 bytes, and both addresses are aligned to that size.
    With ``valid %n`` (0 <= n <= N) only the first n elements are read and the
    rest of the destination is zero-filled (``cp.async`` src-size). The copy is
    complete after ``ttile.commit_group`` and a ``ttile.wait_group`` that covers
    it; other lanes see it after a following ``ttile.barrier``."""

    name = "ttile.copy_async"
    dst = operand_def(MemRefType)
    dst_indices = var_operand_def(IndexType)
    src = operand_def(MemRefType)
    src_indices = var_operand_def(IndexType)
    valid = opt_operand_def(IndexType)
    elems = prop_def(IntegerAttr[I64])
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = (
        "$dst `[` $dst_indices `]` `,` $src `[` $src_indices `]` `elems` `=` $elems "
        "(`valid` $valid^)? attr-dict `:` type($dst) `,` type($src)"
    )

    def __init__(
        self,
        dst: SSAValue,
        dst_indices: Sequence[SSAValue],
        src: SSAValue,
        src_indices: Sequence[SSAValue],
        elems: int,
        valid: SSAValue | None = None,
    ):
        super().__init__(
            operands=[dst, list(dst_indices), src, list(src_indices), [valid] if valid else []],
            properties={"elems": IntegerAttr(elems, i64)},
        )

    def verify_(self) -> None:
        d = _check_access(self, self.dst, self.dst_indices, None)
        s = _check_access(self, self.src, self.src_indices, None)
        if not is_shared(d):
            raise VerifyException(f"{self.name}: destination must be a shared-memory memref")
        if is_shared(s):
            raise VerifyException(f"{self.name}: source must be a global-memory memref")
        if d.element_type != s.element_type:
            raise VerifyException(
                f"{self.name}: element types differ: {d.element_type} and {s.element_type}"
            )
        if d.get_num_dims() < 1 or s.get_num_dims() < 1:
            raise VerifyException(f"{self.name}: needs memrefs of rank >= 1")
        n = self.elems.value.data
        nbytes = n * element_bytes(d.element_type)
        if n < 1 or nbytes not in COPY_ASYNC_BYTES:
            raise VerifyException(
                f"{self.name}: elems = {n} of {d.element_type} is {nbytes} bytes; a copy must "
                "be 4, 8 or 16 bytes"
            )
        _check_in_kernel(self)


@irdl_op_definition
class CommitGroupOp(IRDLOperation):
    """Close this lane's pending ``ttile.copy_async`` ops into one group
    (``cp.async.commit_group``)."""

    name = "ttile.commit_group"
    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__()

    def verify_(self) -> None:
        _check_in_kernel(self)


@irdl_op_definition
class WaitGroupOp(IRDLOperation):
    """Wait until at most ``pending`` of this lane's committed copy groups are still in
    flight (``cp.async.wait_group N``); ``ttile.wait_group 0`` waits for all."""

    name = "ttile.wait_group"
    pending = prop_def(IntegerAttr[I64])
    assembly_format = "$pending attr-dict"

    def __init__(self, pending: int = 0):
        super().__init__(properties={"pending": IntegerAttr(pending, i64)})

    def verify_(self) -> None:
        if self.pending.value.data < 0:
            raise VerifyException(f"{self.name}: pending count must be >= 0")
        _check_in_kernel(self)


@irdl_op_definition
class BarrierOp(IRDLOperation):
    """Wait until every lane of the tile arrives; shared-memory writes before it are
    visible to all lanes after it (``bar.sync 0``). Every lane of a tile must reach
    the same barrier (not under a condition that differs between lanes)."""

    name = "ttile.barrier"
    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__()

    def verify_(self) -> None:
        _check_in_kernel(self)


# --------------------------------------------------------------------------- cross-lane


def _check_lane_scalar(op: Operation, t: Attribute) -> None:
    if not (isinstance(t, IntegerType | IndexType) or _is_float_type(t)):
        raise VerifyException(f"{op.name}: expected an integer or float scalar, got {t}")


@irdl_op_definition
class ShuffleXorOp(IRDLOperation):
    """``ttile.shuffle_xor %v, OFFSET``: the value of lane ``lane_id ^ OFFSET`` of the
    same warp (``shfl.sync.bfly``, full mask). All 32 lanes of the warp take part."""

    name = "ttile.shuffle_xor"
    T: ClassVar = VarConstraint("T", AnyAttr())
    value = operand_def(T)
    offset = prop_def(IntegerAttr[I64])
    result = result_def(T)
    assembly_format = "$value `,` $offset attr-dict `:` type($value)"

    def __init__(self, value: SSAValue, offset: int):
        super().__init__(
            operands=[value],
            result_types=[value.type],
            properties={"offset": IntegerAttr(offset, i64)},
        )

    def verify_(self) -> None:
        o = self.offset.value.data
        if not 1 <= o < WARP_SIZE:
            raise VerifyException(f"{self.name}: offset must be in [1, 31], got {o}")
        _check_lane_scalar(self, self.value.type)
        _check_in_kernel(self)


@irdl_op_definition
class ReduceOp(IRDLOperation):
    """``ttile.reduce %v kind = sum|max|min scope = warp|group``: combine ``%v`` over the
    lanes of the warp or of the whole tile; every lane gets the result. The order of
    combination is fixed (a butterfly over lanes, then over warps in order), so the
    result is deterministic. All lanes of the scope take part; ``scope = group``
    contains a barrier."""

    name = "ttile.reduce"
    T: ClassVar = VarConstraint("T", AnyAttr())
    value = operand_def(T)
    kind = prop_def(StringAttr)
    scope = prop_def(StringAttr)
    result = result_def(T)

    def __init__(self, value: SSAValue, kind: str, scope: str):
        super().__init__(
            operands=[value],
            result_types=[value.type],
            properties={"kind": StringAttr(kind), "scope": StringAttr(scope)},
        )

    def verify_(self) -> None:
        if self.kind.data not in REDUCE_KINDS:
            raise VerifyException(
                f"{self.name}: unknown kind '{self.kind.data}'; valid: sum, max, min"
            )
        if self.scope.data not in REDUCE_SCOPES:
            raise VerifyException(
                f"{self.name}: unknown scope '{self.scope.data}'; valid: warp, group"
            )
        _check_lane_scalar(self, self.value.type)
        _check_in_kernel(self)

    @classmethod
    def parse(cls, parser: Parser) -> ReduceOp:
        uv = parser.parse_unresolved_operand()
        parser.parse_keyword("kind")
        parser.parse_punctuation("=")
        kind = parser.parse_keyword_in(REDUCE_KINDS, " (ttile.reduce kind)")
        parser.parse_keyword("scope")
        parser.parse_punctuation("=")
        scope = parser.parse_keyword_in(REDUCE_SCOPES, " (ttile.reduce scope)")
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        op = cls(parser.resolve_operand(uv, t), kind, scope)
        op.attributes.update(attrs)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.value)
        printer.print_string(f" kind = {self.kind.data} scope = {self.scope.data}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.value.type)


MMA_M, MMA_N, MMA_K = 16, 8, 16
MMA_K_FP8 = 32
MMA_K_TF32 = 8


def _is_fp8(t: Attribute) -> bool:
    return isinstance(t, Float8E4M3FNType | Float8E5M2Type)


def mma_k(element_type: Attribute) -> int:
    """K of the ``ttile.mma`` shape for operands of ``element_type``: 16 (bf16/f16), 32
    (fp8), 8 (f32 read as tf32)."""
    if _is_fp8(element_type):
        return MMA_K_FP8
    return MMA_K_TF32 if isinstance(element_type, Float32Type) else MMA_K


@irdl_op_definition
class MmaOp(IRDLOperation):
    """Warp-level tensor-core product ``D = A B + C`` on per-lane fragments, f32 accumulation.

    * bf16/f16, m16n8k16: ``a: vector<8xbf16|f16>`` (A is 16x16, row-major),
      ``b: vector<4xbf16|f16>`` (B is 16x8, column-major), as PTX
      ``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32``.
    * fp8, m16n8k32: ``a: vector<16xf8E4M3FN|f8E5M2>`` (A is 16x32),
      ``b: vector<8xf8E4M3FN|f8E5M2>`` (B is 32x8), as PTX
      ``mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32`` (or ``e5m2``; sm_89+,
      PTX ISA 8.4).
    * tf32, m16n8k8: ``a: vector<4xf32>`` (A is 16x8), ``b: vector<2xf32>`` (B is 8x8), as
      PTX ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``. The tensor cores read
      each operand as tf32: the low 13 bits of its f32 mantissa are not read (the
      product of a value and its truncation to 10 mantissa bits). Exact f32 products
      take three of these on a split of each operand (``tile_mma_gemm``, 3xTF32).

    ``c``/result are ``vector<4xf32>`` (C/D are 16x8), ``accum = f32``. The lane-to-element
    mapping is PTX's (see docs/TILE_IR.md and :func:`mma_a_coords` / :func:`mma_b_coords` /
    :func:`mma_c_coords`). All 32 lanes of the warp take part."""

    name = "ttile.mma"
    a = operand_def(VectorType)
    b = operand_def(VectorType)
    c = operand_def(VectorType)
    accum = prop_def(TypeAttribute)
    result = result_def(VectorType)
    assembly_format = (
        "$a `,` $b `,` $c `accum` `=` $accum attr-dict `:` type($a) `,` type($b) `,` type($c) "
        "`->` type($result)"
    )

    def __init__(self, a: SSAValue, b: SSAValue, c: SSAValue):
        super().__init__(
            operands=[a, b, c],
            result_types=[VectorType(f32, [4])],
            properties={"accum": f32},
        )

    @property
    def k(self) -> int:
        """K of the instruction shape (16, 32 or 8)."""
        at = self.a.type
        assert isinstance(at, VectorType)
        return mma_k(at.element_type)

    def verify_(self) -> None:
        at, bt, ct, rt = self.a.type, self.b.type, self.c.type, self.result.type
        assert isinstance(at, VectorType) and isinstance(bt, VectorType)
        et = at.element_type
        if _is_fp8(et):
            if at.get_shape() != (16,):
                raise VerifyException(f"{self.name}: an fp8 a must be vector<16x{et}>, got {at}")
            nb = 8
        elif isinstance(et, BFloat16Type | Float16Type) and at.get_shape() == (8,):
            nb = 4
        elif isinstance(et, Float32Type) and at.get_shape() == (4,):
            nb = 2
        else:
            raise VerifyException(
                f"{self.name}: a must be vector<8xbf16>, vector<8xf16>, vector<16xf8E4M3FN>, "
                f"vector<16xf8E5M2> or vector<4xf32> (tf32), got {at}"
            )
        if bt != VectorType(et, [nb]):
            raise VerifyException(f"{self.name}: b must be vector<{nb}x{et}>, got {bt}")
        want = VectorType(f32, [4])
        if ct != want or rt != want:
            raise VerifyException(
                f"{self.name}: c and the result must be vector<4xf32>, got {ct} and {rt}"
            )
        if not isinstance(self.accum, Float32Type):
            raise VerifyException(f"{self.name}: accum must be f32, got {self.accum}")
        _check_in_kernel(self)


def mma_a_coords(lane: int, i: int, k: int = MMA_K) -> tuple[int, int]:
    """(row, col) of A (16 x k) held in element ``i`` of lane ``lane``'s a fragment.

    k = 16: elements 0..7, two per ``.b32`` register; k = 32 (fp8): elements 0..15, four
    per register (element ``4j`` in the low byte of register ``j``); k = 8 (tf32):
    elements 0..3, one per register.
    """
    g, t = lane >> 2, lane & 3
    if k == MMA_K_TF32:
        return g + 8 * (i & 1), t + 4 * (i >> 1)
    if k == MMA_K_FP8:
        return g + 8 * ((i >> 2) & 1), 4 * t + (i & 3) + 16 * (i >> 3)
    return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)


def mma_b_coords(lane: int, i: int, k: int = MMA_K) -> tuple[int, int]:
    """(row k, col n) of B (k x 8) held in element ``i`` of lane ``lane``'s b fragment
    (0..3 for k = 16, 0..7 for k = 32, 0..1 for k = 8)."""
    g, t = lane >> 2, lane & 3
    if k == MMA_K_TF32:
        return t + 4 * i, g
    if k == MMA_K_FP8:
        return 4 * t + (i & 3) + 16 * (i >> 2), g
    return 2 * t + (i & 1) + 8 * (i >> 1), g


def mma_c_coords(lane: int, i: int) -> tuple[int, int]:
    """(row, col) of C/D (16x8) held in element ``i`` (0..3) of lane ``lane``'s fragment."""
    g, t = lane >> 2, lane & 3
    return g + 8 * (i >> 1), 2 * t + (i & 1)


TILE_OPS: list[type[Operation]] = [
    KernelOp, ReturnOp, LaunchOp,
    TileIdOp, NumTilesOp, LocalIdOp, GroupSizeOp, LinearIdOp, LaneIdOp, WarpIdOp,
    AllocSharedOp, LoadOp, StoreOp, LoadVectorOp, StoreVectorOp,
    CopyAsyncOp, CommitGroupOp, WaitGroupOp, BarrierOp,
    ShuffleXorOp, ReduceOp, MmaOp,
]

Tile = Dialect("ttile", TILE_OPS, [])


# =========================================================================== host collectives
# Host-side collectives of lowered per-rank programs (from the tgraph collectives; syntax,
# verifiers and semantics in tessera/ir/host_collectives.py, docs/TILE_IR.md).


@irdl_op_definition
class AllReduceOp(hc.AllReduceBase):
    """Host: ``%r = ttile.all_reduce %x op = "sum" axis = "tp" : memref<..> -> memref<..>``."""

    name = "ttile.all_reduce"


@irdl_op_definition
class AllGatherOp(hc.AllGatherBase):
    """Host: ``%r = ttile.all_gather %x axis = "tp" dim = 1 : memref<..> -> memref<..>``."""

    name = "ttile.all_gather"


@irdl_op_definition
class ReduceScatterOp(hc.ReduceScatterBase):
    """Host: ``%r = ttile.reduce_scatter %x op = "sum" axis = "tp" dim = 0 : ...``."""

    name = "ttile.reduce_scatter"


@irdl_op_definition
class AllToAllOp(hc.AllToAllBase):
    """Host: ``%r = ttile.all_to_all %x axis = "tp" split_dim = 0 concat_dim = 1 : ...``."""

    name = "ttile.all_to_all"


@irdl_op_definition
class SendOp(hc.SendBase):
    """Host: ``ttile.send %x axis = "pp" peer = 1 : memref<..>``."""

    name = "ttile.send"


@irdl_op_definition
class RecvOp(hc.RecvBase):
    """Host: ``%r = ttile.recv axis = "pp" peer = -1 : memref<..>``."""

    name = "ttile.recv"


@irdl_op_definition
class MeshCoordOp(hc.MeshCoordBase):
    """Host: ``%c = ttile.mesh_coord axis = "tp"`` (this rank's coordinate, an index)."""

    name = "ttile.mesh_coord"


HOST_COLLECTIVE_OPS: tuple[type[hc.HostCollectiveOp], ...] = (
    AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp, SendOp, RecvOp, MeshCoordOp,
)
"""Host-side collective ops of ``ttile`` (same order as ``hc.HOST_COLLECTIVE_BASES``)."""

TILE_OPS.extend(HOST_COLLECTIVE_OPS)
Tile = Dialect("ttile", TILE_OPS, [])
