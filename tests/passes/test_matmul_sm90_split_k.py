"""Split-K of the sm90 matmul on CPU: the cost rule's choices, the kernels that store f32
partials (ptxas), and the reduction kernel on the Tile IR interpreter (partials added in
order, then the epilogue)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.errors import TesseraError
from tessera.ir import tile as tl
from tessera.options import CompileOptions
from tessera.passes import matmul_config as mc
from tessera.passes.emit_ptx import emit_ptx
from tessera.passes.sm90.lower_matmul_sm90 import Sm90Gemm, build_kernel, splits_for
from tessera.runtime import ptxas

needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")


def _auto(m: int, n: int, k: int, in_type: str = "bf16") -> int:
    return mc.split_k(m, n, k, mc.heuristic(m, n, k), in_type)


def test_cost_rule_splits_only_shapes_with_too_few_tiles() -> None:
    # 16 tiles of 128 x 128 and 128 stages of K: 8 ranges fill 128 of the 132 SMs
    assert _auto(512, 512, 8192) == 8
    assert _auto(512, 512, 65536) >= 8
    # 64 tiles: two ranges
    assert _auto(1024, 1024, 8192) == 2
    assert _auto(1024, 1024, 65536) == 2
    # training's weight gradient (K = tokens)
    assert _auto(768, 768, 32768) > 1
    # square shapes that fill the SMs, short K, and big decode weights (HBM-bound) stay whole
    for shape in [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
                  (1024, 1024, 1024), (16, 8192, 8192), (3000, 5000, 2000)]:
        assert _auto(*shape) == 1, shape
    # small decode: 32 tiles of 64 x 128
    assert _auto(16, 4096, 4096) > 1
    # batched products and huge outputs never split
    cfg = mc.heuristic(512, 512, 8192)
    assert mc.split_k(512, 512, 8192, cfg, batch=2) == 1
    assert mc.split_k(8192, 8192, 65536, mc.heuristic(8192, 8192, 65536)) == 1


def test_cost_model_is_monotone_in_waves() -> None:
    cfg = mc.heuristic(512, 512, 8192)
    t = [mc.split_cost(512, 512, 8192, cfg, s) for s in (1, 2, 4, 8)]
    assert t == sorted(t, reverse=True)  # more ranges, fewer idle SMs, until one wave
    assert mc.split_cost(512, 512, 8192, cfg, 16) > t[-1]  # two waves and 16 partials


def test_splits_for_modes() -> None:
    gemm = Sm90Gemm(512, 512, 8192, "bf16", "f32", mc.heuristic(512, 512, 8192))
    assert splits_for(gemm, "off") == 1
    assert splits_for(gemm, "auto") == 8
    assert splits_for(gemm, "3") == 3
    # never an empty range: 3 stages of K cut in at most 3
    short = Sm90Gemm(512, 512, 192, "bf16", "f32", mc.heuristic(512, 512, 192))
    assert splits_for(short, "16") == 3
    # 5 stages in 4 ranges of 2 would leave one empty: 3 ranges
    assert splits_for(Sm90Gemm(512, 512, 320, "bf16", "f32", mc.heuristic(512, 512, 320)),
                      "4") == 3
    with pytest.raises(ValueError, match="split_k"):
        splits_for(gemm, "many")
    with pytest.raises(TesseraError, match="split_k"):
        CompileOptions(split_k="many")
    assert CompileOptions.from_env({"TESSERA_SPLIT_K": "OFF"}, device=None).split_k == "off"
    assert CompileOptions.from_env({}, device=None).split_k == "auto"


def test_split_gemm_checks() -> None:
    cfg = mc.heuristic(512, 512, 8192)
    with pytest.raises(ValueError, match="split-K"):
        Sm90Gemm(512, 512, 8192, "bf16", "bf16", cfg, splits=4)  # partials are f32
    with pytest.raises(ValueError, match="empty"):
        Sm90Gemm(512, 512, 320, "bf16", "f32", cfg, splits=4)
    assert Sm90Gemm(512, 512, 8192, "bf16", "f32", cfg, splits=8).grid() == (128, 1, 1)


@pytest.mark.parametrize("n", [64, 65])
def test_reduction_kernel_applies_the_residual(n: int) -> None:
    """With a residual after the bias and relu (``r + relu(a @ b + c)``) the reduction
    kernel adds it last, each step rounded to bf16, bit for bit as the unfused ops."""
    from tessera.runtime.tile_interpreter import run_kernel

    m, k, s = 40, 512, 4
    opts = CompileOptions(sm90_kernels=True, split_k=str(s))
    bf = ml_dtypes.bfloat16
    shapes = ((m, k), (k, n), (n,), (m, n))
    module = ts.jit(lambda a, b, c, r: r + ts.relu(a @ b + c), options=opts).specialize(
        *[np.zeros(sh, bf) for sh in shapes]).ir("tile")
    launches = [op for op in module.walk() if isinstance(op, tl.LaunchOp)]
    (reduce,) = [op for op in launches if "split_k_reduce" in op.callee.string_value()]
    rng = np.random.default_rng(n)
    parts = rng.standard_normal((s, m, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(bf)
    res = rng.standard_normal((m, n)).astype(bf)
    out = np.full((m, n), np.nan, bf)
    grid = [int(v) for v in reduce.grid.get_values()]
    run_kernel(module, reduce.callee.string_value(), [out, parts, bias, res], grid)
    acc = parts[0]
    for p in parts[1:]:
        acc = (acc + p).astype(np.float32)
    v = acc.astype(bf).astype(np.float32) + bias.astype(np.float32)
    v = np.maximum(v.astype(bf).astype(np.float32), 0).astype(bf).astype(np.float32)
    ref = (v + res.astype(np.float32)).astype(bf)
    np.testing.assert_array_equal(out.astype(np.float32), ref.astype(np.float32))


@needs_ptxas
@pytest.mark.parametrize(
    ("in_t", "a_t", "b_t", "cfg"),
    [
        ("bf16", False, False, None),
        ("bf16", True, True, None),
        ("f16", False, True, mc.Sm90Config(bn=256, stages=4, cluster=2)),
        ("e4m3", False, True, None),
        ("3xtf32", False, True, mc.Sm90Config(bn=128, stages=2)),
        ("tf32", False, True, mc.Sm90Config(bn=128, stages=4)),
    ],
)
def test_split_kernels_assemble(in_t: str, a_t: bool, b_t: bool, cfg: mc.Sm90Config | None) -> None:
    m, n, k = 520, 392, 4096
    gemm = Sm90Gemm(m, n, k, in_t, "f32", cfg or mc.heuristic(m, n, k), a_t=a_t, b_t=b_t,
                    splits=3)
    ptx = emit_ptx(build_kernel("gemm", gemm))
    # the f32 partials leave through shared memory, 16-byte vectors (N % 4 == 0)
    assert "ld.shared.v4.b32" in ptx and "st.global.v4.b32" in ptx
    assert "div.u32" in ptx and "min.u32" in ptx
    ptxas.check(ptx)


def _tile_module(expr: str, split_k: str, *shapes: tuple[int, ...]):
    opts = CompileOptions(sm90_kernels=True, split_k=split_k)
    args = [np.zeros(s, ml_dtypes.bfloat16) for s in shapes]
    return ts.jit(eval(f"lambda a, b, c: {expr}"), options=opts).specialize(*args).ir("tile")


@pytest.mark.parametrize("n", [64, 66, 65])
def test_reduction_kernel_on_the_interpreter(n: int) -> None:
    """The reduction kernel adds the partials in range order in f32, then applies the
    epilogue (bias, relu, rounding to bf16), for rows of 4, 2 and 1 element vectors."""
    from tessera.runtime.tile_interpreter import run_kernel

    m, k, s = 40, 512, 4
    module = _tile_module("ts.relu(a @ b + c)", str(s), (m, k), (k, n), (n,))
    launches = [op for op in module.walk() if isinstance(op, tl.LaunchOp)]
    (reduce,) = [op for op in launches if "split_k_reduce" in op.callee.string_value()]
    rng = np.random.default_rng(n)
    parts = rng.standard_normal((s, m, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(ml_dtypes.bfloat16)
    out = np.full((m, n), np.nan, ml_dtypes.bfloat16)
    grid = [int(v) for v in reduce.grid.get_values()]
    run_kernel(module, reduce.callee.string_value(), [out, parts, bias], grid)
    acc = parts[0]
    for p in parts[1:]:
        acc = (acc + p).astype(np.float32)
    v = acc.astype(ml_dtypes.bfloat16).astype(np.float32) + bias.astype(np.float32)
    ref = np.maximum(v.astype(ml_dtypes.bfloat16).astype(np.float32), 0).astype(
        ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.astype(np.float32), ref.astype(np.float32))


@needs_ptxas
def test_jit_split_k_program_assembles() -> None:
    opts = CompileOptions(sm90_kernels=True, split_k="auto")
    bf = ml_dtypes.bfloat16
    spec = ts.jit(lambda a, b: a @ b.T, options=opts).specialize(
        np.zeros((512, 8192), bf), np.zeros((512, 8192), bf))
    ptx = spec.ir("ptx")
    assert "split_k_reduce" in ptx and "wgmma.mma_async" in ptx
    ptxas.check(ptx)
    plain = ts.jit(lambda a, b: a @ b.T, options=CompileOptions(sm90_kernels=True,
                                                                 split_k="off"))
    assert "split_k_reduce" not in plain.specialize(
        np.zeros((512, 8192), bf), np.zeros((512, 8192), bf)).ir("ptx")


def test_split_products_run_without_cta_pairs() -> None:
    """A ragged shape whose heuristic pairs CTAs (B multicast) runs its split kernel
    unclustered; unsplit, it keeps the pairs."""
    m, n, k = 1000, 1000, 16384
    assert mc.heuristic(m, n, k).cluster == 2 and _auto(m, n, k) > 1
    bf = ml_dtypes.bfloat16
    args = (np.zeros((m, k), bf), np.zeros((k, n), bf))
    for mode, paired in (("auto", False), ("off", True)):
        opts = CompileOptions(sm90_kernels=True, split_k=mode)
        ptx = ts.jit(lambda a, b: a @ b, options=opts).specialize(*args).ir("ptx")
        assert ("split_k_reduce" in ptx) != paired
        assert (".reqnctapercluster 2, 1, 1" in ptx) == paired
