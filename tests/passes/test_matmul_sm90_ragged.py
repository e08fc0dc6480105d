"""The sm90 matmul at row lengths that are no 16-byte multiple (vocabulary sizes, odd
hidden sizes): zero-padded operand copies (run on the Tile IR interpreter against numpy),
``st.global`` stores of results with N % 8 != 0 (staged through shared memory, or from
registers), and PTX that assembles for sm_90a."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.ir import graph as g
from tessera.ir import target as tt
from tessera.ir import tile as tl
from tessera.passes import matmul_config as mc
from tessera.passes.emit_ptx import emit_ptx
from tessera.passes.sm90 import lower_matmul_sm90 as lm
from tessera.passes.sm90.pad_rows import copy_cols, padded
from tessera.runtime import ptxas
from tessera.runtime.tile_interpreter import run_kernel

needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")
bf = ml_dtypes.bfloat16
LAYOUTS = {  # expr: (A shape, B shape) for M, N, K = 257, 1001, 77
    "a @ b": ((257, 77), (77, 1001)),
    "a @ b.T": ((257, 77), (1001, 77)),
    "a.T @ b": ((77, 257), (77, 1001)),
    "a.T @ b.T": ((77, 257), (1001, 77)),
}


@pytest.fixture(autouse=True)
def _sm90(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")


def _spec(expr: str, *arrays):
    return ts.jit(eval(f"lambda a, b: {expr}", {"ts": ts})).specialize(*arrays)


def _launches(module) -> tuple[list[tl.LaunchOp], list[tt.LaunchExOp]]:
    return ([op for op in module.walk() if isinstance(op, tl.LaunchOp)],
            [op for op in module.walk() if isinstance(op, tt.LaunchExOp)])


@needs_ptxas
@pytest.mark.parametrize("expr", list(LAYOUTS))
def test_every_layout_takes_the_sm90_kernel_through_padded_copies(expr: str) -> None:
    ash, bsh = LAYOUTS[expr]
    spec = _spec(expr, np.zeros(ash, bf), np.zeros(bsh, bf))
    op = next(o for o in spec.ir("graph").walk() if isinstance(o, g.MatmulOp))
    assert lm.eligible(op) is None
    assert lm.staging(op) == ["pad A", "pad B", "st.global C"]
    copies, (gemm,) = _launches(spec.ir("tile"))
    assert [c.callee.string_value() for c in copies] == ["lambda_pad_a_0", "lambda_pad_b_0"]
    # the kernel reads the copies (rows padded to 128 bytes) and stores C by pointer
    shapes = [list(o.type.get_shape()) for o in gemm.args]
    assert shapes[0] == [257, 1001]
    assert [s[-1] for s in shapes[1:]] == [copy_cols(s[-1], 2) for s in (ash, bsh)]
    assert list(gemm.boxes.get_values())[:2] == [0, 0]
    ptx = spec.ir("ptx")
    assert "wgmma.mma_async" in ptx and "st.global.b16" in ptx
    ptxas.check(ptx)


@pytest.mark.parametrize("expr", ["a @ b", "a.T @ b.T"])
def test_pad_kernels_on_the_interpreter(expr: str) -> None:
    """The copies hold the operand in its own layout, zeros past its rows' ends."""
    ash, bsh = LAYOUTS[expr]
    rng = np.random.default_rng(11)
    a = rng.standard_normal(ash).astype(bf)
    b = rng.standard_normal(bsh).astype(bf)
    module = _spec(expr, a, b).ir("tile")
    copies, _ = _launches(module)
    for launch, src in zip(copies, (a, b)):
        cp = copy_cols(src.shape[-1], 2)
        dst = np.full((src.shape[0], cp), np.nan, bf)
        grid = [int(v) for v in launch.grid.get_values()]
        run_kernel(module, launch.callee.string_value(), [dst, src], grid)
        np.testing.assert_array_equal(dst[:, :src.shape[-1]].astype(np.float64),
                                      src.astype(np.float64))
        np.testing.assert_array_equal(dst[:, src.shape[-1]:].astype(np.float64), 0)


def test_aligned_operands_are_read_as_they_are() -> None:
    spec = _spec("a @ b.T", np.zeros((96, 64), bf), np.zeros((72, 64), bf))
    op = next(o for o in spec.ir("graph").walk() if isinstance(o, g.MatmulOp))
    assert lm.staging(op) == []
    copies, (gemm,) = _launches(spec.ir("tile"))
    assert copies == [] and list(gemm.boxes.get_values())[:2] == [64, 64]


@needs_ptxas
def test_lm_head_stores_by_pointer_without_copies() -> None:
    """``x @ wte.T`` with a vocabulary of 50257: both operands are K-major with K = 768
    (read as they are); only C (N odd) leaves through element stores."""
    spec = _spec("a @ b.T", np.zeros((8192, 768), bf), np.zeros((50257, 768), bf))
    copies, (gemm,) = _launches(spec.ir("tile"))
    assert copies == []
    assert list(gemm.boxes.get_values())[:2] == [0, 0]
    ptxas.check(spec.ir("ptx"))


@needs_ptxas
@pytest.mark.parametrize(("n", "out", "stores", "staged"), [
    (1001, "bf16", "st.global.b16", "st.global.b16"),
    (1002, "f16", "st.global.b32", "st.global.b32"),
    (1001, "f32", "st.global.f32", "st.global.b32"),
    (1002, "f32", "st.global.v2.f32", "st.global.v2.b32"),
])
def test_register_store_epilogue_assembles(n: int, out: str, stores: str, staged: str) -> None:
    """Both stores of results TMA does not take: from registers (a pair of the fragment
    per store) and staged through shared memory (the widest vector the rows allow)."""
    for store, want in (("registers", stores), ("staged", staged)):
        gemm = lm.Sm90Gemm(257, n, 80, "bf16", out, mc.heuristic(257, n, 80), b_t=True,
                           store=store)
        assert not gemm.tma_store and gemm.c_store == store
        ptx = emit_ptx(lm.build_kernel("gemm", gemm))
        assert want in ptx and "cp.async.bulk.tensor.2d.global.shared" not in ptx
        assert ("ld.shared" in ptx) == (store == "staged")
        ptxas.check(ptx)


@needs_ptxas
@pytest.mark.parametrize("bias_shape", [(1001,), (257, 1001)])
@pytest.mark.parametrize("act", ["gelu", None])
def test_fused_epilogue_with_odd_n(bias_shape, act) -> None:
    """A row or full bias and an activation fused into the st.global epilogue (odd N: the
    bias is read element by element, each element under its own bound)."""
    def linear(x, w, bias):
        y = x @ w.T + bias
        return ts.gelu(y) if act else y

    spec = ts.jit(linear).specialize(np.zeros((257, 77), bf), np.zeros((1001, 77), bf),
                                     np.zeros(bias_shape, bf))
    assert [o for o in spec.ir("graph").walk() if isinstance(o, g.MatmulEpilogueOp)]
    copies, gemms = _launches(spec.ir("tile"))
    assert len(gemms) == 1 and len(copies) == 2  # the two pads; the bias is fused
    ptx = spec.ir("ptx")
    assert "ld.global.b16" in ptx and "st.global.b16" in ptx
    ptxas.check(ptx)


@needs_ptxas
@pytest.mark.parametrize("expr", ["a @ b", "a @ b.T", "a.T @ b"])
def test_batched_odd_n(expr: str) -> None:
    ash = (3, 128, 64) if not expr.startswith("a.T") else (3, 64, 128)
    bsh = (3, 1001, 64) if expr.endswith("b.T") else (3, 64, 1001)
    spec = _spec(expr, np.zeros(ash, ml_dtypes.bfloat16), np.zeros(bsh, ml_dtypes.bfloat16))
    copies, gemms = _launches(spec.ir("tile"))
    assert len(gemms) == 1
    assert [c.callee.string_value() for c in copies] == ([] if expr.endswith("b.T") else
                                                          ["lambda_pad_b_0"])
    ptxas.check(spec.ir("ptx"))


@needs_ptxas
@pytest.mark.parametrize("expr", ["ts.matmul(a, b, transpose_b=True, out_dtype=ts.f32)",
                                  "ts.matmul(a, b, out_dtype=ts.f32)"])
def test_fp8_k_not_a_multiple_of_16(expr: str) -> None:
    """fp8 operands with K = 77: K-major ones are padded, MN-major ones transposed into a
    padded K-major copy; both copies checked on the interpreter."""
    e4 = ml_dtypes.float8_e4m3fn
    rng = np.random.default_rng(5)
    a = rng.standard_normal((96, 77)).astype(e4)
    b = rng.standard_normal((1001, 77) if "transpose_b" in expr else (77, 1001)).astype(e4)
    spec = _spec(expr, a, b)
    module = spec.ir("tile")
    copies, gemms = _launches(module)
    assert len(gemms) == 1 and len(copies) == 2
    names = [c.callee.string_value() for c in copies]
    assert names == (["lambda_pad_a_0", "lambda_pad_b_0"] if "transpose_b" in expr
                     else ["lambda_pad_a_0", "lambda_transpose_0"])
    for launch, src in zip(copies, (a, b if "transpose_b" in expr else b.T)):
        # pad_rows' copies are 128-byte rows; the K-major transpose's 16-byte ones
        width = copy_cols(77, 1) if "pad" in launch.callee.string_value() else padded(77, 1)
        dst = np.full((src.shape[0], width), np.nan, e4)
        grid = [int(v) for v in launch.grid.get_values()]
        arg = src if "transpose_b" in expr or src is a else b
        run_kernel(module, launch.callee.string_value(), [dst, arg], grid)
        np.testing.assert_array_equal(dst[:, :77].astype(np.float64), src.astype(np.float64))
        np.testing.assert_array_equal(dst[:, 77:].astype(np.float64), 0)
    ptxas.check(spec.ir("ptx"))


@needs_ptxas
def test_f32_odd_n() -> None:
    spec = _spec("a @ b", np.zeros((96, 77), np.float32), np.zeros((77, 1001), np.float32))
    _, gemms = _launches(spec.ir("tile"))
    assert len(gemms) == 1
    ptx = spec.ir("ptx")
    assert "st.global.f32" in ptx
    ptxas.check(ptx)


def test_heuristic_stages_without_the_output_tile() -> None:
    """N % 8 != 0 stages no output tile in shared memory: one more 256-wide stage fits."""
    assert mc.heuristic(8192, 50257, 768).stages == mc.heuristic(8192, 50264, 768).stages + 1
    gemm = lm.Sm90Gemm(8192, 50257, 768, "bf16", "bf16", mc.heuristic(8192, 50257, 768),
                       b_t=True)
    assert gemm.cfg.valid(1, staging=False) and not gemm.cfg.valid(1, staging=True)
