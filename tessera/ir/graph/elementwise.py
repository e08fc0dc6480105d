"""``tgraph`` elementwise ops: binary arithmetic and comparisons, ``select``, unary math and
activations, ``cast``."""

from __future__ import annotations

from abc import ABC
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    IntegerAttr,
    i1,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from tessera.ir.graph.base import (
    _FN,
    TensorT,
    _check_same_elem,
    _check_shape,
    _is_float,
    broadcast_shapes,
    elem_of,
    fmt_shape,
    shape_of,
)

# --------------------------------------------------------------------------- elementwise


# The largest tile_shape size a matmul accepts: a block's tile is unrolled into
# registers, so the size bounds the kernel (and the time and memory to build it).
MAX_TILE_SIZE = 256

# The largest finite f32 (3.4028235e38).
MAX_F32 = 3.4028234663852886e38

class ElementwiseBinaryOp(IRDLOperation, ABC):
    """Base of binary elementwise ops with numpy broadcasting."""

    lhs = operand_def(TensorT)
    rhs = operand_def(TensorT)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$lhs `,` $rhs " + _FN
    RESULT_IS_BOOL: ClassVar[bool] = False

    def __init__(self, lhs: SSAValue, rhs: SSAValue, result_type: Attribute):
        super().__init__(operands=[lhs, rhs], result_types=[result_type])

    def verify_(self) -> None:
        _check_same_elem(self, self.lhs, self.rhs)
        a, b = shape_of(self.lhs), shape_of(self.rhs)
        out = broadcast_shapes(a, b)
        if out is None:
            raise VerifyException(
                f"{self.name}: shapes {fmt_shape(a)} and {fmt_shape(b)} do not broadcast"
            )
        _check_shape(self, "result", shape_of(self.result), out)
        if self.RESULT_IS_BOOL:
            if elem_of(self.result) != i1:
                raise VerifyException(f"{self.name}: result must have element type i1")
        else:
            _check_same_elem(self, self.lhs, self.result)


@irdl_op_definition
class AddOp(ElementwiseBinaryOp):
    """Elementwise ``lhs + rhs``."""

    name = "tgraph.add"


@irdl_op_definition
class SubOp(ElementwiseBinaryOp):
    """Elementwise ``lhs - rhs``."""

    name = "tgraph.sub"


@irdl_op_definition
class MulOp(ElementwiseBinaryOp):
    """Elementwise ``lhs * rhs``."""

    name = "tgraph.mul"


@irdl_op_definition
class DivOp(ElementwiseBinaryOp):
    """Elementwise ``lhs / rhs`` (true division)."""

    name = "tgraph.div"


@irdl_op_definition
class PowOp(ElementwiseBinaryOp):
    """Elementwise ``lhs ** rhs``."""

    name = "tgraph.pow"


@irdl_op_definition
class MaximumOp(ElementwiseBinaryOp):
    """Elementwise maximum (NaN-propagating)."""

    name = "tgraph.maximum"


@irdl_op_definition
class MinimumOp(ElementwiseBinaryOp):
    """Elementwise minimum (NaN-propagating)."""

    name = "tgraph.minimum"


class CompareOp(ElementwiseBinaryOp, ABC):
    """Elementwise comparison; the result is ``i1``."""

    RESULT_IS_BOOL: ClassVar[bool] = True


@irdl_op_definition
class LtOp(CompareOp):
    """Elementwise ``lhs < rhs``."""

    name = "tgraph.lt"


@irdl_op_definition
class LeOp(CompareOp):
    """Elementwise ``lhs <= rhs``."""

    name = "tgraph.le"


@irdl_op_definition
class GtOp(CompareOp):
    """Elementwise ``lhs > rhs``."""

    name = "tgraph.gt"


@irdl_op_definition
class GeOp(CompareOp):
    """Elementwise ``lhs >= rhs``."""

    name = "tgraph.ge"


@irdl_op_definition
class EqOp(CompareOp):
    """Elementwise ``lhs == rhs``."""

    name = "tgraph.eq"


@irdl_op_definition
class NeOp(CompareOp):
    """Elementwise ``lhs != rhs``."""

    name = "tgraph.ne"


@irdl_op_definition
class SelectOp(IRDLOperation):
    """Elementwise ``cond ? on_true : on_false`` with broadcasting of all three."""

    name = "tgraph.select"
    cond = operand_def(TensorT)
    on_true = operand_def(TensorT)
    on_false = operand_def(TensorT)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$cond `,` $on_true `,` $on_false " + _FN

    def verify_(self) -> None:
        if elem_of(self.cond) != i1:
            raise VerifyException(f"{self.name}: condition must have element type i1")
        _check_same_elem(self, self.on_true, self.on_false, self.result)
        s = broadcast_shapes(shape_of(self.on_true), shape_of(self.on_false))
        s = None if s is None else broadcast_shapes(s, shape_of(self.cond))
        if s is None:
            raise VerifyException(f"{self.name}: operand shapes do not broadcast")
        _check_shape(self, "result", shape_of(self.result), s)


class ElementwiseUnaryOp(IRDLOperation, ABC):
    """Base of unary elementwise ops: result type equals the operand type."""

    input = operand_def(TensorT)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input " + _FN
    FLOAT_ONLY: ClassVar[bool] = True

    def __init__(self, input: SSAValue, result_type: Attribute | None = None):
        super().__init__(operands=[input], result_types=[result_type or input.type])

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        _check_shape(self, "result", shape_of(self.result), shape_of(self.input))
        if self.FLOAT_ONLY and not _is_float(elem_of(self.input)):
            raise VerifyException(
                f"{self.name}: needs a floating-point operand, got {elem_of(self.input)}"
            )


@irdl_op_definition
class NegOp(ElementwiseUnaryOp):
    """Elementwise ``-x``."""

    name = "tgraph.neg"
    FLOAT_ONLY: ClassVar[bool] = False


@irdl_op_definition
class AbsOp(ElementwiseUnaryOp):
    """Elementwise ``|x|``."""

    name = "tgraph.abs"
    FLOAT_ONLY: ClassVar[bool] = False


@irdl_op_definition
class ExpOp(ElementwiseUnaryOp):
    """Elementwise ``e**x``."""

    name = "tgraph.exp"


@irdl_op_definition
class LogOp(ElementwiseUnaryOp):
    """Elementwise natural logarithm."""

    name = "tgraph.log"


@irdl_op_definition
class SqrtOp(ElementwiseUnaryOp):
    """Elementwise square root."""

    name = "tgraph.sqrt"


@irdl_op_definition
class RsqrtOp(ElementwiseUnaryOp):
    """Elementwise ``1 / sqrt(x)``."""

    name = "tgraph.rsqrt"


@irdl_op_definition
class TanhOp(ElementwiseUnaryOp):
    """Elementwise hyperbolic tangent."""

    name = "tgraph.tanh"


@irdl_op_definition
class ReluOp(ElementwiseUnaryOp):
    """Elementwise ``max(x, 0)``."""

    name = "tgraph.relu"


@irdl_op_definition
class GeluOp(ElementwiseUnaryOp):
    """Elementwise GELU, tanh approximation:
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""

    name = "tgraph.gelu"


@irdl_op_definition
class SiluOp(ElementwiseUnaryOp):
    """Elementwise ``x * sigmoid(x)``."""

    name = "tgraph.silu"


@irdl_op_definition
class SigmoidOp(ElementwiseUnaryOp):
    """Elementwise ``1 / (1 + e**-x)``."""

    name = "tgraph.sigmoid"


@irdl_op_definition
class ErfOp(ElementwiseUnaryOp):
    """Elementwise error function ``erf(x) = 2/sqrt(pi) * integral from 0 to x of exp(-t^2) dt``."""

    name = "tgraph.erf"


@irdl_op_definition
class SinOp(ElementwiseUnaryOp):
    """Elementwise sine (radians), accurate for arguments of any size the kernels
    reduce (see ``lower_tile_to_target.math_ops``)."""

    name = "tgraph.sin"


@irdl_op_definition
class CosOp(ElementwiseUnaryOp):
    """Elementwise cosine (radians)."""

    name = "tgraph.cos"


@irdl_op_definition
class CastOp(IRDLOperation):
    """Elementwise conversion to the result's element type.

    Rounding, saturation and scaling follow the result type's numeric policy
    (nearest-even unless the policy says ``rounding = stochastic``); ``seed``
    fixes the random stream of stochastic rounding.
    """

    name = "tgraph.cast"
    input = operand_def(TensorT)
    seed = opt_prop_def(IntegerAttr[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input (`seed` `=` $seed^)? " + _FN

    def __init__(self, input: SSAValue, result_type: Attribute, seed: int | None = None):
        super().__init__(
            operands=[input],
            result_types=[result_type],
            properties={"seed": IntegerAttr(seed, i64)} if seed is not None else {},
        )

    def verify_(self) -> None:
        _check_shape(self, "result", shape_of(self.result), shape_of(self.input))


