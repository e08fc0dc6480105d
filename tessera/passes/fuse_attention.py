"""``fuse-attention``: ``matmul(softmax(scale · Q Kᵀ [masked]), V)`` becomes one
``tgraph.flash_attention`` op.

Recognized form, read from the output matmul back to the scores::

    S = matmul(Q, Kᵀ)         Kᵀ: matmul ``transpose_rhs``, a ``tgraph.transpose`` of
                              the last two dims of K, or (else) any [.., D, Sk] operand,
                              for which a transpose is inserted
    S = S * c | c * S | S / c  optional scale; c a positive finite splat constant
    S = select(tril, S, -inf) | select(¬tril, -inf, S) | S + M
                              optional causal mask (tril = key j <= query i, top-left
                              aligned; M = 0 on and below the diagonal, -inf above), given
                              as constants; scale and mask may come in either order
    A = softmax(S, last axis)
    O = matmul(A, V)

Every intermediate value must have one user. The fused op gets ``scale = c``
(``1/c`` for a division, ``1.0`` when there is no scale — flash_attention's own
default would be ``1/sqrt(D)``) and ``causal`` when a mask was matched. It
computes the same function; only the rounding of the intermediate scores
differs (the scale is applied inside the kernel, the softmax is computed online).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.dialects.builtin import FloatAttr, TensorType, UnitAttr, f64
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from tessera.ir import graph as g
from tessera.passes.algebra_utils import (
    constant_array,
    constant_op,
    is_last_two_swap,
    single_user,
    splat_value,
)


def _positive_scale(v: SSAValue) -> float | None:
    c = splat_value(v)
    if isinstance(c, bool) or not isinstance(c, float | int):
        return None
    c = float(c)
    return c if math.isfinite(c) and c > 0 else None


def _is_neg_inf(v: SSAValue) -> bool:
    c = splat_value(v)
    return isinstance(c, float) and c == -math.inf


def _causal_keep(shape: tuple[int, ...]) -> np.ndarray:
    """True where key j may be seen by query i (j <= i), for scores of ``shape``."""
    sq, sk = shape[-2], shape[-1]
    return np.broadcast_to(np.tril(np.ones((sq, sk), dtype=bool)), shape)


def _mask_array(v: SSAValue, scores: tuple[int, ...]) -> np.ndarray | None:
    """The constant ``v`` broadcast to the scores' shape, or None."""
    c = constant_op(v)
    if c is None:
        return None
    arr = constant_array(c)
    if arr is None:
        return None
    try:
        return np.broadcast_to(arr, scores)
    except ValueError:
        return None


def match_causal_mask(op: Operation) -> SSAValue | None:
    """The unmasked scores if ``op`` applies a top-left causal mask to them, else None."""
    if len(op.results) != 1:
        return None
    shape = g.shape_of(op.results[0])
    if len(shape) < 2:
        return None
    keep = _causal_keep(shape)
    if isinstance(op, g.SelectOp):
        cond = _mask_array(op.cond, shape)
        if cond is None:
            return None
        if _is_neg_inf(op.on_false) and np.array_equal(cond, keep):
            x = op.on_true
        elif _is_neg_inf(op.on_true) and np.array_equal(cond, ~keep):
            x = op.on_false
        else:
            return None
        return x if x.type == op.results[0].type else None
    if isinstance(op, g.AddOp):
        for x, m in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            arr = _mask_array(m, shape)
            if arr is None or x.type != op.result.type:
                continue
            a = arr.astype(np.float64)
            if np.all(a[keep] == 0) and np.all(np.isneginf(a[~keep])):
                return x
    return None


def match_scale(op: Operation) -> tuple[SSAValue, float] | None:
    """``(x, s)`` if ``op`` computes ``s · x`` as ``x * c``, ``c * x`` or ``x / c``."""
    if isinstance(op, g.MulOp):
        for x, c in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            s = _positive_scale(c)
            if s is not None and x.type == op.result.type:
                return x, s
    if isinstance(op, g.DivOp):
        s = _positive_scale(op.rhs)
        if s is not None and op.lhs.type == op.result.type:
            return op.lhs, 1.0 / s
    return None


class FuseAttention(RewritePattern):
    """matmul(softmax(scale · matmul(Q, Kᵀ) [+ causal mask]), V) => tgraph.flash_attention."""

    def __init__(self, scale: bool = True, causal: bool = True):
        self.scale = scale
        self.causal = causal

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.MatmulOp, rewriter: PatternRewriter) -> None:
        sm = op.lhs.owner
        if (
            not isinstance(sm, g.SoftmaxOp)
            or op.transpose_lhs is not None
            or op.transpose_rhs is not None
            or single_user(sm.result) is not op
        ):
            return
        rank = len(g.shape_of(sm.input))
        if sm.axis.value.data % rank != rank - 1:
            return
        dead: list[Operation] = [sm]
        x = sm.input
        scale: float | None = None
        causal = False
        while True:
            p = x.owner
            if not isinstance(p, Operation) or single_user(x) is not dead[-1]:
                return
            if self.scale and scale is None and (m := match_scale(p)) is not None:
                x, scale = m
            elif self.causal and not causal and (y := match_causal_mask(p)) is not None:
                x, causal = y, True
            else:
                break
            dead.append(p)
        s = x.owner
        if (
            not isinstance(s, g.MatmulOp)
            or s.transpose_lhs is not None
            or single_user(s.result) is not dead[-1]
        ):
            return
        q, kt = s.lhs, s.rhs
        v = op.rhs
        new_ops: list[Operation] = []
        if s.transpose_rhs is not None:
            k = kt
        elif isinstance(t := kt.owner, g.TransposeOp) and is_last_two_swap(
            list(t.permutation.get_values())
        ):
            k = t.input
        else:
            kts = g.shape_of(kt)
            perm = [*range(len(kts) - 2), len(kts) - 1, len(kts) - 2]
            kt_type = kt.type
            assert isinstance(kt_type, TensorType)
            ktrans = g.TransposeOp(
                kt,
                perm,
                TensorType(kt_type.element_type, [kts[i] for i in perm], kt_type.encoding),
            )
            new_ops.append(ktrans)
            k = ktrans.result
        qs, ks, vs = g.shape_of(q), g.shape_of(k), g.shape_of(v)
        if not (len(qs) == len(ks) == len(vs) and qs[:-2] == ks[:-2] == vs[:-2]):
            return
        if not (g.elem_of(q) == g.elem_of(k) == g.elem_of(v) == g.elem_of(s.result)):
            return
        props = {"scale": FloatAttr(1.0 if scale is None else scale, f64)}
        if causal:
            props["causal"] = UnitAttr()
        fa = g.FlashAttentionOp.create(
            operands=[q, k, v], result_types=[op.result.type], properties=props
        )
        for t_op in new_ops:
            rewriter.insert_op(t_op, InsertPoint.before(op))
        rewriter.replace(op, fa)
        for d in [*dead, s]:
            rewriter.erase(d)
        if isinstance(t := kt.owner, g.TransposeOp) and not t.result.uses:
            rewriter.erase(t)


@dataclass(frozen=True)
class FuseAttentionPass(ModulePass):
    """Fuse scaled (optionally causal) softmax attention into ``tgraph.flash_attention``."""

    name = "fuse-attention"

    fuse_scale: bool = True
    fuse_causal_mask: bool = True

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        PatternRewriteWalker(
            FuseAttention(self.fuse_scale, self.fuse_causal_mask)
        ).rewrite_module(op)
