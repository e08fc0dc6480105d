"""``fuse-matmul-epilogue``: a matmul followed by a bias add, an activation and/or a
cast becomes one ``tgraph.matmul_epilogue`` op.

The chain must appear in that order (each step optional, each switchable):
``add(matmul, bias)`` (either operand order; the add must not broadcast the
product to a larger shape), then ``relu`` / ``gelu`` / ``silu``, then a
``tgraph.cast`` without a seed. Every value of the chain except the last must
have exactly one user, so nothing is computed twice. The fused op computes the
same steps on the same types (``compute_type`` keeps the product's type when a
cast follows), so the rewrite keeps the program's meaning exactly.

A 2-D product may reach its add through one ``tgraph.reshape`` that only splits its
rows (``[M, N] -> [..., N]``: a linear layer on ``[B, S, D]`` activations, then the
residual add). The chain is then matched on the reshaped values: the addend is
reshaped to ``[M, N]`` (the same row-major elements, no copy), the epilogue computes
on ``[M, N]``, and its result is reshaped back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from tessera.ir import graph as g
from tessera.ir.attrs import rounds_specially
from tessera.ir.graph.base import shape_of
from tessera.passes.algebra_utils import single_user

ACTIVATION_OPS: dict[type[Operation], str] = {
    g.ReluOp: "relu",
    g.GeluOp: "gelu",
    g.SiluOp: "silu",
}


class FuseMatmulEpilogue(RewritePattern):
    """matmul -> [add bias] -> [relu|gelu|silu] -> [cast] => tgraph.matmul_epilogue."""

    def __init__(self, bias: bool = True, activation: bool = True, cast: bool = True):
        self.bias = bias
        self.activation = activation
        self.cast = cast

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.MatmulOp, rewriter: PatternRewriter) -> None:
        cur: SSAValue = op.result
        chain: list[Operation] = []
        bias: SSAValue | None = None
        act: str | None = None
        out_type = None

        if rounds_specially(cur.type):
            return  # a rounding policy on the product: its own store kernel applies it
        user = single_user(cur)
        split = _row_split(op, user)
        if split is not None:
            cur, user = split.result, single_user(split.result)
        if self.bias and isinstance(user, g.AddOp) and user.result.type == cur.type:
            other = user.rhs if user.lhs is cur else user.lhs
            if other is not cur and (user.lhs is cur or user.rhs is cur):
                bias, cur = other, user.result
                chain.append(user)
                user = single_user(cur)
        if (
            self.activation
            and user is not None
            and type(user) in ACTIVATION_OPS
            and user.results[0].type == cur.type
        ):
            act = ACTIVATION_OPS[type(user)]
            cur = user.results[0]
            chain.append(user)
            user = single_user(cur)
        if (
            self.cast
            and isinstance(user, g.CastOp)
            and user.seed is None
            and not rounds_specially(user.result.type)
        ):
            out_type = user.result.type
            cur = user.result
            chain.append(user)
        if not chain:
            return
        if split is not None:
            if bias is not None:
                bsh, n = shape_of(bias), shape_of(op.result)[1]
                if bsh == shape_of(split.result):
                    to: tuple[int, ...] = shape_of(op.result)
                elif math.prod(bsh) == n and bsh[-1:] == (n,):
                    to = (n,)
                else:
                    return  # another broadcast: not one of the epilogue's bias kinds
                rewriter.insert_op(bias_2d := g.ReshapeOp.build(
                    operands=[bias], result_types=[_with_shape(bias.type, to)]),
                    InsertPoint.before(chain[0]))
                bias = bias_2d.result
            out_2d = _with_shape(cur.type, shape_of(op.result))
        new = g.MatmulEpilogueOp(
            op.lhs,
            op.rhs,
            cur.type if split is None else out_2d,
            bias=bias,
            transpose_lhs=op.transpose_lhs is not None,
            transpose_rhs=op.transpose_rhs is not None,
            activation=act,
            compute_type=op.result.type if out_type is not None else None,
            tile_shape=op.tile_shape.get_values() if op.tile_shape is not None else None,
        )
        if split is None:
            rewriter.replace(chain[-1], new)
            dead = [op, *chain[:-1]]
        else:
            rewriter.insert_op(new, InsertPoint.before(chain[-1]))
            rewriter.replace(chain[-1], g.ReshapeOp.build(
                operands=[new.result], result_types=[cur.type]))
            dead = [op, split, *chain[:-1]]
        for d in reversed(dead):
            rewriter.erase(d)


def _row_split(op: g.MatmulOp, user: Operation | None) -> g.ReshapeOp | None:
    """``user`` when it is a ``tgraph.reshape`` of ``op``'s 2-D product ``[M, N]`` to
    ``[..., N]`` (rows split, the last dim kept) whose one user is a same-shape add."""
    if not isinstance(user, g.ReshapeOp):
        return None
    src, dst = shape_of(op.result), shape_of(user.result)
    if len(src) != 2 or len(dst) < 2 or dst[-1] != src[1]:
        return None
    add = single_user(user.result)
    if not isinstance(add, g.AddOp) or add.result.type != user.result.type:
        return None
    return user


def _with_shape(ty: Attribute, shape: tuple[int, ...]) -> builtin.TensorType:
    """The tensor type ``ty`` (element type and encoding) at ``shape``."""
    assert isinstance(ty, builtin.TensorType)
    return builtin.TensorType(ty.element_type, shape, ty.encoding)


@dataclass(frozen=True)
class FuseMatmulEpiloguePass(ModulePass):
    """Fuse bias add, activation and output cast into the matmul that feeds them."""

    name = "fuse-matmul-epilogue"

    fuse_bias: bool = True
    fuse_activation: bool = True
    fuse_cast: bool = True

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        PatternRewriteWalker(
            FuseMatmulEpilogue(self.fuse_bias, self.fuse_activation, self.fuse_cast)
        ).rewrite_module(op)
