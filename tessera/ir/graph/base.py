"""Shared pieces of the ``tgraph`` ops: the tensor constraint, the assembly format, shape and
element-type helpers and the checks verifiers share."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    ComplexType,
    IntegerType,
    TensorType,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from tessera.ir import literals
from tessera.ir.attrs import MeshAttr

TensorT = TensorType.constr()

literals.install()  # dense float literals print in a form that re-parses bit for bit

_FN = "attr-dict `:` functional-type(operands, results)"


# --------------------------------------------------------------------------- helpers


def shape_of(v: SSAValue | Attribute) -> tuple[int, ...]:
    t = v.type if isinstance(v, SSAValue) else v
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def elem_of(v: SSAValue | Attribute) -> Attribute:
    t = v.type if isinstance(v, SSAValue) else v
    assert isinstance(t, TensorType)
    return t.element_type


def fmt_shape(s: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in s) + "]"


def broadcast_shapes(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """Numpy broadcasting of two shapes, or None if they do not broadcast."""
    out: list[int] = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and x != 1 and y != 1:
            return None
        out.append(max(x, y) if min(x, y) != 0 else 0)
    return tuple(reversed(out))


def _norm_axes(axes: Sequence[int], rank: int, op: str) -> list[int]:
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise VerifyException(f"{op}: axis {a} out of range for rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise VerifyException(f"{op}: repeated axis in {list(axes)}")
    return out


def _is_float(t: Attribute) -> bool:
    return not isinstance(t, IntegerType | ComplexType)


def _check_same_elem(op: Operation, *vals: SSAValue | Attribute) -> None:
    ts = [elem_of(v) for v in vals]
    if any(t != ts[0] for t in ts):
        raise VerifyException(
            f"{op.name}: element types differ: " + ", ".join(str(t) for t in ts)
        )


def _check_shape(op: Operation, what: str, got: Sequence[int], want: Sequence[int]) -> None:
    if tuple(got) != tuple(want):
        raise VerifyException(
            f"{op.name}: {what} has shape {fmt_shape(got)}, expected {fmt_shape(want)}"
        )


def _mesh_axis_size(op: Operation, axis: str) -> int | None:
    """Size of mesh axis ``axis`` from the nearest enclosing ``tessera.mesh`` attribute."""
    p: Operation | None = op.parent_op()
    while p is not None:
        m = p.attributes.get("tessera.mesh")
        if isinstance(m, MeshAttr):
            sizes = m.as_dict()
            if axis not in sizes:
                raise VerifyException(
                    f"{op.name}: mesh has no axis '{axis}' (axes: {', '.join(sizes)})"
                )
            return sizes[axis]
        p = p.parent_op()
    return None


