"""Named pass pipelines.

``graph_pipeline()`` is what a traced function goes through before
``inspect_ir("graph")``, execution and lowering: xDSL's canonicalize, cse and
dce, with Tessera's graph-level passes added through
:func:`register_graph_pass`. ``GraphPipelinePass`` (``tessera-graph-pipeline``
in ``tessera-opt``) runs the same list over IR text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline, PassPipelineCallbackType
from xdsl.transforms.canonicalize import CanonicalizePass
from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination
from xdsl.transforms.dead_code_elimination import DeadCodeElimination


def _algebra(name: str) -> Callable[[], ModulePass]:
    """A lazy factory for one of the algebra passes (docs/ALGEBRA.md)."""

    def make() -> ModulePass:
        from tessera.passes import ALL_PASSES

        return ALL_PASSES[name]()()

    return make


GRAPH_PASSES: list[tuple[str, Callable[[], ModulePass]]] = [
    ("canonicalize", CanonicalizePass),
    ("algebraic-simplify", _algebra("algebraic-simplify")),
    ("cse", CommonSubexpressionElimination),
    ("fuse-attention", _algebra("fuse-attention")),
    ("fuse-matmul-epilogue", _algebra("fuse-matmul-epilogue")),
    ("fuse-elementwise", _algebra("fuse-elementwise")),
    ("dce", DeadCodeElimination),
]
"""The graph pipeline, in order: (name, factory) pairs."""


def register_graph_pass(
    name: str,
    factory: Callable[[], ModulePass],
    *,
    before: str | None = None,
    after: str | None = None,
) -> None:
    """Add a pass to the graph pipeline (at the end, or next to the pass named
    ``before``/``after``). Registering a name twice replaces the earlier entry."""
    for i, (n, _) in enumerate(GRAPH_PASSES):
        if n == name:
            del GRAPH_PASSES[i]
            break
    names = [n for n, _ in GRAPH_PASSES]
    anchor = before or after
    if anchor is not None and anchor not in names:
        raise KeyError(f"graph pipeline has no pass '{anchor}' (passes: {', '.join(names)})")
    if before is not None:
        pos = names.index(before)
    elif after is not None:
        pos = names.index(after) + 1
    else:
        pos = len(GRAPH_PASSES)
    GRAPH_PASSES.insert(pos, (name, factory))


def graph_pipeline() -> list[ModulePass]:
    """Fresh instances of the graph pipeline's passes, in order."""
    return [factory() for _, factory in GRAPH_PASSES]


def default_context() -> Context:
    """A context with every Tessera dialect and xDSL's builtin/func/arith/scf loaded."""
    from xdsl.dialects.arith import Arith
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func
    from xdsl.dialects.scf import Scf

    from tessera.universe import ALL_DIALECTS

    ctx = Context()
    for d in (Builtin, Func, Arith, Scf):
        ctx.load_dialect(d)
    for name, factory in ALL_DIALECTS.items():
        if name not in ctx.registered_dialect_names:
            ctx.register_dialect(name, factory)
    return ctx


def run_graph_pipeline(
    module: ModuleOp,
    ctx: Context | None = None,
    callback: PassPipelineCallbackType | None = None,
) -> ModuleOp:
    """Run the graph pipeline over ``module`` in place and verify the result.

    ``callback`` is an xDSL ``PassPipeline`` callback ``(previous, module, next)``,
    called before the first pass, between passes and after the last one (the
    profiler and ``TESSERA_DUMP_DIR`` use it).
    """
    ctx = ctx or default_context()
    PassPipeline(tuple(graph_pipeline()), callback).apply(ctx, module)
    module.verify()
    return module


@dataclass(frozen=True)
class GraphPipelinePass(ModulePass):
    """The graph pipeline as one pass: ``tessera-opt -p tessera-graph-pipeline``."""

    name = "tessera-graph-pipeline"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for p in graph_pipeline():
            p.apply(ctx, op)


def ptx_pipeline() -> list[ModulePass]:
    """Graph IR to Target IR: the graph pipeline, lower-graph-to-tile, lower-tile-to-target.

    ``tessera.passes.emit_ptx.emit_ptx`` prints the result as PTX.
    """
    from tessera.passes import ALL_PASSES

    return [
        *graph_pipeline(),
        ALL_PASSES["lower-graph-to-tile"]()(),
        ALL_PASSES["lower-tile-to-target"]()(),
    ]


def lower_to_tile(graph_module: ModuleOp) -> ModuleOp:
    """Graph-level module → Tile-level module (a copy; the input is unchanged)."""
    from tessera.passes.lower_graph_to_tile import LowerGraphToTile
    from tessera.passes.lower_matmul_sm90 import selected

    m = graph_module.clone()
    # bf16/f16 matmuls and attention become TMA + wgmma kernels when compiling for Hopper
    LowerGraphToTile(sm90=selected()).apply(default_context(), m)
    m.verify()
    return m


def lower_to_target(tile_module: ModuleOp) -> ModuleOp:
    """Tile-level module → Target-level module (a copy; the input is unchanged)."""
    from tessera.passes.lower_tile_to_target import LowerTileToTargetPass

    m = tile_module.clone()
    LowerTileToTargetPass().apply(default_context(), m)
    m.verify()
    return m


def to_ptx(target_module: ModuleOp) -> str:
    """Target-level module → PTX text."""
    from tessera.passes.emit_ptx import emit_ptx

    return emit_ptx(target_module)


@dataclass(frozen=True)
class PtxPipelinePass(ModulePass):
    """Graph IR to Target IR in one pass: ``tessera-opt -p tessera-ptx-pipeline -t ptx``
    prints the PTX of a Graph IR module."""

    name = "tessera-ptx-pipeline"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for p in ptx_pipeline():
            p.apply(ctx, op)
