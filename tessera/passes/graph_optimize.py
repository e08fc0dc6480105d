"""``graph-optimize``: the Graph IR optimization pipeline as one pass with an option per step.

The steps, in order: ``algebraic-simplify``, ``cse``, ``fuse-attention``,
``fuse-matmul-epilogue``, ``fuse-elementwise``, ``dce``. Attention and epilogue
fusion run before elementwise fusion so that the scale, mask, bias and
activation ops they absorb are still standalone. ``graph_optimize_passes()``
returns the same steps as separate passes (the compile pipeline runs them that
way, so each step can be printed).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.passes import ModulePass
from xdsl.transforms.common_subexpression_elimination import (
    CommonSubexpressionElimination,
)
from xdsl.transforms.dead_code_elimination import DeadCodeElimination

from tessera.passes.algebraic_simplify import AlgebraicSimplifyPass
from tessera.passes.fuse_attention import FuseAttentionPass
from tessera.passes.fuse_elementwise import FuseElementwisePass
from tessera.passes.fuse_matmul_epilogue import FuseMatmulEpiloguePass


def graph_optimize_passes(
    *,
    algebraic_simplify: bool = True,
    cse: bool = True,
    fuse_attention: bool = True,
    fuse_matmul_epilogue: bool = True,
    fuse_elementwise: bool = True,
    dce: bool = True,
) -> list[ModulePass]:
    """The Graph IR optimization steps that are switched on, in pipeline order."""
    steps: list[tuple[bool, ModulePass]] = [
        (algebraic_simplify, AlgebraicSimplifyPass()),
        (cse, CommonSubexpressionElimination()),
        (fuse_attention, FuseAttentionPass()),
        (fuse_matmul_epilogue, FuseMatmulEpiloguePass()),
        (fuse_elementwise, FuseElementwisePass()),
        (dce, DeadCodeElimination()),
    ]
    return [p for on, p in steps if on]


@dataclass(frozen=True)
class GraphOptimizePass(ModulePass):
    """Run the Graph IR optimization steps; each option switches one step off."""

    name = "graph-optimize"

    algebraic_simplify: bool = True
    cse: bool = True
    fuse_attention: bool = True
    fuse_matmul_epilogue: bool = True
    fuse_elementwise: bool = True
    dce: bool = True

    def passes(self) -> list[ModulePass]:
        return graph_optimize_passes(
            algebraic_simplify=self.algebraic_simplify,
            cse=self.cse,
            fuse_attention=self.fuse_attention,
            fuse_matmul_epilogue=self.fuse_matmul_epilogue,
            fuse_elementwise=self.fuse_elementwise,
            dce=self.dce,
        )

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        for p in self.passes():
            p.apply(ctx, op)
