"""Eager numpy versions of the ``ts.*`` element functions used in precision policies.

A policy's ``quantize`` / ``dequantize`` are written against ``ts`` (``ts.max``,
``ts.abs``, ``ts.round``, ``x.astype(ts.int8)``). To run them on numpy arrays,
:func:`eager_function` rebinds every global that names the ``tessera`` module to
:data:`EAGER_TS`, a namespace whose functions are the numpy implementations below
and whose other attributes (dtypes, modifiers) are tessera's own. Arrays travel as
:class:`EagerArray`, whose ``astype`` accepts Tessera dtypes and policies and
converts through :func:`tessera.numerics.cast_array`, so conversions follow the
same rounding and saturation rules as everywhere else on the CPU path.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.ir.dtypes import DType, dtype_of
from tessera.ir.policy import NumericPolicy
from tessera.numerics.cast import cast_array


def _is_tessera_type(dtype: Any) -> bool:
    return isinstance(dtype, DType | NumericPolicy) or isinstance(
        getattr(dtype, "storage", None), DType
    )


def _as_policy(dtype: Any) -> NumericPolicy | DType:
    if isinstance(dtype, DType | NumericPolicy):
        return dtype
    return dtype_of(dtype)


class EagerArray(np.ndarray):
    """A numpy array whose ``astype`` understands ``ts.int8``, ``ts.bf16 @saturate`` ..."""

    def astype(self, dtype: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        if _is_tessera_type(dtype):
            return cast_array(np.asarray(self), _as_policy(dtype)).view(EagerArray)
        return super().astype(dtype, *args, **kwargs)


def wrap(x: Any) -> Any:
    """Arrays (and arrays inside tuples/lists) as :class:`EagerArray`."""
    if isinstance(x, np.ndarray):
        return x.view(EagerArray)
    if isinstance(x, tuple | list):
        return type(x)(wrap(v) for v in x)
    return x


def unwrap(x: Any) -> Any:
    """:class:`EagerArray` values (also inside tuples/lists) as plain numpy arrays."""
    if isinstance(x, EagerArray):
        plain = x.view(np.ndarray)
        return plain[()] if plain.ndim == 0 else plain
    if isinstance(x, tuple | list):
        return type(x)(unwrap(v) for v in x)
    return x


def _arr(x: Any) -> EagerArray:
    return np.asarray(x).view(EagerArray)


def abs(x: Any) -> Any:  # noqa: A001 - the guide's ts.abs
    """Elementwise absolute value."""
    return np.abs(_arr(x))


def round(x: Any) -> Any:  # noqa: A001 - the guide's ts.round
    """Round to the nearest integer, ties to even (IEEE roundTiesToEven), keeping the dtype."""
    return np.rint(_arr(x))


def max(x: Any, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Maximum over ``axis`` (all axes when None); NaN propagates."""
    return np.max(_arr(x), axis=axis, keepdims=keepdims)


def min(x: Any, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Minimum over ``axis`` (all axes when None); NaN propagates."""
    return np.min(_arr(x), axis=axis, keepdims=keepdims)


def sum(x: Any, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Sum over ``axis`` in the array's dtype."""
    return np.sum(_arr(x), axis=axis, keepdims=keepdims)


def mean(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """Mean over ``axis`` in the array's dtype."""
    return np.mean(_arr(x), axis=axis, keepdims=keepdims)


def cast(x: Any, dtype: Any) -> Any:
    """``ts.cast(x, dtype)``: :func:`cast_array` to a Tessera dtype or policy."""
    return cast_array(np.asarray(x), _as_policy(dtype)).view(EagerArray)


def _unary(fn: Callable[[Any], Any], doc: str) -> Callable[[Any], Any]:
    def f(x: Any) -> Any:
        return fn(_arr(x))

    f.__doc__ = doc
    return f


exp = _unary(np.exp, "Elementwise exponential.")
log = _unary(np.log, "Elementwise natural logarithm.")
sqrt = _unary(np.sqrt, "Elementwise square root.")
floor = _unary(np.floor, "Elementwise floor.")
ceil = _unary(np.ceil, "Elementwise ceiling.")


def maximum(a: Any, b: Any) -> Any:
    """Elementwise maximum (NaN propagates)."""
    return np.maximum(_arr(a), b)


def minimum(a: Any, b: Any) -> Any:
    """Elementwise minimum (NaN propagates)."""
    return np.minimum(_arr(a), b)


def clip(x: Any, lo: Any, hi: Any) -> Any:
    """Clamp to ``[lo, hi]``."""
    return np.clip(_arr(x), lo, hi)


def where(cond: Any, a: Any, b: Any) -> Any:
    """Elementwise select."""
    return np.where(cond, a, b).view(EagerArray)


EAGER_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs, "round": round, "max": max, "min": min, "sum": sum, "mean": mean,
    "cast": cast, "exp": exp, "log": log, "sqrt": sqrt, "floor": floor, "ceil": ceil,
    "maximum": maximum, "minimum": minimum, "clip": clip, "where": where,
}


class _EagerTessera(types.SimpleNamespace):
    """``tessera`` as seen by an eagerly run policy method."""

    def __getattr__(self, name: str) -> Any:
        import tessera

        return getattr(tessera, name)


EAGER_TS = _EagerTessera(**EAGER_FUNCTIONS)


def eager_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of ``fn`` whose references to the ``tessera`` module use :data:`EAGER_TS`."""
    import tessera

    env = dict(fn.__globals__)
    for name, value in fn.__globals__.items():
        if value is tessera:
            env[name] = EAGER_TS
    g = types.FunctionType(fn.__code__, env, fn.__name__, fn.__defaults__, fn.__closure__)
    g.__kwdefaults__ = fn.__kwdefaults__
    g.__doc__ = fn.__doc__
    return g
