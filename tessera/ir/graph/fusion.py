"""``tgraph.fused`` (a fused elementwise kernel), ``tgraph.fused_reductions`` (several
reductions of one fused body), their ``tgraph.yield`` and ``tgraph.matmul_epilogue``."""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence

from xdsl.dialects.builtin import (
    I64,
    BFloat16Type,
    DenseArrayBase,
    Float16Type,
    Float32Type,
    NoneAttr,
    StringAttr,
    TensorType,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsolatedFromAbove, IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from tessera.ir.graph.base import (
    TensorT,
    _check_same_elem,
    _check_shape,
    _is_float,
    broadcast_shapes,
    elem_of,
    fmt_shape,
    shape_of,
)
from tessera.ir.graph.elementwise import (
    MAX_TILE_SIZE,
    AbsOp,
    AddOp,
    CastOp,
    CosOp,
    DivOp,
    EqOp,
    ErfOp,
    ExpOp,
    GeluOp,
    GeOp,
    GtOp,
    LeOp,
    LogOp,
    LtOp,
    MaximumOp,
    MinimumOp,
    MulOp,
    NegOp,
    NeOp,
    PowOp,
    ReluOp,
    RsqrtOp,
    SelectOp,
    SigmoidOp,
    SiluOp,
    SinOp,
    SqrtOp,
    SubOp,
    TanhOp,
)
from tessera.ir.graph.nn import (
    MatmulOp,
    MaxOp,
    MeanOp,
    MinOp,
    SumOp,
)
from tessera.ir.graph.shape import (
    BroadcastOp,
    ConcatOp,
    ConstantOp,
    ReshapeOp,
    SliceOp,
    TransposeOp,
)

# --------------------------------------------------------------------------- fusion


FUSIBLE_UNARY_OPS: tuple[type[IRDLOperation], ...] = (
    NegOp, AbsOp, ExpOp, LogOp, SqrtOp, RsqrtOp, TanhOp, ReluOp, GeluOp, SiluOp, SigmoidOp,
    ErfOp, SinOp, CosOp, CastOp,
)
FUSIBLE_BINARY_OPS: tuple[type[IRDLOperation], ...] = (
    AddOp, SubOp, MulOp, DivOp, PowOp, MaximumOp, MinimumOp, LtOp, LeOp, GtOp, GeOp, EqOp, NeOp,
)
FUSIBLE_ELEMENTWISE_OPS: tuple[type[IRDLOperation], ...] = (
    *FUSIBLE_UNARY_OPS, *FUSIBLE_BINARY_OPS, SelectOp,
)
"""Ops that may appear in a ``tgraph.fused`` body before its (optional) reduction."""
FUSIBLE_REDUCTION_OPS: tuple[type[IRDLOperation], ...] = (SumOp, MaxOp, MinOp, MeanOp)
"""Reductions that may end a ``tgraph.fused`` body."""


def unit_reshape(op: IRDLOperation) -> bool:
    """``op`` is a ``tgraph.reshape`` that only adds or drops size-1 dims."""
    if not isinstance(op, ReshapeOp):
        return False
    return [d for d in shape_of(op.input) if d != 1] == [d for d in shape_of(op.result) if d != 1]


def is_index_map(op: IRDLOperation) -> bool:
    """``op`` may sit in a ``tgraph.fused`` body as an index map: it moves no data of its
    own, each element of its result is an element of an operand at an index that is an
    affine function of the result's index per dim. These are ``tgraph.transpose`` keeping
    the last dim, ``tgraph.slice``, ``tgraph.concat`` and reshapes adding or dropping
    size-1 dims (``tgraph.broadcast`` is one too, and may always be fused)."""
    if isinstance(op, TransposeOp):
        perm = [int(p) for p in op.permutation.get_values()]
        return not perm or perm[-1] == len(perm) - 1
    return isinstance(op, SliceOp | ConcatOp) or unit_reshape(op)


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminator of a ``tgraph.fused`` or ``tgraph.fused_reductions`` body: the values it
    yields are the op's results."""

    name = "tgraph.yield"
    values = var_operand_def(TensorT)
    traits = lazy_traits_def(
        lambda: (IsTerminator(), HasParent(FusedOp, FusedReductionsOp), Pure())
    )
    assembly_format = "attr-dict ($values^ `:` type($values))?"

    def __init__(self, *values: SSAValue):
        super().__init__(operands=[list(values)])


class _FusedBodyOp(IRDLOperation, ABC):
    """Base of the ops whose single-block body computes their results from their operands
    (one block argument per operand, of its type), ended by ``tgraph.yield``."""

    inputs = var_operand_def(TensorT)
    body = region_def("single_block")
    traits = traits_def(Pure(), IsolatedFromAbove())

    @property
    def block(self) -> Block:
        return self.body.block

    @property
    def yield_op(self) -> YieldOp:
        term = self.block.last_op
        assert isinstance(term, YieldOp)
        return term

    def verify_body(self) -> YieldOp:
        """Check the body's arguments against the operands and its terminator; return it."""
        args = self.block.args
        if len(args) != len(self.inputs):
            raise VerifyException(
                f"{self.name}: body has {len(args)} arguments for {len(self.inputs)} operands"
            )
        for i, (a, v) in enumerate(zip(args, self.inputs)):
            if a.type != v.type:
                raise VerifyException(
                    f"{self.name}: body argument {i} has type {a.type}, operand has {v.type}"
                )
        term = self.block.last_op
        if not isinstance(term, YieldOp):
            raise VerifyException(f"{self.name}: body must end with tgraph.yield")
        return term


@irdl_op_definition
class FusedOp(_FusedBodyOp):
    """A fused elementwise kernel: one op that lowers to one kernel.

    The single-block body takes one block argument per operand (same types) and
    is a chain of ``tgraph`` elementwise ops (and splat/small ``tgraph.constant``
    ops, ``tgraph.broadcast``: its input read at the broadcast indices, and the index
    maps of :func:`is_index_map`: transposes keeping the last dim, slices, concats,
    reshapes of size-1 dims) on whole tensors, optionally ended by one reduction
    (``tgraph.sum/max/min/mean``) whose result is yielded. The op's result is the
    value yielded by ``tgraph.yield``. Its meaning is exactly that of running
    the body on the operands::

        %r = tgraph.fused %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4xf32> {
        ^bb0(%0: tensor<4x8xf32>, %1: tensor<8xf32>):
          %2 = tgraph.add %0, %1 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
          %3 = tgraph.exp %2 : (tensor<4x8xf32>) -> tensor<4x8xf32>
          %4 = tgraph.sum %3 axes = [1] : (tensor<4x8xf32>) -> tensor<4xf32>
          tgraph.yield %4 : tensor<4xf32>
        }
    """

    name = "tgraph.fused"
    result = result_def(TensorT)
    assembly_format = "$inputs attr-dict `:` functional-type($inputs, $result) $body"

    def __init__(self, inputs: Sequence[SSAValue], result_type: Attribute, body: Region):
        super().__init__(operands=[list(inputs)], result_types=[result_type], regions=[body])

    def reduction(self) -> IRDLOperation | None:
        """The trailing reduction of the body, if any."""
        term = self.block.last_op
        prev = term.prev_op if term is not None else None
        return prev if isinstance(prev, FUSIBLE_REDUCTION_OPS) else None

    def verify_(self) -> None:
        term = self.verify_body()
        if len(term.values) != 1 or term.values[0].type != self.result.type:
            raise VerifyException(
                f"{self.name}: body must yield one value of the result type {self.result.type}"
            )
        body_ops = list(self.block.ops)[:-1]
        for i, op in enumerate(body_ops):
            if isinstance(op, FUSIBLE_REDUCTION_OPS):
                if i != len(body_ops) - 1 or term.values[0] is not op.results[0]:
                    raise VerifyException(
                        f"{self.name}: a reduction ({op.name}) may only end the body, "
                        "with its result yielded"
                    )
            elif not (isinstance(op, (*FUSIBLE_ELEMENTWISE_OPS, ConstantOp, BroadcastOp))
                      or is_index_map(op)):
                raise VerifyException(
                    f"{self.name}: {op.name} cannot be fused; the body may hold elementwise "
                    "ops, constants, broadcasts, transposes keeping the last dim, slices, "
                    "concats, reshapes of size-1 dims and one trailing reduction"
                )


@irdl_op_definition
class FusedReductionsOp(_FusedBodyOp):
    """Several reductions of one fused elementwise body: one op that lowers to one kernel
    reading its operands once.

    The single-block body takes one block argument per operand (same types) and holds
    ``tgraph`` elementwise ops and splat constants on whole tensors, and two or more
    reductions (``tgraph.sum/max/min/mean``) over the same axes of values of the same
    shape, with the same ``keepdims``. ``tgraph.yield`` yields the reductions' results, each
    once, and nothing else uses them. Result ``i`` is the ``i``-th yielded value: the op
    means exactly what running the body on the operands means. Batch norm's backward
    reduces ``dy`` and ``dy * (x - mean)`` over the same dims this way::

        %s, %t = tgraph.fused_reductions %dy, %x, %m
            : (tensor<4x8x7x7xf32>, tensor<4x8x7x7xf32>, tensor<1x8x1x1xf32>)
            -> (tensor<4x8xf32>, tensor<4x8xf32>) {
        ^bb0(%0: tensor<4x8x7x7xf32>, %1: tensor<4x8x7x7xf32>, %2: tensor<1x8x1x1xf32>):
          %3 = tgraph.sum %0 axes = [2, 3] : (tensor<4x8x7x7xf32>) -> tensor<4x8xf32>
          %4 = tgraph.sub %1, %2 : (tensor<4x8x7x7xf32>, tensor<1x8x1x1xf32>) -> tensor<4x8x7x7xf32>
          %5 = tgraph.mul %0, %4 : (tensor<4x8x7x7xf32>, tensor<4x8x7x7xf32>) -> tensor<4x8x7x7xf32>
          %6 = tgraph.sum %5 axes = [2, 3] : (tensor<4x8x7x7xf32>) -> tensor<4x8xf32>
          tgraph.yield %3, %6 : tensor<4x8xf32>, tensor<4x8xf32>
        }
    """

    name = "tgraph.fused_reductions"
    outputs = var_result_def(TensorT)
    assembly_format = "$inputs attr-dict `:` functional-type($inputs, $outputs) $body"

    def __init__(self, inputs: Sequence[SSAValue], result_types: Sequence[Attribute],
                 body: Region):
        super().__init__(operands=[list(inputs)], result_types=[list(result_types)],
                         regions=[body])

    def reductions(self) -> list[IRDLOperation]:
        """The reductions whose results are yielded, in result order."""
        return [v.owner for v in self.yield_op.values]  # type: ignore[misc]

    def verify_(self) -> None:
        term = self.verify_body()
        if len(self.outputs) < 2:
            raise VerifyException(
                f"{self.name}: has {len(self.outputs)} result(s); one reduction is a "
                "tgraph.fused op"
            )
        if [v.type for v in term.values] != [r.type for r in self.outputs]:
            raise VerifyException(
                f"{self.name}: body must yield one value per result, of the result types "
                f"({', '.join(str(r.type) for r in self.outputs)})"
            )
        reds = []
        for v in term.values:
            owner = v.owner
            if not isinstance(owner, FUSIBLE_REDUCTION_OPS) or owner.parent_block() is not self.block:
                raise VerifyException(
                    f"{self.name}: each yielded value must be the result of a reduction "
                    "(tgraph.sum/max/min/mean) of the body"
                )
            if owner in reds:
                raise VerifyException(f"{self.name}: a reduction's result is yielded twice")
            reds.append(owner)
        first = reds[0]
        for r in reds[1:]:
            if (shape_of(r.input) != shape_of(first.input)
                    or r.axis_list() != first.axis_list()
                    or (r.keepdims is None) != (first.keepdims is None)):
                raise VerifyException(
                    f"{self.name}: every reduction must reduce the same axes of a value of the "
                    f"same shape with the same keepdims ({first.name} over "
                    f"{first.axis_list()} of {fmt_shape(shape_of(first.input))}, {r.name} over "
                    f"{r.axis_list()} of {fmt_shape(shape_of(r.input))})"
                )
        for op in list(self.block.ops)[:-1]:
            if isinstance(op, FUSIBLE_REDUCTION_OPS):
                if op not in reds or any(u.operation is not term for u in op.results[0].uses):
                    raise VerifyException(
                        f"{self.name}: a reduction's result may only be yielded"
                    )
            elif not isinstance(op, (*FUSIBLE_ELEMENTWISE_OPS, ConstantOp)):
                raise VerifyException(
                    f"{self.name}: {op.name} cannot be fused here; the body may hold "
                    "elementwise ops, constants and the reductions"
                )


ACTIVATIONS = ("relu", "gelu", "silu")


def _narrow_bias(bias: SSAValue, product: Attribute) -> bool:
    """A bf16/f16 bias of an f32 product (widened exactly where it is added)."""
    bt, pt = bias.type, product
    return (
        isinstance(bt, TensorType) and isinstance(pt, TensorType)
        and isinstance(bt.element_type, BFloat16Type | Float16Type)
        and isinstance(pt.element_type, Float32Type)
        and isinstance(bt.encoding, NoneAttr) and isinstance(pt.encoding, NoneAttr)
    )


@irdl_op_definition
class MatmulEpilogueOp(IRDLOperation):
    """A matmul with its epilogue fused:
    ``cast(act(matmul(lhs, rhs) + bias) + residual)``.

    The product (with ``transpose_lhs`` / ``transpose_rhs`` as in ``tgraph.matmul``)
    is computed in ``compute_type`` (the result type when absent). Then, in
    order and each optional: ``bias`` is added (it broadcasts to the product's
    shape), ``activation`` (``"relu"``, ``"gelu"`` or ``"silu"``, as the
    ``tgraph`` ops of those names) is applied, ``residual`` (of the product's
    shape) is added, and when ``compute_type`` is given the value is cast to the
    result type as ``tgraph.cast`` does. Each step rounds to ``compute_type`` as
    its ``tgraph`` op would. The bias has the product's element type, or is bf16/f16
    for an f32 product (widened exactly: cuBLASLt's bias of the output type).
    """

    name = "tgraph.matmul_epilogue"
    lhs = operand_def(TensorT)
    rhs = operand_def(TensorT)
    bias = opt_operand_def(TensorT)
    residual = opt_operand_def(TensorT)
    transpose_lhs = opt_prop_def(UnitAttr)
    transpose_rhs = opt_prop_def(UnitAttr)
    activation = opt_prop_def(StringAttr)
    compute_type = opt_prop_def(TensorT)
    tile_shape = opt_prop_def(DenseArrayBase[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    # Custom syntax (two optional operands make the declarative format's
    # ``functional-type(operands, results)`` ambiguous):
    #   %lhs, %rhs (bias %b)? (residual %r)? (transpose_lhs)? (transpose_rhs)?
    #   (activation = "gelu")? (compute_type = T)? (tile_shape = [BM, BN, BK])?
    #   attr-dict : (operand types) -> result type

    @classmethod
    def parse(cls, parser: Parser) -> MatmulEpilogueOp:
        lhs = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        rhs = parser.parse_unresolved_operand()
        bias = parser.parse_unresolved_operand() if parser.parse_optional_keyword("bias") else None
        residual = (
            parser.parse_unresolved_operand() if parser.parse_optional_keyword("residual")
            else None
        )
        tl = parser.parse_optional_keyword("transpose_lhs") is not None
        tr = parser.parse_optional_keyword("transpose_rhs") is not None
        act = comp = tile = None
        if parser.parse_optional_keyword("activation"):
            parser.parse_punctuation("=")
            act = parser.parse_str_literal()
        if parser.parse_optional_keyword("compute_type"):
            parser.parse_punctuation("=")
            comp = parser.parse_type()
        if parser.parse_optional_keyword("tile_shape"):
            parser.parse_punctuation("=")
            tile = parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE, parser.parse_integer
            )
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        at = parser.pos
        ft = parser.parse_function_type()
        names = [lhs, rhs, *(v for v in (bias, residual) if v is not None)]
        if len(ft.inputs.data) != len(names) or len(ft.outputs.data) != 1:
            parser.raise_error(
                f"{cls.name}: {len(names)} operands and one result, but the type is {ft}",
                at, parser.pos,
            )
        vals = [parser.resolve_operand(n, t) for n, t in zip(names, ft.inputs.data)]
        it = iter(vals[2:])
        op = cls(
            vals[0], vals[1], ft.outputs.data[0],
            bias=next(it) if bias is not None else None,
            residual=next(it) if residual is not None else None,
            transpose_lhs=tl, transpose_rhs=tr, activation=act, compute_type=comp,
            tile_shape=tile,
        )
        op.attributes.update(attrs)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.lhs)
        printer.print_string(", ")
        printer.print_operand(self.rhs)
        for kw, v in (("bias", self.bias), ("residual", self.residual)):
            if v is not None:
                printer.print_string(f" {kw} ")
                printer.print_operand(v)
        for kw, flag in (("transpose_lhs", self.transpose_lhs),
                         ("transpose_rhs", self.transpose_rhs)):
            if flag is not None:
                printer.print_string(f" {kw}")
        if self.activation is not None:
            printer.print_string(" activation = ")
            printer.print_string_literal(self.activation.data)
        if self.compute_type is not None:
            printer.print_string(" compute_type = ")
            printer.print_attribute(self.compute_type)
        if self.tile_shape is not None:
            printer.print_string(
                " tile_shape = [" + ", ".join(str(x) for x in self.tile_shape.get_values())
                + "]"
            )
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_function_type([v.type for v in self.operands], [self.result.type])

    def __init__(
        self,
        lhs: SSAValue,
        rhs: SSAValue,
        result_type: Attribute,
        *,
        bias: SSAValue | None = None,
        residual: SSAValue | None = None,
        transpose_lhs: bool = False,
        transpose_rhs: bool = False,
        activation: str | None = None,
        compute_type: Attribute | None = None,
        tile_shape: Sequence[int] | None = None,
    ):
        props: dict[str, Attribute] = {}
        if transpose_lhs:
            props["transpose_lhs"] = UnitAttr()
        if transpose_rhs:
            props["transpose_rhs"] = UnitAttr()
        if activation is not None:
            props["activation"] = StringAttr(activation)
        if compute_type is not None and compute_type != result_type:
            props["compute_type"] = compute_type
        if tile_shape is not None:
            props["tile_shape"] = DenseArrayBase.from_list(i64, list(tile_shape))
        super().__init__(
            operands=[lhs, rhs, [bias] if bias is not None else [],
                      [residual] if residual is not None else []],
            result_types=[result_type],
            properties=props,
        )

    @property
    def epilogue_operands(self) -> list[SSAValue]:
        """The bias and the residual, those present, in that order (the epilogue kernels'
        extra arguments)."""
        return [v for v in (self.bias, self.residual) if v is not None]

    @property
    def product_type(self) -> TensorType:
        """The type the product, bias add, activation and residual add are computed in."""
        t = self.compute_type if self.compute_type is not None else self.result.type
        assert isinstance(t, TensorType)
        return t

    def verify_(self) -> None:
        _check_same_elem(self, self.lhs, self.rhs)
        r = MatmulOp.infer_shape(
            shape_of(self.lhs),
            shape_of(self.rhs),
            self.transpose_lhs is not None,
            self.transpose_rhs is not None,
        )
        if isinstance(r, str):
            raise VerifyException(f"{self.name}: {r}")
        _check_shape(self, "result", shape_of(self.result), r)
        pt = self.product_type
        _check_shape(self, "compute_type", shape_of(pt), r)
        if self.bias is not None:
            if not _narrow_bias(self.bias, pt):
                _check_same_elem(self, self.bias, pt)
            b = shape_of(self.bias)
            if broadcast_shapes(b, r) != tuple(r):
                raise VerifyException(
                    f"{self.name}: bias of shape {fmt_shape(b)} does not broadcast to the "
                    f"product's shape {fmt_shape(r)}"
                )
        if self.residual is not None:
            _check_same_elem(self, self.residual, pt)
            _check_shape(self, "residual", shape_of(self.residual), r)
        if self.activation is not None:
            if self.activation.data not in ACTIVATIONS:
                raise VerifyException(
                    f"{self.name}: unknown activation '{self.activation.data}'; valid: "
                    + ", ".join(ACTIVATIONS)
                )
            if not _is_float(elem_of(pt)):
                raise VerifyException(f"{self.name}: activation needs a floating-point product")
        if self.tile_shape is not None:
            ts = self.tile_shape.get_values()
            if len(ts) != 3 or any(x <= 0 for x in ts):
                raise VerifyException(
                    f"{self.name}: tile_shape must be three positive sizes (BM, BN, BK), "
                    f"got {list(ts)}"
                )
            if any(x > MAX_TILE_SIZE for x in ts):
                raise VerifyException(
                    f"{self.name}: tile_shape sizes must be at most {MAX_TILE_SIZE}, got {list(ts)}"
                )


