"""``fuse-matmul-epilogue``: a matmul followed by a bias add, an activation and/or a
cast becomes one ``tgraph.matmul_epilogue`` op.

The chain must appear in that order (each step optional, each switchable):
``add(matmul, bias)`` (either operand order; the add must not broadcast the
product to a larger shape), then ``relu`` / ``gelu`` / ``silu``, then a
``tgraph.cast`` without a seed. Every value of the chain except the last must
have exactly one user, so nothing is computed twice. The fused op computes the
same steps on the same types (``compute_type`` keeps the product's type when a
cast follows), so the rewrite keeps the program's meaning exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from tessera.ir import graph as g
from tessera.ir.attrs import rounds_specially
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
        new = g.MatmulEpilogueOp(
            op.lhs,
            op.rhs,
            cur.type,
            bias=bias,
            transpose_lhs=op.transpose_lhs is not None,
            transpose_rhs=op.transpose_rhs is not None,
            activation=act,
            compute_type=op.result.type if out_type is not None else None,
            tile_shape=op.tile_shape.get_values() if op.tile_shape is not None else None,
        )
        rewriter.replace(chain[-1], new)
        for dead in reversed([op, *chain[:-1]]):
            rewriter.erase(dead)


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
