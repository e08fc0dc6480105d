"""Uneven sharding: a mesh axis that does not divide a dim gives ceil-sized blocks, the
last ones padded (or ragged). Shard arithmetic in one process; collectives, partitioned
programs and ``@ts.jit`` on ``dist.tensor`` arguments over 3 gloo ranks (10 rows/columns)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera import dist
from tessera.dist.executor import parse, run_lowered, run_spmd
from tessera.dist.launch import spawn
from tessera.dist.sharding import block_range, block_size, valid_shape

ROWS = dist.ShardSpec(partition=("row",), mesh_axes=("dp",))
COLS = dist.ShardSpec(partition=("col",), mesh_axes=("tp",))


# ----------------------------------------------------------------- shard arithmetic


def test_guide_meshes_split_unevenly() -> None:
    # 1e6 rows over 72 devices: 71 blocks of 13889 and one of 13881
    sizes = [block_range(1_000_000, 72, b) for b in range(72)]
    assert block_size(1_000_000, 72) == 13889
    assert [e - s for s, e in sizes] == [13889] * 71 + [13881]
    assert sizes[0][0] == 0 and sizes[-1][1] == 1_000_000
    assert all(a[1] == b[0] for a, b in zip(sizes, sizes[1:]))
    # 8192 columns over tp = 9 of the NVL72 mesh
    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"),
                     shape=(4, 9, 2))
    W = dist.tensor(shape=(8192, 8192), layout=dist.ShardSpec(partition=("col",),
                    mesh_axes=("tp",)), mesh=mesh, dtype="bf16")
    assert W.local_shape == (8192, 911)
    tp_of = [mesh.coords(r)["tp"] for r in range(72)]
    widths = [valid_shape(W.shape, W.layout, mesh, r)[1] for r in range(72)]
    assert {w for w, t in zip(widths, tp_of) if t < 8} == {911}
    assert {w for w, t in zip(widths, tp_of) if t == 8} == {904}
    big = dist.mesh(devices=range(72), axes=("dp",))
    X = dist.tensor((1_000_000, 16), dist.ShardSpec(("batch",), ("dp",)), big, "f32")
    assert X.local_shape == (13889, 16)
    assert valid_shape(X.shape, X.layout, big, 71) == (13881, 16)


@pytest.mark.parametrize(("n", "parts"), [(10, 3), (10, 4), (5, 4), (7, 7), (12, 5), (3, 3)])
def test_blocks_cover_the_dim_once(n: int, parts: int) -> None:
    covered = []
    for b in range(parts):
        s, e = block_range(n, parts, b)
        assert 0 <= e - s <= block_size(n, parts)
        covered += list(range(s, e))
    assert covered == list(range(n))


def test_shard_and_unshard_padded_and_ragged() -> None:
    mesh = dist.mesh(devices=range(6), axes=("dp", "tp"), shape=(2, 3))
    x = np.arange(10 * 7, dtype=np.float64).reshape(10, 7)
    spec = dist.ShardSpec(partition=("row", "col"), mesh_axes=("dp", "tp"))
    assert dist.local_shape(x.shape, spec, mesh) == (5, 3)
    padded = dist.shard_all(x, spec, mesh)
    assert all(p.shape == (5, 3) for p in padded)
    last = padded[5]  # dp=1, tp=2: rows 5..9, column 6 only, then two columns of zeros
    np.testing.assert_array_equal(last[:, :1], x[5:, 6:])
    assert not last[:, 1:].any()
    ragged = [dist.shard(x, spec, mesh, r, padded=False) for r in range(6)]
    assert [r.shape for r in ragged] == [(5, 3), (5, 3), (5, 1)] * 2
    np.testing.assert_array_equal(dist.unshard(ragged, spec, mesh), x)
    np.testing.assert_array_equal(dist.unshard(padded, spec, mesh, shape=x.shape), x)
    two = dist.ShardSpec(partition=("batch",), mesh_axes=(("dp", "tp"),))
    blocks = dist.shard_all(x, two, mesh)  # 10 rows over 6 parts: 2,2,2,2,2,0
    assert all(b.shape == (2, 7) for b in blocks) and not blocks[5].any()
    np.testing.assert_array_equal(dist.unshard(blocks, two, mesh, shape=x.shape), x)
    t = dist.from_shards(ragged, spec, mesh)
    np.testing.assert_array_equal(t.numpy(), x)
    with pytest.raises(dist.ShardingError, match=r"rank 0 holds a block of shape \(1, 7\)"):
        dist.unshard([b[:1] for b in blocks], two, mesh, shape=x.shape)


# ----------------------------------------------------------------- 3 gloo ranks

X10 = np.random.default_rng(21).standard_normal((10, 4))
W10 = np.random.default_rng(22).standard_normal((5, 10))
XM = np.random.default_rng(23).standard_normal((4, 5))
B10 = np.random.default_rng(24).standard_normal(10)

PROGRAMS = """
func.func @rows(%x: tensor<10x4xf64> {tessera.shard = #tessera.shard<[[dp], []]>}, %w: tensor<4x3xf64>) -> tensor<f64> attributes {tessera.mesh = #tessera.mesh<dp = 3>} {
  %y = tgraph.matmul %x, %w : (tensor<10x4xf64>, tensor<4x3xf64>) -> tensor<10x3xf64>
  %e = tgraph.tanh %y : (tensor<10x3xf64>) -> tensor<10x3xf64>
  %s = tgraph.sum %e axes = [0, 1] : (tensor<10x3xf64>) -> tensor<f64>
  func.return %s : tensor<f64>
}
func.func @col(%x: tensor<4x5xf64>, %w: tensor<5x10xf64> {tessera.shard = #tessera.shard<[[], [dp]]>}, %b: tensor<10xf64>) -> (tensor<4x10xf64> {tessera.shard = #tessera.shard<[[], [dp]]>}, tensor<4x10xf64>) attributes {tessera.mesh = #tessera.mesh<dp = 3>} {
  %y = tgraph.matmul %x, %w : (tensor<4x5xf64>, tensor<5x10xf64>) -> tensor<4x10xf64>
  %z = tgraph.add %y, %b : (tensor<4x10xf64>, tensor<10xf64>) -> tensor<4x10xf64>
  %m = tgraph.softmax %z axis = 1 : (tensor<4x10xf64>) -> tensor<4x10xf64>
  func.return %z, %m : tensor<4x10xf64>, tensor<4x10xf64>
}
func.func @krow(%x: tensor<4x10xf64> {tessera.shard = #tessera.shard<[[], [dp]]>}, %w: tensor<10x3xf64> {tessera.shard = #tessera.shard<[[dp], []]>}) -> tensor<4x3xf64> attributes {tessera.mesh = #tessera.mesh<dp = 3>} {
  %y = tgraph.matmul %x, %w : (tensor<4x10xf64>, tensor<10x3xf64>) -> tensor<4x3xf64>
  func.return %y : tensor<4x3xf64>
}
"""


def _rank(rank: int, world: int) -> dict:
    mesh = dist.mesh(devices=range(world), axes=("dp",))
    out: dict = {}
    mine = dist.shard(X10, ROWS, mesh, rank, padded=False)
    with mesh:
        out["gather_ragged"] = dist.all_gather(mine, axis="dp", dim=0, size=10)
        out["gather_padded"] = dist.all_gather(dist.shard(X10, ROWS, mesh, rank), axis="dp",
                                               dim=0, size=10)
        contrib = X10 * (rank + 1)
        out["rs_padded"] = dist.reduce_scatter(contrib, "sum", axis="dp", dim=0)
        out["rs_ragged"] = dist.reduce_scatter(contrib, "sum", axis="dp", dim=0, padded=False)
        out["slice"] = dist.all_slice(X10, axis="dp", dim=0, padded=False)
        out["a2a"] = dist.all_to_all(X10 + rank, axis="dp", split_dim=0, concat_dim=1)
        out["ar"] = dist.all_reduce(mine.sum(0), "sum", axis="dp")
    mod = parse(PROGRAMS)
    out["rows"] = run_spmd(mod, "rows", [X10, W10[:4, :3]], mesh)
    out["col"] = run_spmd(mod, "col", [XM, W10, B10], mesh)
    out["krow"] = run_spmd(mod, "krow", [XM @ W10, W10.T[:, :3]], mesh)
    # the same per-rank programs lowered to Tile IR as one host program each
    out["col_lowered"] = run_lowered(parse(PROGRAMS), "col", [XM, W10, B10], mesh)
    out["rows_lowered"] = run_lowered(parse(PROGRAMS), "rows", [X10, W10[:4, :3]], mesh)

    Wd = dist.tensor(W10.shape, dist.ShardSpec(("col",), ("dp",)), mesh, "f64", data=W10)

    @ts.jit
    def layer(x, W):
        return ts.relu(ts.matmul(x, W))

    out["jit"] = layer(XM, Wd)

    @ts.jit
    def sq_loss(x, W):
        return ts.sum(ts.matmul(x, W) ** 2)

    g = ts.grad(sq_loss, argnums=1)(XM, Wd)
    out["grad_local"] = g.local
    out["grad_valid"] = g.valid_local
    out["grad_full"] = g.numpy()

    @ts.jit
    def per_rank(x, W):
        return ts.all_gather(ts.matmul(x, W), axis="dp")

    try:
        per_rank(XM, Wd)
    except ts.TesseraError as e:
        out["per_rank_error"] = str(e)
    return out


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return spawn(_rank, 3, timeout=240)


def test_collectives_with_uneven_blocks(results: list[dict]) -> None:
    total = X10 * 6  # ranks contribute X10 * 1, * 2, * 3
    blocks = [(0, 4), (4, 8), (8, 10)]
    for rank, r in enumerate(results):
        np.testing.assert_array_equal(r["gather_ragged"], X10)
        np.testing.assert_array_equal(r["gather_padded"], X10)
        s, e = blocks[rank]
        assert r["rs_padded"].shape == (4, 4)
        np.testing.assert_allclose(r["rs_padded"][: e - s], total[s:e], rtol=1e-15)
        assert not r["rs_padded"][e - s:].any()
        np.testing.assert_allclose(r["rs_ragged"], total[s:e], rtol=1e-15)
        np.testing.assert_array_equal(r["slice"], X10[s:e])
        # all_to_all: block `rank` of every rank's (X10 + k), its 2 missing rows zero
        blk = np.concatenate([X10, np.zeros((2, 4))])[4 * rank:4 * rank + 4]
        valid = (4 * rank + np.arange(4) < 10)[:, None]
        want = np.concatenate([np.where(valid, blk + k, 0.0) for k in range(3)], axis=1)
        np.testing.assert_array_equal(r["a2a"], want)
        np.testing.assert_allclose(r["ar"], X10.sum(0), rtol=1e-12)


def test_partitioned_programs_equal_float64(results: list[dict]) -> None:
    w = W10[:4, :3]
    y = XM @ W10 + B10
    m = np.exp(y - y.max(1, keepdims=True))
    m /= m.sum(1, keepdims=True)
    for rank, r in enumerate(results):
        np.testing.assert_allclose(r["rows"][0], np.tanh(X10 @ w).sum(), rtol=1e-12)
        z_local, m_full = r["col"]
        assert z_local.shape == (4, 4)
        s, e = [(0, 4), (4, 8), (8, 10)][rank]
        np.testing.assert_allclose(z_local[:, : e - s], y[:, s:e], rtol=1e-12)
        np.testing.assert_allclose(m_full, m, rtol=1e-12)
        np.testing.assert_allclose(r["krow"][0], (XM @ W10) @ W10.T[:, :3], rtol=1e-12)
        z_low, m_low = r["col_lowered"]
        np.testing.assert_allclose(z_low[:, : e - s], y[:, s:e], rtol=1e-12)
        np.testing.assert_allclose(m_low, m, rtol=1e-12)
        np.testing.assert_allclose(r["rows_lowered"][0], np.tanh(X10 @ w).sum(), rtol=1e-12)


def test_jit_on_uneven_dist_tensors(results: list[dict]) -> None:
    g = 2 * XM.T @ (XM @ W10)
    for rank, r in enumerate(results):
        np.testing.assert_allclose(r["jit"], np.maximum(XM @ W10, 0), rtol=1e-12)
        s, e = [(0, 4), (4, 8), (8, 10)][rank]
        assert r["grad_local"].shape == (5, 4)
        np.testing.assert_allclose(r["grad_valid"], g[:, s:e], rtol=1e-12)
        np.testing.assert_allclose(r["grad_full"], g, rtol=1e-12)


def test_per_rank_programs_refuse_uneven_blocks(results: list[dict]) -> None:
    for r in results:
        assert "per_rank: argument 'W' of shape (5, 10) is split unevenly" in r["per_rank_error"]
