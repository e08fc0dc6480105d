"""Graph IR (``tgraph``): whole-tensor algebraic operators.

A Graph IR program is a ``func.func`` whose body is a dataflow graph of
``tgraph`` ops on ``tensor<...>`` values. Every op states its full result type;
verifiers check shapes, dtypes and attributes and name the dims that disagree.
Element types may carry a numeric policy as the tensor encoding
(``tensor<64x64xf8E4M3FN, #tessera.policy<f8E4M3FN, accum = f32>>``); ops
compare element types, not encodings.

Syntax is uniform: operands, then keyword attributes, then
``: (operand types) -> result types``::

    %c = tgraph.matmul %a, %b tile_shape = [128, 128, 64]
        : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
    %s = tgraph.sum %c axes = [1] keepdims
        : (tensor<256x128xf32>) -> tensor<256x1xf32>
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    ComplexType,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    UnitAttr,
    i1,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import HasParent, IsolatedFromAbove, IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from tessera.ir import literals
from tessera.ir.attrs import REDUCTIONS, MeshAttr

TensorT = TensorType.constr()

literals.install()  # dense float literals print in a form that re-parses bit for bit

_FN = "attr-dict `:` functional-type(operands, results)"


# --------------------------------------------------------------------------- helpers


def shape_of(v: SSAValue | Attribute) -> tuple[int, ...]:
    t = v.type if isinstance(v, SSAValue) else v
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def elem_of(v: SSAValue | Attribute) -> Attribute:
    t = v.type if isinstance(v, SSAValue) else v
    assert isinstance(t, TensorType)
    return t.element_type


def fmt_shape(s: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in s) + "]"


def broadcast_shapes(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """Numpy broadcasting of two shapes, or None if they do not broadcast."""
    out: list[int] = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and x != 1 and y != 1:
            return None
        out.append(max(x, y) if min(x, y) != 0 else 0)
    return tuple(reversed(out))


def _norm_axes(axes: Sequence[int], rank: int, op: str) -> list[int]:
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise VerifyException(f"{op}: axis {a} out of range for rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise VerifyException(f"{op}: repeated axis in {list(axes)}")
    return out


def _is_float(t: Attribute) -> bool:
    return not isinstance(t, IntegerType | ComplexType)


def _check_same_elem(op: Operation, *vals: SSAValue | Attribute) -> None:
    ts = [elem_of(v) for v in vals]
    if any(t != ts[0] for t in ts):
        raise VerifyException(
            f"{op.name}: element types differ: " + ", ".join(str(t) for t in ts)
        )


def _check_shape(op: Operation, what: str, got: Sequence[int], want: Sequence[int]) -> None:
    if tuple(got) != tuple(want):
        raise VerifyException(
            f"{op.name}: {what} has shape {fmt_shape(got)}, expected {fmt_shape(want)}"
        )


def _mesh_axis_size(op: Operation, axis: str) -> int | None:
    """Size of mesh axis ``axis`` from the nearest enclosing ``tessera.mesh`` attribute."""
    p: Operation | None = op.parent_op()
    while p is not None:
        m = p.attributes.get("tessera.mesh")
        if isinstance(m, MeshAttr):
            sizes = m.as_dict()
            if axis not in sizes:
                raise VerifyException(
                    f"{op.name}: mesh has no axis '{axis}' (axes: {', '.join(sizes)})"
                )
            return sizes[axis]
        p = p.parent_op()
    return None


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


# --------------------------------------------------------------------------- reductions


class ReductionOp(IRDLOperation, ABC):
    """Base of reductions over ``axes`` (all axes when empty); ``keepdims`` keeps them as 1."""

    input = operand_def(TensorT)
    axes = prop_def(DenseArrayBase[I64])
    keepdims = opt_prop_def(UnitAttr)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input `axes` `=` $axes (`keepdims` $keepdims^)? " + _FN

    def __init__(
        self, input: SSAValue, axes: Sequence[int], keepdims: bool, result_type: Attribute
    ):
        props: dict[str, Attribute] = {"axes": DenseArrayBase.from_list(i64, list(axes))}
        if keepdims:
            props["keepdims"] = UnitAttr()
        super().__init__(operands=[input], result_types=[result_type], properties=props)

    def axis_list(self) -> list[int]:
        rank = len(shape_of(self.input))
        ax = list(self.axes.get_values())
        return _norm_axes(ax, rank, self.name) if ax else list(range(rank))

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        ax = self.axis_list()
        s = shape_of(self.input)
        if self.keepdims is not None:
            want = tuple(1 if i in ax else d for i, d in enumerate(s))
        else:
            want = tuple(d for i, d in enumerate(s) if i not in ax)
        _check_shape(self, "result", shape_of(self.result), want)


@irdl_op_definition
class SumOp(ReductionOp):
    """Sum over axes, in a fixed (deterministic) order."""

    name = "tgraph.sum"


@irdl_op_definition
class MaxOp(ReductionOp):
    """Maximum over axes."""

    name = "tgraph.max"


@irdl_op_definition
class MinOp(ReductionOp):
    """Minimum over axes."""

    name = "tgraph.min"


@irdl_op_definition
class MeanOp(ReductionOp):
    """Arithmetic mean over axes."""

    name = "tgraph.mean"


# --------------------------------------------------------------------------- nn ops


@irdl_op_definition
class SoftmaxOp(IRDLOperation):
    """``exp(x - max(x)) / sum(exp(x - max(x)))`` along ``axis``."""

    name = "tgraph.softmax"
    input = operand_def(TensorT)
    axis = prop_def(IntegerAttr[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input `axis` `=` $axis " + _FN

    def __init__(self, input: SSAValue, axis: int, result_type: Attribute | None = None):
        super().__init__(
            operands=[input],
            result_types=[result_type or input.type],
            properties={"axis": IntegerAttr(axis, i64)},
        )

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        _check_shape(self, "result", shape_of(self.result), shape_of(self.input))
        _norm_axes([self.axis.value.data], len(shape_of(self.input)), self.name)
        if not _is_float(elem_of(self.input)):
            raise VerifyException(f"{self.name}: needs a floating-point operand")


class _NormOp(IRDLOperation, ABC):
    input = operand_def(TensorT)
    weight = opt_operand_def(TensorT)
    eps = prop_def(FloatAttr[Float64Type])
    result = result_def(TensorT)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        s = shape_of(self.input)
        if not s:
            raise VerifyException(f"{self.name}: needs an operand of rank >= 1")
        _check_shape(self, "result", shape_of(self.result), s)
        for name in ("weight", "bias"):
            v = getattr(self, name, None)
            if v is not None:
                _check_shape(self, name, shape_of(v), (s[-1],))
        eps = self.eps.value.data
        # Kernels add eps in f32: it must be a non-negative f32 value.
        if not 0.0 <= eps <= MAX_F32:
            raise VerifyException(f"{self.name}: eps must be in [0, {MAX_F32:.6e}], got {eps}")


@irdl_op_definition
class LayerNormOp(_NormOp):
    """Layer normalization over the last dimension:
    ``(x - mean) / sqrt(var + eps) * weight + bias`` (weight, bias optional)."""

    name = "tgraph.layernorm"
    # restated so that the operand order is (input, weight, bias)
    input = operand_def(TensorT)
    weight = opt_operand_def(TensorT)
    bias = opt_operand_def(TensorT)
    assembly_format = (
        "$input (`weight` $weight^ `:` type($weight))? (`bias` $bias^ `:` type($bias))? "
        "`eps` `=` $eps attr-dict `:` type($input) `->` type($result)"
    )


@irdl_op_definition
class RMSNormOp(_NormOp):
    """RMS normalization over the last dimension: ``x / sqrt(mean(x^2) + eps) * weight``."""

    name = "tgraph.rmsnorm"
    assembly_format = (
        "$input (`weight` $weight^ `:` type($weight))? `eps` `=` $eps attr-dict "
        "`:` type($input) `->` type($result)"
    )


@irdl_op_definition
class MatmulOp(IRDLOperation):
    """Matrix product with batch broadcasting (``torch.matmul`` on operands of rank >= 2).

    ``transpose_lhs`` / ``transpose_rhs`` swap the last two dims of an operand
    before the product. ``tile_shape = [BM, BN, BK]`` asks lowering for
    that tile. The result element type is the output type; the accumulate type
    comes from the operands' numeric policy (fp32 for low-precision inputs).
    """

    name = "tgraph.matmul"
    lhs = operand_def(TensorT)
    rhs = operand_def(TensorT)
    transpose_lhs = opt_prop_def(UnitAttr)
    transpose_rhs = opt_prop_def(UnitAttr)
    tile_shape = opt_prop_def(DenseArrayBase[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = (
        "$lhs `,` $rhs (`transpose_lhs` $transpose_lhs^)? (`transpose_rhs` $transpose_rhs^)? "
        "(`tile_shape` `=` $tile_shape^)? " + _FN
    )

    def __init__(
        self,
        lhs: SSAValue,
        rhs: SSAValue,
        result_type: Attribute,
        *,
        transpose_lhs: bool = False,
        transpose_rhs: bool = False,
        tile_shape: Sequence[int] | None = None,
    ):
        props: dict[str, Attribute] = {}
        if transpose_lhs:
            props["transpose_lhs"] = UnitAttr()
        if transpose_rhs:
            props["transpose_rhs"] = UnitAttr()
        if tile_shape is not None:
            props["tile_shape"] = DenseArrayBase.from_list(i64, list(tile_shape))
        super().__init__(operands=[lhs, rhs], result_types=[result_type], properties=props)

    @staticmethod
    def infer_shape(
        a: Sequence[int], b: Sequence[int], ta: bool = False, tb: bool = False
    ) -> tuple[int, ...] | str:
        """The result shape, or an error message naming the dims."""
        if len(a) < 2 or len(b) < 2:
            return f"operands must have rank >= 2, got {fmt_shape(a)} and {fmt_shape(b)}"
        m, k = (a[-1], a[-2]) if ta else (a[-2], a[-1])
        k2, n = (b[-1], b[-2]) if tb else (b[-2], b[-1])
        if k != k2:
            return f"inner dimensions differ: left K={k}, right K={k2}"
        batch = broadcast_shapes(a[:-2], b[:-2])
        if batch is None:
            return (
                f"batch dimensions {fmt_shape(a[:-2])} and {fmt_shape(b[:-2])} do not broadcast"
            )
        return (*batch, m, n)

    def verify_(self) -> None:
        _check_same_elem(self, self.lhs, self.rhs)
        r = self.infer_shape(
            shape_of(self.lhs),
            shape_of(self.rhs),
            self.transpose_lhs is not None,
            self.transpose_rhs is not None,
        )
        if isinstance(r, str):
            raise VerifyException(f"{self.name}: {r}")
        _check_shape(self, "result", shape_of(self.result), r)
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


@irdl_op_definition
class FlashAttentionOp(IRDLOperation):
    """Fused attention ``softmax(scale * q kᵀ [+ causal mask]) v``.

    q: [..., Sq, D], k: [..., Sk, D], v: [..., Sk, Dv] -> [..., Sq, Dv]. ``scale``
    defaults to ``1/sqrt(D)``; ``causal`` masks key positions after the query
    position (aligned at the top left).
    """

    name = "tgraph.flash_attention"
    q = operand_def(TensorT)
    k = operand_def(TensorT)
    v = operand_def(TensorT)
    scale = opt_prop_def(FloatAttr[Float64Type])
    causal = opt_prop_def(UnitAttr)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = (
        "$q `,` $k `,` $v (`scale` `=` $scale^)? (`causal` $causal^)? " + _FN
    )

    def verify_(self) -> None:
        _check_same_elem(self, self.q, self.k, self.v)
        q, k, v = shape_of(self.q), shape_of(self.k), shape_of(self.v)
        if len(q) < 2 or len(q) != len(k) or len(k) != len(v):
            raise VerifyException(
                f"{self.name}: q, k, v must have the same rank >= 2, got "
                f"{fmt_shape(q)}, {fmt_shape(k)}, {fmt_shape(v)}"
            )
        if q[-1] != k[-1]:
            raise VerifyException(
                f"{self.name}: head dims differ: q D={q[-1]}, k D={k[-1]}"
            )
        if k[-2] != v[-2]:
            raise VerifyException(
                f"{self.name}: sequence lengths differ: k S={k[-2]}, v S={v[-2]}"
            )
        if q[:-2] != k[:-2] or k[:-2] != v[:-2]:
            raise VerifyException(
                f"{self.name}: batch dims differ: {fmt_shape(q[:-2])}, {fmt_shape(k[:-2])}, "
                f"{fmt_shape(v[:-2])}"
            )
        _check_shape(self, "result", shape_of(self.result), (*q[:-1], v[-1]))


def _check_attention_operands(op: Operation, q: SSAValue, k: SSAValue, v: SSAValue) -> None:
    """The operand checks of ``tgraph.flash_attention``, shared by its gradient ops."""
    _check_same_elem(op, q, k, v)
    qs, ks, vs = shape_of(q), shape_of(k), shape_of(v)
    if len(qs) < 2 or len(qs) != len(ks) or len(ks) != len(vs):
        raise VerifyException(
            f"{op.name}: q, k, v must have the same rank >= 2, got "
            f"{fmt_shape(qs)}, {fmt_shape(ks)}, {fmt_shape(vs)}"
        )
    if qs[-1] != ks[-1]:
        raise VerifyException(f"{op.name}: head dims differ: q D={qs[-1]}, k D={ks[-1]}")
    if ks[-2] != vs[-2]:
        raise VerifyException(
            f"{op.name}: sequence lengths differ: k S={ks[-2]}, v S={vs[-2]}"
        )
    if qs[:-2] != ks[:-2] or ks[:-2] != vs[:-2]:
        raise VerifyException(
            f"{op.name}: batch dims differ: {fmt_shape(qs[:-2])}, {fmt_shape(ks[:-2])}, "
            f"{fmt_shape(vs[:-2])}"
        )


def _check_lse(op: Operation, lse: SSAValue, q: SSAValue) -> None:
    if not isinstance(elem_of(lse), Float32Type | Float64Type):
        raise VerifyException(f"{op.name}: lse must be f32 or f64, got {elem_of(lse)}")
    _check_shape(op, "lse", shape_of(lse), shape_of(q)[:-1])


@irdl_op_definition
class FlashAttentionFwdOp(IRDLOperation):
    """``tgraph.flash_attention`` that also returns the log-sum-exp of each query row.

    q: [..., Sq, D], k: [..., Sk, D], v: [..., Sk, Dv] -> (o [..., Sq, Dv],
    lse [..., Sq] f32 (f64 for f64 operands)) with ``lse = log(sum_j exp(scale * q kⱼ))``
    over the keys a row attends to. The autodiff pass puts it in place of a
    ``flash_attention`` that it differentiates; ``lse`` feeds ``flash_attention_bwd``.
    """

    name = "tgraph.flash_attention_fwd"
    q = operand_def(TensorT)
    k = operand_def(TensorT)
    v = operand_def(TensorT)
    scale = opt_prop_def(FloatAttr[Float64Type])
    causal = opt_prop_def(UnitAttr)
    result = result_def(TensorT)
    lse = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = (
        "$q `,` $k `,` $v (`scale` `=` $scale^)? (`causal` $causal^)? " + _FN
    )

    def verify_(self) -> None:
        _check_attention_operands(self, self.q, self.k, self.v)
        q, v = shape_of(self.q), shape_of(self.v)
        _check_shape(self, "result", shape_of(self.result), (*q[:-1], v[-1]))
        _check_same_elem(self, self.q, self.result)
        _check_lse(self, self.lse, self.q)


@irdl_op_definition
class FlashAttentionBwdOp(IRDLOperation):
    """The gradients of ``o = flash_attention(q, k, v)`` for the output cotangent ``do``.

    Operands q, k, v, o (the forward's result), do ([..., Sq, Dv]) and lse (the
    forward's log-sum-exp, [..., Sq]); results dq, dk, dv with the shapes of q, k, v.
    With ``P = exp(scale q kᵀ [masked] - lse)`` and ``Di = rowsum(do ∘ o)``:
    ``dv = Pᵀ do``, ``dS = P ∘ (do vᵀ - Di)``, ``dq = scale dS k``, ``dk = scale dSᵀ q``.
    """

    name = "tgraph.flash_attention_bwd"
    q = operand_def(TensorT)
    k = operand_def(TensorT)
    v = operand_def(TensorT)
    o = operand_def(TensorT)
    do = operand_def(TensorT)
    lse = operand_def(TensorT)
    scale = opt_prop_def(FloatAttr[Float64Type])
    causal = opt_prop_def(UnitAttr)
    dq = result_def(TensorT)
    dk = result_def(TensorT)
    dv = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = (
        "$q `,` $k `,` $v `,` $o `,` $do `,` $lse (`scale` `=` $scale^)? (`causal` $causal^)? "
        + _FN
    )

    def verify_(self) -> None:
        _check_attention_operands(self, self.q, self.k, self.v)
        _check_same_elem(self, self.q, self.o, self.do, self.dq, self.dk, self.dv)
        q, v = shape_of(self.q), shape_of(self.v)
        _check_shape(self, "o", shape_of(self.o), (*q[:-1], v[-1]))
        _check_shape(self, "do", shape_of(self.do), (*q[:-1], v[-1]))
        _check_lse(self, self.lse, self.q)
        for what, got, want in (("dq", self.dq, self.q), ("dk", self.dk, self.k),
                                ("dv", self.dv, self.v)):
            _check_shape(self, what, shape_of(got), shape_of(want))


@irdl_op_definition
class Conv2dOp(IRDLOperation):
    """2-D convolution (cross-correlation), NCHW input and OIHW weight, optional bias [O]."""

    name = "tgraph.conv2d"
    input = operand_def(TensorT)
    weight = operand_def(TensorT)
    bias = opt_operand_def(TensorT)
    stride = prop_def(DenseArrayBase[I64])
    padding = prop_def(DenseArrayBase[I64])
    result = result_def(TensorT)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(Pure())
    assembly_format = (
        "$input `,` $weight (`bias` $bias^ `:` type($bias))? `stride` `=` $stride "
        "`padding` `=` $padding attr-dict `:` type($input) `,` type($weight) `->` type($result)"
    )

    @staticmethod
    def infer_shape(
        x: Sequence[int], w: Sequence[int], stride: Sequence[int], pad: Sequence[int]
    ) -> tuple[int, ...] | str:
        if len(x) != 4 or len(w) != 4:
            return f"input and weight must be 4-D (NCHW, OIHW), got {fmt_shape(x)}, {fmt_shape(w)}"
        if x[1] != w[1]:
            return f"channels differ: input C={x[1]}, weight C={w[1]}"
        ho = (x[2] + 2 * pad[0] - w[2]) // stride[0] + 1
        wo = (x[3] + 2 * pad[1] - w[3]) // stride[1] + 1
        if ho <= 0 or wo <= 0:
            return f"kernel {w[2]}x{w[3]} larger than padded input {x[2]}x{x[3]}"
        return (x[0], w[0], ho, wo)

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.weight, self.result)
        st, pd = list(self.stride.get_values()), list(self.padding.get_values())
        if len(st) != 2 or len(pd) != 2 or min(st) < 1 or min(pd) < 0:
            raise VerifyException(
                f"{self.name}: stride needs two sizes >= 1 and padding two sizes >= 0"
            )
        r = self.infer_shape(shape_of(self.input), shape_of(self.weight), st, pd)
        if isinstance(r, str):
            raise VerifyException(f"{self.name}: {r}")
        if self.bias is not None:
            _check_shape(self, "bias", shape_of(self.bias), (r[1],))
        _check_shape(self, "result", shape_of(self.result), r)


@irdl_op_definition
class MSEOp(IRDLOperation):
    """Mean squared error ``mean((pred - target)**2)``, a rank-0 tensor."""

    name = "tgraph.mse"
    pred = operand_def(TensorT)
    target = operand_def(TensorT)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$pred `,` $target " + _FN

    def verify_(self) -> None:
        _check_same_elem(self, self.pred, self.target, self.result)
        a, b = shape_of(self.pred), shape_of(self.target)
        if broadcast_shapes(a, b) is None:
            raise VerifyException(
                f"{self.name}: shapes {fmt_shape(a)} and {fmt_shape(b)} do not broadcast"
            )
        _check_shape(self, "result", shape_of(self.result), ())


# --------------------------------------------------------------------------- shape ops


@irdl_op_definition
class TransposeOp(IRDLOperation):
    """Permute dimensions: result dim i is input dim ``permutation[i]``."""

    name = "tgraph.transpose"
    input = operand_def(TensorT)
    permutation = prop_def(DenseArrayBase[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input `permutation` `=` $permutation " + _FN

    def __init__(self, input: SSAValue, perm: Sequence[int], result_type: Attribute):
        super().__init__(
            operands=[input],
            result_types=[result_type],
            properties={"permutation": DenseArrayBase.from_list(i64, list(perm))},
        )

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        p = list(self.permutation.get_values())
        s = shape_of(self.input)
        if sorted(p) != list(range(len(s))):
            raise VerifyException(
                f"{self.name}: permutation {p} is not a permutation of {len(s)} dims"
            )
        _check_shape(self, "result", shape_of(self.result), [s[i] for i in p])


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    """Same elements in row-major order, new shape (element counts must match)."""

    name = "tgraph.reshape"
    input = operand_def(TensorT)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input " + _FN

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        a, b = shape_of(self.input), shape_of(self.result)
        na = nb = 1
        for d in a:
            na *= d
        for d in b:
            nb *= d
        if na != nb:
            raise VerifyException(
                f"{self.name}: cannot reshape {fmt_shape(a)} ({na} elements) to "
                f"{fmt_shape(b)} ({nb} elements)"
            )


@irdl_op_definition
class BroadcastOp(IRDLOperation):
    """Broadcast to the result shape with numpy rules."""

    name = "tgraph.broadcast"
    input = operand_def(TensorT)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input " + _FN

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        a, b = shape_of(self.input), shape_of(self.result)
        if len(a) > len(b) or broadcast_shapes(a, b) != tuple(b):
            raise VerifyException(
                f"{self.name}: cannot broadcast {fmt_shape(a)} to {fmt_shape(b)}"
            )


@irdl_op_definition
class SliceOp(IRDLOperation):
    """Static strided slice: ``input[start:limit:stride]`` per dimension."""

    name = "tgraph.slice"
    input = operand_def(TensorT)
    start = prop_def(DenseArrayBase[I64])
    limit = prop_def(DenseArrayBase[I64])
    stride = prop_def(DenseArrayBase[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = (
        "$input `start` `=` $start `limit` `=` $limit `stride` `=` $stride " + _FN
    )

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        s = shape_of(self.input)
        st, li, sr = (list(x.get_values()) for x in (self.start, self.limit, self.stride))
        if not len(st) == len(li) == len(sr) == len(s):
            raise VerifyException(f"{self.name}: start/limit/stride need {len(s)} entries each")
        want = []
        for i, (a, b, c, d) in enumerate(zip(st, li, sr, s)):
            if not (0 <= a <= b <= d) or c < 1:
                raise VerifyException(
                    f"{self.name}: dim {i}: slice {a}:{b}:{c} out of range for size {d}"
                )
            want.append((b - a + c - 1) // c)
        _check_shape(self, "result", shape_of(self.result), want)


@irdl_op_definition
class ConcatOp(IRDLOperation):
    """Concatenate operands along ``axis``."""

    name = "tgraph.concat"
    inputs = var_operand_def(TensorT)
    axis = prop_def(IntegerAttr[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$inputs `axis` `=` $axis " + _FN

    def verify_(self) -> None:
        if not self.inputs:
            raise VerifyException(f"{self.name}: needs at least one operand")
        _check_same_elem(self, *self.inputs, self.result)
        shapes = [shape_of(v) for v in self.inputs]
        (ax,) = _norm_axes([self.axis.value.data], len(shapes[0]), self.name)
        for i, s in enumerate(shapes):
            if len(s) != len(shapes[0]) or any(
                a != b for j, (a, b) in enumerate(zip(s, shapes[0])) if j != ax
            ):
                raise VerifyException(
                    f"{self.name}: operand {i} has shape {fmt_shape(s)}, incompatible with "
                    f"{fmt_shape(shapes[0])} outside axis {ax}"
                )
        want = list(shapes[0])
        want[ax] = sum(s[ax] for s in shapes)
        _check_shape(self, "result", shape_of(self.result), want)


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A constant tensor. ``value`` is a dense elements attribute of the result's
    shape (or a splat); it is converted to the result's element type."""

    name = "tgraph.constant"
    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$value attr-dict `->` type($result)"

    def __init__(self, value: DenseIntOrFPElementsAttr, result_type: Attribute):
        super().__init__(result_types=[result_type], properties={"value": value})

    def verify_(self) -> None:
        vs = tuple(self.value.get_type().get_shape())
        n = 1
        for d in vs:
            n *= d
        if vs != shape_of(self.result) and n != 1:
            raise VerifyException(
                f"{self.name}: value has shape {fmt_shape(vs)}, result "
                f"{fmt_shape(shape_of(self.result))}"
            )


# --------------------------------------------------------------------------- scientific ops


class _FFTBase(IRDLOperation, ABC):
    input = operand_def(TensorT)
    inverse = opt_prop_def(UnitAttr)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input (`inverse` $inverse^)? " + _FN
    NDIMS: ClassVar[int] = 1

    def verify_(self) -> None:
        s = shape_of(self.input)
        if len(s) < self.NDIMS:
            raise VerifyException(f"{self.name}: needs rank >= {self.NDIMS}")
        _check_shape(self, "result", shape_of(self.result), s)
        if not isinstance(elem_of(self.result), ComplexType):
            raise VerifyException(f"{self.name}: result must be complex")


@irdl_op_definition
class FFTOp(_FFTBase):
    """Discrete Fourier transform along the last dimension; ``inverse`` for the inverse
    (normalized by 1/n). The result is complex."""

    name = "tgraph.fft"


@irdl_op_definition
class FFT2dOp(_FFTBase):
    """2-D discrete Fourier transform over the last two dimensions (complex result)."""

    name = "tgraph.fft2d"
    NDIMS: ClassVar[int] = 2


@irdl_op_definition
class CholeskyOp(IRDLOperation):
    """Lower Cholesky factor L (A = L Lᵀ) of symmetric positive-definite [..., n, n]."""

    name = "tgraph.cholesky"
    input = operand_def(TensorT)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input " + _FN

    def verify_(self) -> None:
        s = shape_of(self.input)
        if len(s) < 2 or s[-1] != s[-2]:
            raise VerifyException(f"{self.name}: needs square matrices, got {fmt_shape(s)}")
        _check_same_elem(self, self.input, self.result)
        _check_shape(self, "result", shape_of(self.result), s)


@irdl_op_definition
class SVDOp(IRDLOperation):
    """Reduced SVD: A [..., m, n] = U [..., m, k] diag(S [..., k]) Vh [..., k, n], k = min(m, n)."""

    name = "tgraph.svd"
    input = operand_def(TensorT)
    u = result_def(TensorT)
    s = result_def(TensorT)
    vh = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input " + _FN

    def verify_(self) -> None:
        a = shape_of(self.input)
        if len(a) < 2:
            raise VerifyException(f"{self.name}: needs rank >= 2, got {fmt_shape(a)}")
        *b, m, n = a
        k = min(m, n)
        _check_same_elem(self, self.input, self.u, self.s, self.vh)
        _check_shape(self, "U", shape_of(self.u), (*b, m, k))
        _check_shape(self, "S", shape_of(self.s), (*b, k))
        _check_shape(self, "Vh", shape_of(self.vh), (*b, k, n))


class _SpMMBase(IRDLOperation):
    """Operands, syntax and checks shared by ``tgraph.spmm`` and ``tgraph.spmm_transpose``:
    A [M, K] in CSR (``indptr`` [M+1], ``indices`` [nnz], ``values`` [nnz],
    ``sparse_shape = [M, K]``) times a dense matrix, A or Aᵀ as ``TRANSPOSED`` says."""

    TRANSPOSED: ClassVar[bool] = False
    indptr = operand_def(TensorT)
    indices = operand_def(TensorT)
    values = operand_def(TensorT)
    dense = operand_def(TensorT)
    sparse_shape = prop_def(DenseArrayBase[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = (
        "$indptr `,` $indices `,` $values `,` $dense `sparse_shape` `=` $sparse_shape " + _FN
    )

    def verify_(self) -> None:
        m, k, nnz = _check_csr(self, self.indptr, self.indices, self.sparse_shape)
        rows, cols = (k, m) if self.TRANSPOSED else (m, k)  # of op(A)
        _check_shape(self, "values", shape_of(self.values), (nnz,))
        d = shape_of(self.dense)
        if len(d) != 2 or d[0] != cols:
            raise VerifyException(
                f"{self.name}: dense operand has shape {fmt_shape(d)}, expected [{cols}, N]"
            )
        _check_same_elem(self, self.values, self.dense, self.result)
        _check_shape(self, "result", shape_of(self.result), (rows, d[1]))


@irdl_op_definition
class SpMMOp(_SpMMBase):
    """Sparse (CSR) × dense: A [M, K] given by ``indptr`` [M+1], ``indices`` [nnz] and
    ``values`` [nnz], times ``dense`` [K, N] -> [M, N]. ``sparse_shape = [M, K]``."""

    name = "tgraph.spmm"


# --------------------------------------------------------------------------- random


@irdl_op_definition
class RandnOp(IRDLOperation):
    """Standard-normal samples of the result type from a counter-based stream.
    ``seed`` and ``offset`` fix the stream, so the same op gives the same values."""

    name = "tgraph.randn"
    seed = prop_def(IntegerAttr[I64])
    offset = opt_prop_def(IntegerAttr[I64])
    result = result_def(TensorT)
    assembly_format = "`seed` `=` $seed (`offset` `=` $offset^)? attr-dict `:` type($result)"

    def verify_(self) -> None:
        if not _is_float(elem_of(self.result)):
            raise VerifyException(f"{self.name}: result must be floating point")


@irdl_op_definition
class PoissonOp(IRDLOperation):
    """Poisson samples with rates ``lam`` (same shape), from a seeded stream."""

    name = "tgraph.poisson"
    lam = operand_def(TensorT)
    seed = prop_def(IntegerAttr[I64])
    offset = opt_prop_def(IntegerAttr[I64])
    result = result_def(TensorT)
    assembly_format = "$lam `seed` `=` $seed (`offset` `=` $offset^)? " + _FN

    def verify_(self) -> None:
        _check_shape(self, "result", shape_of(self.result), shape_of(self.lam))


# --------------------------------------------------------------------------- collectives


class CollectiveOp(IRDLOperation, ABC):
    """Base of collectives over one named mesh axis. The mesh comes from the enclosing
    op's ``tessera.mesh`` attribute; without one, factor checks are skipped."""

    input = operand_def(TensorT)
    axis = prop_def(StringAttr)
    result = result_def(TensorT)

    def _group(self) -> int | None:
        return _mesh_axis_size(self, self.axis.data)

    def _split(self, s: list[int], d: int, g: int) -> None:
        """Divide dim ``d`` of shape ``s`` into ``g`` blocks, in place; an error if it does not
        divide."""
        if s[d] % g:
            raise VerifyException(
                f"{self.name}: dim {d} of size {s[d]} does not split over {g} ranks"
            )
        s[d] //= g

    def _check_reduction(self, op: StringAttr) -> None:
        if op.data not in REDUCTIONS:
            raise VerifyException(
                f"{self.name}: unknown reduction '{op.data}'; valid: {', '.join(REDUCTIONS)}"
            )


@irdl_op_definition
class AllReduceOp(CollectiveOp):
    """Reduce over the mesh axis; every rank gets the result. Deterministic (a fixed,
    rank-ordered reduction) unless ``nondeterministic``."""

    name = "tgraph.all_reduce"
    op = prop_def(StringAttr)
    nondeterministic = opt_prop_def(UnitAttr)
    assembly_format = (
        "$input `op` `=` $op `axis` `=` $axis (`nondeterministic` $nondeterministic^)? " + _FN
    )

    def verify_(self) -> None:
        self._check_reduction(self.op)
        self._group()
        _check_same_elem(self, self.input, self.result)
        _check_shape(self, "result", shape_of(self.result), shape_of(self.input))


@irdl_op_definition
class AllGatherOp(CollectiveOp):
    """Concatenate every rank's block along ``dim``, in rank order."""

    name = "tgraph.all_gather"
    dim = prop_def(IntegerAttr[I64])
    assembly_format = "$input `axis` `=` $axis `dim` `=` $dim " + _FN

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        s = list(shape_of(self.input))
        (d,) = _norm_axes([self.dim.value.data], len(s), self.name)
        r = shape_of(self.result)
        g = self._group()
        if g is not None:
            s[d] *= g
            _check_shape(self, "result", r, s)
        elif len(r) != len(s) or r[d] % max(s[d], 1):
            raise VerifyException(
                f"{self.name}: result shape {fmt_shape(r)} is not a gather of {fmt_shape(s)}"
            )


@irdl_op_definition
class ReduceScatterOp(CollectiveOp):
    """Reduce over the mesh axis, then rank r keeps block r of ``dim``."""

    name = "tgraph.reduce_scatter"
    op = prop_def(StringAttr)
    dim = prop_def(IntegerAttr[I64])
    assembly_format = "$input `op` `=` $op `axis` `=` $axis `dim` `=` $dim " + _FN

    def verify_(self) -> None:
        self._check_reduction(self.op)
        _check_same_elem(self, self.input, self.result)
        s = list(shape_of(self.input))
        (d,) = _norm_axes([self.dim.value.data], len(s), self.name)
        g = self._group()
        if g is not None:
            self._split(s, d, g)
            _check_shape(self, "result", shape_of(self.result), s)


@irdl_op_definition
class AllToAllOp(CollectiveOp):
    """Split ``split_dim`` into one block per rank, exchange, concatenate along
    ``concat_dim``."""

    name = "tgraph.all_to_all"
    split_dim = prop_def(IntegerAttr[I64])
    concat_dim = prop_def(IntegerAttr[I64])
    assembly_format = (
        "$input `axis` `=` $axis `split_dim` `=` $split_dim `concat_dim` `=` $concat_dim " + _FN
    )

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        s = list(shape_of(self.input))
        sd, cd = _norm_axes(
            [self.split_dim.value.data, self.concat_dim.value.data], len(s), self.name
        ) if self.split_dim.value.data != self.concat_dim.value.data else (
            _norm_axes([self.split_dim.value.data], len(s), self.name) * 2
        )
        g = self._group()
        if g is not None:
            self._split(s, sd, g)
            s[cd] *= g
            _check_shape(self, "result", shape_of(self.result), s)


@irdl_op_definition
class AllSliceOp(CollectiveOp):
    """Keep this rank's block ``r`` of ``dim`` along the mesh axis, without communication
    (a replicated value becomes a sharded one; the inverse of ``all_gather``)."""

    name = "tgraph.all_slice"
    dim = prop_def(IntegerAttr[I64])
    assembly_format = "$input `axis` `=` $axis `dim` `=` $dim " + _FN

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.result)
        s = list(shape_of(self.input))
        (d,) = _norm_axes([self.dim.value.data], len(s), self.name)
        g = self._group()
        if g is not None:
            self._split(s, d, g)
            _check_shape(self, "result", shape_of(self.result), s)


@irdl_op_definition
class SendOp(IRDLOperation):
    """Send a tensor to the rank ``peer`` steps along mesh axis ``axis`` (pipeline stages)."""

    name = "tgraph.send"
    input = operand_def(TensorT)
    axis = prop_def(StringAttr)
    peer = prop_def(IntegerAttr[I64])
    assembly_format = "$input `axis` `=` $axis `peer` `=` $peer attr-dict `:` type($input)"

    def verify_(self) -> None:
        if self.peer.value.data == 0:
            raise VerifyException(f"{self.name}: peer offset must be non-zero")
        _mesh_axis_size(self, self.axis.data)


@irdl_op_definition
class RecvOp(IRDLOperation):
    """Receive a tensor of the result type from the rank ``peer`` steps along ``axis``."""

    name = "tgraph.recv"
    axis = prop_def(StringAttr)
    peer = prop_def(IntegerAttr[I64])
    result = result_def(TensorT)
    assembly_format = "`axis` `=` $axis `peer` `=` $peer attr-dict `:` type($result)"

    def verify_(self) -> None:
        if self.peer.value.data == 0:
            raise VerifyException(f"{self.name}: peer offset must be non-zero")
        _mesh_axis_size(self, self.axis.data)


# --------------------------------------------------------------------------- fusion


FUSIBLE_UNARY_OPS: tuple[type[IRDLOperation], ...] = (
    NegOp, AbsOp, ExpOp, LogOp, SqrtOp, RsqrtOp, TanhOp, ReluOp, GeluOp, SiluOp, SigmoidOp,
    CastOp,
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


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminator of a ``tgraph.fused`` body: the values it yields are the op's results."""

    name = "tgraph.yield"
    values = var_operand_def(TensorT)
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(FusedOp), Pure()))
    assembly_format = "attr-dict ($values^ `:` type($values))?"

    def __init__(self, *values: SSAValue):
        super().__init__(operands=[list(values)])


@irdl_op_definition
class FusedOp(IRDLOperation):
    """A fused elementwise kernel: one op that lowers to one kernel.

    The single-block body takes one block argument per operand (same types) and
    is a chain of ``tgraph`` elementwise ops (and splat/small ``tgraph.constant``
    ops) on whole tensors, optionally ended by one reduction
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
    inputs = var_operand_def(TensorT)
    result = result_def(TensorT)
    body = region_def("single_block")
    traits = traits_def(Pure(), IsolatedFromAbove())
    assembly_format = "$inputs attr-dict `:` functional-type($inputs, $result) $body"

    def __init__(self, inputs: Sequence[SSAValue], result_type: Attribute, body: Region):
        super().__init__(operands=[list(inputs)], result_types=[result_type], regions=[body])

    @property
    def block(self) -> Block:
        return self.body.block

    @property
    def yield_op(self) -> YieldOp:
        term = self.block.last_op
        assert isinstance(term, YieldOp)
        return term

    def reduction(self) -> IRDLOperation | None:
        """The trailing reduction of the body, if any."""
        term = self.block.last_op
        prev = term.prev_op if term is not None else None
        return prev if isinstance(prev, FUSIBLE_REDUCTION_OPS) else None

    def verify_(self) -> None:
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
            elif not isinstance(op, (*FUSIBLE_ELEMENTWISE_OPS, ConstantOp)):
                raise VerifyException(
                    f"{self.name}: {op.name} cannot be fused; the body may hold elementwise "
                    "ops, constants and one trailing reduction"
                )


ACTIVATIONS = ("relu", "gelu", "silu")


@irdl_op_definition
class MatmulEpilogueOp(IRDLOperation):
    """A matmul with its epilogue fused: ``cast(act(matmul(lhs, rhs) + bias))``.

    The product (with ``transpose_lhs`` / ``transpose_rhs`` as in ``tgraph.matmul``)
    is computed in ``compute_type`` (the result type when absent). Then, in
    order and each optional: ``bias`` is added (it broadcasts to the product's
    shape), ``activation`` (``"relu"``, ``"gelu"`` or ``"silu"``, as the
    ``tgraph`` ops of those names) is applied, and when ``compute_type`` is
    given the value is cast to the result type as ``tgraph.cast`` does.
    """

    name = "tgraph.matmul_epilogue"
    lhs = operand_def(TensorT)
    rhs = operand_def(TensorT)
    bias = opt_operand_def(TensorT)
    transpose_lhs = opt_prop_def(UnitAttr)
    transpose_rhs = opt_prop_def(UnitAttr)
    activation = opt_prop_def(StringAttr)
    compute_type = opt_prop_def(TensorT)
    tile_shape = opt_prop_def(DenseArrayBase[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = (
        "$lhs `,` $rhs (`bias` $bias^)? (`transpose_lhs` $transpose_lhs^)? "
        "(`transpose_rhs` $transpose_rhs^)? (`activation` `=` $activation^)? "
        "(`compute_type` `=` $compute_type^)? (`tile_shape` `=` $tile_shape^)? "
        "attr-dict `:` functional-type(operands, results)"
    )

    def __init__(
        self,
        lhs: SSAValue,
        rhs: SSAValue,
        result_type: Attribute,
        *,
        bias: SSAValue | None = None,
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
            operands=[lhs, rhs, [bias] if bias is not None else []],
            result_types=[result_type],
            properties=props,
        )

    @property
    def product_type(self) -> TensorType:
        """The type the product, bias add and activation are computed in."""
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
            _check_same_elem(self, self.bias, pt)
            b = shape_of(self.bias)
            if broadcast_shapes(b, r) != tuple(r):
                raise VerifyException(
                    f"{self.name}: bias of shape {fmt_shape(b)} does not broadcast to the "
                    f"product's shape {fmt_shape(r)}"
                )
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


# --------------------------------------------------------------------------- derivative support ops
#
# Ops the adjoint rules of the autodiff pass are written with: complex parts
# (fft), triangular solves (cholesky) and the two sparse products that are the
# transposes of spmm. They run on the numpy interpreter and lower to Tile IR
# (tessera/passes/tile_support.py).


class _ComplexPartOp(IRDLOperation, ABC):
    input = operand_def(TensorT)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input " + _FN

    def verify_(self) -> None:
        el = elem_of(self.input)
        if not isinstance(el, ComplexType):
            raise VerifyException(f"{self.name}: needs a complex operand, got {el}")
        if elem_of(self.result) != el.element_type:
            raise VerifyException(
                f"{self.name}: result element type must be {el.element_type}, got "
                f"{elem_of(self.result)}"
            )
        _check_shape(self, "result", shape_of(self.result), shape_of(self.input))


@irdl_op_definition
class RealOp(_ComplexPartOp):
    """Real part of a complex tensor: ``tensor<.. x complex<fT>>`` -> ``tensor<.. x fT>``."""

    name = "tgraph.real"


@irdl_op_definition
class ImagOp(_ComplexPartOp):
    """Imaginary part of a complex tensor: ``tensor<.. x complex<fT>>`` -> ``tensor<.. x fT>``."""

    name = "tgraph.imag"


@irdl_op_definition
class ComplexOp(IRDLOperation):
    """``real + i * imag`` from two real tensors of one shape and element type ``fT``;
    the result is ``tensor<.. x complex<fT>>``."""

    name = "tgraph.complex"
    real = operand_def(TensorT)
    imag = operand_def(TensorT)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$real `,` $imag " + _FN

    def verify_(self) -> None:
        _check_same_elem(self, self.real, self.imag)
        el = elem_of(self.real)
        if not _is_float(el):
            raise VerifyException(f"{self.name}: needs floating-point parts, got {el}")
        _check_shape(self, "imag", shape_of(self.imag), shape_of(self.real))
        _check_shape(self, "result", shape_of(self.result), shape_of(self.real))
        if elem_of(self.result) != ComplexType(el):
            raise VerifyException(
                f"{self.name}: result element type must be {ComplexType(el)}, got "
                f"{elem_of(self.result)}"
            )


@irdl_op_definition
class TriangularSolveOp(IRDLOperation):
    """Solve ``op(A) X = B`` for X with A triangular.

    A: [..., n, n], B: [..., n, k] -> X: [..., n, k], one batch shape for all.
    A is lower triangular unless ``upper``; only that triangle (diagonal
    included) is read. ``transpose_a`` solves with ``Aᵀ`` (``op(A) = Aᵀ``).
    """

    name = "tgraph.triangular_solve"
    a = operand_def(TensorT)
    b = operand_def(TensorT)
    upper = opt_prop_def(UnitAttr)
    transpose_a = opt_prop_def(UnitAttr)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = (
        "$a `,` $b (`upper` $upper^)? (`transpose_a` $transpose_a^)? " + _FN
    )

    def __init__(
        self,
        a: SSAValue,
        b: SSAValue,
        result_type: Attribute,
        *,
        upper: bool = False,
        transpose_a: bool = False,
    ):
        props: dict[str, Attribute] = {}
        if upper:
            props["upper"] = UnitAttr()
        if transpose_a:
            props["transpose_a"] = UnitAttr()
        super().__init__(operands=[a, b], result_types=[result_type], properties=props)

    def verify_(self) -> None:
        _check_same_elem(self, self.a, self.b, self.result)
        if not _is_float(elem_of(self.a)):
            raise VerifyException(
                f"{self.name}: needs floating-point operands, got {elem_of(self.a)}"
            )
        a, b = shape_of(self.a), shape_of(self.b)
        if len(a) < 2 or a[-1] != a[-2]:
            raise VerifyException(f"{self.name}: A must be square matrices, got {fmt_shape(a)}")
        if len(b) != len(a) or b[-2] != a[-1]:
            raise VerifyException(
                f"{self.name}: B must be [..., {a[-1]}, k] of rank {len(a)}, got {fmt_shape(b)}"
            )
        if a[:-2] != b[:-2]:
            raise VerifyException(
                f"{self.name}: batch dims differ: A {fmt_shape(a[:-2])}, B {fmt_shape(b[:-2])}"
            )
        _check_shape(self, "result", shape_of(self.result), b)


def _check_csr(op: Operation, indptr: SSAValue, indices: SSAValue, sparse_shape: DenseArrayBase) -> tuple[int, int, int]:
    """Check CSR operands as in ``tgraph.spmm`` (A [M, K] by ``indptr`` [M+1] and
    ``indices`` [nnz], ``sparse_shape = [M, K]``); return (M, K, nnz)."""
    vals = list(sparse_shape.get_values())
    if len(vals) != 2 or min(vals) < 0:
        raise VerifyException(f"{op.name}: sparse_shape must be [M, K], got {vals}")
    m, k = vals
    for name, v in (("indptr", indptr), ("indices", indices)):
        if not isinstance(elem_of(v), IntegerType):
            raise VerifyException(f"{op.name}: {name} must be an integer tensor")
    _check_shape(op, "indptr", shape_of(indptr), (m + 1,))
    nnz = shape_of(indices)
    if len(nnz) != 1:
        raise VerifyException(f"{op.name}: indices must be 1-D")
    return m, k, nnz[0]


@irdl_op_definition
class SpMMTransposeOp(_SpMMBase):
    """Transposed sparse (CSR) × dense: ``Aᵀ @ dense`` with A [M, K] given as for
    ``tgraph.spmm`` and ``dense`` [M, N] -> [K, N]. The adjoint of spmm in its
    dense operand."""

    name = "tgraph.spmm_transpose"
    TRANSPOSED: ClassVar[bool] = True


@irdl_op_definition
class SDDMMOp(IRDLOperation):
    """Sampled dense-dense product: for each stored entry ``p`` of the CSR pattern
    (row ``i``, column ``indices[p]``), ``result[p] = sum_n lhs[i, n] * rhs[indices[p], n]``.

    lhs [M, N], rhs [K, N] -> [nnz]. The adjoint of spmm in its values.
    """

    name = "tgraph.sddmm"
    indptr = operand_def(TensorT)
    indices = operand_def(TensorT)
    lhs = operand_def(TensorT)
    rhs = operand_def(TensorT)
    sparse_shape = prop_def(DenseArrayBase[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = (
        "$indptr `,` $indices `,` $lhs `,` $rhs `sparse_shape` `=` $sparse_shape " + _FN
    )

    def verify_(self) -> None:
        m, k, nnz = _check_csr(self, self.indptr, self.indices, self.sparse_shape)
        a, b = shape_of(self.lhs), shape_of(self.rhs)
        if len(a) != 2 or a[0] != m:
            raise VerifyException(f"{self.name}: lhs has shape {fmt_shape(a)}, expected [{m}, N]")
        if len(b) != 2 or b[0] != k or b[1] != a[1]:
            raise VerifyException(
                f"{self.name}: rhs has shape {fmt_shape(b)}, expected [{k}, {a[1]}]"
            )
        _check_same_elem(self, self.lhs, self.rhs, self.result)
        _check_shape(self, "result", shape_of(self.result), (nnz,))


DERIVATIVE_SUPPORT_OPS: list[type[IRDLOperation]] = [
    FlashAttentionFwdOp, FlashAttentionBwdOp, RealOp, ImagOp, ComplexOp, TriangularSolveOp, SpMMTransposeOp, SDDMMOp,
]


GRAPH_OPS: list[type[IRDLOperation]] = [
    AddOp, SubOp, MulOp, DivOp, PowOp, MaximumOp, MinimumOp,
    LtOp, LeOp, GtOp, GeOp, EqOp, NeOp, SelectOp,
    NegOp, AbsOp, ExpOp, LogOp, SqrtOp, RsqrtOp, TanhOp, ReluOp, GeluOp, SiluOp, SigmoidOp,
    CastOp,
    SumOp, MaxOp, MinOp, MeanOp,
    SoftmaxOp, LayerNormOp, RMSNormOp, MatmulOp, FlashAttentionOp, Conv2dOp, MSEOp,
    TransposeOp, ReshapeOp, BroadcastOp, SliceOp, ConcatOp, ConstantOp,
    FFTOp, FFT2dOp, CholeskyOp, SVDOp, SpMMOp,
    RandnOp, PoissonOp,
    AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp, AllSliceOp, SendOp, RecvOp,
    FusedOp, YieldOp, MatmulEpilogueOp,
]

Graph = Dialect("tgraph", [*GRAPH_OPS, *DERIVATIVE_SUPPORT_OPS], [])
