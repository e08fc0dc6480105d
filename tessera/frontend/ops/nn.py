"""Reductions and neural-network operator functions: ``sum``/``max``/``min``/``mean``,
``softmax``, the norms, ``matmul``/``gemm``, ``flash_attention``, ``conv2d``, ``mse``."""

from __future__ import annotations

import builtins
import numbers
from collections.abc import Sequence
from typing import Any

from xdsl.dialects.builtin import (
    FloatAttr,
    IntegerAttr,
    UnitAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute

from tessera.frontend.errors import ShapeError, TesseraTypeError, located
from tessera.frontend.ops.base import (
    _as_tensor,
    _broadcast,
    _check_same_elem,
    _dense_props,
    _emit,
    _float,
    _int,
    _ints,
    _named_operands,
    _norm_axis,
    _operands,
    _policy,
    _tensor_arg,
)
from tessera.frontend.ops.elementwise import (
    cast,
)
from tessera.frontend.ops.shape import broadcast_to, reshape
from tessera.frontend.tracing import TracedTensor, current_trace, result_type
from tessera.ir import graph as g
from tessera.ir.attrs import tensor_type
from tessera.ir.dtypes import bf16, fp16, fp32, fp64, int64
from tessera.ir.policy import NumericPolicy

# --------------------------------------------------------------------------- reductions


def _reduce(
    opcls: type[g.AxesReductionOp], opname: str, x: Any, axis: Any, keepdims: bool,
    like: Any = None,
) -> TracedTensor:
    if not isinstance(x, TracedTensor):
        current_trace(opname)
        raise TesseraTypeError(located(f"{opname}: expected a tensor, got {type(x).__name__}"))
    rank = x.ndim
    if axis is None:
        axes = list(range(rank))
    else:
        raw = [axis] if isinstance(axis, numbers.Integral) else _ints(axis, f"{opname} axis")
        axes = [_norm_axis(opname, _int(a, f"{opname} axis"), rank) for a in raw]
        if len(set(axes)) != len(axes):
            raise ShapeError(located(f"{opname}: repeated axis in {raw}"))
    if opcls in (g.MaxOp, g.MinOp) and any(x.shape[a] == 0 for a in axes):
        raise ShapeError(
            located(
                f"{opname} of {g.fmt_shape(x.shape)} over an empty axis: the reduction has no "
                "identity"
            )
        )
    if keepdims:
        shape = [1 if i in axes else d for i, d in enumerate(x.shape)]
    else:
        shape = [d for i, d in enumerate(x.shape) if i not in axes]
    props = _dense_props("axes", sorted(axes) if axis is not None else [])
    if keepdims:
        props["keepdims"] = UnitAttr()
    return _emit(
        opcls,
        x.trace,
        operands=[x.value],
        result_types=[result_type(shape, x.type if like is None else like)],
        properties=props,
    )


def _narrow_int(x: Any) -> bool:
    """True for a bool or integer tensor narrower than 64 bits."""
    return (
        isinstance(x, TracedTensor)
        and not x.is_complex
        and not x.dtype.is_float
        and x.dtype != int64
    )


def sum(x: Any, axis: Any = None, keepdims: bool = False) -> TracedTensor:  # noqa: A001
    """Sum over ``axis`` (an int, a tuple, or None for all), in a fixed order.

    Bool and narrow integer tensors are summed as ``int64`` (a count for bool),
    as in torch and numpy."""
    if _narrow_int(x):
        x = cast(x, int64)
    return _reduce(g.SumOp, "sum", x, axis, keepdims)


def max(x: Any, axis: Any = None, keepdims: bool = False) -> TracedTensor:  # noqa: A001
    """Maximum over ``axis`` (None: all axes)."""
    return _reduce(g.MaxOp, "max", x, axis, keepdims)


def min(x: Any, axis: Any = None, keepdims: bool = False) -> TracedTensor:  # noqa: A001
    """Minimum over ``axis`` (None: all axes)."""
    return _reduce(g.MinOp, "min", x, axis, keepdims)


def mean(x: Any, axis: Any = None, keepdims: bool = False) -> TracedTensor:
    """Arithmetic mean over ``axis`` (None: all axes) of a float tensor."""
    if isinstance(x, TracedTensor) and not x.is_complex and not x.dtype.is_float:
        raise TesseraTypeError(
            located(f"mean of a {x.dtype!r} tensor: convert it to a float type with ts.cast")
        )
    return _reduce(g.MeanOp, "mean", x, axis, keepdims)


def logsumexp(x: Any, dim: Any, keepdim: bool = False, *, wide: bool = False) -> TracedTensor:
    """``log(sum(exp(x)))`` over ``dim`` (an int or a tuple of ints), computed stably with
    the maximum subtracted first, as ``torch.logsumexp``. Integer and bool tensors are
    taken as ``f32``; an empty slice gives ``-inf``. ``wide``: a bf16/f16 ``x`` gives an
    f32 result (the f32 sums unrounded), without an f32 copy of ``x``."""
    if isinstance(x, TracedTensor) and not x.is_complex and not x.dtype.is_float:
        x = cast(x, fp32)
    if isinstance(x, TracedTensor) and x.is_complex:
        raise TesseraTypeError(located("logsumexp of a complex tensor is not defined"))
    if dim is None or (
        not isinstance(dim, numbers.Integral) and len(_ints(dim, "logsumexp dim")) == 0
    ):
        raise TesseraTypeError(
            located("logsumexp: dim must be an int or a non-empty tuple of ints")
        )
    like = fp32 if wide and isinstance(x, TracedTensor) and x.dtype.is_float and x.dtype.bits == 16 else None
    return _reduce(g.LogSumExpOp, "logsumexp", x, dim, bool(keepdim), like)


# --------------------------------------------------------------------------- nn ops


def softmax(x: Any, axis: int = -1) -> TracedTensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``."""
    x = _tensor_arg(x, "softmax")
    ax = _norm_axis("softmax", axis, x.ndim)
    return _emit(
        g.SoftmaxOp,
        x.trace,
        operands=[x.value],
        result_types=[x.type],
        properties={"axis": IntegerAttr(ax, i64)},
    )


def layernorm(
    x: Any, weight: Any = None, bias: Any = None, *, eps: float = 1e-5
) -> TracedTensor:
    """Layer normalization over the last dim, optional ``weight`` and ``bias`` of size [D]."""
    x = _tensor_arg(x, "layernorm")
    w = _as_tensor(weight, "layernorm", x) if weight is not None else None
    b = _as_tensor(bias, "layernorm", x) if bias is not None else None
    return _emit(
        g.LayerNormOp,
        x.trace,
        operands=_named_operands(
            g.LayerNormOp,
            input=x.value,
            weight=w.value if w is not None else None,
            bias=b.value if b is not None else None,
        ),
        result_types=[x.type],
        properties={"eps": FloatAttr(_float(eps, "layernorm eps"), f64)},
    )


def layernorm_fwd(
    x: Any, weight: Any = None, bias: Any = None, *, eps: float = 1e-5
) -> tuple[TracedTensor, TracedTensor, TracedTensor]:
    """``layernorm`` that also returns each row's mean and ``1 / sqrt(var + eps)``
    (``[..., 1]``, f32; f64 for f64 ``x``): a training forward's statistics, computed
    with the normalization in one pass over the rows."""
    x = _tensor_arg(x, "layernorm_fwd")
    w = _as_tensor(weight, "layernorm_fwd", x) if weight is not None else None
    b = _as_tensor(bias, "layernorm_fwd", x) if bias is not None else None
    stats = tensor_type((*x.shape[:-1], 1), fp64 if x.dtype == fp64 else fp32)
    op = x.trace.add(g.LayerNormFwdOp.build(
        operands=_named_operands(
            g.LayerNormFwdOp,
            input=x.value,
            weight=w.value if w is not None else None,
            bias=b.value if b is not None else None,
        ),
        result_types=[x.type, stats, stats],
        properties={"eps": FloatAttr(_float(eps, "layernorm_fwd eps"), f64)},
    ))
    return tuple(TracedTensor(r, x.trace) for r in op.results)  # type: ignore[return-value]


def layernorm_bwd(dy: Any, x: Any, mean: Any, rstd: Any, weight: Any = None) -> TracedTensor:
    """The input gradient of ``layernorm(x, weight, ...)`` for the cotangent ``dy``, from
    the forward's row statistics (:func:`layernorm_fwd`): one pass over the rows."""
    x = _tensor_arg(x, "layernorm_bwd")
    dy, mean, rstd = (_as_tensor(v, "layernorm_bwd", x) for v in (dy, mean, rstd))
    w = _as_tensor(weight, "layernorm_bwd", x) if weight is not None else None
    return _emit(
        g.LayerNormBwdOp,
        x.trace,
        operands=_named_operands(
            g.LayerNormBwdOp, dy=dy.value, input=x.value, mean=mean.value, rstd=rstd.value,
            weight=w.value if w is not None else None, residual=None,
        ),
        result_types=[x.type],
    )


def rmsnorm_bwd(dy: Any, x: Any, rstd: Any, weight: Any = None) -> TracedTensor:
    """The input gradient of ``rmsnorm(x, weight)`` for the cotangent ``dy``, from the row
    ``rstd = 1 / sqrt(mean(x^2) + eps)`` (``[..., 1]``): one pass over the rows."""
    x = _tensor_arg(x, "rmsnorm_bwd")
    dy, rstd = (_as_tensor(v, "rmsnorm_bwd", x) for v in (dy, rstd))
    w = _as_tensor(weight, "rmsnorm_bwd", x) if weight is not None else None
    return _emit(
        g.RMSNormBwdOp,
        x.trace,
        operands=_named_operands(
            g.RMSNormBwdOp, dy=dy.value, input=x.value, rstd=rstd.value,
            weight=w.value if w is not None else None, residual=None,
        ),
        result_types=[x.type],
    )


def rmsnorm(x: Any, weight: Any = None, *, eps: float = 1e-6) -> TracedTensor:
    """RMS normalization over the last dim, optional ``weight`` of size [D]."""
    x = _tensor_arg(x, "rmsnorm")
    w = _as_tensor(weight, "rmsnorm", x) if weight is not None else None
    return _emit(
        g.RMSNormOp,
        x.trace,
        operands=_named_operands(
            g.RMSNormOp, input=x.value, weight=w.value if w is not None else None
        ),
        result_types=[x.type],
        properties={"eps": FloatAttr(_float(eps, "rmsnorm eps"), f64)},
    )


def rmsnorm_fwd(
    x: Any, weight: Any = None, *, eps: float = 1e-6
) -> tuple[TracedTensor, TracedTensor]:
    """``rmsnorm`` that also returns each row's ``1 / sqrt(mean(x^2) + eps)``
    (``[..., 1]``, f32; f64 for f64 ``x``): a training forward's statistic, computed with
    the normalization in one pass over the rows."""
    x = _tensor_arg(x, "rmsnorm_fwd")
    w = _as_tensor(weight, "rmsnorm_fwd", x) if weight is not None else None
    stats = tensor_type((*x.shape[:-1], 1), fp64 if x.dtype == fp64 else fp32)
    op = x.trace.add(g.RMSNormFwdOp.build(
        operands=_named_operands(
            g.RMSNormFwdOp, input=x.value, weight=w.value if w is not None else None
        ),
        result_types=[x.type, stats],
        properties={"eps": FloatAttr(_float(eps, "rmsnorm_fwd eps"), f64)},
    ))
    return tuple(TracedTensor(r, x.trace) for r in op.results)  # type: ignore[return-value]


def row_moments(x: Any, dims: int) -> tuple[TracedTensor, TracedTensor]:
    """Each row's f32 mean and sum of squared deviations from it, the ``dims`` trailing
    dims of ``x`` (bf16, f16 or f32) being a row (``tgraph.row_moments``)."""
    x = _tensor_arg(x, "row_moments")
    if not 1 <= dims <= x.ndim or x.dtype not in (bf16, fp16, fp32):
        raise ShapeError(located(
            f"row_moments: needs dims between 1 and {x.ndim} and a bf16, f16 or f32 input, "
            f"got dims = {dims} and {x.dtype}"
        ))
    op = x.trace.add(g.RowMomentsOp(x.value, dims))
    return tuple(TracedTensor(r, x.trace) for r in op.results)  # type: ignore[return-value]


layernorm_safe = layernorm
rmsnorm_safe = rmsnorm


def matmul_result_policy(
    a: NumericPolicy, b: NumericPolicy, out_dtype: Any = None
) -> NumericPolicy:
    """The result policy of ``matmul(a, b)`` (see the module docstring)."""
    if out_dtype is not None:
        return _policy(out_dtype, "matmul out_dtype")
    acc = a.accum or b.accum
    if acc is not None:
        return NumericPolicy(acc)
    return a


def _quantized_operand(x: TracedTensor) -> TracedTensor:
    """A matmul operand of integer storage with a float ``@accum`` (a
    ``@ts.precision_policy`` such as the guide's ``QuantizedPolicy``: int8 storage, f32
    accumulate) converted to its accumulate type, exactly, so that products and sums are
    computed there; other operands as they are."""
    p = x.policy
    if p.storage.kind != "float" and p.accum is not None and p.accum.kind == "float":
        return cast(x, p.accum)
    return x


def matmul(
    a: Any,
    b: Any,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    tile_shape: Sequence[int] | None = None,
    out_dtype: Any = None,
) -> TracedTensor:
    """Matrix product with batch broadcasting; ``tile_shape=(BM, BN, BK)`` is a lowering hint."""
    x, y = (_quantized_operand(v) for v in _operands("matmul", a, b))
    _check_same_elem("matmul", x, y)
    r = g.MatmulOp.infer_shape(x.shape, y.shape, transpose_a, transpose_b)
    if isinstance(r, str):
        raise ShapeError(located(f"matmul {r}"))
    pol = matmul_result_policy(x.policy, y.policy, out_dtype)
    props: dict[str, Attribute] = {}
    if transpose_a:
        props["transpose_lhs"] = UnitAttr()
    if transpose_b:
        props["transpose_rhs"] = UnitAttr()
    if tile_shape is not None:
        props.update(_dense_props("tile_shape", tile_shape))
    return _emit(
        g.MatmulOp,
        x.trace,
        operands=[x.value, y.value],
        result_types=[tensor_type(r, pol)],
        properties=props,
    )


def gemm(a: Any, b: Any, **kw: Any) -> TracedTensor:
    """``matmul`` under its BLAS name (same op, same keywords)."""
    return matmul(a, b, **kw)


def flash_attention(
    q: Any, k: Any, v: Any, *, scale: float | None = None, causal: bool = False
) -> TracedTensor:
    """Fused ``softmax(scale * q kᵀ [+ causal mask]) v`` (scale defaults to 1/sqrt(D)).

    ``q`` is ``[..., H, Sq, D]``, ``k`` and ``v`` ``[..., Hkv, Sk, D]``. With fewer key/value
    heads than query heads (grouped-query attention, ``H`` a multiple of ``Hkv``), query
    head ``h`` reads key/value head ``h // (H / Hkv)``, as ``torch``'s
    ``scaled_dot_product_attention(..., enable_gqa=True)``; the gradients of ``k`` and ``v``
    are then summed over each head's group. The causal mask keeps key ``j`` for query ``i``
    when ``j <= i`` (the top-left-aligned lower triangle, as torch's ``is_causal``)."""
    q, k, v = _operands("flash_attention", q, k, v)
    k, v = _repeat_kv_heads(q, k), _repeat_kv_heads(q, v)
    props: dict[str, Attribute] = {}
    if scale is not None:
        props["scale"] = FloatAttr(_float(scale, "flash_attention scale"), f64)
    if causal:
        props["causal"] = UnitAttr()
    shape = (*q.shape[:-1], v.shape[-1]) if q.ndim >= 1 and v.ndim >= 1 else q.shape
    return _emit(
        g.FlashAttentionOp,
        q.trace,
        operands=[q.value, k.value, v.value],
        result_types=[result_type(shape, q.type)],
        properties=props,
    )


def _repeat_kv_heads(q: TracedTensor, kv: TracedTensor) -> TracedTensor:
    """``kv [..., Hkv, Sk, D]`` with each head repeated ``H / Hkv`` times in place
    (``[..., H, Sk, D]``, head ``h`` a copy of head ``h // (H / Hkv)``) when ``q`` has
    ``H`` heads, a multiple of ``Hkv``; ``kv`` itself otherwise (the op's verifier then
    reports any other mismatch)."""
    if q.ndim < 3 or kv.ndim != q.ndim or q.shape[:-3] != kv.shape[:-3]:
        return kv
    h, hkv = q.shape[-3], kv.shape[-3]
    if hkv == h or hkv == 0 or h % hkv != 0:
        return kv
    *lead, sk, d = kv.shape
    grouped = broadcast_to(reshape(kv, [*lead, 1, sk, d]), [*lead, h // hkv, sk, d])
    return reshape(grouped, [*lead[:-1], h, sk, d])


def _attention_props(scale: float | None, causal: bool) -> dict[str, Attribute]:
    props: dict[str, Attribute] = {}
    if scale is not None:
        props["scale"] = FloatAttr(_float(scale, "flash_attention scale"), f64)
    if causal:
        props["causal"] = UnitAttr()
    return props


def _lse_type(q: TracedTensor) -> Attribute:
    """The log-sum-exp's type: q's batch and query dims, f32 (f64 for f64 operands)."""
    wide = fp64 if q.dtype == fp64 else fp32
    return tensor_type(q.shape[:-1], wide)


def flash_attention_fwd(
    q: Any, k: Any, v: Any, *, scale: float | None = None, causal: bool = False
) -> tuple[TracedTensor, TracedTensor]:
    """``flash_attention`` that also returns each query row's log-sum-exp
    ``log(sum_j exp(scale q kⱼ))`` (f32, f64 for f64 operands): what a backward needs."""
    q, k, v = _operands("flash_attention_fwd", q, k, v)
    op = q.trace.add(g.FlashAttentionFwdOp.build(
        operands=[q.value, k.value, v.value],
        result_types=[result_type((*q.shape[:-1], v.shape[-1]), q.type), _lse_type(q)],
        properties=_attention_props(scale, causal),
    ))
    return TracedTensor(op.results[0], q.trace), TracedTensor(op.results[1], q.trace)


def flash_attention_bwd(
    q: Any, k: Any, v: Any, o: Any, do: Any, lse: Any, *,
    scale: float | None = None, causal: bool = False,
) -> tuple[TracedTensor, TracedTensor, TracedTensor]:
    """The gradients ``(dq, dk, dv)`` of ``o = flash_attention(q, k, v)`` for the output
    cotangent ``do``, from the forward's result ``o`` and log-sum-exp ``lse``."""
    q, k, v, o, do, lse = _operands("flash_attention_bwd", q, k, v, o, do, lse)
    op = q.trace.add(g.FlashAttentionBwdOp.build(
        operands=[x.value for x in (q, k, v, o, do, lse)],
        result_types=[q.type, k.type, v.type],
        properties=_attention_props(scale, causal),
    ))
    return tuple(TracedTensor(r, q.trace) for r in op.results)  # type: ignore[return-value]


def conv2d(
    x: Any,
    weight: Any,
    bias: Any = None,
    *,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
) -> TracedTensor:
    """2-D cross-correlation: NCHW input, OIHW weight, optional bias [O]
    (``tgraph.conv2d``, ``torch.nn.functional.conv2d``'s arguments and meaning).

    ``stride`` and ``padding`` (zeros) per spatial dim; ``dilation`` spaces the kernel's
    taps; ``groups`` splits the channels into that many independent convolutions: the
    weight is ``[O, C / groups, kh, kw]``, C and O are multiples of ``groups``, and output
    channel ``o`` reads only the input channels of its group ``o // (O / groups)``.
    ``groups == C`` with ``O == C`` is a depthwise convolution (MobileNet, ConvNeXt);
    grouped convolutions with few taps per output (``C/groups x kh x kw <= 64``) lower to
    a direct kernel that stages its input rows in shared memory, others to the generic
    direct kernel (not the tensor-core GEMM paths)."""
    x, w = _operands("conv2d", x, weight)
    b = _as_tensor(bias, "conv2d", x) if bias is not None else None
    st = [stride, stride] if isinstance(stride, int) else list(stride)
    pd = [padding, padding] if isinstance(padding, int) else list(padding)
    dl = [dilation, dilation] if isinstance(dilation, int) else list(dilation)
    _check_same_elem("conv2d", x, w)
    if len(st) != 2 or len(pd) != 2 or builtins.min(st) < 1 or builtins.min(pd) < 0:
        raise ShapeError(
            located("conv2d stride needs two sizes >= 1 and padding two sizes >= 0")
        )
    if len(dl) != 2 or builtins.min(dl) < 1:
        raise ShapeError(located(f"conv2d dilation needs two sizes >= 1, got {dl}"))
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ShapeError(located(f"conv2d groups needs an int >= 1, got {groups!r}"))
    r = g.Conv2dOp.infer_shape(x.shape, w.shape, st, pd, dl, groups)
    if isinstance(r, str):
        raise ShapeError(located(f"conv2d {r}"))
    props = _dense_props("stride", st)
    props.update(_dense_props("padding", pd))
    if dl != [1, 1]:
        props.update(_dense_props("dilation", dl))
    if groups != 1:
        props["groups"] = IntegerAttr(groups, i64)
    return _emit(
        g.Conv2dOp,
        x.trace,
        operands=_named_operands(
            g.Conv2dOp, input=x.value, weight=w.value, bias=b.value if b is not None else None
        ),
        result_types=[result_type(r, x.type)],
        properties=props,
    )


def mse(pred: Any, target: Any) -> TracedTensor:
    """Mean squared error ``mean((pred - target)**2)`` (rank 0)."""
    x, y = _operands("mse", pred, target)
    _check_same_elem("mse", x, y)
    _broadcast("mse", x, y)
    return _emit(
        g.MSEOp, x.trace, operands=[x.value, y.value], result_types=[result_type((), x.type)]
    )


