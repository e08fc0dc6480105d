"""The sm90 matmul path on CPU: eligibility, the heuristic, the tuning cache, and PTX that
contains wgmma / TMA and assembles for sm_90a."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.ir import target as tt
from tessera.passes import matmul_config as mc
from tessera.passes.emit_ptx import emit_ptx
from tessera.passes.lower_matmul_sm90 import Sm90Gemm, build_kernel
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
    assert mc.heuristic(2048, 2048, 2048) == mc.Sm90Config(bn=128, stages=5, consumers=2)
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
    from tessera.passes.lower_matmul_sm90 import eligible

    @ts.jit
    def mm(a, b):
        return ts.matmul(a, b)

    def op_for(a, b):
        graph = mm.specialize(a, b).ir("graph")
        from tessera.ir import graph as g

        return next(o for o in graph.walk() if isinstance(o, g.MatmulOp))

    bf = ml_dtypes.bfloat16
    assert eligible(op_for(np.zeros((8, 16), bf), np.zeros((16, 8), bf))) is None
    assert "multiples of 8" in eligible(op_for(np.zeros((8, 12), bf), np.zeros((12, 8), bf)))
    assert "bf16" in eligible(op_for(np.zeros((8, 16), np.float32), np.zeros((16, 8), np.float32)))


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
