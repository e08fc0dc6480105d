"""``expand-attention-grad``: attention gradient ops without a fused kernel as Graph IR.

``tgraph.flash_attention_fwd`` becomes a plain ``tgraph.flash_attention`` plus the
log-sum-exp of the scores (``max``, ``exp``, ``sum``, ``log``), and
``tgraph.flash_attention_bwd`` the matmuls and elementwise ops of its definition
(``P = exp(scale q kᵀ - lse)`` materialized): the adjoint the autodiff pass emitted
before the fused kernels existed. ``lower-graph-to-tile`` runs it on the ops that
:mod:`tessera.passes.tile_attention_bwd` has no kernel for (element types other than
bf16/f16, head sizes other than 64 and 128), so every case is lowered; ``all=true``
expands every one.

Example::

    tessera-opt -p 'expand-attention-grad{all=true}' grad.mlir
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.builder import Builder
from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint

from tessera.autodiff.emitter import GraphEmitter
from tessera.autodiff.rules import expand_attention_bwd, expand_attention_fwd
from tessera.ir import graph as g

AttentionGradOp = g.FlashAttentionFwdOp | g.FlashAttentionBwdOp


def expand_attention_grads(
    fn: func.FuncOp, keep: Callable[[AttentionGradOp], bool] = lambda op: False
) -> int:
    """Expand the attention gradient ops of ``fn`` for which ``keep`` is false; returns
    how many were expanded."""
    n = 0
    for op in list(fn.walk()):
        if not isinstance(op, g.FlashAttentionFwdOp | g.FlashAttentionBwdOp) or keep(op):
            continue
        block = op.parent_block()
        assert block is not None
        e = GraphEmitter(block)
        e.builder = Builder(InsertPoint.before(op))
        if isinstance(op, g.FlashAttentionFwdOp):
            outs = expand_attention_fwd(e, op)
        else:
            outs = expand_attention_bwd(e, op)
        for old, new in zip(op.results, outs):
            if new.type != old.type:
                new = e.cast(new, old.type)
            old.replace_all_uses_with(new)
        _erase(op)
        n += 1
    return n


def _erase(op: Operation) -> None:
    op.detach()
    op.erase()


@dataclass(frozen=True)
class ExpandAttentionGradPass(ModulePass):
    """Expand ``flash_attention_fwd`` / ``flash_attention_bwd`` without a fused kernel
    (every one with ``all=true``) into Graph IR."""

    name = "expand-attention-grad"

    all: bool = False

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        from tessera.passes.tile_attention_bwd import fused

        for fn in [f for f in op.body.block.ops if isinstance(f, func.FuncOp)]:
            expand_attention_grads(fn, (lambda o: False) if self.all else fused)
