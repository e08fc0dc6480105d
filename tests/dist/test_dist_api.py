"""Single-process API of tessera.dist: meshes, layouts, sharded tensors, collectives on
groups of one rank (multi-process checks are in test_dist_gloo.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import dist


def test_single_process_semantics():
    one = dist.mesh(devices=1, axes=("dp",))
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(dist.all_reduce(x, "sum", "dp", mesh=one), x)
    np.testing.assert_array_equal(dist.all_gather(x, "dp", 1, mesh=one), x)
    np.testing.assert_array_equal(dist.reduce_scatter(x, "sum", "dp", 0, mesh=one), x)
    two = dist.mesh(devices=2, axes=("dp",))
    with pytest.raises(dist.CollectiveError, match="needs an initialized torch.distributed"):
        dist.all_reduce(x, "sum", "dp", mesh=two)
    with pytest.raises(dist.CollectiveError, match="unknown reduction 'avg'"):
        dist.all_reduce(x, "avg", "dp", mesh=one)


def test_mesh_spellings_and_errors():
    m = dist.Mesh(axes=["tp", "pp", "dp"], devices=range(72))
    assert m.shape == (72, 1, 1) and m.size == 72
    m2 = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"),
                   shape=(4, 9, 2))
    assert m2.backend == "nccl" and str(m2.to_attr()) == "#tessera.mesh<dp = 4, tp = 9, pp = 2>"
    assert m2.coords(17) == {"dp": 0, "tp": 8, "pp": 1}
    assert m2.rank_of({"dp": 0, "tp": 8, "pp": 1}) == 17
    assert m2.axis_group_ranks("pp", 17) == [16, 17]
    assert dist.mesh(devices=["cpu"] * 2, axes=("dp",)).backend == "gloo"
    with pytest.raises(dist.MeshError, match=r"mesh shape \(2, 2\) holds 4 devices, but 5"):
        dist.mesh(devices=range(5), axes=("dp", "tp"), shape=(2, 2))
    with pytest.raises(dist.MeshError, match="mesh has no axis 'ep'"):
        m2.axis_size("ep")
    # without a process group; on a machine without GPUs, first: no CUDA devices
    with pytest.raises(dist.MeshError,
                       match="needs an initialized torch.distributed|needs CUDA devices"):
        m2.device_mesh()


def test_shardspec_layouts_and_shard_unshard():
    mesh = dist.mesh(devices=range(4), axes=("dp", "tp"), shape=(2, 2))
    x = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)
    cases = {
        "1d": (dist.ShardSpec(partition=("col",), mesh_axes=("tp",)), "[[], [tp]]", (8, 6)),
        "2d": (dist.ShardSpec(partition=("row", "col"), mesh_axes=("tp", "dp")),
               "[[tp], [dp]]", (4, 6)),
        "two_axes": (dist.ShardSpec(partition=("row",), mesh_axes=(("dp", "tp"),)),
                     "[[dp, tp], []]", (2, 12)),
        "replicated": (dist.ShardSpec(), "[[], []]", (8, 12)),
    }
    for name, (spec, attr, local) in cases.items():
        assert str(spec.to_attr(2)) == f"#tessera.shard<{attr}>", name
        assert dist.ShardSpec.from_attr(spec.to_attr(2)).to_attr(2) == spec.to_attr(2)
        shards = dist.shard_all(x, spec, mesh)
        assert all(s.shape == local for s in shards), name
        np.testing.assert_array_equal(dist.unshard(shards, spec, mesh), x)
    # dp-major block order along a dim split over (dp, tp)
    np.testing.assert_array_equal(dist.shard(x, cases["two_axes"][0], mesh, 2), x[4:6])
    partial = dist.ShardSpec(partial=("tp",))
    assert str(partial.to_attr(2)) == "#tessera.shard<[[], []], partial = sum over [tp]>"
    np.testing.assert_array_equal(dist.unshard(dist.shard_all(x, partial, mesh), partial, mesh), x)
    # 10 rows over dp x tp = 4 parts: padded blocks of 3 (tests/dist/test_dist_uneven.py)
    assert dist.local_shape((10, 8), cases["two_axes"][0], mesh) == (3, 8)
    with pytest.raises(dist.ShardingError, match="mesh has no axis 'pp'"):
        dist.local_shape((8, 8), dist.ShardSpec(("row",), ("pp",)), mesh)


def test_dist_tensor_is_a_description_without_a_process_group():
    mesh = dist.mesh(devices=range(72), axes=("dp", "tp", "pp"), shape=(4, 9, 2))
    W = dist.tensor(shape=(9 * 1024, 8192),
                    layout=dist.ShardSpec(partition=("row", "col"), mesh_axes=("tp", "pp")),
                    mesh=mesh, dtype="bf16")
    assert W.local_shape == (1024, 4096) and W.nbytes == 9 * 1024 * 8192 * 2
    with pytest.raises(dist.ShardingError, match="no torch.distributed process group"):
        W.local  # noqa: B018
    small = dist.mesh(devices=range(2), axes=("tp",))
    data = np.arange(16, dtype=np.float32).reshape(4, 4)
    T = dist.tensor((4, 4), dist.ShardSpec(("col",), ("tp",)), small, "f32", data=data)
    np.testing.assert_array_equal(T.shard(1), data[:, 2:])
    np.testing.assert_array_equal(dist.from_shards(T.shards(), T.layout, small).numpy(), data)
