"""Optimizer updates over many tensors at once: ``tgraph.adamw_update`` and
``tgraph.sgd_update``.

Each op takes lists of equally long variadic operands, one entry per parameter tensor
(``params``, ``grads`` and the optimizer's state), plus a small tensor ``hyper`` of the
step's scalars, and returns the updated parameters and state. The hyper-parameters that
change from step to step (the learning rate, the bias corrections) are in ``hyper`` (f32;
f64 for f64 parameters) so that one compiled update serves every step; those fixed for
the run (betas, eps, weight decay) are properties. The math follows ``torch.optim`` and is
carried out in f32 for f32, bf16 and f16 tensors (f64 in f64); the state is stored in the
parameters' element type, as torch's fused optimizers store it.

All tensors of one op share one element type (one op per dtype group).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    TensorType,
    UnitAttr,
    f32,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    AttrSizedResultSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from tessera.ir.graph.base import TensorT, elem_of, fmt_shape, shape_of

ADAMW_HYPER = ("decay", "step_size", "bias_correction2_sqrt")
"""The entries of ``tgraph.adamw_update``'s ``hyper`` operand, in order:
``1 - lr * weight_decay``, ``lr / (1 - beta1^t)`` and ``sqrt(1 - beta2^t)``."""

SGD_HYPER = ("lr", "buf_scale", "grad_scale")
"""The entries of ``tgraph.sgd_update``'s ``hyper`` operand, in order: the learning rate,
and the factors of ``buf = buf_scale * buf + grad_scale * d_p`` (``momentum`` and
``1 - dampening``; on the first step ``0`` and ``1``, so the buffer starts as ``d_p``
as in torch)."""

_FLOATS = (Float64Type, Float32Type, Float16Type, BFloat16Type)


def _check_lists(op: IRDLOperation, lists: Sequence[tuple[str, Sequence[SSAValue]]]) -> None:
    """Equal lengths, one floating-point element type, and per-entry equal shapes."""
    name, first = lists[0]
    if not first:
        raise VerifyException(f"{op.name}: needs at least one parameter tensor")
    for what, vals in lists[1:]:
        if len(vals) != len(first):
            raise VerifyException(
                f"{op.name}: {len(first)} {name} but {len(vals)} {what}"
            )
    et = elem_of(first[0])
    if not isinstance(et, _FLOATS):
        raise VerifyException(
            f"{op.name}: parameters must be f64, f32, f16 or bf16, got {et}"
        )
    for what, vals in lists:
        for k, v in enumerate(vals):
            if elem_of(v) != et:
                raise VerifyException(
                    f"{op.name}: {what}[{k}] is {elem_of(v)}, expected {et} "
                    "(one update per element type)"
                )
            want = shape_of(first[k])
            if shape_of(v) != want:
                raise VerifyException(
                    f"{op.name}: {what}[{k}] has shape {fmt_shape(shape_of(v))}, "
                    f"expected {fmt_shape(want)} (that of {name}[{k}])"
                )
            if v.type != first[k].type:
                raise VerifyException(
                    f"{op.name}: {what}[{k}] is {v.type}, expected {first[k].type}"
                )


def _check_hyper(op: IRDLOperation, hyper: SSAValue, names: Sequence[str]) -> None:
    t = hyper.type
    assert isinstance(t, TensorType)
    want = hyper_type(elem_of(op.operands[0]), len(names))
    if t != want:
        raise VerifyException(
            f"{op.name}: hyper must be {want} ({', '.join(names)}), got {t}"
        )


def hyper_type(et: Attribute, n: int) -> TensorType:
    """The type of ``hyper`` for parameters of element type ``et``: ``n`` values of the
    compute type (f64 for f64 parameters, else f32)."""
    return TensorType(Float64Type() if isinstance(et, Float64Type) else f32, [n])


def _print(op: AdamWUpdateOp | SGDUpdateOp, printer: Printer) -> None:
    """``%p0, %p1 grads %g0, %g1 <list> ... hyper %h <name> = <float> ... (nesterov)?
    {attrs} : <param types>``: the lists share the parameters' types (the verifier
    requires it), so they are written once; an empty list is left out."""
    for k, name in enumerate(op.LISTS):
        vals = getattr(op, name)
        if not vals:
            continue
        printer.print_string(" " if k == 0 else f" {name} ")
        printer.print_list(vals, printer.print_operand)
    printer.print_string(" hyper ")
    printer.print_operand(op.hyper)
    for name in op.FLOATS:
        printer.print_string(f" {name} = ")
        printer.print_float(getattr(op, name).value.data, Float64Type())
    if getattr(op, "nesterov", None) is not None:
        printer.print_string(" nesterov")
    printer.print_op_attributes(op.attributes)
    printer.print_string(" : ")
    printer.print_list([v.type for v in op.params], printer.print_attribute)


def _parse(cls: type[AdamWUpdateOp | SGDUpdateOp], parser: Parser) -> Any:
    lists: dict[str, list[UnresolvedOperand]] = {}
    for k, name in enumerate(cls.LISTS):
        if k > 0 and parser.parse_optional_keyword(name) is None:
            lists[name] = []
            continue
        lists[name] = parser.parse_comma_separated_list(
            parser.Delimiter.NONE, parser.parse_unresolved_operand
        )
    parser.parse_keyword("hyper")
    hyper = parser.parse_unresolved_operand()
    floats: dict[str, float] = {}
    for name in cls.FLOATS:
        parser.parse_keyword(name)
        parser.parse_punctuation("=")
        floats[name] = parser.parse_float()
    nesterov = cls is SGDUpdateOp and parser.parse_optional_keyword("nesterov") is not None
    attrs = parser.parse_optional_attr_dict()
    parser.parse_punctuation(":")
    types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
    resolved = []
    for name in cls.LISTS:
        vals = lists[name]
        if vals and len(vals) != len(types):
            parser.raise_error(
                f"{cls.name}: {len(vals)} {name} but {len(types)} parameter types"
            )
        resolved.append([parser.resolve_operand(v, t) for v, t in zip(vals, types)])
    h = parser.resolve_operand(hyper, hyper_type(types[0].element_type, len(cls.HYPER)))
    extra = {"nesterov": nesterov} if cls is SGDUpdateOp else {}
    op = cls(*resolved, h, **floats, **extra)
    op.attributes.update(attrs)
    return op


def _check_unit(op: IRDLOperation, what: str, x: float, lo: float, hi: float) -> None:
    if not lo <= x < hi:
        raise VerifyException(f"{op.name}: {what} must be in [{lo}, {hi}), got {x}")


@irdl_op_definition
class AdamWUpdateOp(IRDLOperation):
    """One AdamW step (``torch.optim.AdamW``) of every tensor in ``params``.

    With ``hyper = [decay, step_size, bc2_sqrt]`` (:data:`ADAMW_HYPER`), per element::

        p  = p * decay                       # decoupled weight decay: 1 - lr * wd
        m  = beta1 * m + (1 - beta1) * g
        v  = beta2 * v + (1 - beta2) * g * g
        p  = p - step_size * m / (sqrt(v) / bc2_sqrt + eps)

    Results: the new ``params``, ``exp_avgs`` and ``exp_avg_sqs``, in that order.
    """

    name = "tgraph.adamw_update"
    params = var_operand_def(TensorT)
    grads = var_operand_def(TensorT)
    exp_avgs = var_operand_def(TensorT)
    exp_avg_sqs = var_operand_def(TensorT)
    hyper = operand_def(TensorT)
    beta1 = prop_def(FloatAttr[Float64Type])
    beta2 = prop_def(FloatAttr[Float64Type])
    eps = prop_def(FloatAttr[Float64Type])
    new_params = var_result_def(TensorT)
    new_exp_avgs = var_result_def(TensorT)
    new_exp_avg_sqs = var_result_def(TensorT)
    irdl_options = (
        AttrSizedOperandSegments(as_property=True),
        AttrSizedResultSegments(as_property=True),
    )
    traits = traits_def(Pure())
    LISTS: ClassVar = ("params", "grads", "exp_avgs", "exp_avg_sqs")
    FLOATS: ClassVar = ("beta1", "beta2", "eps")
    HYPER: ClassVar = ADAMW_HYPER

    @classmethod
    def parse(cls, parser: Parser) -> AdamWUpdateOp:
        return _parse(cls, parser)

    def print(self, printer: Printer) -> None:
        _print(self, printer)

    def __init__(
        self,
        params: Sequence[SSAValue],
        grads: Sequence[SSAValue],
        exp_avgs: Sequence[SSAValue],
        exp_avg_sqs: Sequence[SSAValue],
        hyper: SSAValue,
        *,
        beta1: float,
        beta2: float,
        eps: float,
    ):
        types = [v.type for v in params]
        super().__init__(
            operands=[list(params), list(grads), list(exp_avgs), list(exp_avg_sqs), hyper],
            result_types=[types, list(types), list(types)],
            properties={
                "beta1": FloatAttr(float(beta1), Float64Type()),
                "beta2": FloatAttr(float(beta2), Float64Type()),
                "eps": FloatAttr(float(eps), Float64Type()),
            },
        )

    def verify_(self) -> None:
        _check_lists(self, [
            ("params", self.params), ("grads", self.grads), ("exp_avgs", self.exp_avgs),
            ("exp_avg_sqs", self.exp_avg_sqs), ("new_params", self.new_params),
            ("new_exp_avgs", self.new_exp_avgs), ("new_exp_avg_sqs", self.new_exp_avg_sqs),
        ])
        _check_hyper(self, self.hyper, ADAMW_HYPER)
        _check_unit(self, "beta1", self.beta1.value.data, 0.0, 1.0)
        _check_unit(self, "beta2", self.beta2.value.data, 0.0, 1.0)
        if not self.eps.value.data >= 0.0:
            raise VerifyException(f"{self.name}: eps must be >= 0, got {self.eps.value.data}")


@irdl_op_definition
class SGDUpdateOp(IRDLOperation):
    """One SGD step (``torch.optim.SGD``) of every tensor in ``params``.

    With ``hyper = [lr, buf_scale, grad_scale]`` (:data:`SGD_HYPER`), per element::

        d   = g + weight_decay * p
        buf = buf_scale * buf + grad_scale * d      # only with momentum buffers
        d   = d + momentum * buf if nesterov else buf
        p   = p - lr * d

    Without ``momentum_buffers`` (momentum 0) the step is ``p - lr * d``. Results: the
    new ``params``, then the new ``momentum_buffers``.
    """

    name = "tgraph.sgd_update"
    params = var_operand_def(TensorT)
    grads = var_operand_def(TensorT)
    momentum_buffers = var_operand_def(TensorT)
    hyper = operand_def(TensorT)
    momentum = prop_def(FloatAttr[Float64Type])
    weight_decay = prop_def(FloatAttr[Float64Type])
    nesterov = opt_prop_def(UnitAttr)
    new_params = var_result_def(TensorT)
    new_momentum_buffers = var_result_def(TensorT)
    irdl_options = (
        AttrSizedOperandSegments(as_property=True),
        AttrSizedResultSegments(as_property=True),
    )
    traits = traits_def(Pure())
    LISTS: ClassVar = ("params", "grads", "momentum_buffers")
    FLOATS: ClassVar = ("momentum", "weight_decay")
    HYPER: ClassVar = SGD_HYPER

    @classmethod
    def parse(cls, parser: Parser) -> SGDUpdateOp:
        return _parse(cls, parser)

    def print(self, printer: Printer) -> None:
        _print(self, printer)

    def __init__(
        self,
        params: Sequence[SSAValue],
        grads: Sequence[SSAValue],
        momentum_buffers: Sequence[SSAValue],
        hyper: SSAValue,
        *,
        momentum: float,
        weight_decay: float,
        nesterov: bool = False,
    ):
        types: list[Attribute] = [v.type for v in params]
        props: dict[str, Attribute] = {
            "momentum": FloatAttr(float(momentum), Float64Type()),
            "weight_decay": FloatAttr(float(weight_decay), Float64Type()),
        }
        if nesterov:
            props["nesterov"] = UnitAttr()
        super().__init__(
            operands=[list(params), list(grads), list(momentum_buffers), hyper],
            result_types=[types, [v.type for v in momentum_buffers]],
            properties=props,
        )

    def verify_(self) -> None:
        lists = [("params", self.params), ("grads", self.grads),
                 ("new_params", self.new_params)]
        if self.momentum_buffers or self.new_momentum_buffers:
            lists += [("momentum_buffers", self.momentum_buffers),
                      ("new_momentum_buffers", self.new_momentum_buffers)]
        _check_lists(self, lists)
        _check_hyper(self, self.hyper, SGD_HYPER)
        mom = self.momentum.value.data
        if not mom >= 0.0:
            raise VerifyException(f"{self.name}: momentum must be >= 0, got {mom}")
        if mom == 0.0 and self.momentum_buffers:
            raise VerifyException(f"{self.name}: momentum buffers with momentum 0")
        if mom > 0.0 and not self.momentum_buffers:
            raise VerifyException(
                f"{self.name}: momentum {mom} needs one momentum buffer per parameter"
            )
        if self.nesterov is not None and mom == 0.0:
            raise VerifyException(f"{self.name}: nesterov needs a momentum > 0")
        if not self.weight_decay.value.data >= 0.0:
            raise VerifyException(
                f"{self.name}: weight_decay must be >= 0, got {self.weight_decay.value.data}"
            )


OPTIM_OPS = [AdamWUpdateOp, SGDUpdateOp]
