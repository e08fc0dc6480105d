"""The sm90 matmul path on CPU: eligibility, the heuristic, the tuning cache, and PTX that
contains wgmma / TMA and assembles for sm_90a."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import BFloat16Type

import tessera as ts
from tessera.ir import target as tt
from tessera.ir import tile as tl
from tessera.passes import matmul_config as mc
from tessera.passes.emit_ptx import emit_ptx
from tessera.passes.sm90 import lower_matmul_sm90 as lm
from tessera.passes.sm90.lower_matmul_sm90 import Sm90Gemm, build_kernel
from tessera.runtime import ptxas
from tessera.tuning import sm90

needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")


@needs_ptxas
@pytest.mark.parametrize(
    ("m", "n", "k", "cfg"),
    [
        (2048, 2048, 2048, None),
        (200, 136, 72, mc.Sm90Config(bn=128, stages=3, consumers=2)),
        (40, 64, 16, None),
    ],
)
def test_kernel_has_wgmma_and_tma_and_assembles(m: int, n: int, k: int, cfg: mc.Sm90Config | None) -> None:
    gemm = Sm90Gemm(m, n, k, "bf16", "bf16", cfg or mc.heuristic(m, n, k))
    ptx = emit_ptx(build_kernel("gemm", gemm))
    assert f"wgmma.mma_async.sync.aligned.m64n{gemm.cfg.bn}k16.f32.bf16.bf16" in ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert "mbarrier.try_wait.parity" in ptx and "setmaxnreg.inc" in ptx
    assert ".param .align 64 .b8 gemm_param_1[128]" in ptx
    ptxas.check(ptx)


@needs_ptxas
def test_jit_matmul_uses_wgmma_when_selected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")

    @ts.jit
    def mm(a, b):
        return ts.matmul(a, b)

    a = np.zeros((96, 40), ml_dtypes.bfloat16)
    b = np.zeros((40, 72), ml_dtypes.bfloat16)
    spec = mm.specialize(a, b)
    assert any(isinstance(op, tt.LaunchExOp) for op in spec.ir("target").walk())
    ptx = spec.ir("ptx")
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
    ptxas.check(ptx)


def test_jit_matmul_generic_when_not_selected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "0")

    @ts.jit
    def mm(a, b):
        return ts.matmul(a, b)

    a = np.zeros((32, 32), ml_dtypes.bfloat16)
    ptx = mm.specialize(a, a).ir("ptx")
    assert "mma.sync" in ptx and "wgmma" not in ptx


def test_heuristic() -> None:
    assert mc.heuristic(8192, 8192, 8192) == mc.Sm90Config(bn=256, stages=3, consumers=2)
    # one wave of 128 x 256 tiles beats two of 128 x 128
    assert mc.heuristic(2048, 2048, 2048) == mc.Sm90Config(bn=256, stages=3, consumers=2)
    assert mc.heuristic(1024, 1024, 1024) == mc.Sm90Config(bn=128, stages=5, consumers=2)
    # ragged, with an even number of tile rows: CTA pairs multicasting B
    assert mc.heuristic(3000, 5000, 2000).cluster == 2
    assert mc.heuristic(6000, 6000, 1000).cluster == 1  # 47 tile rows do not pair up
    assert mc.heuristic(16, 8192, 8192) == mc.Sm90Config(bn=128, stages=5, consumers=1)
    assert mc.heuristic(40, 64, 16).consumers == 1
    for c in mc.search_space(4096, 4096, 4096):
        assert c.valid() and c.stages >= 3


def test_tile_shape_hint() -> None:
    assert mc.Sm90Config.from_tile_shape((128, 128, 64)) == mc.Sm90Config(bn=128, stages=5, consumers=2)
    assert mc.Sm90Config.from_tile_shape((64, 64, 32)) is None


def test_tuning_cache_round_trip(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    key = sm90.cache_key("H100", 256, 256, 256, "bf16", "bf16")
    assert sm90.cached(key) is None
    cfg = mc.Sm90Config(bn=128, stages=4, consumers=2)
    assert sm90.store(key, cfg, 1e-5)
    assert (tmp_path / "matmul_sm90.json").exists()
    assert sm90.cached(key) == cfg
    assert sm90.tiles_for("H100") == (("256x256x256:bf16->bf16", (128, 4, 2, 8, 1)),)
    assert sm90.tiles_for("A100") == ()
    (tmp_path / "matmul_sm90.json").write_text("{not json")
    assert sm90.cached(key) is None and sm90.tiles_for("H100") == ()


def test_eligibility() -> None:
    from tessera.passes.sm90.lower_matmul_sm90 import eligible

    @ts.jit
    def mm(a, b):
        return ts.matmul(a, b)

    def op_for(a, b):
        graph = mm.specialize(a, b).ir("graph")
        from tessera.ir import graph as g

        return next(o for o in graph.walk() if isinstance(o, g.MatmulOp))

    bf = ml_dtypes.bfloat16
    assert eligible(op_for(np.zeros((8, 16), bf), np.zeros((16, 8), bf))) is None
    # rows of no 16-byte multiple: padded copies of the operands, st.global stores of C
    assert eligible(op_for(np.zeros((8, 12), bf), np.zeros((12, 8), bf))) is None
    assert lm.staging(op_for(np.zeros((8, 12), bf), np.zeros((12, 8), bf))) == ["pad A"]
    assert lm.staging(op_for(np.zeros((8, 16), bf), np.zeros((16, 7), bf))) == [
        "pad B", "st.global C"]
    f = np.float32
    # f32 (tf32 kernels, any K: the operands are copied K-major with K padded; any N)
    assert eligible(op_for(np.zeros((8, 13), f), np.zeros((13, 8), f))) is None
    assert eligible(op_for(np.zeros((8, 16), f), np.zeros((16, 7), f))) is None


@needs_ptxas
def test_cluster_kernel_multicasts_and_assembles() -> None:
    """A 2-CTA cluster config: B boxes multicast to both CTAs, slots freed in both."""
    gemm = Sm90Gemm(1024, 512, 256, "bf16", "bf16", mc.Sm90Config(bn=256, stages=3, cluster=2))
    assert gemm.cluster == 2 and gemm.grid()[0] % 2 == 0
    ptx = emit_ptx(build_kernel("gemm", gemm))
    assert ".reqnctapercluster 2, 1, 1" in ptx
    assert ".multicast::cluster" in ptx and "mapa.shared::cluster.u32" in ptx
    assert "mbarrier.arrive.shared::cluster.b64" in ptx  # CTA-scope release: no MEMBAR.GPU
    assert "barrier.cluster.wait.acquire" in ptx
    ptxas.check(ptx)


def test_cluster_needs_pairs_of_tile_rows() -> None:
    """With an odd number of tile rows the kernel runs unclustered (same result)."""
    cfg = mc.Sm90Config(bn=128, stages=5, cluster=2)
    assert Sm90Gemm(384, 256, 64, "bf16", "bf16", cfg).cluster == 1  # 3 tile rows
    assert Sm90Gemm(512, 256, 64, "bf16", "bf16", cfg).cluster == 2
    assert not mc.Sm90Config(bn=64, cluster=2).valid()  # one B box cannot be split


def test_epilogue_kind_and_invalid_config() -> None:
    """16-bit results use the TMA-store epilogue (C as a tensor map), f32 the direct one;
    a configuration that does not fit in shared memory is refused by name."""
    cfg = mc.heuristic(512, 512, 512)
    assert Sm90Gemm(512, 512, 512, "bf16", "bf16", cfg).boxes()[:2] == [64, 64]
    assert Sm90Gemm(512, 512, 512, "bf16", "f32", cfg).boxes()[:2] == [0, 0]
    with pytest.raises(ValueError, match="not a valid sm90 configuration"):
        Sm90Gemm(512, 512, 512, "bf16", "bf16", mc.Sm90Config(bn=256, stages=4))


@needs_ptxas
@pytest.mark.parametrize(("a_t", "b_t"), [(False, True), (True, False), (True, True)])
def test_transposed_layouts_assemble(a_t: bool, b_t: bool) -> None:
    """A stored ``K x M`` is read M-major (``trans_a = 1``, one 64 x 64 box per consumer);
    B stored ``N x K`` is read K-major (``trans_b = 0``); no copy of either."""
    m, n, k = 200, 136, 72
    gemm = Sm90Gemm(m, n, k, "bf16", "bf16", mc.heuristic(m, n, k), a_t=a_t, b_t=b_t)
    ptx = emit_ptx(build_kernel("gemm", gemm))
    wgmmas = [ln for ln in ptx.splitlines() if "wgmma.mma_async" in ln]
    assert wgmmas and all(ln.rstrip().endswith(f"{int(a_t)}, {int(not b_t)};") for ln in wgmmas)
    a_box = [64, 64] if a_t else [64, gemm.bm]
    assert gemm.boxes()[2:4] == a_box
    ptxas.check(ptx)


@pytest.mark.parametrize(
    ("expr", "a_shape", "b_shape", "a_t", "b_t"),
    [
        ("a @ b.T", (96, 40), (72, 40), False, True),
        ("ts.matmul(a, b, transpose_b=True)", (96, 40), (72, 40), False, True),
        ("ts.transpose(a) @ b", (40, 96), (40, 72), True, False),
        ("a.T @ b.T", (40, 96), (72, 40), True, True),
        ("a @ b.T", (2, 48, 40), (72, 40), False, True),
    ],
)
def test_jit_transposes_fold_into_the_sm90_kernel(
    monkeypatch: pytest.MonkeyPatch, expr: str, a_shape, b_shape, a_t: bool, b_t: bool
) -> None:
    """Every spelling of a transpose reaches the wgmma kernel as an operand layout: the
    target IR has one launch and no transpose kernel."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    fn = ts.jit(eval(f"lambda a, b: {expr}", {"ts": ts}))
    bf = ml_dtypes.bfloat16
    spec = fn.specialize(np.zeros(a_shape, bf), np.zeros(b_shape, bf))
    target = spec.ir("target")
    launches = [op for op in target.walk() if isinstance(op, tt.LaunchExOp)]
    assert len(launches) == 1
    assert not [op for op in target.walk() if isinstance(op, tt.LaunchOp)]
    wg = [op for op in target.walk() if isinstance(op, tt.WgmmaOp)]
    assert wg and {(op.trans_a.value.data, op.trans_b.value.data) for op in wg} == {
        (int(a_t), int(not b_t))
    }


def test_eligibility_of_layouts() -> None:
    from tessera.ir import graph as g
    from tessera.passes.sm90.lower_matmul_sm90 import eligible

    bf = ml_dtypes.bfloat16

    def op_for(expr, a, b):
        fn = ts.jit(eval(f"lambda a, b: {expr}", {"ts": ts}))
        graph = fn.specialize(a, b).ir("graph")
        return next(o for o in graph.walk() if isinstance(o, g.MatmulOp))

    assert eligible(op_for("a @ b.T", np.zeros((8, 16), bf), np.zeros((24, 16), bf))) is None
    # A stored K x M with M % 8 != 0 is read from a copy with its rows padded to 16 bytes
    op = op_for("a.T @ b", np.zeros((16, 12), bf), np.zeros((16, 8), bf))
    assert eligible(op) is None and lm.staging(op) == ["pad A"]
    # 3-D A times 2-D B folds the batch into M; a batched B does not (yet) take this kernel
    assert eligible(op_for("a @ b", np.zeros((2, 8, 16), bf), np.zeros((16, 8), bf))) is None
    assert "batched" in eligible(op_for("a @ b", np.zeros((2, 8, 16), bf), np.zeros((2, 16, 8), bf)))


@needs_ptxas
@pytest.mark.parametrize("act", ["relu", "gelu", "silu", None])
@pytest.mark.parametrize(
    ("bias_shape", "dtype", "fused"),
    [((72,), "bf16", True), ((96, 72), "bf16", True), ((72,), "f32cast", True),
     ((72,), "f32cast16", True), ((96, 72), "f32cast16", True), ((96, 1), "bf16", False)],
)
def test_epilogue_matmul_takes_the_sm90_kernel(
    monkeypatch: pytest.MonkeyPatch, act, bias_shape, dtype, fused
) -> None:
    """``act(x @ w.T + bias)`` (nn.Linear's form, fused into ``tgraph.matmul_epilogue``):
    a row-vector or full bias and the activation run in the wgmma kernel's epilogue; a
    column bias splits into the wgmma product and one elementwise kernel. ``f32cast16``:
    a bf16 bias of an f32 product (torch's ``addmm`` rule, one rounding at the end) is
    read as bf16 and widened in the epilogue, with no kernel to widen it first."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    bf = ml_dtypes.bfloat16

    def linear(x, w, bias):
        if dtype == "f32cast":  # f32 product, bias and activation, then a cast to bf16
            y = ts.matmul(x, w, transpose_b=True, out_dtype=ts.f32) + bias
        elif dtype == "f32cast16":
            y = ts.matmul(x, w, transpose_b=True, out_dtype=ts.f32) + ts.cast(bias, ts.f32)
        else:
            y = x @ w.T + bias
        y = getattr(ts, act)(y) if act else y
        return ts.cast(y, ts.bf16) if dtype.startswith("f32cast") else y

    fn = ts.jit(linear)
    bias = np.zeros(bias_shape, np.float32 if dtype == "f32cast" else bf)
    spec = fn.specialize(np.zeros((96, 40), bf), np.zeros((72, 40), bf), bias)
    from tessera.ir import graph as g

    assert [o for o in spec.ir("graph").walk() if isinstance(o, g.MatmulEpilogueOp)]
    target = spec.ir("target")
    assert len([o for o in target.walk() if isinstance(o, tt.LaunchExOp)]) == 1
    assert len([o for o in target.walk() if isinstance(o, tt.LaunchOp)]) == (0 if fused else 1)
    ptx = spec.ir("ptx")
    assert "wgmma.mma_async" in ptx
    if dtype == "f32cast16":
        (epi,) = [o for o in spec.ir("graph").walk() if isinstance(o, g.MatmulEpilogueOp)]
        assert isinstance(g.elem_of(epi.bias), BFloat16Type) and "cvt.f32.bf16" in ptx
    ptxas.check(ptx)


@needs_ptxas
@pytest.mark.parametrize(("bias", "act", "n", "dtype"), [
    (True, None, 72, "bf16"), (False, "gelu", 72, "bf16"), (True, "relu", 71, "bf16"),
    (True, None, 72, "f32"),
])
def test_residual_epilogue_takes_the_sm90_kernel(
    monkeypatch: pytest.MonkeyPatch, bias: bool, act, n: int, dtype: str
) -> None:
    """``r + act(x @ w.T + b)`` on ``[B, S, D]`` activations (a linear layer, then the
    skip connection): the bias, activation and residual run in the wgmma kernel's
    epilogue, which takes the residual as a fifth parameter."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    et = ml_dtypes.bfloat16 if dtype == "bf16" else np.float32

    def linear(x, w, b, r):
        y = ts.matmul(x, w, transpose_b=True)
        y = y + b if bias else y
        y = getattr(ts, act)(y) if act else y
        return r + ts.reshape(y, (2, 48, n))

    fn = ts.jit(linear)
    spec = fn.specialize(np.zeros((96, 40), et), np.zeros((n, 40), et), np.zeros((n,), et),
                         np.zeros((2, 48, n), et))
    from tessera.ir import graph as g

    (epi,) = [o for o in spec.ir("graph").walk() if isinstance(o, g.MatmulEpilogueOp)]
    assert epi.residual is not None and (epi.bias is not None) == bias
    target = spec.ir("target")
    assert len([o for o in target.walk() if isinstance(o, tt.LaunchExOp)]) == 1
    assert "matmul_epilogue" not in str(target)  # no split epilogue kernel
    if dtype == "bf16":  # (f32 runs copy kernels for its TF32 operand splits)
        assert not [o for o in target.walk() if isinstance(o, tt.LaunchOp)]
    ptx = spec.ir("ptx")
    start = ptx.index(".entry linear_matmul")
    entry = ptx[start:ptx.index(")", start)]
    assert entry.count(".param") == 4 + bias  # C, A, B, then the bias and residual pointers
    assert entry.rstrip().endswith("_param_" + str(3 + bias)) and ".param .u64" in entry
    ptxas.check(ptx)


@needs_ptxas
@pytest.mark.parametrize(("a_t", "b_t", "a_b", "b_b"), [
    (False, False, True, True), (True, True, True, True), (False, True, False, True),
    (True, False, True, False),
])
def test_batched_kernel_assembles(a_t: bool, b_t: bool, a_b: bool, b_b: bool) -> None:
    gemm = Sm90Gemm(128, 136, 192, "bf16", "bf16", mc.heuristic(128, 136, 192), a_t=a_t,
                    b_t=b_t, batch=6, a_batched=a_b, b_batched=b_b)
    assert gemm.tiles == 6 * 1 * 2
    ptxas.check(emit_ptx(build_kernel("gemm", gemm)))


def test_batched_needs_whole_tiles_per_batch() -> None:
    with pytest.raises(ValueError, match="multiple of BM"):
        Sm90Gemm(100, 64, 64, "bf16", "bf16", mc.heuristic(100, 64, 64), batch=2)


@pytest.mark.parametrize(
    ("expr", "a_shape", "b_shape", "batch"),
    [
        ("a @ b", (4, 128, 64), (4, 64, 72), 4),
        ("a @ b.T", (2, 3, 64, 64), (2, 3, 72, 64), 6),
        ("a @ b", (128, 64), (5, 64, 72), 5),
        ("a.T @ b", (3, 64, 128), (64, 72), 3),
    ],
)
def test_jit_batched_matmul_takes_the_sm90_kernel(
    monkeypatch: pytest.MonkeyPatch, expr: str, a_shape, b_shape, batch: int
) -> None:
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    fn = ts.jit(eval(f"lambda a, b: {expr}", {"ts": ts}))
    bf = ml_dtypes.bfloat16
    target = fn.specialize(np.zeros(a_shape, bf), np.zeros(b_shape, bf)).ir("target")
    (launch,) = [op for op in target.walk() if isinstance(op, tt.LaunchExOp)]
    assert not [op for op in target.walk() if isinstance(op, tt.LaunchOp)]
    assert launch.grid_value()[0] <= batch * 2


@needs_ptxas
@pytest.mark.parametrize(("a", "b", "out"), [("e4m3", None, "f32"), ("e5m2", None, "bf16"),
                                             ("e4m3", "e5m2", "f32")])
def test_fp8_kernel_assembles(a: str, b, out: str) -> None:
    """fp8 operands (both K-major): ``k32`` wgmmas over 128-element K stages."""
    m, n, k = 200, 136, 272
    gemm = Sm90Gemm(m, n, k, a, out, mc.heuristic(m, n, k), b_t=True, b_type=b)
    assert gemm.box_k == 128 and gemm.boxes()[2:6] == [128, gemm.bm, 128, 64]
    ptx = emit_ptx(build_kernel("gemm", gemm))
    assert f"m64n{gemm.cfg.bn}k32.f32.{a}.{b or a}" in ptx
    ptxas.check(ptx)


def test_fp8_needs_k_major_operands() -> None:
    with pytest.raises(ValueError, match="K-major"):
        Sm90Gemm(128, 128, 128, "e4m3", "f32", mc.heuristic(128, 128, 128))


@needs_ptxas
def test_jit_fp8_matmul_takes_the_sm90_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    fn = ts.jit(lambda a, b: ts.matmul(a, b, transpose_b=True, out_dtype=ts.f32))
    e4 = ml_dtypes.float8_e4m3fn
    spec = fn.specialize(np.zeros((96, 64), e4), np.zeros((72, 64), e4))
    target = spec.ir("target")
    assert [op for op in target.walk() if isinstance(op, tt.LaunchExOp)]
    assert "k32.f32.e4m3.e4m3" in spec.ir("ptx")
    # B row-major (K x N) is not K-major: it is copied K-major (one transpose kernel) first
    spec = ts.jit(lambda a, b: ts.matmul(a, b, out_dtype=ts.f32)).specialize(
        np.zeros((96, 64), e4), np.zeros((64, 72), e4))
    target = spec.ir("target")
    assert [op for op in target.walk() if isinstance(op, tt.LaunchExOp)]
    assert [op.callee.string_value() for op in target.walk() if isinstance(op, tt.LaunchOp)] == [
        "lambda_transpose_0"]
    ptxas.check(spec.ir("ptx"))


def test_gradients_compile_with_the_primal_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """ts.grad's program compiles under the same options as its function: its GEMMs take
    the sm90 kernel when the function's do."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    bf = ml_dtypes.bfloat16
    step = ts.grad(lambda x, w, dy: ts.sum(x @ w * dy), argnums=1)
    spec = step.specialize(np.zeros((64, 32), bf), np.zeros((32, 64), bf), np.zeros((64, 64), bf))
    assert spec.options.sm90_kernels
    assert [op for op in spec.ir("target").walk() if isinstance(op, tt.LaunchExOp)]


# --------------------------------------------------------------------------- f32: tf32 kernels


@needs_ptxas
@pytest.mark.parametrize(("in_t", "out_t"), [("tf32", "f32"), ("3xtf32", "f32"),
                                             ("3xtf32", "bf16")])
def test_tf32_kernels_assemble(in_t: str, out_t: str) -> None:
    """tf32 wgmmas (k8, 32 of K per stage); 3xTF32 loads hi and lo boxes of each operand,
    issues three products per k8 step and promotes each stage into f32 totals."""
    m, n, k = 1000, 264, 200
    cfg = lm.tf32_config(mc.heuristic(m, n, k), in_t == "3xtf32", out_t != "f32")
    gemm = Sm90Gemm(m, n, k, in_t, out_t, cfg, b_t=True)
    assert gemm.box_k == 32 and gemm.mma_k == 8
    assert gemm.boxes()[2:6] == [32, gemm.bm, 32, 64]
    assert gemm.promotes == (in_t == "3xtf32") and gemm.cfg.bn <= (128 if gemm.promotes else 256)
    ptx = emit_ptx(build_kernel("gemm", gemm))
    mma = f"wgmma.mma_async.sync.aligned.m64n{gemm.cfg.bn}k8.f32.tf32.tf32"
    assert ptx.count(mma) == (12 if in_t == "3xtf32" else 4)
    loads = ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global")
    assert loads == (2 if in_t == "3xtf32" else 1) * (1 + gemm.cfg.bn // 64 // gemm.cluster)
    ptxas.check(ptx)


def test_tf32_needs_k_major_operands() -> None:
    with pytest.raises(ValueError, match="K-major"):
        Sm90Gemm(128, 128, 128, "tf32", "f32", mc.heuristic(128, 128, 128))
    with pytest.raises(ValueError, match="at most 128 wide"):
        Sm90Gemm(128, 256, 128, "3xtf32", "f32", mc.Sm90Config(bn=256, stages=2), b_t=True)


def _launches(spec) -> tuple[list[str], list[str]]:
    target = spec.ir("target")
    return ([op.callee.string_value() for op in target.walk() if isinstance(op, tt.LaunchOp)],
            [op.callee.string_value() for op in target.walk() if isinstance(op, tt.LaunchExOp)])


@needs_ptxas
@pytest.mark.parametrize("expr", ["a @ b", "a @ b.T", "a.T @ b", "a.T @ b.T"])
def test_jit_f32_takes_3xtf32_unless_tf32_allowed(monkeypatch: pytest.MonkeyPatch, expr: str) -> None:
    """Default f32: hi/lo copies of both operands and the 3xTF32 kernel. With
    ``allow_tf32`` (option or TESSERA_ALLOW_TF32): one product, and only MN-major
    operands are copied."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    f = np.float32
    a = np.zeros((72, 96) if expr.startswith("a.T") else (96, 72), f)
    b = np.zeros((136, 72) if expr.endswith("b.T") else (72, 136), f)
    spec = ts.jit(eval(f"lambda a, b: {expr}")).specialize(a, b)
    assert _launches(spec) == (["lambda_split_tf32_0", "lambda_split_tf32_1"], ["lambda_matmul_0"])
    ptx = spec.ir("ptx")
    assert ptx.count("k8.f32.tf32.tf32") == 12
    ptxas.check(ptx)
    monkeypatch.setenv("TESSERA_ALLOW_TF32", "1")
    spec = ts.jit(eval(f"lambda a, b: {expr}")).specialize(a, b)
    assert spec.options.allow_tf32
    copies = int(expr.startswith("a.T")) + int(not expr.endswith("b.T"))
    assert _launches(spec) == ([f"lambda_split_tf32_{i}" for i in range(copies)],
                               ["lambda_matmul_0"])
    ptx = spec.ir("ptx")
    assert ptx.count("k8.f32.tf32.tf32") == 4
    ptxas.check(ptx)


def test_jit_f32_batched_and_epilogue_take_the_tf32_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    f = np.float32
    spec = ts.jit(lambda a, b, c: ts.gelu(a @ b.mT + c)).specialize(
        np.zeros((2, 3, 128, 40), f), np.zeros((2, 3, 72, 40), f), np.zeros(72, f))
    assert _launches(spec)[1] == ["lambda_matmul_0"]
    assert "k8.f32.tf32.tf32" in spec.ir("ptx")
    # batched with M not a multiple of 64: the generic kernel
    spec = ts.jit(lambda a, b: a @ b).specialize(np.zeros((2, 40, 8), f), np.zeros((2, 8, 16), f))
    assert _launches(spec)[1] == []


@pytest.mark.parametrize(("expr", "allow_tf32"), [("a @ b", False), ("a @ b", True),
                                                ("a @ b.T", False)])
def test_split_tf32_kernels_on_the_interpreter(monkeypatch: pytest.MonkeyPatch, expr: str,
                                                allow_tf32: bool) -> None:
    """The pre-pass kernels, run by the Tile IR interpreter: ``[parts, rows, Kp]`` K-major
    copies with hi = x rounded to TF32 (nearest, ties away from zero), lo = tf32(x - hi),
    K padded to a multiple of 4 with zeros, a ``K x N`` B transposed."""
    from tessera.runtime.tile_interpreter import run_kernel

    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_ALLOW_TF32", "1" if allow_tf32 else "0")
    rng = np.random.default_rng(7)
    m, n, k = 40, 38, 10  # K pads to 12
    a = rng.standard_normal((m, k)).astype(np.float32)
    a[0, :5] = [1 + 2**-11, -(1 + 2**-11), 1 + 2**-12, np.inf, 3.0]  # ties away, below, inf
    b = rng.standard_normal((n, k) if expr.endswith("b.T") else (k, n)).astype(np.float32)
    spec = ts.jit(eval(f"lambda a, b: {expr}")).specialize(a, b)
    module = spec.ir("tile")
    launches = [op for op in module.walk() if isinstance(op, tl.LaunchOp)]
    parts = 1 if allow_tf32 else 2
    # allow_tf32 reads A (K-major) as is, but K = 10 is no 16-byte row: both are copied
    assert len(launches) == 2
    # the K-major views the kernels read: A [M, K], B [N, K]
    for launch, src, x in zip(launches, (a, b), (a, b if expr.endswith("b.T") else b.T)):
        dst = np.full((parts, x.shape[0], 12), np.nan, np.float32)
        grid = [int(v) for v in launch.grid.get_values()]
        run_kernel(module, launch.callee.string_value(), [dst, src], grid)
        hi, lo = _tf32_split_reference(x)
        np.testing.assert_array_equal(dst[0, :, :k], hi)
        np.testing.assert_array_equal(dst[:, :, k:], 0)
        if parts == 2:
            np.testing.assert_array_equal(dst[1, :, :k], lo)
            finite = np.isfinite(x)
            # hi + lo keeps ~22 bits of x
            err = np.abs(hi + lo - x)[finite] / np.abs(x)[finite]
            assert err.max() < 2.0**-21
    assert _tf32_split_reference(np.float32([1 + 2**-11]))[0][0] == 1 + 2**-10
    assert _tf32_split_reference(np.float32([1 + 2**-12]))[0][0] == 1


def _tf32_split_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """hi = x rounded to TF32 (nearest, ties away from zero), lo = tf32(x - hi)."""
    x = np.ascontiguousarray(x, np.float32)
    hi = ((x.view(np.int32) + 0x1000) & np.int32(-0x2000)).view(np.float32)
    with np.errstate(invalid="ignore"):
        r = np.ascontiguousarray(x - hi)
    lo = ((r.view(np.int32) + 0x1000) & np.int32(-0x2000)).view(np.float32)
    return hi, lo
