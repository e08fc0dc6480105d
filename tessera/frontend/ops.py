"""The operator functions of the guide (``ts.matmul``, ``op.softmax``, ``ts.all_reduce`` ...).

Each function appends one Graph IR op (a few for composites such as
:func:`split_qkv`) to the active trace and returns :class:`TracedTensor`
results. Shapes are checked by the ops' own verifiers (or their
``infer_shape`` helpers), so the rules live in :mod:`tessera.ir.graph`.

Result-dtype rules:

* Elementwise ops need tensor operands of one element type; two tensors of
  different types are not promoted (``ts.cast`` converts). A Python scalar
  becomes a ``tgraph.constant`` splat (rank 0) of the other operand's type,
  policy included. The result keeps the left operand's numeric policy (the right
  one's if the left has the default policy). Comparisons give ``bool`` (``i1``).
* Integer and bool operands follow torch's promotion: ``/`` is true division
  (integer or bool operands are converted to ``f32``, torch's default float
  type); an integer or bool tensor with a Python float is converted to ``f32``
  first, and a bool tensor with a Python int to ``int64``. ``sum`` of bool and
  integer tensors narrower than 64 bits counts in ``int64``; ``mean`` of them is
  an error (as in torch).
* ``matmul``/``gemm`` return ``out_dtype`` if given; else the accumulate dtype
  when the operands' policy declares one (``fp8_e4m3 @accum(f32)`` -> ``f32``);
  an operand of integer storage with a float accumulate type (a ``@ts.precision_policy``
  like the guide's ``QuantizedPolicy``) is first cast to that type (exact for int8);
  else the operands' own type and policy (``bf16 x bf16 -> bf16``, accumulated
  in f32).
* Reductions, normalizations, softmax, attention and shape ops keep the input type.
"""

from __future__ import annotations

import builtins
import math
import numbers
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    ComplexType,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    NoneAttr,
    StringAttr,
    TensorType,
    UnitAttr,
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
from tessera.ir.attrs import REDUCTIONS, tensor_type
from tessera.ir.dtypes import bool_, dtype_of, fp32, fp64, int64
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


def constant(value: Any, dtype: Any = None, *, like: TracedTensor | None = None) -> TracedTensor:
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
    re = constant(float(np.real(x)), dtype=part, like=like)
    im = constant(float(np.imag(x)), dtype=part, like=like)
    return complex(re, im)


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
}


_INT_TO_FLOAT = frozenset({"exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid"})
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


# --------------------------------------------------------------------------- reductions


def _reduce(
    opcls: type[g.ReductionOp], opname: str, x: Any, axis: Any, keepdims: bool
) -> TracedTensor:
    if not isinstance(x, TracedTensor):
        current_trace(opname)
        raise TesseraTypeError(located(f"{opname}: expected a tensor, got {type(x).__name__}"))
    rank = x.ndim
    if axis is None:
        axes = list(range(rank))
    else:
        raw = [axis] if isinstance(axis, numbers.Integral) else _ints(axis, f"{opname} axis")
        axes = [_norm_axis(opname, _int(a, f"{opname} axis"), rank) for a in raw]
        if len(set(axes)) != len(axes):
            raise ShapeError(located(f"{opname}: repeated axis in {raw}"))
    if opcls in (g.MaxOp, g.MinOp) and any(x.shape[a] == 0 for a in axes):
        raise ShapeError(
            located(
                f"{opname} of {g.fmt_shape(x.shape)} over an empty axis: the reduction has no "
                "identity"
            )
        )
    if keepdims:
        shape = [1 if i in axes else d for i, d in enumerate(x.shape)]
    else:
        shape = [d for i, d in enumerate(x.shape) if i not in axes]
    props = _dense_props("axes", sorted(axes) if axis is not None else [])
    if keepdims:
        props["keepdims"] = UnitAttr()
    return _emit(
        opcls,
        x.trace,
        operands=[x.value],
        result_types=[result_type(shape, x.type)],
        properties=props,
    )


def _narrow_int(x: Any) -> bool:
    """True for a bool or integer tensor narrower than 64 bits."""
    return (
        isinstance(x, TracedTensor)
        and not x.is_complex
        and not x.dtype.is_float
        and x.dtype != int64
    )


def sum(x: Any, axis: Any = None, keepdims: bool = False) -> TracedTensor:  # noqa: A001
    """Sum over ``axis`` (an int, a tuple, or None for all), in a fixed order.

    Bool and narrow integer tensors are summed as ``int64`` (a count for bool),
    as in torch and numpy."""
    if _narrow_int(x):
        x = cast(x, int64)
    return _reduce(g.SumOp, "sum", x, axis, keepdims)


def max(x: Any, axis: Any = None, keepdims: bool = False) -> TracedTensor:  # noqa: A001
    """Maximum over ``axis`` (None: all axes)."""
    return _reduce(g.MaxOp, "max", x, axis, keepdims)


def min(x: Any, axis: Any = None, keepdims: bool = False) -> TracedTensor:  # noqa: A001
    """Minimum over ``axis`` (None: all axes)."""
    return _reduce(g.MinOp, "min", x, axis, keepdims)


def mean(x: Any, axis: Any = None, keepdims: bool = False) -> TracedTensor:
    """Arithmetic mean over ``axis`` (None: all axes) of a float tensor."""
    if isinstance(x, TracedTensor) and not x.is_complex and not x.dtype.is_float:
        raise TesseraTypeError(
            located(f"mean of a {x.dtype!r} tensor: convert it to a float type with ts.cast")
        )
    return _reduce(g.MeanOp, "mean", x, axis, keepdims)


# --------------------------------------------------------------------------- nn ops


def _tensor_arg(x: Any, opname: str, what: str = "operand") -> TracedTensor:
    if not isinstance(x, TracedTensor):
        current_trace(opname)
        raise TesseraTypeError(
            located(f"{opname}: {what} must be a tensor, got {type(x).__name__}")
        )
    return x


def softmax(x: Any, axis: int = -1) -> TracedTensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``."""
    x = _tensor_arg(x, "softmax")
    ax = _norm_axis("softmax", axis, x.ndim)
    return _emit(
        g.SoftmaxOp,
        x.trace,
        operands=[x.value],
        result_types=[x.type],
        properties={"axis": IntegerAttr(ax, i64)},
    )


def layernorm(
    x: Any, weight: Any = None, bias: Any = None, *, eps: float = 1e-5
) -> TracedTensor:
    """Layer normalization over the last dim, optional ``weight`` and ``bias`` of size [D]."""
    x = _tensor_arg(x, "layernorm")
    w = _as_tensor(weight, "layernorm", x) if weight is not None else None
    b = _as_tensor(bias, "layernorm", x) if bias is not None else None
    return _emit(
        g.LayerNormOp,
        x.trace,
        operands=_named_operands(
            g.LayerNormOp,
            input=x.value,
            weight=w.value if w is not None else None,
            bias=b.value if b is not None else None,
        ),
        result_types=[x.type],
        properties={"eps": FloatAttr(_float(eps, "layernorm eps"), f64)},
    )


def rmsnorm(x: Any, weight: Any = None, *, eps: float = 1e-6) -> TracedTensor:
    """RMS normalization over the last dim, optional ``weight`` of size [D]."""
    x = _tensor_arg(x, "rmsnorm")
    w = _as_tensor(weight, "rmsnorm", x) if weight is not None else None
    return _emit(
        g.RMSNormOp,
        x.trace,
        operands=_named_operands(
            g.RMSNormOp, input=x.value, weight=w.value if w is not None else None
        ),
        result_types=[x.type],
        properties={"eps": FloatAttr(_float(eps, "rmsnorm eps"), f64)},
    )


layernorm_safe = layernorm
rmsnorm_safe = rmsnorm


def matmul_result_policy(
    a: NumericPolicy, b: NumericPolicy, out_dtype: Any = None
) -> NumericPolicy:
    """The result policy of ``matmul(a, b)`` (see the module docstring)."""
    if out_dtype is not None:
        return _policy(out_dtype, "matmul out_dtype")
    acc = a.accum or b.accum
    if acc is not None:
        return NumericPolicy(acc)
    return a


def _quantized_operand(x: TracedTensor) -> TracedTensor:
    """A matmul operand of integer storage with a float ``@accum`` (a
    ``@ts.precision_policy`` such as the guide's ``QuantizedPolicy``: int8 storage, f32
    accumulate) converted to its accumulate type, exactly, so that products and sums are
    computed there; other operands as they are."""
    p = x.policy
    if p.storage.kind != "float" and p.accum is not None and p.accum.kind == "float":
        return cast(x, p.accum)
    return x


def matmul(
    a: Any,
    b: Any,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    tile_shape: Sequence[int] | None = None,
    out_dtype: Any = None,
) -> TracedTensor:
    """Matrix product with batch broadcasting; ``tile_shape=(BM, BN, BK)`` is a lowering hint."""
    x, y = (_quantized_operand(v) for v in _operands("matmul", a, b))
    _check_same_elem("matmul", x, y)
    r = g.MatmulOp.infer_shape(x.shape, y.shape, transpose_a, transpose_b)
    if isinstance(r, str):
        raise ShapeError(located(f"matmul {r}"))
    pol = matmul_result_policy(x.policy, y.policy, out_dtype)
    props: dict[str, Attribute] = {}
    if transpose_a:
        props["transpose_lhs"] = UnitAttr()
    if transpose_b:
        props["transpose_rhs"] = UnitAttr()
    if tile_shape is not None:
        props.update(_dense_props("tile_shape", tile_shape))
    return _emit(
        g.MatmulOp,
        x.trace,
        operands=[x.value, y.value],
        result_types=[tensor_type(r, pol)],
        properties=props,
    )


def gemm(a: Any, b: Any, **kw: Any) -> TracedTensor:
    """``matmul`` under its BLAS name (same op, same keywords)."""
    return matmul(a, b, **kw)


def flash_attention(
    q: Any, k: Any, v: Any, *, scale: float | None = None, causal: bool = False
) -> TracedTensor:
    """Fused ``softmax(scale * q kᵀ [+ causal mask]) v`` (scale defaults to 1/sqrt(D))."""
    q, k, v = _operands("flash_attention", q, k, v)
    props: dict[str, Attribute] = {}
    if scale is not None:
        props["scale"] = FloatAttr(_float(scale, "flash_attention scale"), f64)
    if causal:
        props["causal"] = UnitAttr()
    shape = (*q.shape[:-1], v.shape[-1]) if q.ndim >= 1 and v.ndim >= 1 else q.shape
    return _emit(
        g.FlashAttentionOp,
        q.trace,
        operands=[q.value, k.value, v.value],
        result_types=[result_type(shape, q.type)],
        properties=props,
    )


def conv2d(
    x: Any,
    weight: Any,
    bias: Any = None,
    *,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
) -> TracedTensor:
    """2-D cross-correlation: NCHW input, OIHW weight, optional bias [O]."""
    x, w = _operands("conv2d", x, weight)
    b = _as_tensor(bias, "conv2d", x) if bias is not None else None
    st = [stride, stride] if isinstance(stride, int) else list(stride)
    pd = [padding, padding] if isinstance(padding, int) else list(padding)
    _check_same_elem("conv2d", x, w)
    if len(st) != 2 or len(pd) != 2 or builtins.min(st) < 1 or builtins.min(pd) < 0:
        raise ShapeError(
            located("conv2d stride needs two sizes >= 1 and padding two sizes >= 0")
        )
    r = g.Conv2dOp.infer_shape(x.shape, w.shape, st, pd)
    if isinstance(r, str):
        raise ShapeError(located(f"conv2d {r}"))
    props = _dense_props("stride", st)
    props.update(_dense_props("padding", pd))
    return _emit(
        g.Conv2dOp,
        x.trace,
        operands=_named_operands(
            g.Conv2dOp, input=x.value, weight=w.value, bias=b.value if b is not None else None
        ),
        result_types=[result_type(r, x.type)],
        properties=props,
    )


def mse(pred: Any, target: Any) -> TracedTensor:
    """Mean squared error ``mean((pred - target)**2)`` (rank 0)."""
    x, y = _operands("mse", pred, target)
    _check_same_elem("mse", x, y)
    _broadcast("mse", x, y)
    return _emit(
        g.MSEOp, x.trace, operands=[x.value, y.value], result_types=[result_type((), x.type)]
    )


# --------------------------------------------------------------------------- shape ops


def transpose(x: Any, *dims: Any) -> TracedTensor:
    """Permute dims.

    ``transpose(x)`` swaps the last two dims; ``transpose(x, d0, d1)`` swaps two
    dims (torch style, at every rank: ``transpose(x, 0, 1)`` of a matrix is its
    transpose); ``transpose(x, perm)`` with a list or tuple, or ``transpose(x, *perm)``
    with a full permutation of three or more dims, reorders all dims (numpy style).
    """
    x = _tensor_arg(x, "transpose")
    rank = x.ndim
    if len(dims) == 1 and isinstance(dims[0], tuple | list):
        perm = _ints(dims[0], "transpose permutation")
    elif not dims:
        if rank < 2:
            raise ShapeError(located(f"transpose: needs rank >= 2, got {g.fmt_shape(x.shape)}"))
        perm = [*range(rank - 2), rank - 1, rank - 2]
    elif len(dims) == 2:
        a, b = (_norm_axis("transpose", _int(d, "transpose dim"), rank) for d in dims)
        perm = list(range(rank))
        perm[a], perm[b] = perm[b], perm[a]
    else:
        perm = _ints(dims, "transpose permutation")
    if sorted(p % builtins.max(rank, 1) for p in perm) != list(range(rank)) or len(perm) != rank:
        raise ShapeError(
            located(f"transpose permutation {perm} is not a permutation of {rank} dims")
        )
    perm = [p % rank for p in perm]
    shape = [x.shape[p] for p in perm]
    return _emit(
        g.TransposeOp,
        x.trace,
        operands=[x.value],
        result_types=[result_type(shape, x.type)],
        properties=_dense_props("permutation", perm),
    )


def reshape(x: Any, shape: Sequence[int]) -> TracedTensor:
    """Same elements in row-major order, new ``shape`` (one dim may be -1)."""
    x = _tensor_arg(x, "reshape")
    shape = _ints(shape, "reshape shape")
    n = int(np.prod(x.shape, dtype=np.int64))
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise ShapeError(located(f"reshape: bad target shape {shape}"))
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or n % known:
            raise ShapeError(
                located(f"reshape cannot reshape {g.fmt_shape(x.shape)} ({n} elements) to {shape}")
            )
        shape[shape.index(-1)] = n // known
    return _emit(g.ReshapeOp, x.trace, operands=[x.value], result_types=[result_type(shape, x.type)])


def broadcast_to(x: Any, shape: Sequence[int]) -> TracedTensor:
    """Broadcast ``x`` to ``shape`` with numpy rules."""
    x = _tensor_arg(x, "broadcast_to")
    return _emit(
        g.BroadcastOp,
        x.trace,
        operands=[x.value],
        result_types=[result_type(_shape(shape, "broadcast_to shape"), x.type)],
    )


def slice(  # noqa: A001
    x: Any, start: Sequence[int], limit: Sequence[int], stride: Sequence[int] | None = None
) -> TracedTensor:
    """Static strided slice ``x[start:limit:stride]`` per dimension."""
    x = _tensor_arg(x, "slice")
    stride = [1] * len(start) if stride is None else list(stride)
    shape = [
        builtins.max(0, (b - a + c - 1) // c) if c > 0 else 0
        for a, b, c in zip(start, limit, stride)
    ]
    if len(shape) != x.ndim or len(limit) != x.ndim or len(stride) != x.ndim:
        raise ShapeError(located(f"slice: start/limit/stride need {x.ndim} entries each"))
    props = _dense_props("start", start)
    props.update(_dense_props("limit", limit))
    props.update(_dense_props("stride", stride))
    return _emit(
        g.SliceOp,
        x.trace,
        operands=[x.value],
        result_types=[result_type(shape, x.type)],
        properties=props,
    )


def _index_array(i: Any) -> np.ndarray | None:
    """A static integer or bool index array (numpy, list, CPU torch tensor), else None."""
    if isinstance(i, list):
        i = np.asarray(i)
        if i.size == 0:
            i = i.astype(np.int64)
    elif _is_array(i):
        from tessera.runtime.convert import to_numpy

        i = to_numpy(i, where="index")
    if not isinstance(i, np.ndarray):
        return None
    if i.dtype.kind not in "biu":
        raise TesseraTypeError(located(f"index: an index array must hold ints or bools, got {i.dtype}"))
    return i


def _gather(x: TracedTensor, dim: int, arr: np.ndarray) -> TracedTensor:
    """``x`` indexed along ``dim`` by the 1-D static int or bool array ``arr`` (numpy's
    ``x[..., arr, ...]``), as a concatenation of slices (one per run of consecutive
    indices)."""
    n = x.shape[dim]
    if arr.dtype == np.bool_:
        if arr.ndim != 1 or arr.shape[0] != n:
            raise ShapeError(
                located(f"index: a bool mask of shape {list(arr.shape)} for dim {dim} of size {n}")
            )
        arr = np.flatnonzero(arr)
    if arr.ndim != 1:
        raise TesseraTypeError(
            located(f"index: only 1-D index arrays are supported, got shape {list(arr.shape)}")
        )
    bad = (arr < -n) | (arr >= n)
    if np.any(bad):
        v = int(arr[np.argmax(bad)])
        raise ShapeError(located(f"index {v} out of range for dim {dim} of size {n}"))
    idx = [int(v) % n for v in arr]
    runs: list[tuple[int, int]] = []
    for v in idx:
        if runs and runs[-1][1] == v:
            runs[-1] = (runs[-1][0], v + 1)
        else:
            runs.append((v, v + 1))
    if not runs:
        runs = [(0, 0)]
    parts = []
    for a, b in runs:
        start, limit = [0] * x.ndim, list(x.shape)
        start[dim], limit[dim] = a, b
        parts.append(slice(x, start, limit))
    return parts[0] if len(parts) == 1 else concat(parts, axis=dim)


def getitem(x: TracedTensor, index: Any) -> TracedTensor:
    """``x[...]`` with ints, slices (positive steps), one Ellipsis and at most one 1-D
    static index array (ints or a bool mask; numpy, list or CPU torch): gather, slice,
    then reshape."""
    idx = index if isinstance(index, tuple) else (index,)
    if builtins.sum(1 for i in idx if i is Ellipsis) > 1:
        raise TesseraTypeError(located("index: at most one Ellipsis"))
    k = next((k for k, i in enumerate(idx) if i is Ellipsis), None)
    if k is not None:
        fill = x.ndim - (len(idx) - 1)
        idx = idx[:k] + (builtins.slice(None),) * fill + idx[k + 1 :]
    if len(idx) > x.ndim:
        raise ShapeError(located(f"index: too many indices for rank {x.ndim}"))
    idx = idx + (builtins.slice(None),) * (x.ndim - len(idx))
    arrays = {d: a for d, i in enumerate(idx) if (a := _index_array(i)) is not None}
    for d in [d for d, a in arrays.items() if a.ndim == 0 and a.dtype != np.bool_]:
        idx = idx[:d] + (int(arrays.pop(d)),) + idx[d + 1 :]
    if len(arrays) > 1:
        raise TesseraTypeError(located("index: at most one index array is supported"))
    if arrays:
        ((d, arr),) = arrays.items()
        x = _gather(x, d, arr)
        idx = idx[:d] + (builtins.slice(None),) + idx[d + 1 :]
    start, limit, stride, keep = [], [], [], []
    for d, (i, n) in enumerate(zip(idx, x.shape)):
        if isinstance(i, builtins.slice):
            a, b, c = i.indices(n)
            if c < 1:
                raise TesseraTypeError(located("index: negative slice steps are not supported"))
            b = builtins.max(a, b)
            start.append(a), limit.append(b), stride.append(c)
            keep.append((b - a + c - 1) // c)
        elif isinstance(i, numbers.Integral):
            j = int(i) + n if i < 0 else int(i)
            if not 0 <= j < n:
                raise ShapeError(located(f"index {int(i)} out of range for dim {d} of size {n}"))
            start.append(j), limit.append(j + 1), stride.append(1)
        else:
            raise TesseraTypeError(
                located(f"index: unsupported index {i!r}; use ints, slices or ...")
            )
    y = slice(x, start, limit, stride)
    return y if list(y.shape) == keep else reshape(y, keep)


def concat(xs: Sequence[Any], axis: int = 0) -> TracedTensor:
    """Concatenate tensors along ``axis``."""
    if not isinstance(xs, list | tuple) or not xs:
        current_trace("concat")
        raise TesseraTypeError(located("concat: expects a non-empty list of tensors"))
    ts_ = _operands("concat", *xs)
    _check_same_elem("concat", *ts_)
    if ts_[0].ndim == 0:
        raise ShapeError(
            located("concat: rank-0 tensors cannot be concatenated; reshape them to [1] first")
        )
    ax = _norm_axis("concat", axis, ts_[0].ndim)
    shape = list(ts_[0].shape)
    for i, t in enumerate(ts_):
        if t.ndim != len(shape) or any(
            a != b for j, (a, b) in enumerate(zip(t.shape, ts_[0].shape)) if j != ax
        ):
            raise ShapeError(
                located(
                    f"concat operand {i} has shape {g.fmt_shape(t.shape)}, incompatible with "
                    f"{g.fmt_shape(ts_[0].shape)} outside axis {ax}"
                )
            )
    shape[ax] = builtins.sum(t.shape[ax] for t in ts_)
    return _emit(
        g.ConcatOp,
        ts_[0].trace,
        operands=[[t.value for t in ts_]],
        result_types=[result_type(shape, ts_[0].type)],
        properties={"axis": IntegerAttr(ax, i64)},
    )


def split_qkv(qkv: Any, heads: int) -> tuple[TracedTensor, TracedTensor, TracedTensor]:
    """Split a fused ``[..., S, 3*H*Dh]`` projection into q, k, v of shape ``[..., H, S, Dh]``."""
    x = _tensor_arg(qkv, "split_qkv")
    if x.ndim < 2:
        raise ShapeError(located(f"split_qkv needs rank >= 2, got {g.fmt_shape(x.shape)}"))
    *batch, s, f = x.shape
    if heads < 1 or f % (3 * heads):
        raise ShapeError(
            located(f"split_qkv last dim {f} is not divisible by 3 * heads = {3 * heads}")
        )
    width = f // 3
    dh = width // heads
    out = []
    for part in range(3):
        start = [0] * x.ndim
        limit = list(x.shape)
        start[-1], limit[-1] = part * width, (part + 1) * width
        p = slice(x, start, limit)
        p = reshape(p, [*batch, s, heads, dh])
        r = len(batch)
        p = transpose(p, [*range(r), r + 1, r, r + 2])
        out.append(p)
    return out[0], out[1], out[2]


# --------------------------------------------------------------------------- scientific ops


def _complex_type(x: TracedTensor, opname: str) -> Attribute:
    el = x.type.element_type
    if isinstance(el, ComplexType):
        return el
    if el in (f32, f64):
        return ComplexType(el)
    raise TesseraTypeError(located(f"{opname}: needs f32, f64 or complex input, got {el}"))


def _check_fft_size(x: TracedTensor, opname: str, ndims: int) -> None:
    if x.ndim >= ndims and 0 in x.shape[-ndims:]:
        raise ShapeError(
            located(f"{opname} of {g.fmt_shape(x.shape)}: a transform of 0 points is undefined")
        )


def fft(x: Any, *, inverse: bool = False) -> TracedTensor:
    """Discrete Fourier transform along the last dim (complex result)."""
    x = _tensor_arg(x, "fft")
    _check_fft_size(x, "fft", 1)
    rt = TensorType(_complex_type(x, "fft"), list(x.shape))
    return _emit(
        g.FFTOp, x.trace, operands=[x.value], result_types=[rt],
        properties={"inverse": UnitAttr()} if inverse else {},
    )


def ifft(x: Any) -> TracedTensor:
    """Inverse DFT along the last dim (normalized by 1/n)."""
    return fft(x, inverse=True)


def fft2d(x: Any, *, inverse: bool = False) -> TracedTensor:
    """2-D DFT over the last two dims (complex result)."""
    x = _tensor_arg(x, "fft2d")
    _check_fft_size(x, "fft2d", 2)
    rt = TensorType(_complex_type(x, "fft2d"), list(x.shape))
    return _emit(
        g.FFT2dOp, x.trace, operands=[x.value], result_types=[rt],
        properties={"inverse": UnitAttr()} if inverse else {},
    )


def ifft2d(x: Any) -> TracedTensor:
    """Inverse 2-D DFT (normalized)."""
    return fft2d(x, inverse=True)


def cholesky(x: Any) -> TracedTensor:
    """Lower Cholesky factor of symmetric positive-definite matrices [..., n, n]."""
    x = _tensor_arg(x, "cholesky")
    return _emit(g.CholeskyOp, x.trace, operands=[x.value], result_types=[x.type])


def svd(x: Any) -> tuple[TracedTensor, TracedTensor, TracedTensor]:
    """Reduced SVD: returns (U, S, Vh) with ``x = U diag(S) Vh``."""
    x = _tensor_arg(x, "svd")
    if x.ndim < 2:
        raise ShapeError(located(f"svd needs rank >= 2, got {g.fmt_shape(x.shape)}"))
    *b, m, n = x.shape
    k = builtins.min(m, n)
    op = x.trace.add(
        g.SVDOp.build(
            operands=[x.value],
            result_types=[
                result_type((*b, m, k), x.type),
                result_type((*b, k), x.type),
                result_type((*b, k, n), x.type),
            ],
        )
    )
    u, s, vh = (TracedTensor(r, x.trace) for r in op.results)
    return u, s, vh


def spmm(
    indptr: Any, indices: Any, values: Any, dense: Any, sparse_shape: Sequence[int]
) -> TracedTensor:
    """CSR sparse [M, K] (``indptr``, ``indices``, ``values``) times ``dense`` [K, N]."""
    ts_ = _operands("spmm", indptr, indices, values, dense)
    dims = _shape(sparse_shape, "spmm sparse_shape")
    if len(dims) != 2:
        raise ShapeError(located(f"spmm sparse_shape must be [M, K], got {dims}"))
    m = dims[0]
    d = ts_[3]
    shape = (m, d.shape[1] if d.ndim == 2 else 0)
    return _emit(
        g.SpMMOp,
        d.trace,
        operands=[t.value for t in ts_],
        result_types=[result_type(shape, d.type)],
        properties=_dense_props("sparse_shape", sparse_shape),
    )


# --------------------------------------------------------------------------- complex parts, triangular solve


def _complex_part(opcls: type[g.IRDLOperation], opname: str, x: Any) -> TracedTensor:
    x = _tensor_arg(x, opname)
    el = x.type.element_type
    if not isinstance(el, ComplexType):
        raise TesseraTypeError(located(f"{opname}: needs a complex tensor, got {el}"))
    return _emit(
        opcls, x.trace, operands=[x.value], result_types=[TensorType(el.element_type, list(x.shape))]
    )


def real(x: Any) -> TracedTensor:
    """Real part of a complex tensor (``complex<f32>`` -> ``f32``)."""
    return _complex_part(g.RealOp, "real", x)


def imag(x: Any) -> TracedTensor:
    """Imaginary part of a complex tensor (``complex<f32>`` -> ``f32``)."""
    return _complex_part(g.ImagOp, "imag", x)


def complex(re: Any, im: Any) -> TracedTensor:  # noqa: A001
    """``re + i * im`` from two f32 (or f64) tensors of one shape."""
    a, b = _operands("complex", re, im)
    _check_same_elem("complex", a, b)
    el = a.type.element_type
    if el not in (f32, f64):
        raise TesseraTypeError(located(f"complex: needs f32 or f64 parts, got {el}"))
    if tuple(a.shape) != tuple(b.shape):
        raise ShapeError(
            located(f"complex: parts have shapes {g.fmt_shape(a.shape)} and {g.fmt_shape(b.shape)}")
        )
    return _emit(
        g.ComplexOp,
        a.trace,
        operands=[a.value, b.value],
        result_types=[TensorType(ComplexType(el), list(a.shape))],
    )


def triangular_solve(
    a: Any, b: Any, *, upper: bool = False, transpose_a: bool = False
) -> TracedTensor:
    """Solve ``op(A) X = B`` for triangular A [..., n, n] and B [..., n, k]
    (``op(A) = Aᵀ`` with ``transpose_a``); only A's lower (or ``upper``) triangle is read."""
    x, y = _operands("triangular_solve", a, b)
    _check_same_elem("triangular_solve", x, y)
    sa, sb = tuple(x.shape), tuple(y.shape)
    if len(sa) < 2 or sa[-1] != sa[-2] or len(sb) != len(sa) or sb[-2] != sa[-1] or sa[:-2] != sb[:-2]:
        raise ShapeError(
            located(
                f"triangular_solve needs A [..., n, n] and B [..., n, k] with one batch shape, "
                f"got {g.fmt_shape(sa)} and {g.fmt_shape(sb)}"
            )
        )
    props: dict[str, Attribute] = {}
    if upper:
        props["upper"] = UnitAttr()
    if transpose_a:
        props["transpose_a"] = UnitAttr()
    return _emit(
        g.TriangularSolveOp,
        x.trace,
        operands=[x.value, y.value],
        result_types=[y.type],
        properties=props,
    )


# --------------------------------------------------------------------------- random


def randn(
    shape: Sequence[int], dtype: Any = fp32, *, seed: int = 0, offset: int | None = None
) -> TracedTensor:
    """Standard-normal samples; ``(seed, offset)`` fix the stream (offset defaults to a
    per-function counter, so two calls give different values)."""
    trace = current_trace("randn")
    pol = _policy(dtype, "randn")
    off = trace.next_seed() if offset is None else _int(offset, "randn offset")
    return _emit(
        g.RandnOp,
        trace,
        result_types=[tensor_type(_shape(shape, "randn shape"), pol)],
        properties={
            "seed": IntegerAttr(_int(seed, "randn seed"), i64), "offset": IntegerAttr(off, i64)
        },
    )


def poisson(lam: Any, *, seed: int = 0, offset: int | None = None) -> TracedTensor:
    """Poisson samples with rates ``lam`` (result has ``lam``'s type)."""
    x = _tensor_arg(lam, "poisson", "lam")
    off = x.trace.next_seed() if offset is None else _int(offset, "poisson offset")
    return _emit(
        g.PoissonOp,
        x.trace,
        operands=[x.value],
        result_types=[x.type],
        properties={
            "seed": IntegerAttr(_int(seed, "poisson seed"), i64), "offset": IntegerAttr(off, i64)
        },
    )


# --------------------------------------------------------------------------- collectives


def _reduction_name(op: str, opname: str) -> str:
    if op not in REDUCTIONS:
        raise TesseraTypeError(
            located(f"{opname}: unknown reduction '{op}'; valid: {', '.join(REDUCTIONS)}")
        )
    return op


def all_reduce(
    x: Any, op: str = "sum", axis: str = "dp", *, nondeterministic: bool = False
) -> TracedTensor:
    """Reduce over mesh axis ``axis``; every rank gets the result."""
    x = _tensor_arg(x, "all_reduce")
    _reduction_name(op, "all_reduce")
    x.trace.axis_size(axis, "all_reduce")
    props: dict[str, Attribute] = {"op": StringAttr(op), "axis": StringAttr(axis)}
    if nondeterministic:
        props["nondeterministic"] = UnitAttr()
    return _emit(g.AllReduceOp, x.trace, operands=[x.value], result_types=[x.type], properties=props)


def all_gather(x: Any, axis: str = "tp", dim: int = -1) -> TracedTensor:
    """Concatenate every rank's block along ``dim`` (default: the last), in rank order."""
    x = _tensor_arg(x, "all_gather")
    d = _norm_axis("all_gather", dim, x.ndim)
    size = x.trace.axis_size(axis, "all_gather")
    shape = list(x.shape)
    shape[d] *= size
    return _emit(
        g.AllGatherOp,
        x.trace,
        operands=[x.value],
        result_types=[result_type(shape, x.type)],
        properties={"axis": StringAttr(axis), "dim": IntegerAttr(d, i64)},
    )


def reduce_scatter(x: Any, op: str = "sum", axis: str = "tp", dim: int = -1) -> TracedTensor:
    """Reduce over ``axis``, then rank r keeps block r of ``dim`` (default: the last)."""
    x = _tensor_arg(x, "reduce_scatter")
    _reduction_name(op, "reduce_scatter")
    d = _norm_axis("reduce_scatter", dim, x.ndim)
    size = x.trace.axis_size(axis, "reduce_scatter")
    shape = list(x.shape)
    if shape[d] % size:
        raise ShapeError(
            located(f"reduce_scatter dim {d} of size {shape[d]} does not split over {size} ranks")
        )
    shape[d] //= size
    return _emit(
        g.ReduceScatterOp,
        x.trace,
        operands=[x.value],
        result_types=[result_type(shape, x.type)],
        properties={"op": StringAttr(op), "axis": StringAttr(axis), "dim": IntegerAttr(d, i64)},
    )


def all_to_all(x: Any, axis: str = "tp", split_dim: int = 0, concat_dim: int = 0) -> TracedTensor:
    """Split ``split_dim`` into one block per rank, exchange, concatenate along ``concat_dim``."""
    x = _tensor_arg(x, "all_to_all")
    sd = _norm_axis("all_to_all", split_dim, x.ndim)
    cd = _norm_axis("all_to_all", concat_dim, x.ndim)
    size = x.trace.axis_size(axis, "all_to_all")
    shape = list(x.shape)
    if shape[sd] % size:
        raise ShapeError(
            located(f"all_to_all dim {sd} of size {shape[sd]} does not split over {size} ranks")
        )
    shape[sd] //= size
    shape[cd] *= size
    return _emit(
        g.AllToAllOp,
        x.trace,
        operands=[x.value],
        result_types=[result_type(shape, x.type)],
        properties={
            "axis": StringAttr(axis),
            "split_dim": IntegerAttr(sd, i64),
            "concat_dim": IntegerAttr(cd, i64),
        },
    )


def all_slice(x: Any, axis: str = "tp", dim: int = -1) -> TracedTensor:
    """Keep this rank's block of ``dim`` (default: the last) along ``axis``, without
    communication: the inverse of ``all_gather``."""
    x = _tensor_arg(x, "all_slice")
    d = _norm_axis("all_slice", dim, x.ndim)
    size = x.trace.axis_size(axis, "all_slice")
    shape = list(x.shape)
    if shape[d] % size:
        raise ShapeError(
            located(f"all_slice dim {d} of size {shape[d]} does not split over {size} ranks")
        )
    shape[d] //= size
    return _emit(
        g.AllSliceOp,
        x.trace,
        operands=[x.value],
        result_types=[result_type(shape, x.type)],
        properties={"axis": StringAttr(axis), "dim": IntegerAttr(d, i64)},
    )


def send(x: Any, axis: str = "pp", peer: int = 1) -> None:
    """Send ``x`` to the rank ``peer`` steps along mesh axis ``axis``."""
    x = _tensor_arg(x, "send")
    x.trace.axis_size(axis, "send")
    x.trace.add(
        g.SendOp.build(
            operands=[x.value],
            properties={"axis": StringAttr(axis), "peer": IntegerAttr(_int(peer, "send peer"), i64)},
        )
    )


def recv(shape: Sequence[int], dtype: Any, axis: str = "pp", peer: int = -1) -> TracedTensor:
    """Receive a tensor of ``shape``/``dtype`` from the rank ``peer`` steps along ``axis``."""
    trace = current_trace("recv")
    trace.axis_size(axis, "recv")
    pol = _policy(dtype, "recv")
    return _emit(
        g.RecvOp,
        trace,
        result_types=[tensor_type(_shape(shape, "recv shape"), pol)],
        properties={"axis": StringAttr(axis), "peer": IntegerAttr(_int(peer, "recv peer"), i64)},
    )


# --------------------------------------------------------------------------- numpy ufuncs


def _ufunc_table() -> dict[str, Any]:
    return {
        "add": add, "subtract": sub, "multiply": mul, "divide": div, "true_divide": div,
        "power": pow, "maximum": maximum, "minimum": minimum, "matmul": matmul,
        "less": lt, "less_equal": le, "greater": gt, "greater_equal": ge, "equal": eq,
        "not_equal": ne, "negative": neg, "positive": lambda x: x, "absolute": abs,
        "exp": exp, "log": log, "sqrt": sqrt, "tanh": tanh,
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


OP_FUNCTIONS: tuple[str, ...] = (
    "add", "sub", "mul", "div", "pow", "maximum", "minimum",
    "lt", "le", "gt", "ge", "eq", "ne", "where", "select",
    "neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "relu", "gelu", "silu", "sigmoid",
    "round", "cast",
    "sum", "max", "min", "mean",
    "softmax", "layernorm", "rmsnorm", "layernorm_safe", "rmsnorm_safe",
    "matmul", "gemm", "flash_attention", "conv2d", "mse",
    "transpose", "reshape", "broadcast_to", "slice", "concat", "constant", "split_qkv",
    "fft", "ifft", "fft2d", "ifft2d", "cholesky", "svd", "spmm",
    "real", "imag", "complex", "triangular_solve",
    "randn", "poisson",
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_slice", "send", "recv",
)
"""The operator functions exported as ``ts.<name>`` and ``op.<name>``."""


__all__ = [*OP_FUNCTIONS, "pi", "e", "inf", "matmul_result_policy", "getitem", "array_ufunc",
           "array_function"]
