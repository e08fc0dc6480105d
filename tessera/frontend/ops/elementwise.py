"""Elementwise operator functions: arithmetic, comparisons, ``where``, unary math and
activations, ``round``, ``cast``."""

from __future__ import annotations

import builtins
import math
import numbers
from typing import Any

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    IntegerAttr,
    TensorType,
    i1,
    i64,
)
from xdsl.ir import Attribute

from tessera.frontend.errors import TesseraTypeError, located
from tessera.frontend.ops.base import (
    _broadcast,
    _check_same_elem,
    _emit,
    _has_encoding,
    _int,
    _is_scalar,
    _operands,
    _policy,
    _result_like,
    _tensor_arg,
)
from tessera.frontend.tracing import TracedTensor, current_trace
from tessera.ir import graph as g
from tessera.ir.attrs import tensor_type
from tessera.ir.dtypes import bool_, fp32, fp64, int64

# --------------------------------------------------------------------------- elementwise


def _promote_scalar(x: Any, other: Any) -> Any:
    """``x`` converted as torch does when combined with the Python scalar ``other``: an
    integer or bool tensor with a float becomes ``f32``, a bool tensor with an int
    ``int64``."""
    if not isinstance(x, TracedTensor) or not _is_scalar(other) or x.is_complex:
        return x
    if isinstance(other, float | np.floating) and not x.dtype.is_float:
        return cast(x, fp32)
    if (
        isinstance(other, numbers.Integral)
        and not isinstance(other, bool | np.bool_)
        and x.dtype == bool_
    ):
        return cast(x, int64)
    return x


def _binary(opcls: type[g.ElementwiseBinaryOp], opname: str, a: Any, b: Any) -> TracedTensor:
    a, b = _promote_scalar(a, b), _promote_scalar(b, a)
    x, y = _operands(opname, a, b)
    _check_same_elem(opname, x, y)
    shape = _broadcast(opname, x, y)
    if opcls.RESULT_IS_BOOL:
        rt: TensorType = TensorType(i1, list(shape))
    else:
        rt = _result_like(x, y, shape)
    return _emit(opcls, x.trace, operands=[x.value, y.value], result_types=[rt])


def add(a: Any, b: Any) -> TracedTensor:
    """Elementwise ``a + b`` with broadcasting."""
    return _binary(g.AddOp, "add", a, b)


def sub(a: Any, b: Any) -> TracedTensor:
    """Elementwise ``a - b`` with broadcasting (not defined for two bool operands)."""
    if all(
        isinstance(v, bool | np.bool_) or (isinstance(v, TracedTensor) and v.type.element_type == i1)
        for v in (a, b)
    ):
        current_trace("sub")
        raise TesseraTypeError(located("sub of two bool tensors is not defined; use ts.ne"))
    return _binary(g.SubOp, "sub", a, b)


def mul(a: Any, b: Any) -> TracedTensor:
    """Elementwise ``a * b`` with broadcasting."""
    return _binary(g.MulOp, "mul", a, b)


def div(a: Any, b: Any) -> TracedTensor:
    """Elementwise true division ``a / b`` with broadcasting; integer and bool operands
    are converted to ``f32`` first (torch's ``/``)."""
    a, b = _promote_scalar(a, b), _promote_scalar(b, a)
    x, y = _operands("div", a, b)
    if not any(t.is_complex or t.dtype.is_float for t in (x, y)):
        x, y = cast(x, fp32), cast(y, fp32)
    return _binary(g.DivOp, "div", x, y)


def pow(a: Any, b: Any) -> TracedTensor:  # noqa: A001
    """Elementwise ``a ** b`` with broadcasting (an integer base needs exponents >= 0)."""
    if (
        isinstance(a, TracedTensor)
        and not a.is_complex
        and not a.dtype.is_float
        and isinstance(b, numbers.Integral)
        and b < 0
    ):
        raise TesseraTypeError(
            located(f"pow: an integer tensor to the negative power {b}; cast it to a float type")
        )
    return _binary(g.PowOp, "pow", a, b)


def maximum(a: Any, b: Any) -> TracedTensor:
    """Elementwise maximum (NaN-propagating)."""
    return _binary(g.MaximumOp, "maximum", a, b)


def minimum(a: Any, b: Any) -> TracedTensor:
    """Elementwise minimum (NaN-propagating)."""
    return _binary(g.MinimumOp, "minimum", a, b)


def lt(a: Any, b: Any) -> TracedTensor:
    """Elementwise ``a < b`` (bool result)."""
    return _binary(g.LtOp, "lt", a, b)


def le(a: Any, b: Any) -> TracedTensor:
    """Elementwise ``a <= b`` (bool result)."""
    return _binary(g.LeOp, "le", a, b)


def gt(a: Any, b: Any) -> TracedTensor:
    """Elementwise ``a > b`` (bool result)."""
    return _binary(g.GtOp, "gt", a, b)


def ge(a: Any, b: Any) -> TracedTensor:
    """Elementwise ``a >= b`` (bool result)."""
    return _binary(g.GeOp, "ge", a, b)


def eq(a: Any, b: Any) -> TracedTensor:
    """Elementwise ``a == b`` (bool result)."""
    return _binary(g.EqOp, "eq", a, b)


def ne(a: Any, b: Any) -> TracedTensor:
    """Elementwise ``a != b`` (bool result)."""
    return _binary(g.NeOp, "ne", a, b)


def where(cond: Any, a: Any, b: Any) -> TracedTensor:
    """Elementwise ``cond ? a : b`` (``tgraph.select``) with broadcasting of all three."""
    if not isinstance(cond, TracedTensor):
        raise TesseraTypeError(located("where: the condition must be a bool tensor"))
    x, y = _operands("where", a, b)
    if cond.type.element_type != i1:
        raise TesseraTypeError(
            located(f"where: the condition must be a bool tensor, got {cond.type.element_type}")
        )
    _check_same_elem("where", x, y)
    shape = _broadcast("where", cond, x, y)
    rt = _result_like(x, y, shape)
    return _emit(g.SelectOp, x.trace, operands=[cond.value, x.value, y.value], result_types=[rt])


select = where


_SCALAR_UNARY: dict[str, Any] = {
    "neg": lambda v: -v,
    "abs": builtins.abs,
    "exp": math.exp,
    "log": math.log,
    "sqrt": math.sqrt,
    "rsqrt": lambda v: 1.0 / math.sqrt(v),
    "tanh": math.tanh,
    "relu": lambda v: builtins.max(v, 0),
    "gelu": lambda v: 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))),
    "silu": lambda v: v / (1 + math.exp(-v)),
    "sigmoid": lambda v: 1 / (1 + math.exp(-v)),
    "erf": math.erf,
    "sin": math.sin,
    "cos": math.cos,
}


_INT_TO_FLOAT = frozenset({"exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin", "cos"})
"""Unary ops that take integer and bool tensors as ``f32`` (as torch does)."""


def _unary(opcls: type[g.ElementwiseUnaryOp], opname: str, x: Any) -> Any:
    """Emit ``opcls`` on a traced tensor; a Python number is folded at trace time
    (``ts.sqrt(2 * ts.pi)`` is a constant of the program, as in the guide)."""
    if isinstance(x, TracedTensor) and not x.is_complex and not x.dtype.is_float:
        if opname in _INT_TO_FLOAT:
            x = cast(x, fp32)
        elif x.dtype == bool_ and opname in ("neg", "relu", "gelu", "silu"):
            raise TesseraTypeError(located(f"{opname} of a bool tensor is not defined"))
        elif opname == "relu":
            return maximum(x, 0)
    if isinstance(x, int | float) and not isinstance(x, bool):
        try:
            return _SCALAR_UNARY[opname](x)
        except ValueError as e:
            raise TesseraTypeError(located(f"{opname}({x!r}): {e}")) from None
    if not isinstance(x, TracedTensor):
        current_trace(opname)
        raise TesseraTypeError(
            located(f"{opname}: expected a tensor, got {type(x).__name__} {x!r}")
        )
    return _emit(opcls, x.trace, operands=[x.value], result_types=[x.type])


def neg(x: Any) -> TracedTensor:
    """Elementwise ``-x``."""
    return _unary(g.NegOp, "neg", x)


def abs(x: Any) -> TracedTensor:  # noqa: A001
    """Elementwise ``|x|``."""
    return _unary(g.AbsOp, "abs", x)


def exp(x: Any) -> TracedTensor:
    """Elementwise ``e**x``."""
    return _unary(g.ExpOp, "exp", x)


def log(x: Any) -> TracedTensor:
    """Elementwise natural logarithm."""
    return _unary(g.LogOp, "log", x)


def sqrt(x: Any) -> TracedTensor:
    """Elementwise square root."""
    return _unary(g.SqrtOp, "sqrt", x)


def rsqrt(x: Any) -> TracedTensor:
    """Elementwise ``1/sqrt(x)``."""
    return _unary(g.RsqrtOp, "rsqrt", x)


def tanh(x: Any) -> TracedTensor:
    """Elementwise hyperbolic tangent."""
    return _unary(g.TanhOp, "tanh", x)


def relu(x: Any) -> TracedTensor:
    """Elementwise ``max(x, 0)``."""
    return _unary(g.ReluOp, "relu", x)


def gelu(x: Any) -> TracedTensor:
    """Elementwise GELU (tanh approximation)."""
    return _unary(g.GeluOp, "gelu", x)


def silu(x: Any) -> TracedTensor:
    """Elementwise ``x * sigmoid(x)``."""
    return _unary(g.SiluOp, "silu", x)


def sigmoid(x: Any) -> TracedTensor:
    """Elementwise logistic sigmoid."""
    return _unary(g.SigmoidOp, "sigmoid", x)


def erf(x: Any) -> TracedTensor:
    """Elementwise error function (``torch.erf``); integer and bool tensors are taken as
    ``f32``."""
    return _unary(g.ErfOp, "erf", x)


def sin(x: Any) -> TracedTensor:
    """Elementwise sine (radians, ``torch.sin``); integer and bool tensors are taken as
    ``f32``."""
    return _unary(g.SinOp, "sin", x)


def cos(x: Any) -> TracedTensor:
    """Elementwise cosine (radians, ``torch.cos``); integer and bool tensors are taken as
    ``f32``."""
    return _unary(g.CosOp, "cos", x)


def round(x: Any) -> TracedTensor:  # noqa: A001
    """Round to the nearest integer, ties to even, keeping the dtype (as ``torch.round``).

    Computed in f32 (f64 for f64 tensors) with the round-to-nearest-even of one
    addition: for ``|x| < 2**p`` (``p`` the format's fraction bits, the only values
    with a fraction), ``(|x| + 2**p) - 2**p`` is ``|x|`` rounded; larger values,
    inf and NaN pass. The result takes the sign of ``x``, zeros included
    (``round(-0.4)`` is ``-0.0``). Integer values pass through ``int64`` (exact),
    so the gradient is 0 as in torch, except for ``|x| >= 2**62``, inf and NaN.
    """
    x = _tensor_arg(x, "round")
    if not x.dtype.is_float:
        return x
    wide = fp64 if x.dtype == fp64 else fp32
    w = x if x.dtype == wide and not _has_encoding(x) else cast(x, wide)
    big = float(2 ** int(ml_dtypes.finfo(wide.np_dtype).nmant))
    a = abs(w)
    r = cast(cast(sub(add(a, big), big), int64), wide)
    signed = where(lt(w, 0.0), neg(r), r)
    signed = where(eq(r, 0.0), mul(w, 0.0), signed)  # x * 0 carries the sign of x
    whole = where(lt(a, float(2**62)), cast(cast(w, int64), wide), w)
    out = where(lt(a, big), signed, whole)
    return out if out.type == x.type else cast(out, x.policy)


def cast(x: Any, dtype: Any, *, seed: int | None = None) -> TracedTensor:
    """Convert ``x`` to ``dtype`` (a dtype or a numeric policy), with the policy's
    rounding (``seed`` fixes the stream of stochastic rounding)."""
    if not isinstance(x, TracedTensor):
        current_trace("cast")
        raise TesseraTypeError(located(f"cast: expected a tensor, got {type(x).__name__}"))
    pol = _policy(dtype, "cast")
    props: dict[str, Attribute] = {}
    if seed is not None:
        props["seed"] = IntegerAttr(_int(seed, "cast seed"), i64)
    elif pol.rounding == "stochastic":
        props["seed"] = IntegerAttr(x.trace.next_seed(), i64)
    return _emit(
        g.CastOp,
        x.trace,
        operands=[x.value],
        result_types=[tensor_type(x.shape, pol)],
        properties=props,
    )


