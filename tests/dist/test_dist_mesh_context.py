"""No silent single-rank collectives: the guide's ``distributed_loss`` (bare ``@ts.jit``,
no ``mesh=``) on a gloo process group of 2 ranks takes its mesh from ``with mesh:``,
``dist.use_mesh(...)`` or its ``dist.tensor`` argument, and is a located error without one."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera import dist
from tessera.dist.launch import spawn

X = np.random.default_rng(11).standard_normal((4, 3))
W = np.random.default_rng(12).standard_normal((3, 4))
COL = dist.ShardSpec(partition=("col",), mesh_axes=("tp",))


@ts.jit
@ts.autodiff
def distributed_loss(x, W):
    """Autodiff with distributed operations"""
    # Forward pass with collective operations
    y = ts.matmul(x, W)
    y = ts.all_gather(y, axis="tp")  # Tensor parallel gather
    loss = ts.sum(y**2)

    # Backward automatically inserts reduce_scatter
    return loss


def _rank(rank: int, world: int) -> dict:
    mesh = dist.mesh(devices=range(world), axes=("tp",))
    w_local = dist.shard(W, COL, mesh, rank)
    out: dict = {}
    try:
        distributed_loss(X, w_local)
    except ts.ShapeError as e:
        out["error"] = str(e)
    with mesh:
        out["with"] = float(distributed_loss(X, w_local))
        grad_W = ts.grad(distributed_loss)(X, w_local)
        out["grad"] = np.asarray(grad_W)
    with dist.use_mesh(mesh):
        out["use"] = float(distributed_loss(X, w_local))
    out["dist"] = float(distributed_loss(X, dist.tensor(W.shape, COL, mesh, "f64", data=W)))
    with mesh:  # the eager collectives of ts.dist take the same mesh
        out["eager"] = dist.all_gather(X @ w_local, axis="tp", dim=1)
    return out


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return spawn(_rank, 2, timeout=180)


def test_distributed_loss_takes_the_mesh_of_the_context(results: list[dict]) -> None:
    want = float(np.sum((X @ W) ** 2))  # the float64 reference of the global loss
    for r in results:
        for k in ("with", "use", "dist"):
            assert r[k] == pytest.approx(want, rel=1e-12), k
        np.testing.assert_allclose(r["eager"], X @ W, rtol=1e-12)


def test_gradient_is_that_of_the_parameter(results: list[dict]) -> None:
    # ts.grad(distributed_loss)(x, W): the gradient of W, this rank's block; collective
    # adjoints give the gradient of the sum over the 2 ranks' (equal) losses.
    g = 2 * 2.0 * X.T @ (X @ W)
    for rank, r in enumerate(results):
        np.testing.assert_allclose(r["grad"], g[:, 2 * rank:2 * rank + 2], rtol=1e-12)


def test_without_a_mesh_the_collective_is_a_located_error(results: list[dict]) -> None:
    for r in results:
        assert "all_gather: mesh axis 'tp' has no mesh" in r["error"]
        assert "(test_dist_mesh_context.py:" in r["error"]
