"""``@ts.precision_policy``: a class naming storage / scale / compute / accumulate types.

The guide's example::

    @ts.precision_policy
    class QuantizedPolicy:
        storage = ts.int8
        scale = ts.f32
        compute = ts.f32
        accumulate = ts.f32

        def quantize(self, x: ts.f32) -> ts.int8:
            scale = ts.max(ts.abs(x)) / 127.0
            return ts.round(x / scale).astype(ts.int8), scale

        def dequantize(self, x: ts.int8, scale: ts.f32) -> ts.f32:
            return x.astype(ts.f32) * scale

The decorator resolves the four type attributes to :class:`DType` objects
(``storage`` is required; ``compute`` and ``accumulate`` default to ``storage``,
``scale`` to None), adds ``numeric_policy`` (the :class:`NumericPolicy` of a tensor
so annotated: storage with ``@accum(accumulate)``), and makes ``quantize`` /
``dequantize`` run eagerly when given numpy arrays (see :mod:`tessera.numerics.eager`);
given traced tensors they run as written, emitting Graph IR. The decorated class
stands for its storage type in annotations: ``ts.Tensor["D", "D", QuantizedPolicy]``
(``dtype_of`` reads ``.storage``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.ir.dtypes import DType, dtype_of
from tessera.ir.policy import NumericPolicy
from tessera.numerics.eager import eager_function, unwrap, wrap

TYPE_FIELDS = ("storage", "scale", "compute", "accumulate")
METHODS = ("quantize", "dequantize")

# Every class decorated with @precision_policy, by qualified name.
PRECISION_POLICIES: dict[str, type] = {}


def _is_eager_value(x: Any) -> bool:
    return isinstance(x, np.ndarray | np.generic | int | float | list)


def _dispatching(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run eagerly on numpy arguments, as written on anything else."""
    eager = eager_function(fn)

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        values = list(args) + list(kwargs.values())
        if values and all(_is_eager_value(v) for v in values):
            args = tuple(wrap(np.asarray(a) if isinstance(a, list) else a) for a in args)
            kwargs = {k: wrap(v) for k, v in kwargs.items()}
            return unwrap(eager(self, *args, **kwargs))
        return fn(self, *args, **kwargs)

    method.eager = eager  # type: ignore[attr-defined]
    return method


def _resolve(cls: type, field: str) -> DType | None:
    value = getattr(cls, field, None)
    if value is None:
        return None
    try:
        return dtype_of(value, where=f"{cls.__name__}.{field}")
    except TypeError as e:
        raise TypeError(f"@precision_policy {cls.__name__}: {e}") from None


def precision_policy(cls: type) -> type:
    """Turn a class with ``storage`` (and optional scale/compute/accumulate) into a policy."""
    if not isinstance(cls, type):
        raise TypeError("@precision_policy decorates a class")
    storage = _resolve(cls, "storage")
    if storage is None:
        raise TypeError(
            f"@precision_policy {cls.__name__}: missing 'storage' (e.g. storage = ts.int8)"
        )
    scale = _resolve(cls, "scale")
    compute = _resolve(cls, "compute") or storage
    accumulate = _resolve(cls, "accumulate") or compute
    cls.storage = storage  # type: ignore[attr-defined]
    cls.scale = scale  # type: ignore[attr-defined]
    cls.compute = compute  # type: ignore[attr-defined]
    cls.accumulate = accumulate  # type: ignore[attr-defined]
    accum = None if accumulate == storage else accumulate
    cls.numeric_policy = NumericPolicy(storage, accum=accum)  # type: ignore[attr-defined]
    cls.is_precision_policy = True  # type: ignore[attr-defined]
    for name in METHODS:
        fn = cls.__dict__.get(name)
        if fn is not None:
            if not callable(fn):
                raise TypeError(f"@precision_policy {cls.__name__}: '{name}' must be a method")
            setattr(cls, name, _dispatching(fn))
    PRECISION_POLICIES[cls.__qualname__] = cls
    return cls


def is_precision_policy(x: Any) -> bool:
    """True for a class decorated with :func:`precision_policy` (or an instance of one)."""
    return bool(getattr(x, "is_precision_policy", False))
