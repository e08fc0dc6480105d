"""Adjoint (vector-Jacobian product) rules for Graph IR ops.

A rule receives the op (already placed in the gradient function, so its
operands and results are the primal values there), the cotangent of each of
its results (``None`` where a result has none) and, per operand, whether that
operand needs a cotangent. It emits Graph IR with a :class:`GraphEmitter` and
returns one cotangent (or ``None``) per operand, with the operand's shape.

Conventions chosen to agree with ``torch.autograd``:

* ``relu``, ``abs``: the derivative at 0 is 0.
* ``maximum`` / ``minimum``: on ties the cotangent is split evenly.
* ``max`` / ``min`` reductions: the cotangent is split evenly among the
  elements equal to the extremum (as ``torch.amax``).
* ``pow``: ``d/da`` is 0 where the exponent is 0; ``d/db`` is 0 where the base is
  0 and the exponent is non-negative.
* ``poisson``: the samples are piecewise constant in the rate, so the
  gradient with respect to ``lam`` is zero.
* Collectives are transposed: ``all_gather`` <-> ``reduce_scatter(sum)``,
  ``all_reduce(sum|mean)`` -> ``all_reduce`` of the cotangent with the same op,
  ``all_to_all`` -> ``all_to_all`` with split and concat dims exchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    Float64Type,
    IntegerType,
    TensorType,
    f32,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.irdl import IRDLOperation
from xdsl.utils.exceptions import PassFailedException

from tessera.autodiff.emitter import GraphEmitter, numel
from tessera.errors import TesseraError
from tessera.ir import graph as g
from tessera.ir.attrs import policy_of
from tessera.ir.graph import elem_of, shape_of
from tessera.ir.registry import OpRegistry

Cot = SSAValue | None
Rule = Callable[[GraphEmitter, Operation, Sequence[Cot], Sequence[bool]], list[Cot]]

VJP_RULES: OpRegistry[Rule] = OpRegistry("adjoint rule")
"""The adjoint rule of each Graph IR op, by op class (``@VJP_RULES.register(g.MulOp)``)."""

CUSTOM_VJP_ATTR = "tessera.custom_vjp"
"""The attribute marking the output of a traced ``ts.custom_vjp`` call (its key in
:data:`CUSTOM_VJPS`)."""


class CustomAdjoint(Protocol):
    """The adjoint of one traced ``ts.custom_vjp`` call (``tessera.autodiff.custom``)."""

    def apply(
        self, block: Block, mapping: dict[SSAValue, SSAValue], grad_output: SSAValue,
        needs: Sequence[bool],
    ) -> list[SSAValue | None]:
        """Emit the cotangents of the call's inputs at the end of ``block``."""
        ...


CUSTOM_VJPS: dict[str, CustomAdjoint] = {}
"""Adjoints of the ``ts.custom_vjp`` calls traced in this process, by marker key; the
front end registers them, the ``autodiff`` pass applies them."""

GELU_C = math.sqrt(2.0 / math.pi)
GELU_K = 0.044715
ERF_C = 2.0 / math.sqrt(math.pi)
"""``d/dx erf(x) = ERF_C * exp(-x^2)``."""


class AutodiffError(TesseraError, PassFailedException):
    """An op or program that cannot be differentiated; the message names the op."""


def is_float(v: SSAValue) -> bool:
    return not isinstance(elem_of(v), IntegerType)


# --------------------------------------------------------------------------- elementwise


def _binary_parts(op: Operation) -> tuple[SSAValue, SSAValue, SSAValue]:
    return op.operands[0], op.operands[1], op.results[0]


@VJP_RULES.register(g.AddOp, g.SubOp)
def _add_sub(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    a, b, _ = _binary_parts(op)
    ct = cts[0]
    assert ct is not None
    da = e.unbroadcast(ct, shape_of(a)) if needs[0] else None
    db = None
    if needs[1]:
        db = ct if isinstance(op, g.AddOp) else e.neg(ct)
        db = e.unbroadcast(db, shape_of(b))
    return [da, db]


@VJP_RULES.register(g.MulOp)
def _mul(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    a, b, _ = _binary_parts(op)
    ct = cts[0]
    assert ct is not None
    # complex operands: ā = ȳ conj(b) (torch's convention); conj is the identity on reals
    da = e.unbroadcast(e.mul(ct, e.conj(b)), shape_of(a)) if needs[0] else None
    db = e.unbroadcast(e.mul(ct, e.conj(a)), shape_of(b)) if needs[1] else None
    return [da, db]


@VJP_RULES.register(g.DivOp)
def _div(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    a, b, y = _binary_parts(op)
    ct = cts[0]
    assert ct is not None
    da = db = None
    if needs[0] or needs[1]:
        q = e.div(ct, e.conj(b))
        if needs[0]:
            da = e.unbroadcast(q, shape_of(a))
        if needs[1]:
            db = e.unbroadcast(e.neg(e.mul(q, e.conj(y))), shape_of(b))
    return [da, db]


def splat_value(v: SSAValue) -> float | None:
    """The value of a splat ``tgraph.constant`` (or None)."""
    op = v.owner
    if isinstance(op, g.ConstantOp):
        vals = op.value.get_values()
        if len(set(vals)) == 1 and not isinstance(elem_of(v), IntegerType):
            return float(vals[0])
    return None


@VJP_RULES.register(g.PowOp)
def _pow(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    a, b, y = _binary_parts(op)
    ct = cts[0]
    assert ct is not None
    da = db = None
    c = splat_value(b)
    if needs[0] and c is not None:  # constant exponent: c * a**(c-1), folded
        if c == 0.0:
            da = None
        elif c == 1.0:
            da = e.unbroadcast(ct, shape_of(a))
        else:
            d = e.mul(a, c) if c == 2.0 else e.mul(e.pow(a, c - 1.0), c)
            da = e.unbroadcast(e.mul(ct, d), shape_of(a))
    elif needs[0]:
        d = e.mul(b, e.pow(a, e.sub(b, 1.0)))
        d = e.select(e.eq(b, 0.0), 0.0, d)
        da = e.unbroadcast(e.mul(ct, d), shape_of(a))
    if needs[1]:
        d = e.mul(y, e.log(a))
        d = e.select(e.eq(a, 0.0), e.select(e.ge(b, 0.0), 0.0, d), d)
        db = e.unbroadcast(e.mul(ct, d), shape_of(b))
    return [da, db]


@VJP_RULES.register(g.MaximumOp, g.MinimumOp)
def _max_min(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    a, b, _ = _binary_parts(op)
    ct = cts[0]
    assert ct is not None
    wins = e.gt(a, b) if isinstance(op, g.MaximumOp) else e.lt(a, b)
    tie = e.eq(a, b)
    half = e.mul(ct, 0.5)
    da = db = None
    if needs[0]:
        da = e.unbroadcast(e.select(wins, ct, e.select(tie, half, 0.0)), shape_of(a))
    if needs[1]:
        loses = e.lt(a, b) if isinstance(op, g.MaximumOp) else e.gt(a, b)
        db = e.unbroadcast(e.select(loses, ct, e.select(tie, half, 0.0)), shape_of(b))
    return [da, db]


@VJP_RULES.register(g.SelectOp)
def _select(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    c, t, f = op.operands
    ct = cts[0]
    assert ct is not None
    dt = e.unbroadcast(e.select(c, ct, 0.0), shape_of(t)) if needs[1] else None
    df = e.unbroadcast(e.select(c, 0.0, ct), shape_of(f)) if needs[2] else None
    return [None, dt, df]


def _unary(fn: Callable[[GraphEmitter, SSAValue, SSAValue, SSAValue], SSAValue]) -> Rule:
    def rule(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
        ct = cts[0]
        assert ct is not None
        return [fn(e, ct, op.operands[0], op.results[0]) if needs[0] else None]

    return rule


def _sign(e: GraphEmitter, x: SSAValue) -> SSAValue:
    return e.select(e.gt(x, 0.0), 1.0, e.select(e.lt(x, 0.0), -1.0, e.const(0.0, x)))


def _gelu_grad(e: GraphEmitter, x: SSAValue) -> SSAValue:
    x2 = e.mul(x, x)
    inner = e.mul(e.mul(x, e.add(e.mul(x2, GELU_K), 1.0)), GELU_C)
    t = e.tanh(inner)
    dinner = e.mul(e.add(e.mul(x2, 3.0 * GELU_K), 1.0), GELU_C)
    left = e.mul(e.add(t, 1.0), 0.5)
    right = e.mul(e.mul(e.mul(x, 0.5), e.sub(1.0, e.mul(t, t))), dinner)
    return e.add(left, right)


VJP_RULES.register(g.NegOp)(_unary(lambda e, ct, x, y: e.neg(ct)))
VJP_RULES.register(g.AbsOp)(_unary(lambda e, ct, x, y: e.mul(ct, _sign(e, x))))
VJP_RULES.register(g.ExpOp)(_unary(lambda e, ct, x, y: e.mul(ct, y)))
VJP_RULES.register(g.LogOp)(_unary(lambda e, ct, x, y: e.div(ct, x)))
VJP_RULES.register(g.SqrtOp)(_unary(lambda e, ct, x, y: e.div(e.mul(ct, 0.5), y)))
VJP_RULES.register(g.RsqrtOp)(
    _unary(lambda e, ct, x, y: e.mul(e.mul(ct, -0.5), e.mul(y, e.mul(y, y))))
)
VJP_RULES.register(g.TanhOp)(_unary(lambda e, ct, x, y: e.mul(ct, e.sub(1.0, e.mul(y, y)))))
VJP_RULES.register(g.ReluOp)(_unary(lambda e, ct, x, y: e.select(e.gt(x, 0.0), ct, 0.0)))
VJP_RULES.register(g.SigmoidOp)(_unary(lambda e, ct, x, y: e.mul(ct, e.mul(y, e.sub(1.0, y)))))
VJP_RULES.register(g.SiluOp)(_unary(lambda e, ct, x, y: e.mul(ct, _silu_grad(e, x))))
VJP_RULES.register(g.ErfOp)(
    _unary(lambda e, ct, x, y: e.mul(ct, e.mul(e.exp(e.neg(e.mul(x, x))), ERF_C)))
)
VJP_RULES.register(g.GeluOp)(_unary(lambda e, ct, x, y: e.mul(ct, _gelu_grad(e, x))))
VJP_RULES.register(g.SinOp)(_unary(lambda e, ct, x, y: e.mul(ct, e.unary(g.CosOp, x))))
VJP_RULES.register(g.CosOp)(_unary(lambda e, ct, x, y: e.neg(e.mul(ct, e.unary(g.SinOp, x)))))


def _silu_grad(e: GraphEmitter, x: SSAValue) -> SSAValue:
    s = e.sigmoid(x)
    return e.mul(s, e.add(e.mul(x, e.sub(1.0, s)), 1.0))


@VJP_RULES.register(g.CastOp)
def _cast(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    """ct cast back to the input type; a cast to a ``@loss_scale(k)`` policy stores
    ``k x``, so its cotangent is ``k ct`` (the backward pass runs scaled)."""
    ct = cts[0]
    assert ct is not None
    x = op.operands[0]
    if not (needs[0] and is_float(x)):
        return [None]
    k = policy_of(op.results[0].type).loss_scale
    if k is not None:
        ct = e.mul(ct, float(k))
    return [e.cast(ct, elem_of(x))]


# --------------------------------------------------------------------------- reductions


def _reduce_parts(op: g.ReductionOp) -> tuple[SSAValue, list[int], SSAValue]:
    return op.input, op.axis_list(), op.result


@VJP_RULES.register(g.SumOp, g.MeanOp)
def _sum_mean(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.ReductionOp)
    x, axes, _ = _reduce_parts(op)
    ct = cts[0]
    assert ct is not None
    s = shape_of(x)
    if isinstance(op, g.MeanOp):
        ct = e.div(ct, float(numel([s[a] for a in axes])))
    return [e.expand_reduced(ct, s, axes)]


@VJP_RULES.register(g.MaxOp, g.MinOp)
def _max_min_reduce(
    e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]
):
    assert isinstance(op, g.ReductionOp)
    x, axes, y = _reduce_parts(op)
    ct = cts[0]
    assert ct is not None
    s = shape_of(x)
    hit = e.select(e.eq(x, e.expand_reduced(y, s, axes)), 1.0, e.const(0.0, x))
    count = e.sum(hit, axes, keepdims=True)
    share = e.div(e.reshape(ct, shape_of(count)), count)
    return [e.mul(hit, share)]


@VJP_RULES.register(g.LogSumExpOp)
def _logsumexp(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    """``x̄ = ȳ exp(x - y)`` (the softmax over the axes), ȳ and y expanded over them; in
    the result's type when it is wider than x's (f32 from bf16), then cast to x's."""
    assert isinstance(op, g.LogSumExpOp)
    x, axes, y = op.input, op.axis_list(), op.result
    ct = cts[0]
    assert ct is not None
    s = shape_of(x)
    wide = elem_of(y) != elem_of(x)
    xw = e.cast(x, elem_of(y)) if wide else x
    p = e.exp(e.sub(xw, e.expand_reduced(y, s, axes)))
    gx = e.mul(e.expand_reduced(ct, s, axes), p)
    return [e.cast(gx, elem_of(x)) if wide else gx]


# --------------------------------------------------------------------------- nn ops


@VJP_RULES.register(g.SoftmaxOp)
def _softmax(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.SoftmaxOp)
    ct = cts[0]
    assert ct is not None
    y = op.result
    axis = op.axis.value.data % len(shape_of(y))
    dot = e.sum(e.mul(ct, y), [axis], keepdims=True)
    return [e.mul(y, e.sub(ct, dot))]


def operand_slots(op: Operation) -> dict[str, int]:
    """Position in ``op.operands`` of each present operand, by its definition name
    (definition order, optional operands skipped when absent)."""
    assert isinstance(op, IRDLOperation)
    slots: dict[str, int] = {}
    for name, _ in type(op).get_irdl_definition().operands:
        if getattr(op, name, None) is not None:
            slots[name] = len(slots)
    return slots


@VJP_RULES.register(g.LayerNormOp, g.RMSNormOp)
def _norm(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    """The row statistics again (mean and rstd, f32; f64 for f64 inputs), then the input
    gradient as one ``layernorm_bwd`` / ``rmsnorm_bwd`` row kernel and the weight and
    bias gradients as column sums of ``dy xhat`` and ``dy``."""
    assert isinstance(op, g.LayerNormOp | g.RMSNormOp)
    ct = cts[0]
    assert ct is not None
    x = op.input
    eps = op.eps.value.data
    s = shape_of(x)
    last = len(s) - 1
    lead = list(range(last))
    wide = Float64Type() if isinstance(elem_of(x), Float64Type) else f32
    xw = e.cast(x, wide)
    mean = e.mean(xw, [last], keepdims=True) if isinstance(op, g.LayerNormOp) else None
    xc = e.sub(xw, mean) if mean is not None else xw
    r = e.rsqrt(e.add(e.mean(e.mul(xc, xc), [last], keepdims=True), eps))
    slots = operand_slots(op)
    out: list[Cot] = [None] * len(op.operands)
    if needs[slots["input"]]:
        w = op.weight
        if mean is not None:
            bwd = g.LayerNormBwdOp.build(
                operands=[ct, x, mean, r, [w] if w is not None else [], []],
                result_types=[x.type])
        else:
            bwd = g.RMSNormBwdOp.build(
                operands=[ct, x, r, [w] if w is not None else [], []],
                result_types=[x.type])
        out[slots["input"]] = e.insert(bwd)
    wants_w = "weight" in slots and needs[slots["weight"]]
    if wants_w:
        d = e.mul(ct, e.cast(e.mul(xc, r), elem_of(x)))
        out[slots["weight"]] = e.sum(d, lead) if lead else d
    if "bias" in slots and needs[slots["bias"]]:
        out[slots["bias"]] = e.sum(ct, lead) if lead else ct
    return out


@VJP_RULES.register(g.MatmulOp)
def _matmul(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.MatmulOp)
    ct = cts[0]
    assert ct is not None
    a, b = op.lhs, op.rhs
    ta, tb = op.transpose_lhs is not None, op.transpose_rhs is not None
    da = db = None
    if needs[0]:
        if ta:
            da = e.matmul(b, ct, transpose_lhs=tb, transpose_rhs=True)
        else:
            da = e.matmul(ct, b, transpose_rhs=not tb)
        da = e.unbroadcast(da, shape_of(a))
    if needs[1]:
        if tb:
            db = e.matmul(ct, a, transpose_lhs=True, transpose_rhs=ta)
        else:
            db = e.matmul(a, ct, transpose_lhs=not ta)
        db = e.unbroadcast(db, shape_of(b))
    return [da, db]


def attention_scale(op: g.FlashAttentionOp | g.FlashAttentionFwdOp | g.FlashAttentionBwdOp) -> float:
    """The softmax scale of an attention op (``1/sqrt(D)`` unless given)."""
    return op.scale.value.data if op.scale is not None else 1.0 / math.sqrt(shape_of(op.q)[-1])


def attention_scores(
    e: GraphEmitter, op: g.FlashAttentionOp | g.FlashAttentionFwdOp | g.FlashAttentionBwdOp,
    dtype: Attribute | None = None,
) -> SSAValue:
    """``scale * q kᵀ``, with ``-inf`` above the diagonal when the op is causal; the
    product's result in ``dtype`` when given (16-bit q and k accumulated and stored in
    f32), else in q's element type."""
    s = e.mul(e.matmul(op.q, op.k, transpose_rhs=True, result=dtype), attention_scale(op))
    if op.causal is not None:
        sq, sk = shape_of(op.q)[-2], shape_of(op.k)[-2]
        keep = e.bool_const(np.tri(sq, sk, dtype=bool), [sq, sk])
        s = e.select(keep, s, -math.inf)
    return s


def attention_probs(e: GraphEmitter, op: g.FlashAttentionOp) -> tuple[SSAValue, float]:
    """``softmax(scale * q kᵀ [+ causal mask])`` of a flash_attention op, and the scale."""
    s = attention_scores(e, op)
    p = e.insert(g.SoftmaxOp(s, len(shape_of(s)) - 1))
    return p, attention_scale(op)


def lse_type(q: SSAValue) -> TensorType:
    """The type of the log-sum-exp of attention with queries ``q``: f64 for f64 operands,
    else f32, with q's shape less the head dim."""
    et = elem_of(q)
    return TensorType(et if isinstance(et, Float64Type) else f32, shape_of(q)[:-1])


def expand_attention_fwd(e: GraphEmitter, op: g.FlashAttentionFwdOp) -> list[SSAValue]:
    """``flash_attention_fwd`` as a plain ``flash_attention`` and the log-sum-exp of the
    scores in Graph IR (materializes the ``Sq x Sk`` scores)."""
    props = {n: p for n, p in op.properties.items()}
    o = e.insert(g.FlashAttentionOp.create(
        operands=[op.q, op.k, op.v], result_types=[op.result.type], properties=props
    ))
    lt = op.lse.type
    assert isinstance(lt, TensorType)
    # the scores in the log-sum-exp's type (f32 for 16-bit operands), as the fused kernels
    # accumulate them: a 16-bit product would round them before the log-sum-exp
    s = attention_scores(e, op, lt.element_type)
    m = e.max(s, [-1], keepdims=True)
    total = e.sum(e.exp(e.sub(s, m)), [-1], keepdims=True)
    lse = e.reshape(e.add(m, e.log(total)), shape_of(op.lse))
    return [o, lse]


def expand_attention_bwd(e: GraphEmitter, op: g.FlashAttentionBwdOp) -> list[SSAValue]:
    """``flash_attention_bwd`` as Graph IR matmuls and elementwise ops (materializes
    ``P = exp(scale q kᵀ - lse)``, ``Sq x Sk`` per batch element).

    As the fused kernels (and torch's) compute it: every product of 16-bit operands
    accumulated and kept in the log-sum-exp's type (f32), ``P`` and ``dS`` rounded to the
    operands' type only as the operands of their products, ``dP - D`` in f32; the
    gradients are f32 until the caller casts them to the operands' type."""
    et = elem_of(op.q)
    lt = op.lse.type
    assert isinstance(lt, TensorType)
    w = lt.element_type
    s = attention_scores(e, op, w)  # (as in expand_attention_fwd)
    lse = e.reshape(op.lse, [*shape_of(op.lse), 1])
    p = e.exp(e.sub(s, lse))
    p16 = e.cast(p, et)
    dv = e.matmul(p16, op.do, transpose_lhs=True, result=w)
    dp = e.matmul(op.do, op.v, transpose_rhs=True, result=w)
    di = e.sum(e.mul(e.cast(op.do, w), e.cast(op.o, w)), [-1], keepdims=True)
    ds = e.cast(e.mul(e.mul(p, e.sub(dp, di)), attention_scale(op)), et)
    dq = e.matmul(ds, op.k, result=w)
    dk = e.matmul(ds, op.q, transpose_lhs=True, result=w)
    return [dq, dk, dv]


def vjp_by_expansion(
    e: GraphEmitter,
    op: Operation,
    cts: Sequence[Cot],
    needs: Sequence[bool],
    expand: Callable[[GraphEmitter], list[SSAValue]],
) -> list[Cot]:
    """The VJP of ``op`` through its Graph IR expansion: ``expand`` emits ops computing
    ``op``'s results from its operands, and the adjoint rules of those ops run backwards."""
    block = e.builder.insertion_point.block
    last = block.last_op
    outs = expand(e)
    emitted: list[Operation] = []
    cur = last.next_op if last is not None else block.first_op
    while cur is not None:
        emitted.append(cur)
        cur = cur.next_op
    active = {v for v, n in zip(op.operands, needs) if n}
    for o in emitted:
        if any(v in active for v in o.operands):
            active.update(o.results)
    local: dict[SSAValue, SSAValue] = {}

    def accumulate(v: SSAValue, c: SSAValue) -> None:
        if elem_of(c) != elem_of(v):
            c = e.cast(c, elem_of(v))
        local[v] = e.add(local[v], c) if v in local else c

    for v, c in zip(outs, cts):
        if c is not None and v in active:
            accumulate(v, c)
    for o in reversed(emitted):
        out_cts = [local.get(r) for r in o.results]
        sub_needs = [v in active for v in o.operands]
        if all(c is None for c in out_cts) or not any(sub_needs):
            continue
        rule = VJP_RULES.get(o)
        if rule is None:
            raise AutodiffError(f"autodiff: no adjoint rule for {o.name} in the expansion of {op.name}")
        for v, c, n in zip(o.operands, rule(e, o, out_cts, sub_needs), sub_needs):
            if c is not None and n:
                accumulate(v, c)
    return [local.get(v) if n else None for v, n in zip(op.operands, needs)]


@VJP_RULES.register(g.FlashAttentionOp)
def _attention(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    """The Graph IR adjoint (materializes the probabilities); the autodiff pass replaces a
    differentiated ``flash_attention`` by ``flash_attention_fwd``, whose rule is fused."""
    assert isinstance(op, g.FlashAttentionOp)
    ct = cts[0]
    assert ct is not None
    p, scale = attention_probs(e, op)
    dq = dk = dv = None
    if needs[2]:
        dv = e.matmul(p, ct, transpose_lhs=True)
    if needs[0] or needs[1]:
        dp = e.matmul(ct, op.v, transpose_rhs=True)
        ds = e.mul(e.mul(p, e.sub(dp, e.sum(e.mul(dp, p), [-1], keepdims=True))), scale)
        if needs[0]:
            dq = e.matmul(ds, op.k)
        if needs[1]:
            dk = e.matmul(ds, op.q, transpose_lhs=True)
    return [dq, dk, dv]


@VJP_RULES.register(g.FlashAttentionFwdOp)
def _attention_fwd(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    """``flash_attention_bwd`` from the saved log-sum-exp; a cotangent of the log-sum-exp
    itself (a second derivative) goes through the Graph IR expansion."""
    assert isinstance(op, g.FlashAttentionFwdOp)
    if cts[1] is not None:
        return vjp_by_expansion(e, op, cts, needs, lambda ee: expand_attention_fwd(ee, op))
    ct = cts[0]
    assert ct is not None
    props = {n: p for n, p in op.properties.items()}
    bwd = g.FlashAttentionBwdOp.create(
        operands=[op.q, op.k, op.v, op.result, ct, op.lse],
        result_types=[op.q.type, op.k.type, op.v.type],
        properties=props,
    )
    e.insert(bwd)
    return [r if n else None for r, n in zip(bwd.results, needs)]


@VJP_RULES.register(g.FlashAttentionBwdOp)
def _attention_bwd(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    """Through the Graph IR expansion (second derivatives, forward mode)."""
    assert isinstance(op, g.FlashAttentionBwdOp)
    return vjp_by_expansion(e, op, cts, needs, lambda ee: expand_attention_bwd(ee, op))


def expand_norm_bwd(e: GraphEmitter, op: g.LayerNormBwdOp | g.RMSNormBwdOp) -> list[SSAValue]:
    """``layernorm_bwd`` / ``rmsnorm_bwd`` as Graph IR elementwise ops and row means (in
    the statistics' type, the result rounded to the input's, then the residual added)."""
    last = len(shape_of(op.input)) - 1
    wide = elem_of(op.rstd)
    x, dy = e.cast(op.input, wide), e.cast(op.dy, wide)
    xc = e.sub(x, op.mean) if isinstance(op, g.LayerNormBwdOp) else x
    xhat = e.mul(xc, op.rstd)
    gy = e.mul(dy, e.cast(op.weight, wide)) if op.weight is not None else dy
    inner = e.sub(gy, e.mul(xhat, e.mean(e.mul(gy, xhat), [last], keepdims=True)))
    if isinstance(op, g.LayerNormBwdOp):
        inner = e.sub(inner, e.mean(gy, [last], keepdims=True))
    dx = e.cast(e.mul(op.rstd, inner), elem_of(op.input))
    return [e.add(dx, op.residual) if op.residual is not None else dx]


@VJP_RULES.register(g.LayerNormBwdOp, g.RMSNormBwdOp)
def _norm_bwd(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    """Through the Graph IR expansion (second derivatives, forward mode)."""
    assert isinstance(op, g.LayerNormBwdOp | g.RMSNormBwdOp)
    return vjp_by_expansion(e, op, cts, needs, lambda ee: expand_norm_bwd(ee, op))


@VJP_RULES.register(g.MSEOp)
def _mse(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    ct = cts[0]
    assert ct is not None
    p, t = op.operands
    diff = e.sub(p, t)
    d = e.mul(diff, e.mul(ct, 2.0 / numel(shape_of(diff))))
    dp = e.unbroadcast(d, shape_of(p)) if needs[0] else None
    dt = e.unbroadcast(e.neg(d), shape_of(t)) if needs[1] else None
    return [dp, dt]


# --------------------------------------------------------------------------- shape ops


@VJP_RULES.register(g.TransposeOp)
def _transpose(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.TransposeOp)
    ct = cts[0]
    assert ct is not None
    perm = list(op.permutation.get_values())
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return [e.transpose(ct, inv)]


@VJP_RULES.register(g.ReshapeOp)
def _reshape(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    ct = cts[0]
    assert ct is not None
    return [e.reshape(ct, shape_of(op.operands[0]))]


@VJP_RULES.register(g.BroadcastOp)
def _broadcast(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    ct = cts[0]
    assert ct is not None
    return [e.unbroadcast(ct, shape_of(op.operands[0]))]


@VJP_RULES.register(g.ReverseOp)
def _reverse(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.ReverseOp)
    ct = cts[0]
    assert ct is not None
    return [e.reverse(ct, op.dim_values())]


@VJP_RULES.register(g.SliceOp)
def _slice(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.SliceOp)
    ct = cts[0]
    assert ct is not None
    return [
        e.pad(
            ct,
            shape_of(op.input),
            list(op.start.get_values()),
            list(op.stride.get_values()),
        )
    ]


@VJP_RULES.register(g.TakeAlongAxisOp)
def _take_along_axis(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    """``x̄[.., j, ..] = Σ_k ȳ[.., k, ..] [idx[.., k, ..] == j]``: ȳ and the indices get a
    new axis at ``axis`` compared with the positions ``0..n-1`` along it, and the indices'
    axis (now the next one) is summed; zeros where the indices are smaller than ``x``
    off the axis. An index outside the axis (NaN forward) sends nothing back."""
    assert isinstance(op, g.TakeAlongAxisOp)
    ct = cts[0]
    assert ct is not None
    if not needs[0]:
        return [None, None]
    ax = op.axis_index()
    xs, ks = shape_of(op.input), shape_of(op.indices)
    n = xs[ax]
    wide = [*ks[:ax], 1, *ks[ax:]]
    pos_shape = [n if d == ax else 1 for d in range(len(wide))]
    it = elem_of(op.indices)
    pos = e.insert(g.ConstantOp(
        DenseIntOrFPElementsAttr.from_list(TensorType(it, pos_shape), list(range(n))),
        TensorType(it, pos_shape)))
    hit = e.eq(pos, e.reshape(op.indices, wide))
    gx = e.sum(e.select(hit, e.reshape(ct, wide), 0.0), [ax + 1])
    if list(shape_of(gx)) != list(xs):
        gx = e.pad(gx, xs, [0] * len(xs), [1] * len(xs))
    return [gx, None]


@VJP_RULES.register(g.ConcatOp)
def _concat(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.ConcatOp)
    ct = cts[0]
    assert ct is not None
    s = shape_of(ct)
    axis = op.axis.value.data % len(s)
    out: list[Cot] = []
    at = 0
    for x, need in zip(op.inputs, needs):
        n = shape_of(x)[axis]
        if need:
            start = [0] * len(s)
            limit = list(s)
            start[axis], limit[axis] = at, at + n
            out.append(e.slice(ct, start, limit, [1] * len(s)))
        else:
            out.append(None)
        at += n
    return out


@VJP_RULES.register(g.PoissonOp)
def _poisson(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    return [None]


# --------------------------------------------------------------------------- collectives


@VJP_RULES.register(g.AllReduceOp)
def _all_reduce(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.AllReduceOp)
    ct = cts[0]
    assert ct is not None
    red = op.op.data
    if red not in ("sum", "mean"):
        raise AutodiffError(
            f"autodiff: tgraph.all_reduce with op = {red} has no adjoint rule "
            "(only sum and mean are differentiable)"
        )
    return [
        e.collective(
            g.AllReduceOp,
            ct,
            shape_of(ct),
            op=red,
            axis=op.axis.data,
            nondeterministic=op.nondeterministic is not None,
        )
    ]


@VJP_RULES.register(g.AllGatherOp)
def _all_gather(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.AllGatherOp)
    ct = cts[0]
    assert ct is not None
    return [
        e.collective(
            g.ReduceScatterOp,
            ct,
            shape_of(op.input),
            op="sum",
            axis=op.axis.data,
            dim=op.dim.value.data,
        )
    ]


@VJP_RULES.register(g.ReduceScatterOp)
def _reduce_scatter(
    e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]
):
    assert isinstance(op, g.ReduceScatterOp)
    ct = cts[0]
    assert ct is not None
    if op.op.data != "sum":
        raise AutodiffError(
            f"autodiff: tgraph.reduce_scatter with op = {op.op.data} has no adjoint rule "
            "(only sum is differentiable)"
        )
    return [
        e.collective(
            g.AllGatherOp, ct, shape_of(op.input), axis=op.axis.data, dim=op.dim.value.data
        )
    ]


@VJP_RULES.register(g.AllToAllOp)
def _all_to_all(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.AllToAllOp)
    ct = cts[0]
    assert ct is not None
    return [
        e.collective(
            g.AllToAllOp,
            ct,
            shape_of(op.input),
            axis=op.axis.data,
            split_dim=op.concat_dim.value.data,
            concat_dim=op.split_dim.value.data,
        )
    ]
