"""ATen operators as Tessera operator calls.

:data:`RULES` maps an ATen overload (``torch.ops.aten.mm.default``...) to a
:class:`Rule`: a ``check`` that says, from the FX node alone (its arguments and
the ``meta["val"]`` fake tensors), whether the node can be translated, and an
``emit`` that appends the Tessera ops for it to the active trace, given the
node's arguments with tensors already translated to :class:`TracedTensor`.

Type promotion is explicit here, since Tessera has none: each rule casts its
operands to the dtype torch computes in (the node's result dtype, or the
promoted dtype of the operands for comparisons) before emitting the op.

Ops without a rule (gather/index/scatter, sort/topk, pooling with indices,
random ops, sin/cos...) are not translated: the partitioner leaves them to
eager torch and counts them. A rule that discovers at trace time that it cannot
translate its node raises :class:`Unsupported`, and its partition runs in torch.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.fx

from tessera.frontend import ops
from tessera.frontend.tracing import TracedTensor
from tessera.ir.dtypes import DType, dtype_of

aten = torch.ops.aten
prims = torch.ops.prims

SUPPORTED_DTYPES: frozenset[torch.dtype] = frozenset(
    {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
     torch.bool}
)
"""Tensor dtypes a translated node may consume and produce."""

FLOAT_DTYPES: frozenset[torch.dtype] = frozenset(
    {torch.float32, torch.float64, torch.float16, torch.bfloat16}
)


class Unsupported(Exception):
    """A node that cannot be translated after all; its partition runs in torch."""


Check = Callable[[torch.fx.Node], str | None]
Emit = Callable[..., Any]


@dataclass(frozen=True)
class Rule:
    """How one ATen overload becomes Tessera ops."""

    emit: Emit
    """``emit(node, *args, **kwargs)``: the result (a TracedTensor or a tuple of them)."""
    check: Check | None = None
    """Extra conditions on the node: None when translatable, else the reason it is not."""
    compute: bool = True
    """False for ops that only move or relabel data (views, copies, getitem): a
    partition of nothing but these stays in torch, where they are free."""


RULES: dict[Any, Rule] = {}


def rule(*targets: Any, check: Check | None = None, compute: bool = True) -> Callable[[Emit], Emit]:
    """Register ``emit`` as the rule of each of ``targets``."""

    def deco(fn: Emit) -> Emit:
        for t in targets:
            RULES[t] = Rule(fn, check, compute)
        return fn

    return deco


# --------------------------------------------------------------------------- helpers


def val(node: Any) -> Any:
    """The fake tensor (or tuple of them) that dynamo recorded for ``node``."""
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def out_dtype(node: torch.fx.Node, index: int | None = None) -> torch.dtype:
    v = val(node)
    if index is not None:
        v = v[index]
    return v.dtype


def ts_dtype(dt: torch.dtype) -> DType:
    return dtype_of(dt)


def torch_dtype(x: TracedTensor) -> torch.dtype:
    dt = x.dtype.torch_dtype
    assert dt is not None
    return dt


def to(x: Any, dt: torch.dtype) -> TracedTensor:
    """``x`` (a traced tensor or a Python number) as a tensor of torch dtype ``dt``."""
    if isinstance(x, TracedTensor):
        return x if torch_dtype(x) == dt else ops.cast(x, ts_dtype(dt))
    if isinstance(x, bool) and dt != torch.bool:
        x = int(x)
    if dt in FLOAT_DTYPES:
        x = float(x)
    elif dt == torch.bool:
        x = bool(x)
    else:
        if isinstance(x, float) and not float(x).is_integer():
            raise Unsupported(f"the number {x!r} in an integer op")
        x = int(x)
    return ops.constant(np.asarray(x, dtype=ts_dtype(dt).np_dtype), ts_dtype(dt))


def promote(*xs: Any) -> torch.dtype:
    """torch's result dtype of an op on ``xs`` (traced tensors and Python numbers)."""
    stand_ins = [
        torch.empty((1,) if x.ndim else (), dtype=torch_dtype(x))
        if isinstance(x, TracedTensor)
        else x
        for x in xs
    ]
    dt = torch.result_type(stand_ins[0], stand_ins[1])
    for s in stand_ins[2:]:
        dt = torch.result_type(torch.empty((1,), dtype=dt), s)
    return dt


def _norm_dims(dims: Any, rank: int) -> list[int]:
    if dims is None:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    if len(dims) == 0:
        return list(range(rank))
    return sorted({int(d) % max(rank, 1) for d in dims})


def _shape(sizes: Sequence[Any]) -> list[int]:
    return [int(s) for s in sizes]


def _float_only(node: torch.fx.Node) -> str | None:
    dt = out_dtype(node)
    return None if dt in FLOAT_DTYPES else f"{dt} result"


def _only_outputs(*keep: int) -> Check:
    """A check: the node's other tuple results are unused."""

    def check(node: torch.fx.Node) -> str | None:
        for u in node.users:
            if u.target is not operator.getitem or u.args[1] not in keep:
                return f"result {u.args[1] if u.target is operator.getitem else '?'} is used"
        return None

    return check


# --------------------------------------------------------------------------- elementwise


def _binary(fn: Callable[[Any, Any], TracedTensor]) -> Emit:
    def emit(node: torch.fx.Node, a: Any, b: Any, *, alpha: Any = 1) -> TracedTensor:
        dt = out_dtype(node)
        x, y = to(a, dt), to(b, dt)
        if alpha != 1:
            y = ops.mul(y, to(alpha, dt))
        return fn(x, y)

    return emit


rule(aten.add.Tensor, aten.add.Scalar)(_binary(ops.add))
rule(aten.sub.Tensor, aten.sub.Scalar)(_binary(ops.sub))
rule(aten.mul.Tensor, aten.mul.Scalar)(_binary(ops.mul))
rule(aten.maximum.default)(_binary(ops.maximum))
rule(aten.minimum.default)(_binary(ops.minimum))


@rule(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(node: torch.fx.Node, a: Any, b: Any, *, alpha: Any = 1) -> TracedTensor:
    dt = out_dtype(node)
    x, y = to(a, dt), to(b, dt)
    return ops.sub(y, ops.mul(x, to(alpha, dt)) if alpha != 1 else x)


def _div_check(node: torch.fx.Node) -> str | None:
    mode = node.kwargs.get("rounding_mode", node.args[2] if len(node.args) > 2 else None)
    return None if mode is None else f"rounding_mode={mode!r}"


@rule(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.true_divide.Tensor, check=_div_check)
def _div(node: torch.fx.Node, a: Any, b: Any, rounding_mode: Any = None) -> TracedTensor:
    dt = out_dtype(node)
    return ops.div(to(a, dt), to(b, dt))


@rule(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar, check=_float_only)
def _pow(node: torch.fx.Node, a: Any, b: Any) -> TracedTensor:
    dt = out_dtype(node)
    if isinstance(a, TracedTensor) and not isinstance(b, TracedTensor):
        if b == 2:
            x = to(a, dt)
            return ops.mul(x, x)
        if b == 1:
            return to(a, dt)
        if b == 0.5:
            return ops.sqrt(to(a, dt))
        if b == -1:
            return ops.div(to(1.0, dt), to(a, dt))
    return ops.pow(to(a, dt), to(b, dt))


def _compare(fn: Callable[[Any, Any], TracedTensor]) -> Emit:
    def emit(node: torch.fx.Node, a: Any, b: Any) -> TracedTensor:
        dt = promote(a, b)
        return fn(to(a, dt), to(b, dt))

    return emit


rule(aten.eq.Tensor, aten.eq.Scalar)(_compare(ops.eq))
rule(aten.ne.Tensor, aten.ne.Scalar)(_compare(ops.ne))
rule(aten.lt.Tensor, aten.lt.Scalar)(_compare(ops.lt))
rule(aten.le.Tensor, aten.le.Scalar)(_compare(ops.le))
rule(aten.gt.Tensor, aten.gt.Scalar)(_compare(ops.gt))
rule(aten.ge.Tensor, aten.ge.Scalar)(_compare(ops.ge))


@rule(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(node: torch.fx.Node, c: Any, a: Any, b: Any) -> TracedTensor:
    dt = out_dtype(node)
    return ops.where(to(c, torch.bool), to(a, dt), to(b, dt))


def _bool_only(node: torch.fx.Node) -> str | None:
    dts = [val(a).dtype for a in node.args if isinstance(a, torch.fx.Node)]
    return None if all(d == torch.bool for d in dts) else "non-bool operands"


@rule(aten.logical_not.default, aten.bitwise_not.default, check=_bool_only)
def _not(node: torch.fx.Node, a: Any) -> TracedTensor:
    return ops.eq(to(a, torch.bool), False)


@rule(aten.logical_and.default, aten.bitwise_and.Tensor, check=_bool_only)
def _and(node: torch.fx.Node, a: Any, b: Any) -> TracedTensor:
    return ops.where(to(a, torch.bool), to(b, torch.bool), False)


@rule(aten.logical_or.default, aten.bitwise_or.Tensor, check=_bool_only)
def _or(node: torch.fx.Node, a: Any, b: Any) -> TracedTensor:
    return ops.where(to(a, torch.bool), True, to(b, torch.bool))


def _unary(fn: Callable[[TracedTensor], TracedTensor]) -> Emit:
    def emit(node: torch.fx.Node, a: Any) -> TracedTensor:
        return fn(to(a, out_dtype(node)))

    return emit


rule(aten.neg.default)(_unary(ops.neg))
rule(aten.abs.default)(_unary(ops.abs))
for _t, _f in (
    (aten.exp.default, ops.exp),
    (aten.log.default, ops.log),
    (aten.sqrt.default, ops.sqrt),
    (aten.rsqrt.default, ops.rsqrt),
    (aten.tanh.default, ops.tanh),
    (aten.sigmoid.default, ops.sigmoid),
    (aten.silu.default, ops.silu),
):
    rule(_t, check=_float_only)(_unary(_f))
rule(aten.relu.default)(_unary(ops.relu))


@rule(aten.reciprocal.default, check=_float_only)
def _reciprocal(node: torch.fx.Node, a: Any) -> TracedTensor:
    dt = out_dtype(node)
    return ops.div(to(1.0, dt), to(a, dt))


_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf(x: TracedTensor) -> TracedTensor:
    """``erf(x)`` from exp (Abramowitz & Stegun 7.1.26, absolute error below 1.5e-7),
    computed in f32 at least."""
    dt = torch_dtype(x)
    wide = torch.float64 if dt == torch.float64 else torch.float32
    x = to(x, wide)
    ax = ops.abs(x)
    t = ops.div(to(1.0, wide), ops.add(ops.mul(ax, to(_ERF_P, wide)), to(1.0, wide)))
    poly = to(_ERF_A[4], wide)
    for a in reversed(_ERF_A[:4]):
        poly = ops.add(ops.mul(poly, t), to(a, wide))
    poly = ops.mul(poly, t)
    y = ops.sub(to(1.0, wide), ops.mul(poly, ops.exp(ops.neg(ops.mul(x, x)))))
    y = ops.where(ops.lt(x, to(0.0, wide)), ops.neg(y), y)
    return to(y, dt)


def _erf_check(node: torch.fx.Node) -> str | None:
    dt = out_dtype(node)
    if dt == torch.float64:
        return "erf in float64 (the exp-based erf is accurate to 1.5e-7)"
    return _float_only(node)


@rule(aten.erf.default, check=_erf_check)
def _erf(node: torch.fx.Node, a: Any) -> TracedTensor:
    return erf(to(a, out_dtype(node)))


def _gelu_check(node: torch.fx.Node) -> str | None:
    approx = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    if approx not in ("none", "tanh"):
        return f"approximate={approx!r}"
    if approx == "none":
        return _erf_check(node)
    return _float_only(node)


@rule(aten.gelu.default, check=_gelu_check)
def _gelu(node: torch.fx.Node, a: Any, approximate: str = "none") -> TracedTensor:
    x = to(a, out_dtype(node))
    if approximate == "tanh":
        return ops.gelu(x)
    dt = torch_dtype(x)
    half = ops.mul(x, to(0.5, dt))
    return ops.mul(half, ops.add(erf(ops.mul(x, to(1 / math.sqrt(2), dt))), to(1.0, dt)))


@rule(aten.gelu_backward.default, check=_gelu_check)
def _gelu_backward(
    node: torch.fx.Node, grad: Any, a: Any, approximate: str = "none"
) -> TracedTensor:
    dt = out_dtype(node)
    g, x = to(grad, dt), to(a, dt)
    if approximate == "tanh":
        k, c = math.sqrt(2 / math.pi), 0.044715
        inner = ops.mul(ops.add(x, ops.mul(ops.mul(ops.mul(x, x), x), to(c, dt))), to(k, dt))
        th = ops.tanh(inner)
        sech2 = ops.sub(to(1.0, dt), ops.mul(th, th))
        dinner = ops.mul(ops.add(to(1.0, dt), ops.mul(ops.mul(x, x), to(3 * c, dt))), to(k, dt))
        d = ops.add(
            ops.mul(ops.add(th, to(1.0, dt)), to(0.5, dt)),
            ops.mul(ops.mul(ops.mul(x, to(0.5, dt)), sech2), dinner),
        )
        return ops.mul(g, d)
    cdf = ops.mul(ops.add(erf(ops.mul(x, to(1 / math.sqrt(2), dt))), to(1.0, dt)), to(0.5, dt))
    pdf = ops.mul(ops.exp(ops.mul(ops.mul(x, x), to(-0.5, dt))), to(1 / math.sqrt(2 * math.pi), dt))
    return ops.mul(g, ops.add(cdf, ops.mul(x, pdf)))


@rule(aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default, aten.hardtanh.default)
def _clamp(node: torch.fx.Node, a: Any, lo: Any = None, hi: Any = None) -> TracedTensor:
    dt = out_dtype(node)
    if node.target is aten.clamp_max.default:
        lo, hi = None, lo
    if node.target is aten.hardtanh.default:
        lo = -1.0 if lo is None else lo
        hi = 1.0 if hi is None else hi
    x = to(a, dt)
    if lo is not None:
        x = ops.maximum(x, to(lo, dt))
    if hi is not None:
        x = ops.minimum(x, to(hi, dt))
    return x


@rule(aten.threshold_backward.default)
def _threshold_backward(node: torch.fx.Node, grad: Any, a: Any, threshold: Any) -> TracedTensor:
    dt = out_dtype(node)
    x = to(a, promote(a, threshold))
    return ops.where(ops.le(x, to(threshold, torch_dtype(x))), to(0, dt), to(grad, dt))


@rule(aten._to_copy.default, prims.convert_element_type.default, compute=False)
def _to_copy(node: torch.fx.Node, a: Any, dtype: Any = None, **_: Any) -> TracedTensor:
    return to(a, out_dtype(node))


@rule(
    aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default, aten.detach.default,
    compute=False,
)
def _identity(node: torch.fx.Node, a: Any, *args: Any, **kwargs: Any) -> TracedTensor:
    return a


# --------------------------------------------------------------------------- reductions


def _reduction(fn: Callable[..., TracedTensor], cast_first: bool = True) -> Emit:
    def emit(
        node: torch.fx.Node, a: Any, dims: Any = None, keepdim: bool = False, *, dtype: Any = None
    ) -> TracedTensor:
        dt = out_dtype(node)
        x = to(a, dt) if cast_first else a
        axes = _norm_dims(dims, x.ndim)
        if x.ndim == 0:
            return x
        return fn(x, axis=tuple(axes), keepdims=bool(keepdim))

    return emit


rule(aten.sum.dim_IntList, aten.sum.default)(_reduction(ops.sum))
rule(aten.mean.dim, aten.mean.default, check=_float_only)(_reduction(ops.mean))
rule(aten.amax.default)(_reduction(ops.max))
rule(aten.amin.default)(_reduction(ops.min))


@rule(aten.any.dim, aten.any.dims, aten.any.default)
def _any(node: torch.fx.Node, a: Any, dims: Any = None, keepdim: bool = False) -> TracedTensor:
    x = ops.ne(to(a, promote(a, 0)), 0) if torch_dtype(a) != torch.bool else a
    if x.ndim == 0:
        return x
    counts = ops.sum(to(x, torch.int64), axis=tuple(_norm_dims(dims, x.ndim)), keepdims=keepdim)
    return ops.gt(counts, 0)


def _var(x: TracedTensor, axes: list[int], correction: float, keepdim: bool) -> TracedTensor:
    dt = torch_dtype(x)
    mean = ops.mean(x, axis=tuple(axes), keepdims=True)
    d = ops.sub(x, mean)
    n = math.prod(x.shape[a] for a in axes)
    s = ops.sum(ops.mul(d, d), axis=tuple(axes), keepdims=keepdim)
    return ops.div(s, to(max(n - correction, 0), dt))


def _correction(correction: Any, unbiased: Any) -> float:
    if correction is not None:
        return float(correction)
    return 1.0 if unbiased is None or unbiased else 0.0


@rule(aten.var.correction, check=_float_only)
def _var_correction(
    node: torch.fx.Node, a: Any, dims: Any = None, *, correction: Any = None, keepdim: bool = False
) -> TracedTensor:
    x = to(a, out_dtype(node))
    return _var(x, _norm_dims(dims, x.ndim), _correction(correction, None), keepdim)


@rule(aten.var_mean.correction)
def _var_mean(
    node: torch.fx.Node, a: Any, dims: Any = None, *, correction: Any = None, keepdim: bool = False
) -> tuple[TracedTensor, TracedTensor]:
    x = to(a, out_dtype(node, 0))
    axes = _norm_dims(dims, x.ndim)
    var = _var(x, axes, _correction(correction, None), keepdim)
    return var, ops.mean(x, axis=tuple(axes), keepdims=keepdim)


# --------------------------------------------------------------------------- softmax, norms


def _softmax_check(node: torch.fx.Node) -> str | None:
    if node.args[2]:
        return "half_to_float"
    return _float_only(node)


@rule(aten._softmax.default, check=_softmax_check)
def _softmax(node: torch.fx.Node, a: Any, dim: int, half_to_float: bool) -> TracedTensor:
    return ops.softmax(a, axis=int(dim))


@rule(aten._log_softmax.default, check=_softmax_check)
def _log_softmax(node: torch.fx.Node, a: Any, dim: int, half_to_float: bool) -> TracedTensor:
    m = ops.max(a, axis=int(dim), keepdims=True)
    shifted = ops.sub(a, m)
    lse = ops.log(ops.sum(ops.exp(shifted), axis=int(dim), keepdims=True))
    return ops.sub(shifted, lse)


@rule(aten._softmax_backward_data.default)
def _softmax_backward(
    node: torch.fx.Node, grad: Any, out: Any, dim: int, input_dtype: Any
) -> TracedTensor:
    dt = out_dtype(node)
    g, y = to(grad, dt), to(out, dt)
    gy = ops.mul(g, y)
    return ops.sub(gy, ops.mul(y, ops.sum(gy, axis=int(dim), keepdims=True)))


@rule(aten._log_softmax_backward_data.default)
def _log_softmax_backward(
    node: torch.fx.Node, grad: Any, out: Any, dim: int, input_dtype: Any
) -> TracedTensor:
    dt = out_dtype(node)
    g, y = to(grad, dt), to(out, dt)
    return ops.sub(g, ops.mul(ops.exp(y), ops.sum(g, axis=int(dim), keepdims=True)))


@rule(aten.native_layer_norm.default, check=lambda n: _float_only_index(n, 0))
def _native_layer_norm(
    node: torch.fx.Node, a: Any, shape: Sequence[int], w: Any, b: Any, eps: float
) -> tuple[TracedTensor, TracedTensor, TracedTensor]:
    x = a
    k = len(shape)
    axes = tuple(range(x.ndim - k, x.ndim))
    dt = torch_dtype(x)
    used = {u.args[1] for u in node.users if u.target is operator.getitem}
    wide = torch.float32 if dt in (torch.float16, torch.bfloat16) else dt
    if k == 1 and not used - {0}:
        out = ops.layernorm(x, w, b, eps=float(eps))
        return out, out, out
    xw = to(x, wide)
    mean = ops.mean(xw, axis=axes, keepdims=True)
    d = ops.sub(xw, mean)
    var = ops.mean(ops.mul(d, d), axis=axes, keepdims=True)
    rstd = ops.rsqrt(ops.add(var, to(float(eps), wide)))
    y = ops.mul(d, rstd)
    if w is not None:
        y = ops.mul(y, to(w, wide))
    if b is not None:
        y = ops.add(y, to(b, wide))
    return to(y, dt), mean, rstd


def _float_only_index(node: torch.fx.Node, i: int) -> str | None:
    dt = out_dtype(node, i)
    return None if dt in FLOAT_DTYPES else f"{dt} result"


def _bn_shape(x: TracedTensor) -> list[int]:
    return [1, x.shape[1], *([1] * (x.ndim - 2))]


def _bn_apply(
    x: TracedTensor, mean: TracedTensor, rstd: TracedTensor, w: Any, b: Any
) -> TracedTensor:
    shp = _bn_shape(x)
    y = ops.mul(ops.sub(x, ops.reshape(mean, shp)), ops.reshape(rstd, shp))
    if w is not None:
        y = ops.mul(y, ops.reshape(to(w, torch_dtype(x)), shp))
    if b is not None:
        y = ops.add(y, ops.reshape(to(b, torch_dtype(x)), shp))
    return y


@rule(aten._native_batch_norm_legit_no_training.default, check=_only_outputs(0))
def _batch_norm_eval(
    node: torch.fx.Node, a: Any, w: Any, b: Any, rm: Any, rv: Any, momentum: float, eps: float
) -> tuple[TracedTensor, ...]:
    dt = torch_dtype(a)
    rstd = ops.rsqrt(ops.add(to(rv, dt), to(float(eps), dt)))
    y = _bn_apply(a, to(rm, dt), rstd, w, b)
    return (y,)


def _bn_train_check(node: torch.fx.Node) -> str | None:
    training = node.args[5] if node.target is _BN_FUNCTIONAL else node.args[5]
    return None if training else "training=False"


_BN_FUNCTIONAL = aten._native_batch_norm_legit_functional.default


@rule(_BN_FUNCTIONAL, check=_bn_train_check)
def _batch_norm_train(
    node: torch.fx.Node,
    a: Any, w: Any, b: Any, rm: Any, rv: Any, training: bool, momentum: float, eps: float,
) -> tuple[TracedTensor, ...]:
    x = a
    dt = torch_dtype(x)
    axes = tuple(i for i in range(x.ndim) if i != 1)
    n = math.prod(x.shape[i] for i in axes)
    mean = ops.mean(x, axis=axes)
    d = ops.sub(x, ops.reshape(mean, _bn_shape(x)))
    var = ops.mean(ops.mul(d, d), axis=axes)
    rstd = ops.rsqrt(ops.add(var, to(float(eps), dt)))
    y = _bn_apply(x, mean, rstd, w, b)
    m = float(momentum)
    new_rm = ops.add(ops.mul(to(rm, dt), to(1 - m, dt)), ops.mul(mean, to(m, dt)))
    unbiased = ops.mul(var, to(n / max(n - 1, 1), dt))
    new_rv = ops.add(ops.mul(to(rv, dt), to(1 - m, dt)), ops.mul(unbiased, to(m, dt)))
    return y, mean, rstd, to(new_rm, torch_dtype(rm)), to(new_rv, torch_dtype(rv))


# --------------------------------------------------------------------------- matmul, conv, attention


def _same(x: Any, y: Any, dt: torch.dtype) -> tuple[TracedTensor, TracedTensor]:
    return to(x, dt), to(y, dt)


@rule(aten.mm.default, aten.bmm.default, check=_float_only)
def _mm(node: torch.fx.Node, a: Any, b: Any) -> TracedTensor:
    x, y = _same(a, b, out_dtype(node))
    return ops.matmul(x, y)


@rule(aten.addmm.default, check=_float_only)
def _addmm(
    node: torch.fx.Node, bias: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1
) -> TracedTensor:
    dt = out_dtype(node)
    x, y = _same(a, b, dt)
    p = ops.matmul(x, y)
    if alpha != 1:
        p = ops.mul(p, to(alpha, dt))
    if beta == 0:
        return p
    c = to(bias, dt)
    if beta != 1:
        c = ops.mul(c, to(beta, dt))
    return ops.add(p, c)


def _conv_check(node: torch.fx.Node) -> str | None:
    x, w, _b, stride, padding, dilation, transposed, out_pad, groups = node.args[:9]
    if len(val(x).shape) != 4:
        return "not a 2-D convolution"
    if transposed:
        return "transposed convolution"
    if any(int(d) != 1 for d in dilation):
        return f"dilation={list(dilation)}"
    if int(groups) != 1:
        return f"groups={groups}"
    return _float_only(node)


@rule(aten.convolution.default, check=_conv_check)
def _convolution(
    node: torch.fx.Node, x: Any, w: Any, b: Any, stride: Any, padding: Any, *rest: Any
) -> TracedTensor:
    dt = out_dtype(node)
    return ops.conv2d(
        to(x, dt), to(w, dt), to(b, dt) if b is not None else None,
        stride=_shape(stride), padding=_shape(padding),
    )


def _conv_backward_check(node: torch.fx.Node) -> str | None:
    grad, x, w, _bias_sizes, stride, padding, dilation, transposed, out_pad, groups = node.args[:10]
    if len(val(x).shape) != 4:
        return "not a 2-D convolution"
    if transposed:
        return "transposed convolution"
    if any(int(d) != 1 for d in dilation):
        return f"dilation={list(dilation)}"
    if int(groups) != 1:
        return f"groups={groups}"
    return None if val(x).dtype in FLOAT_DTYPES else f"{val(x).dtype} input"


def _zeros_like_shape(x: TracedTensor, shape: Sequence[int]) -> TracedTensor:
    return ops.broadcast_to(to(0.0, torch_dtype(x)), list(shape))


def _dilate(g: TracedTensor, s: int, axis: int) -> TracedTensor:
    """``s - 1`` zeros after each element of ``g`` along ``axis`` (none after the last)."""
    if s == 1:
        return g
    shape = list(g.shape)
    n = shape[axis]
    inner = [*shape[: axis + 1], 1, *shape[axis + 1 :]]
    zeros = [*shape[: axis + 1], s - 1, *shape[axis + 1 :]]
    y = ops.concat([ops.reshape(g, inner), _zeros_like_shape(g, zeros)], axis=axis + 1)
    y = ops.reshape(y, [*shape[:axis], n * s, *shape[axis + 1 :]])
    return _take(y, axis, 0, (n - 1) * s + 1)


def _take(x: TracedTensor, axis: int, start: int, stop: int) -> TracedTensor:
    if start == 0 and stop == x.shape[axis]:
        return x
    lo = [0] * x.ndim
    hi = list(x.shape)
    lo[axis], hi[axis] = start, stop
    return ops.slice(x, lo, hi)


def _flip(x: TracedTensor, axis: int) -> TracedTensor:
    n = x.shape[axis]
    if n == 1:
        return x
    return ops.concat([_take(x, axis, i, i + 1) for i in reversed(range(n))], axis=axis)


@rule(aten.convolution_backward.default, check=_conv_backward_check)
def _convolution_backward(
    node: torch.fx.Node, grad: Any, x: Any, w: Any, bias_sizes: Any, stride: Any,
    padding: Any, dilation: Any, transposed: bool, output_padding: Any, groups: int,
    output_mask: Sequence[bool],
) -> tuple[Any, Any, Any]:
    """Gradients of a 2-D convolution as convolutions: the input's is the gradient,
    dilated by the stride, convolved with the flipped, transposed kernel; the kernel's
    is the input (channels as batch) convolved with the dilated gradient."""
    dt = torch_dtype(x)
    g = to(grad, dt)
    st, pd = _shape(stride), _shape(padding)
    _, _, h, wd = x.shape
    kh, kw = w.shape[2], w.shape[3]
    gd = _dilate(_dilate(g, st[0], 2), st[1], 3)
    gx = gw = gb = None
    if output_mask[0]:
        wf = ops.transpose(_flip(_flip(w, 2), 3), [1, 0, 2, 3])
        full = ops.conv2d(gd, wf, padding=[kh - 1, kw - 1])
        for axis, (n, p) in ((2, (h, pd[0])), (3, (wd, pd[1]))):
            short = n + 2 * p - full.shape[axis]
            if short > 0:
                zshape = list(full.shape)
                zshape[axis] = short
                full = ops.concat([full, _zeros_like_shape(full, zshape)], axis=axis)
            full = _take(full, axis, p, p + n)
        gx = full
    if output_mask[1]:
        xt = ops.transpose(x, [1, 0, 2, 3])
        kt = ops.transpose(gd, [1, 0, 2, 3])
        r = ops.conv2d(xt, kt, padding=pd)
        r = _take(_take(r, 2, 0, kh), 3, 0, kw)
        gw = ops.transpose(r, [1, 0, 2, 3])
    if output_mask[2]:
        gb = ops.sum(g, axis=(0, 2, 3))
    return gx, gw, gb


def _pool_params(kernel: Any, stride: Any, padding: Any) -> tuple[list[int], list[int], list[int]]:
    k = _shape(kernel) if len(kernel) == 2 else _shape(kernel) * 2
    st = _shape(stride) if stride else k
    st = st if len(st) == 2 else st * 2
    pd = _shape(padding) if not isinstance(padding, int) else [padding, padding]
    pd = pd if len(pd) == 2 else pd * 2
    return k, st, pd


def _max_pool_check(node: torch.fx.Node) -> str | None:
    args = list(node.args)
    backward = node.target is aten.max_pool2d_with_indices_backward.default
    x = args[1] if backward else args[0]
    rest = args[2:] if backward else args[1:]
    dilation = rest[3] if len(rest) > 3 else 1
    ceil_mode = rest[4] if len(rest) > 4 else False
    if len(val(x).shape) != 4:
        return "not a batched 2-D pooling"
    if any(int(d) != 1 for d in ([dilation] if isinstance(dilation, int) else dilation)):
        return f"dilation={dilation}"
    if ceil_mode:
        return "ceil_mode"
    return None if val(x).dtype in FLOAT_DTYPES else f"{val(x).dtype} input"


def _pool_windows(
    x: TracedTensor, k: list[int], st: list[int], pd: list[int]
) -> tuple[list[tuple[int, int, TracedTensor]], int, int]:
    """The k×k strided views of ``x`` padded with -inf, in torch's scan order, and the
    output size."""
    n, c, h, w = x.shape
    ho = (h + 2 * pd[0] - k[0]) // st[0] + 1
    wo = (w + 2 * pd[1] - k[1]) // st[1] + 1
    xp = x
    for axis, p in ((2, pd[0]), (3, pd[1])):
        if p:
            shape = list(xp.shape)
            shape[axis] = p
            edge = ops.broadcast_to(to(float("-inf"), torch_dtype(x)), shape)
            xp = ops.concat([edge, xp, edge], axis=axis)
    wins = []
    for i in range(k[0]):
        for j in range(k[1]):
            lo = [0, 0, i, j]
            hi = [n, c, i + st[0] * (ho - 1) + 1, j + st[1] * (wo - 1) + 1]
            wins.append((i, j, ops.slice(xp, lo, hi, [1, 1, st[0], st[1]])))
    return wins, ho, wo


def _first_max(
    wins: list[tuple[int, int, TracedTensor]], out: TracedTensor
) -> list[tuple[int, int, TracedTensor]]:
    """Per window offset, where it holds the maximum first in scan order (torch's index)."""
    taken: TracedTensor | None = None
    hits = []
    for i, j, win in wins:
        hit = ops.eq(win, out)
        if taken is not None:
            hit = ops.where(taken, False, hit)
            taken = ops.where(hit, True, taken)
        else:
            taken = hit
        hits.append((i, j, hit))
    return hits


@rule(aten.max_pool2d_with_indices.default, check=_max_pool_check)
def _max_pool(
    node: torch.fx.Node, x: Any, kernel: Any, stride: Any = (), padding: Any = 0,
    dilation: Any = 1, ceil_mode: bool = False,
) -> tuple[TracedTensor, TracedTensor]:
    k, st, pd = _pool_params(kernel, stride, padding)
    wins, ho, wo = _pool_windows(x, k, st, pd)
    out = wins[0][2]
    for _, _, win in wins[1:]:
        out = ops.maximum(out, win)
    w = x.shape[3]
    idx = to(0, torch.int64)
    for i, j, hit in reversed(_first_max(wins, out)):
        rows = (np.arange(ho) * st[0] + i - pd[0])[:, None]
        cols = (np.arange(wo) * st[1] + j - pd[1])[None, :]
        flat = ops.constant((rows * w + cols).astype(np.int64), ts_dtype(torch.int64))
        idx = ops.where(hit, flat, idx)
    return out, idx


@rule(aten.max_pool2d_with_indices_backward.default, check=_max_pool_check)
def _max_pool_backward(
    node: torch.fx.Node, grad: Any, x: Any, kernel: Any, stride: Any, padding: Any,
    dilation: Any, ceil_mode: bool, indices: Any,
) -> TracedTensor:
    """The gradient goes to the first maximum of each window (recomputed from ``x``,
    which is where ``indices`` points), summed where windows overlap."""
    k, st, pd = _pool_params(kernel, stride, padding)
    wins, ho, wo = _pool_windows(x, k, st, pd)
    out = wins[0][2]
    for _, _, win in wins[1:]:
        out = ops.maximum(out, win)
    dt = torch_dtype(x)
    g = to(grad, dt)
    n, c, h, w = x.shape
    hp, wp = h + 2 * pd[0], w + 2 * pd[1]
    total: TracedTensor | None = None
    for i, j, hit in _first_max(wins, out):
        part = _dilate(_dilate(ops.where(hit, g, to(0.0, dt)), st[0], 2), st[1], 3)
        for axis, (before, full) in ((2, (i, hp)), (3, (j, wp))):
            after = full - before - part.shape[axis]
            pieces = []
            for width in (before, None, after):
                if width is None:
                    pieces.append(part)
                elif width > 0:
                    shape = list(part.shape)
                    shape[axis] = width
                    pieces.append(_zeros_like_shape(part, shape))
            part = ops.concat(pieces, axis=axis) if len(pieces) > 1 else part
        total = part if total is None else ops.add(total, part)
    assert total is not None
    return _take(_take(total, 2, pd[0], pd[0] + h), 3, pd[1], pd[1] + w)


def _sdpa_check_at(dropout_at: int) -> Check:
    """The check of a fused attention op whose dropout is positional argument
    ``dropout_at``."""

    def check(node: torch.fx.Node) -> str | None:
        args = list(node.args)
        dropout = args[dropout_at] if len(args) > dropout_at else node.kwargs.get("dropout_p", 0.0)
        if dropout:
            return f"dropout_p={dropout}"
        q, k = val(args[0]), val(args[1])
        if q.dim() != k.dim() or q.dim() < 3:
            return "operands of different ranks"
        hq, hk = q.shape[-3], k.shape[-3]
        if isinstance(hq, int) and isinstance(hk, int) and hq % hk:
            return f"{hq} query heads over {hk} key heads"
        return _only_outputs(0)(node) or _float_only_index(node, 0)

    return check


_sdpa_check = _sdpa_check_at(3)


def _repeat_heads(x: TracedTensor, heads: int) -> TracedTensor:
    """``x`` [..., Hk, S, D] with each head repeated for ``heads // Hk`` query heads."""
    *b, hk, s, d = x.shape
    if hk == heads:
        return x
    g = heads // hk
    y = ops.broadcast_to(ops.reshape(x, [*b, hk, 1, s, d]), [*b, hk, g, s, d])
    return ops.reshape(y, [*b, heads, s, d])


def attention(
    q: TracedTensor, k: TracedTensor, v: TracedTensor, mask: Any, causal: bool, scale: Any
) -> TracedTensor:
    """``softmax(scale q kᵀ + mask) v`` as torch's SDPA defines it: ``flash_attention``
    without a mask, else matmuls and a softmax (a bool mask keeps True positions)."""
    k = _repeat_heads(k, q.shape[-3])
    v = _repeat_heads(v, q.shape[-3])
    if mask is None:
        return ops.flash_attention(q, k, v, scale=scale, causal=causal)
    dt = torch_dtype(q)
    sc = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    s = ops.mul(ops.matmul(q, ops.transpose(k)), to(float(sc), dt))
    ninf = to(float("-inf"), dt)
    if causal:
        lq, lk = q.shape[-2], k.shape[-2]
        keep = np.arange(lq)[:, None] >= np.arange(lk)[None, :]
        s = ops.where(ops.constant(keep, ts_dtype(torch.bool)), s, ninf)
    if torch_dtype(mask) == torch.bool:
        s = ops.where(mask, s, ninf)
    else:
        s = ops.add(s, to(mask, dt))
    return ops.matmul(ops.softmax(s, axis=-1), v)


@rule(aten._scaled_dot_product_flash_attention_for_cpu.default, check=_sdpa_check)
def _sdpa_cpu(
    node: torch.fx.Node, q: Any, k: Any, v: Any, dropout_p: float = 0.0,
    is_causal: bool = False, *, attn_mask: Any = None, scale: Any = None,
) -> tuple[TracedTensor, ...]:
    return (attention(q, k, v, attn_mask, bool(is_causal), scale),)


@rule(aten._scaled_dot_product_flash_attention.default, check=_sdpa_check)
def _sdpa_flash(
    node: torch.fx.Node, q: Any, k: Any, v: Any, dropout_p: float = 0.0,
    is_causal: bool = False, return_debug_mask: bool = False, *, scale: Any = None,
) -> tuple[TracedTensor, ...]:
    return (attention(q, k, v, None, bool(is_causal), scale),)


@rule(aten._scaled_dot_product_efficient_attention.default, check=_sdpa_check_at(5))
def _sdpa_efficient(
    node: torch.fx.Node, q: Any, k: Any, v: Any, attn_bias: Any, compute_log_sumexp: bool,
    dropout_p: float = 0.0, is_causal: bool = False, *, scale: Any = None,
) -> tuple[TracedTensor, ...]:
    return (attention(q, k, v, attn_bias, bool(is_causal), scale),)


@rule(aten._scaled_dot_product_cudnn_attention.default, check=_sdpa_check_at(5))
def _sdpa_cudnn(
    node: torch.fx.Node, q: Any, k: Any, v: Any, attn_bias: Any, compute_log_sumexp: bool,
    dropout_p: float = 0.0, is_causal: bool = False, return_debug_mask: bool = False, *,
    scale: Any = None,
) -> tuple[TracedTensor, ...]:
    return (attention(q, k, v, attn_bias, bool(is_causal), scale),)


@rule(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool(node: torch.fx.Node, x: Any, size: Sequence[int]) -> TracedTensor:
    if _shape(size) != [1, 1]:
        h, w = x.shape[-2:]
        if _shape(size) != [h, w]:
            raise Unsupported(f"adaptive_avg_pool2d to {list(size)}")
        return x
    return ops.mean(x, axis=(x.ndim - 2, x.ndim - 1), keepdims=True)


@rule(aten._adaptive_avg_pool2d_backward.default)
def _adaptive_avg_pool_backward(node: torch.fx.Node, grad: Any, x: Any) -> TracedTensor:
    h, w = x.shape[-2:]
    if grad.shape[-2:] != (1, 1):
        raise Unsupported("adaptive_avg_pool2d backward to a size other than 1x1")
    g = ops.div(grad, to(h * w, torch_dtype(grad)))
    return ops.broadcast_to(g, x.shape)


# --------------------------------------------------------------------------- shapes


@rule(
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.view_copy.default,
    compute=False,
)
def _view(node: torch.fx.Node, a: Any, shape: Sequence[Any]) -> TracedTensor:
    return ops.reshape(a, _shape(shape))


@rule(aten.permute.default, aten.permute_copy.default, compute=False)
def _permute(node: torch.fx.Node, a: Any, dims: Sequence[int]) -> TracedTensor:
    if a.ndim == 0:
        return a
    return ops.transpose(a, [int(d) % a.ndim for d in dims])


@rule(aten.t.default, compute=False)
def _t(node: torch.fx.Node, a: Any) -> TracedTensor:
    return a if a.ndim < 2 else ops.transpose(a, [1, 0])


@rule(aten.transpose.int, compute=False)
def _transpose(node: torch.fx.Node, a: Any, d0: int, d1: int) -> TracedTensor:
    if a.ndim < 2:
        return a
    perm = list(range(a.ndim))
    i, j = int(d0) % a.ndim, int(d1) % a.ndim
    perm[i], perm[j] = perm[j], perm[i]
    return ops.transpose(a, perm)


@rule(aten.expand.default, aten.expand_copy.default, compute=False)
def _expand(node: torch.fx.Node, a: Any, sizes: Sequence[Any], *, implicit: bool = False) -> TracedTensor:
    sizes = _shape(sizes)
    lead = len(sizes) - a.ndim
    shape = [a.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes)]
    if tuple(shape) == a.shape:
        return a
    return ops.broadcast_to(a, shape)


@rule(aten.unsqueeze.default, aten.unsqueeze_copy.default, compute=False)
def _unsqueeze(node: torch.fx.Node, a: Any, dim: int) -> TracedTensor:
    d = int(dim) % (a.ndim + 1)
    shape = list(a.shape)
    shape.insert(d, 1)
    return ops.reshape(a, shape)


@rule(
    aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze_copy.dims,
    compute=False,
)
def _squeeze(node: torch.fx.Node, a: Any, dims: Any = None) -> TracedTensor:
    axes = set(_norm_dims(dims, a.ndim)) if dims is not None else set(range(a.ndim))
    shape = [s for i, s in enumerate(a.shape) if not (i in axes and s == 1)]
    return a if len(shape) == a.ndim else ops.reshape(a, shape)


@rule(aten.cat.default, compute=False)
def _cat(node: torch.fx.Node, xs: Sequence[Any], dim: int = 0) -> TracedTensor:
    dt = out_dtype(node)
    parts = [to(x, dt) for x in xs if not (x.ndim == 1 and x.shape[0] == 0)]
    if len(parts) == 1:
        return parts[0]
    return ops.concat(parts, axis=int(dim) % parts[0].ndim)


def _slice_bounds(n: int, start: Any, end: Any, step: int) -> tuple[int, int]:
    s = 0 if start is None else int(start)
    e = n if end is None else int(end)
    s = s + n if s < 0 else s
    e = e + n if e < 0 else e
    s = min(max(s, 0), n)
    e = min(max(e, s), n)
    return s, e


@rule(aten.slice.Tensor, aten.slice_copy.Tensor, compute=False)
def _slice(
    node: torch.fx.Node, a: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1
) -> TracedTensor:
    d = int(dim) % a.ndim
    s, e = _slice_bounds(a.shape[d], start, end, int(step))
    if s == 0 and e == a.shape[d] and step == 1:
        return a
    lo = [0] * a.ndim
    hi = list(a.shape)
    st = [1] * a.ndim
    lo[d], hi[d], st[d] = s, e, int(step)
    return ops.slice(a, lo, hi, st)


@rule(aten.slice_scatter.default)
def _slice_scatter(
    node: torch.fx.Node, base: Any, src: Any, dim: int = 0, start: Any = None, end: Any = None,
    step: int = 1,
) -> TracedTensor:
    if int(step) != 1:
        raise Unsupported(f"slice_scatter with step {step}")
    d = int(dim) % base.ndim
    s, e = _slice_bounds(base.shape[d], start, end, 1)
    parts = []
    for piece in ("before", "src", "after"):
        if piece == "src":
            parts.append(to(src, torch_dtype(base)))
            continue
        a, b = (0, s) if piece == "before" else (e, base.shape[d])
        if b > a:
            lo = [0] * base.ndim
            hi = list(base.shape)
            lo[d], hi[d] = a, b
            parts.append(ops.slice(base, lo, hi))
    return parts[0] if len(parts) == 1 else ops.concat(parts, axis=d)


@rule(aten.select.int, aten.select_copy.int, compute=False)
def _select(node: torch.fx.Node, a: Any, dim: int, index: int) -> TracedTensor:
    d = int(dim) % a.ndim
    i = int(index) % a.shape[d]
    lo = [0] * a.ndim
    hi = list(a.shape)
    lo[d], hi[d] = i, i + 1
    part = ops.slice(a, lo, hi)
    return ops.reshape(part, [s for j, s in enumerate(a.shape) if j != d])


@rule(aten.split_with_sizes.default, aten.split.Tensor, aten.split_with_sizes_copy.default,
      compute=False)
def _split(node: torch.fx.Node, a: Any, sizes: Any, dim: int = 0) -> tuple[TracedTensor, ...]:
    d = int(dim) % a.ndim
    n = a.shape[d]
    if isinstance(sizes, int):
        sizes = [min(sizes, n - i) for i in range(0, n, sizes)]
    out = []
    pos = 0
    for s in _shape(sizes):
        lo = [0] * a.ndim
        hi = list(a.shape)
        lo[d], hi[d] = pos, pos + s
        out.append(ops.slice(a, lo, hi))
        pos += s
    return tuple(out)


@rule(aten.constant_pad_nd.default)
def _pad(node: torch.fx.Node, a: Any, pad: Sequence[int], value: Any = 0) -> TracedTensor:
    x = a
    pad = _shape(pad)
    dt = torch_dtype(x)
    for i in range(len(pad) // 2):
        d = x.ndim - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        if before < 0 or after < 0:
            lo = [0] * x.ndim
            hi = list(x.shape)
            lo[d] = max(-before, 0)
            hi[d] = x.shape[d] - max(-after, 0)
            x = ops.slice(x, lo, hi)
            before, after = max(before, 0), max(after, 0)
        parts = []
        for width in (before, None, after):
            if width is None:
                parts.append(x)
            elif width > 0:
                shape = list(x.shape)
                shape[d] = width
                parts.append(ops.broadcast_to(to(value, dt), shape))
        if len(parts) > 1:
            x = ops.concat(parts, axis=d)
    return x


@rule(operator.getitem, compute=False)
def _getitem(node: torch.fx.Node, a: Any, i: int) -> Any:
    return a[i]


# --------------------------------------------------------------------------- creation


def _full_value(value: Any, dt: torch.dtype, shape: Sequence[int]) -> TracedTensor:
    c = to(value, dt)
    return c if not shape else ops.broadcast_to(c, _shape(shape))


@rule(aten.full.default, aten.scalar_tensor.default)
def _full(node: torch.fx.Node, *args: Any, **kwargs: Any) -> TracedTensor:
    if node.target is aten.scalar_tensor.default:
        return _full_value(args[0], out_dtype(node), [])
    return _full_value(args[1], out_dtype(node), args[0])


@rule(aten.full_like.default)
def _full_like(node: torch.fx.Node, a: Any, value: Any, **kwargs: Any) -> TracedTensor:
    return _full_value(value, out_dtype(node), a.shape)


@rule(aten.arange.start_step, aten.arange.default, aten.arange.start)
def _arange(node: torch.fx.Node, *args: Any, **kwargs: Any) -> TracedTensor:
    dt = out_dtype(node)
    nums = [a for a in args if isinstance(a, int | float)]
    values = np.arange(*nums).astype(ts_dtype(dt).np_dtype)
    return ops.constant(values, ts_dtype(dt))


def has_rule(target: Any) -> bool:
    return target in RULES


__all__ = ["RULES", "Rule", "Unsupported", "SUPPORTED_DTYPES", "has_rule", "val"]
