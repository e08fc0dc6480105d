"""What the torch.compile backend did with each FX graph.

Every graph the backend compiles (the forward and the backward of each
dynamo graph, through AOTAutograd) gets a :class:`GraphReport`; the graphs
compiled since the last :func:`reset` form the :class:`Report` that
:func:`last_report` returns. Each graph is also logged on the
``tessera.torch`` logger (INFO with its counts, WARNING when ops fell back).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

LOG = logging.getLogger("tessera.torch")


@dataclass
class GraphReport:
    """One FX graph: how many ATen ops it had, how many Tessera took, what stayed in torch."""

    name: str
    kind: str
    """``"forward"``, ``"backward"`` or ``"inference"``."""
    aten_ops: int = 0
    """ATen operator nodes of the graph (size arithmetic and tuple indexing not counted)."""
    tessera_ops: int = 0
    """Nodes translated into Tessera partitions (data movement included)."""
    partitions: int = 0
    """Tessera partitions: each is one Graph IR function."""
    fallback_ops: Counter[str] = field(default_factory=Counter)
    """ATen ops left to eager torch, by name, with their counts."""
    fallback_reasons: dict[str, str] = field(default_factory=dict)
    """Why each op name in ``fallback_ops`` was not translated (first reason seen)."""
    runtime_fallbacks: dict[str, str] = field(default_factory=dict)
    """Partitions that found at trace time that they cannot be translated, and why
    (they run in torch from then on)."""
    tessera_calls: int = 0
    """Calls of Tessera partitions so far."""

    @property
    def graph_breaks(self) -> int:
        """ATen ops of this graph run in eager torch: each one splits the graph
        between Tessera partitions (the sum of :attr:`fallback_ops`)."""
        return sum(self.fallback_ops.values())

    def summary(self) -> str:
        fb = ", ".join(f"{k} x{v}" for k, v in sorted(self.fallback_ops.items()))
        return (
            f"{self.name} ({self.kind}): {self.aten_ops} aten ops, {self.tessera_ops} in "
            f"{self.partitions} Tessera partition(s), {self.graph_breaks} in eager torch"
            + (f": {fb}" if fb else "")
        )


@dataclass
class Report:
    """The graphs compiled since the last :func:`reset`."""

    graphs: list[GraphReport] = field(default_factory=list)

    @property
    def fallback_ops(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for g in self.graphs:
            total.update(g.fallback_ops)
        return total

    @property
    def graph_breaks(self) -> int:
        return sum(g.graph_breaks for g in self.graphs)

    @property
    def partitions(self) -> int:
        return sum(g.partitions for g in self.graphs)

    @property
    def tessera_ops(self) -> int:
        return sum(g.tessera_ops for g in self.graphs)

    @property
    def aten_ops(self) -> int:
        return sum(g.aten_ops for g in self.graphs)

    @property
    def runtime_fallbacks(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for g in self.graphs:
            out.update(g.runtime_fallbacks)
        return out

    def reasons(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for g in self.graphs:
            for k, v in g.fallback_reasons.items():
                out.setdefault(k, v)
        return out

    def __str__(self) -> str:
        lines = [g.summary() for g in self.graphs]
        for name, why in self.runtime_fallbacks.items():
            lines.append(f"{name}: runs in torch ({why})")
        return "\n".join(lines) if lines else "no graphs compiled"


_CURRENT = Report()


def record(g: GraphReport) -> None:
    """Add ``g`` to the current report and log it."""
    _CURRENT.graphs.append(g)
    if g.fallback_ops:
        LOG.warning("tessera.torch: %s", g.summary())
    else:
        LOG.info("tessera.torch: %s", g.summary())


def last_report() -> Report:
    """The graphs compiled since the last :func:`reset` (or ``tessera.torch.compile``)."""
    return _CURRENT


def reset() -> None:
    """Start a new report."""
    global _CURRENT
    _CURRENT = Report()


__all__ = ["GraphReport", "Report", "last_report", "reset", "record", "LOG"]
