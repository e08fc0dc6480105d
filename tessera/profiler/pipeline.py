"""Composite passes seen as their steps, for ``tessera-opt --print-between-passes / --time-passes``.

``tessera-graph-pipeline``, ``graph-optimize`` and ``tessera-ptx-pipeline`` each run
several passes inside one ``apply``; xDSL's pipeline callback only sees the composite. With either
flag, ``tessera-opt`` replaces them by their steps (:func:`expand_pipeline`),
so the IR is printed, verified and timed after each of them.
"""

from __future__ import annotations

from xdsl.passes import ModulePass, PassPipeline


def expand(passes: tuple[ModulePass, ...] | list[ModulePass]) -> list[ModulePass]:
    """``passes`` with every composite Tessera pass replaced by its steps, recursively."""
    from tessera.passes.graph_optimize import GraphOptimizePass
    from tessera.passes.pipelines import GraphPipelinePass, PtxPipelinePass

    out: list[ModulePass] = []
    for p in passes:
        if isinstance(p, GraphPipelinePass | GraphOptimizePass | PtxPipelinePass):
            out += expand(p.passes())
        else:
            out.append(p)
    return out


def expand_pipeline(pipeline: PassPipeline) -> PassPipeline:
    """The same pipeline (and callback) with composite passes expanded."""
    return PassPipeline(tuple(expand(pipeline.passes)), pipeline.callback)
