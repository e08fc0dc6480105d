"""The sm90 GEMM's staged store (:mod:`tessera.passes.sm90.staged_store`): the read and
write plans against the fragment layout (every element once, bank-conflict free), the
lowering's choice of store per result type and N, the shared-memory budget, and kernels
for the vocabulary-sized and ragged N that assemble for sm_90a."""

from __future__ import annotations

import re
from collections import Counter

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.ir import graph as g
from tessera.ir import target as tt
from tessera.ir.target.facts import MAX_SHARED_BYTES
from tessera.options import CompileOptions
from tessera.passes import matmul_config as mc
from tessera.passes.emit_ptx import emit_ptx
from tessera.passes.sm90 import lower_matmul_sm90 as lm
from tessera.passes.sm90 import staged_store as ss
from tessera.passes.sm90.epilogue import Sm90Epilogue
from tessera.runtime import ptxas

needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")
bf = ml_dtypes.bfloat16
HW_SMEM = MAX_SHARED_BYTES
"""Dynamic shared memory a block may use on sm_90."""


# --------------------------------------------------------------------------- the plans


@pytest.mark.parametrize("esize", [2, 4])
def test_writes_cover_the_chunk_once_without_bank_conflicts(esize: int) -> None:
    """The fragment's pairs cover each (row, pair) of the 64-row chunk once, and each warp
    instruction's pairs fall in distinct banks (16-bit: 32 4-byte words; f32: each
    half-warp's 16 8-byte slots)."""
    stride = ss.row_stride(esize)
    seen = Counter(s for t in range(128) for s in ss.write_slots(t, esize))
    pairs = [(r, c) for r in range(64) for c in range(0, ss.CHUNK_BYTES, 2 * esize)]
    assert sorted(seen) == pairs and set(seen.values()) == {1}
    for warp in range(4):
        for i in range(len(ss.write_slots(0, esize))):  # one store instruction
            addrs = [r * stride + c for r, c in (ss.write_slots(32 * warp + lane, esize)[i]
                                                 for lane in range(32))]
            if esize == 2:
                assert len({a // 4 % 32 for a in addrs}) == 32
            else:
                for half in (addrs[:16], addrs[16:]):
                    assert len({a // 8 % 16 for a in half}) == 16


@pytest.mark.parametrize("vb", [2, 4, 8, 16])
def test_reads_cover_the_chunk_in_row_runs(vb: int) -> None:
    """Each vector of the chunk is read once; a warp's k-th vectors are whole runs of
    rows (consecutive lanes on consecutive vectors), so its global stores coalesce."""
    seen = Counter(s for t in range(128) for s in ss.read_slots(t, vb))
    assert sorted(seen) == [(r, c) for r in range(64) for c in range(0, ss.CHUNK_BYTES, vb)]
    assert set(seen.values()) == {1}
    for warp in range(4):
        for k in range(len(ss.read_slots(0, vb))):
            slots = [ss.read_slots(32 * warp + lane, vb)[k] for lane in range(32)]
            flat = [r * ss.CHUNK_BYTES + c for r, c in slots]
            assert flat == list(range(flat[0], flat[0] + 32 * vb, vb))  # contiguous


@pytest.mark.parametrize(("ld", "esize", "vb"), [
    (50257, 2, 2), (50258, 2, 4), (4100, 2, 8), (4096, 2, 16), (1000, 2, 16),
    (50257, 4, 4), (1001, 4, 4), (1002, 4, 8), (4100, 4, 16), (1000, 4, 16),
])
def test_vector_width_is_the_widest_the_rows_allow(ld: int, esize: int, vb: int) -> None:
    assert ss.vector_bytes(ld, esize) == vb


def test_store_shape_rejects_what_it_cannot_store() -> None:
    with pytest.raises(ValueError, match="result type"):
        ss.StoreShape("f64", 8, 8, 8, 64)
    with pytest.raises(ValueError, match="no multiple of 128 bytes"):
        ss.StoreShape("f32", 8, 8, 8, 16)
    with pytest.raises(ValueError, match="store must be"):
        lm.Sm90Gemm(256, 1001, 64, "bf16", "bf16", mc.heuristic(256, 1001, 64), store="tma")


# --------------------------------------------------------------------------- the choice

NS = [50257, 1000, 4100, 4096]
EXPECTED = {  # (N, result type) -> the store, and the widest global store of the kernel
    (50257, "bf16"): ("staged", "st.global.b16"), (1000, "bf16"): ("tma", None),
    (4100, "bf16"): ("staged", "st.global.v2.b32"), (4096, "bf16"): ("tma", None),
    (50257, "f32"): ("staged", "st.global.b32"), (1000, "f32"): ("staged", "st.global.v4.b32"),
    (4100, "f32"): ("staged", "st.global.v4.b32"), (4096, "f32"): ("staged", "st.global.v4.b32"),
}


def _gemm(m: int, n: int, k: int, in_t: str, out: str, epilogue: bool, store: str = "staged",
          splits: int = 1) -> lm.Sm90Gemm:
    ep = Sm90Epilogue(out, "row", "gelu") if epilogue else None
    cfg = mc.heuristic(m, n, k)
    if in_t in lm.TF32:
        cfg = lm.tf32_config(cfg, in_t == "3xtf32", lm._staging(cfg, out, n, store))
    if splits > 1:
        cfg = mc.Sm90Config(bn=cfg.bn, stages=cfg.stages, consumers=cfg.consumers)
    return lm.Sm90Gemm(m, n, k, in_t, out, cfg, b_t=True, epilogue=ep, store=store,
                       splits=splits)


@needs_ptxas
@pytest.mark.parametrize("epilogue", [False, True], ids=["plain", "bias-gelu"])
@pytest.mark.parametrize("out", ["bf16", "f32"])
@pytest.mark.parametrize("n", NS)
def test_kernels_assemble(n: int, out: str, epilogue: bool) -> None:
    """M = 333 (a ragged last tile), K = 64; the store each (N, type) takes; the staged
    kernels' shared memory within the budget and the stages those of the register store."""
    gemm = _gemm(333, n, 64, "bf16", out, epilogue)
    c_store, widest = EXPECTED[n, out]
    assert gemm.c_store == c_store
    ptx = emit_ptx(lm.build_kernel("gemm", gemm))
    stores = set(re.findall(r"st\.global\.[a-z0-9.]+", ptx))
    if c_store == "tma":
        assert "cp.async.bulk.tensor.2d.global.shared" in ptx and not stores
    else:
        assert stores == {widest} and "ld.shared" in ptx and "bar.sync 1, 128" in ptx
        regs = _gemm(333, n, 64, "bf16", out, epilogue, store="registers")
        assert regs.cfg == gemm.cfg
        assert gemm.smem_bytes - regs.smem_bytes == ss.staged_bytes(2, 2 if out != "f32" else 4)
    if epilogue:
        assert "tanh" in ptx or "ex2.approx" in ptx
    assert gemm.smem_bytes <= HW_SMEM
    ptxas.check(ptx)


@needs_ptxas
@pytest.mark.parametrize("n", [50257, 4100])
@pytest.mark.parametrize("in_t", ["3xtf32", "tf32"])
def test_tf32_kernels_assemble(in_t: str, n: int) -> None:
    gemm = _gemm(333, n, 64, in_t, "f32", False)
    assert gemm.c_store == "staged" and gemm.smem_bytes <= HW_SMEM
    ptxas.check(emit_ptx(lm.build_kernel("gemm", gemm)))


@needs_ptxas
@pytest.mark.parametrize("n", NS)
def test_split_k_partials_assemble(n: int) -> None:
    """Split-K's f32 partials at rows ``range * M`` of the workspace, staged."""
    gemm = _gemm(520, n, 4096, "bf16", "f32", False, splits=3)
    assert gemm.c_store == "staged"
    ptx = emit_ptx(lm.build_kernel("gemm", gemm))
    assert "ld.shared" in ptx and "div.u32" in ptx
    assert set(re.findall(r"st\.global\.[a-z0-9.]+", ptx)) == {EXPECTED[n, "f32"][1]}
    ptxas.check(ptx)


def test_heuristic_configs_fit_with_the_staged_store() -> None:
    """Every heuristic tile of a result TMA does not store has room for the staged buffers
    next to its stages: the stage counts of the register store are kept."""
    for m in (64, 333, 8192):
        for n in (9, 1001, 4100, 50257, 4096):
            for out in ("bf16", "f32"):
                if out == "bf16" and n % 8 == 0:
                    continue
                gemm = lm.Sm90Gemm(m, n, 768, "bf16", out, mc.heuristic(m, n, 768))
                assert gemm.c_store == "staged"
                assert gemm.smem_bytes <= HW_SMEM
    assert mc.heuristic(8192, 50257, 768).stages == 4


# --------------------------------------------------------------------------- the lowering


def _launch(expr: str, store: str, *arrays):
    opts = CompileOptions(sm90_kernels=True, sm90_store=store, split_k="off")
    spec = ts.jit(eval(f"lambda a, b, c: {expr}", {"ts": ts}), options=opts).specialize(*arrays)
    (launch,) = [op for op in spec.ir("tile").walk() if isinstance(op, tt.LaunchExOp)]
    return spec, launch


@needs_ptxas
@pytest.mark.parametrize(("expr", "dtype"), [
    ("ts.gelu(a @ b.T + c)", bf), ("a @ b.T + c", np.float32),
])
def test_the_option_selects_the_store(expr: str, dtype) -> None:
    """CompileOptions.sm90_store: the same kernel but for the store (and its buffers)."""
    arrays = (np.zeros((333, 64), dtype), np.zeros((50257, 64), dtype),
              np.zeros((50257,), dtype))
    staged, ls = _launch(expr, "staged", *arrays)
    regs, lr = _launch(expr, "registers", *arrays)
    assert [o for o in staged.ir("graph").walk() if isinstance(o, g.MatmulEpilogueOp)]
    esize = 2 if dtype is bf else 4
    assert ls.smem.value.data - lr.smem.value.data == ss.staged_bytes(2, esize)
    ptx_s, ptx_r = staged.ir("ptx"), regs.ir("ptx")
    assert "ld.shared" in ptx_s and "ld.shared" not in ptx_r
    ptxas.check(ptx_s)
    ptxas.check(ptx_r)


@needs_ptxas
def test_im2col_convolution_takes_the_option() -> None:
    """The im2col convolution's f32 product is staged too, unless sm90_store=registers."""
    x, w = np.zeros((2, 64, 14, 14), bf), np.zeros((104, 64, 3, 3), bf)
    for store, want in (("staged", "st.global.v4.b32"), ("registers", "st.global.v2.f32")):
        opts = CompileOptions(sm90_kernels=True, implicit_conv=False, sm90_store=store)
        ptx = ts.jit(lambda x, w: ts.conv2d(x, w, padding=1), options=opts).specialize(
            x, w).ir("ptx")
        (kernel,) = [k for k in ptx.split(".visible .entry") if "wgmma" in k]
        assert set(re.findall(r"st\.global\.[a-z0-9.]+", kernel)) == {want}
        assert ("ld.shared" in kernel) == (store == "staged")
        ptxas.check(ptx)
