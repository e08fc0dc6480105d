"""RMS normalization in the form Tessera runs as one row kernel each way.

Hugging Face's ``LlamaRMSNorm`` (also Mistral's, Qwen's, Mixtral's, T5's ``T5LayerNorm``)
is written out in torch ops::

    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)

AOTAutograd differentiates those ops one by one, so a training step would run the
forward as a reduction and an elementwise kernel, and the backward as four kernels (two
of them standalone products) with the f32 ``h`` saved in between.
:func:`fuse_rms_norm` rewrites the pattern in dynamo's graph (before AOTAutograd), and
``torch.rms_norm`` / ``nn.RMSNorm`` calls, into :func:`rms_norm`, made of two custom ops
with their own autograd formula:

* ``tessera::rms_norm(x, weight, eps) -> (y, rstd)``: ``y = x * rstd * weight`` in ``x``'s
  dtype and each row's ``rstd = 1 / sqrt(mean(x^2) + eps)`` (``[..., 1]``, f32; f64 for
  f64 ``x``), saved for the backward. Tessera translates it to ``tgraph.rmsnorm_fwd``
  (``tgraph.rmsnorm`` when ``rstd`` is not used): one pass over the rows;
* ``tessera::rms_norm_backward(dy, x, rstd, weight) -> dx``: ``tgraph.rmsnorm_bwd``, one
  pass over the rows (``fuse-elementwise`` adds a residual stream's gradient in it).

The weight's gradient is ``sum(dy * xhat)`` over the rows with ``xhat = (x * rstd)``
rounded to ``x``'s dtype, as the unfused ops compute it: a column reduction that
``fuse-elementwise`` makes one kernel.

Numerics: the pattern rounds ``x * rstd`` to ``x``'s dtype before multiplying by the
weight; Tessera's kernel multiplies in f32 and rounds once. For f32 and f64 inputs the
two are the same; for 16-bit inputs they differ by at most one rounding of the result
(the fused form is the more accurate one). Only patterns whose weight has ``x``'s dtype,
whose result is in ``x``'s dtype and whose squares are taken in ``x``'s compute type (f32
for 16-bit and f32 inputs, f64 for f64) are rewritten; anything else is left as written
(``LlamaRMSNorm`` casts an f64 input to f32, so an f64 LLaMA keeps its ops).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

_WIDE = {torch.float64: torch.float64}


def _wide(dt: torch.dtype) -> torch.dtype:
    return _WIDE.get(dt, torch.float32)


@torch.library.custom_op("tessera::rms_norm", mutates_args=())
def rms_norm_rows(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [..., D] normalized by each row's root mean square (times ``weight`` [D]), in
    ``x``'s dtype, and each row's ``rstd = 1 / sqrt(mean(x^2) + eps)`` ([..., 1], f32; f64
    for f64 ``x``)."""
    xw = x.to(_wide(x.dtype))
    rstd = torch.rsqrt(xw.pow(2).mean(-1, keepdim=True) + eps)
    y = (xw * rstd).to(x.dtype)
    if weight is not None:
        y = weight * y
    return y, rstd


@rms_norm_rows.register_fake
def _(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), x.new_empty((*x.shape[:-1], 1), dtype=_wide(x.dtype))


@torch.library.custom_op("tessera::rms_norm_backward", mutates_args=())
def rms_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor | None
) -> torch.Tensor:
    """The gradient of :func:`rms_norm_rows`' ``y`` with respect to ``x``: with ``xhat =
    x rstd`` and ``g = dy weight``, ``rstd (g - xhat mean(g xhat))`` per row, in ``x``'s
    dtype."""
    wide = rstd.dtype
    xhat = x.to(wide) * rstd
    g = dy.to(wide)
    if weight is not None:
        g = g * weight.to(wide)
    dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx.to(x.dtype)


@rms_norm_backward.register_fake
def _(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor,
      weight: torch.Tensor | None) -> torch.Tensor:
    return torch.empty_like(x)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, weight, _eps = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.mark_non_differentiable(output[1])


def _backward(ctx: Any, dy: torch.Tensor, _drstd: Any) -> tuple[Any, Any, None]:
    x, weight, rstd = ctx.saved_tensors
    dx = dw = None
    if ctx.needs_input_grad[0]:
        dx = rms_norm_backward(dy, x, rstd, weight)
    if weight is not None and ctx.needs_input_grad[1]:
        xhat = (x.to(rstd.dtype) * rstd).to(x.dtype)
        rows = tuple(range(x.dim() - weight.dim()))  # () for one row: no sum (sum(()) is total)
        dw = ((dy * xhat).sum(dim=rows) if rows else dy * xhat).to(weight.dtype)
    return dx, dw, None


rms_norm_rows.register_autograd(_backward, setup_context=_setup)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """The normalized rows of :func:`rms_norm_rows` (what the rewritten pattern returned)."""
    return torch.ops.tessera.rms_norm(x, weight, eps)[0]


# --------------------------------------------------------------------------- the pattern


def _example(n: Any) -> Any:
    return n.meta.get("example_value") if isinstance(n, torch.fx.Node) else None


def _is(n: Any, functions: tuple[Any, ...] = (), methods: tuple[str, ...] = ()) -> bool:
    if not isinstance(n, torch.fx.Node):
        return False
    if n.op == "call_function":
        return n.target in functions
    return n.op == "call_method" and n.target in methods


def _cast(n: Any) -> tuple[torch.fx.Node, torch.dtype] | None:
    """``a.to(dtype)`` / ``a.to(dtype=...)`` / ``a.float()`` / ``a.type(dtype)`` /
    ``a.type_as(b)``: ``(a, dtype)``."""
    if not _is(n, methods=("to", "float", "type", "type_as")):
        return None
    a = n.args[0]
    if n.target == "float":
        dt: Any = torch.float32
    elif n.target == "type_as":
        other = _example(n.args[1]) if len(n.args) > 1 else None
        dt = other.dtype if isinstance(other, torch.Tensor) else None
    else:
        rest = [*n.args[1:], *n.kwargs.values()]
        dt = rest[0] if len(rest) == 1 else None
    if not isinstance(a, torch.fx.Node) or not isinstance(dt, torch.dtype):
        return None
    return a, dt


def _binary(n: Any, functions: tuple[Any, ...], method: str) -> tuple[Any, Any] | None:
    if not _is(n, functions, (method,)) or len(n.args) != 2 or n.kwargs:
        return None
    return n.args[0], n.args[1]


def _square_of(n: Any) -> Any:
    """``a`` for ``a ** 2``, ``a.pow(2)``, ``torch.pow(a, 2)``, ``a * a``, ``torch.square(a)``."""
    if _is(n, (torch.square,), ("square",)) and len(n.args) == 1:
        return n.args[0]
    p = _binary(n, (operator.pow, torch.pow), "pow")
    if p is not None and p[1] == 2:
        return p[0]
    m = _binary(n, (operator.mul, torch.mul), "mul")
    if m is not None and m[0] is m[1]:
        return m[0]
    return None


def _mean_last(n: Any) -> Any:
    """``a`` for ``a.mean(-1, keepdim=True)`` (also ``torch.mean``, the last dim by number
    or in a one-element list)."""
    if not _is(n, (torch.mean,), ("mean",)):
        return None
    args = list(n.args)
    kw = dict(n.kwargs)
    a = args.pop(0) if args else kw.pop("input", None)
    dim = args.pop(0) if args else kw.pop("dim", None)
    keep = args.pop(0) if args else kw.pop("keepdim", False)
    ex = _example(a)
    if args or kw or keep is not True or not isinstance(ex, torch.Tensor):
        return None
    if isinstance(dim, list | tuple) and len(dim) == 1:
        dim = dim[0]
    if not isinstance(dim, int) or dim % max(ex.dim(), 1) != ex.dim() - 1:
        return None
    return a


def _plus_constant(n: Any) -> tuple[torch.fx.Node, float] | None:
    """``(a, c)`` for ``a + c`` / ``c + a`` with ``c`` a Python number."""
    p = _binary(n, (operator.add, torch.add), "add")
    if p is None:
        return None
    a, c = p if isinstance(p[0], torch.fx.Node) else (p[1], p[0])
    if not isinstance(a, torch.fx.Node) or isinstance(c, bool) or not isinstance(c, int | float):
        return None
    return a, float(c)


def _times(n: Any, v: torch.fx.Node) -> Any:
    """The other factor of a product ``n`` that has ``v`` as one factor, else None."""
    p = _binary(n, (operator.mul, torch.mul), "mul")
    if p is None:
        return None
    if p[0] is v:
        return p[1]
    return p[0] if p[1] is v else None


def _only_user(n: torch.fx.Node) -> torch.fx.Node | None:
    return next(iter(n.users)) if len(n.users) == 1 else None


def _match(r: torch.fx.Node) -> tuple[torch.fx.Node, Any, float, torch.fx.Node, list] | None:
    """From an ``rsqrt`` node: ``(x, weight or None, eps, last node, the pattern's nodes)``."""
    if not _is(r, (torch.rsqrt,), ("rsqrt",)) or len(r.args) != 1:
        return None
    added = _plus_constant(r.args[0])
    if added is None or added[1] < 0:
        return None
    v, eps = added
    sq = _mean_last(v)
    a = _square_of(sq)
    if not isinstance(a, torch.fx.Node):
        return None
    up = _cast(a)
    x = up[0] if up is not None else a
    ex, ea = _example(x), _example(a)
    if not (isinstance(ex, torch.Tensor) and isinstance(ea, torch.Tensor)) or ex.dim() < 1:
        return None
    if ex.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        return None
    if ea.dtype != _wide(ex.dtype) or tuple(ea.shape) != tuple(ex.shape):
        return None
    chain = [sq, v, r.args[0], r]  # in program order: erased from the end
    m = _only_user(r)
    if m is None:
        return None
    b = _times(m, r)
    if b is not a and b is not x:
        return None
    chain.append(m)
    last = m
    nxt = _only_user(last)
    down = _cast(nxt) if nxt is not None else None
    if down is not None and down[1] == ex.dtype:
        last = nxt
        chain.append(last)
        nxt = _only_user(last)
    w = _times(nxt, last) if nxt is not None else None
    ew = _example(w)
    if (isinstance(w, torch.fx.Node) and isinstance(ew, torch.Tensor)
            and ew.dtype == ex.dtype and tuple(ew.shape) == (ex.shape[-1],)):
        last = nxt
        chain.append(last)
    else:
        w = None
    el = _example(last)
    if not isinstance(el, torch.Tensor) or el.dtype != ex.dtype or tuple(el.shape) != tuple(ex.shape):
        return None
    if up is not None:  # the upcast belongs to the pattern; x itself may have other users
        chain.insert(0, a)
    # every node of the pattern but the last is used only inside it
    inside = set(chain)
    if any(u not in inside for n in chain[:-1] for u in n.users):
        return None
    return x, w, eps, last, chain


def _torch_rms_norm(n: torch.fx.Node) -> tuple[Any, Any, float] | None:
    """``(x, weight, eps)`` of a ``torch.rms_norm`` call over the last dim whose weight
    (if any) has the input's dtype."""
    if not _is(n, (torch.rms_norm, torch.nn.functional.rms_norm)):
        return None
    names = ("input", "normalized_shape", "weight", "eps")
    args = dict(zip(names, n.args))
    args.update(n.kwargs)
    x, shape, w, eps = (args.get(k) for k in names)
    ex, ew = _example(x), _example(w)
    if not isinstance(ex, torch.Tensor) or ex.dim() < 1 or ex.dtype not in _FLOATS:
        return None
    if not isinstance(shape, list | tuple | torch.Size) or len(shape) != 1:
        return None
    if w is not None and not (isinstance(ew, torch.Tensor) and ew.dtype == ex.dtype):
        return None
    if eps is None:
        eps = torch.finfo(_wide(ex.dtype)).eps
    if not isinstance(eps, int | float) or eps < 0:
        return None
    return x, w, float(eps)


_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def fuse_rms_norm(gm: torch.fx.GraphModule) -> int:
    """Replace each RMS norm of dynamo's graph ``gm`` (the written-out pattern of the
    module docstring, or ``torch.rms_norm`` over the last dim) by :func:`rms_norm`; the
    number replaced."""
    count = 0
    for node in list(gm.graph.nodes):
        found = _match(node)
        if found is not None:
            x, w, eps, last, chain = found
        else:
            call = _torch_rms_norm(node)
            if call is None:
                continue
            (x, w, eps), last, chain = call, node, [node]
        with gm.graph.inserting_before(last):
            new = gm.graph.call_function(rms_norm, (x, w, eps))
        new.meta = dict(last.meta)
        last.replace_all_uses_with(new)
        for dead in reversed(chain):
            if not dead.users:
                gm.graph.erase_node(dead)
        count += 1
    if count:
        gm.recompile()
    return count


__all__ = ["fuse_rms_norm", "rms_norm", "rms_norm_backward", "rms_norm_rows"]
