"""Optimizer update functions: ``adamw_update`` and ``sgd_update`` over lists of tensors.

Each appends one ``tgraph.adamw_update`` / ``tgraph.sgd_update`` (one element type for
every tensor; see :mod:`tessera.ir.graph.optim`) and returns the new tensors. In a traced
function they are pure (the inputs keep their values); ``tessera.optim`` builds the same
ops in functions that donate their buffers, so the GPU updates them in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessera.frontend.errors import TesseraTypeError, located
from tessera.frontend.ops.base import _tensor_arg
from tessera.frontend.tracing import TracedTensor, current_trace
from tessera.ir import graph as g


def _tensors(values: Any, opname: str, what: str) -> list[TracedTensor]:
    if not isinstance(values, Sequence) or isinstance(values, str):
        current_trace(opname)
        raise TesseraTypeError(
            located(f"{opname}: {what} must be a list of tensors, got {type(values).__name__}")
        )
    return [_tensor_arg(v, opname, f"{what}[{k}]") for k, v in enumerate(values)]


def _emit(op: Any, trace: Any, groups: list[int]) -> tuple[list[TracedTensor], ...]:
    trace.add(op)
    out, start = [], 0
    for n in groups:
        out.append([TracedTensor(r, trace) for r in op.results[start:start + n]])
        start += n
    return tuple(out)


def adamw_update(
    params: Sequence[Any], grads: Sequence[Any], exp_avgs: Sequence[Any],
    exp_avg_sqs: Sequence[Any], hyper: Any, *, beta1: float = 0.9, beta2: float = 0.999,
    eps: float = 1e-8,
) -> tuple[list[TracedTensor], list[TracedTensor], list[TracedTensor]]:
    """One AdamW step of every tensor: ``(new params, new exp_avgs, new exp_avg_sqs)``.
    ``hyper`` is ``[1 - lr * weight_decay, lr / (1 - beta1^t), sqrt(1 - beta2^t)]``
    (f32; f64 for f64 parameters)."""
    lists = [_tensors(v, "adamw_update", w) for v, w in (
        (params, "params"), (grads, "grads"), (exp_avgs, "exp_avgs"),
        (exp_avg_sqs, "exp_avg_sqs"))]
    h = _tensor_arg(hyper, "adamw_update", "hyper")
    op = g.AdamWUpdateOp(*[[t.value for t in ts] for ts in lists], h.value,
                         beta1=beta1, beta2=beta2, eps=eps)
    n = len(lists[0])
    return _emit(op, h.trace, [n, n, n])  # type: ignore[return-value]


def sgd_update(
    params: Sequence[Any], grads: Sequence[Any], momentum_buffers: Sequence[Any], hyper: Any,
    *, momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
) -> tuple[list[TracedTensor], list[TracedTensor]]:
    """One SGD step of every tensor: ``(new params, new momentum_buffers)`` (no buffers
    with momentum 0). ``hyper`` is ``[lr, buf_scale, grad_scale]`` (``[lr, 0, 1]`` on the
    first step, then ``[lr, momentum, 1 - dampening]``)."""
    ps = _tensors(params, "sgd_update", "params")
    gs = _tensors(grads, "sgd_update", "grads")
    bs = _tensors(momentum_buffers, "sgd_update", "momentum_buffers")
    h = _tensor_arg(hyper, "sgd_update", "hyper")
    op = g.SGDUpdateOp([t.value for t in ps], [t.value for t in gs], [t.value for t in bs],
                       h.value, momentum=momentum, weight_decay=weight_decay,
                       nesterov=nesterov)
    return _emit(op, h.trace, [len(ps), len(bs)])  # type: ignore[return-value]
