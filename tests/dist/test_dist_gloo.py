"""Multi-process gloo runs (one spawn of 2 ranks, one of 4; every check of a world size
runs in its single spawn): deterministic collectives, and sharded Graph IR programs each
equal to the single-process float64 reference (TP GEMMs: column, row, reduce-scattered;
2D sharding; a DP training step; a 2-stage pipeline; hand-written collectives); compiled
segments with and without compute/communication overlap (bitwise equal); every reduction
order (ring, tree, hierarchical) giving its documented result; a pipeline written with
``ts.stage``; a ``cuda:*`` mesh without GPUs as a named error."""

from __future__ import annotations

import os
import runpy

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera import dist
from tessera.dist.executor import parse, run_compiled, run_spmd
from tessera.dist.launch import spawn
from tessera.runtime.graph_interpreter import run_function

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "dist_tp_gemm.py")
T = "tensor<{}f64>"


def _t(*dims: int) -> str:
    return T.format("".join(f"{d}x" for d in dims)).replace("<x", "<").replace("xxf", "xf")


def tp_program(tp: int) -> str:
    return f"""
func.func @col(%x: {_t(8, 16)}, %w: {_t(16, 32)} {{tessera.shard = #tessera.shard<[[], [tp]]>}}) -> {_t(8, 32)} attributes {{tessera.mesh = #tessera.mesh<tp = {tp}>}} {{
  %y = tgraph.matmul %x, %w : ({_t(8, 16)}, {_t(16, 32)}) -> {_t(8, 32)}
  %r = tgraph.gelu %y : ({_t(8, 32)}) -> {_t(8, 32)}
  func.return %r : {_t(8, 32)}
}}
func.func @row(%x: {_t(8, 16)} {{tessera.shard = #tessera.shard<[[], [tp]]>}}, %w: {_t(16, 32)} {{tessera.shard = #tessera.shard<[[tp], []]>}}, %b: {_t(32)}) -> {_t(8, 32)} attributes {{tessera.mesh = #tessera.mesh<tp = {tp}>}} {{
  %y = tgraph.matmul %x, %w : ({_t(8, 16)}, {_t(16, 32)}) -> {_t(8, 32)}
  %z = tgraph.add %y, %b : ({_t(8, 32)}, {_t(32)}) -> {_t(8, 32)}
  func.return %z : {_t(8, 32)}
}}
func.func @row_rs(%x: {_t(8, 16)} {{tessera.shard = #tessera.shard<[[], [tp]]>}}, %w: {_t(16, 32)} {{tessera.shard = #tessera.shard<[[tp], []]>}}) -> ({_t(8, 32)} {{tessera.shard = #tessera.shard<[[tp], []]>}}) attributes {{tessera.mesh = #tessera.mesh<tp = {tp}>}} {{
  %y = tgraph.matmul %x, %w : ({_t(8, 16)}, {_t(16, 32)}) -> {_t(8, 32)}
  func.return %y : {_t(8, 32)}
}}
func.func @guide(%x: {_t(8, 16)}, %w: {_t(16, 32 // tp)} {{tessera.shard = #tessera.shard<[[], [tp]]>}}) -> {_t(8, 32)} attributes {{tessera.mesh = #tessera.mesh<tp = {tp}>}} {{
  %y_local = tgraph.matmul %x, %w : ({_t(8, 16)}, {_t(16, 32 // tp)}) -> {_t(8, 32 // tp)}
  %y = tgraph.all_gather %y_local axis = "tp" dim = 1 : ({_t(8, 32 // tp)}) -> {_t(8, 32)}
  func.return %y : {_t(8, 32)}
}}
"""


def dp_program(axes: str, dp_axis: str = "dp") -> str:
    sh = f"{{tessera.shard = #tessera.shard<[[{dp_axis}], []]>}}"
    return f"""
func.func @step(%x: {_t(8, 4)} {sh}, %yt: {_t(8, 1)} {sh}, %w: {_t(4, 1)}) -> ({_t(4, 1)}, {_t()}) attributes {{tessera.mesh = #tessera.mesh<{axes}>}} {{
  %p = tgraph.matmul %x, %w : ({_t(8, 4)}, {_t(4, 1)}) -> {_t(8, 1)}
  %e = tgraph.sub %p, %yt : ({_t(8, 1)}, {_t(8, 1)}) -> {_t(8, 1)}
  %g = tgraph.matmul %x, %e transpose_lhs : ({_t(8, 4)}, {_t(8, 1)}) -> {_t(4, 1)}
  %c = tgraph.constant dense<0.025> : {_t()} -> {_t(4, 1)}
  %u = tgraph.mul %g, %c : ({_t(4, 1)}, {_t(4, 1)}) -> {_t(4, 1)}
  %wn = tgraph.sub %w, %u : ({_t(4, 1)}, {_t(4, 1)}) -> {_t(4, 1)}
  %l = tgraph.mse %p, %yt : ({_t(8, 1)}, {_t(8, 1)}) -> {_t()}
  func.return %wn, %l : {_t(4, 1)}, {_t()}
}}
"""


def pipeline_program(axes: str, tp: bool) -> str:
    w1 = "{tessera.shard = #tessera.shard<[[], [tp]]>}" if tp else ""
    w2 = "{tessera.shard = #tessera.shard<[[tp], []]>}" if tp else ""
    return f"""
func.func @pipe(%x: {_t(4, 8)}, %w1: {_t(8, 16)} {w1}, %w2: {_t(16, 8)} {w2}) -> {_t(4, 8)} attributes {{tessera.mesh = #tessera.mesh<{axes}>}} {{
  %h = tgraph.matmul %x, %w1 {{tessera.stage = 0 : i64}} : ({_t(4, 8)}, {_t(8, 16)}) -> {_t(4, 16)}
  %a = tgraph.tanh %h {{tessera.stage = 0 : i64}} : ({_t(4, 16)}) -> {_t(4, 16)}
  %y = tgraph.matmul %a, %w2 {{tessera.stage = 1 : i64}} : ({_t(4, 16)}, {_t(16, 8)}) -> {_t(4, 8)}
  func.return %y : {_t(4, 8)}
}}
"""


TWO_D = f"""
func.func @mm2d(%x: {_t(8, 16)} {{tessera.shard = #tessera.shard<[[dp], []]>}}, %w: {_t(16, 32)} {{tessera.shard = #tessera.shard<[[], [tp]]>}}) -> {_t(8, 32)} attributes {{tessera.mesh = #tessera.mesh<dp = 2, tp = 2>}} {{
  %y = tgraph.matmul %x, %w : ({_t(8, 16)}, {_t(16, 32)}) -> {_t(8, 32)}
  %s = tgraph.softmax %y axis = -1 : ({_t(8, 32)}) -> {_t(8, 32)}
  func.return %s : {_t(8, 32)}
}}
func.func @w2d(%x: {_t(8, 16)}, %w: {_t(16, 32)} {{tessera.shard = #tessera.shard<[[dp], [tp]]>}}) -> {_t(8, 32)} attributes {{tessera.mesh = #tessera.mesh<dp = 2, tp = 2>}} {{
  %y = tgraph.matmul %x, %w : ({_t(8, 16)}, {_t(16, 32)}) -> {_t(8, 32)}
  %z = tgraph.sum %y axes = [0] keepdims : ({_t(8, 32)}) -> {_t(1, 32)}
  %m = tgraph.sub %y, %z : ({_t(8, 32)}, {_t(1, 32)}) -> {_t(8, 32)}
  func.return %m : {_t(8, 32)}
}}
"""


def _data(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


X, W, B = _data(1, 8, 16), _data(2, 16, 32), _data(3, 32)
XD, YD, WD = _data(4, 8, 4), _data(5, 8, 1), _data(6, 4, 1)
XP, W1, W2 = _data(7, 4, 8), _data(8, 8, 16), _data(9, 16, 8)
CASES = {
    "col": (tp_program, ["col"], [X, W]),
    "row": (tp_program, ["row"], [X, W, B]),
    "row_rs": (tp_program, ["row_rs"], [X, W]),
}


def _programs_rank(rank: int, world: int) -> dict:
    out: dict = _collectives_rank(rank, world) if world == 4 else {}
    tp = world
    m_tp = dist.mesh(devices=range(world), axes=("tp",))
    mod = parse(tp_program(tp))
    for name, args in (("col", [X, W]), ("row", [X, W, B]), ("row_rs", [X, W])):
        out[name] = run_spmd(mod, name, args, m_tp)
    w_local = dist.shard(W, dist.ShardSpec(partition=("col",), mesh_axes=("tp",)), m_tp, rank)
    out["guide"] = run_spmd(mod, "guide", [X, w_local], m_tp)
    if world == 4:
        m2 = dist.mesh(devices=range(4), axes=("dp", "tp"), shape=(2, 2))
        mod2 = parse(TWO_D)
        out["mm2d"] = run_spmd(mod2, "mm2d", [X, W], m2)
        out["w2d"] = run_spmd(mod2, "w2d", [X, W], m2)
        m3 = dist.mesh(devices=range(4), axes=("pp", "tp"), shape=(2, 2))
        out["pipe"] = run_spmd(parse(pipeline_program("pp = 2, tp = 2", True)), "pipe",
                               [XP, W1, W2], m3)
        out["step"] = run_spmd(parse(dp_program("dp = 2, tp = 2")), "step", [XD, YD, WD], m2)
    else:
        m_dp = dist.mesh(devices=range(2), axes=("dp",))
        out["step"] = run_spmd(parse(dp_program("dp = 2")), "step", [XD, YD, WD], m_dp)
        out["example"] = runpy.run_path(EXAMPLE, run_name="example")["main"]()
        m_pp = dist.mesh(devices=range(2), axes=("pp",))
        out["pipe"] = run_spmd(parse(pipeline_program("pp = 2", False)), "pipe",
                               [XP, W1, W2], m_pp)
        out.update(_stage_and_gpu_checks(rank))
    out.update(_overlap_checks(rank, world))
    if world == 4:
        out.update(_order_checks(rank))
    return out


# --------------------------------------------------------------------------- overlap, orders


OVERLAP = """
func.func @ov(%x: tensor<8x8xf64>, %w: tensor<8x8xf64>, %v: tensor<8x8xf64>) -> tensor<8x8xf64> attributes {tessera.mesh = #tessera.mesh<dp = WORLD>} {
  %g = tgraph.matmul %x, %w : (tensor<8x8xf64>, tensor<8x8xf64>) -> tensor<8x8xf64>
  %h = tgraph.tanh %v : (tensor<8x8xf64>) -> tensor<8x8xf64>
  %k = tgraph.matmul %h, %h : (tensor<8x8xf64>, tensor<8x8xf64>) -> tensor<8x8xf64>
  %r = tgraph.all_reduce %g op = "sum" axis = "dp" : (tensor<8x8xf64>) -> tensor<8x8xf64>
  %s = tgraph.add %r, %k : (tensor<8x8xf64>, tensor<8x8xf64>) -> tensor<8x8xf64>
  func.return %s : tensor<8x8xf64>
}
"""


def _bytes_of(results: list) -> list:
    return [None if r is None else np.asarray(r).tobytes() for r in results]


def _overlap_checks(rank: int, world: int) -> dict:
    """Each program compiled into segments, run with and without overlap."""
    m_tp = dist.mesh(devices=range(world), axes=("tp",))
    m_dp = dist.mesh(devices=range(world), axes=("dp",))
    progs = [
        (parse(tp_program(world)), "col", [X, W], m_tp),
        (parse(tp_program(world)), "row_rs", [X, W], m_tp),
        (parse(OVERLAP.replace("WORLD", str(world))), "ov",
         [_data(20 + rank, 8, 8), _data(30 + rank, 8, 8), _data(40 + rank, 8, 8)], m_dp),
    ]
    if world == 2:
        progs.append((parse(pipeline_program("pp = 2", False)), "pipe", [XP, W1, W2],
                      dist.mesh(devices=range(2), axes=("pp",))))
    out = {}
    for mod, name, args, mesh in progs:
        on = run_compiled(mod, name, args, mesh, overlap=True)
        off = run_compiled(mod, name, args, mesh, overlap=False)
        out[f"ov_{name}"] = (_bytes_of(on), _bytes_of(off), on)
    return out


def _order_inputs(rank: int) -> np.ndarray:
    return _inputs(rank, 64)


def _order_checks(rank: int) -> dict:
    """all_reduce / reduce_scatter over 4 ranks in every order, on one host and on a
    mesh that says 2 ranks per node (auto: hierarchical)."""
    flat = dist.mesh(devices=range(4), axes=("dp",))
    two_nodes = dist.Mesh(axes=["dp"], devices=range(4), ranks_per_node=2)
    x = _order_inputs(rank)
    out = {f"order_{o}": dist.all_reduce(x, "sum", "dp", mesh=flat, order=o)
           for o in dist.ORDERS}
    out["order_auto_flat"] = dist.all_reduce(x, "sum", "dp", mesh=flat)
    out["order_auto_nodes"] = dist.all_reduce(x, "sum", "dp", mesh=two_nodes)
    out["order_rs_tree"] = dist.reduce_scatter(x.reshape(8, 8), "sum", "dp", 0, mesh=flat,
                                               order="tree")
    return out


def _stage_and_gpu_checks(rank: int) -> dict:
    """A 2-stage pipeline written with ts.stage, and a cuda:* mesh on a CPU machine."""
    import torch

    out: dict = {}
    mesh = dist.Mesh(axes=["pp"], devices=range(2))

    @ts.jit(mesh=mesh)
    def pipe(x, w1, w2):
        with ts.stage(0):
            h = ts.tanh(ts.matmul(x, w1))
        with ts.stage(1):
            y = ts.matmul(h, w2)
        return y

    out["ts_stage"] = pipe(XP, W1, W2)
    if not torch.cuda.is_available():
        gpu_mesh = dist.Mesh(axes=["tp"], devices=["cuda:0", "cuda:1"])
        try:
            dist.all_reduce(np.ones(3), "sum", "tp", mesh=gpu_mesh)
        except dist.GPUUnavailableError as e:
            out["gpu_error"] = str(e)
    return out


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



def _reference(text: str, name: str, args: list[np.ndarray]) -> list[np.ndarray]:
    """The global program run in one process, without its mesh."""
    mod = parse(text)
    for op in mod.walk():
        op.attributes.pop("tessera.mesh", None)
    return run_function(mod, name, args)


@pytest.fixture(scope="module", params=[2, 4], ids=["2ranks", "4ranks"])
def ranks(request) -> tuple[int, list[dict]]:
    return request.param, spawn(_programs_rank, request.param, timeout=120)


def test_tp_gemm_column_and_row(ranks):
    world, outs = ranks
    text = tp_program(world)
    m = dist.mesh(devices=range(world), axes=("tp",))
    for name, args in (("col", [X, W]), ("row", [X, W, B])):
        (ref,) = _reference(text, name, args)
        for r, out in enumerate(outs):
            np.testing.assert_allclose(out[name][0], ref, rtol=1e-12, atol=1e-12,
                                       err_msg=f"{name} rank {r}")
    (ref,) = _reference(text, "row_rs", [X, W])
    got = dist.unshard([o["row_rs"][0] for o in outs], dist.ShardSpec(("row",), ("tp",)), m)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    for out in outs:
        np.testing.assert_allclose(out["guide"][0], X @ W, rtol=1e-12, atol=1e-12)


def test_dp_training_step(ranks):
    world, outs = ranks
    axes = "dp = 2, tp = 2" if world == 4 else "dp = 2"
    wn, loss = _reference(dp_program(axes), "step", [XD, YD, WD])
    # the graph is the analytic gradient step of the linear model (checked here)
    g = XD.T @ (XD @ WD - YD) * 2 / 8
    np.testing.assert_allclose(wn, WD - 0.1 * g, rtol=1e-12)
    for out in outs:
        np.testing.assert_allclose(out["step"][0], wn, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(out["step"][1], loss, rtol=1e-12, atol=1e-12)


def test_two_stage_pipeline(ranks):
    world, outs = ranks
    axes = "pp = 2, tp = 2" if world == 4 else "pp = 2"
    (ref,) = _reference(pipeline_program(axes, world == 4), "pipe", [XP, W1, W2])
    m = dist.mesh(devices=range(world), axes=("pp", "tp"), shape=(2, world // 2))
    for r, out in enumerate(outs):
        (y,) = out["pipe"]
        if m.coords(r)["pp"] == 1:
            np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)
        else:
            assert y is None


def test_2d_sharding(ranks):
    world, outs = ranks
    if world != 4:
        pytest.skip("2D meshes need 4 ranks")
    for name in ("mm2d", "w2d"):
        (ref,) = _reference(TWO_D, name, [X, W])
        for out in outs:
            np.testing.assert_allclose(out[name][0], ref, rtol=1e-12, atol=1e-12)


def test_deterministic_all_reduce_is_rank_ordered_sum_and_reproducible(ranks):
    ref = dist.rank_ordered_reduce([_inputs(r) for r in range(4)], "sum")
    world, outs = ranks
    if world != 4:
        pytest.skip("checked on 4 ranks")
    for r, out in enumerate(outs):
        for run in out["ar_runs"]:
            assert run.dtype == np.float32
            assert run.tobytes() == ref.tobytes(), f"rank {r}: not bitwise the rank-ordered sum"
        np.testing.assert_allclose(out["ar_nondet"], ref, rtol=1e-5, atol=1e-3)
    # order matters for this data: a different order gives different bits
    rev = dist.rank_ordered_reduce([_inputs(r) for r in reversed(range(4))], "sum")
    assert rev.tobytes() != ref.tobytes()


def test_all_reduce_ops_dtypes_and_subgroups(ranks):
    xs = [_inputs(r) for r in range(4)]
    world, outs = ranks
    if world != 4:
        pytest.skip("checked on 4 ranks")
    for r, out in enumerate(outs):
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


def test_gather_scatter_all_to_all_slice_send_recv(ranks):
    world, outs = ranks
    if world != 4:
        pytest.skip("checked on 4 ranks")
    for r, out in enumerate(outs):
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


def test_example_dist_tp_gemm_runs_on_two_ranks(ranks):
    world, outs = ranks
    if world != 2:
        pytest.skip("the example runs in the 2-rank spawn")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    w = rng.standard_normal((32, 64)).astype(np.float32)
    for out in outs:
        np.testing.assert_allclose(out["example"]["y"], np.maximum(x @ w, 0), rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(out["example"]["y_guide"], x @ w, rtol=1e-5, atol=1e-4)


def test_overlap_is_bitwise_the_ordered_run(ranks):
    world, outs = ranks
    for out in outs:
        names = [k for k in out if k.startswith("ov_")]
        assert len(names) == (4 if world == 2 else 3)
        for k in names:
            on, off, _ = out[k]
            assert on == off, f"{k}: results differ with overlap"
    # and the overlapped program computes its reference
    xs = [(_data(20 + r, 8, 8) @ _data(30 + r, 8, 8)) for r in range(world)]
    for r, out in enumerate(outs):
        h = np.tanh(_data(40 + r, 8, 8))
        want = dist.rank_ordered_reduce(xs) + h @ h
        np.testing.assert_allclose(out["ov_ov"][2][0], want, rtol=1e-12, atol=1e-12)


def test_every_reduction_order_gives_its_documented_result(ranks):
    world, outs = ranks
    if world != 4:
        pytest.skip("orders differ from 4 ranks on")
    xs = [_order_inputs(r) for r in range(4)]
    want = {
        "ring": ((xs[0] + xs[1]) + xs[2]) + xs[3],
        "tree": (xs[0] + xs[1]) + (xs[2] + xs[3]),
        "hierarchical": xs[0] + xs[1] + xs[2] + xs[3],  # one host: one node, a ring
    }
    nodes = dist.ReductionOrder("hierarchical", ((0, 1), (2, 3)))
    assert len({w.tobytes() for w in want.values()} - {want["ring"].tobytes()}) == 1
    for out in outs:
        for o in dist.ORDERS:
            assert out[f"order_{o}"].tobytes() == want[o].tobytes(), o
            assert out[f"order_{o}"].tobytes() == dist.ordered_reduce(
                xs, "sum", o if o != "hierarchical" else dist.ReductionOrder("ring")).tobytes()
        assert out["order_auto_flat"].tobytes() == want["ring"].tobytes()  # CPU: ring
        auto = (xs[0] + xs[1]) + (xs[2] + xs[3])  # 2 ranks per node: nodes first
        assert out["order_auto_nodes"].tobytes() == auto.tobytes()
        assert out["order_auto_nodes"].tobytes() == dist.ordered_reduce(xs, "sum", nodes).tobytes()
    tree = want["tree"].reshape(8, 8)
    for r, out in enumerate(outs):
        assert out["order_rs_tree"].tobytes() == tree[2 * r:2 * r + 2].tobytes()


def test_ts_stage_pipeline_and_gpu_error_on_two_ranks(ranks):
    world, outs = ranks
    if world != 2:
        pytest.skip("checked in the 2-rank spawn")
    assert outs[0]["ts_stage"] is None  # stage 0 hands its activations on
    np.testing.assert_allclose(outs[1]["ts_stage"], np.tanh(XP @ W1) @ W2, rtol=1e-12)
    for out in outs:
        if "gpu_error" in out:
            assert "needs CUDA devices" in out["gpu_error"]
