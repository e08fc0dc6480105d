"""The warp-specialized sm90 kernels get the registers they ask for, by ``ptxas -v``.

Each kernel gives its producer warpgroup few registers and its consumers many
(``setmaxnreg``). ptxas honours that only when it can fix the register count at kernel
entry, which takes ``.minnctapersm`` (``ttarget.func ... minnctapersm = 1``); otherwise it
ignores every ``setmaxnreg`` (note C7508), and the consumers are held to
``65536 / threads`` = 168 registers. That made the head-size-64 attention backward spill
and the decode GEMM and a convolution run within 168 registers. These tests assemble each
kernel family and check: no C7508, no spills, no stack frame, and no ``wgmma``
serialization (C7512) except where it is known."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import IntAttr, ModuleOp
from xdsl.utils.exceptions import VerifyException

import tessera as ts
from tessera.ir import target as tt
from tessera.passes.emit_ptx import emit_ptx
from tessera.passes.sm90.attention_bwd_sm90 import STAGES, STAGES_D64, Sm90AttentionBwd
from tessera.passes.sm90.attention_bwd_sm90 import build_kernel as build_bwd
from tessera.passes.sm90.lower_attention_sm90 import Sm90Attention
from tessera.passes.sm90.lower_attention_sm90 import build_kernel as build_fwd
from tessera.runtime import ptxas

needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")
BF16 = ml_dtypes.bfloat16

KNOWN_LOSSES = {
    # the dK/dV kernel at head size 128 holds dK, dV, S and dP (224 f32 registers of
    # accumulators) beside P and dS: more than its 240 leave room for while the next
    # block's S and dP wgmmas are in flight
    ("dkdv", 128): "C7512",
}


def _check(ptx: str, known: str | None = None) -> None:
    for name, rep in ptxas.resources(ptx).items():
        assert rep.spill_bytes == 0 and rep.stack_bytes == 0, (name, rep)
        losses = [loss.split(":")[0] for loss in rep.losses]
        assert "C7508" not in losses, (name, rep.losses)  # setmaxnreg ignored
        assert losses in ([], [known] if known else []), (name, rep.losses)


@needs_ptxas
@pytest.mark.parametrize("et", ["bf16", "f16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_kernels(d: int, causal: bool, et: str) -> None:
    _check(emit_ptx(ModuleOp([build_fwd("fwd", Sm90Attention(
        96, 1000, 1000, d, et, 0.125, causal, lse=causal))])))
    for kind in ("dkdv", "dq"):
        spec = Sm90AttentionBwd(kind, 96, 1000, 1000, d, et, 0.125, causal,
                                STAGES_D64 if d == 64 else STAGES)
        _check(emit_ptx(ModuleOp([build_bwd(kind, spec)])), KNOWN_LOSSES.get((kind, d)))


@needs_ptxas
@pytest.mark.parametrize(
    ("name", "fn", "shapes", "dtype"),
    [
        ("bf16 NN", lambda a, b: a @ b, ((4096, 4096), (4096, 4096)), BF16),
        ("bf16 NT", lambda a, b: a @ ts.transpose(b, (1, 0)), ((2048, 4096), (3072, 4096)), BF16),
        ("decode", lambda a, b: a @ b, ((16, 8192), (8192, 8192)), BF16),
        ("batched", lambda a, b: a @ b, ((8, 512, 1024), (8, 1024, 768)), BF16),
        ("conv 3x3", lambda x, w: ts.conv2d(x, w, padding=1), ((32, 64, 56, 56), (64, 64, 3, 3)),
         BF16),
        ("f32 (3xTF32)", lambda a, b: a @ b, ((2048, 2048), (2048, 2048)), np.float32),
        ("fp8 e4m3", lambda a, b: ts.matmul(a, b, out_dtype="bf16"),
         ((4096, 4096), (4096, 4096)), ml_dtypes.float8_e4m3fn),
        ("f16 ragged", lambda a, b: a @ b, ((3000, 2000), (2000, 5000)), np.float16),
    ],
)
def test_gemm_and_convolution_kernels(monkeypatch: pytest.MonkeyPatch, name, fn, shapes,
                                      dtype) -> None:
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_NO_DISK_CACHE", "1")
    spec = ts.jit(fn).specialize(*(np.zeros(s, dtype) for s in shapes))
    assert "setmaxnreg" in spec.ir("ptx") and ".minnctapersm 1" in spec.ir("ptx")
    _check(spec.ir("ptx"))


def test_setmaxnreg_needs_minnctapersm() -> None:
    func = tt.FuncOp("k", [], 384)
    func.block.add_op(tt.SetmaxnregOp("dec", 24))
    func.block.add_op(tt.RetOp())
    with pytest.raises(VerifyException, match="setmaxnreg needs minnctapersm"):
        func.verify()
    func.minnctapersm = IntAttr(1)
    func.verify()
    assert ".minnctapersm 1" in emit_ptx(ModuleOp([func]))
