"""Numpy reference semantics of Graph IR, on xDSL's interpreter framework.

Values are numpy arrays in their storage dtype (``ml_dtypes`` for bf16, fp8,
fp6 and fp4). Each op widens its operands to a compute dtype (float32, or
float64 when the tensor is f64), computes, and rounds its result to the
storage dtype of the result type with :func:`tessera.numerics.cast_array`
(rounding and saturation of the result's policy; a loss scale is applied only
by an explicit ``tgraph.cast``). ``matmul`` and reductions accumulate in the
policy's accumulate dtype: the declared ``@accum`` type, else float32 for
floats narrower than 32 bits (float64 for f64, int64 for integers).

Collectives on a mesh axis of size 1 (or with no mesh) are the identity;
larger groups need a backend installed in :data:`COLLECTIVE_BACKEND` (the
distributed executor), else they raise ``NotImplementedError``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ComplexType, ModuleOp, TensorType
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    ReturnedValues,
    impl,
    impl_terminator,
    register_impls,
)
from xdsl.interpreters.func import FuncFunctions
from xdsl.ir import Attribute, Operation

from tessera.errors import (
    RUNTIME_ERRORS,
    DataError,
    ShapeError,
    TesseraTypeError,
    data_error,
)
from tessera.ir import graph as g
from tessera.ir.attrs import policy_of
from tessera.ir.dtypes import fp64
from tessera.ir.policy import NumericPolicy
from tessera.ir.registry import OpRegistry
from tessera.numerics import cast_array
from tessera.numerics.random import poisson_array, randn_array

COLLECTIVE_BACKEND: Callable[[Operation, list[np.ndarray], int], np.ndarray | None] | None = None
"""Runs a collective (or send/recv) over a group larger than one rank:
``backend(op, operand_values, group_size) -> result`` (None for send)."""

# --------------------------------------------------------------------------- typing helpers


def np_dtype_of(t: Attribute) -> np.dtype:
    """The numpy storage dtype of a tensor type."""
    assert isinstance(t, TensorType)
    el = t.element_type
    if isinstance(el, ComplexType):
        inner = el.element_type
        return np.dtype(np.complex128 if inner == fp64.ir_type else np.complex64)
    return policy_of(t).storage.np_dtype


def _policy(t: Attribute) -> NumericPolicy:
    return policy_of(t)


def compute_dtype(t: Attribute) -> np.dtype:
    """The dtype elementwise math runs in for values of tensor type ``t``."""
    assert isinstance(t, TensorType)
    if isinstance(t.element_type, ComplexType):
        return np_dtype_of(t)
    p = _policy(t)
    if p.storage.kind != "float":
        return np.dtype(np.int64)
    return np.dtype(np.float64 if p.storage == fp64 else np.float32)


def accum_dtype(t: Attribute) -> np.dtype:
    """The dtype matmuls and reductions accumulate in for operands of type ``t``."""
    assert isinstance(t, TensorType)
    if isinstance(t.element_type, ComplexType):
        return np_dtype_of(t)
    p = _policy(t)
    acc = p.accum_dtype
    if acc.kind != "float":
        return np.dtype(np.int64)
    if acc == fp64 or p.storage == fp64:
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def load(x: np.ndarray, t: Attribute, dtype: np.dtype | None = None) -> np.ndarray:
    """Widen a stored value of type ``t`` to its compute dtype (or ``dtype``)."""
    return np.asarray(x).astype(dtype or compute_dtype(t))


def store(x: Any, t: Attribute, *, with_scale: bool = False, seed: int | None = None) -> np.ndarray:
    """Round ``x`` to the storage dtype of tensor type ``t`` with ``cast_array``.

    The result's policy supplies rounding and saturation; its loss scale is
    applied only when ``with_scale`` (``tgraph.cast``).
    """
    assert isinstance(t, TensorType)
    shape = tuple(t.get_shape())
    arr = np.asarray(x)
    if isinstance(t.element_type, ComplexType):
        return arr.astype(np_dtype_of(t)).reshape(shape)
    p = _policy(t)
    if not with_scale and p.loss_scale is not None:
        p = replace(p, loss_scale=None)
    out = cast_array(arr, p, seed)
    return np.asarray(out).reshape(shape)


def _gelu(x: np.ndarray) -> np.ndarray:
    c = np.asarray(math.sqrt(2.0 / math.pi), dtype=x.dtype)
    return 0.5 * x * (1.0 + np.tanh(c * (x + np.asarray(0.044715, x.dtype) * x**3)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[x.dtype])(x)


def _logsumexp(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """``m + log(sum(exp(x - m)))`` over ``axes``, ``m`` the maximum (0 where infinite or
    the slice is empty), as torch.logsumexp."""
    if x.size == 0:
        m = np.zeros(tuple(1 if i in axes else d for i, d in enumerate(x.shape)), x.dtype)
    else:
        m = np.max(x, axis=axes, keepdims=True)
        m = np.where(np.isinf(m), x.dtype.type(0), m)
    r = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axes)


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero (as ``arith.divsi``)."""
    if np.any(b == 0):
        raise DataError("tgraph.div: integer division by zero")
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


_BINARY: dict[type, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    g.AddOp: np.add,
    g.SubOp: np.subtract,
    g.MulOp: np.multiply,
    g.DivOp: np.divide,
    g.PowOp: np.power,
    g.MaximumOp: np.maximum,
    g.MinimumOp: np.minimum,
    g.LtOp: np.less,
    g.LeOp: np.less_equal,
    g.GtOp: np.greater,
    g.GeOp: np.greater_equal,
    g.EqOp: np.equal,
    g.NeOp: np.not_equal,
}

_UNARY: dict[type, Callable[[np.ndarray], np.ndarray]] = {
    g.NegOp: np.negative,
    g.AbsOp: np.abs,
    g.ExpOp: np.exp,
    g.LogOp: np.log,
    g.SqrtOp: np.sqrt,
    g.RsqrtOp: lambda x: 1.0 / np.sqrt(x),
    g.TanhOp: np.tanh,
    g.ReluOp: lambda x: np.where(x < 0, x.dtype.type(0), x),  # keeps -0.0 and NaN, as torch
    g.GeluOp: _gelu,
    g.SiluOp: lambda x: x * _sigmoid(x),
    g.SigmoidOp: _sigmoid,
    g.ErfOp: _erf,
    g.SinOp: np.sin,
    g.CosOp: np.cos,
}

_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": _UNARY[g.ReluOp],
    "gelu": _gelu,
    "silu": _UNARY[g.SiluOp],
}


def _matmul(op: Any, a: np.ndarray, b: np.ndarray, acc: np.dtype) -> np.ndarray:
    x = a.astype(acc)
    y = b.astype(acc)
    if op.transpose_lhs is not None:
        x = np.swapaxes(x, -1, -2)
    if op.transpose_rhs is not None:
        y = np.swapaxes(y, -1, -2)
    return np.matmul(x, y)


def _reduce_axes(op: g.ReductionOp) -> tuple[int, ...]:
    return tuple(op.axis_list())


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    if x.size == 0:
        return x.copy()
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def _attention_scale(op: g.FlashAttentionFwdOp | g.FlashAttentionBwdOp) -> float:
    d = g.shape_of(op.q)[-1]
    return op.scale.value.data if op.scale is not None else 1.0 / math.sqrt(d)


def _attention_scores(
    op: g.FlashAttentionFwdOp | g.FlashAttentionBwdOp, q: np.ndarray, k: np.ndarray
) -> np.ndarray:
    """``scale q kᵀ`` with the causal mask (-inf) of an attention gradient op, in float64."""
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * _attention_scale(op)
    if op.causal is not None:
        sq, sk = s.shape[-2], s.shape[-1]
        s = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, s)
    return s


def _by_operand(op: Operation, args: Sequence[Any]) -> dict[Any, Any]:
    """Operand SSA value -> its runtime value (optional operands shift positions)."""
    return dict(zip(op.operands, args))


def _group_size(op: Operation, axis: str, implied: int = 1) -> int:
    size = g._mesh_axis_size(op, axis)
    return implied if size is None else size


def _collective(op: Operation, args: Sequence[np.ndarray], group: int) -> Any:
    if COLLECTIVE_BACKEND is None:
        raise NotImplementedError(
            f"{op.name} over a group of {group} ranks needs the distributed executor "
            "(tessera.dist); the single-process reference runs groups of size 1 only"
        )
    return COLLECTIVE_BACKEND(op, list(args), group)


Semantics = Callable[[Interpreter, Any, tuple[Any, ...]], tuple[Any, ...]]
"""The numpy meaning of one op: ``(interpreter, op, operand values) -> result values``."""

SEMANTICS: OpRegistry[Semantics] = OpRegistry("reference semantics")
"""The numpy implementation of each ``tgraph`` op, by op class; :class:`GraphFunctions`
binds them as xDSL interpreter implementations."""


# ------------------------------------------------------------ elementwise


def _binary(op: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    a, b = args
    t = op.lhs.type
    fn = _BINARY[type(op)]
    x, y = load(a, t), load(b, t)
    if isinstance(op, g.DivOp) and compute_dtype(t).kind == "i":
        fn = _int_div
    if isinstance(op, g.PowOp) and compute_dtype(t).kind == "i" and np.any(y < 0):
        raise DataError(
            "tgraph.pow: integers to negative integer powers are not allowed "
            f"(exponent {int(np.min(y))})"
        )
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = fn(x, y)
    if isinstance(op, g.CompareOp):
        return (np.asarray(r, dtype=np.bool_),)
    if compute_dtype(t).kind == "i" and np_dtype_of(op.result.type).kind == "i":
        # integer arithmetic wraps around in two's complement, as the GPU's add.s32 and
        # mul.lo.s32 and torch do (a saturating store would clamp an int32 overflow)
        return (np.asarray(r).astype(np_dtype_of(op.result.type)),)
    return (store(r, op.result.type),)


@SEMANTICS.register(g.AddOp)
def run_add(interp: Interpreter, op: g.AddOp, args: tuple[Any, ...]):
    return _binary(op, args)


@SEMANTICS.register(g.SubOp)
def run_sub(interp: Interpreter, op: g.SubOp, args: tuple[Any, ...]):
    return _binary(op, args)


@SEMANTICS.register(g.MulOp)
def run_mul(interp: Interpreter, op: g.MulOp, args: tuple[Any, ...]):
    return _binary(op, args)


@SEMANTICS.register(g.DivOp)
def run_div(interp: Interpreter, op: g.DivOp, args: tuple[Any, ...]):
    return _binary(op, args)


@SEMANTICS.register(g.PowOp)
def run_pow(interp: Interpreter, op: g.PowOp, args: tuple[Any, ...]):
    return _binary(op, args)


@SEMANTICS.register(g.MaximumOp)
def run_maximum(interp: Interpreter, op: g.MaximumOp, args: tuple[Any, ...]):
    return _binary(op, args)


@SEMANTICS.register(g.MinimumOp)
def run_minimum(interp: Interpreter, op: g.MinimumOp, args: tuple[Any, ...]):
    return _binary(op, args)


@SEMANTICS.register(g.LtOp)
def run_lt(interp: Interpreter, op: g.LtOp, args: tuple[Any, ...]):
    return _binary(op, args)


@SEMANTICS.register(g.LeOp)
def run_le(interp: Interpreter, op: g.LeOp, args: tuple[Any, ...]):
    return _binary(op, args)


@SEMANTICS.register(g.GtOp)
def run_gt(interp: Interpreter, op: g.GtOp, args: tuple[Any, ...]):
    return _binary(op, args)


@SEMANTICS.register(g.GeOp)
def run_ge(interp: Interpreter, op: g.GeOp, args: tuple[Any, ...]):
    return _binary(op, args)


@SEMANTICS.register(g.EqOp)
def run_eq(interp: Interpreter, op: g.EqOp, args: tuple[Any, ...]):
    return _binary(op, args)


@SEMANTICS.register(g.NeOp)
def run_ne(interp: Interpreter, op: g.NeOp, args: tuple[Any, ...]):
    return _binary(op, args)


@SEMANTICS.register(g.SelectOp)
def run_select(interp: Interpreter, op: g.SelectOp, args: tuple[Any, ...]):
    c, a, b = args
    t = op.result.type
    return (store(np.where(c, load(a, t), load(b, t)), t),)


def _unary(op: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    (a,) = args
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = _UNARY[type(op)](load(a, op.input.type))
    return (store(r, op.result.type),)


@SEMANTICS.register(g.NegOp)
def run_neg(interp: Interpreter, op: g.NegOp, args: tuple[Any, ...]):
    return _unary(op, args)


@SEMANTICS.register(g.AbsOp)
def run_abs(interp: Interpreter, op: g.AbsOp, args: tuple[Any, ...]):
    return _unary(op, args)


@SEMANTICS.register(g.ExpOp)
def run_exp(interp: Interpreter, op: g.ExpOp, args: tuple[Any, ...]):
    return _unary(op, args)


@SEMANTICS.register(g.LogOp)
def run_log(interp: Interpreter, op: g.LogOp, args: tuple[Any, ...]):
    return _unary(op, args)


@SEMANTICS.register(g.SqrtOp)
def run_sqrt(interp: Interpreter, op: g.SqrtOp, args: tuple[Any, ...]):
    return _unary(op, args)


@SEMANTICS.register(g.RsqrtOp)
def run_rsqrt(interp: Interpreter, op: g.RsqrtOp, args: tuple[Any, ...]):
    return _unary(op, args)


@SEMANTICS.register(g.TanhOp)
def run_tanh(interp: Interpreter, op: g.TanhOp, args: tuple[Any, ...]):
    return _unary(op, args)


@SEMANTICS.register(g.ReluOp)
def run_relu(interp: Interpreter, op: g.ReluOp, args: tuple[Any, ...]):
    return _unary(op, args)


@SEMANTICS.register(g.GeluOp)
def run_gelu(interp: Interpreter, op: g.GeluOp, args: tuple[Any, ...]):
    return _unary(op, args)


@SEMANTICS.register(g.SiluOp)
def run_silu(interp: Interpreter, op: g.SiluOp, args: tuple[Any, ...]):
    return _unary(op, args)


@SEMANTICS.register(g.SigmoidOp)
def run_sigmoid(interp: Interpreter, op: g.SigmoidOp, args: tuple[Any, ...]):
    return _unary(op, args)


@SEMANTICS.register(g.ErfOp)
def run_erf(interp: Interpreter, op: g.ErfOp, args: tuple[Any, ...]):
    return _unary(op, args)


@SEMANTICS.register(g.SinOp)
def run_sin(interp: Interpreter, op: g.SinOp, args: tuple[Any, ...]):
    return _unary(op, args)


@SEMANTICS.register(g.CosOp)
def run_cos(interp: Interpreter, op: g.CosOp, args: tuple[Any, ...]):
    return _unary(op, args)


@SEMANTICS.register(g.CastOp)
def run_cast(interp: Interpreter, op: g.CastOp, args: tuple[Any, ...]):
    (a,) = args
    seed = op.seed.value.data if op.seed is not None else None
    src, dst = np_dtype_of(op.input.type), np_dtype_of(op.result.type)
    pol = _policy(op.result.type)
    if (
        dst.kind in "iu"
        and src.kind not in "biu"
        and not isinstance(op.input.type.element_type, ComplexType)
        and pol.loss_scale is None
        and pol.rounding != "stochastic"
    ):
        # float -> integer truncates toward zero (torch, numpy and arith.fptosi)
        with np.errstate(invalid="ignore"):
            a = np.trunc(load(a, op.input.type, np.dtype(np.float64)))
    return (store(a, op.result.type, with_scale=True, seed=seed),)


# ------------------------------------------------------------ reductions


def _reduce(op: Any, args: tuple[Any, ...], fn: Callable[..., Any], acc: bool) -> Any:
    (a,) = args
    t = op.input.type
    x = load(a, t, accum_dtype(t) if acc else None)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of nothing is NaN
        r = fn(x, axis=_reduce_axes(op), keepdims=op.keepdims is not None)
    return (store(r, op.result.type),)


@SEMANTICS.register(g.SumOp)
def run_sum(interp: Interpreter, op: g.SumOp, args: tuple[Any, ...]):
    return _reduce(op, args, np.sum, True)


@SEMANTICS.register(g.MeanOp)
def run_mean(interp: Interpreter, op: g.MeanOp, args: tuple[Any, ...]):
    return _reduce(op, args, np.mean, True)


@SEMANTICS.register(g.MaxOp)
def run_max(interp: Interpreter, op: g.MaxOp, args: tuple[Any, ...]):
    return _reduce(op, args, np.max, False)


@SEMANTICS.register(g.MinOp)
def run_min(interp: Interpreter, op: g.MinOp, args: tuple[Any, ...]):
    return _reduce(op, args, np.min, False)


@SEMANTICS.register(g.LogSumExpOp)
def run_logsumexp(interp: Interpreter, op: g.LogSumExpOp, args: tuple[Any, ...]):
    (a,) = args
    x = load(a, op.input.type, accum_dtype(op.input.type))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = _logsumexp(x, tuple(op.axis_list()), op.keepdims is not None)
    return (store(r, op.result.type),)


# ------------------------------------------------------------ nn ops


@SEMANTICS.register(g.SoftmaxOp)
def run_softmax(interp: Interpreter, op: g.SoftmaxOp, args: tuple[Any, ...]):
    (a,) = args
    r = _softmax(load(a, op.input.type), op.axis.value.data)
    return (store(r, op.result.type),)


@SEMANTICS.register(g.LayerNormOp, g.LayerNormFwdOp)
def run_layernorm(
    interp: Interpreter, op: g.LayerNormOp | g.LayerNormFwdOp, args: tuple[Any, ...]
):
    """``layernorm``; ``layernorm_fwd`` also returns the row mean and ``1 / std``."""
    t = op.input.type
    vals = _by_operand(op, args)
    x = load(vals[op.input], t)
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    std = np.sqrt(var + np.asarray(op.eps.value.data, x.dtype))
    y = (x - mu) / std
    if op.weight is not None:
        y = y * load(vals[op.weight], t)
    if op.bias is not None:
        y = y + load(vals[op.bias], t)
    if isinstance(op, g.LayerNormFwdOp):
        return (store(y, op.result.type), store(mu, op.mean.type), store(1 / std, op.rstd.type))
    return (store(y, op.result.type),)


@SEMANTICS.register(g.LayerNormBwdOp, g.RMSNormBwdOp)
def run_norm_bwd(
    interp: Interpreter, op: g.LayerNormBwdOp | g.RMSNormBwdOp, args: tuple[Any, ...]
):
    t = op.input.type
    vals = _by_operand(op, args)
    x, dy = load(vals[op.input], t), load(vals[op.dy], t)
    rstd = load(vals[op.rstd], op.rstd.type, x.dtype)
    centered = x - load(vals[op.mean], op.mean.type, x.dtype) if isinstance(
        op, g.LayerNormBwdOp) else x
    xhat = centered * rstd
    gy = dy * load(vals[op.weight], t) if op.weight is not None else dy
    inner = gy - xhat * np.mean(gy * xhat, axis=-1, keepdims=True)
    if isinstance(op, g.LayerNormBwdOp):
        inner = inner - np.mean(gy, axis=-1, keepdims=True)
    dx = store(rstd * inner, op.result.type)
    if op.residual is not None:  # dx rounded first, as a separate add
        dx = store(load(dx, t) + load(vals[op.residual], t), op.result.type)
    return (dx,)


@SEMANTICS.register(g.RMSNormOp, g.RMSNormFwdOp)
def run_rmsnorm(interp: Interpreter, op: g.RMSNormOp | g.RMSNormFwdOp, args: tuple[Any, ...]):
    """``rmsnorm``; ``rmsnorm_fwd`` also returns the row's ``1 / rms``."""
    t = op.input.type
    vals = _by_operand(op, args)
    x = load(vals[op.input], t)
    ms = np.mean(x * x, axis=-1, keepdims=True)
    rms = np.sqrt(ms + np.asarray(op.eps.value.data, x.dtype))
    y = x / rms
    if op.weight is not None:
        y = y * load(vals[op.weight], t)
    if isinstance(op, g.RMSNormFwdOp):
        return (store(y, op.result.type), store(1 / rms, op.rstd.type))
    return (store(y, op.result.type),)


@SEMANTICS.register(g.RowMomentsOp)
def run_row_moments(interp: Interpreter, op: g.RowMomentsOp, args: tuple[Any, ...]):
    """Each row's mean and ``sum((x - mean)^2)``, in f32 (the row's own mean first)."""
    x = load(args[0], op.input.type, np.dtype(np.float32))
    s = x.shape
    rows = x.reshape(*s[: len(s) - op.dims.value.data], -1)
    mean = np.mean(rows, axis=-1, dtype=np.float32)
    d = rows - mean[..., None]
    return (store(mean, op.mean.type), store(np.sum(d * d, axis=-1, dtype=np.float32), op.m2.type))


@SEMANTICS.register(g.MatmulOp)
def run_matmul(interp: Interpreter, op: g.MatmulOp, args: tuple[Any, ...]):
    a, b = args
    r = _matmul(op, a, b, accum_dtype(op.lhs.type))
    return (store(r, op.result.type),)


@SEMANTICS.register(g.MatmulEpilogueOp)
def run_matmul_epilogue(
    interp: Interpreter, op: g.MatmulEpilogueOp, args: tuple[Any, ...]
):
    vals = _by_operand(op, args)
    pt = op.product_type
    r = store(_matmul(op, vals[op.lhs], vals[op.rhs], accum_dtype(op.lhs.type)), pt)
    if op.bias is not None:
        r = store(load(r, pt) + load(vals[op.bias], pt), pt)
    if op.activation is not None:
        r = store(_ACTIVATIONS[op.activation.data](load(r, pt)), pt)
    if op.residual is not None:
        r = store(load(r, pt) + load(vals[op.residual], pt), pt)
    if op.compute_type is not None:
        r = store(r, op.result.type, with_scale=True)
    return (r,)


@SEMANTICS.register(g.FlashAttentionOp)
def run_flash_attention(
    interp: Interpreter, op: g.FlashAttentionOp, args: tuple[Any, ...]
):
    t = op.q.type
    acc = accum_dtype(t)
    q, k, v = (load(x, t, acc) for x in args)
    d = q.shape[-1]
    scale = op.scale.value.data if op.scale is not None else 1.0 / math.sqrt(d)
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * np.asarray(scale, acc)
    if op.causal is not None:
        sq, sk = s.shape[-2], s.shape[-1]
        mask = np.arange(sk)[None, :] > np.arange(sq)[:, None]
        s = np.where(mask, -np.inf, s)
    p = _softmax(s, -1)
    return (store(np.matmul(p, v), op.result.type),)


@SEMANTICS.register(g.FlashAttentionFwdOp)
def run_flash_attention_fwd(
    interp: Interpreter, op: g.FlashAttentionFwdOp, args: tuple[Any, ...]
):
    q, k, v = (load(x, op.q.type, np.dtype(np.float64)) for x in args)
    s = _attention_scores(op, q, k)
    m = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - m)
    total = np.sum(e, axis=-1, keepdims=True)
    lse = (m + np.log(total))[..., 0]
    return store(np.matmul(e / total, v), op.result.type), store(lse, op.lse.type)


@SEMANTICS.register(g.FlashAttentionBwdOp)
def run_flash_attention_bwd(
    interp: Interpreter, op: g.FlashAttentionBwdOp, args: tuple[Any, ...]
):
    q, k, v, o, do = (load(x, op.q.type, np.dtype(np.float64)) for x in args[:5])
    lse = load(args[5], op.lse.type, np.dtype(np.float64))
    scale = _attention_scale(op)
    p = np.exp(_attention_scores(op, q, k) - lse[..., None])
    dv = np.matmul(np.swapaxes(p, -1, -2), do)
    di = np.sum(do * o, axis=-1, keepdims=True)
    ds = p * (np.matmul(do, np.swapaxes(v, -1, -2)) - di) * scale
    dq = np.matmul(ds, k)
    dk = np.matmul(np.swapaxes(ds, -1, -2), q)
    return store(dq, op.dq.type), store(dk, op.dk.type), store(dv, op.dv.type)


@SEMANTICS.register(g.Conv2dOp)
def run_conv2d(interp: Interpreter, op: g.Conv2dOp, args: tuple[Any, ...]):
    t = op.input.type
    acc = accum_dtype(t)
    vals = _by_operand(op, args)
    x, w = load(vals[op.input], t, acc), load(vals[op.weight], t, acc)
    sh, sw = op.stride.get_values()
    ph, pw = op.padding.get_values()
    dh, dw = op.dilation_values
    x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    kh, kw = w.shape[2], w.shape[3]
    win = np.lib.stride_tricks.sliding_window_view(
        x, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw]
    gr = op.groups_value
    nb, c, ho, wo = win.shape[:4]
    o = w.shape[0]
    # output channel o of group o // (O/groups) reads that group's C/groups input channels
    win = win.reshape(nb, gr, c // gr, ho, wo, kh, kw)
    y = np.einsum("ngchwij,gocij->ngohw", win, w.reshape(gr, o // gr, c // gr, kh, kw))
    y = y.reshape(nb, o, ho, wo)
    if op.bias is not None:
        y = y + load(vals[op.bias], t, acc)[None, :, None, None]
    return (store(y, op.result.type),)


@SEMANTICS.register(g.MSEOp)
def run_mse(interp: Interpreter, op: g.MSEOp, args: tuple[Any, ...]):
    t = op.pred.type
    acc = accum_dtype(t)
    d = load(args[0], t, acc) - load(args[1], t, acc)
    return (store(np.mean(d * d), op.result.type),)


# ------------------------------------------------------------ optimizer updates


def _hyper(op: g.AdamWUpdateOp | g.SGDUpdateOp, h: np.ndarray, dt: np.dtype) -> list[Any]:
    """The entries of ``hyper`` (of the compute dtype) as scalars."""
    return [dt.type(x) for x in np.asarray(h).reshape(-1)]


@SEMANTICS.register(g.AdamWUpdateOp)
def run_adamw_update(interp: Interpreter, op: g.AdamWUpdateOp, args: tuple[Any, ...]):
    """Per tensor, in the order the kernels compute (f32 math for f32/bf16/f16 tensors)."""
    n = len(op.params)
    t = op.params[0].type
    dt = compute_dtype(t)
    decay, step_size, bc2 = _hyper(op, args[-1], dt)
    b1, b2 = dt.type(op.beta1.value.data), dt.type(op.beta2.value.data)
    c1, c2 = dt.type(1.0 - op.beta1.value.data), dt.type(1.0 - op.beta2.value.data)
    eps = dt.type(op.eps.value.data)
    ps, ms, vs = [], [], []
    for k in range(n):
        ty = op.params[k].type
        p = load(args[k], ty) * decay
        gr = load(args[n + k], ty)
        m = b1 * load(args[2 * n + k], ty) + c1 * gr
        v = b2 * load(args[3 * n + k], ty) + c2 * (gr * gr)
        p = p - step_size * m / (np.sqrt(v) / bc2 + eps)
        ps.append(store(p, ty))
        ms.append(store(m, ty))
        vs.append(store(v, ty))
    return (*ps, *ms, *vs)


@SEMANTICS.register(g.SGDUpdateOp)
def run_sgd_update(interp: Interpreter, op: g.SGDUpdateOp, args: tuple[Any, ...]):
    """Per tensor, in the order the kernels compute (f32 math for f32/bf16/f16 tensors)."""
    n = len(op.params)
    t = op.params[0].type
    dt = compute_dtype(t)
    lr, buf_scale, grad_scale = _hyper(op, args[-1], dt)
    wd = op.weight_decay.value.data
    mom = dt.type(op.momentum.value.data)
    ps, bufs = [], []
    for k in range(n):
        ty = op.params[k].type
        p = load(args[k], ty)
        d = load(args[n + k], ty)
        if wd != 0.0:
            d = d + dt.type(wd) * p
        if op.momentum_buffers:
            buf = buf_scale * load(args[2 * n + k], ty) + grad_scale * d
            bufs.append(store(buf, ty))
            d = d + mom * buf if op.nesterov is not None else buf
        ps.append(store(p - lr * d, ty))
    return (*ps, *bufs)


# ------------------------------------------------------------ shape ops


@SEMANTICS.register(g.TransposeOp)
def run_transpose(interp: Interpreter, op: g.TransposeOp, args: tuple[Any, ...]):
    perm = tuple(op.permutation.get_values())
    return (np.ascontiguousarray(np.transpose(args[0], perm)),)


@SEMANTICS.register(g.ReshapeOp)
def run_reshape(interp: Interpreter, op: g.ReshapeOp, args: tuple[Any, ...]):
    return (np.reshape(args[0], tuple(op.result.type.get_shape())).copy(),)


@SEMANTICS.register(g.BroadcastOp)
def run_broadcast(interp: Interpreter, op: g.BroadcastOp, args: tuple[Any, ...]):
    return (np.broadcast_to(args[0], tuple(op.result.type.get_shape())).copy(),)


@SEMANTICS.register(g.TakeAlongAxisOp)
def run_take_along_axis(interp: Interpreter, op: g.TakeAlongAxisOp, args: tuple[Any, ...]):
    """``input`` gathered along ``axis`` at ``indices``; an index outside the axis gives NaN
    (the GPU kernel's rule, see :class:`~tessera.ir.graph.TakeAlongAxisOp`)."""
    x, ix = np.asarray(args[0]), np.asarray(args[1]).astype(np.int64)
    ax = op.axis_index()
    n = x.shape[ax]
    # torch's rule: off the axis, the indices' sizes may be smaller (the first entries)
    x = x[tuple(slice(None) if d == ax else slice(0, k) for d, k in enumerate(ix.shape))]
    ok = (ix >= 0) & (ix < n)
    y = load(np.take_along_axis(x, np.where(ok, ix, 0), axis=ax), op.input.type)
    return (store(np.where(ok, y, np.nan), op.result.type),)


@SEMANTICS.register(g.SliceOp)
def run_slice(interp: Interpreter, op: g.SliceOp, args: tuple[Any, ...]):
    idx = tuple(
        slice(a, b, c)
        for a, b, c in zip(
            op.start.get_values(), op.limit.get_values(), op.stride.get_values()
        )
    )
    return (np.ascontiguousarray(args[0][idx]),)


@SEMANTICS.register(g.ReverseOp)
def run_reverse(interp: Interpreter, op: g.ReverseOp, args: tuple[Any, ...]):
    return (np.ascontiguousarray(np.flip(args[0], op.dim_values())),)


@SEMANTICS.register(g.ConcatOp)
def run_concat(interp: Interpreter, op: g.ConcatOp, args: tuple[Any, ...]):
    return (np.concatenate(args, axis=op.axis.value.data),)


@SEMANTICS.register(g.ConstantOp)
def run_constant(interp: Interpreter, op: g.ConstantOp, args: tuple[Any, ...]):
    attr = op.value
    vals = np.asarray(attr.get_values())
    vals = vals.reshape(tuple(attr.get_shape()))
    shape = tuple(op.result.type.get_shape())
    if vals.shape != shape:
        vals = np.broadcast_to(vals.reshape(()) if vals.size == 1 else vals, shape)
    return (store(vals, op.result.type),)


# ------------------------------------------------------------ scientific ops


def _fft(op: Any, args: tuple[Any, ...], two_d: bool) -> tuple[Any, ...]:
    (a,) = args
    x = np.asarray(a)
    if x.dtype.kind != "c":
        x = x.astype(np.float64)
    inv = op.inverse is not None
    if two_d:
        r = np.fft.ifft2(x) if inv else np.fft.fft2(x)
    else:
        r = np.fft.ifft(x) if inv else np.fft.fft(x)
    return (store(r, op.result.type),)


@SEMANTICS.register(g.FFTOp)
def run_fft(interp: Interpreter, op: g.FFTOp, args: tuple[Any, ...]):
    return _fft(op, args, False)


@SEMANTICS.register(g.FFT2dOp)
def run_fft2d(interp: Interpreter, op: g.FFT2dOp, args: tuple[Any, ...]):
    return _fft(op, args, True)


def _cholesky_columns(a: np.ndarray) -> np.ndarray:
    """The lower factor of one matrix column by column, as the GPU kernels compute it
    where LAPACK stops: a pivot that is not positive (or NaN) makes its column and every
    later one NaN (the lower triangle; the upper is 0)."""
    n = a.shape[-1]
    w = np.tril(a).copy()
    for k in range(n):
        d = w[k, k]
        piv = np.sqrt(d) if d > 0 else np.nan
        w[k, k] = piv
        w[k + 1:, k] /= piv
        col = w[k + 1:, k]
        w[k + 1:, k + 1:] -= np.tril(np.outer(col, col))
    return w


@SEMANTICS.register(g.CholeskyOp)
def run_cholesky(interp: Interpreter, op: g.CholeskyOp, args: tuple[Any, ...]):
    t = op.input.type
    a = load(args[0], t)
    try:
        r = np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        # some matrix is not positive definite: NaN from its failing pivot on, as on
        # the GPU (callers read the first NaN pivot: torch's ``info``)
        flat = a.reshape(-1, *a.shape[-2:])
        out = np.empty_like(flat)
        for i, m in enumerate(flat):
            try:
                out[i] = np.linalg.cholesky(m)
            except np.linalg.LinAlgError:
                out[i] = _cholesky_columns(m)
        r = out.reshape(a.shape)
    return (store(r, op.result.type),)


@SEMANTICS.register(g.SVDOp)
def run_svd(interp: Interpreter, op: g.SVDOp, args: tuple[Any, ...]):
    u, s, vh = np.linalg.svd(load(args[0], op.input.type), full_matrices=False)
    return (store(u, op.u.type), store(s, op.s.type), store(vh, op.vh.type))


@SEMANTICS.register(g.SpMMOp)
def run_spmm(interp: Interpreter, op: g.SpMMOp, args: tuple[Any, ...]):
    indptr, indices, values, dense = args
    t = op.dense.type
    acc = accum_dtype(t)
    v, d = load(values, t, acc), load(dense, t, acc)
    m, _ = op.sparse_shape.get_values()
    rows, ix = _csr_pattern(op, indptr, indices)
    out = np.zeros((m, d.shape[1]), dtype=acc)
    np.add.at(out, rows, v[:, None] * d[ix])
    return (store(out, op.result.type),)


# ------------------------------------------------------------ derivative support ops


@SEMANTICS.register(g.RealOp)
def run_real(interp: Interpreter, op: g.RealOp, args: tuple[Any, ...]):
    return (store(np.real(np.asarray(args[0])), op.result.type),)


@SEMANTICS.register(g.ImagOp)
def run_imag(interp: Interpreter, op: g.ImagOp, args: tuple[Any, ...]):
    return (store(np.imag(np.asarray(args[0])), op.result.type),)


@SEMANTICS.register(g.ComplexOp)
def run_complex(interp: Interpreter, op: g.ComplexOp, args: tuple[Any, ...]):
    t = op.real.type
    re, im = load(args[0], t), load(args[1], t)
    return (store(re + 1j * im, op.result.type),)


@SEMANTICS.register(g.TriangularSolveOp)
def run_triangular_solve(
    interp: Interpreter, op: g.TriangularSolveOp, args: tuple[Any, ...]
):
    t = op.a.type
    acc = accum_dtype(t)
    a, b = load(args[0], t, acc), load(args[1], t, acc)
    a = np.triu(a) if op.upper is not None else np.tril(a)
    if op.transpose_a is not None:
        a = np.swapaxes(a, -1, -2)
    diag = np.diagonal(a, axis1=-2, axis2=-1)
    if np.any(diag == 0):
        raise DataError("tgraph.triangular_solve: the triangular matrix is singular")
    return (store(np.linalg.solve(a, b), op.result.type),)


@staticmethod
def _csr_pattern(op: Any, indptr: Any, indices: Any) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of every stored entry of a CSR pattern, checked."""
    m, k = op.sparse_shape.get_values()
    ip = np.asarray(indptr, dtype=np.int64)
    ix = np.asarray(indices, dtype=np.int64)
    if (
        ip.size != m + 1
        or ip[0] != 0
        or np.any(np.diff(ip) < 0)
        or ip[-1] != ix.size
        or np.any(ix < 0)
        or np.any(ix >= k)
    ):
        raise DataError(
            f"{op.name}: malformed CSR operands: indptr must have {m + 1} nondecreasing "
            f"entries from 0 to the number of indices, indices lie in [0, {k})"
        )
    return np.repeat(np.arange(m), np.diff(ip)), ix


@SEMANTICS.register(g.SpMMTransposeOp)
def run_spmm_transpose(
    interp: Interpreter, op: g.SpMMTransposeOp, args: tuple[Any, ...]
):
    indptr, indices, values, dense = args
    t = op.dense.type
    acc = accum_dtype(t)
    v, d = load(values, t, acc), load(dense, t, acc)
    rows, cols = _csr_pattern(op, indptr, indices)
    out = np.zeros(tuple(op.result.type.get_shape()), dtype=acc)
    np.add.at(out, cols, v[:, None] * d[rows])
    return (store(out, op.result.type),)


@SEMANTICS.register(g.SDDMMOp)
def run_sddmm(interp: Interpreter, op: g.SDDMMOp, args: tuple[Any, ...]):
    indptr, indices, lhs, rhs = args
    t = op.lhs.type
    acc = accum_dtype(t)
    a, b = load(lhs, t, acc), load(rhs, t, acc)
    rows, cols = _csr_pattern(op, indptr, indices)
    return (store(np.sum(a[rows] * b[cols], axis=1), op.result.type),)


# ------------------------------------------------------------ random


@staticmethod
def _stream(op: Any) -> tuple[int, int]:
    """``(seed, offset)`` of a random op (offset 0 when absent)."""
    return op.seed.value.data, op.offset.value.data if op.offset is not None else 0


@SEMANTICS.register(g.RandnOp)
def run_randn(interp: Interpreter, op: g.RandnOp, args: tuple[Any, ...]):
    # Counter-based Box-Muller on Philox (tessera/numerics/random.py): the GPU
    # kernel of lower-graph-to-tile computes the same float64 samples bit for bit.
    r = randn_array(tuple(op.result.type.get_shape()), *_stream(op))
    return (store(r, op.result.type),)


@SEMANTICS.register(g.PoissonOp)
def run_poisson(interp: Interpreter, op: g.PoissonOp, args: tuple[Any, ...]):
    lam = np.asarray(args[0]).astype(np.float64)
    return (store(poisson_array(lam, *_stream(op)), op.result.type),)


# ------------------------------------------------------------ collectives


@SEMANTICS.register(g.AllReduceOp)
def run_all_reduce(interp: Interpreter, op: g.AllReduceOp, args: tuple[Any, ...]):
    n = _group_size(op, op.axis.data)
    return (args[0].copy(),) if n == 1 else (_collective(op, args, n),)


@SEMANTICS.register(g.AllGatherOp)
def run_all_gather(interp: Interpreter, op: g.AllGatherOp, args: tuple[Any, ...]):
    d = op.dim.value.data % len(args[0].shape)
    implied = op.result.type.get_shape()[d] // max(args[0].shape[d], 1)
    n = _group_size(op, op.axis.data, implied)
    return (args[0].copy(),) if n == 1 else (_collective(op, args, n),)


@SEMANTICS.register(g.ReduceScatterOp)
def run_reduce_scatter(
    interp: Interpreter, op: g.ReduceScatterOp, args: tuple[Any, ...]
):
    d = op.dim.value.data % len(args[0].shape)
    implied = args[0].shape[d] // max(op.result.type.get_shape()[d], 1)
    n = _group_size(op, op.axis.data, implied)
    return (args[0].copy(),) if n == 1 else (_collective(op, args, n),)


@SEMANTICS.register(g.AllToAllOp)
def run_all_to_all(interp: Interpreter, op: g.AllToAllOp, args: tuple[Any, ...]):
    n = _group_size(op, op.axis.data)
    return (args[0].copy(),) if n == 1 else (_collective(op, args, n),)


@SEMANTICS.register(g.AllSliceOp)
def run_all_slice(interp: Interpreter, op: g.AllSliceOp, args: tuple[Any, ...]):
    d = op.dim.value.data % len(args[0].shape)
    implied = args[0].shape[d] // max(op.result.type.get_shape()[d], 1)
    n = _group_size(op, op.axis.data, implied)
    return (args[0].copy(),) if n == 1 else (_collective(op, args, n),)


@SEMANTICS.register(g.SendOp)
def run_send(interp: Interpreter, op: g.SendOp, args: tuple[Any, ...]):
    _collective(op, args, _group_size(op, op.axis.data))
    return ()


@SEMANTICS.register(g.RecvOp)
def run_recv(interp: Interpreter, op: g.RecvOp, args: tuple[Any, ...]):
    return (_collective(op, args, _group_size(op, op.axis.data)),)


# ------------------------------------------------------------ fusion


@SEMANTICS.register(g.FusedOp)
def run_fused(interp: Interpreter, op: g.FusedOp, args: tuple[Any, ...]):
    return interp.run_ssacfg_region(op.body, args, "tgraph.fused")


@SEMANTICS.register(g.FusedReductionsOp)
def run_fused_reductions(interp: Interpreter, op: g.FusedReductionsOp, args: tuple[Any, ...]):
    return interp.run_ssacfg_region(op.body, args, "tgraph.fused_reductions")


def _bound(semantics: Semantics) -> Callable[..., tuple[Any, ...]]:
    def run(
        self: InterpreterFunctions, interp: Interpreter, op: Operation, args: tuple[Any, ...]
    ) -> tuple[Any, ...]:
        return semantics(interp, op, args)

    return run


class GraphFunctions(InterpreterFunctions):
    """Numpy implementations of every ``tgraph`` op: the entry of :data:`SEMANTICS` of each
    op of the dialect (bound below), and the terminator of a fused body."""

    @impl_terminator(g.YieldOp)
    def run_yield(self, interp: Interpreter, op: g.YieldOp, args: tuple[Any, ...]):
        return ReturnedValues(args), ()


for _op in (*g.GRAPH_OPS, *g.DERIVATIVE_SUPPORT_OPS):
    _semantics = SEMANTICS.get(_op)
    if _semantics is not None:
        setattr(GraphFunctions, f"run_{_op.name.split('.')[1]}", impl(_op)(_bound(_semantics)))


register_impls(GraphFunctions)


LISTENER_FACTORY: Callable[[ModuleOp], Interpreter.Listener] | None = None
"""Set by ``ts.profiler`` while a session is active: makes a listener that each new
interpreter reports its ops to (``will_interpret_op`` / ``did_interpret_op``)."""


def make_interpreter(module: ModuleOp) -> Interpreter:
    """An interpreter for ``module`` with the func and tgraph implementations."""
    listeners = () if LISTENER_FACTORY is None else (LISTENER_FACTORY(module),)
    interp = Interpreter(module, listeners=listeners)
    interp.register_implementations(FuncFunctions())
    interp.register_implementations(GraphFunctions())
    return interp


def _find_func(module: ModuleOp, name: str) -> func.FuncOp:
    for op in module.walk():
        if isinstance(op, func.FuncOp) and op.sym_name.data == name:
            return op
    names = [op.sym_name.data for op in module.walk() if isinstance(op, func.FuncOp)]
    raise KeyError(f"no function '{name}' in the module (functions: {', '.join(names)})")


def check_arguments(fn: func.FuncOp, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Check ``args`` against ``fn``'s parameter types; return them as numpy arrays."""
    types = fn.function_type.inputs.data
    name = fn.sym_name.data
    if len(args) != len(types):
        raise TesseraTypeError(f"{name}: takes {len(types)} arguments, got {len(args)}")
    out = []
    for i, (a, t) in enumerate(zip(args, types)):
        arr = np.asarray(a)
        assert isinstance(t, TensorType)
        want = tuple(t.get_shape())
        if arr.shape != want:
            raise ShapeError(f"{name}: argument {i} has shape {list(arr.shape)}, expected {list(want)}")
        if arr.dtype != np_dtype_of(t):
            raise TesseraTypeError(
                f"{name}: argument {i} has dtype {arr.dtype}, expected {np_dtype_of(t)} ({t})"
            )
        out.append(arr)
    return out


def run_function(module: ModuleOp, name: str, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run Graph IR function ``name`` of ``module`` on numpy ``args``; return its results."""
    fn = _find_func(module, name)
    arrays = check_arguments(fn, args)
    try:
        with np.errstate(all="ignore"):  # inf and NaN follow IEEE; no warnings
            results = make_interpreter(module).call_op(name, tuple(arrays))
    except RUNTIME_ERRORS as e:
        raise data_error(e, name) from None
    return [np.asarray(r) for r in results]
