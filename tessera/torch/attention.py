"""Scaled dot-product attention's backward in a form Tessera translates.

torch's fused attention backwards are opaque kernels. :data:`ATTENTION_BACKWARDS`
decomposes them (AOTAutograd applies it through
:data:`tessera.torch.backend.DECOMPOSITIONS`):

* the flash, memory-efficient and cuDNN backwards without dropout become the custom op
  ``tessera::sdpa_backward`` (:func:`sdpa_backward`): the gradients from the forward's
  result and log-sum-exp, which ``tessera.torch`` translates to
  ``tgraph.flash_attention_bwd`` (the fused backward kernels). Run by torch (a partition
  left to eager), the op recomputes the gradients in matmuls and does not read the
  log-sum-exp at all;
* with a mask, ``tessera::sdpa_backward_masked`` (:func:`sdpa_backward_masked`): the fused
  kernels when the mask turns out to be causal or empty at trace time, else the
  gradients recomputed from the log-sum-exp. A log-sum-exp of another layout gives
  matmuls recomputed from q, k and v (:func:`attention_backward`). With dropout,
  torch's kernel runs.

The forward's log-sum-exp is ``log(sum_j exp(scale q kⱼ))`` per query row in natural
log, in f32 (f64 for f64 operands), for torch's kernels and ``tgraph.flash_attention_fwd``
alike (measured on an H100 against float64: within 1e-6 for all three), so either
forward can feed Tessera's backward. Only the layouts differ: ``[..., Sq]`` (flash),
rows padded to a multiple of 32 ``[..., 32 * ceil(Sq / 32)]`` (memory-efficient) and
``[..., Sq, 1]`` (cuDNN); the decompositions cut them to ``[..., Sq]``, and Tessera's
forward rules write its log-sum-exp in the layout the op's result has.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

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
    return _fused(grad_out, q, k, v, out, logsumexp, attn_mask, is_causal, scale)


def _flash_cuda_backward(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    out: torch.Tensor, logsumexp: torch.Tensor, cum_seq_q: Any, cum_seq_k: Any,
    max_q: Any, max_k: Any, dropout_p: float, is_causal: bool, philox_seed: Any,
    philox_offset: Any, *, scale: float | None = None,
) -> Any:
    if dropout_p:
        return NotImplemented
    return _fused(grad_out, q, k, v, out, logsumexp, None, is_causal, scale)


def _efficient_backward(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    attn_bias: torch.Tensor | None, out: torch.Tensor, logsumexp: torch.Tensor,
    philox_seed: Any, philox_offset: Any, dropout_p: float, grad_input_mask: Any,
    is_causal: bool = False, *, scale: float | None = None,
) -> Any:
    if dropout_p or (len(grad_input_mask) > 3 and grad_input_mask[3]):
        return NotImplemented  # dropout, or a gradient for the bias
    sq = q.shape[-2]
    if logsumexp.dim() == q.dim() - 1 and logsumexp.shape[-1] >= sq:  # rows padded to 32
        logsumexp = logsumexp[..., :sq]
    gq, gk, gv = _fused(grad_out, q, k, v, out, logsumexp, attn_bias, is_causal, scale)
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
    if tuple(logsumexp.shape) == (*q.shape[:-1], 1):  # [..., Sq, 1]
        logsumexp = logsumexp.squeeze(-1)
    return _fused(grad_out, q, k, v, out, logsumexp, bias, is_causal, scale)


ATTENTION_BACKWARDS: dict[Any, Callable[..., Any]] = {
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: _flash_cpu_backward,
    aten._scaled_dot_product_flash_attention_backward.default: _flash_cuda_backward,
    aten._scaled_dot_product_efficient_attention_backward.default: _efficient_backward,
    aten._scaled_dot_product_cudnn_attention_backward.default: _cudnn_backward,
}
"""Decompositions of torch's fused attention backwards that Tessera translates: without
dropout or mask :func:`sdpa_backward` (``flash_attention_bwd`` from the saved
log-sum-exp), with a mask matmuls recomputed from q, k and v."""


def _fused(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    out: torch.Tensor, lse: torch.Tensor, mask: torch.Tensor | None, is_causal: bool,
    scale: float | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward from the saved log-sum-exp when its layout is ``[..., Sq]``, else
    recomputed in matmuls."""
    if not _lse_fits(q, lse):
        return attention_backward(grad_out, q, k, v, mask, is_causal, scale)
    if mask is None:
        return sdpa_backward(grad_out, q, k, v, out, lse, bool(is_causal), scale)
    return sdpa_backward_masked(grad_out, q, k, v, out, lse, mask, bool(is_causal), scale)


def _constant(node: Any, seen: dict[Any, Any], budget: list[int]) -> Any:
    """The value of FX node ``node`` if it is computed from no graph input (``arange``,
    comparisons, ``where`` on scalars...), by running its ops; None otherwise."""
    if not isinstance(node, torch.fx.Node):
        return node
    if node in seen:
        return seen[node]
    budget[0] -= 1
    if node.op != "call_function" or budget[0] < 0 or (
        isinstance(node.target, torch._ops.OpOverload)
        and torch.Tag.nondeterministic_seeded in node.target.tags
    ):  # an input, too far, or random values (a dropout mask) that change every call
        raise LookupError(node.name)
    args = torch.fx.node.map_arg(node.args, lambda n: _constant(n, seen, budget))
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: _constant(n, seen, budget))
    if any(isinstance(a, torch.SymInt | torch.SymFloat | torch.SymBool)
           for a in (*args, *kwargs.values())):
        raise LookupError(node.name)  # symbolic sizes: no values now
    kwargs = {k: (torch.device("cpu") if k == "device" else v) for k, v in kwargs.items()}
    seen[node] = node.target(*args, **kwargs)
    return seen[node]


def static_masks(joint: torch.fx.GraphModule) -> int:
    """Turn each ``sdpa_backward_masked`` of ``joint`` whose mask is computed from no input
    and is no mask or exactly the causal one (its values checked here) into
    ``sdpa_backward`` (with ``is_causal``); returns how many. The forward rule makes the
    same finding from the same values (``static_values.mask_kind``)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from tessera.torch.static_values import classify_mask

    changed = 0
    for n in list(joint.graph.nodes):
        if n.op != "call_function" or n.target is not torch.ops.tessera.sdpa_backward_masked.default:
            continue
        go, q, k, v, out, lse, mask, is_causal, scale = n.args
        try:
            with unset_fake_temporarily():  # real values, not the tracing's fake tensors
                value = _constant(mask, {}, [64])
                arr = None
                if isinstance(value, torch.Tensor):  # (numpy has no bfloat16)
                    wide = value.double() if value.is_floating_point() else value
                    arr = wide.detach().cpu().numpy()
        except Exception:  # an input, a symbolic size, an op that cannot run here
            continue
        qv, kv = q.meta.get("val"), k.meta.get("val")
        if arr is None or qv is None or kv is None:
            continue
        kind = classify_mask(arr, int(qv.shape[-2]), int(kv.shape[-2]))
        if kind is None:
            continue
        with joint.graph.inserting_before(n):
            new = joint.graph.call_function(
                torch.ops.tessera.sdpa_backward.default,
                (go, q, k, v, out, lse, bool(is_causal) or kind == "causal", scale),
            )
        new.meta.update(n.meta)
        n.replace_all_uses_with(new)
        joint.graph.erase_node(n)
        changed += 1
    if changed:
        joint.graph.eliminate_dead_code()
        joint.recompile()
    return changed


def _lse_fits(q: torch.Tensor, lse: torch.Tensor) -> bool:
    """The log-sum-exp is laid out as ``tgraph.flash_attention_bwd`` reads it."""
    wide = torch.float64 if q.dtype == torch.float64 else torch.float32
    return lse.dtype == wide and tuple(lse.shape) == tuple(q.shape[:-1])


@torch.library.custom_op("tessera::sdpa_backward", mutates_args=())
def sdpa_backward(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    out: torch.Tensor, lse: torch.Tensor, is_causal: bool, scale: float | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk, dv) of ``out = softmax(scale q kᵀ [causal]) v`` for ``grad_out``,
    given the forward's ``out`` and log-sum-exp ``lse``; grouped key/value heads allowed.
    This eager body recomputes them in matmuls (:func:`attention_backward`)."""
    gq, gk, gv = attention_backward(grad_out, q, k, v, None, is_causal, scale)
    return gq.contiguous(), gk.contiguous(), gv.contiguous()


def _empty_grads(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Contiguous results, as the eager bodies return them."""
    return tuple(torch.empty(t.shape, dtype=t.dtype, device=t.device)  # type: ignore[return-value]
                 for t in (q, k, v))


@sdpa_backward.register_fake
def _sdpa_backward_fake(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    out: torch.Tensor, lse: torch.Tensor, is_causal: bool, scale: float | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _empty_grads(q, k, v)


@torch.library.custom_op("tessera::sdpa_backward_masked", mutates_args=())
def sdpa_backward_masked(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    out: torch.Tensor, lse: torch.Tensor, mask: torch.Tensor, is_causal: bool,
    scale: float | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`sdpa_backward` with an attention mask (bool: keep where True; float: added
    to the scores). Tessera translates it to ``flash_attention_bwd`` when the mask is
    known at trace time to be no mask or the causal one (``static_values.mask_kind``),
    else to the recomputation from ``lse`` in f32. This eager body recomputes in
    matmuls."""
    gq, gk, gv = attention_backward(grad_out, q, k, v, mask, is_causal, scale)
    return gq.contiguous(), gk.contiguous(), gv.contiguous()


@sdpa_backward_masked.register_fake
def _sdpa_backward_masked_fake(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    out: torch.Tensor, lse: torch.Tensor, mask: torch.Tensor, is_causal: bool,
    scale: float | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _empty_grads(q, k, v)


__all__ = [
    "ATTENTION_BACKWARDS", "attention_backward", "sdpa_backward", "sdpa_backward_masked",
    "static_masks",
]
