"""The sm90 attention path on CPU: eligibility, the kernel's shared-memory budget, PTX that
contains TMA and both wgmma forms and assembles for sm_90a, and its selection by ``ts.jit``."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

import tessera as ts
from tessera.ir import target as tt
from tessera.ir.target.facts import MAX_SHARED_BYTES
from tessera.passes.emit_ptx import emit_ptx
from tessera.passes.sm90.lower_attention_sm90 import Sm90Attention, build_kernel
from tessera.runtime import ptxas

needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")

SMEM_LIMIT = MAX_SHARED_BYTES


@pytest.mark.parametrize("d", [64, 128])
def test_shared_memory_fits(d: int) -> None:
    spec = Sm90Attention(8, 4096, 4096, d, "bf16", 0.1, False)
    assert spec.smem_bytes <= SMEM_LIMIT
    assert spec.bars_offset % 8 == 0 and spec.k_offset(1) % 1024 == 0


def test_grid_is_persistent() -> None:
    # ViT-B/16 at batch 8: 96 heads of 2 query tiles over 132 SMs
    spec = Sm90Attention(96, 197, 197, 64, "bf16", 0.125, False, sms=132)
    assert spec.tiles == spec.units == 192 and spec.grid() == (132, 1, 1)
    assert Sm90Attention(3, 100, 100, 64, "bf16", 0.125, True, sms=132).grid() == (3, 1, 1)
    # causal: pairs of a heavy and a light query tile (5 tiles: 3 units per head)
    causal = Sm90Attention(40, 600, 600, 64, "bf16", 0.1, True, sms=132)
    assert causal.units == 120 and causal.grid() == (120, 1, 1)


@needs_ptxas
@pytest.mark.parametrize("pingpong", [False, True])
def test_turns_are_named_barriers(pingpong: bool) -> None:
    spec = Sm90Attention(6, 300, 300, 64, "bf16", 0.125, True, pingpong=pingpong)
    ptx = emit_ptx(ModuleOp([build_kernel("attn", spec)]))
    # consumer 1 lets consumer 0 in first; each takes and passes turns at 1 and 2
    assert ("bar.arrive 1, 256;" in ptx) == pingpong
    assert ("bar.sync 2, 256;" in ptx) == pingpong
    ptxas.check(ptx)


@needs_ptxas
@pytest.mark.parametrize(
    ("sq", "sk", "d", "et", "causal"),
    [(2048, 2048, 128, "bf16", False), (200, 130, 128, "f16", True), (80, 1037, 64, "bf16", True)],
)
def test_kernel_assembles(sq: int, sk: int, d: int, et: str, causal: bool) -> None:
    spec = Sm90Attention(6, sq, sk, d, et, 0.125, causal)
    func = build_kernel("attn", spec)
    func.verify()
    ptx = emit_ptx(ModuleOp([func]))
    assert f"wgmma.mma_async.sync.aligned.m64n128k16.f32.{et}.{et}" in ptx
    assert f"wgmma.mma_async.sync.aligned.m64n{d}k16.f32.{et}.{et}" in ptx
    assert "cp.async.bulk.tensor.2d" in ptx and "setmaxnreg.inc.sync.aligned.u32 240" in ptx
    ptxas.check(ptx)


def _attention(causal: bool):
    @ts.jit
    def attn(q, k, v):
        return ts.flash_attention(q, k, v, causal=causal)

    return attn


def _qkv(sq: int, sk: int, d: int, dt=ml_dtypes.bfloat16):
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal((1, 2, sq, d)).astype(dt),
        rng.standard_normal((1, 2, sk, d)).astype(dt),
        rng.standard_normal((1, 2, sk, d)).astype(dt),
    )


@needs_ptxas
def test_jit_attention_uses_wgmma_when_selected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    spec = _attention(True).specialize(*_qkv(300, 257, 128))
    launches = [op for op in spec.ir("target").walk() if isinstance(op, tt.LaunchExOp)]
    # causal: 3 query tiles per head make 2 work units (a pair and the middle one)
    assert len(launches) == 1 and launches[0].grid_value() == (2 * 2, 1, 1)
    ptx = spec.ir("ptx")
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
    ptxas.check(ptx)


def test_jit_attention_generic_when_not_selected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "0")
    # head size 64 is eligible for the sm90 kernel as 128 is; its generic kernel compiles
    # faster (test_attention_bwd.py's bench shape assembles the generic one at 128)
    spec = _attention(False).specialize(*_qkv(100, 100, 64))
    assert not any(isinstance(op, tt.LaunchExOp) for op in spec.ir("target").walk())
    assert "mma.sync" in spec.ir("ptx") and "wgmma" not in spec.ir("ptx")


@pytest.mark.parametrize(
    ("dt", "d", "why"),
    [(np.float32, 128, "not bf16 or f16"), (ml_dtypes.bfloat16, 96, "head size 96")],
)
def test_ineligible_attention_keeps_the_tile_kernel(
    monkeypatch: pytest.MonkeyPatch, dt: type, d: int, why: str
) -> None:
    from tessera.ir import graph as g
    from tessera.passes.sm90.lower_attention_sm90 import eligible

    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    spec = _attention(False).specialize(*_qkv(64, 64, d, dt))
    op = next(o for o in spec.ir("graph").walk() if isinstance(o, g.FlashAttentionOp))
    assert why in (eligible(op) or "")
    assert not any(isinstance(o, tt.LaunchExOp) for o in spec.ir("target").walk())
