"""ATen rules: softmax, normalizations, matmuls, convolution, pooling and attention.

The rules register themselves in :data:`tessera.torch.aten_ops.RULES` when this
module is imported (``aten_ops`` imports it).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.fx

from tessera.autodiff.conv_grad import input_grad
from tessera.frontend import ops
from tessera.frontend.ops.nn import (
    flash_attention_bwd,
    flash_attention_fwd,
    layernorm_bwd,
    layernorm_fwd,
    rmsnorm_bwd,
    rmsnorm_fwd,
    row_moments,
)
from tessera.torch import attention as _attention  # noqa: F401  (defines tessera::sdpa_backward)
from tessera.torch import rms_norm as _rms_norm_ops  # noqa: F401  (defines tessera::rms_norm)
from tessera.torch.aten_ops import (
    FLOAT_DTYPES,
    Check,
    TracedTensor,
    Unsupported,
    float_only,
    float_only_index,
    int_list,
    only_outputs,
    opmath_dtype,
    out_dtype,
    pair,
    rule,
    take,
    to,
    torch_dtype,
    ts_dtype,
    val,
    zeros_of,
)
from tessera.torch.static_values import mask_kind

aten = torch.ops.aten
prims = torch.ops.prims


# --------------------------------------------------------------------------- softmax, norms


def _softmax_check(node: torch.fx.Node) -> str | None:
    if node.args[2]:
        return "half_to_float"
    return float_only(node)


def _rowwise(fn: Callable[..., TracedTensor], *xs: Any, dim: int) -> TracedTensor:
    """``fn(*xs, dim)``; torch takes a 0-d tensor as one row of one element (dim 0 or
    -1), so 0-d operands are viewed as ``[1]`` and the result as 0-d again."""
    if any(isinstance(x, TracedTensor) and x.ndim == 0 for x in xs):
        ys = [ops.reshape(x, [1]) if isinstance(x, TracedTensor) else x for x in xs]
        return ops.reshape(fn(*ys, 0), [])
    return fn(*xs, int(dim))


@rule(aten._softmax.default, check=_softmax_check)
def _softmax(node: torch.fx.Node, a: Any, dim: int, half_to_float: bool) -> TracedTensor:
    return _rowwise(lambda x, d: ops.softmax(x, axis=d), a, dim=dim)


@rule(aten._log_softmax.default, check=_softmax_check)
def _log_softmax(node: torch.fx.Node, a: Any, dim: int, half_to_float: bool) -> TracedTensor:
    """``x - logsumexp(x)``: one pass for the log-sum-exp (f32 from 16-bit ``x``, one
    streaming kernel over long last-axis rows), one fused pass for the difference."""
    dt = torch_dtype(a)

    def log_softmax(x: TracedTensor, d: int) -> TracedTensor:
        lse = ops.logsumexp(x, d, keepdim=True, wide=True)
        return to(ops.sub(to(x, torch_dtype(lse)), lse), dt)

    return _rowwise(log_softmax, a, dim=dim)


@rule(aten._softmax_backward_data.default)
def _softmax_backward(
    node: torch.fx.Node, grad: Any, out: Any, dim: int, input_dtype: Any
) -> TracedTensor:
    dt = out_dtype(node)

    def backward(g: TracedTensor, y: TracedTensor, d: int) -> TracedTensor:
        gy = ops.mul(g, y)
        return ops.sub(gy, ops.mul(y, ops.sum(gy, axis=d, keepdims=True)))

    return _rowwise(backward, to(grad, dt), to(out, dt), dim=dim)


@rule(aten._log_softmax_backward_data.default)
def _log_softmax_backward(
    node: torch.fx.Node, grad: Any, out: Any, dim: int, input_dtype: Any
) -> TracedTensor:
    dt = out_dtype(node)

    def backward(g: TracedTensor, y: TracedTensor, d: int) -> TracedTensor:
        return ops.sub(g, ops.mul(ops.exp(y), ops.sum(g, axis=d, keepdims=True)))

    return _rowwise(backward, to(grad, dt), to(out, dt), dim=dim)


@rule(aten.native_layer_norm.default, check=lambda n: float_only_index(n, 0))
def _native_layer_norm(
    node: torch.fx.Node, a: Any, shape: Sequence[int], w: Any, b: Any, eps: float
) -> tuple[TracedTensor, TracedTensor, TracedTensor]:
    x = a
    k = len(shape)
    axes = tuple(range(x.ndim - k, x.ndim))
    dt = torch_dtype(x)
    used = {u.args[1] for u in node.users if u.target is operator.getitem}
    wide = opmath_dtype(dt)
    if k == 1 and not used - {0}:
        out = ops.layernorm(x, w, b, eps=float(eps))
        return out, out, out
    if k == 1:  # a training forward: the statistics come from the same row kernel
        y, mean, rstd = layernorm_fwd(x, w, b, eps=float(eps))
        return y, to(mean, out_dtype(node, 1)), to(rstd, out_dtype(node, 2))
    xw = to(x, wide)
    mean = ops.mean(xw, axis=axes, keepdims=True)
    d = ops.sub(xw, mean)
    var = ops.mean(ops.mul(d, d), axis=axes, keepdims=True)
    rstd = ops.rsqrt(ops.add(var, to(float(eps), wide)))
    y = ops.mul(d, rstd)
    if w is not None:
        y = ops.mul(y, to(w, wide))
    if b is not None:
        y = ops.add(y, to(b, wide))
    # the statistics in the dtype torch gives them (f32 for 16-bit inputs on CUDA, the
    # input's dtype on the CPU)
    return to(y, dt), to(mean, out_dtype(node, 1)), to(rstd, out_dtype(node, 2))




def _layer_norm_backward_check(node: torch.fx.Node) -> str | None:
    x = val(node.args[1])
    if x is None or x.dtype not in FLOAT_DTYPES:
        return f"{None if x is None else x.dtype} input"
    return None


@rule(aten.native_layer_norm_backward.default, check=_layer_norm_backward_check)
def _native_layer_norm_backward(
    node: torch.fx.Node, grad: Any, x: Any, shape: Sequence[int], mean: Any, rstd: Any,
    w: Any, b: Any, output_mask: Sequence[bool],
) -> tuple[Any, Any, Any]:
    """The gradients of ``native_layer_norm``: the input's is one ``layernorm_bwd`` row
    kernel over rows of the normalized dims (read once from the forward's saved mean and
    rstd); the weight's and bias's are column sums of ``dy xhat`` and ``dy`` over the
    other dims, in f32 for 16-bit inputs (torch's opmath), rounded once."""
    dt = torch_dtype(x)
    wide = opmath_dtype(dt)
    k = len(shape)
    lead = list(x.shape[: x.ndim - k])
    n = math.prod(int(d) for d in shape)
    rows = [*lead, n]
    x2 = ops.reshape(x, rows) if k != 1 else x
    g2 = ops.reshape(to(grad, dt), rows) if k != 1 else to(grad, dt)
    m2, r2 = (ops.reshape(to(v, wide), [*lead, 1]) for v in (mean, rstd))
    gx = gw = gb = None
    if output_mask[0]:
        w2 = None if w is None else ops.reshape(w, [n])
        gx = layernorm_bwd(g2, x2, m2, r2, w2)
        if k != 1:
            gx = ops.reshape(gx, list(x.shape))
    outer = tuple(range(len(lead)))

    def column_sum(v: TracedTensor, like: Any) -> TracedTensor:
        s_ = ops.sum(v, axis=outer) if outer else v
        return ops.reshape(to(s_, torch_dtype(like)), [int(d) for d in shape])

    if output_mask[1] and w is not None:
        xhat = ops.mul(ops.sub(to(x2, wide), m2), r2)
        gw = column_sum(ops.mul(to(g2, wide), xhat), w)
    if output_mask[2] and b is not None:
        gb = column_sum(to(g2, wide), b)
    return gx, gw, gb


def _rms_norm_check(node: torch.fx.Node, x_at: int, w_at: int) -> str | None:
    x, w = val(node.args[x_at]), val(node.args[w_at])
    if x is None or x.dtype not in FLOAT_DTYPES or x.dim() < 1:
        return f"{None if x is None else x.dtype} input"
    if w is not None and (w.dtype != x.dtype or tuple(w.shape) != (x.shape[-1],)):
        return f"a {w.dtype} weight of shape {list(w.shape)} for a {x.dtype} input"
    return None


@rule(torch.ops.tessera.rms_norm.default, check=lambda n: _rms_norm_check(n, 0, 1))
def _rms_norm(node: torch.fx.Node, x: Any, w: Any, eps: float) -> tuple[TracedTensor, ...]:
    """``tessera::rms_norm``: ``tgraph.rmsnorm_fwd`` (one row kernel that also stores each
    row's ``rstd``), or ``tgraph.rmsnorm`` when nothing reads ``rstd`` (inference)."""
    used = {u.args[1] for u in node.users if u.target is operator.getitem}
    if 1 not in used:
        y = ops.rmsnorm(x, w, eps=float(eps))
        return y, y
    return rmsnorm_fwd(x, w, eps=float(eps))


@rule(torch.ops.tessera.rms_norm_backward.default, check=lambda n: _rms_norm_check(n, 1, 3))
def _rms_norm_backward(node: torch.fx.Node, dy: Any, x: Any, rstd: Any, w: Any) -> TracedTensor:
    """``tessera::rms_norm_backward``: one ``tgraph.rmsnorm_bwd`` row kernel."""
    wide = opmath_dtype(torch_dtype(x))
    return rmsnorm_bwd(to(dy, torch_dtype(x)), x, to(rstd, wide), w)


def _group_norm_check(node: torch.fx.Node) -> str | None:
    x = val(node.args[0])
    if not all(isinstance(d, int) for d in x.shape) or x.dim() < 2:
        return "symbolic or rank-1 input"
    return float_only_index(node, 0)


@rule(aten.native_group_norm.default, check=_group_norm_check)
def _native_group_norm(
    node: torch.fx.Node, a: Any, w: Any, b: Any, n: Any, c: Any, hw: Any, group: Any, eps: float
) -> tuple[TracedTensor, TracedTensor, TracedTensor]:
    """``[N, C, *]`` as ``[N, G, C/G * prod(*)]`` rows: each row's mean and 1/std (in
    f32 for 16-bit inputs), the normalized rows, then the per-channel affine."""
    x = a
    dt = torch_dtype(x)
    wide = opmath_dtype(dt)
    g = int(group)
    nn_, cc = x.shape[0], x.shape[1]
    rows = ops.reshape(to(x, wide), [nn_, g, math.prod(x.shape) // (nn_ * g)])
    mean = ops.mean(rows, axis=2, keepdims=True)
    d = ops.sub(rows, mean)
    var = ops.mean(ops.mul(d, d), axis=2, keepdims=True)
    rstd = ops.rsqrt(ops.add(var, to(float(eps), wide)))
    y = ops.reshape(ops.mul(d, rstd), list(x.shape))
    shp = [1, cc, *([1] * (x.ndim - 2))]
    if w is not None:
        y = ops.mul(y, ops.reshape(to(w, wide), shp))
    if b is not None:
        y = ops.add(y, ops.reshape(to(b, wide), shp))
    return (to(y, dt), to(ops.reshape(mean, [nn_, g]), out_dtype(node, 1)),
            to(ops.reshape(rstd, [nn_, g]), out_dtype(node, 2)))


def _bn_shape(x: TracedTensor) -> list[int]:
    return [1, x.shape[1], *([1] * (x.ndim - 2))]


def _bn_apply(
    x: TracedTensor, mean: TracedTensor, rstd: TracedTensor, w: Any, b: Any
) -> TracedTensor:
    shp = _bn_shape(x)
    y = ops.mul(ops.sub(x, ops.reshape(mean, shp)), ops.reshape(rstd, shp))
    if w is not None:
        y = ops.mul(y, ops.reshape(to(w, torch_dtype(x)), shp))
    if b is not None:
        y = ops.add(y, ops.reshape(to(b, torch_dtype(x)), shp))
    return y


@rule(aten._native_batch_norm_legit_no_training.default, check=only_outputs(0))
def _batch_norm_eval(
    node: torch.fx.Node, a: Any, w: Any, b: Any, rm: Any, rv: Any, momentum: float, eps: float
) -> tuple[TracedTensor, ...]:
    dt = torch_dtype(a)
    rstd = ops.rsqrt(ops.add(to(rv, dt), to(float(eps), dt)))
    y = _bn_apply(a, to(rm, dt), rstd, w, b)
    return (y,)


def _bn_train_check(node: torch.fx.Node) -> str | None:
    training = node.args[5] if node.target is _BN_FUNCTIONAL else node.args[5]
    return None if training else "training=False"


_BN_FUNCTIONAL = aten._native_batch_norm_legit_functional.default


@rule(_BN_FUNCTIONAL, check=_bn_train_check)
def _batch_norm_train(
    node: torch.fx.Node,
    a: Any, w: Any, b: Any, rm: Any, rv: Any, training: bool, momentum: float, eps: float,
) -> tuple[TracedTensor, ...]:
    x = a
    dt = torch_dtype(x)
    wide = opmath_dtype(dt)
    n = math.prod(x.shape[i] for i in range(x.ndim) if i != 1)
    xw = to(x, wide)
    if _by_planes(x):
        mean, var = _channel_moments(x)
    else:
        mean = _channel_mean(xw)
        d = ops.sub(xw, ops.reshape(mean, _bn_shape(x)))
        var = _channel_mean(ops.mul(d, d))
    rstd = ops.rsqrt(ops.add(var, to(float(eps), wide)))
    y = to(_bn_apply(xw, mean, rstd, w, b), dt)
    m = float(momentum)
    new_rm = ops.add(ops.mul(to(rm, wide), to(1 - m, wide)), ops.mul(mean, to(m, wide)))
    unbiased = ops.mul(var, to(n / max(n - 1, 1), wide))
    new_rv = ops.add(ops.mul(to(rv, wide), to(1 - m, wide)), ops.mul(unbiased, to(m, wide)))
    # the saved statistics in the dtype torch gives them (f32 for 16-bit inputs on
    # CUDA, the input's dtype on the CPU)
    return (y, to(mean, out_dtype(node, 1)), to(rstd, out_dtype(node, 2)),
            to(new_rm, out_dtype(node, 3)), to(new_rv, out_dtype(node, 4)))


def _by_planes(x: TracedTensor) -> bool:
    """Batch norm's statistics of ``x`` come from its (sample, channel) planes' moments:
    ``[N, C, ...]`` with spatial dims, bf16/f16/f32 (``tgraph.row_moments``' types)."""
    if x.ndim < 3 or torch_dtype(x) not in (torch.bfloat16, torch.float16, torch.float32):
        return False
    return math.prod(x.shape[2:]) > 1


def _channel_moments(x: TracedTensor) -> tuple[TracedTensor, TracedTensor]:
    """The f32 mean and (biased) variance over every axis but 1 of ``[N, C, ...]`` in one
    read of ``x``: each (sample, channel) plane's mean ``m_p`` and sum of squared
    deviations ``M2_p`` from it (``tgraph.row_moments``, one row kernel), combined over
    the ``N`` planes of a channel exactly (Chan et al.): ``mean = avg(m_p)``,
    ``M2 = sum(M2_p) + r * sum((m_p - mean)^2)`` for planes of ``r`` elements."""
    nb, c = x.shape[0], x.shape[1]
    r = math.prod(x.shape[2:])
    mean_p, m2_p = row_moments(x, x.ndim - 2)  # [N, C] each
    mean = ops.div(ops.sum(mean_p, axis=0), to(float(nb), torch.float32))
    dm = ops.sub(mean_p, ops.reshape(mean, [1, c]))
    m2 = ops.add(ops.sum(m2_p, axis=0),
                 ops.mul(ops.sum(ops.mul(dm, dm), axis=0), to(float(r), torch.float32)))
    return mean, ops.div(m2, to(float(nb * r), torch.float32))


def _channel_mean(x: TracedTensor) -> TracedTensor:
    """The mean over every axis but 1 of ``[N, C, ...]``: each (sample, channel)
    row's sum (a row reduction over the spatial dims), then the column sum over the
    samples, divided by their count."""
    n = math.prod(x.shape[i] for i in range(x.ndim) if i != 1)
    if x.ndim > 2:
        x = ops.sum(x, axis=tuple(range(2, x.ndim)))
    return ops.div(ops.sum(x, axis=0), to(float(n), torch_dtype(x)))


# --------------------------------------------------------------------------- matmul, conv, attention


def _same(x: Any, y: Any, dt: torch.dtype) -> tuple[TracedTensor, TracedTensor]:
    return to(x, dt), to(y, dt)


@rule(aten.mm.default, aten.bmm.default, check=float_only)
def _mm(node: torch.fx.Node, a: Any, b: Any) -> TracedTensor:
    x, y = _same(a, b, out_dtype(node))
    return ops.matmul(x, y)


@rule(aten.addmm.default, check=float_only)
def _addmm(
    node: torch.fx.Node, bias: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1
) -> TracedTensor:
    """``beta * bias + alpha * (a @ b)``: for 16-bit operands the product stays f32 and
    the bias is added in f32, one rounding at the end, as cuBLAS' epilogue does (the
    matmul epilogue fusion takes the add and the cast, so the GEMM writes 16 bits)."""
    dt = out_dtype(node)
    wide = opmath_dtype(dt)
    x, y = _same(a, b, dt)
    p = ops.matmul(x, y, out_dtype=wide) if wide != dt else ops.matmul(x, y)
    if alpha != 1:
        p = ops.mul(p, to(alpha, wide))
    if beta == 0:
        return to(p, dt)
    c = to(bias, wide)
    if beta != 1:
        c = ops.mul(c, to(beta, wide))
    return to(ops.add(p, c), dt)


def _conv_check(node: torch.fx.Node) -> str | None:
    x, w, _b, stride, padding, dilation, transposed, out_pad, groups = node.args[:9]
    if len(val(x).shape) not in (3, 4):
        return "not a 1-D or 2-D convolution"
    if transposed:
        return "transposed convolution"
    return float_only(node)


def _as_2d(x: TracedTensor) -> TracedTensor:
    """A 1-D convolution's ``[N, C, L]`` operand (or ``[O, C/G, K]`` kernel) as a 2-D
    one's ``[N, C, 1, L]``: the 1-D convolution is the 2-D one over a single row."""
    return ops.reshape(x, [x.shape[0], x.shape[1], 1, x.shape[2]])


def _row(v: Any, fill: int) -> list[int]:
    """A 1-D convolution's stride, padding or dilation for its 2-D row form."""
    return [fill, *int_list(v)]


@rule(aten.convolution.default, check=_conv_check)
def _convolution(
    node: torch.fx.Node, x: Any, w: Any, b: Any, stride: Any, padding: Any, dilation: Any,
    transposed: bool, output_padding: Any, groups: int,
) -> TracedTensor:
    """``conv2d``; a 1-D convolution (Whisper's, wav2vec2's) as a 2-D one over one row."""
    dt = out_dtype(node)
    if x.ndim == 3:
        y = _convolution(node, _as_2d(x), _as_2d(w), b, _row(stride, 1), _row(padding, 0),
                         _row(dilation, 1), transposed, output_padding, groups)
        return ops.reshape(y, [y.shape[0], y.shape[1], y.shape[3]])
    return ops.conv2d(
        to(x, dt), to(w, dt), to(b, dt) if b is not None else None,
        stride=pair(stride), padding=pair(padding), dilation=pair(dilation),
        groups=int(groups),
    )


def _conv_backward_check(node: torch.fx.Node) -> str | None:
    grad, x, w, _bias_sizes, stride, padding, dilation, transposed, out_pad, groups = node.args[:10]
    if len(val(x).shape) not in (3, 4):
        return "not a 1-D or 2-D convolution"
    if transposed:
        return "transposed convolution"
    return None if val(x).dtype in FLOAT_DTYPES else f"{val(x).dtype} input"


def _pad_zeros(x: TracedTensor, axis: int, before: int, after: int) -> TracedTensor:
    """``x`` with ``before`` and ``after`` zeros along ``axis``."""
    parts = []
    for n in (before, after):
        zs = list(x.shape)
        zs[axis] = n
        parts.append(zeros_of(x, zs) if n > 0 else None)
    pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
    return ops.concat(pieces, axis=axis) if len(pieces) > 1 else x


def _patch_weight_grad(
    g: TracedTensor, x: TracedTensor, kh: int, kw: int, st: list[int], pd: list[int]
) -> TracedTensor:
    """The weight gradient of a convolution whose windows do not overlap (stride at least
    the kernel, as a ViT's patch embedding): each output position reads its own
    ``kh x kw`` patch, so the patches are a reshaped, transposed view of the (padded)
    input and the gradient is one GEMM, ``dW[o, (c,i,j)] = sum over (n,ho,wo) of
    g[(n,ho,wo), o] * patches[(n,ho,wo), (c,i,j)]``, with no dilated gradient."""
    n, c, _, _ = x.shape
    o, ho, wo = g.shape[1], g.shape[2], g.shape[3]
    sh, sw = st
    for axis, (p, s, m) in ((2, (pd[0], sh, ho)), (3, (pd[1], sw, wo))):
        size = x.shape[axis]
        x = _pad_zeros(x, axis, p, max(0, m * s - (size + p)))
        x = take(x, axis, 0, m * s)
    xp = ops.reshape(x, [n, c, ho, sh, wo, sw])
    if sh != kh or sw != kw:
        xp = ops.slice(xp, [0] * 6, [n, c, ho, kh, wo, kw])
    patches = ops.reshape(ops.transpose(xp, [0, 2, 4, 1, 3, 5]), [n * ho * wo, c * kh * kw])
    gm = ops.reshape(ops.transpose(g, [0, 2, 3, 1]), [n * ho * wo, o])
    return ops.reshape(ops.matmul(gm, patches, transpose_a=True), [o, c, kh, kw])


class _Ops:
    """:class:`~tessera.autodiff.conv_grad.Builder` over the traced operator functions."""

    def shape(self, x: TracedTensor) -> tuple[int, ...]:
        return tuple(x.shape)

    def reshape(self, x: TracedTensor, shape: list[int]) -> TracedTensor:
        return x if list(x.shape) == list(shape) else ops.reshape(x, shape)

    def transpose(self, x: TracedTensor, perm: list[int]) -> TracedTensor:
        return x if list(perm) == sorted(perm) else ops.transpose(x, perm)

    def reverse(self, x: TracedTensor, dims: list[int]) -> TracedTensor:
        return ops.flip(x, dims) if dims else x

    def pad(self, x: TracedTensor, axis: int, before: int, after: int) -> TracedTensor:
        return _pad_zeros(x, axis, before, after)

    def take(self, x: TracedTensor, axis: int, start: int, stop: int) -> TracedTensor:
        return take(x, axis, start, stop)

    def crop(self, x: TracedTensor, start: list[int], shape: list[int]) -> TracedTensor:
        if list(start) == [0] * x.ndim and list(shape) == list(x.shape):
            return x
        return ops.slice(x, start, [a + n for a, n in zip(start, shape)])

    def conv2d(self, x: TracedTensor, w: TracedTensor, padding: list[int],
               dilation: list[int], groups: int) -> TracedTensor:
        return ops.conv2d(x, w, padding=padding, dilation=dilation, groups=groups)

    def mask(self, x: TracedTensor, keep: np.ndarray) -> TracedTensor:
        return ops.where(ops.constant(keep), x, to(0.0, torch_dtype(x)))


def _grouped_weight_grad(
    g: TracedTensor, x: TracedTensor, kh: int, kw: int, st: list[int], pd: list[int],
    dl: list[int], groups: int,
) -> TracedTensor:
    """A grouped convolution's weight gradient, ``dW[o, c, i, j] = sum over n of
    r[c, (n, o), i, j]``: ``r`` is one convolution of the input as ``[C/G, (n, g), H, W]``
    (a reshape, no copy, for a depthwise one) with the gradient as ``N O`` kernels
    ``[(n, o), 1, Ho, Wo]`` in ``N G`` groups (taps spaced by the stride, outputs by the
    dilation), one image's partial per output channel: ``N O C/G kh kw`` independent
    sums, so the direct kernel has work for every SM, not ``O C/G kh kw``. 16-bit partials
    are rounded once before their f32 sum over the batch."""
    n, c, h, wd = x.shape
    o, ho, wo = g.shape[1], g.shape[2], g.shape[3]
    cg = c // groups
    if cg == 1:
        xt = ops.reshape(x, [1, n * c, h, wd])
    else:
        x5 = ops.transpose(ops.reshape(x, [n, groups, cg, h, wd]), [2, 0, 1, 3, 4])
        xt = ops.reshape(x5, [cg, n * groups, h, wd])
    kt = ops.reshape(g, [n * o, 1, ho, wo])
    r = ops.conv2d(xt, kt, stride=dl, padding=pd, dilation=st, groups=n * groups)
    if r.shape[2] != kh or r.shape[3] != kw:
        r = take(take(r, 2, 0, kh), 3, 0, kw)
    total = ops.sum(ops.reshape(r, [cg, n, o, kh, kw]), axis=1)  # f32 sum, one rounding
    if cg == 1:
        return ops.reshape(total, [o, 1, kh, kw])
    return ops.transpose(total, [1, 0, 2, 3])


def _pointwise_batched(g: TracedTensor, x: TracedTensor, kh: int, kw: int, pd: list[int]) -> bool:
    """A 1x1 convolution's weight gradient is cheaper as per-image products summed
    (:func:`_pointwise_weight_grad`) than as one product over transposed copies: the f32
    partials ``[N, O, C]`` (written and read: ``8 O C`` bytes per image) are smaller than
    the NHWC copies of the input and the gradient (``4 P (C + O)``), the pixels ``P``
    make 16-byte rows and ``O`` is a multiple of 64 (the batched tensor-core product's
    rows; otherwise it would take the generic kernel)."""
    if (kh, kw) != (1, 1) or pd != [0, 0]:
        return False
    o, c, p = g.shape[1], x.shape[1], g.shape[2] * g.shape[3]
    return p % 8 == 0 and o % 64 == 0 and 2 * o * c < p * (c + o)


def _pointwise_weight_grad(g: TracedTensor, x: TracedTensor, st: list[int]) -> TracedTensor:
    """``dW[o, c] = sum over n of g[n] (O x P) @ x[n].T (P x C)``: one batched product of
    the stored layouts (the input subsampled by the stride first), f32 partials per image
    added in order, rounded once."""
    n, c = x.shape[0], x.shape[1]
    o, ho, wo = g.shape[1], g.shape[2], g.shape[3]
    if st != [1, 1]:
        x = ops.slice(x, [0, 0, 0, 0], [n, c, (ho - 1) * st[0] + 1, (wo - 1) * st[1] + 1],
                      [1, 1, st[0], st[1]])
    dt = torch_dtype(x)
    part = ops.matmul(ops.reshape(g, [n, o, ho * wo]), ops.reshape(x, [n, c, ho * wo]),
                      transpose_b=True, out_dtype=ts_dtype(opmath_dtype(dt)))
    return ops.reshape(to(ops.sum(part, axis=0), dt), [o, c, 1, 1])


@rule(aten.convolution_backward.default, check=_conv_backward_check)
def _convolution_backward(
    node: torch.fx.Node, grad: Any, x: Any, w: Any, bias_sizes: Any, stride: Any,
    padding: Any, dilation: Any, transposed: bool, output_padding: Any, groups: int,
    output_mask: Sequence[bool],
) -> tuple[Any, Any, Any]:
    """Gradients of a 2-D convolution as convolutions. The input's: one stride-1
    convolution of the undilated gradient (:func:`tessera.autodiff.conv_grad.input_grad`,
    shared with ``ts.grad``): the kernel reversed and channel-swapped (within each group),
    and along a strided axis cut into its stride phases, one output channel per (phase,
    channel), interleaved by one transpose. The kernel's: the input (channels as batch)
    correlated with the gradient as kernel, its taps spaced by the stride and its outputs
    by the dilation (no dilated copy of the gradient); or, when the windows do not
    overlap (stride >= kernel, no dilation), one GEMM over the input's patches
    (:func:`_patch_weight_grad`); with ``groups``, :func:`_grouped_weight_grad`. A 1-D
    convolution's are its 2-D row form's."""
    if x.ndim == 3:
        gx, gw, gb = _convolution_backward(
            node, _as_2d(grad), _as_2d(x), _as_2d(w), bias_sizes, _row(stride, 1),
            _row(padding, 0), _row(dilation, 1), transposed, output_padding, groups,
            output_mask)
        return (None if gx is None else ops.reshape(gx, list(x.shape)),
                None if gw is None else ops.reshape(gw, list(w.shape)), gb)
    dt = torch_dtype(x)
    g = to(grad, dt)
    st, pd, dl = pair(stride), pair(padding), pair(dilation)
    gr = int(groups)
    _, _, h, wd = x.shape
    kh, kw = w.shape[2], w.shape[3]
    gx = gw = gb = None
    if output_mask[0]:
        gx = input_grad(_Ops(), g, w, (h, wd), st, pd, dl, gr)
    if output_mask[1] and gr != 1:
        gw = _grouped_weight_grad(g, x, kh, kw, st, pd, dl, gr)
    elif output_mask[1] and _pointwise_batched(g, x, kh, kw, pd):
        gw = _pointwise_weight_grad(g, x, st)
    elif output_mask[1] and st[0] >= kh and st[1] >= kw and dl == [1, 1]:
        gw = _patch_weight_grad(g, x, kh, kw, st, pd)
    elif output_mask[1]:
        xt = ops.transpose(x, [1, 0, 2, 3])
        kt = ops.transpose(g, [1, 0, 2, 3])
        r = ops.conv2d(xt, kt, stride=dl, padding=pd, dilation=st)
        if r.shape[2] != kh or r.shape[3] != kw:
            r = ops.slice(r, [0, 0, 0, 0], [r.shape[0], r.shape[1], kh, kw])
        gw = ops.transpose(r, [1, 0, 2, 3])
    if output_mask[2]:
        gb = ops.sum(g, axis=(0, 2, 3))
    return gx, gw, gb


def _sdpa_check_at(dropout_at: int, lse: bool = False) -> Check:
    """The check of a fused attention op whose dropout is positional argument
    ``dropout_at``; ``lse``: its log-sum-exp (result 1) may be used too."""

    def check(node: torch.fx.Node) -> str | None:
        args = list(node.args)
        dropout = args[dropout_at] if len(args) > dropout_at else node.kwargs.get("dropout_p", 0.0)
        if dropout:
            return f"dropout_p={dropout}"
        q, k = val(args[0]), val(args[1])
        if q.dim() != k.dim() or q.dim() < 3:
            return "operands of different ranks"
        hq, hk = q.shape[-3], k.shape[-3]
        if isinstance(hq, int) and isinstance(hk, int) and hq % hk:
            return f"{hq} query heads over {hk} key heads"
        if lse:
            return only_outputs(0, 1)(node) or float_only_index(node, 0)
        return only_outputs(0)(node) or float_only_index(node, 0)

    return check


_sdpa_check = _sdpa_check_at(3, lse=True)


def _lse_used(node: torch.fx.Node) -> bool:
    return any(u.target is operator.getitem and u.args[1] == 1 for u in node.users)


def _flash(
    node: torch.fx.Node, q: TracedTensor, k: TracedTensor, v: TracedTensor, causal: bool,
    scale: Any, mask: Any = None,
) -> tuple[TracedTensor, ...]:
    """A fused attention node's (output, log-sum-exp), the latter only when it is used,
    in the layout of the node's own log-sum-exp."""
    if not _lse_used(node):
        return (attention(q, k, v, mask, causal, scale),)
    heads = q.shape[-3]
    kr, vr = _repeat_heads(k, heads), _repeat_heads(v, heads)
    kind = "none" if mask is None else mask_kind(mask, q.shape[-2], k.shape[-2])
    if kind is not None:
        o, lse = flash_attention_fwd(q, kr, vr, scale=scale, causal=causal or kind == "causal")
    else:  # a general mask: the scores materialized, the log-sum-exp of the masked ones
        s = _masked_scores(q, kr, mask, causal, scale, _wide(q))
        p, dead = _masked_softmax(s)
        o = ops.matmul(ops.cast(p, q.dtype), vr)
        lse = ops.logsumexp(s, dim=-1)
        lse = ops.where(ops.reshape(dead, list(lse.shape)), zeros_of(lse, lse.shape), lse)
    want = [int(d) for d in val(node)[1].shape]  # the op's own log-sum-exp layout
    if want == [*lse.shape, 1]:  # cuDNN: [..., Sq, 1]
        lse = ops.reshape(lse, want)
    elif want[:-1] == list(lse.shape[:-1]) and want[-1] > lse.shape[-1]:  # padded rows
        lse = ops.concat([lse, zeros_of(lse, [*want[:-1], want[-1] - lse.shape[-1]])], axis=-1)
    elif want != list(lse.shape):
        raise Unsupported(f"log-sum-exp of shape {want}")
    return (o, lse)


def _wide(q: TracedTensor) -> torch.dtype:
    """The dtype torch's fused attention kernels accumulate q's scores in."""
    return torch.float64 if torch_dtype(q) == torch.float64 else torch.float32


def _masked_scores(
    q: TracedTensor, k: TracedTensor, mask: Any, causal: bool, scale: Any, dt: torch.dtype
) -> TracedTensor:
    """``scale q kᵀ`` in ``dt`` with the causal mask and ``mask`` (bool: keep where True;
    else added) applied. k has q's heads."""
    sc = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    s = ops.mul(ops.matmul(to(q, dt), ops.transpose(to(k, dt))), to(float(sc), dt))
    ninf = to(float("-inf"), dt)
    if causal:
        lq, lk = q.shape[-2], k.shape[-2]
        keep = np.arange(lq)[:, None] >= np.arange(lk)[None, :]
        s = ops.where(ops.constant(keep, ts_dtype(torch.bool)), s, ninf)
    if mask is not None:
        s = ops.where(mask, s, ninf) if torch_dtype(mask) == torch.bool else ops.add(s, to(mask, dt))
    return s


def _masked_softmax(s: TracedTensor) -> tuple[TracedTensor, TracedTensor]:
    """(softmax of the masked scores over the last axis, the rows ``[..., Sq, 1]`` whose
    scores are all ``-inf``): those rows (a left-padded sequence's padding queries) get
    zeros, as torch's fused attention gives them a zero output and log-sum-exp, where
    a plain softmax would give NaN that the next layer spreads to every query."""
    dead = ops.eq(ops.max(s, axis=-1, keepdims=True), to(float("-inf"), torch_dtype(s)))
    p = ops.softmax(ops.where(dead, zeros_of(s, s.shape), s), axis=-1)
    return ops.where(dead, zeros_of(s, s.shape), p), dead


def _sum_groups(x: TracedTensor, kv_heads: int) -> TracedTensor:
    """A per-query-head gradient [..., H, S, D] summed over each key/value head's group."""
    *b, heads, s, d = x.shape
    if heads == kv_heads:
        return x
    return ops.sum(ops.reshape(x, [*b, kv_heads, heads // kv_heads, s, d]), axis=-3)


def _sdpa_backward_check(node: torch.fx.Node) -> str | None:
    go, q, k, v, out, lse = (val(a) for a in node.args[:6])
    if q.dim() < 3 or not (q.dim() == k.dim() == v.dim() == out.dim() == go.dim()):
        return "operands of different ranks"
    hq, hk = q.shape[-3], k.shape[-3]
    if isinstance(hq, int) and isinstance(hk, int) and hq % hk:
        return f"{hq} query heads over {hk} key heads"
    if len({t.dtype for t in (go, q, k, v, out)}) != 1 or q.dtype not in FLOAT_DTYPES:
        return "operands of different or non-float dtypes"
    wide = torch.float64 if q.dtype == torch.float64 else torch.float32  # (fake tensors)
    if lse.dtype != wide or lse.dim() != q.dim() - 1:
        return f"log-sum-exp {lse.dtype}{list(lse.shape)}"
    return None


@rule(torch.ops.tessera.sdpa_backward.default, check=_sdpa_backward_check)
def _sdpa_backward(
    node: torch.fx.Node, go: Any, q: Any, k: Any, v: Any, out: Any, lse: Any,
    is_causal: bool, scale: Any,
) -> tuple[TracedTensor, ...]:
    heads, kv_heads = q.shape[-3], k.shape[-3]
    dq, dk, dv = flash_attention_bwd(
        q, _repeat_heads(k, heads), _repeat_heads(v, heads), out, go, lse,
        scale=scale, causal=bool(is_causal),
    )
    # each key/value head's gradient: the sum over its query heads
    return (dq, _sum_groups(dk, kv_heads), _sum_groups(dv, kv_heads))


@rule(torch.ops.tessera.sdpa_backward_masked.default, check=_sdpa_backward_check)
def _sdpa_backward_masked(
    node: torch.fx.Node, go: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, mask: Any,
    is_causal: bool, scale: Any,
) -> tuple[TracedTensor, ...]:
    heads, kv_heads = q.shape[-3], k.shape[-3]
    kr, vr = _repeat_heads(k, heads), _repeat_heads(v, heads)
    kind = mask_kind(mask, q.shape[-2], k.shape[-2])
    if kind is not None:
        dq, dk, dv = flash_attention_bwd(q, kr, vr, out, go, lse, scale=scale,
                                         causal=bool(is_causal) or kind == "causal")
        return (dq, _sum_groups(dk, kv_heads), _sum_groups(dv, kv_heads))
    # a general mask: P = exp(S - lse) from the recomputed masked scores, in f32
    wide = _wide(q)
    sc = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    s = _masked_scores(q, kr, mask, bool(is_causal), scale, wide)
    p = ops.exp(ops.sub(s, ops.reshape(to(lse, wide), [*lse.shape, 1])))
    gw, ow, qw, kw, vw = (to(x, wide) for x in (go, out, q, kr, vr))
    dv = ops.matmul(ops.transpose(p), gw)
    dp = ops.matmul(gw, ops.transpose(vw))
    di = ops.sum(ops.mul(gw, ow), axis=-1, keepdims=True)
    ds = ops.mul(p, ops.sub(dp, di))
    c = to(float(sc), wide)
    dq = ops.mul(ops.matmul(ds, kw), c)
    dk = ops.mul(ops.matmul(ops.transpose(ds), qw), c)
    return (to(dq, torch_dtype(q)), to(_sum_groups(dk, kv_heads), torch_dtype(k)),
            to(_sum_groups(dv, kv_heads), torch_dtype(v)))


def _repeat_heads(x: TracedTensor, heads: int) -> TracedTensor:
    """``x`` [..., Hk, S, D] with each head repeated for ``heads // Hk`` query heads."""
    *b, hk, s, d = x.shape
    if hk == heads:
        return x
    g = heads // hk
    y = ops.broadcast_to(ops.reshape(x, [*b, hk, 1, s, d]), [*b, hk, g, s, d])
    return ops.reshape(y, [*b, heads, s, d])


def attention(
    q: TracedTensor, k: TracedTensor, v: TracedTensor, mask: Any, causal: bool, scale: Any
) -> TracedTensor:
    """``softmax(scale q kᵀ + mask) v`` as torch's SDPA defines it: ``flash_attention``
    without a mask, else matmuls and a softmax (a bool mask keeps True positions)."""
    k = _repeat_heads(k, q.shape[-3])
    v = _repeat_heads(v, q.shape[-3])
    kind = "none" if mask is None else mask_kind(mask, q.shape[-2], k.shape[-2])
    if kind is not None:  # no mask, or one known at trace time to be causal
        return ops.flash_attention(q, k, v, scale=scale, causal=causal or kind == "causal")
    s = _masked_scores(q, k, mask, causal, scale, torch_dtype(q))
    return ops.matmul(_masked_softmax(s)[0], v)


@rule(aten._scaled_dot_product_flash_attention_for_cpu.default, check=_sdpa_check)
def _sdpa_cpu(
    node: torch.fx.Node, q: Any, k: Any, v: Any, dropout_p: float = 0.0,
    is_causal: bool = False, *, attn_mask: Any = None, scale: Any = None,
) -> tuple[TracedTensor, ...]:
    return _flash(node, q, k, v, bool(is_causal), scale, attn_mask)


@rule(aten._scaled_dot_product_flash_attention.default, check=_sdpa_check)
def _sdpa_flash(
    node: torch.fx.Node, q: Any, k: Any, v: Any, dropout_p: float = 0.0,
    is_causal: bool = False, return_debug_mask: bool = False, *, scale: Any = None,
) -> tuple[TracedTensor, ...]:
    return _flash(node, q, k, v, bool(is_causal), scale)


@rule(aten._scaled_dot_product_efficient_attention.default,
      check=_sdpa_check_at(5, lse=True))
def _sdpa_efficient(
    node: torch.fx.Node, q: Any, k: Any, v: Any, attn_bias: Any, compute_log_sumexp: bool,
    dropout_p: float = 0.0, is_causal: bool = False, *, scale: Any = None,
) -> tuple[TracedTensor, ...]:
    return _flash(node, q, k, v, bool(is_causal), scale, attn_bias)


@rule(aten._scaled_dot_product_cudnn_attention.default,
      check=_sdpa_check_at(5, lse=True))
def _sdpa_cudnn(
    node: torch.fx.Node, q: Any, k: Any, v: Any, attn_bias: Any, compute_log_sumexp: bool,
    dropout_p: float = 0.0, is_causal: bool = False, return_debug_mask: bool = False, *,
    scale: Any = None,
) -> tuple[TracedTensor, ...]:
    return _flash(node, q, k, v, bool(is_causal), scale, attn_bias)
