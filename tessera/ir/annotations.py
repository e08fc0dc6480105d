"""Tensor annotations: ``ts.Tensor["M", "K", ts.bf16 @accum(ts.f32)]`` and ``f32[n]``.

An annotation fixes a parameter's rank, its dims (an ``int`` is a fixed size, a
``str`` a symbolic size that must agree across all parameters of one call) and,
optionally, its dtype or numeric policy. The tracer binds annotations against
the arguments of a call (:func:`bind_shape`), or, when no call was made,
builds the parameter types from the annotations alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tessera.errors import ShapeError, TesseraTypeError
from tessera.ir.dtypes import DType, dtype_of
from tessera.ir.policy import NumericPolicy

Dim = int | str


def as_policy_or_none(x: Any, where: str) -> NumericPolicy | None:
    """A NumericPolicy from a DType, a policy, a dtype name, or None."""
    if x is None:
        return None
    if isinstance(x, NumericPolicy):
        return x
    if isinstance(x, DType):
        return NumericPolicy(x)
    declared = getattr(x, "numeric_policy", None)  # a @ts.precision_policy class
    if isinstance(declared, NumericPolicy):
        return declared
    try:
        return NumericPolicy(dtype_of(x, where=where))
    except TypeError as e:
        raise TesseraTypeError(str(e)) from None


@dataclass(frozen=True)
class TensorAnnotation:
    """The declared dims and dtype/policy of one tensor parameter."""

    dims: tuple[Any, ...]
    dtype: Any = None

    @property
    def policy(self) -> NumericPolicy | None:
        return as_policy_or_none(self.dtype, "a Tensor annotation")

    def symbols(self) -> list[str]:
        return [d for d in self.dims if isinstance(d, str)]

    def __repr__(self) -> str:
        items = [repr(d) for d in self.dims]
        if self.dtype is not None:
            items.append(repr(self.dtype))
        return f"ts.Tensor[{', '.join(items)}]"


class Tensor:
    """``ts.Tensor[dims..., dtype]``: a tensor annotation for ``@ts.jit`` parameters.

    Dims are ints (fixed) or strings (symbolic, equal wherever the same name is
    used); the optional last item is a dtype or policy (``ts.bf16``,
    ``ts.fp8_e4m3 @accum(ts.f32)``).
    """

    def __class_getitem__(cls, items: Any) -> TensorAnnotation:
        if not isinstance(items, tuple):
            items = (items,)
        dims: list[Any] = list(items)
        dtype: Any = None
        if dims and not isinstance(dims[-1], int | str):
            dtype = dims.pop()
            as_policy_or_none(dtype, f"ts.Tensor[{', '.join(map(repr, items))}]")
        for d in dims:
            if not isinstance(d, int | str) or isinstance(d, bool) or (
                isinstance(d, int) and d < 0
            ):
                raise TesseraTypeError(
                    f"ts.Tensor: dim {d!r} must be a size >= 0 or a symbolic name (a str)"
                )
        return TensorAnnotation(dims=tuple(dims), dtype=dtype)


def bind_shape(
    ann: TensorAnnotation,
    shape: Sequence[int],
    bindings: dict[str, tuple[int, str]],
    param: str,
) -> None:
    """Check ``shape`` against ``ann``; record symbolic sizes in ``bindings``.

    ``bindings`` maps a symbol to (size, the parameter that bound it); a symbol
    bound to two sizes raises :class:`ShapeError` naming both parameters.
    """
    if len(ann.dims) != len(shape):
        raise ShapeError(
            f"argument '{param}' has rank {len(shape)} (shape {list(shape)}), "
            f"but its annotation {ann!r} has rank {len(ann.dims)}"
        )
    for i, (d, n) in enumerate(zip(ann.dims, shape)):
        if isinstance(d, str):
            if d in bindings and bindings[d][0] != n:
                size, other = bindings[d]
                raise ShapeError(
                    f"symbolic dim '{d}' bound to two sizes: {size} by argument '{other}' "
                    f"and {n} by argument '{param}' (dim {i})"
                )
            bindings.setdefault(d, (n, param))
        elif isinstance(d, int):
            if d != n:
                raise ShapeError(
                    f"argument '{param}' dim {i} has size {n}, but its annotation {ann!r} "
                    f"says {d}"
                )
        else:
            raise TesseraTypeError(
                f"annotation of '{param}': dim {d!r} must be an int or a symbolic name"
            )


def shape_from_annotation(
    ann: TensorAnnotation, sizes: dict[str, int], param: str
) -> tuple[int, ...]:
    """The concrete shape of ``ann`` given sizes for its symbolic dims."""
    missing = [d for d in ann.symbols() if d not in sizes]
    if missing:
        raise TesseraTypeError(
            f"parameter '{param}' has symbolic dims {', '.join(missing)} with no size; "
            "call the function once, or pass the sizes, e.g. "
            f"inspect_ir('graph', {', '.join(f'{m}=...' for m in missing)})"
        )
    return tuple(sizes[d] if isinstance(d, str) else int(d) for d in ann.dims)
