"""numpy's ufunc and function protocols for traced tensors (``np.exp(x)``, ``np.sum(x)``)."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from tessera.frontend.errors import TesseraTypeError, located
from tessera.frontend.ops.base import _tensor_arg
from tessera.frontend.ops.elementwise import (
    abs,
    add,
    cos,
    div,
    eq,
    exp,
    ge,
    gt,
    le,
    log,
    lt,
    maximum,
    minimum,
    mul,
    ne,
    neg,
    pow,
    sin,
    sqrt,
    sub,
    tanh,
    where,
)
from tessera.frontend.ops.nn import (
    matmul,
    max,
    mean,
    min,
    sum,
)
from tessera.frontend.ops.shape import (
    broadcast_to,
    concat,
    reshape,
    transpose,
)

# --------------------------------------------------------------------------- numpy ufuncs


def _ufunc_table() -> dict[str, Any]:
    return {
        "add": add, "subtract": sub, "multiply": mul, "divide": div, "true_divide": div,
        "power": pow, "maximum": maximum, "minimum": minimum, "matmul": matmul,
        "less": lt, "less_equal": le, "greater": gt, "greater_equal": ge, "equal": eq,
        "not_equal": ne, "negative": neg, "positive": lambda x: x, "absolute": abs,
        "exp": exp, "log": log, "sqrt": sqrt, "tanh": tanh,
        "sin": sin, "cos": cos,
    }


def array_ufunc(ufunc: Any, method: str, inputs: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """numpy's ufunc protocol for traced tensors: ``np.exp(x)`` is ``ts.exp(x)``,
    ``array + x`` is ``ts.add(array, x)``; a ufunc with no Tessera op is a located error."""
    name = getattr(ufunc, "__name__", str(ufunc))
    fn = _ufunc_table().get(name)
    if method != "__call__" or fn is None or any(v is not None for v in kwargs.values()):
        what = f"np.{name}" if method == "__call__" else f"np.{name}.{method}"
        if kwargs and fn is not None and method == "__call__":
            what += f" with {', '.join(sorted(kwargs))}="
        raise TesseraTypeError(
            located(f"{what} cannot run on a traced tensor; use the ts.* operators instead")
        )
    return fn(*inputs)


def _np_reduction(fn: Any) -> Any:
    def call(a: Any, axis: Any = None, dtype: Any = None, out: Any = None,
             keepdims: Any = False, **kw: Any) -> Any:
        if dtype is not None or out is not None or kw:
            raise TesseraTypeError(
                located("numpy reductions of traced tensors take only axis and keepdims")
            )
        return fn(a, axis=axis, keepdims=bool(keepdims))

    return call


def _np_transpose(a: Any, axes: Any = None) -> Any:
    """numpy's ``transpose``: all dims reversed, or the permutation ``axes``."""
    x = _tensor_arg(a, "np.transpose")
    if axes is None:
        return x if x.ndim < 2 else transpose(x, list(range(x.ndim))[::-1])
    return transpose(x, list(axes))


def _np_reshape(a: Any, shape: Any = None, order: str = "C", **kw: Any) -> Any:
    """numpy's ``reshape`` (C order; ``shape`` or numpy 1's ``newshape``)."""
    shape = kw.pop("newshape", shape)
    if order != "C" or kw or shape is None:
        raise TesseraTypeError(located("np.reshape of a traced tensor takes a shape, C order"))
    return reshape(a, [shape] if isinstance(shape, numbers.Integral) else shape)


def _np_function_table() -> dict[Any, Any]:
    return {
        np.sum: _np_reduction(sum), np.mean: _np_reduction(mean),
        np.max: _np_reduction(max), np.amax: _np_reduction(max),
        np.min: _np_reduction(min), np.amin: _np_reduction(min),
        np.transpose: _np_transpose,
        np.reshape: _np_reshape,
        np.concatenate: lambda arrays, axis=0: concat(list(arrays), axis=axis),
        np.where: lambda c, x, y: where(c, x, y),
        np.matmul: lambda a, b: matmul(a, b),
        np.broadcast_to: lambda a, shape: broadcast_to(a, shape),
    }


def array_function(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """numpy's function protocol for traced tensors: ``np.sum(x)``, ``np.transpose(x)``,
    ``np.concatenate([x, y])`` ... are the ts operators (numpy's meaning of the
    arguments); other numpy functions are a located error."""
    fn = _np_function_table().get(func)
    if fn is None:
        raise TesseraTypeError(
            located(
                f"np.{getattr(func, '__name__', func)} cannot run on a traced tensor; use the "
                "ts.* operators instead"
            )
        )
    return fn(*args, **kwargs)


