"""conv2d through im2col and the sm90 GEMM on CPU: which kernels the lowering builds, and
PTX that assembles for sm_90a (GPU results: tests/gpu/test_conv_sm90_gpu.py)."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.ir import graph as g
from tessera.ir import target as tt
from tessera.passes.sm90.conv import conv_eligible
from tessera.runtime import ptxas

needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")
bf = ml_dtypes.bfloat16


def _launches(spec) -> list[str]:
    return [
        o.callee.string_value().rsplit("_", 2)[-2]
        for o in spec.ir("target").walk() if isinstance(o, tt.LaunchOp | tt.LaunchExOp)
    ]


@needs_ptxas
@pytest.mark.parametrize(
    ("xs", "ws", "stride", "padding", "bias", "kernels"),
    [
        ((2, 64, 12, 12), (64, 64, 3, 3), 1, 1, False, ["im2col", "weight", "matmul", "store"]),
        # K = 27 is padded to 32 columns
        ((2, 3, 17, 15), (16, 3, 3, 3), 2, 1, True, ["im2col", "weight", "matmul", "store"]),
    ],
)
def test_conv2d_lowers_to_im2col_and_wgmma(
    monkeypatch: pytest.MonkeyPatch, xs, ws, stride, padding, bias, kernels
) -> None:
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "0")
    if bias:
        fn = ts.jit(lambda x, w, b: ts.conv2d(x, w, b, stride=stride, padding=padding))
        args = [np.zeros(xs, bf), np.zeros(ws, bf), np.zeros((ws[0],), bf)]
    else:
        fn = ts.jit(lambda x, w: ts.conv2d(x, w, stride=stride, padding=padding))
        args = [np.zeros(xs, bf), np.zeros(ws, bf)]
    spec = fn.specialize(*args)
    assert _launches(spec) == kernels
    ptx = spec.ir("ptx")
    assert "wgmma.mma_async" in ptx
    ptxas.check(ptx)


def test_conv_eligibility() -> None:
    def op_for(xs, ws, dt):
        spec = ts.jit(lambda x, w: ts.conv2d(x, w)).specialize(np.zeros(xs, dt), np.zeros(ws, dt))
        return next(o for o in spec.ir("graph").walk() if isinstance(o, g.Conv2dOp))

    assert conv_eligible(op_for((1, 4, 8, 8), (16, 4, 3, 3), bf)) is None
    assert "multiple of 8" in conv_eligible(op_for((1, 4, 8, 8), (12, 4, 3, 3), bf))
    assert conv_eligible(op_for((1, 4, 8, 8), (12, 4, 3, 3), np.float32)) is None  # FMA GEMM
    assert "f32, bf16 or f16" in conv_eligible(op_for((1, 4, 8, 8), (16, 4, 3, 3), np.float64))


@needs_ptxas
@pytest.mark.parametrize("sm90", ["0", "1"])
def test_grad_of_a_lambda_has_valid_kernel_names(monkeypatch: pytest.MonkeyPatch, sm90) -> None:
    """``<lambda>_grad``'s kernels are PTX identifiers (``lambda__grad_...``)."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", sm90)
    f = ts.grad(lambda x, w, dy: ts.sum(ts.conv2d(x, w, padding=1) * dy), argnums=(0, 1))
    spec = f.specialize(np.zeros((2, 8, 6, 6), bf), np.zeros((8, 8, 3, 3), bf),
                        np.zeros((2, 8, 6, 6), bf))
    names = [o.sym_name.data for o in spec.ir("target").walk() if isinstance(o, tt.FuncOp)]
    assert names and all(n.startswith("lambda__grad_") for n in names)
    ptxas.check(spec.ir("ptx"))


@pytest.mark.parametrize(
    ("xs", "ws", "stride", "padding", "bias"),
    [((2, 3, 9, 8), (8, 3, 3, 3), 1, 1, True), ((1, 4, 11, 7), (5, 4, 3, 2), 2, 0, False)],
)
def test_f32_conv2d_im2col_on_the_tile_interpreter(xs, ws, stride, padding, bias) -> None:
    """The f32 path (im2col, the FMA GEMM, the NCHW store) has no wgmma kernel, so the Tile
    IR interpreter runs it: checked against torch in float64."""
    import torch
    from xdsl.dialects.builtin import ModuleOp

    from tessera.passes.lower_graph_to_tile import LowerGraphToTile
    from tessera.passes.pipelines import default_context
    from tessera.runtime.tile_interpreter import run_host

    rng = np.random.default_rng(3)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    args = [x, w, b] if bias else [x, w]
    if bias:
        fn = ts.jit(lambda x, w, b: ts.conv2d(x, w, b, stride=stride, padding=padding))
    else:
        fn = ts.jit(lambda x, w: ts.conv2d(x, w, stride=stride, padding=padding))
    spec = fn.specialize(*args)
    module = spec.ir("graph").clone()
    assert isinstance(module, ModuleOp)
    LowerGraphToTile(sm90=True).apply(default_context(), module)
    kernels = [o.sym_name.data for o in module.walk() if o.name == "ttile.kernel"]
    assert [k.rsplit("_", 2)[-2] for k in kernels] == ["im2col", "weight", "matmul", "store"]
    (got,) = run_host(module, spec.name, [a.copy() for a in args])
    ref = torch.nn.functional.conv2d(
        torch.from_numpy(x).double(), torch.from_numpy(w).double(),
        torch.from_numpy(b).double() if bias else None, stride=stride, padding=padding,
    ).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- implicit GEMM


def _kernels(spec) -> list[str]:
    """The launched kernels' names without the function's prefix."""
    return [
        o.callee.string_value().split("_", 1)[1]
        for o in spec.ir("target").walk() if isinstance(o, tt.LaunchOp | tt.LaunchExOp)
    ]


def _spec(xs, ws, stride, padding, bias, dt=bf):
    args = [np.zeros(xs, dt), np.zeros(ws, dt)] + ([np.zeros((ws[0],), dt)] if bias else [])
    if bias:
        fn = ts.jit(lambda x, w, b: ts.conv2d(x, w, b, stride=stride, padding=padding))
    else:
        fn = ts.jit(lambda x, w: ts.conv2d(x, w, stride=stride, padding=padding))
    return fn.specialize(*args)


@needs_ptxas
@pytest.mark.parametrize(
    ("xs", "ws", "stride", "padding", "bias"),
    [
        ((2, 64, 12, 12), (64, 64, 3, 3), 1, 1, False),  # Cp % 64 == 0: one tap per K-step
        ((2, 3, 33, 31), (16, 3, 7, 7), 2, 3, True),  # the stem: C = 3 padded to 8
        ((1, 4, 11, 7), (5, 4, 3, 2), 2, 0, True),  # O = 5, 64-row tiles
        ((2, 64, 9, 9), (128, 64, 1, 1), 1, 0, True),  # 1x1 with a bias: implicit
    ],
)
def test_implicit_conv_lowers_to_one_gemm_without_im2col(
    monkeypatch: pytest.MonkeyPatch, xs, ws, stride, padding, bias
) -> None:
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "1")
    spec = _spec(xs, ws, stride, padding, bias)
    assert _kernels(spec) == ["conv_nhwc_0", "conv_weight_0", "conv_0"]
    ptx = spec.ir("ptx")
    for insn in ("wgmma.mma_async", "cp.async.cg.shared.global",
                 "cp.async.mbarrier.arrive.noinc.shared::cta.b64", "st.global.v4.b32"):
        assert insn in ptx, insn
    assert "im2col" not in ptx
    ptxas.check(ptx)


def test_small_channel_filters_gather_whole_rows() -> None:
    """A filter row of few-channel pixels is one 128-byte K-step when the row fills more
    than half of the line's pixels (``packs``); the weight's K then pads each row."""
    from tessera.passes.sm90.conv_implicit import packs

    assert packs(8, 2, 7, 1, False)        # the RGB stem: 7 of 8 pixels of 16 bytes
    assert packs(8, 2, 5, 1, False)
    assert not packs(8, 2, 3, 1, False)    # 3 of 8: the tap-by-tap gather
    assert packs(16, 2, 3, 1, False)       # 3 of 4 pixels of 32 bytes
    assert packs(4, 4, 7, 1, False)        # f32: 16-byte pixels too
    assert not packs(8, 2, 7, 2, False)    # dilated rows are not contiguous
    assert not packs(64, 2, 3, 1, True)    # a tap's channels fill the line already
    assert not packs(24, 2, 3, 1, False)   # 48-byte pixels do not divide a line


@needs_ptxas
def test_stem_weight_pads_filter_rows_to_a_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "1")
    spec = _spec((2, 3, 33, 31), (16, 3, 7, 7), 2, 3, False)
    # K = 7 filter rows x 8 pixels x 8 channels (the eighth pixel's weights are zero)
    assert "memref<16x448xbf16>" in str(spec.ir("target"))
    ptxas.check(spec.ir("ptx"))


@needs_ptxas
def test_wide_kernels_keep_unpadded_filter_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel of 64 taps or more (a weight gradient's 10 x 7 output gradient over a
    batch of 2) is reordered by the NHWC copy, which writes K as kh x kw x Cp: the
    gather then reads unpadded rows too (K = 10 x 7 x 8, not 10 x 8 x 8)."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "1")
    spec = _spec((3, 2, 12, 9), (64, 2, 10, 7), 1, 0, False)
    target = str(spec.ir("target"))
    assert "memref<64x560xbf16>" in target and "conv_weight_0" in target
    ptxas.check(spec.ir("ptx"))


@needs_ptxas
@pytest.mark.parametrize("tf32", ["0", "1"])
def test_f32_implicit_conv_runs_on_tf32_wgmma(monkeypatch: pytest.MonkeyPatch, tf32) -> None:
    """f32: the NHWC and weight copies write TF32 parts (3xTF32: hi and lo planes, the
    GEMM issues three products per k8 step; allow_tf32: one)."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "1")
    monkeypatch.setenv("TESSERA_ALLOW_TF32", tf32)
    spec = _spec((2, 3, 17, 15), (16, 3, 3, 3), 2, 1, True, np.float32)
    assert _kernels(spec) == ["conv_nhwc_0", "conv_weight_0", "conv_0"]
    ptx = spec.ir("ptx")
    conv = ptx[ptx.index(".entry lambda_conv_0("):]
    assert conv.count("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32") == (
        4 if tf32 == "1" else 12)
    assert ("sub.rn.f32" in ptx) == (tf32 == "0")  # lo = tf32(x - hi)
    ptxas.check(ptx)


@needs_ptxas
def test_pointwise_conv_is_one_batched_gemm(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1x1, stride 1 convolution without bias reads x and w in place (views) and
    stores y by TMA: one kernel."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "1")
    spec = _spec((3, 128, 4, 10), (64, 128, 1, 1), 1, 0, False)
    assert _kernels(spec) == ["matmul_0"]
    ptxas.check(spec.ir("ptx"))


@needs_ptxas
@pytest.mark.parametrize("bias", [False, True])
def test_weight_gradient_shaped_conv_splits_k(monkeypatch: pytest.MonkeyPatch, bias) -> None:
    """A weight gradient's convolution (the input with its batch as channels, the output
    gradient as a kernel dilated by the forward's stride) has a few output tiles and a
    long K: the implicit GEMM stores f32 partials of K ranges, one kernel adds them in
    order (and the bias) and rounds once."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "1")
    monkeypatch.setenv("TESSERA_SPLIT_K", "auto")
    xs, ws = (3, 64, 40, 40), (64, 64, 20, 20)
    args = [np.zeros(xs, bf), np.zeros(ws, bf)] + ([np.zeros((64,), bf)] if bias else [])
    if bias:
        fn = ts.jit(lambda x, w, b: ts.conv2d(x, w, b, padding=3, dilation=2))
    else:
        fn = ts.jit(lambda x, w: ts.conv2d(x, w, padding=3, dilation=2))
    spec = fn.specialize(*args)
    assert _kernels(spec) == ["conv_nhwc_0", "conv_weight_0", "conv_0", "split_k_reduce_0"]
    (launch,) = [o for o in spec.ir("target").walk()
                 if isinstance(o, tt.LaunchExOp) and o.callee.string_value().endswith("conv_0")]
    ws_shape = launch.args[0].type.get_shape()
    assert ws_shape[1:] == (3, 64, 8, 8) and ws_shape[0] > 8, ws_shape
    ptx = spec.ir("ptx")
    conv = ptx[ptx.index(".entry lambda_conv_0("):]
    conv = conv[:conv.find(".entry", 1) if ".entry" in conv[1:] else None]
    assert "st.global.f32" in conv and "st.global.b16" not in conv
    ptxas.check(ptx)


@needs_ptxas
def test_weight_gradient_reads_its_operands_through_the_transposes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """conv2d(transpose(x), transpose(g)) (a weight gradient: batch and channels swapped):
    the layout copies read x and g in that order, so neither transpose is made."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "1")
    fn = ts.jit(lambda x, g: ts.conv2d(ts.transpose(x, (1, 0, 2, 3)),
                                       ts.transpose(g, (1, 0, 2, 3)), padding=1))
    spec = fn.specialize(np.zeros((8, 64, 28, 28), bf), np.zeros((8, 32, 28, 28), bf))
    assert "transpose" not in " ".join(_kernels(spec))
    ptxas.check(spec.ir("ptx"))


def test_deferred_transpose_is_made_for_other_lowerings() -> None:
    """The generic lowering of a convolution of a transposed input asks for the buffer:
    the deferred transpose is made then (Tile IR interpreter against numpy)."""
    from xdsl.dialects.builtin import ModuleOp

    from tessera.passes.lower_graph_to_tile import LowerGraphToTile
    from tessera.passes.pipelines import default_context
    from tessera.runtime.tile_interpreter import run_host

    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 4, 6, 5)).astype(np.float32)
    w = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    fn = ts.jit(lambda x, w: ts.conv2d(ts.transpose(x, (1, 0, 2, 3)), w, padding=1))
    spec = fn.specialize(x, w)
    module = spec.ir("graph").clone()
    assert isinstance(module, ModuleOp)
    LowerGraphToTile().apply(default_context(), module)
    kernels = [o.sym_name.data for o in module.walk() if o.name == "ttile.kernel"]
    assert any("transpose" in k for k in kernels), kernels
    (got,) = run_host(module, spec.name, [x.copy(), w.copy()])
    import torch

    ref = torch.nn.functional.conv2d(torch.from_numpy(x).double().transpose(0, 1),
                                     torch.from_numpy(w).double(), padding=1).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("dilation", "stride", "padding"), [(2, 1, 2), ((3, 2), (2, 1), 1)])
@pytest.mark.parametrize("sm90", [False, True])
def test_dilated_conv2d_on_the_tile_interpreter(dilation, stride, padding, sm90) -> None:
    """A dilated f32 convolution on the direct kernel and on the im2col path, run by the
    Tile IR interpreter against torch in float64."""
    import torch
    from xdsl.dialects.builtin import ModuleOp

    from tessera.passes.lower_graph_to_tile import LowerGraphToTile
    from tessera.passes.pipelines import default_context
    from tessera.runtime.tile_interpreter import run_host

    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 11, 10)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    fn = ts.jit(lambda x, w, b: ts.conv2d(x, w, b, stride=stride, padding=padding,
                                          dilation=dilation))
    spec = fn.specialize(x, w, b)
    module = spec.ir("graph").clone()
    assert isinstance(module, ModuleOp)
    LowerGraphToTile(sm90=sm90).apply(default_context(), module)
    (got,) = run_host(module, spec.name, [x.copy(), w.copy(), b.copy()])
    ref = torch.nn.functional.conv2d(
        torch.from_numpy(x).double(), torch.from_numpy(w).double(), torch.from_numpy(b).double(),
        stride=stride, padding=padding, dilation=dilation,
    ).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_implicit_conv_is_off_by_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "0")
    kernels = _kernels(_spec((2, 64, 12, 12), (64, 64, 3, 3), 1, 1, False))
    assert [k.rsplit("_", 1)[0] for k in kernels] == [
        "conv2d_im2col", "conv2d_weight", "matmul", "conv2d_store"]


def test_implicit_and_pointwise_eligibility() -> None:
    from tessera.passes.sm90.conv import conv1x1_eligible
    from tessera.passes.sm90.conv_implicit import implicit_eligible

    def op_for(xs, ws, dt=bf, stride=1, padding=0, bias=False):
        spec = _spec(xs, ws, stride, padding, bias, dt)
        return next(o for o in spec.ir("graph").walk() if isinstance(o, g.Conv2dOp))

    assert implicit_eligible(op_for((1, 3, 8, 8), (5, 3, 3, 3))) is None
    assert implicit_eligible(op_for((1, 4, 8, 8), (8, 4, 3, 3), np.float32)) is None
    assert "f32" in implicit_eligible(op_for((1, 4, 8, 8), (8, 4, 3, 3), np.float64))
    assert conv1x1_eligible(op_for((2, 64, 4, 4), (64, 64, 1, 1))) is None
    assert "bias" in conv1x1_eligible(op_for((2, 64, 4, 4), (64, 64, 1, 1), bias=True))
    assert "stride 1" in conv1x1_eligible(op_for((2, 64, 4, 4), (64, 64, 1, 1), stride=2))
    assert "multiples of 64" in conv1x1_eligible(op_for((2, 64, 4, 4), (72, 64, 1, 1)))
    assert "multiple of 8" in conv1x1_eligible(op_for((2, 64, 7, 7), (64, 64, 1, 1)))


def test_conv_config_fills_the_gpu() -> None:
    """Small M x O (ResNet-50's last 3x3 layer: 1568 x 512) takes narrower tiles so that
    more CTAs run; every config fits shared memory without a staging tile."""
    from tessera.passes.matmul_config import SMEM_BUDGET
    from tessera.passes.sm90.conv_implicit import conv_config

    cfg = conv_config(1568, 512, 4608, 132)
    assert cfg.bn == 64 and cfg.bm == 128  # 104 tiles, not the 52 of 128 x 128
    for m, o in ((100352, 64), (6272, 256), (15, 5), (1568, 2048)):
        c = conv_config(m, o, 576, 132)
        assert c.valid(staging=False) and c.smem_bytes(staging=False) <= SMEM_BUDGET


@needs_ptxas
@pytest.mark.parametrize(("swap", "groups_like"), [(True, False), (False, False),
                                                   (True, True)])
def test_input_gradient_reads_its_kernel_flipped(monkeypatch: pytest.MonkeyPatch, swap,
                                                  groups_like) -> None:
    """conv2d(g, reverse(transpose(w), [2, 3])) (an input gradient's kernel): the
    implicit GEMM's weight relayout reads w flipped (and swapped): no reverse or transpose
    kernel. A reverse with another user is made (one copy that reads through the
    transpose), and the convolution reads that copy."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "1")

    def kernel(w):
        return ts.flip(ts.transpose(w, (1, 0, 2, 3)) if swap else w, (2, 3))

    if groups_like:  # the flipped kernel is also returned: it must be made
        fn = ts.jit(lambda g, w: (ts.conv2d(g, kernel(w), padding=1), kernel(w) * 2.0))
    else:
        fn = ts.jit(lambda g, w: ts.conv2d(g, kernel(w), padding=1))
    spec = fn.specialize(np.zeros((2, 64, 14, 14), bf), np.zeros((64, 64, 3, 3), bf))
    names = " ".join(_kernels(spec))
    if groups_like:
        assert "reverse" in names, names
    else:
        assert "reverse" not in names and "transpose" not in names, names
    ptx = spec.ir("ptx")
    if not groups_like:
        assert "sub.u32" in ptx  # the flipped tap, 8 - tap
    ptxas.check(ptx)


@needs_ptxas
@pytest.mark.parametrize(("ws", "stride", "padding"), [((64, 64, 3, 3), 2, 1),
                                                        ((128, 64, 1, 1), 2, 0),
                                                        ((64, 64, 3, 3), 1, 1),
                                                        ((128, 64, 1, 1), 1, 0)])
def test_input_gradient_kernels_assemble(monkeypatch: pytest.MonkeyPatch, ws, stride,
                                         padding) -> None:
    """ts.grad's input gradient of a 3x3/2, a 1x1/2 and a 3x3 convolution on the sm90
    kernels: one convolution of the undilated gradient; the 3x3/2's phase kernel read
    from the forward weight by the relayout (no pad, reverse or transpose kernels), its
    phases stored at their strided places by the convolution's epilogue (no interleave
    kernel); the 1x1/2's product reading the forward weight as stored (no transpose), its
    zeros by one select; the 3x3's flip inside the weight relayout. PTX through ptxas."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "1")
    fn = ts.grad(lambda x, w, dy: ts.sum(ts.conv2d(x, w, stride=stride, padding=padding) * dy))
    ho = (16 + 2 * padding - ws[2]) // stride + 1
    spec = fn.specialize(np.zeros((2, 64, 16, 16), bf), np.zeros(ws, bf),
                         np.zeros((2, ws[0], ho, ho), bf))
    kinds = [re.sub(r"^.*?_grad_|_\d+$", "", n) for n in _kernels(spec)]
    if ws[2] == 3 and stride == 2:  # the phase kernel relaid out from w itself
        assert kinds == ["conv_nhwc", "conv_weight", "conv"], kinds
    if ws[2] == 1 and stride == 2:  # the product (a pointwise GEMM), the zeros by a select
        assert kinds == ["matmul", "constant", "select"], kinds
    if ws[2] == 1 and stride == 1:  # one pointwise GEMM reading w as stored
        assert kinds == ["matmul"], kinds
    if ws[2] == 3 and stride == 1:
        assert kinds == ["conv_nhwc", "conv_weight", "conv"], kinds
    ptxas.check(spec.ir("ptx"))


@needs_ptxas
def test_pointwise_strided_input_gradient_reads_the_weight_swapped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1x1/2 input gradient of a 7x7 gradient (49 pixels: the implicit GEMM, not the
    batched pointwise one): the weight relayout reads the forward weight channel-swapped,
    no transpose kernel. PTX through ptxas."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "1")
    fn = ts.grad(lambda x, w, dy: ts.sum(ts.conv2d(x, w, stride=2) * dy))
    spec = fn.specialize(np.zeros((2, 64, 14, 14), bf), np.zeros((128, 64, 1, 1), bf),
                         np.zeros((2, 128, 7, 7), bf))
    kinds = [re.sub(r"^.*?_grad_|_\d+$", "", n) for n in _kernels(spec)]
    assert kinds[:3] == ["conv_nhwc", "conv_weight", "conv"] and "transpose" not in kinds, kinds
    ptxas.check(spec.ir("ptx"))
