"""``graph-optimize``: the graph stage's steps as one pass with an option per step.

The steps are those of :data:`tessera.options.DEFAULT_GRAPH_PASSES` after
``canonicalize``, in the same order: ``algebraic-simplify``, ``spectral-rewrite``, ``cse``,
``fuse-attention``, ``fuse-matmul-epilogue``, ``fuse-elementwise``,
``fused-f32-intermediates``, ``merge-sibling-reductions``, ``dce``.
``graph_optimize_passes()`` returns the steps that are switched on as separate
passes.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.passes import ModulePass

from tessera.options import DEFAULT_GRAPH_PASSES

STEPS: tuple[str, ...] = tuple(n for n in DEFAULT_GRAPH_PASSES if n != "canonicalize")
"""The steps, in pipeline order (pass names)."""


def graph_optimize_passes(
    *,
    algebraic_simplify: bool = True,
    spectral_rewrite: bool = True,
    cse: bool = True,
    fuse_attention: bool = True,
    fuse_matmul_epilogue: bool = True,
    fuse_elementwise: bool = True,
    fused_f32_intermediates: bool = True,
    merge_sibling_reductions: bool = True,
    dce: bool = True,
) -> list[ModulePass]:
    """The Graph IR optimization steps that are switched on, in pipeline order."""
    from tessera.passes.pipelines import graph_pass

    on = {
        "algebraic-simplify": algebraic_simplify,
        "spectral-rewrite": spectral_rewrite,
        "cse": cse,
        "fuse-attention": fuse_attention,
        "fuse-matmul-epilogue": fuse_matmul_epilogue,
        "fuse-elementwise": fuse_elementwise,
        "fused-f32-intermediates": fused_f32_intermediates,
        "merge-sibling-reductions": merge_sibling_reductions,
        "dce": dce,
    }
    return [graph_pass(n) for n in STEPS if on[n]]


@dataclass(frozen=True)
class GraphOptimizePass(ModulePass):
    """Run the Graph IR optimization steps; each option switches one step off."""

    name = "graph-optimize"

    algebraic_simplify: bool = True
    spectral_rewrite: bool = True
    cse: bool = True
    fuse_attention: bool = True
    fuse_matmul_epilogue: bool = True
    fuse_elementwise: bool = True
    fused_f32_intermediates: bool = True
    merge_sibling_reductions: bool = True
    dce: bool = True

    def passes(self) -> list[ModulePass]:
        return graph_optimize_passes(
            algebraic_simplify=self.algebraic_simplify,
            spectral_rewrite=self.spectral_rewrite,
            cse=self.cse,
            fuse_attention=self.fuse_attention,
            fuse_matmul_epilogue=self.fuse_matmul_epilogue,
            fuse_elementwise=self.fuse_elementwise,
            fused_f32_intermediates=self.fused_f32_intermediates,
            merge_sibling_reductions=self.merge_sibling_reductions,
            dce=self.dce,
        )

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        for p in self.passes():
            p.apply(ctx, op)
