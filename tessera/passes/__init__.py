"""Tessera's passes, one module per pass, registered here by their command-line name.

Each entry maps the pass name (as used in ``tessera-opt -p NAME``) to a function
returning the pass class, so importing this package stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass

ALL_PASSES: dict[str, Callable[[], type[ModulePass]]] = {}


def _autodiff() -> type[ModulePass]:
    from tessera.passes.autodiff import AutodiffPass

    return AutodiffPass


ALL_PASSES["autodiff"] = _autodiff


def _graph_pipeline() -> type[ModulePass]:
    from tessera.passes.pipelines import GraphPipelinePass

    return GraphPipelinePass


ALL_PASSES["tessera-graph-pipeline"] = _graph_pipeline


def _algebraic_simplify() -> type[ModulePass]:
    from tessera.passes.algebraic_simplify import AlgebraicSimplifyPass

    return AlgebraicSimplifyPass


def _spectral_rewrite() -> type[ModulePass]:
    from tessera.passes.spectral_rewrite import SpectralRewritePass

    return SpectralRewritePass


def _fuse_elementwise() -> type[ModulePass]:
    from tessera.passes.fuse_elementwise import FuseElementwisePass

    return FuseElementwisePass


def _merge_sibling_reductions() -> type[ModulePass]:
    from tessera.passes.merge_sibling_reductions import MergeSiblingReductionsPass

    return MergeSiblingReductionsPass


def _fused_f32_intermediates() -> type[ModulePass]:
    from tessera.passes.fused_f32_intermediates import FusedF32IntermediatesPass

    return FusedF32IntermediatesPass


def _fuse_matmul_epilogue() -> type[ModulePass]:
    from tessera.passes.fuse_matmul_epilogue import FuseMatmulEpiloguePass

    return FuseMatmulEpiloguePass


def _fuse_attention() -> type[ModulePass]:
    from tessera.passes.fuse_attention import FuseAttentionPass

    return FuseAttentionPass


def _expand_attention_grad() -> type[ModulePass]:
    from tessera.passes.expand_attention_grad import ExpandAttentionGradPass

    return ExpandAttentionGradPass


def _graph_optimize() -> type[ModulePass]:
    from tessera.passes.graph_optimize import GraphOptimizePass

    return GraphOptimizePass


ALL_PASSES["algebraic-simplify"] = _algebraic_simplify
ALL_PASSES["spectral-rewrite"] = _spectral_rewrite
ALL_PASSES["fuse-elementwise"] = _fuse_elementwise
ALL_PASSES["fused-f32-intermediates"] = _fused_f32_intermediates
ALL_PASSES["merge-sibling-reductions"] = _merge_sibling_reductions
ALL_PASSES["fuse-matmul-epilogue"] = _fuse_matmul_epilogue
ALL_PASSES["fuse-attention"] = _fuse_attention
ALL_PASSES["graph-optimize"] = _graph_optimize
ALL_PASSES["expand-attention-grad"] = _expand_attention_grad


def _lower_tile_to_target() -> type[ModulePass]:
    from tessera.passes.lower_tile_to_target import LowerTileToTargetPass

    return LowerTileToTargetPass


ALL_PASSES["lower-tile-to-target"] = _lower_tile_to_target


def _shard_propagation() -> type[ModulePass]:
    from tessera.passes.shard_propagation import ShardPropagationPass

    return ShardPropagationPass


def _spmd_partition() -> type[ModulePass]:
    from tessera.passes.spmd_partition import SPMDPartitionPass

    return SPMDPartitionPass


ALL_PASSES["shard-propagation"] = _shard_propagation
ALL_PASSES["spmd-partition"] = _spmd_partition


def _lower_graph_to_tile() -> type[ModulePass]:
    from tessera.passes.lower_graph_to_tile import LowerGraphToTile

    return LowerGraphToTile


ALL_PASSES["lower-graph-to-tile"] = _lower_graph_to_tile


def _dedupe_kernels() -> type[ModulePass]:
    from tessera.passes.dedupe_kernels import DedupeKernelsPass

    return DedupeKernelsPass


ALL_PASSES["dedupe-kernels"] = _dedupe_kernels


def _ptx_pipeline() -> type[ModulePass]:
    from tessera.passes.pipelines import PtxPipelinePass

    return PtxPipelinePass


ALL_PASSES["tessera-ptx-pipeline"] = _ptx_pipeline


def _lower_matmul_sm90() -> type[ModulePass]:
    from tessera.passes.sm90.lower_matmul_sm90 import LowerMatmulSm90

    return LowerMatmulSm90


ALL_PASSES["lower-matmul-sm90"] = _lower_matmul_sm90


def _lower_attention_sm90() -> type[ModulePass]:
    from tessera.passes.sm90.lower_attention_sm90 import LowerAttentionSm90

    return LowerAttentionSm90


ALL_PASSES["lower-attention-sm90"] = _lower_attention_sm90
