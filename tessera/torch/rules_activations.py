"""ATen rules: activations and clamps that vision models use beyond the core set
(``leaky_relu`` and its backward, ``clamp`` with tensor bounds, ``sign``, ``isnan``) and vector
norms.

The rules register themselves in :data:`tessera.torch.aten_ops.RULES` when this module
is imported (``aten_ops`` imports it).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from tessera.frontend import ops
from tessera.torch.aten_ops import (
    FLOAT_DTYPES,
    TracedTensor,
    float_only,
    norm_dims,
    opmath_dtype,
    out_dtype,
    rule,
    to,
    torch_dtype,
)
from tessera.torch.rules_elementwise import clamp_between

aten = torch.ops.aten


@rule(aten.leaky_relu.default, check=float_only)
def _leaky_relu(node: torch.fx.Node, a: Any, slope: Any = 0.01) -> TracedTensor:
    """``x`` where ``x > 0``, else ``slope x``."""
    dt = out_dtype(node)
    x = to(a, dt)
    return ops.where(ops.gt(x, to(0.0, dt)), x, ops.mul(x, to(float(slope), dt)))


@rule(aten.leaky_relu_backward.default, check=float_only)
def _leaky_relu_backward(
    node: torch.fx.Node, grad: Any, a: Any, slope: Any, self_is_result: bool
) -> TracedTensor:
    dt = out_dtype(node)
    g = to(grad, dt)
    return ops.where(ops.gt(to(a, dt), to(0.0, dt)), g, ops.mul(g, to(float(slope), dt)))


@rule(aten.clamp.Tensor, check=float_only)
def _clamp_tensor(node: torch.fx.Node, a: Any, lo: Any = None, hi: Any = None) -> TracedTensor:
    """``min(max(x, lo), hi)`` with tensor bounds (``hi`` where ``lo > hi``, as torch)."""
    dt = out_dtype(node)
    return clamp_between(to(a, dt), lo, hi, dt)


def _float_or_int(node: torch.fx.Node) -> str | None:
    dt = out_dtype(node)
    return None if dt in (*FLOAT_DTYPES, torch.int64, torch.int32) else f"{dt} result"


@rule(aten.sign.default, check=_float_or_int)
def _sign(node: torch.fx.Node, a: Any) -> TracedTensor:
    """1, -1 or 0 by the sign of ``x`` (0 for ±0 and for NaN, as torch's CPU kernel), of
    floats and integers (DeBERTa's relative positions)."""
    dt = out_dtype(node)
    x = to(a, dt)
    one, zero = to(1.0, dt), to(0.0, dt)
    return ops.where(ops.gt(x, zero), one, ops.where(ops.lt(x, zero), to(-1.0, dt), zero))


@rule(aten.isnan.default)
def _isnan(node: torch.fx.Node, a: Any) -> TracedTensor:
    """``x != x``: true exactly for NaN (false for every integer)."""
    return ops.ne(a, a)


def _norm_check(node: torch.fx.Node) -> str | None:
    order = node.args[1] if len(node.args) > 1 else node.kwargs.get("ord", 2)
    if order not in (1, 2, 1.0, 2.0, float("inf")):
        return f"ord={order}"
    return float_only(node)


@rule(aten.linalg_vector_norm.default, check=_norm_check)
def _vector_norm(
    node: torch.fx.Node, a: Any, order: Any = 2, dim: Any = None, keepdim: bool = False, *,
    dtype: Any = None,
) -> TracedTensor:
    """The 2-norm ``sqrt(sum(x²))`` (in f32 for 16-bit inputs), the 1-norm ``sum(|x|)``
    or the max-norm ``max(|x|)`` over ``dim``."""
    dt = out_dtype(node)
    wide = opmath_dtype(dt)
    x = to(a, wide)
    if x.ndim == 0:
        return to(ops.abs(x), dt)
    axes = tuple(norm_dims(dim, x.ndim))
    if order == float("inf"):
        return to(ops.max(ops.abs(x), axis=axes, keepdims=bool(keepdim)), dt)
    if order in (1, 1.0):
        return to(ops.sum(ops.abs(x), axis=axes, keepdims=bool(keepdim)), dt)
    return to(ops.sqrt(ops.sum(ops.mul(x, x), axis=axes, keepdims=bool(keepdim))), dt)


__all__: list[str] = []


def _integral(x: TracedTensor, mode: str) -> TracedTensor:
    """``floor``, ``ceil`` or ``trunc`` of a float tensor: the value truncated through
    int64 (exact below 2^52 in magnitude; beyond, every float is already an integer, and
    NaN and infinities stay), moved down (floor) or up (ceil) by one where truncation
    went the other way; a zero result keeps the input's sign, as torch's (``ceil(-0.5)``
    is ``-0.0``)."""
    dt = torch_dtype(x)
    w = opmath_dtype(dt)
    xw = to(x, w)
    t = to(to(xw, torch.int64), w)
    if mode == "floor":
        t = ops.where(ops.gt(t, xw), ops.sub(t, to(1.0, w)), t)
    elif mode == "ceil":
        t = ops.where(ops.lt(t, xw), ops.add(t, to(1.0, w)), t)
    t = ops.where(ops.eq(t, to(0.0, w)), ops.mul(xw, to(0.0, w)), t)
    small = ops.lt(ops.abs(xw), to(2.0**52, w))
    return to(ops.where(small, t, xw), dt)


def _rounding(mode: str) -> Any:
    def emit(node: torch.fx.Node, a: Any) -> TracedTensor:
        return a if torch_dtype(a) not in FLOAT_DTYPES else _integral(a, mode)

    emit.__doc__ = f"``torch.{mode}`` (integers unchanged): see :func:`_integral`."
    return emit


rule(aten.floor.default, check=_float_or_int)(_rounding("floor"))
rule(aten.ceil.default, check=_float_or_int)(_rounding("ceil"))
rule(aten.trunc.default, check=_float_or_int)(_rounding("trunc"))


def _float_result(node: torch.fx.Node) -> str | None:
    dt = out_dtype(node)
    return None if dt in FLOAT_DTYPES else f"{dt} result"


@rule(aten.log1p.default, check=_float_result)
def _log1p(node: torch.fx.Node, a: Any) -> TracedTensor:
    """``log(1 + x)`` without losing a small ``x`` (softplus: Mamba, RecurrentGemma), in
    float32 (16-bit inputs too) by Goldberg's formula: with ``u = 1 + x`` rounded,
    ``log(u) * (x / (u - 1))`` (``x`` where ``u`` is 1): the rounding of ``u`` cancels in
    the ratio, so the error is a few ulps of ``log``'s own (Goldberg, *What every
    computer scientist should know about floating-point arithmetic*, theorem 4);
    ``+inf`` stays. Float64 in float64 (its ``log`` within an ulp on the GPU too)."""
    dt = out_dtype(node)
    w = opmath_dtype(dt)
    x = to(a, w)
    one = to(1.0, w)
    u = ops.add(one, x)
    r = ops.mul(ops.log(u), ops.div(x, ops.sub(u, one)))  # the ratio near 1: no overflow
    r = ops.where(ops.eq(u, one), x, r)
    return to(ops.where(ops.eq(x, to(float("inf"), w)), x, r), dt)


@rule(aten.expm1.default, check=_float_result)
def _expm1(node: torch.fx.Node, a: Any) -> TracedTensor:
    """``exp(x) - 1`` without losing a small result (xIELU's activation), in float32
    (16-bit inputs too) by Kahan's formula: with ``u = exp(x)`` rounded, ``(u - 1) * (x /
    log(u))`` (``x`` where ``u`` is 1, -1 where ``u - 1`` is, ``u`` where it overflowed).
    Float64 in float64."""
    dt = out_dtype(node)
    w = opmath_dtype(dt)
    x = to(a, w)
    one = to(1.0, w)
    u = ops.exp(x)
    um1 = ops.sub(u, one)
    r = ops.mul(um1, ops.div(x, ops.log(u)))  # the ratio near 1: no overflow
    r = ops.where(ops.eq(um1, to(-1.0, w)), um1, r)
    r = ops.where(ops.eq(u, one), x, r)
    return to(ops.where(ops.eq(u, to(float("inf"), w)), u, r), dt)
