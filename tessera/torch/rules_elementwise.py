"""ATen rules: elementwise ops and reductions.

The rules register themselves in :data:`tessera.torch.aten_ops.RULES` when this
module is imported (``aten_ops`` imports it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from xdsl.dialects.builtin import UnitAttr

from tessera.frontend import ops
from tessera.ir import graph as g
from tessera.passes.fused_f32_intermediates import ROUNDS_ATTR
from tessera.torch.aten_ops import (
    Emit,
    TracedTensor,
    float_only,
    norm_dims,
    opmath_dtype,
    out_dtype,
    promote,
    rule,
    to,
    torch_dtype,
    val,
)

aten = torch.ops.aten
prims = torch.ops.prims


# --------------------------------------------------------------------------- elementwise


def _mul_div_dtype(dt: torch.dtype, *operands: Any) -> torch.dtype:
    """The dtype ``mul`` or ``div`` of 16-bit result ``dt`` computes in. torch computes
    one in f32 with a Python-number operand taken as f32, and rounds once; so does the
    translation (rounding the number to ``dt`` first differs: ``3.7`` is ``3.703`` in
    bfloat16). An operand that is a tensor of another dtype (a 0-d f32 tensor, which does
    not promote) is read in f32 alike. Two tensors of ``dt`` compute in ``dt``: each op
    rounds once either way. (torch's CPU ``add`` and ``sub`` round their number, and
    ``alpha``, to ``dt`` first: those keep ``dt``.)"""
    if dt not in (torch.float16, torch.bfloat16):
        return dt
    exact = all(isinstance(v, TracedTensor) and torch_dtype(v) == dt for v in operands)
    return dt if exact else opmath_dtype(dt)


def _binary(fn: Callable[[Any, Any], TracedTensor], opmath_numbers: bool = False) -> Emit:
    def emit(node: torch.fx.Node, a: Any, b: Any, *, alpha: Any = 1) -> TracedTensor:
        dt = out_dtype(node)
        if opmath_numbers:
            ct = _mul_div_dtype(dt, a, b)
            return to(fn(to(a, ct), to(b, ct)), dt)
        x, y = to(a, dt), to(b, dt)
        if alpha == 1:
            return fn(x, y)
        # ``a + alpha * b`` rounded once (in f32 for 16-bit dtypes; in f64 for f32, where
        # the product of two f32 numbers is exact, as torch's fused multiply-add), with
        # ``alpha`` rounded to ``dt`` as torch's CPU kernels take it
        ct = torch.float64 if dt == torch.float32 else opmath_dtype(dt)
        return to(fn(to(x, ct), ops.mul(to(y, ct), to(to(alpha, dt), ct))), dt)

    return emit


rule(aten.add.Tensor, aten.add.Scalar)(_binary(ops.add))
rule(aten.sub.Tensor, aten.sub.Scalar)(_binary(ops.sub))
rule(aten.mul.Tensor, aten.mul.Scalar)(_binary(ops.mul, opmath_numbers=True))
rule(aten.maximum.default)(_binary(ops.maximum))
rule(aten.minimum.default)(_binary(ops.minimum))


@rule(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(node: torch.fx.Node, a: Any, b: Any, *, alpha: Any = 1) -> TracedTensor:
    """``b - alpha * a``, rounded as ``sub`` with ``alpha``."""
    return _binary(ops.sub)(node, b, a, alpha=alpha)


def _div_check(node: torch.fx.Node) -> str | None:
    mode = node.kwargs.get("rounding_mode", node.args[2] if len(node.args) > 2 else None)
    return None if mode is None else f"rounding_mode={mode!r}"


@rule(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.true_divide.Tensor, check=_div_check)
def _div(node: torch.fx.Node, a: Any, b: Any, rounding_mode: Any = None) -> TracedTensor:
    dt = out_dtype(node)
    ct = _mul_div_dtype(dt, a, b)
    return to(ops.div(to(a, ct), to(b, ct)), dt)


@rule(aten.addcdiv.default, check=float_only)
def _addcdiv(node: torch.fx.Node, x: Any, a: Any, b: Any, *, value: Any = 1) -> TracedTensor:
    """``x + value * a / b`` as torch's kernels compute it: ``(value * a) / b`` in f32 for
    16-bit and f32 tensors, rounded once (torch's decomposition rounds a 16-bit result
    three times). Dynamo itself splits ``torch.addcdiv(..., value=v)`` into three ops;
    the op comes whole from other callers (optimizers, ``Tensor.addcdiv_``)."""
    dt = out_dtype(node)
    ct = torch.float64 if dt == torch.float64 else torch.float32
    q = ops.div(ops.mul(to(value, ct), to(a, ct)), to(b, ct))
    return to(ops.add(to(x, ct), q), dt)


@rule(aten.addcmul.default, check=float_only)
def _addcmul(node: torch.fx.Node, x: Any, a: Any, b: Any, *, value: Any = 1) -> TracedTensor:
    """``x + value * a * b`` as torch's kernels compute it, ``fma(value * a, b, x)``: in
    f32 for 16-bit tensors and in f64 for f32 ones (the product of two f32 numbers is
    exact there), rounded once; f64 tensors round twice, as torch's decomposition."""
    dt = out_dtype(node)
    mt = opmath_dtype(dt)
    ct = torch.float64 if dt == torch.float32 else mt  # the fma's exact product
    p = ops.mul(to(ops.mul(to(value, mt), to(a, mt)), ct), to(b, ct))
    return to(ops.add(to(x, ct), p), dt)


@rule(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar, check=float_only)
def _pow(node: torch.fx.Node, a: Any, b: Any) -> TracedTensor:
    """``a ** b``. A tensor to a scalar power takes torch's own special cases (its CPU
    and CUDA kernels compute ``x ** 3`` as ``x * x * x``, ``x ** -2`` as ``1 / (x * x)``,
    ``x ** -0.5`` as ``rsqrt``): the same values, and a few multiplications where the
    general power (computed in f64 for f32) costs a double-double ``log`` and ``exp``
    (``gelu_new``'s cube in every GPT-2 MLP)."""
    dt = out_dtype(node)
    if isinstance(a, TracedTensor) and not isinstance(b, TracedTensor):
        x = to(a, dt)
        if b == 1:
            return x
        if b == 2:
            return ops.mul(x, x)
        if b == 3:
            return ops.mul(ops.mul(x, x), x)
        if b == 0.5:
            return ops.sqrt(x)
        if b == -0.5:
            return ops.rsqrt(x)
        if b == -1:
            return ops.div(to(1.0, dt), x)
        if b == -2:
            return ops.div(to(1.0, dt), ops.mul(x, x))
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
    (aten.sin.default, ops.sin),
    (aten.cos.default, ops.cos),
):
    rule(_t, check=float_only)(_unary(_f))
rule(aten.relu.default)(_unary(ops.relu))


@rule(aten.reciprocal.default, check=float_only)
def _reciprocal(node: torch.fx.Node, a: Any) -> TracedTensor:
    dt = out_dtype(node)
    return ops.div(to(1.0, dt), to(a, dt))


def erf(x: TracedTensor) -> TracedTensor:
    """``ts.erf`` (computed in f32 for 16-bit floats; on the GPU within about an ulp in
    f32 and in f64)."""
    return ops.erf(x)


def _erf_check(node: torch.fx.Node) -> str | None:
    return float_only(node)


@rule(aten.erf.default, check=_erf_check)
def _erf(node: torch.fx.Node, a: Any) -> TracedTensor:
    return erf(to(a, out_dtype(node)))


def _gelu_check(node: torch.fx.Node) -> str | None:
    approx = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    if approx not in ("none", "tanh"):
        return f"approximate={approx!r}"
    if approx == "none":
        return _erf_check(node)
    return float_only(node)


@rule(aten.gelu.default, check=_gelu_check)
def _gelu(node: torch.fx.Node, a: Any, approximate: str = "none") -> TracedTensor:
    out = out_dtype(node)
    if approximate == "tanh":
        return ops.gelu(to(a, out))
    dt = opmath_dtype(out)
    x = to(a, dt)
    half = ops.mul(x, to(0.5, dt))
    y = ops.mul(half, ops.add(erf(ops.mul(x, to(1 / math.sqrt(2), dt))), to(1.0, dt)))
    return to(y, out)


@rule(aten.gelu_backward.default, check=_gelu_check)
def _gelu_backward(
    node: torch.fx.Node, grad: Any, a: Any, approximate: str = "none"
) -> TracedTensor:
    out = out_dtype(node)
    return to(_gelu_grad(to(grad, opmath_dtype(out)), to(a, opmath_dtype(out)), approximate), out)


def _gelu_grad(g: TracedTensor, x: TracedTensor, approximate: str) -> TracedTensor:
    dt = torch_dtype(x)
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
    return clamp_between(to(a, dt), lo, hi, dt)


def clamp_between(x: TracedTensor, lo: Any, hi: Any, dt: torch.dtype) -> TracedTensor:
    """``min(max(x, lo), hi)`` with either bound absent (None), the bounds cast to ``dt``
    (``hi`` where ``lo > hi``, as torch's clamp)."""
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
    """An explicit conversion: its rounding stays in fused kernels that keep other 16-bit
    intermediates in f32 (``fused-f32-intermediates``)."""
    r = to(a, out_dtype(node))
    if r is not a and isinstance(r.value.owner, g.CastOp):
        r.value.owner.attributes[ROUNDS_ATTR] = UnitAttr()
    return r


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
        axes = norm_dims(dims, a.ndim if isinstance(a, TracedTensor) else 0)
        if isinstance(a, TracedTensor) and a.ndim and _apart(a.shape, axes) is not None:
            return _two_stage(fn, a, axes, bool(keepdim), dt)
        x = to(a, dt) if cast_first else a
        if x.ndim == 0:
            return x
        return fn(x, axis=tuple(axes), keepdims=bool(keepdim))

    return emit


def _apart(shape: Sequence[int], axes: Sequence[int]) -> tuple[list[int], list[int]] | None:
    """``(trailing, rest)`` when the reduced ``axes`` include the last dim and a kept dim
    of size > 1 lies between reduced ones (a batch norm's ``[N, C, H, W]`` over
    ``0, 2, 3``): the trailing run of reduced dims and the others; else None."""
    if not axes or len(shape) - 1 not in axes or not all(isinstance(d, int) for d in shape):
        return None
    k = len(shape) - 1
    while k >= 0 and k in axes:
        k -= 1
    trailing = list(range(k + 1, len(shape)))
    rest = [d for d in axes if d not in trailing]
    if not rest or all(shape[d] == 1 for d in range(min(rest), k + 1) if d not in axes):
        return None
    return trailing, rest


def _two_stage(
    fn: Callable[..., TracedTensor], a: TracedTensor, axes: Sequence[int], keepdim: bool,
    dt: torch.dtype,
) -> TracedTensor:
    """A reduction over axes apart as two: the trailing run of reduced dims (rows, read
    coalesced) and then the rest (columns of the row results); sums and means
    accumulate in f32 for 16-bit floats and round once, as torch does."""
    trailing, rest = _apart(a.shape, axes)  # type: ignore[misc]
    mean = fn is ops.mean
    red = ops.sum if mean else fn
    wide = opmath_dtype(dt) if red is ops.sum else dt
    x = to(a, wide)
    part = red(x, axis=tuple(trailing), keepdims=True)
    total = red(part, axis=tuple(rest), keepdims=True)
    if mean:
        n = math.prod(a.shape[d] for d in axes)
        total = ops.div(total, to(float(n), wide))
    if not keepdim:
        total = ops.reshape(total, [d for k, d in enumerate(a.shape) if k not in axes])
    return to(total, dt)


rule(aten.sum.dim_IntList, aten.sum.default)(_reduction(ops.sum))
rule(aten.mean.dim, aten.mean.default, check=float_only)(_reduction(ops.mean))
rule(aten.amax.default)(_reduction(ops.max))
rule(aten.amin.default)(_reduction(ops.min))


@rule(aten.any.dim, aten.any.dims, aten.any.default)
def _any(node: torch.fx.Node, a: Any, dims: Any = None, keepdim: bool = False) -> TracedTensor:
    x = ops.ne(to(a, promote(a, 0)), 0) if torch_dtype(a) != torch.bool else a
    if x.ndim == 0:
        return x
    counts = ops.sum(to(x, torch.int64), axis=tuple(norm_dims(dims, x.ndim)), keepdims=keepdim)
    return ops.gt(counts, 0)


def _var(x: TracedTensor, axes: list[int], correction: float, keepdim: bool) -> TracedTensor:
    """Two passes (mean, then the squared deviations), in f32 for 16-bit ``x`` and
    rounded once, as torch's kernels (rounding the mean and each deviation to 16 bits
    moved results by a step)."""
    dt = torch_dtype(x)
    ct = opmath_dtype(dt)
    x = to(x, ct)
    mean = ops.mean(x, axis=tuple(axes), keepdims=True)
    d = ops.sub(x, mean)
    n = math.prod(x.shape[a] for a in axes)
    s = ops.sum(ops.mul(d, d), axis=tuple(axes), keepdims=keepdim)
    return to(ops.div(s, to(max(n - correction, 0), ct)), dt)


def _correction(correction: Any, unbiased: Any) -> float:
    if correction is not None:
        return float(correction)
    return 1.0 if unbiased is None or unbiased else 0.0


@rule(aten.var.correction, check=float_only)
def _var_correction(
    node: torch.fx.Node, a: Any, dims: Any = None, *, correction: Any = None, keepdim: bool = False
) -> TracedTensor:
    x = to(a, out_dtype(node))
    return _var(x, norm_dims(dims, x.ndim), _correction(correction, None), keepdim)


@rule(aten.var_mean.correction)
def _var_mean(
    node: torch.fx.Node, a: Any, dims: Any = None, *, correction: Any = None, keepdim: bool = False
) -> tuple[TracedTensor, TracedTensor]:
    x = to(a, out_dtype(node, 0))
    axes = norm_dims(dims, x.ndim)
    var = _var(x, axes, _correction(correction, None), keepdim)
    return var, ops.mean(x, axis=tuple(axes), keepdims=keepdim)


@rule(aten.cumsum.default)
def _cumsum(node: torch.fx.Node, a: Any, dim: int, *, dtype: Any = None) -> TracedTensor:
    """Inclusive prefix sums along ``dim`` in ``ceil(log2 n)`` steps (Hillis-Steele): step
    ``k`` adds the sums so far shifted by ``2^k``. Integers are exact; floats add in a
    tree order of the same terms (torch adds left to right), in f32 for 16-bit floats."""
    out = out_dtype(node)
    x = to(a, opmath_dtype(out))
    if x.ndim == 0:
        return to(x, out)
    d = int(dim) % x.ndim
    n = x.shape[d]
    shift = 1
    while shift < n:
        lo = [0] * x.ndim
        hi = list(x.shape)
        hi[d] = n - shift
        pad = list(x.shape)
        pad[d] = shift
        zeros = ops.broadcast_to(to(0, torch_dtype(x)), pad)
        x = ops.add(x, ops.concat([zeros, ops.slice(x, lo, hi)], axis=d))
        shift *= 2
    return to(x, out)
