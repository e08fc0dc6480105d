"""Cross-entropy over class logits in a form Tessera runs at memory speed.

``F.cross_entropy(x, target)`` decomposes in AOTAutograd into ``_log_softmax``, a
``gather`` of the targets' log-probabilities and, in the backward, a ``scatter`` into a
zero ``[N, C]`` tensor and the log-softmax backward: the forward writes the ``[N, C]``
log-probabilities and the backward reads them back. :func:`fuse_cross_entropy` rewrites
the call in dynamo's graph (before AOTAutograd) into :func:`cross_entropy`, made of two
custom ops with their own autograd formula:

* ``tessera::cross_entropy_rows(x, target, ignore_index) -> (loss, lse)``: per row the
  loss ``lse - x[target]`` (0 for rows whose target is ``ignore_index``) and the
  log-sum-exp ``lse``, in f32 (f64 for f64 logits). Tessera translates it to one
  streaming ``tgraph.logsumexp`` pass over the logits and a ``tgraph.take_along_axis``
  of the targets; only ``lse`` ([N]) is saved for the backward;
* ``tessera::cross_entropy_rows_backward(grad, x, target, lse, ignore_index) -> dx``:
  ``dx = grad * (exp(x - lse) - onehot(target))`` (0 on ignored rows) in the logits'
  dtype, the softmax recomputed from the logits: one fused elementwise kernel.

When the logits are ``x.float()`` (or a view of it) of 16-bit logits used for nothing
else, as Hugging Face's causal-LM loss does, the ops take the 16-bit logits and compute
in f32 themselves: no f32 copy of the logits is written, saved or read, and the gradient
comes out in the 16-bit dtype that the ``.float()`` backward would have cast it to.

The reductions follow torch: ``"mean"`` divides the summed losses by the number of rows
that are not ignored (0 / 0 = nan when all are), ``"sum"`` sums, ``"none"`` gives the rows.
A target outside ``[0, C)`` that is not ``ignore_index`` makes its row's loss and
gradient NaN in Tessera (``tgraph.take_along_axis``'s rule); torch raises.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F  # noqa: N812

aten = torch.ops.aten


def _wide(dt: torch.dtype) -> torch.dtype:
    return torch.float64 if dt == torch.float64 else torch.float32


@torch.library.custom_op("tessera::cross_entropy_rows", mutates_args=())
def cross_entropy_rows(
    x: torch.Tensor, target: torch.Tensor, ignore_index: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``x`` [N, C]: the loss ``lse - x[target]`` (0 where ``target ==
    ignore_index``) and ``lse = logsumexp(x)``, both in f32 (f64 for f64 ``x``)."""
    xw = x.to(_wide(x.dtype))
    lse = torch.logsumexp(xw, dim=1)
    valid = target != ignore_index
    picked = xw.gather(1, torch.where(valid, target, 0).unsqueeze(1)).squeeze(1)
    return torch.where(valid, lse - picked, 0.0), lse


@cross_entropy_rows.register_fake
def _(x: torch.Tensor, target: torch.Tensor, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    w = _wide(x.dtype)
    return x.new_empty(x.shape[:1], dtype=w), x.new_empty(x.shape[:1], dtype=w)


@torch.library.custom_op("tessera::cross_entropy_rows_backward", mutates_args=())
def cross_entropy_rows_backward(
    grad: torch.Tensor, x: torch.Tensor, target: torch.Tensor, lse: torch.Tensor,
    ignore_index: int,
) -> torch.Tensor:
    """The gradient of :func:`cross_entropy_rows`' loss with respect to ``x``:
    ``grad * (softmax(x) - onehot(target))`` per row (0 where ignored), in ``x``'s dtype."""
    wide = _wide(x.dtype)
    valid = target != ignore_index
    p = torch.exp(x.to(wide) - lse.to(wide).unsqueeze(1))
    hit = torch.arange(x.shape[1], device=x.device).unsqueeze(0) == target.unsqueeze(1)
    g = torch.where(valid, grad.to(wide), 0.0).unsqueeze(1)
    return ((p - hit.to(wide)) * g).to(x.dtype)


@cross_entropy_rows_backward.register_fake
def _(grad: torch.Tensor, x: torch.Tensor, target: torch.Tensor, lse: torch.Tensor,
      ignore_index: int) -> torch.Tensor:
    return torch.empty_like(x)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, target, ignore_index = inputs
    ctx.save_for_backward(x, target, output[1])
    ctx.ignore_index = ignore_index
    ctx.mark_non_differentiable(output[1])


def _backward(ctx: Any, grad_loss: torch.Tensor, grad_lse: Any) -> tuple[Any, None, None]:
    x, target, lse = ctx.saved_tensors
    return cross_entropy_rows_backward(grad_loss, x, target, lse, ctx.ignore_index), None, None


cross_entropy_rows.register_autograd(_backward, setup_context=_setup)


def cross_entropy(
    x: torch.Tensor, target: torch.Tensor, ignore_index: int = -100, reduction: str = "mean",
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``F.cross_entropy(x, target, ignore_index=..., reduction=...)`` for 2-D ``x``
    [N, C] and class-index ``target`` [N], computed in f32 (f64 for f64 ``x``) through
    :func:`cross_entropy_rows`; the result in ``out_dtype`` (default ``x.dtype``)."""
    loss, _ = torch.ops.tessera.cross_entropy_rows(x, target, ignore_index)
    dt = out_dtype or x.dtype
    if reduction == "none":
        return loss.to(dt)
    total = loss.sum()
    if reduction == "sum":
        return total.to(dt)
    return (total / (target != ignore_index).sum().to(loss.dtype)).to(dt)


_SIGNATURE = inspect.signature(F.cross_entropy)
_UPCASTS = ("float",)
_VIEWS = ("view", "reshape")


def _example(n: Any) -> Any:
    return n.meta.get("example_value") if isinstance(n, torch.fx.Node) else None


def _plain_args(node: torch.fx.Node) -> dict[str, Any] | None:
    """The arguments of an ``F.cross_entropy`` node this module handles, else None."""
    try:
        a = _SIGNATURE.bind(*node.args, **node.kwargs)
    except TypeError:
        return None
    a.apply_defaults()
    args = a.arguments
    x, t = _example(args["input"]), _example(args["target"])
    ok = (
        isinstance(x, torch.Tensor) and isinstance(t, torch.Tensor)
        and x.dim() == 2 and x.dtype.is_floating_point and t.dim() == 1
        and t.dtype == torch.int64
        and args["weight"] is None and args["size_average"] is None and args["reduce"] is None
        and args["label_smoothing"] == 0.0 and args["reduction"] in ("mean", "sum", "none")
        and isinstance(args["ignore_index"], int)
    )
    return args if ok else None


def _narrow_source(x: torch.fx.Node) -> torch.fx.Node | None:
    """``x`` is ``y.float()`` or a view of it, of 16-bit ``y``, used for nothing else: the
    view applied to ``y`` (a new node before ``x``), else None."""
    view = None
    if x.op == "call_method" and x.target in _VIEWS and len(x.users) == 1:
        view, x = x, x.args[0]
        if not isinstance(x, torch.fx.Node):
            return None
    if not (x.op == "call_method" and x.target in _UPCASTS and len(x.users) == 1 and not x.kwargs):
        return None
    src = x.args[0]
    ex = _example(src)
    if not (isinstance(ex, torch.Tensor) and ex.dtype in (torch.bfloat16, torch.float16)):
        return None
    if view is None:
        return src
    with x.graph.inserting_before(view):
        return x.graph.call_method(view.target, (src, *view.args[1:]), dict(view.kwargs))


def fuse_cross_entropy(gm: torch.fx.GraphModule) -> int:
    """Replace each ``F.cross_entropy`` call of dynamo's graph ``gm`` that has 2-D logits,
    class-index targets, no class weights and no label smoothing by :func:`cross_entropy`
    (see the module docstring); the number replaced."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not F.cross_entropy:
            continue
        args = _plain_args(node)
        if args is None:
            continue
        x = args["input"]
        out_dtype = _example(x).dtype
        src = _narrow_source(x)
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(
                cross_entropy, (src if src is not None else x, args["target"]),
                {"ignore_index": args["ignore_index"], "reduction": args["reduction"],
                 "out_dtype": out_dtype},
            )
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        if src is not None:  # the f32 view and upcast, now unused
            for dead in (x, *x.all_input_nodes):
                if dead.op == "call_method" and not dead.users:
                    gm.graph.erase_node(dead)
        count += 1
    if count:
        gm.recompile()
    return count


__all__ = ["cross_entropy", "cross_entropy_rows", "cross_entropy_rows_backward",
           "fuse_cross_entropy"]
