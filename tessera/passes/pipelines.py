"""The pass pipelines of each compile stage, defined once.

A compile goes through the stages of :data:`STAGE_PASSES` (Graph IR → Graph IR →
Tile IR → Target IR), then :func:`to_ptx` prints PTX. Each stage's passes are a
function of the :class:`~tessera.options.CompileOptions`, so the options are the
only input besides the IR:

* ``graph``: ``options.graph_passes`` by name (default
  :data:`~tessera.options.DEFAULT_GRAPH_PASSES`: canonicalize, algebraic-simplify,
  cse, the three fusions, dce);
* ``tile``: ``lower-graph-to-tile``, with the sm_90a matmul and attention kernels when
  ``options.sm90_kernels`` (their tile configs from ``options.sm90_tiles``), and
  ``options.deterministic``, ``options.allow_tf32`` and ``options.split_k``;
* ``target``: ``lower-tile-to-target``.

The compiler driver (:mod:`tessera.compiler`) runs this table for ``@ts.jit``,
``@ts.kernel``, the profiler and ``inspect_ir``; ``tessera-opt``'s composite passes
are the same lists: ``tessera-graph-pipeline`` is the ``graph`` stage,
``graph-optimize`` its steps after canonicalize (each can be switched off), and
``tessera-ptx-pipeline`` the ``graph``, ``tile`` and ``target`` stages in a row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline, PassPipelineCallbackType

from tessera.ir.context import default_context
from tessera.options import DEFAULT_GRAPH_PASSES, CompileOptions, OptionsError

__all__ = [
    "DEFAULT_GRAPH_PASSES", "STAGE_PASSES", "GraphPipelinePass", "PtxPipelinePass",
    "default_context", "graph_pass", "graph_pipeline", "lower", "lower_to_target",
    "lower_to_tile", "ptx_pipeline", "run_graph_pipeline", "stage_passes", "to_ptx",
]

_DEFAULT = CompileOptions()


def graph_pass(name: str) -> ModulePass:
    """A fresh instance of the pass ``name`` (a Tessera pass or xDSL's canonicalize, cse,
    dce); an unknown name is an :class:`~tessera.options.OptionsError`."""
    from xdsl.transforms.canonicalize import CanonicalizePass
    from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination
    from xdsl.transforms.dead_code_elimination import DeadCodeElimination

    from tessera.passes import ALL_PASSES

    xdsl_passes: dict[str, type[ModulePass]] = {
        "canonicalize": CanonicalizePass,
        "cse": CommonSubexpressionElimination,
        "dce": DeadCodeElimination,
    }
    if name in xdsl_passes:
        return xdsl_passes[name]()
    if name in ALL_PASSES:
        return ALL_PASSES[name]()()
    known = sorted({*xdsl_passes, *ALL_PASSES})
    raise OptionsError(f"graph pipeline: unknown pass '{name}' (passes: {', '.join(known)})")


def graph_pipeline(options: CompileOptions = _DEFAULT) -> list[ModulePass]:
    """Fresh instances of the graph stage's passes, in order."""
    return [graph_pass(n) for n in options.graph_passes]


def _tile_passes(options: CompileOptions) -> list[ModulePass]:
    from tessera.passes.dedupe_kernels import DedupeKernelsPass
    from tessera.passes.lower_graph_to_tile import LowerGraphToTile
    from tessera.passes.matmul_config import format_tiles

    tiles = format_tiles(options.sm90_tiles)
    return [
        LowerGraphToTile(
            sm90=options.sm90_kernels, sm90_tiles=tiles, deterministic=options.deterministic,
            allow_tf32=options.allow_tf32, sm90_attention_bwd=options.sm90_attention_bwd,
            split_k=options.split_k, implicit_conv=options.implicit_conv,
            sm90_store=options.sm90_store,
        ),
        DedupeKernelsPass(),
    ]


def _target_passes(options: CompileOptions) -> list[ModulePass]:
    from tessera.passes.lower_tile_to_target import LowerTileToTargetPass

    return [LowerTileToTargetPass()]


STAGE_PASSES: dict[str, Callable[[CompileOptions], list[ModulePass]]] = {
    "graph": graph_pipeline,
    "tile": _tile_passes,
    "target": _target_passes,
}
"""The IR-to-IR stages in order: each builds its level from the previous one
(``graph`` from ``traced``) with these passes."""


def stage_passes(stage: str, options: CompileOptions = _DEFAULT) -> list[ModulePass]:
    """The passes of ``stage`` (a key of :data:`STAGE_PASSES`) under ``options``."""
    return STAGE_PASSES[stage](options)


def lower(
    module: ModuleOp,
    stage: str,
    options: CompileOptions = _DEFAULT,
    callback: PassPipelineCallbackType | None = None,
) -> ModuleOp:
    """Run ``stage`` on a copy of ``module`` and verify the result (the input is unchanged).

    ``callback`` is an xDSL ``PassPipeline`` callback ``(previous, module, next)``,
    called before the first pass, between passes and after the last one (the
    profiler and ``TESSERA_DUMP_DIR`` use it)."""
    m = module.clone()
    PassPipeline(tuple(stage_passes(stage, options)), callback).apply(default_context(), m)
    m.verify()
    return m


def run_graph_pipeline(
    module: ModuleOp,
    ctx: Context | None = None,
    callback: PassPipelineCallbackType | None = None,
    options: CompileOptions = _DEFAULT,
) -> ModuleOp:
    """Run the graph stage over ``module`` in place and verify the result."""
    PassPipeline(tuple(graph_pipeline(options)), callback).apply(ctx or default_context(), module)
    module.verify()
    return module


def lower_to_tile(graph_module: ModuleOp, options: CompileOptions = _DEFAULT) -> ModuleOp:
    """Graph-level module → Tile-level module (a copy; the input is unchanged)."""
    return lower(graph_module, "tile", options)


def lower_to_target(tile_module: ModuleOp, options: CompileOptions = _DEFAULT) -> ModuleOp:
    """Tile-level module → Target-level module (a copy; the input is unchanged)."""
    return lower(tile_module, "target", options)


def to_ptx(target_module: ModuleOp, verify: bool = True) -> str:
    """Target-level module → PTX text (each kernel verified first unless ``verify`` is
    False: the caller verified the module already)."""
    from tessera.passes.emit_ptx import emit_ptx

    return emit_ptx(target_module, verify=verify)


def ptx_pipeline(options: CompileOptions = _DEFAULT) -> list[ModulePass]:
    """Graph IR to Target IR: the ``graph``, ``tile`` and ``target`` stages in a row
    (:func:`to_ptx` prints the result as PTX)."""
    return [p for stage in STAGE_PASSES for p in stage_passes(stage, options)]


@dataclass(frozen=True)
class GraphPipelinePass(ModulePass):
    """The graph stage as one pass: ``tessera-opt -p tessera-graph-pipeline``."""

    name = "tessera-graph-pipeline"

    def passes(self) -> list[ModulePass]:
        return graph_pipeline()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for p in self.passes():
            p.apply(ctx, op)


@dataclass(frozen=True)
class PtxPipelinePass(ModulePass):
    """Graph IR to Target IR in one pass: ``tessera-opt -p tessera-ptx-pipeline -t ptx``
    prints the PTX of a Graph IR module."""

    name = "tessera-ptx-pipeline"

    def passes(self) -> list[ModulePass]:
        return ptx_pipeline()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for p in self.passes():
            p.apply(ctx, op)
