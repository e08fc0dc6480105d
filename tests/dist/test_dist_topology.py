"""The reduction order of the deterministic collectives (tessera.dist.topology): the
documented association of each order, the choice from the mesh and its topology (ring,
tree, hierarchical), deterministic for a given mesh. Gloo runs of every order are in
tests/dist/test_dist_gloo.py."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import dist
from tessera.dist.topology import OrderError, ReductionOrder, Topology, choose_order


def test_each_order_is_its_documented_association():
    assert ReductionOrder("ring").describe(4) == "(((x0 + x1) + x2) + x3)"
    assert ReductionOrder("tree").describe(4) == "((x0 + x1) + (x2 + x3))"
    assert ReductionOrder("tree").describe(5) == "(((x0 + x1) + (x2 + x3)) + x4)"
    assert ReductionOrder("tree").describe(6) == "(((x0 + x1) + (x2 + x3)) + (x4 + x5))"
    h = ReductionOrder("hierarchical", ((0, 1, 2), (3, 4, 5)))
    assert h.describe(6) == "(((x0 + x1) + x2) + ((x3 + x4) + x5))"
    for o in (ReductionOrder("ring"), ReductionOrder("tree")):
        assert o.describe(1) == "x0" and o.describe(2) == "(x0 + x1)"
    with pytest.raises(OrderError, match="unknown reduction order 'star'"):
        ReductionOrder("star")
    with pytest.raises(OrderError, match="do not cover 3 ranks"):
        ReductionOrder("hierarchical", ((0,), (2,))).describe(3)


def test_choice_from_ranks_and_topology():
    nvlink8, pcie8 = Topology(8, True), Topology(8, False)
    assert choose_order(range(8), nvlink8) == ReductionOrder("tree")
    assert choose_order(range(8), pcie8) == ReductionOrder("ring")
    assert choose_order([0, 1], nvlink8) == ReductionOrder("ring")  # two ranks: one sum
    # 16 ranks on two 8-GPU nodes: intra-node first, then across the nodes
    assert choose_order(range(16), nvlink8) == ReductionOrder(
        "hierarchical", (tuple(range(8)), tuple(range(8, 16))))
    # a dp group of a (dp=2, tp=8) mesh: one rank per node -> a plain ring
    assert choose_order([3, 11], nvlink8) == ReductionOrder("ring")
    # a group with two members on each of two nodes
    assert choose_order([0, 4, 8, 12], Topology(8, True)) == ReductionOrder(
        "hierarchical", ((0, 1), (2, 3)))


def test_mesh_topology_and_reduction_order_are_deterministic():
    cpu = dist.Mesh(axes=["dp", "tp"], devices=range(8), shape=(2, 4))
    assert cpu.topology() == Topology(8, False)  # one host, no GPUs
    assert dist.reduction_order(cpu, "tp", 5) == ReductionOrder("ring")
    two_hosts = dist.Mesh(axes=["dp", "tp"], devices=range(8), shape=(2, 4), ranks_per_node=2)
    o = dist.reduction_order(two_hosts, "tp", 5)
    assert o == ReductionOrder("hierarchical", ((0, 1), (2, 3)))  # tp group 4..7: nodes 2, 3
    assert all(dist.reduction_order(two_hosts, "tp", 5) == o for _ in range(3))
    assert dist.reduction_order(two_hosts, "dp", 1) == ReductionOrder("ring")  # ranks 1, 5
    with pytest.raises(dist.MeshError, match="ranks_per_node must be an int >= 1"):
        dist.Mesh(axes=["dp"], devices=range(2), ranks_per_node=0)


def test_ordered_reduce_reference():
    rng = np.random.default_rng(3)
    xs = [(rng.standard_normal(50) * 10.0 ** rng.integers(-6, 7, 50)).astype(np.float32)
          for _ in range(4)]
    ring = dist.ordered_reduce(xs, "sum", "ring")
    tree = dist.ordered_reduce(xs, "sum", "tree")
    assert ring.tobytes() == dist.rank_ordered_reduce(xs).tobytes()
    assert ring.tobytes() == (((xs[0] + xs[1]) + xs[2]) + xs[3]).tobytes()
    assert tree.tobytes() == ((xs[0] + xs[1]) + (xs[2] + xs[3])).tobytes()
    assert ring.tobytes() != tree.tobytes()  # this data: the order shows in the bits
    h = ReductionOrder("hierarchical", ((0, 2), (1, 3)))
    assert dist.ordered_reduce(xs, "sum", h).tobytes() == (
        (xs[0] + xs[2]) + (xs[1] + xs[3])).tobytes()
    m = dist.ordered_reduce(xs, "mean", "tree")
    assert m.dtype == np.float32
    assert m.tobytes() == (((xs[0] + xs[1]) + (xs[2] + xs[3])) / 4).astype(np.float32).tobytes()
