"""The ``torch.compile`` backend: TorchDynamo + AOTAutograd FX graphs into Tessera.

:func:`backend` is what ``torch.compile(model, backend="tessera")`` calls with
each graph dynamo captures. AOTAutograd splits it into a forward and a
backward graph of core ATen ops (:data:`DECOMPOSITIONS`), and
:func:`compile_graph` hands each to :func:`tessera.torch.partition.partition`,
which replaces the translatable parts by Tessera partitions and leaves the rest
to eager torch. Training works because the backward graph is translated the
same way as the forward.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from tessera.torch import report as _report
from tessera.torch.partition import partition

aten = torch.ops.aten


def attention_backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None,
    is_causal: bool,
    scale: float | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of ``softmax(scale q kᵀ + mask) v`` with respect to q, k and v, in
    matmuls and a softmax recomputed from q, k and v (grouped key/value heads included;
    computed in float32 at least). Needs no saved log-sum-exp."""
    hq, hk = q.shape[-3], k.shape[-3]
    groups = hq // hk
    dt = q.dtype
    s = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    wide = torch.float64 if dt == torch.float64 else torch.float32
    qf, kf, vf, gf = (x.to(wide) for x in (q, k, v, grad_out))
    if groups != 1:
        kf, vf = (
            x.unsqueeze(-3).expand(*x.shape[:-2], groups, *x.shape[-2:]).reshape(
                *x.shape[:-3], hq, *x.shape[-2:]
            )
            for x in (kf, vf)
        )
    scores = torch.matmul(qf, kf.transpose(-2, -1)) * s
    neg_inf = torch.full_like(scores, float("-inf"))
    if is_causal:
        lq, lk = q.shape[-2], k.shape[-2]
        rows = torch.arange(lq, device=q.device)[:, None]
        keep = rows >= torch.arange(lk, device=q.device)[None, :]
        scores = torch.where(keep, scores, neg_inf)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = torch.where(attn_mask, scores, neg_inf)
        else:
            scores = scores + attn_mask.to(wide)
    p = torch.softmax(scores, dim=-1)
    grad_v = torch.matmul(p.transpose(-2, -1), gf)
    dp = torch.matmul(gf, vf.transpose(-2, -1))
    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
    grad_q = torch.matmul(ds, kf) * s
    grad_k = torch.matmul(ds.transpose(-2, -1), qf) * s
    if groups != 1:
        grad_k, grad_v = (
            x.reshape(*x.shape[:-3], hk, groups, *x.shape[-2:]).sum(dim=-3)
            for x in (grad_k, grad_v)
        )
    return grad_q.to(dt), grad_k.to(dt), grad_v.to(k.dtype)


def _flash_cpu_backward(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    out: torch.Tensor, logsumexp: torch.Tensor, dropout_p: float, is_causal: bool,
    attn_mask: torch.Tensor | None = None, scale: float | None = None,
) -> Any:
    if dropout_p:
        return NotImplemented  # the dropout mask is only known to torch's kernel
    return attention_backward(grad_out, q, k, v, attn_mask, is_causal, scale)


def _flash_cuda_backward(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    out: torch.Tensor, logsumexp: torch.Tensor, cum_seq_q: Any, cum_seq_k: Any,
    max_q: Any, max_k: Any, dropout_p: float, is_causal: bool, philox_seed: Any,
    philox_offset: Any, *, scale: float | None = None,
) -> Any:
    if dropout_p:
        return NotImplemented
    return attention_backward(grad_out, q, k, v, None, is_causal, scale)


def _efficient_backward(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    attn_bias: torch.Tensor | None, out: torch.Tensor, logsumexp: torch.Tensor,
    philox_seed: Any, philox_offset: Any, dropout_p: float, grad_input_mask: Any,
    is_causal: bool = False, *, scale: float | None = None,
) -> Any:
    if dropout_p or (len(grad_input_mask) > 3 and grad_input_mask[3]):
        return NotImplemented  # dropout, or a gradient for the bias
    gq, gk, gv = attention_backward(grad_out, q, k, v, attn_bias, is_causal, scale)
    return gq, gk, gv, None


def _cudnn_backward(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    out: torch.Tensor, logsumexp: torch.Tensor, philox_seed: Any, philox_offset: Any,
    attn_bias: torch.Tensor | None, cum_seq_q: Any, cum_seq_k: Any, max_q: Any, max_k: Any,
    dropout_p: float, is_causal: bool, *, scale: float | None = None,
) -> Any:
    if dropout_p:
        return NotImplemented
    bias = attn_bias if attn_bias is not None and attn_bias.numel() else None
    return attention_backward(grad_out, q, k, v, bias, is_causal, scale)


ATTENTION_BACKWARDS: dict[Any, Callable[..., Any]] = {
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: _flash_cpu_backward,
    aten._scaled_dot_product_flash_attention_backward.default: _flash_cuda_backward,
    aten._scaled_dot_product_efficient_attention_backward.default: _efficient_backward,
    aten._scaled_dot_product_cudnn_attention_backward.default: _cudnn_backward,
}
"""The fused attention backwards, recomputed in matmuls so that Tessera translates them."""


def _decompositions() -> dict[Any, Callable[..., Any]]:
    table = dict(core_aten_decompositions())
    # Kept whole: it becomes flash_attention. (Its decomposition also hands the attention
    # weights to the fused backward in place of the log-sum-exp.)
    del table[aten._scaled_dot_product_flash_attention_for_cpu.default]
    table.update(ATTENTION_BACKWARDS)
    return table


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = _decompositions()
"""The core ATen decompositions, with CPU flash attention kept whole and its backward
in matmuls."""

_GRAPH_IDS = itertools.count()


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Any, *, kind: str, name: str) -> Any:
    """Partition one AOTAutograd graph into Tessera partitions and eager torch."""
    rep = _report.GraphReport(name=f"{name}_{kind}", kind=kind)
    fused = partition(gm, rep.name, rep)
    _report.record(rep)
    return make_boxed_func(fused.forward)


def backend(gm: torch.fx.GraphModule, example_inputs: Any, **options: Any) -> Any:
    """``torch.compile`` backend ``"tessera"`` (options are not used yet)."""
    name = f"graph{next(_GRAPH_IDS)}"
    aot = aot_autograd(
        fw_compiler=functools.partial(compile_graph, kind="forward", name=name),
        bw_compiler=functools.partial(compile_graph, kind="backward", name=name),
        inference_compiler=functools.partial(compile_graph, kind="inference", name=name),
        decompositions=DECOMPOSITIONS,
    )
    return aot(gm, example_inputs)


def compile(model: Any, *, dynamic: bool | None = None, fullgraph: bool = False, **kw: Any) -> Any:  # noqa: A001
    """``torch.compile(model, backend=tessera.torch.backend)``; starts a new report."""
    _report.reset()
    return torch.compile(model, backend=backend, dynamic=dynamic, fullgraph=fullgraph, **kw)


__all__ = ["backend", "compile", "compile_graph", "DECOMPOSITIONS"]
