"""Deterministic collectives on real multi-process gloo groups (4 ranks, one spawn)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tessera import dist
from tessera.dist.launch import spawn


def _inputs(rank: int, n: int = 1000) -> np.ndarray:
    """Per-rank float32 data with a wide dynamic range, so summation order matters."""
    rng = np.random.default_rng(100 + rank)
    return (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 7, n)).astype(np.float32)


def _collectives_rank(rank: int, world: int) -> dict:
    import torch

    mesh = dist.mesh(devices=range(world), axes=("dp", "tp"), shape=(2, 2))
    flat = dist.mesh(devices=range(world), axes=("dp",))
    out: dict = {}
    x = _inputs(rank)
    runs = [dist.all_reduce(x, "sum", "dp", mesh=flat) for _ in range(3)]
    out["ar_runs"] = runs
    out["ar_nondet"] = dist.all_reduce(x, "sum", "dp", mesh=flat, deterministic=False)
    out["ar_tp"] = dist.all_reduce(x, "sum", "tp", mesh=mesh)
    for op in ("max", "min", "prod", "mean"):
        out[f"ar_{op}"] = dist.all_reduce(x[:7], op, "dp", mesh=flat)
    out["ar_bf16"] = dist.all_reduce(x[:13].astype(ml_dtypes.bfloat16), "sum", "dp", mesh=flat)
    out["ar_torch"] = dist.all_reduce(torch.from_numpy(x[:9].copy()), "sum", "dp", mesh=flat)
    with mesh:
        blk = np.full((2, 3), rank, dtype=np.float32)
        out["ag"] = dist.all_gather(blk, "tp", dim=1)
        m = np.arange(8 * 3, dtype=np.float32).reshape(8, 3) * (rank + 1)
        out["rs"] = dist.reduce_scatter(m, "sum", "dp", dim=0)
        out["a2a"] = dist.all_to_all(np.arange(4, dtype=np.int32).reshape(4, 1) + 10 * rank,
                                     "tp", split_dim=0, concat_dim=1)
        out["slice"] = dist.all_slice(np.arange(8.0), "dp", dim=0)
        c = mesh.coords(rank)
        if c["tp"] == 0:
            dist.send(np.full((3,), rank, dtype=np.float64), "tp", 1)
        else:
            out["recv"] = dist.recv((3,), np.float64, "tp", -1)
        try:
            dist.all_reduce(x, "sum", "ep")
        except dist.CollectiveError as e:
            out["bad_axis"] = str(e)
    return out


@pytest.fixture(scope="module")
def four_ranks() -> list[dict]:
    return spawn(_collectives_rank, 4, timeout=90)


def test_deterministic_all_reduce_is_rank_ordered_sum_and_reproducible(four_ranks):
    ref = dist.rank_ordered_reduce([_inputs(r) for r in range(4)], "sum")
    for r, out in enumerate(four_ranks):
        for run in out["ar_runs"]:
            assert run.dtype == np.float32
            assert run.tobytes() == ref.tobytes(), f"rank {r}: not bitwise the rank-ordered sum"
        np.testing.assert_allclose(out["ar_nondet"], ref, rtol=1e-5, atol=1e-3)
    # order matters for this data: a different order gives different bits
    rev = dist.rank_ordered_reduce([_inputs(r) for r in reversed(range(4))], "sum")
    assert rev.tobytes() != ref.tobytes()


def test_all_reduce_ops_dtypes_and_subgroups(four_ranks):
    xs = [_inputs(r) for r in range(4)]
    for r, out in enumerate(four_ranks):
        group = [r - r % 2, r - r % 2 + 1]  # tp group of a 2x2 (dp, tp) mesh
        want = xs[group[0]] + xs[group[1]]
        assert out["ar_tp"].tobytes() == want.tobytes()
        for op in ("max", "min", "prod", "mean"):
            ref = dist.rank_ordered_reduce([x[:7] for x in xs], op)
            assert out[f"ar_{op}"].tobytes() == ref.tobytes(), op
        b = dist.rank_ordered_reduce([x[:13].astype(ml_dtypes.bfloat16) for x in xs])
        assert out["ar_bf16"].dtype == ml_dtypes.bfloat16
        assert out["ar_bf16"].tobytes() == b.tobytes()
        t = out["ar_torch"]
        assert t.numpy().tobytes() == dist.rank_ordered_reduce([x[:9] for x in xs]).tobytes()


def test_gather_scatter_all_to_all_slice_send_recv(four_ranks):
    for r, out in enumerate(four_ranks):
        tp0 = r - r % 2
        np.testing.assert_array_equal(
            out["ag"], np.concatenate([np.full((2, 3), tp0), np.full((2, 3), tp0 + 1)], axis=1)
        )
        dp = r // 2
        base = np.arange(24, dtype=np.float32).reshape(8, 3)
        members = [r % 2, r % 2 + 2]  # dp group
        full = base * (members[0] + 1) + base * (members[1] + 1)
        np.testing.assert_array_equal(out["rs"], full[dp * 4:(dp + 1) * 4])
        tp = r % 2
        want = np.array([[tp * 2 + 10 * tp0, tp * 2 + 10 * (tp0 + 1)],
                         [tp * 2 + 1 + 10 * tp0, tp * 2 + 1 + 10 * (tp0 + 1)]])
        np.testing.assert_array_equal(out["a2a"], want)
        np.testing.assert_array_equal(out["slice"], np.arange(8.0)[dp * 4:(dp + 1) * 4])
        if tp == 1:
            np.testing.assert_array_equal(out["recv"], np.full((3,), r - 1.0))
        assert "mesh has no axis 'ep'" in out["bad_axis"]


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
