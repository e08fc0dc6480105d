"""``tgraph`` reductions and neural-network ops: ``sum``/``max``/``min``/``mean``, ``softmax``,
the norms, ``matmul``, ``flash_attention``, ``conv2d``, ``mse``."""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    TensorType,
    UnitAttr,
    bf16,
    f16,
    f32,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
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
    _norm_axes,
    broadcast_shapes,
    elem_of,
    fmt_shape,
    shape_of,
)
from tessera.ir.graph.elementwise import (
    MAX_F32,
    MAX_TILE_SIZE,
)

# --------------------------------------------------------------------------- reductions


class AxesReductionOp(IRDLOperation, ABC):
    """Base of ops that reduce their input over ``axes`` (all axes when empty); ``keepdims``
    keeps the reduced axes as 1. The result has the input's element type."""

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
        self.verify_shape()

    def verify_shape(self) -> None:
        """The result's shape: the input's without (or with 1 in, keepdims) the axes."""
        ax = self.axis_list()
        s = shape_of(self.input)
        if self.keepdims is not None:
            want = tuple(1 if i in ax else d for i, d in enumerate(s))
        else:
            want = tuple(d for i, d in enumerate(s) if i not in ax)
        _check_shape(self, "result", shape_of(self.result), want)


class ReductionOp(AxesReductionOp, ABC):
    """Base of the plain reductions (``sum``, ``max``, ``min``, ``mean``): one combining
    operation applied along the axes."""


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


@irdl_op_definition
class LogSumExpOp(AxesReductionOp):
    """``log(sum(exp(x)))`` over axes, as ``torch.logsumexp``: computed stably as
    ``m + log(sum(exp(x - m)))`` with ``m`` the maximum over the axes (taken as 0 where it
    is infinite, so an all ``-inf`` slice gives ``-inf`` and one with ``+inf`` gives
    ``+inf``; an empty slice gives ``-inf``). Floating-point operands only. The result
    has the input's element type, or f32 for a bf16/f16 input (the sums are f32 either
    way: a loss keeps the f32 log-sum-exp of 16-bit logits without an f32 copy of them)."""

    name = "tgraph.logsumexp"

    def verify_(self) -> None:
        et, rt = elem_of(self.input), elem_of(self.result)
        if not _is_float(et):
            raise VerifyException(f"{self.name}: needs a floating-point operand, got {et}")
        if rt != et and not (rt == f32 and et in (bf16, f16)):
            raise VerifyException(
                f"{self.name}: result element type {rt} is neither the input's ({et}) nor f32 "
                "for a 16-bit input"
            )
        self.verify_shape()


@irdl_op_definition
class RowMomentsOp(IRDLOperation):
    """Each row's mean and the sum of squared deviations from it: the ``dims`` trailing
    dims of ``input`` are a row, and for each index of the leading dims ``mean`` is the
    row's mean and ``m2`` is ``sum((x - mean)^2)`` over the row (the variance times the
    row's length). Both are f32, computed in f32 from a bf16, f16 or f32 input: one read
    of the input, and the deviations are taken from the row's own mean, so no precision
    is lost to a large mean. Batch norm's statistics combine the rows' moments over the
    batch exactly (Chan et al.)::

        %mean, %m2 = tgraph.row_moments %x dims = 2 : tensor<128x64x56x56xbf16>
            -> (tensor<128x64xf32>, tensor<128x64xf32>)
    """

    name = "tgraph.row_moments"
    input = operand_def(TensorT)
    dims = prop_def(IntegerAttr[I64])
    mean = result_def(TensorT)
    m2 = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = (
        "$input `dims` `=` $dims attr-dict `:` type($input) `->` `(` type($mean) `,` "
        "type($m2) `)`"
    )

    def __init__(self, input: SSAValue, dims: int):
        s = shape_of(input)
        t = TensorType(f32, list(s[: len(s) - dims]))
        super().__init__(operands=[input], result_types=[t, t],
                         properties={"dims": IntegerAttr(dims, i64)})

    def verify_(self) -> None:
        s = shape_of(self.input)
        k = self.dims.value.data
        if not 1 <= k <= len(s):
            raise VerifyException(
                f"{self.name}: dims = {k} must be between 1 and the input's rank {len(s)}"
            )
        if elem_of(self.input) not in (bf16, f16, f32):
            raise VerifyException(
                f"{self.name}: needs a bf16, f16 or f32 input, got {elem_of(self.input)}"
            )
        for name in ("mean", "m2"):
            r = getattr(self, name)
            if elem_of(r) != f32:
                raise VerifyException(f"{self.name}: {name} must be f32, got {elem_of(r)}")
            _check_shape(self, name, shape_of(r), s[: len(s) - k])


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
    ROW_STATS: ClassVar[tuple[str, ...]] = ()
    """The names of the results that hold each row's statistics (a training forward's)."""

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
        _check_row_stats(self, self.ROW_STATS)


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
class LayerNormFwdOp(_NormOp):
    """``tgraph.layernorm`` that also returns each row's statistics, for a training
    forward whose backward reads them (``torch.native_layer_norm``'s three results).

    input [..., D] (weight, bias optional, [D]) -> (result [..., D], mean [..., 1],
    rstd [..., 1]) with ``mean`` the row's mean and ``rstd = 1 / sqrt(var + eps)`` (the
    biased variance), both f32 (f64 for an f64 input): the values the normalization
    used, computed once with it.
    """

    name = "tgraph.layernorm_fwd"
    input = operand_def(TensorT)
    weight = opt_operand_def(TensorT)
    bias = opt_operand_def(TensorT)
    result = result_def(TensorT)  # restated so that the results are (result, mean, rstd)
    mean = result_def(TensorT)
    rstd = result_def(TensorT)
    ROW_STATS: ClassVar[tuple[str, ...]] = ("mean", "rstd")
    assembly_format = (
        "$input (`weight` $weight^ `:` type($weight))? (`bias` $bias^ `:` type($bias))? "
        "`eps` `=` $eps attr-dict `:` type($input) `->` `(` type($result) `,` type($mean) "
        "`,` type($rstd) `)`"
    )


def _check_row_stats(op: _NormOp, names: Sequence[str]) -> None:
    """A training forward's row statistics (the results ``names``): ``[..., 1]`` of the
    input's rows, f32 (f64 for an f64 input)."""
    if not names:
        return
    s = shape_of(op.input)
    if not _is_float(elem_of(op.input)):
        raise VerifyException(f"{op.name}: needs a floating-point operand")
    want = Float64Type() if isinstance(elem_of(op.input), Float64Type) else Float32Type()
    for name in names:
        v = getattr(op, name)
        if elem_of(v) != want:
            raise VerifyException(
                f"{op.name}: {name} must be {want} for a {elem_of(op.input)} input, "
                f"got {elem_of(v)}"
            )
        _check_shape(op, name, shape_of(v), (*s[:-1], 1))


class _NormBwdOp(IRDLOperation, ABC):
    """The input gradient of a normalization over the last dim, from the forward's
    saved row statistics (``[..., 1]``, f32; f64 for f64 operands). With ``residual``
    (the input's shape and type) the result is ``dx + residual``, ``dx`` rounded to the
    input's type first: the sum of a residual stream's gradients, exactly what a
    separate ``tgraph.add`` computes (``fuse-elementwise`` folds that add in)."""

    dy = operand_def(TensorT)
    input = operand_def(TensorT)
    rstd = operand_def(TensorT)
    weight = opt_operand_def(TensorT)
    residual = opt_operand_def(TensorT)
    result = result_def(TensorT)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(Pure())

    def _check(self, stats: Sequence[tuple[str, SSAValue]]) -> None:
        _check_same_elem(self, self.dy, self.input, self.result)
        s = shape_of(self.input)
        if not s:
            raise VerifyException(f"{self.name}: needs an operand of rank >= 1")
        if not _is_float(elem_of(self.input)):
            raise VerifyException(f"{self.name}: needs a floating-point operand")
        _check_shape(self, "dy", shape_of(self.dy), s)
        _check_shape(self, "result", shape_of(self.result), s)
        if self.weight is not None:
            _check_shape(self, "weight", shape_of(self.weight), (s[-1],))
        if self.residual is not None:
            _check_same_elem(self, self.input, self.residual)
            _check_shape(self, "residual", shape_of(self.residual), s)
        want = Float64Type() if isinstance(elem_of(self.input), Float64Type) else Float32Type()
        for name, v in stats:
            if elem_of(v) != want:
                raise VerifyException(
                    f"{self.name}: {name} must be {want} for a {elem_of(self.input)} input, "
                    f"got {elem_of(v)}"
                )
            _check_shape(self, name, shape_of(v), (*s[:-1], 1))


@irdl_op_definition
class LayerNormBwdOp(_NormBwdOp):
    """The input gradient of ``y = layernorm(x, weight, bias)`` for the cotangent ``dy``,
    from the forward's row ``mean`` and ``rstd`` (``tgraph.layernorm_fwd``): with
    ``xhat = (x - mean) rstd`` and ``g = dy weight``,
    ``dx = rstd (g - mean(g) - xhat mean(g xhat))`` (row means over the last dim).
    The weight and bias gradients are column sums, not part of this op."""

    name = "tgraph.layernorm_bwd"
    dy = operand_def(TensorT)
    input = operand_def(TensorT)
    mean = operand_def(TensorT)
    rstd = operand_def(TensorT)
    weight = opt_operand_def(TensorT)
    residual = opt_operand_def(TensorT)
    assembly_format = (
        "$dy `,` $input `,` $mean `,` $rstd (`weight` $weight^ `:` type($weight))? "
        "(`residual` $residual^ `:` type($residual))? "
        "attr-dict `:` `(` type($dy) `,` type($input) `,` type($mean) `,` type($rstd) `)` "
        "`->` type($result)"
    )

    def verify_(self) -> None:
        self._check([("mean", self.mean), ("rstd", self.rstd)])


@irdl_op_definition
class RMSNormBwdOp(_NormBwdOp):
    """The input gradient of ``y = rmsnorm(x, weight)`` for the cotangent ``dy``, from
    the row ``rstd = 1 / sqrt(mean(x^2) + eps)``: with ``xhat = x rstd`` and
    ``g = dy weight``, ``dx = rstd (g - xhat mean(g xhat))``."""

    name = "tgraph.rmsnorm_bwd"
    assembly_format = (
        "$dy `,` $input `,` $rstd (`weight` $weight^ `:` type($weight))? "
        "(`residual` $residual^ `:` type($residual))? "
        "attr-dict `:` `(` type($dy) `,` type($input) `,` type($rstd) `)` `->` type($result)"
    )

    def verify_(self) -> None:
        self._check([("rstd", self.rstd)])


@irdl_op_definition
class RMSNormOp(_NormOp):
    """RMS normalization over the last dimension: ``x / sqrt(mean(x^2) + eps) * weight``."""

    name = "tgraph.rmsnorm"
    assembly_format = (
        "$input (`weight` $weight^ `:` type($weight))? `eps` `=` $eps attr-dict "
        "`:` type($input) `->` type($result)"
    )


@irdl_op_definition
class RMSNormFwdOp(_NormOp):
    """``tgraph.rmsnorm`` that also returns each row's ``rstd = 1 / sqrt(mean(x^2) + eps)``
    (``[..., 1]``, f32; f64 for an f64 input), for a training forward whose backward
    (``tgraph.rmsnorm_bwd``) reads it: the value the normalization used, computed once
    with it."""

    name = "tgraph.rmsnorm_fwd"
    input = operand_def(TensorT)
    weight = opt_operand_def(TensorT)
    result = result_def(TensorT)  # restated so that the results are (result, rstd)
    rstd = result_def(TensorT)
    ROW_STATS: ClassVar[tuple[str, ...]] = ("rstd",)
    assembly_format = (
        "$input (`weight` $weight^ `:` type($weight))? `eps` `=` $eps attr-dict "
        "`:` type($input) `->` `(` type($result) `,` type($rstd) `)`"
    )


NormOp = LayerNormOp | LayerNormFwdOp | RMSNormOp | RMSNormFwdOp
"""A normalization over the last dim (plain, or a training forward with its statistics)."""


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
        _check_attention_operands(self, self.q, self.k, self.v)
        q, v = shape_of(self.q), shape_of(self.v)
        _check_shape(self, "result", shape_of(self.result), (*q[:-1], v[-1]))


def _check_attention_operands(op: Operation, q: SSAValue, k: SSAValue, v: SSAValue) -> None:
    """The operand checks of ``tgraph.flash_attention`` and its gradient ops: one element
    type, equal ranks >= 2, q and k head dims, k and v sequence lengths, batch dims."""
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
    """2-D convolution (cross-correlation), NCHW input and OIHW weight, optional bias [O]:
    ``y[n, o, ho, wo] = sum over c, i, j of
    x[n, c, ho*sh + i*dh - ph, wo*sw + j*dw - pw] * w[o, c, i, j]`` (+ ``bias[o]``), the
    input zero outside its bounds. ``dilation`` (default 1, 1) spaces the kernel's taps.
    ``groups`` (default 1) splits the channels into that many groups convolved apart:
    the weight is ``[O, C / groups, kh, kw]`` and output channel ``o`` sums over the
    input channels ``g * C/groups + c`` of its group ``g = o // (O / groups)``
    (``groups == C == O``: a depthwise convolution)."""

    name = "tgraph.conv2d"
    input = operand_def(TensorT)
    weight = operand_def(TensorT)
    bias = opt_operand_def(TensorT)
    stride = prop_def(DenseArrayBase[I64])
    padding = prop_def(DenseArrayBase[I64])
    dilation = opt_prop_def(DenseArrayBase[I64])
    groups = opt_prop_def(IntegerAttr[I64])
    result = result_def(TensorT)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(Pure())
    assembly_format = (
        "$input `,` $weight (`bias` $bias^ `:` type($bias))? `stride` `=` $stride "
        "`padding` `=` $padding (`dilation` `=` $dilation^)? (`groups` `=` $groups^)? "
        "attr-dict `:` type($input) `,` type($weight) `->` type($result)"
    )

    @staticmethod
    def infer_shape(
        x: Sequence[int], w: Sequence[int], stride: Sequence[int], pad: Sequence[int],
        dilation: Sequence[int] = (1, 1), groups: int = 1,
    ) -> tuple[int, ...] | str:
        if len(x) != 4 or len(w) != 4:
            return f"input and weight must be 4-D (NCHW, OIHW), got {fmt_shape(x)}, {fmt_shape(w)}"
        if groups < 1:
            return f"groups must be >= 1, got {groups}"
        if groups == 1 and x[1] != w[1]:
            return f"channels differ: input C={x[1]}, weight C={w[1]}"
        if x[1] != w[1] * groups:
            return (f"channels differ: input C={x[1]} is not groups={groups} times weight "
                    f"C={w[1]}")
        if w[0] % groups:
            return f"output channels O={w[0]} are not a multiple of groups={groups}"
        eh, ew = (w[2] - 1) * dilation[0] + 1, (w[3] - 1) * dilation[1] + 1
        ho = (x[2] + 2 * pad[0] - eh) // stride[0] + 1
        wo = (x[3] + 2 * pad[1] - ew) // stride[1] + 1
        if ho <= 0 or wo <= 0:
            what = f"kernel {w[2]}x{w[3]}" + (
                f" dilated to {eh}x{ew}" if (eh, ew) != (w[2], w[3]) else "")
            return f"{what} larger than padded input {x[2]}x{x[3]}"
        return (x[0], w[0], ho, wo)

    @property
    def dilation_values(self) -> tuple[int, int]:
        """``(dh, dw)``: the dilation, (1, 1) when absent."""
        if self.dilation is None:
            return (1, 1)
        dh, dw = self.dilation.get_values()
        return (dh, dw)

    @property
    def groups_value(self) -> int:
        """The channel groups, 1 when absent."""
        return 1 if self.groups is None else self.groups.value.data

    def verify_(self) -> None:
        _check_same_elem(self, self.input, self.weight, self.result)
        st, pd = list(self.stride.get_values()), list(self.padding.get_values())
        if len(st) != 2 or len(pd) != 2 or min(st) < 1 or min(pd) < 0:
            raise VerifyException(
                f"{self.name}: stride needs two sizes >= 1 and padding two sizes >= 0"
            )
        dl = list(self.dilation.get_values()) if self.dilation is not None else [1, 1]
        if len(dl) != 2 or min(dl) < 1:
            raise VerifyException(f"{self.name}: dilation needs two sizes >= 1, got {dl}")
        r = self.infer_shape(shape_of(self.input), shape_of(self.weight), st, pd, dl,
                             self.groups_value)
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


