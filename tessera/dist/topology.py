"""Reduction orders of the deterministic collectives, chosen from the mesh's topology.

A deterministic ``all_reduce`` / ``reduce_scatter`` (:mod:`tessera.dist.collectives`)
moves every rank's chunk to its owner with ``all_to_all`` and reduces the ``n`` chunks
there in a fixed order. Which order is a property of the group, decided here, never of
the transport; the same mesh on the same machines always gives the same order, so the
same inputs give bitwise-identical results. The orders, for chunks ``x_0 .. x_{n-1}``
in group (rank) order:

* ``ring``: the left fold ``((x_0 + x_1) + x_2) + ...`` -- the order a ring
  all-reduce accumulates in, and what :func:`tessera.dist.rank_ordered_reduce` computes.
* ``tree``: pairwise rounds: ``[x_0 + x_1, x_2 + x_3, ...]`` (an odd last value is
  carried to the next round unchanged), repeated until one value is left; depth
  ``ceil(log2 n)``, so rounding error grows with ``log n`` instead of ``n``.
* ``hierarchical``: a ring fold over the ranks of each node (in rank order), then a
  ring fold of the node partials in node order -- intra-node (NVLink) first, then
  inter-node, the order of a two-level all-reduce.

**The choice** (:func:`choose_order`), from the group's global ranks and the mesh's
:class:`Topology`: a group spanning more than one node is ``hierarchical`` (unless each
node holds one member of it: ``ring``); within one node, ``tree`` when the node's GPUs
all have peer access to each other (NVLink / NVSwitch) and the group has more than two
ranks, else ``ring``. Groups of one or two ranks are the same in every order.

**The topology** (:meth:`Topology.of`): ``ranks_per_node`` is the mesh's
``ranks_per_node=`` when given, else ``torch.cuda.device_count()`` for a mesh of CUDA
devices (one rank per GPU, ranks numbered node by node as torchrun does), else the
mesh size (a CPU mesh: one host). ``peer_access`` is whether
``torch.cuda.can_device_access_peer`` holds for every pair of the node's GPUs (always
False for CPU meshes). Nodes are assumed alike, so every rank computes the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tessera.errors import TesseraError

ORDERS = ("ring", "tree", "hierarchical")
"""The reduction orders, by name."""


class OrderError(TesseraError, ValueError):
    """An unknown reduction order, or one that does not fit the group."""


@dataclass(frozen=True)
class Topology:
    """How the mesh's ranks sit on machines: ``ranks_per_node`` consecutive ranks share
    a node, whose GPUs all reach each other directly when ``peer_access``."""

    ranks_per_node: int
    peer_access: bool

    @staticmethod
    def of(mesh: Any) -> Topology:
        """The topology of ``mesh`` (a :class:`tessera.dist.Mesh`); see the module docstring."""
        rpn = getattr(mesh, "ranks_per_node", None)
        cuda = mesh.device_type == "cuda"
        peer = False
        if cuda:
            import torch

            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if rpn is None:
                rpn = count or mesh.size
            k = min(rpn, count)
            peer = k > 1 and all(
                torch.cuda.can_device_access_peer(i, j)
                for i in range(k) for j in range(k) if i != j
            )
        if rpn is None:
            rpn = mesh.size
        return Topology(max(1, int(rpn)), peer)


@dataclass(frozen=True)
class ReductionOrder:
    """One reduction order: ``kind`` (a name of :data:`ORDERS`) and, for
    ``hierarchical``, ``nodes``: the group indices of each node, nodes in order."""

    kind: str
    nodes: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ORDERS:
            raise OrderError(f"unknown reduction order '{self.kind}'; valid: {', '.join(ORDERS)}")

    def fold(self, rows: Sequence[Any], combine: Any) -> Any:
        """Reduce ``rows`` (group order) with the binary ``combine`` in this order."""
        rows = list(rows)
        if not rows:
            raise OrderError("nothing to reduce")
        if self.kind == "ring":
            return _ring(rows, combine)
        if self.kind == "tree":
            while len(rows) > 1:
                nxt = [combine(rows[i], rows[i + 1]) for i in range(0, len(rows) - 1, 2)]
                if len(rows) % 2:
                    nxt.append(rows[-1])
                rows = nxt
            return rows[0]
        nodes = self.nodes or (tuple(range(len(rows))),)
        if sorted(i for nd in nodes for i in nd) != list(range(len(rows))):
            raise OrderError(f"hierarchical nodes {nodes} do not cover {len(rows)} ranks")
        return _ring([_ring([rows[i] for i in nd], combine) for nd in nodes], combine)

    def describe(self, n: int) -> str:
        """The order as an expression over ``x0 .. x{n-1}`` (for docs and errors)."""
        return self.fold([f"x{i}" for i in range(n)], lambda a, b: f"({a} + {b})")


def _ring(rows: list[Any], combine: Any) -> Any:
    acc = rows[0]
    for r in rows[1:]:
        acc = combine(acc, r)
    return acc


def choose_order(group_ranks: Sequence[int], topo: Topology) -> ReductionOrder:
    """The order of a group of global ranks ``group_ranks`` (in group order) on ``topo``."""
    n = len(group_ranks)
    by_node: dict[int, list[int]] = {}
    for i, r in enumerate(group_ranks):
        by_node.setdefault(r // topo.ranks_per_node, []).append(i)
    if len(by_node) > 1:
        if all(len(v) == 1 for v in by_node.values()):
            return ReductionOrder("ring")
        return ReductionOrder("hierarchical", tuple(tuple(v) for v in by_node.values()))
    if n > 2 and topo.peer_access:
        return ReductionOrder("tree")
    return ReductionOrder("ring")


def order_for(mesh: Any, axis: str, rank: int) -> ReductionOrder:
    """The order of the group of ``axis`` containing ``rank`` of ``mesh``."""
    return choose_order(mesh.axis_group_ranks(axis, rank), mesh.topology())


def named_order(name: str, group_ranks: Sequence[int], topo: Topology) -> ReductionOrder:
    """Order ``name`` for a group (``hierarchical`` takes its nodes from ``topo``)."""
    if name not in ORDERS:
        raise OrderError(f"unknown reduction order '{name}'; valid: {', '.join(ORDERS)}")
    if name != "hierarchical":
        return ReductionOrder(name)
    by_node: dict[int, list[int]] = {}
    for i, r in enumerate(group_ranks):
        by_node.setdefault(r // topo.ranks_per_node, []).append(i)
    return ReductionOrder("hierarchical", tuple(tuple(v) for v in by_node.values()))
