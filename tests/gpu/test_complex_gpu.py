"""Complex elementwise kernels (tessera/passes/tile_complex.py) on the GPU: a jitted
spectrum product ``a * b / (a - b) + a`` of two FFTs, and a real conv2d through FFTs
(spectral-rewrite's conv-via-fft), against numpy / torch in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tessera as ts

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 2e-4)])
def test_complex_fused_spectrum_on_gpu(dtype, tol):
    @ts.jit
    def spectrum(x, y):
        a, b = ts.fft(x), ts.fft(y)
        return a * b / (a - b) + a

    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((3, 64)), rng.standard_normal((3, 64))
    got = spectrum(torch.tensor(x, dtype=dtype, device="cuda"),
                   torch.tensor(y, dtype=dtype, device="cuda"))
    assert got.is_cuda and got.is_complex()
    A, B = np.fft.fft(x), np.fft.fft(y)
    want = A * B / (A - B) + A
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=tol, atol=tol * np.abs(want).max())
    assert "cfused" in spectrum.inspect_ir("tile")


def test_conv_via_fft_on_gpu():
    """The rewrite is opt-in (``spectral-rewrite{conv-via-fft=true}``): applied to the
    graph here, then lowered with the default pipeline and run on the GPU."""
    from xdsl.parser import Parser

    from tessera.ir.context import default_context
    from tessera.passes.emit_ptx import emit_ptx
    from tessera.passes.pipelines import ptx_pipeline
    from tessera.passes.spectral_rewrite import SpectralRewritePass
    from tessera.runtime import cuda

    t = "tensor<{}xf64>".format
    text = (f"func.func @conv(%x: {t('1x2x18x18')}, %w: {t('2x2x15x15')}) -> {t('1x2x18x18')} {{\n"
            f"  %0 = tgraph.conv2d %x, %w stride = [1, 1] padding = [7, 7] : "
            f"{t('1x2x18x18')}, {t('2x2x15x15')} -> {t('1x2x18x18')}\n"
            f"  func.return %0 : {t('1x2x18x18')}\n}}")
    ctx = default_context()
    m = Parser(ctx, text).parse_module()
    SpectralRewritePass(conv_via_fft=True).apply(ctx, m)
    assert "tgraph.fft2d" in str(m)  # the cost rule chose the FFTs
    for p in ptx_pipeline():
        p.apply(ctx, m)
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((1, 2, 18, 18)), rng.standard_normal((2, 2, 15, 15))
    (got,) = cuda.run_host(m, "conv", [torch.tensor(x, device="cuda"),
                                       torch.tensor(w, device="cuda")], ptx=emit_ptx(m))
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=7).numpy()
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-9, atol=1e-9)
