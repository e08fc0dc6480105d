"""Collective operator functions over a mesh axis and point-to-point ``send``/``recv``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdsl.dialects.builtin import (
    IntegerAttr,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute

from tessera.frontend.errors import ShapeError, TesseraTypeError, located
from tessera.frontend.ops.base import (
    _emit,
    _int,
    _norm_axis,
    _policy,
    _shape,
    _tensor_arg,
)
from tessera.frontend.tracing import TracedTensor, current_trace, result_type
from tessera.ir import graph as g
from tessera.ir.attrs import REDUCTIONS, tensor_type

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


