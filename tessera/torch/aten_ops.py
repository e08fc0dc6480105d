"""ATen operators as Tessera operator calls: the rule table and its helpers.

:data:`RULES` maps an ATen overload (``torch.ops.aten.mm.default``...) to a
:class:`Rule`: a ``check`` that says, from the FX node alone (its arguments and
the ``meta["val"]`` fake tensors), whether the node can be translated, and an
``emit`` that appends the Tessera ops for it to the active trace, given the
node's arguments with tensors already translated to :class:`TracedTensor`.

Type promotion is explicit here, since Tessera has none: each rule casts its
operands to the dtype torch computes in (the node's result dtype, or the
promoted dtype of the operands for comparisons) before emitting the op.

The rules themselves live in :mod:`rules_elementwise`, :mod:`rules_nn` and
:mod:`rules_shapes`, which this module imports at its end.

Ops without a rule (sort/topk, random draws...) are not translated: the
partitioner leaves them to eager torch and counts them. Dropout reaches the
partitioner as a draw and elementwise ops (:mod:`tessera.torch.dropout`). A rule that discovers at trace time that it cannot
translate its node raises :class:`Unsupported`, and its partition runs in torch.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.fx

from tessera.errors import TesseraError
from tessera.frontend import ops
from tessera.frontend.tracing import TracedTensor
from tessera.ir.dtypes import DType, dtype_of

aten = torch.ops.aten
prims = torch.ops.prims

SUPPORTED_DTYPES: frozenset[torch.dtype] = frozenset(
    {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
     torch.bool}
)
"""Tensor dtypes a translated node may consume and produce."""

FLOAT_DTYPES: frozenset[torch.dtype] = frozenset(
    {torch.float32, torch.float64, torch.float16, torch.bfloat16}
)


class Unsupported(TesseraError):
    """A node that cannot be translated after all; its partition runs in torch."""


Check = Callable[[torch.fx.Node], str | None]
Emit = Callable[..., Any]


@dataclass(frozen=True)
class Rule:
    """How one ATen overload becomes Tessera ops."""

    emit: Emit
    """``emit(node, *args, **kwargs)``: the result (a TracedTensor or a tuple of them)."""
    check: Check | None = None
    """Extra conditions on the node: None when translatable, else the reason it is not."""
    compute: bool = True
    """False for ops that only move or relabel data (views, copies, getitem): a
    partition of nothing but these stays in torch, where they are free."""


RULES: dict[Any, Rule] = {}


def rule(*targets: Any, check: Check | None = None, compute: bool = True) -> Callable[[Emit], Emit]:
    """Register ``emit`` as the rule of each of ``targets``."""

    def deco(fn: Emit) -> Emit:
        for t in targets:
            RULES[t] = Rule(fn, check, compute)
        return fn

    return deco


# --------------------------------------------------------------------------- helpers


def val(node: Any) -> Any:
    """The fake tensor (or tuple of them) that dynamo recorded for ``node``."""
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def out_dtype(node: torch.fx.Node, index: int | None = None) -> torch.dtype:
    v = val(node)
    if index is not None:
        v = v[index]
    return v.dtype


def ts_dtype(dt: torch.dtype) -> DType:
    return dtype_of(dt)


def torch_dtype(x: TracedTensor) -> torch.dtype:
    dt = x.dtype.torch_dtype
    assert dt is not None
    return dt


def to(x: Any, dt: torch.dtype) -> TracedTensor:
    """``x`` (a traced tensor or a Python number) as a tensor of torch dtype ``dt``."""
    if isinstance(x, TracedTensor):
        return x if torch_dtype(x) == dt else ops.cast(x, ts_dtype(dt))
    if isinstance(x, bool) and dt != torch.bool:
        x = int(x)
    if dt in FLOAT_DTYPES:
        x = float(x)
    elif dt == torch.bool:
        x = bool(x)
    else:
        if isinstance(x, float) and not float(x).is_integer():
            raise Unsupported(f"the number {x!r} in an integer op")
        x = int(x)
    return ops.constant(np.asarray(x, dtype=ts_dtype(dt).np_dtype), ts_dtype(dt))


def promote(*xs: Any) -> torch.dtype:
    """torch's result dtype of an op on ``xs`` (traced tensors and Python numbers)."""
    stand_ins = [
        torch.empty((1,) if x.ndim else (), dtype=torch_dtype(x))
        if isinstance(x, TracedTensor)
        else x
        for x in xs
    ]
    dt = torch.result_type(stand_ins[0], stand_ins[1])
    for s in stand_ins[2:]:
        dt = torch.result_type(torch.empty((1,), dtype=dt), s)
    return dt


def norm_dims(dims: Any, rank: int) -> list[int]:
    if dims is None:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    if len(dims) == 0:
        return list(range(rank))
    return sorted({int(d) % max(rank, 1) for d in dims})


def int_list(sizes: Sequence[Any]) -> list[int]:
    return [int(s) for s in sizes]


def pair(v: Any, default: list[int] | None = None) -> list[int]:
    """A 2-D window's size, stride, padding or dilation: one number (or a one-number
    list: ``F.conv2d(..., padding="valid")`` reaches aten as ``padding=[0]``) for both
    dims; an empty list is ``default``."""
    if isinstance(v, int | torch.SymInt):
        return [int(v), int(v)]
    out = int_list(v)
    if not out and default is not None:
        return list(default)
    return out * 2 if len(out) == 1 else out


def float_only(node: torch.fx.Node) -> str | None:
    dt = out_dtype(node)
    return None if dt in FLOAT_DTYPES else f"{dt} result"


def only_outputs(*keep: int) -> Check:
    """A check: the node's other tuple results are unused."""

    def check(node: torch.fx.Node) -> str | None:
        for u in node.users:
            if u.target is not operator.getitem or u.args[1] not in keep:
                return f"result {u.args[1] if u.target is operator.getitem else '?'} is used"
        return None

    return check


def float_only_index(node: torch.fx.Node, i: int) -> str | None:
    dt = out_dtype(node, i)
    return None if dt in FLOAT_DTYPES else f"{dt} result"


def slice_bounds(n: int, start: Any, end: Any, step: int) -> tuple[int, int]:
    s = 0 if start is None else int(start)
    e = n if end is None else int(end)
    s = s + n if s < 0 else s
    e = e + n if e < 0 else e
    s = min(max(s, 0), n)
    e = min(max(e, s), n)
    return s, e


def zeros_of(x: TracedTensor, shape: Sequence[int]) -> TracedTensor:
    """Zeros of ``shape`` with ``x``'s dtype (a broadcast constant)."""
    return ops.broadcast_to(to(0.0, torch_dtype(x)), list(shape))


def take(x: TracedTensor, axis: int, start: int, stop: int) -> TracedTensor:
    """``x[start:stop]`` along ``axis``."""
    if start == 0 and stop == x.shape[axis]:
        return x
    lo = [0] * x.ndim
    hi = list(x.shape)
    lo[axis], hi[axis] = start, stop
    return ops.slice(x, lo, hi)


def opmath_dtype(dt: torch.dtype) -> torch.dtype:
    """The type torch computes a 16-bit op in (f32; other types their own), rounding once
    at the end: rules that spell one op as several compute there too."""
    return torch.float32 if dt in (torch.float16, torch.bfloat16) else dt


def dilate(g: TracedTensor, s: int, axis: int, tail: int = 0) -> TracedTensor:
    """``s - 1`` zeros after each element of ``g`` along ``axis`` (none after the last),
    then ``tail`` more zeros."""
    shape = list(g.shape)
    n = shape[axis]
    if s == 1 and tail == 0:
        return g
    if s > 1:
        inner = [*shape[: axis + 1], 1, *shape[axis + 1 :]]
        gap = [*shape[: axis + 1], s - 1, *shape[axis + 1 :]]
        y = ops.concat([ops.reshape(g, inner), zeros_of(g, gap)], axis=axis + 1)
        g = ops.reshape(y, [*shape[:axis], n * s, *shape[axis + 1 :]])
    size = (n - 1) * s + 1 + tail
    if size > g.shape[axis]:
        zs = list(g.shape)
        zs[axis] = size - g.shape[axis]
        g = ops.concat([g, zeros_of(g, zs)], axis=axis)
    return take(g, axis, 0, size)


def has_rule(target: Any) -> bool:
    return target in RULES


_RUN_CHECKS: list[tuple[TracedTensor, str]] | None = None
"""The run-time checks of the partition being traced (see :func:`fail_at_run_time_if`)."""


def fail_at_run_time_if(bad: TracedTensor, message: str) -> None:
    """Make each run of the partition being traced raise a ``TesseraError`` with
    ``message`` when the bool tensor ``bad`` has a true element: for an error torch raises
    on values (an index outside its dim) where the result has no NaN to carry it (an
    integer result). The partition returns the count of true elements as one more result and checks it
    after the call (a read of one flag, on the GPU a synchronization). Outside a
    partition's trace the node cannot be translated: :class:`Unsupported`."""
    if _RUN_CHECKS is None:
        raise Unsupported(f"a run-time check ({message}) outside a partition")
    count = to(bad, torch.int64)
    _RUN_CHECKS.append((ops.sum(count) if bad.ndim else count, message))


def collect_run_checks(checks: list[tuple[TracedTensor, str]] | None) -> None:
    """Start (a list) or stop (None) collecting the run-time checks of a partition's trace."""
    global _RUN_CHECKS
    _RUN_CHECKS = checks


# the rule modules register their rules in RULES on import
from tessera.torch import (  # noqa: E402, F401, I001
    rules_activations, rules_elementwise, rules_index, rules_linalg, rules_loss, rules_nn,
    rules_pool, rules_shapes, rules_views,
)

__all__ = [
    "RULES", "Rule", "Unsupported", "SUPPORTED_DTYPES", "FLOAT_DTYPES", "has_rule", "rule", "val",
    "out_dtype", "ts_dtype", "torch_dtype", "to", "promote", "norm_dims", "int_list",
    "float_only", "float_only_index", "only_outputs", "slice_bounds", "zeros_of", "take", "dilate",
    "opmath_dtype", "fail_at_run_time_if", "collect_run_checks",
]
