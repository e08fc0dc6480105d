"""conv2d on the sm90 path (im2col + wgmma GEMM + NCHW store) against torch in float64,
outputs checked for unwritten elements; gradients through ts.grad. Skipped without a
compute capability 9.0 device."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="needs a compute capability 9.0 (Hopper) GPU",
    ),
]

import tessera as ts  # noqa: E402

F = torch.nn.functional
CASES = [
    # (x shape, w shape, stride, padding, bias)
    ((4, 64, 14, 14), (64, 64, 3, 3), 1, 1, False),
    ((2, 3, 33, 31), (16, 3, 7, 7), 2, 3, True),
    ((3, 32, 9, 10), (128, 32, 1, 1), 1, 0, True),
    ((2, 16, 15, 15), (24, 16, 3, 3), 2, 0, False),
    ((32, 64, 56, 56), (64, 64, 3, 3), 1, 1, False),
]


@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "bias"), CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_conv2d(xs, ws, stride, padding, bias, dtype) -> None:
    x = torch.randn(xs, device="cuda", dtype=dtype)
    w = torch.randn(ws, device="cuda", dtype=dtype) / (ws[1] * ws[2] * ws[3]) ** 0.5
    b = torch.randn(ws[0], device="cuda", dtype=dtype) if bias else None
    if bias:
        fn = ts.jit(lambda x, w, b: ts.conv2d(x, w, b, stride=stride, padding=padding))
        y = fn(x, w, b)
    else:
        fn = ts.jit(lambda x, w: ts.conv2d(x, w, stride=stride, padding=padding))
        y = fn(x, w)
    torch.cuda.synchronize()
    assert "wgmma.mma_async" in fn.inspect_ir("ptx")
    ref = F.conv2d(x.double(), w.double(), b.double() if bias else None, stride=stride,
                   padding=padding)
    assert y.shape == ref.shape and torch.isfinite(y).all()
    assert float((y.double() - ref).norm() / ref.norm()) < 1e-2


def test_conv2d_gradients() -> None:
    """ts.grad of a conv2d loss (its data-gradient convolution takes the sm90 path too)."""
    x = torch.randn(2, 64, 10, 10, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.bfloat16) / 24
    dy = torch.randn(2, 64, 10, 10, device="cuda", dtype=torch.bfloat16)
    gx, gw = ts.grad(lambda x, w, dy: ts.sum(ts.conv2d(x, w, padding=1) * dy),
                     argnums=(0, 1))(x, w, dy)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    rx, rw = torch.autograd.grad(F.conv2d(x64, w64, padding=1), (x64, w64), dy.double())
    for got, ref in ((gx, rx), (gw, rw)):
        assert float((got.double() - ref).norm() / ref.norm()) < 2e-2
