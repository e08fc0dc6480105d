"""Per-rank programs with collectives lowered as a whole and run as PTX on 2 CUDA GPUs,
the host collectives (``ttarget.all_reduce`` ...) over NCCL (needs at least 2 GPUs;
skipped otherwise). Each result is checked against float64 / the rank-ordered reduction
(bitwise where only a collective touches the data) and across two runs.

The same programs run on the Tile IR interpreter over gloo in ``tests/dist/test_dist_lowered.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tessera import dist
from tessera.dist.launch import spawn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.device_count() < 2,
        reason="needs at least 2 CUDA GPUs",
    ),
]

WORLD = 2

PER_RANK = """
func.func @prog(%x: tensor<8x16xf32>, %w: tensor<16x8xf32>, %b: tensor<8x32xf32>) -> (tensor<8x16xf32>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<4x32xf32>, tensor<4x64xf32>, tensor<8x16xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  %y = tgraph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %g = tgraph.all_gather %y axis = "tp" dim = 1 : (tensor<8x8xf32>) -> tensor<8x16xf32>
  %h = tgraph.tanh %g : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %r = tgraph.all_reduce %b op = "sum" axis = "tp" : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %n = tgraph.all_reduce %b op = "max" axis = "tp" nondeterministic : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %s = tgraph.reduce_scatter %b op = "sum" axis = "tp" dim = 0 : (tensor<8x32xf32>) -> tensor<4x32xf32>
  %t = tgraph.all_to_all %b axis = "tp" split_dim = 0 concat_dim = 1 : (tensor<8x32xf32>) -> tensor<4x64xf32>
  %l = tgraph.all_slice %b axis = "tp" dim = 1 : (tensor<8x32xf32>) -> tensor<8x16xf32>
  func.return %h, %r, %n, %s, %t, %l : tensor<8x16xf32>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<4x32xf32>, tensor<4x64xf32>, tensor<8x16xf32>
}
"""

GLOBAL = """
func.func @row(%x: tensor<32x64xf32> {tessera.shard = #tessera.shard<[[], [tp]]>}, %w: tensor<64x128xf32> {tessera.shard = #tessera.shard<[[tp], []]>}, %c: tensor<128xf32>) -> tensor<32x128xf32> attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  %y = tgraph.matmul %x, %w : (tensor<32x64xf32>, tensor<64x128xf32>) -> tensor<32x128xf32>
  %z = tgraph.add %y, %c : (tensor<32x128xf32>, tensor<128xf32>) -> tensor<32x128xf32>
  func.return %z : tensor<32x128xf32>
}
"""

SEND_RECV = """
func.func @sender(%x: tensor<3x5xf32>) -> tensor<3x5xf32> attributes {tessera.mesh = #tessera.mesh<pp = 2>} {
  %y = tgraph.exp %x : (tensor<3x5xf32>) -> tensor<3x5xf32>
  tgraph.send %y axis = "pp" peer = 1 : tensor<3x5xf32>
  func.return %y : tensor<3x5xf32>
}
func.func @receiver(%x: tensor<3x5xf32>) -> tensor<3x5xf32> attributes {tessera.mesh = #tessera.mesh<pp = 2>} {
  %y = tgraph.recv axis = "pp" peer = -1 : tensor<3x5xf32>
  %z = tgraph.add %y, %x : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
  func.return %z : tensor<3x5xf32>
}
"""


def _data(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _b(rank: int) -> np.ndarray:
    """Per-rank float32 data with a wide dynamic range, so summation order matters."""
    rng = np.random.default_rng(100 + rank)
    return (rng.standard_normal((8, 32)) * 10.0 ** rng.integers(-6, 7, (8, 32))).astype(
        np.float32
    )


X, W = _data(1, 8, 16), _data(2, 16, 16)
XG, WG, CG = _data(3, 32, 64), _data(4, 64, 128), _data(5, 128)
P = _data(6, 3, 5)


def _w(rank: int) -> np.ndarray:
    return W[:, rank * 8:(rank + 1) * 8].copy()


def _host(results: list) -> list[np.ndarray]:
    return [r.detach().cpu().numpy() for r in results]


def _nccl_rank(rank: int, world: int) -> dict:
    from tessera.dist.executor import parse, run_lowered

    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(world)], axes=("tp",))
    assert mesh.backend == "nccl"
    out: dict = {}
    mod = parse(PER_RANK)
    args = [X, _w(rank), _b(rank)]
    first = run_lowered(mod, "prog", args, mesh)
    second = run_lowered(mod, "prog", args, mesh)
    out["devices"] = sorted({str(t.device) for t in first})
    out["repro"] = all(torch.equal(a, b) for a, b in zip(first, second))
    out["prog"] = _host(first)
    gmod = parse(GLOBAL)
    out["row"] = _host(run_lowered(gmod, "row", [XG, WG, CG], mesh))
    pp = dist.mesh(devices=[f"cuda:{i}" for i in range(world)], axes=("pp",))
    sr = parse(SEND_RECV)
    out["sr"] = _host(run_lowered(sr, "sender" if rank == 0 else "receiver", [P], pp))
    return out


def test_nccl_lowered_collectives():
    outs = spawn(_nccl_rank, WORLD, backend="nccl", timeout=300)
    bs = [_b(r) for r in range(WORLD)]
    y = np.concatenate([X.astype(np.float64) @ _w(r).astype(np.float64) for r in range(WORLD)],
                       axis=1)
    total = dist.rank_ordered_reduce(bs, "sum")
    ref_row = XG.astype(np.float64) @ WG.astype(np.float64) + CG
    for r, out in enumerate(outs):
        assert out["devices"] == [f"cuda:{r}"], f"rank {r}: results on {out['devices']}"
        assert out["repro"], f"rank {r}: results differ between runs"
        h, red, mx, rs, a2a, sl = out["prog"]
        np.testing.assert_allclose(h, np.tanh(y), rtol=1e-5, atol=1e-5, err_msg=f"rank {r}")
        assert red.tobytes() == total.tobytes(), f"rank {r}: not the rank-ordered sum"
        assert mx.tobytes() == np.maximum(bs[0], bs[1]).tobytes()
        assert rs.tobytes() == total[r * 4:(r + 1) * 4].tobytes()
        want = np.concatenate([b[r * 4:(r + 1) * 4] for b in bs], axis=1)
        assert a2a.tobytes() == want.tobytes()
        assert sl.tobytes() == bs[r][:, r * 16:(r + 1) * 16].tobytes()
        err = float(np.abs(out["row"][0] - ref_row).max())
        assert err <= 1e-4 * max(1.0, float(np.abs(ref_row).max())), f"rank {r}: row err {err}"
    np.testing.assert_allclose(outs[0]["sr"][0], np.exp(P), rtol=1e-5)
    np.testing.assert_allclose(outs[1]["sr"][0], np.exp(P) + P, rtol=1e-5)
