"""Per-rank programs with collectives lowered as a whole (lower-graph-to-tile: the
collectives become host ops of the lowered program) and run on the Tile IR interpreter
on 2 gloo ranks: each result equals the Graph IR run of the same program and the float64
reference (bitwise where only a collective touches the data). Single-process: the
lowering to Target IR / PTX, and the errors of running without a process group."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.context import Context

from tessera import dist
from tessera.dist.collectives import CollectiveError
from tessera.dist.executor import lowered, parse, run_local, run_lowered, run_spmd
from tessera.dist.launch import spawn
from tessera.ir import tile as tt
from tessera.passes.emit_ptx import emit_ptx
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tessera.passes.pipelines import lower_to_target
from tessera.runtime import ptxas
from tessera.runtime.tile_interpreter import run_host

WORLD = 2

PER_RANK = """
func.func @prog(%x: tensor<8x16xf64>, %w: tensor<16x8xf64>, %b: tensor<8x32xf32>) -> (tensor<8x16xf64>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<4x32xf32>, tensor<4x64xf32>, tensor<8x16xf32>) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  %y = tgraph.matmul %x, %w : (tensor<8x16xf64>, tensor<16x8xf64>) -> tensor<8x8xf64>
  %g = tgraph.all_gather %y axis = "tp" dim = 1 : (tensor<8x8xf64>) -> tensor<8x16xf64>
  %h = tgraph.tanh %g : (tensor<8x16xf64>) -> tensor<8x16xf64>
  %r = tgraph.all_reduce %b op = "sum" axis = "tp" : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %n = tgraph.all_reduce %b op = "max" axis = "tp" nondeterministic : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %s = tgraph.reduce_scatter %b op = "sum" axis = "tp" dim = 0 : (tensor<8x32xf32>) -> tensor<4x32xf32>
  %t = tgraph.all_to_all %b axis = "tp" split_dim = 0 concat_dim = 1 : (tensor<8x32xf32>) -> tensor<4x64xf32>
  %l = tgraph.all_slice %b axis = "tp" dim = 1 : (tensor<8x32xf32>) -> tensor<8x16xf32>
  func.return %h, %r, %n, %s, %t, %l : tensor<8x16xf64>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<4x32xf32>, tensor<4x64xf32>, tensor<8x16xf32>
}
"""

SEND_RECV = """
func.func @sender(%x: tensor<3x5xf64>) -> tensor<3x5xf64> attributes {tessera.mesh = #tessera.mesh<pp = 2>} {
  %y = tgraph.exp %x : (tensor<3x5xf64>) -> tensor<3x5xf64>
  tgraph.send %y axis = "pp" peer = 1 : tensor<3x5xf64>
  func.return %y : tensor<3x5xf64>
}
func.func @receiver(%x: tensor<3x5xf64>) -> tensor<3x5xf64> attributes {tessera.mesh = #tessera.mesh<pp = 2>} {
  %y = tgraph.recv axis = "pp" peer = -1 : tensor<3x5xf64>
  %z = tgraph.add %y, %x : (tensor<3x5xf64>, tensor<3x5xf64>) -> tensor<3x5xf64>
  func.return %z : tensor<3x5xf64>
}
"""

GLOBAL = """
func.func @row(%x: tensor<8x16xf64> {tessera.shard = #tessera.shard<[[], [tp]]>}, %w: tensor<16x32xf64> {tessera.shard = #tessera.shard<[[tp], []]>}, %c: tensor<32xf64>) -> tensor<8x32xf64> attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  %y = tgraph.matmul %x, %w : (tensor<8x16xf64>, tensor<16x32xf64>) -> tensor<8x32xf64>
  %z = tgraph.add %y, %c : (tensor<8x32xf64>, tensor<32xf64>) -> tensor<8x32xf64>
  func.return %z : tensor<8x32xf64>
}
func.func @row_rs(%x: tensor<8x16xf64> {tessera.shard = #tessera.shard<[[], [tp]]>}, %w: tensor<16x32xf64> {tessera.shard = #tessera.shard<[[tp], []]>}) -> (tensor<8x32xf64> {tessera.shard = #tessera.shard<[[tp], []]>}) attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  %y = tgraph.matmul %x, %w : (tensor<8x16xf64>, tensor<16x32xf64>) -> tensor<8x32xf64>
  func.return %y : tensor<8x32xf64>
}
func.func @col(%x: tensor<8x16xf64>, %w: tensor<16x32xf64> {tessera.shard = #tessera.shard<[[], [tp]]>}) -> tensor<8x32xf64> attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  %y = tgraph.matmul %x, %w : (tensor<8x16xf64>, tensor<16x32xf64>) -> tensor<8x32xf64>
  %s = tgraph.softmax %y axis = -1 : (tensor<8x32xf64>) -> tensor<8x32xf64>
  func.return %s : tensor<8x32xf64>
}
"""

SLICE = """
func.func @s(%b: tensor<8x32xf32>) -> tensor<8x16xf32> attributes {tessera.mesh = #tessera.mesh<tp = 2>} {
  %l = tgraph.all_slice %b axis = "tp" dim = 1 : (tensor<8x32xf32>) -> tensor<8x16xf32>
  func.return %l : tensor<8x16xf32>
}
"""

T = "tensor<8x32xf32>"
ONE = f"""
func.func @one(%b: {T}) -> ({T}, {T}, {T}, {T}, {T}) attributes {{tessera.mesh = #tessera.mesh<dp = 1>}} {{
  %r = tgraph.all_reduce %b op = "sum" axis = "dp" : ({T}) -> {T}
  %g = tgraph.all_gather %b axis = "dp" dim = 0 : ({T}) -> {T}
  %s = tgraph.reduce_scatter %b op = "sum" axis = "dp" dim = 1 : ({T}) -> {T}
  %t = tgraph.all_to_all %b axis = "dp" split_dim = 0 concat_dim = 1 : ({T}) -> {T}
  %l = tgraph.all_slice %b axis = "dp" dim = 0 : ({T}) -> {T}
  func.return %r, %g, %s, %t, %l : {T}, {T}, {T}, {T}, {T}
}}
"""


def _data(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _b(rank: int) -> np.ndarray:
    """Per-rank float32 data with a wide dynamic range, so summation order matters."""
    rng = np.random.default_rng(100 + rank)
    return (rng.standard_normal((8, 32)) * 10.0 ** rng.integers(-6, 7, (8, 32))).astype(
        np.float32
    )


X, W = _data(1, 8, 16), _data(2, 16, 16)
XG, WG, CG = _data(3, 8, 16), _data(4, 16, 32), _data(5, 32)
P = _data(6, 3, 5)


def _w(rank: int) -> np.ndarray:
    return W[:, rank * 8:(rank + 1) * 8].copy()


def _rank(rank: int, world: int) -> dict:
    mesh = dist.mesh(devices=range(world), axes=("tp",))
    out: dict = {}
    mod = parse(PER_RANK)
    args = [X, _w(rank), _b(rank)]
    out["lowered"] = run_lowered(mod, "prog", args, mesh)
    out["again"] = run_lowered(mod, "prog", args, mesh)
    out["graph"] = run_local(mod, "prog", args, mesh)
    # the Tile IR text holds the collectives as host ops
    out["host_ops"] = sorted({
        op.name for op in lowered(mod, "prog").walk() if isinstance(op, tt.HOST_COLLECTIVE_OPS)
    })
    gmod = parse(GLOBAL)
    for name, gargs in (("row", [XG, WG, CG]), ("row_rs", [XG, WG]), ("col", [XG, WG])):
        out[name] = run_lowered(gmod, name, gargs, mesh)
        out[name + "_graph"] = run_spmd(gmod, name, gargs, mesh)
    pp = dist.mesh(devices=range(world), axes=("pp",))
    sr = parse(SEND_RECV)
    out["sr"] = run_lowered(sr, "sender" if rank == 0 else "receiver", [P], pp)
    return out


@pytest.fixture(scope="module")
def outs() -> list[dict]:
    return spawn(_rank, WORLD, timeout=180)


def test_lowered_collectives_equal_graph_run_and_reference(outs):
    bs = [_b(r) for r in range(WORLD)]
    y = np.concatenate([X @ _w(r) for r in range(WORLD)], axis=1)
    total = dist.rank_ordered_reduce(bs, "sum")
    for r, out in enumerate(outs):
        h, red, mx, rs, a2a, sl = out["lowered"]
        np.testing.assert_allclose(h, np.tanh(y), rtol=1e-12, atol=1e-12, err_msg=f"rank {r}")
        assert red.dtype == np.float32
        assert red.tobytes() == total.tobytes(), f"rank {r}: not the rank-ordered sum"
        assert mx.tobytes() == np.maximum(bs[0], bs[1]).tobytes()
        assert rs.tobytes() == total[r * 4:(r + 1) * 4].tobytes()
        want = np.concatenate([b[r * 4:(r + 1) * 4] for b in bs], axis=1)
        assert a2a.tobytes() == want.tobytes()
        assert sl.tobytes() == bs[r][:, r * 16:(r + 1) * 16].tobytes()
        for got, ref in zip(out["lowered"], out["graph"]):
            assert got.shape == ref.shape and got.dtype == ref.dtype
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0)
        for a, b in zip(out["lowered"], out["again"]):
            assert a.tobytes() == b.tobytes(), f"rank {r}: differs between runs"
        assert out["host_ops"] == [
            "ttile.all_gather", "ttile.all_reduce", "ttile.all_to_all", "ttile.mesh_coord",
            "ttile.reduce_scatter",
        ]


def test_partitioned_global_programs_lowered(outs):
    ref_row = XG @ WG + CG
    m = dist.mesh(devices=range(WORLD), axes=("tp",))
    for out in outs:
        np.testing.assert_allclose(out["row"][0], ref_row, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(out["row"][0], out["row_graph"][0], rtol=1e-12, atol=0)
        e = np.exp(XG @ WG - (XG @ WG).max(axis=-1, keepdims=True))
        np.testing.assert_allclose(out["col"][0], e / e.sum(-1, keepdims=True), rtol=1e-12,
                                   atol=1e-14)
    got = dist.unshard([o["row_rs"][0] for o in outs], dist.ShardSpec(("row",), ("tp",)), m)
    np.testing.assert_allclose(got, XG @ WG, rtol=1e-12, atol=1e-12)


def test_lowered_send_recv(outs):
    np.testing.assert_allclose(outs[0]["sr"][0], np.exp(P), rtol=1e-12)
    np.testing.assert_allclose(outs[1]["sr"][0], np.exp(P) + P, rtol=1e-12)


# --------------------------------------------------------------------------- one process


def _lower(text: str):
    m = parse(text)
    LowerGraphToTile().apply(Context(), m)
    m.verify()
    return m


def test_without_a_process_group_the_first_collective_raises_naming_the_op():
    m = _lower(PER_RANK)
    with pytest.raises(CollectiveError, match=r"^ttile\.all_gather: all_gather over mesh axis "
                       r"'tp' \(size 2\) needs an initialized torch.distributed process group"):
        run_host(m, "prog", [X, _w(0), _b(0)])
    sr = _lower(SEND_RECV)
    with pytest.raises(CollectiveError, match=r"^ttile\.recv: .*needs an initialized"):
        run_host(sr, "receiver", [P])
    with pytest.raises(CollectiveError, match=r"^ttile\.mesh_coord: mesh axis 'tp' \(size 2\) "
                       "needs an initialized"):
        run_host(_lower(SLICE), "s", [_b(0)])


def test_mesh_of_other_axes_and_no_mesh_are_errors():
    m = _lower(PER_RANK)
    other = dist.mesh(devices=range(2), axes=("dp",))
    with pytest.raises(CollectiveError, match=r"^ttile\.all_gather: the program was lowered for "
                       r"mesh \{'tp': 2\}, but runs on Mesh\(dp=2"):
        run_host(m, "prog", [X, _w(0), _b(0)], mesh=other)
    with other, pytest.raises(CollectiveError, match="lowered for mesh"):
        run_host(m, "prog", [X, _w(0), _b(0)])
    bare = _lower(SEND_RECV.replace(" attributes {tessera.mesh = #tessera.mesh<pp = 2>}", ""))
    with pytest.raises(CollectiveError, match=r"^ttile\.send: no mesh for axis 'pp': the host "
                       "function has no tessera.mesh attribute"):
        run_host(bare, "sender", [P])


def test_axis_of_one_rank_runs_without_a_process_group():
    b = _b(0)
    got = run_host(_lower(ONE), "one", [b])
    assert len(got) == 5
    for v in got:
        assert v.tobytes() == b.tobytes()


def test_lowered_program_with_collectives_goes_to_ptx():
    target = lower_to_target(_lower(PER_RANK.replace("f64", "f32")))
    names = {op.name for op in target.walk()}
    assert {"ttarget.all_gather", "ttarget.all_reduce", "ttarget.reduce_scatter",
            "ttarget.all_to_all", "ttarget.mesh_coord"} <= names
    assert not any(n.startswith("ttile.") for n in names)
    ptx = emit_ptx(target)
    assert ".entry prog_all_slice_0(" in ptx and "all_reduce" not in ptx
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found (set TESSERA_PTXAS or install nvidia-cuda-nvcc)")
    ptxas.check(ptx)
