"""User-defined adjoints (``ts.custom_vjp``) as seen by the ``autodiff`` pass.

When a ``custom_vjp`` function with a ``defvjp(fwd, bwd)`` rule is traced, its
``fwd`` is traced in place (ordinary Graph IR) and its output passes through an
identity ``tgraph.reshape`` that carries the attribute
``tessera.custom_vjp = "<name>#<n>"``. The key names a :class:`CustomVJPRecord`
registered in :data:`tessera.autodiff.rules.CUSTOM_VJPS`: the ``bwd`` function, the
traced inputs and the saved values. The pass, reaching that op, traces ``bwd(saved, grad_output)`` into the gradient
function instead of differentiating the ops of ``fwd``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from xdsl.ir import Block, SSAValue

from tessera.autodiff.rules import CUSTOM_VJP_ATTR as ATTR
from tessera.autodiff.rules import CUSTOM_VJPS

__all__ = ["ATTR", "CUSTOM_VJPS", "CustomVJPRecord"]


@dataclass
class CustomVJPRecord:
    """One traced call of a ``custom_vjp`` function."""

    name: str
    bwd: Callable[..., Any]
    inputs: list[SSAValue]
    saved: Any  # the fwd's residuals: a structure of SSAValues and Python values

    def apply(
        self,
        block: Block,
        mapping: dict[SSAValue, SSAValue],
        grad_output: SSAValue,
        needs: Sequence[bool],
    ) -> list[SSAValue | None]:
        """Trace ``bwd`` at the end of ``block``; one cotangent per input (None if unused)."""
        from tessera.frontend.errors import TesseraTypeError
        from tessera.frontend.tracing import Trace, TracedTensor, tracing

        trace = Trace(f"{self.name}_bwd")
        trace.block = block

        def wrap(v: Any) -> Any:
            if isinstance(v, SSAValue):
                return TracedTensor(mapping.get(v, v), trace)
            if isinstance(v, tuple | list):
                return type(v)(wrap(x) for x in v)
            return v

        with tracing(trace):
            out = self.bwd(wrap(self.saved), TracedTensor(grad_output, trace))
        outs = list(out) if isinstance(out, tuple | list) else [out]
        if len(outs) != len(self.inputs):
            raise TesseraTypeError(
                f"custom_vjp {self.name}: bwd returned {len(outs)} gradient(s) for "
                f"{len(self.inputs)} tensor input(s)"
            )
        result: list[SSAValue | None] = []
        for k, (o, need) in enumerate(zip(outs, needs)):
            if o is None or not need:
                result.append(None)
                continue
            if not isinstance(o, TracedTensor):
                raise TesseraTypeError(
                    f"custom_vjp {self.name}: bwd gradient {k} is {type(o).__name__}, "
                    "expected a tensor computed from saved values and grad_output"
                )
            result.append(o.value)
        return result
