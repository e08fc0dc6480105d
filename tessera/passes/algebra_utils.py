"""Helpers shared by the Graph IR algebra passes: reading constants, exact casts,
permutations.

Constants are ``tgraph.constant`` ops; their values are read through the
reference interpreter (:mod:`tessera.runtime.graph_interpreter`), so a pass sees
exactly the array the program computes with (converted to the result type).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    ModuleOp,
    NoneAttr,
    TensorType,
)
from xdsl.interpreter import Interpreter
from xdsl.ir import Attribute, Operation, SSAValue

from tessera.ir import dtypes
from tessera.ir.graph import ConstantOp

FLOATS_WITH_INF = frozenset({"fp64", "fp32", "fp16", "bf16", "fp8_e5m2"})
FLOATS_WITH_NAN = frozenset({"fp64", "fp32", "fp16", "bf16", "fp8_e5m2", "fp8_e4m3"})


def constant_op(v: SSAValue) -> ConstantOp | None:
    """The ``tgraph.constant`` defining ``v``, if any."""
    owner = v.owner
    return owner if isinstance(owner, ConstantOp) else None


def np_dtype_of(t: Attribute) -> np.dtype | None:
    """The numpy storage dtype of an element type, or None if Tessera has none."""
    try:
        return dtypes.from_ir_type(t).np_dtype
    except TypeError:
        return None


_INTERPRETER: Interpreter | None = None


def reference_interpreter() -> Interpreter:
    """A shared reference interpreter (numpy semantics of record) for evaluating ops."""
    global _INTERPRETER
    if _INTERPRETER is None:
        from tessera.runtime.graph_interpreter import make_interpreter

        _INTERPRETER = make_interpreter(ModuleOp([]))
    return _INTERPRETER


def constant_array(op: ConstantOp) -> np.ndarray | None:
    """The value of a constant as the reference interpreter produces it: an array of the
    result's shape and storage dtype (after conversion to the result type)."""
    try:
        return np.asarray(reference_interpreter().run_op(op, ())[0])
    except Exception:
        return None


def splat_value(v: SSAValue) -> float | int | bool | None:
    """The single value of a constant all of whose elements are equal, else None.

    The value is read after conversion to the constant's result type. Floats keep
    their sign of zero (``-0.0`` is distinct from ``0.0``); NaN is never a splat value.
    """
    op = constant_op(v)
    if op is None:
        return None
    vals = op.value.get_values()
    if not vals or isinstance(vals[0], tuple) or any(not _same(x, vals[0]) for x in vals):
        return None
    t = op.result.type
    if not isinstance(t, TensorType) or 0 in t.get_shape():
        return None
    # every element is the stored value converted alike: convert one, as the interpreter
    # stores a constant (a [2048, 1536] bf16 splat took 5 ms to round element by element)
    from tessera.runtime.graph_interpreter import store

    try:
        first = store(np.asarray(vals[0]), TensorType(t.element_type, [], t.encoding)).reshape(-1)[0]
    except Exception:  # a type the interpreter cannot store
        return None
    arr = np.asarray(first)
    if arr.dtype == np.bool_:
        return bool(first)
    if arr.dtype.kind in "iu":
        return int(first)
    x = float(first)
    return None if math.isnan(x) else x


def is_zero(value: float | int | bool | None, *, negative: bool | None) -> bool:
    """``value`` is zero; ``negative`` asks for -0.0 (True), +0.0 (False) or either (None).

    Integer zeros match any request.
    """
    if value is None or isinstance(value, bool) or value != 0:
        return False
    if isinstance(value, int) or negative is None:
        return True
    return (math.copysign(1.0, value) < 0) == negative


def array_to_attr(arr: np.ndarray, t: TensorType) -> DenseIntOrFPElementsAttr | None:
    """A dense attribute of type ``t`` (without encoding) holding ``arr``; a splat when
    all elements are equal. None if the element type has no dense encoding in xDSL."""
    plain = TensorType(t.element_type, t.get_shape())
    flat = arr.reshape(-1)
    dt = arr.dtype
    if dt == np.bool_:
        data: list = [int(x) for x in flat]
    elif dt.kind in "iu":
        data = [int(x) for x in flat]
    else:
        data = [float(x) for x in flat.astype(np.float64)]
    if data and all(_same(x, data[0]) for x in data):
        data = data[:1]
    try:
        attr = DenseIntOrFPElementsAttr.from_list(plain, data)
    except Exception:
        return None
    return attr


def _same(a: float | int, b: float | int) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return a == b


def has_encoding(t: Attribute) -> bool:
    """True when a tensor type carries an encoding (a non-default numeric policy)."""
    return isinstance(t, TensorType) and not isinstance(t.encoding, NoneAttr)


def embeds_exactly(a: Attribute, b: Attribute) -> bool:
    """Every value of element type ``a`` is exactly representable in element type ``b``
    (so a cast from ``a`` to ``b`` loses nothing, and casting back restores it)."""
    if a == b:
        return True
    try:
        da, db = dtypes.from_ir_type(a), dtypes.from_ir_type(b)
    except TypeError:
        return False
    if da.kind == "bool" or db.kind == "bool":
        return False
    if da.kind == "int" and db.kind == "int":
        return da.bits <= db.bits
    if db.kind != "float":
        return False
    fb = ml_dtypes.finfo(db.np_dtype)
    if da.kind == "int":
        # A signed n-bit integer needs n-1 significand bits and magnitude 2**(n-1).
        return da.bits - 1 <= fb.nmant + 1 and float(fb.max) >= 2.0 ** (da.bits - 1)
    fa = ml_dtypes.finfo(da.np_dtype)
    if da.name in FLOATS_WITH_INF and db.name not in FLOATS_WITH_INF:
        return False
    if da.name in FLOATS_WITH_NAN and db.name not in FLOATS_WITH_NAN:
        return False
    return (
        fb.nmant >= fa.nmant
        and float(fb.max) >= float(fa.max)
        and float(fb.smallest_subnormal) <= float(fa.smallest_subnormal)
    )


def is_last_two_swap(perm: Sequence[int]) -> bool:
    """The permutation swaps the last two dims and keeps the others in place."""
    n = len(perm)
    return n >= 2 and list(perm) == [*range(n - 2), n - 1, n - 2]


def single_user(v: SSAValue) -> Operation | None:
    """The one operation using ``v`` (possibly several times), or None."""
    users = {id(u.operation): u.operation for u in v.uses}
    return next(iter(users.values())) if len(users) == 1 else None
