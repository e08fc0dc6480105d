"""What the operator functions share: emitting an op on the active trace, argument checks,
constants and scalar operands, broadcasting and element-type checks."""

from __future__ import annotations

import builtins
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from xdsl.dialects.builtin import (
    ComplexType,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    IntegerType,
    NoneAttr,
    TensorType,
    f32,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute

from tessera.frontend.annotations import as_policy_or_none
from tessera.frontend.errors import ShapeError, TesseraTypeError, located
from tessera.frontend.tracing import Trace, TracedTensor, current_trace, result_type
from tessera.ir import graph as g
from tessera.ir.attrs import tensor_type
from tessera.ir.dtypes import bool_, dtype_of, fp32, fp64
from tessera.ir.policy import NumericPolicy

pi = math.pi

e = math.e

inf = math.inf


# --------------------------------------------------------------------------- helpers


def _emit(opcls: type[g.IRDLOperation], trace: Trace, **kw: Any) -> TracedTensor:
    op = trace.add(opcls.build(**kw))
    return TracedTensor(op.results[0], trace)


def _named_operands(opcls: type[g.IRDLOperation], **values: Any) -> list[Any]:
    """Operands in the op definition's order, from keyword values (None: absent optional)."""
    return [values[name] for name, _ in opcls.get_irdl_definition().operands]


def _int(v: Any, what: str) -> int:
    """``v`` as a Python int (a Python or numpy integer), else a located error."""
    if isinstance(v, numbers.Integral) and not isinstance(v, bool | np.bool_):
        return int(v)
    raise TesseraTypeError(located(f"{what} must be an int, got {type(v).__name__} {v!r}"))


def _ints(values: Any, what: str) -> list[int]:
    """A sequence of ints (``what`` names it in errors)."""
    if isinstance(values, str) or not isinstance(values, Sequence | np.ndarray):
        raise TesseraTypeError(
            located(f"{what} must be a sequence of ints, got {type(values).__name__} {values!r}")
        )
    return [_int(v, what) for v in values]


def _shape(values: Any, what: str) -> list[int]:
    """A static shape: ints >= 0."""
    dims = _ints(values, what)
    if any(d < 0 for d in dims):
        raise ShapeError(located(f"{what} {dims} has a negative size"))
    return dims


def _float(v: Any, what: str) -> float:
    """``v`` as a Python float (any real number), else a located error."""
    if isinstance(v, numbers.Real) and not isinstance(v, bool | np.bool_):
        return float(v)
    raise TesseraTypeError(located(f"{what} must be a number, got {type(v).__name__} {v!r}"))


def _policy(dtype: Any, what: str) -> NumericPolicy:
    """The numeric policy a dtype argument names, else a located error."""
    try:
        pol = as_policy_or_none(dtype, what)
    except TesseraTypeError as e:
        raise TesseraTypeError(located(str(e))) from None
    if pol is None:
        raise TesseraTypeError(located(f"{what}: a dtype is required, got None"))
    return pol


def _dense_props(name: str, values: Sequence[int]) -> dict[str, Attribute]:
    return {name: DenseArrayBase.from_list(i64, _ints(values, name))}


def _is_scalar(x: Any) -> bool:
    return isinstance(x, numbers.Number) and not isinstance(x, np.ndarray)


def _is_array(x: Any) -> bool:
    if isinstance(x, np.ndarray):
        return True
    mod = type(x).__module__
    return mod.startswith("torch") and hasattr(x, "detach")


def constant(value: ArrayLike, dtype: Any = None, *, like: TracedTensor | None = None) -> TracedTensor:
    """A ``tgraph.constant`` from a Python scalar or a numpy array / CPU torch tensor.

    ``dtype`` (a dtype or policy) gives the result type; by default a scalar takes
    ``like``'s type (policy included) and an array its own dtype.
    """
    trace = like.trace if like is not None else current_trace("constant")
    if _is_array(value):
        from tessera.runtime.convert import to_numpy

        arr = to_numpy(value, where="constant")
    elif _is_scalar(value):
        arr = np.asarray(value)
    else:
        raise TesseraTypeError(
            located(f"cannot make a tensor constant from {type(value).__name__} {value!r}")
        )
    if np.iscomplexobj(arr):
        raise TesseraTypeError(located("complex constants are not supported"))
    if dtype is not None:
        pol = _policy(dtype, "constant")
        rtype: TensorType = tensor_type(arr.shape, pol)
    elif like is not None and _is_scalar(value):
        rtype = result_type((), like.type)
    else:
        try:
            rtype = tensor_type(arr.shape, dtype_of(arr.dtype))
        except TypeError as err:
            raise TesseraTypeError(located(f"constant: {err}")) from None
    elem = rtype.element_type
    if isinstance(elem, IntegerType):
        if elem == i1:
            vals: list[Any] = [bool(v) for v in arr.reshape(-1)]
            attr_elem: Attribute = i1
        else:
            flat = arr.reshape(-1)
            if flat.dtype.kind == "f" and not np.all(np.equal(np.floor(flat), flat)):
                raise TesseraTypeError(
                    located(f"constant {value!r} is not an integer but the tensor type is {elem}")
                )
            vals = [int(v) for v in flat]
            lo, hi = -(2 ** (elem.width.data - 1)), 2 ** (elem.width.data - 1)
            out = next((v for v in vals if not lo <= v < hi), None)
            if out is not None:
                raise TesseraTypeError(
                    located(f"constant {out} does not fit in the tensor type {elem}")
                )
            attr_elem = i64
    else:
        attr_elem = f32 if elem == f32 else f64
        with np.errstate(over="ignore"):  # out of f32's range: +-inf, as torch and numpy give
            wide = arr.astype(np.float32 if attr_elem == f32 else np.float64)
        vals = [float(v) for v in wide.reshape(-1)]
    attr = DenseIntOrFPElementsAttr.from_list(TensorType(attr_elem, list(arr.shape)), vals)
    return _emit(g.ConstantOp, trace, result_types=[rtype], properties={"value": attr})


def _as_tensor(x: Any, opname: str, like: TracedTensor | None = None) -> TracedTensor:
    if isinstance(x, TracedTensor):
        if like is not None and x.trace is not like.trace:
            raise TesseraTypeError(located(f"{opname}: operands come from different traces"))
        return x
    if _is_scalar(x) and like is not None and like.is_complex:
        return _complex_scalar(x, like, opname)
    if _is_scalar(x) and like is not None:
        if isinstance(x, bool) or like.dtype == bool_:
            if like.dtype != bool_ or not isinstance(x, bool | np.bool_):
                raise TesseraTypeError(
                    located(f"{opname}: cannot combine {x!r} with a {like.dtype!r} tensor")
                )
        return constant(x, like=like)
    if _is_array(x):
        return constant(x, like=like)
    raise TesseraTypeError(
        located(
            f"{opname}: unsupported operand {type(x).__name__} {x!r}; expected a tensor, "
            "a Python number or a numpy array"
        )
    )


def _complex_scalar(x: Any, like: TracedTensor, opname: str) -> TracedTensor:
    """A Python number combined with complex ``like``: ``complex(re, im)`` of two scalar
    constants of ``like``'s part type (a rank-0 complex tensor that broadcasts)."""
    if isinstance(x, bool | np.bool_):
        raise TesseraTypeError(located(f"{opname}: cannot combine {x!r} with a complex tensor"))
    el = like.type.element_type
    part = fp64 if el == ComplexType(f64) else fp32
    from tessera.frontend.ops.scientific import complex as complex_of

    re = constant(float(np.real(x)), dtype=part, like=like)
    im = constant(float(np.imag(x)), dtype=part, like=like)
    return complex_of(re, im)


def _operands(opname: str, *xs: Any) -> list[TracedTensor]:
    like = next((x for x in xs if isinstance(x, TracedTensor)), None)
    if like is None:
        current_trace(opname)
        raise TesseraTypeError(located(f"{opname}: needs at least one tensor operand"))
    return [_as_tensor(x, opname, like) for x in xs]


def _check_same_elem(opname: str, *xs: TracedTensor) -> None:
    types = [x.type.element_type for x in xs]
    if any(t != types[0] for t in types):
        raise TesseraTypeError(
            located(
                f"{opname}: element types differ: {', '.join(str(t) for t in types)}; "
                "convert with ts.cast"
            )
        )


def _broadcast(opname: str, *xs: TracedTensor) -> tuple[int, ...]:
    shape: tuple[int, ...] | None = xs[0].shape
    for x in xs[1:]:
        shape = g.broadcast_shapes(shape, x.shape) if shape is not None else None
    if shape is None:
        raise ShapeError(
            located(
                f"{opname} shapes {' and '.join(g.fmt_shape(x.shape) for x in xs)} do not broadcast"
            )
        )
    return shape


def _norm_axis(opname: str, axis: int, rank: int) -> int:
    axis = _int(axis, f"{opname} axis")
    if not -rank <= axis < builtins.max(rank, 1):
        raise ShapeError(located(f"{opname}: axis {axis} out of range for rank {rank}"))
    return axis % builtins.max(rank, 1)


def _result_like(a: TracedTensor, b: TracedTensor, shape: Sequence[int]) -> TensorType:
    """The result type of a binary op: the left operand's policy, else the right one's."""
    src = b if (not _has_encoding(a) and _has_encoding(b)) else a
    return result_type(shape, src.type)


def _has_encoding(x: TracedTensor) -> bool:
    return not isinstance(x.type.encoding, NoneAttr)


def _tensor_arg(x: Any, opname: str, what: str = "operand") -> TracedTensor:
    if not isinstance(x, TracedTensor):
        current_trace(opname)
        raise TesseraTypeError(
            located(f"{opname}: {what} must be a tensor, got {type(x).__name__}")
        )
    return x
