"""conv2d on the sm90 paths against torch in float64, outputs checked for unwritten
elements: im2col + wgmma GEMM + NCHW store, and (``implicit_conv``) the implicit GEMM
(``tessera.passes.sm90.conv_implicit``) or, for pointwise convolutions, one batched GEMM
on views; gradients through ts.grad. Skipped without a compute capability 9.0 device."""

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
from tessera.options import CompileOptions  # noqa: E402

F = torch.nn.functional
CASES = [
    # (x shape, w shape, stride, padding, bias)
    ((4, 64, 14, 14), (64, 64, 3, 3), 1, 1, False),
    ((2, 3, 33, 31), (16, 3, 7, 7), 2, 3, True),
    ((3, 32, 9, 10), (128, 32, 1, 1), 1, 0, True),
    ((2, 16, 15, 15), (24, 16, 3, 3), 2, 0, False),
    ((32, 64, 56, 56), (64, 64, 3, 3), 1, 1, False),
]
IMPLICIT_CASES = [
    # C not a multiple of 8, odd H/W, stride 2, padding 0/1/3, the 7x7 stem, 1x1, O not a
    # multiple of 8, 64-row tiles (small M), ResNet-50 layers
    ((2, 3, 17, 15), (16, 3, 3, 3), 2, 1, True),
    ((2, 3, 33, 31), (16, 3, 7, 7), 2, 3, True),
    ((1, 4, 11, 7), (5, 4, 3, 2), 2, 0, True),
    ((2, 20, 13, 11), (40, 20, 3, 3), 1, 1, False),
    ((8, 20, 40, 40), (40, 20, 3, 3), 1, 1, False),
    ((1, 64, 6, 6), (64, 64, 3, 3), 1, 1, True),
    ((2, 72, 9, 9), (200, 72, 3, 3), 1, 1, True),
    ((3, 32, 9, 10), (128, 32, 1, 1), 1, 0, True),
    ((2, 64, 8, 8), (128, 64, 1, 1), 1, 0, False),
    ((3, 128, 4, 10), (64, 128, 1, 1), 1, 0, False),
    ((4, 128, 28, 28), (128, 128, 3, 3), 2, 1, False),
    ((8, 256, 14, 14), (256, 256, 3, 3), 1, 1, True),
    ((4, 512, 7, 7), (512, 512, 3, 3), 1, 1, False),
    # filter rows gathered as 128-byte lines (few channels): 5x5 and 3x3 rows of 8- and
    # 16-channel pixels, a 7x7 stem on a non-square image
    ((2, 3, 19, 23), (24, 3, 5, 5), 1, 2, True),
    ((2, 12, 15, 17), (32, 12, 3, 3), 1, 1, False),
    ((3, 3, 29, 30), (64, 3, 7, 7), 2, 3, False),
    # 70 taps of 8-channel pixels: a weight-gradient-like kernel reordered unpadded
    ((3, 2, 12, 9), (64, 2, 10, 7), 1, 0, False),
]


def _conv(xs, ws, stride, padding, bias, dtype, options=None):
    x = torch.randn(xs, device="cuda", dtype=dtype)
    w = torch.randn(ws, device="cuda", dtype=dtype) / (ws[1] * ws[2] * ws[3]) ** 0.5
    b = torch.randn(ws[0], device="cuda", dtype=dtype) if bias else None
    ref = F.conv2d(x.double(), w.double(), b.double() if bias else None, stride=stride,
                   padding=padding)
    # the result's and the intermediate buffers' memory comes from freed blocks of NaN (an
    # unwritten element shows)
    big = torch.full((1 << 28,), float("nan"), device="cuda", dtype=torch.bfloat16)
    small = [torch.full((1 << 19,), float("nan"), device="cuda", dtype=torch.bfloat16)
             for _ in range(4)]
    del big, small
    if bias:
        fn = ts.jit(lambda x, w, b: ts.conv2d(x, w, b, stride=stride, padding=padding),
                    options=options)
        y = fn(x, w, b)
    else:
        fn = ts.jit(lambda x, w: ts.conv2d(x, w, stride=stride, padding=padding),
                    options=options)
        y = fn(x, w)
    torch.cuda.synchronize()
    return fn, y, ref


@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "bias"), IMPLICIT_CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_conv2d_implicit_gemm(xs, ws, stride, padding, bias, dtype) -> None:
    fn, y, ref = _conv(xs, ws, stride, padding, bias, dtype,
                       CompileOptions.from_env(implicit_conv=True))
    assert "wgmma.mma_async" in fn.inspect_ir("ptx")
    assert y.shape == ref.shape and torch.isfinite(y).all()
    assert float((y.double() - ref).norm() / ref.norm()) < 1e-2


def test_conv2d_packed_rows_read_no_pixel_past_the_filter() -> None:
    """A filter row gathered as a 128-byte line (7 taps of a line of 8 pixels) does not
    read the eighth pixel: an infinity there reaches exactly the outputs whose windows
    hold it, as in torch."""
    x = torch.randn(1, 3, 20, 20, device="cuda", dtype=torch.bfloat16)
    x[0, 1, 9, 12] = float("inf")
    w = torch.rand(8, 3, 7, 7, device="cuda", dtype=torch.bfloat16) + 0.5
    fn = ts.jit(lambda x, w: ts.conv2d(x, w, stride=1, padding=3),
                options=CompileOptions.from_env(implicit_conv=True))
    y = fn(x, w)
    ref = F.conv2d(x.double(), w.double(), padding=3)
    assert torch.equal(torch.isfinite(y), torch.isfinite(ref))
    ok = torch.isfinite(ref)
    assert float((y.double()[ok] - ref[ok]).abs().max() / ref[ok].abs().max()) < 1e-2


@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "bias"), CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_conv2d(xs, ws, stride, padding, bias, dtype) -> None:
    fn, y, ref = _conv(xs, ws, stride, padding, bias, dtype,
                       CompileOptions.from_env(implicit_conv=False))
    assert "wgmma.mma_async" in fn.inspect_ir("ptx")
    assert y.shape == ref.shape and torch.isfinite(y).all()
    assert float((y.double() - ref).norm() / ref.norm()) < 1e-2


@pytest.mark.parametrize("implicit", ["0", "1"])
def test_conv2d_gradients(monkeypatch: pytest.MonkeyPatch, implicit: str) -> None:
    """ts.grad of a conv2d loss (its data- and weight-gradient convolutions take the sm90
    paths too)."""
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", implicit)
    x = torch.randn(2, 64, 10, 10, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.bfloat16) / 24
    dy = torch.randn(2, 64, 10, 10, device="cuda", dtype=torch.bfloat16)
    gx, gw = ts.grad(lambda x, w, dy: ts.sum(ts.conv2d(x, w, padding=1) * dy),
                     argnums=(0, 1))(x, w, dy)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    rx, rw = torch.autograd.grad(F.conv2d(x64, w64, padding=1), (x64, w64), dy.double())
    for got, ref in ((gx, rx), (gw, rw)):
        assert float((got.double() - ref).norm() / ref.norm()) < 2e-2


@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "bias"),
                         [c for c in IMPLICIT_CASES if c[0][0] <= 4])
@pytest.mark.parametrize("tf32", [False, True])
def test_conv2d_implicit_gemm_f32(xs, ws, stride, padding, bias, tf32) -> None:
    """f32 on the tensor cores: 3xTF32 keeps f32 accuracy (as the f32 GEMM); with
    allow_tf32 one TF32 product."""
    fn, y, ref = _conv(xs, ws, stride, padding, bias, torch.float32,
                       CompileOptions.from_env(implicit_conv=True, allow_tf32=tf32))
    assert "tf32.tf32" in fn.inspect_ir("ptx")
    assert y.shape == ref.shape and torch.isfinite(y).all()
    assert float((y.double() - ref).norm() / ref.norm()) < (5e-3 if tf32 else 1e-5)


@pytest.mark.parametrize(
    ("xs", "ws", "stride", "padding", "dilation", "bias"),
    [
        ((2, 3, 17, 15), (16, 3, 3, 3), 1, 2, 2, True),
        ((2, 20, 13, 11), (40, 20, 3, 2), (2, 1), 1, (2, 3), False),
        # weight gradients (batch as channels, the output gradient as a kernel dilated by
        # the stride): a few output tiles over a long K, split along K
        ((3, 32, 64, 64), (64, 32, 32, 32), 1, 3, 2, False),
        ((64, 16, 28, 28), (64, 16, 28, 28), 1, 1, 1, False),
        ((64, 16, 28, 28), (64, 16, 28, 28), 1, 1, 1, True),
    ],
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_conv2d_implicit_dilated_and_split(xs, ws, stride, padding, dilation, bias, dtype):
    x = torch.randn(xs, device="cuda", dtype=dtype)
    w = torch.randn(ws, device="cuda", dtype=dtype) / (ws[1] * ws[2] * ws[3]) ** 0.5
    b = torch.randn(ws[0], device="cuda", dtype=dtype) if bias else None
    ref = F.conv2d(x.double(), w.double(), b.double() if bias else None, stride=stride,
                   padding=padding, dilation=dilation)
    big = torch.full((1 << 28,), float("nan"), device="cuda", dtype=torch.bfloat16)
    del big
    opts = CompileOptions.from_env(implicit_conv=True, split_k="auto")
    if bias:
        fn = ts.jit(lambda x, w, b: ts.conv2d(x, w, b, stride=stride, padding=padding,
                                              dilation=dilation), options=opts)
        y = fn(x, w, b)
    else:
        fn = ts.jit(lambda x, w: ts.conv2d(x, w, stride=stride, padding=padding,
                                           dilation=dilation), options=opts)
        y = fn(x, w)
    torch.cuda.synchronize()
    assert y.shape == ref.shape and torch.isfinite(y).all()
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    assert float((y.double() - ref).norm() / ref.norm()) < tol
    if xs[0] >= 3 and ws[2] >= 28:
        assert "split_k_reduce" in fn.inspect_ir("target")


@pytest.mark.parametrize(("k", "st", "pd", "dl", "needs_x"),
                         [(7, 2, 3, 1, False), (3, 1, 1, 1, True), (3, 2, 1, 1, True),
                          (3, 1, 2, 2, True)])
def test_convolution_training_through_torch_compile(k, st, pd, dl, needs_x):
    """A convolution layer's forward and both gradients through the torch backend (the
    weight gradient as one split convolution of the undilated output gradient)."""
    import tessera.torch as tt

    x = torch.randn(8, 32, 30, 30, device="cuda", dtype=torch.bfloat16).requires_grad_(needs_x)
    w = (torch.randn(64, 32, k, k, device="cuda", dtype=torch.bfloat16) / (32 * k * k) ** 0.5
         ).requires_grad_()

    def f(x, w):
        return F.conv2d(x, w, stride=st, padding=pd, dilation=dl)

    x64 = x.detach().double().requires_grad_(needs_x)
    w64 = w.detach().double().requires_grad_()
    y64 = f(x64, w64)
    dy = torch.randn_like(y64).to(torch.bfloat16)
    y64.backward(dy.double())
    y = tt.compile(f)(x, w)
    y.backward(dy)
    pairs = [(y, y64), (w.grad, w64.grad)] + ([(x.grad, x64.grad)] if needs_x else [])
    for got, ref in pairs:
        assert float((got.double() - ref).norm() / ref.norm()) < 2e-2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_weight_gradient_form_reads_through_transposes(dtype):
    """conv2d(transpose(x), transpose(g)): the layout copies read x and g swapped (no
    transposed copies), split along K; against torch in float64."""
    x = torch.randn(16, 64, 28, 28, device="cuda", dtype=dtype)
    g = torch.randn(16, 32, 28, 28, device="cuda", dtype=dtype)
    fn = ts.jit(lambda x, g: ts.conv2d(ts.transpose(x, (1, 0, 2, 3)),
                                       ts.transpose(g, (1, 0, 2, 3)), padding=1),
                options=CompileOptions.from_env(implicit_conv=True, split_k="auto"))
    y = fn(x, g)
    torch.cuda.synchronize()
    ref = F.conv2d(x.double().transpose(0, 1), g.double().transpose(0, 1), padding=1)
    assert "transpose" not in fn.inspect_ir("target")
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    assert float((y.double() - ref).norm() / ref.norm()) < tol
