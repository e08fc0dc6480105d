"""conv2d through im2col and the sm90 GEMM on CPU: which kernels the lowering builds, and
PTX that assembles for sm_90a (GPU results: tests/gpu/test_conv_sm90_gpu.py)."""

from __future__ import annotations

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
