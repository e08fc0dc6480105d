"""The convolution input gradient without a stride-dilated gradient
(:mod:`tessera.autodiff.conv_grad`: stride phases as output channels of one stride-1
convolution, stored interleaved by the implicit GEMM's epilogue
(:mod:`tessera.passes.sm90.conv_interleave`); the weight's flip one ``tgraph.reverse``) on
the GPU against torch in float64: through the torch backend (``aten.convolution_backward``,
the input gradient alone and a training step) and through ``ts.grad``, bf16 and f32, with
the memory the results come from filled with NaN first. Skipped without a compute
capability 9.0 device."""

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
import tessera.torch as tt  # noqa: E402

F = torch.nn.functional
TOL = {torch.bfloat16: 2e-2, torch.float32: 1e-5}

CASES = [
    # (x shape, w shape, stride, padding, dilation, groups)
    ((8, 128, 56, 56), (128, 128, 3, 3), 2, 1, 1, 1),    # ResNet-50 l2 3x3/2
    ((8, 256, 56, 56), (512, 256, 1, 1), 2, 0, 1, 1),    # l2's 1x1/2 shortcut
    ((4, 512, 14, 14), (512, 512, 3, 3), 2, 1, 1, 1),    # l4 3x3/2, odd 7x7 output
    ((4, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1, 1),       # stride 1: the flip only
    ((2, 3, 33, 31), (16, 3, 7, 7), 2, 3, 1, 1),         # the stem's shape, odd sizes
    ((3, 20, 17, 15), (40, 20, 3, 2), (2, 3), (1, 0), 1, 1),  # rows the stride skipped
    ((2, 16, 19, 21), (32, 16, 3, 3), 3, 2, 2, 1),       # stride 3, dilated
    ((2, 32, 15, 16), (32, 1, 3, 3), 2, 1, 1, 32),       # depthwise /2
    ((2, 16, 13, 13), (24, 8, 3, 3), 2, 1, 1, 2),        # grouped /2
    ((2, 24, 11, 9), (16, 24, 2, 2), 3, 0, 1, 1),        # kernel smaller than the stride
    # the phases stored by the convolution's epilogue: odd input, 40 channels (a GEMM
    # tile's columns span phases), a tile straddling phases of 96 channels
    ((3, 40, 27, 25), (24, 40, 3, 3), 2, 1, 1, 1),
    ((2, 96, 30, 30), (64, 96, 3, 3), 2, 1, 1, 1),
    ((2, 64, 23, 23), (64, 64, 3, 3), 2, 2, 2, 1),       # dilated 3x3/2, odd
    # 1x1/2 on the implicit GEMM (gradients of 49 and 42 pixels): the epilogue writes the
    # value and the zeros of each 2x2 block
    ((4, 128, 14, 14), (256, 128, 1, 1), 2, 0, 1, 1),    # l4's shortcut, smaller
    ((3, 64, 13, 11), (128, 64, 1, 1), 2, 0, 1, 1),      # odd: the last blocks cut
    # 1x1 stride 1 as one batched GEMM whose A is the forward weight read M-major
    ((4, 64, 28, 28), (256, 64, 1, 1), 1, 0, 1, 1),      # l1 64->256
    ((4, 256, 16, 16), (64, 256, 1, 1), 1, 0, 1, 1),     # l1 256->64
]


def _poison():
    """Free blocks of NaN, so that an element a kernel leaves unwritten shows."""
    big = torch.full((1 << 28,), float("nan"), device="cuda", dtype=torch.bfloat16)
    small = [torch.full((1 << 19,), float("nan"), device="cuda", dtype=torch.bfloat16)
             for _ in range(4)]
    del big, small


def _data(xs, ws, stride, padding, dilation, groups, dtype):
    x = torch.randn(xs, device="cuda", dtype=dtype)
    w = torch.randn(ws, device="cuda", dtype=dtype) / (ws[1] * ws[2] * ws[3]) ** 0.5
    y = F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    dy = torch.randn_like(y)
    ref = torch.nn.grad.conv2d_input(xs, w.double(), dy.double(), stride=stride,
                                     padding=padding, dilation=dilation, groups=groups)
    return x, w, dy, ref


def _err(got, ref) -> float:
    assert got.shape == ref.shape and torch.isfinite(got).all()
    return float((got.double() - ref).norm() / ref.norm())


@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "dilation", "groups"), CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_input_gradient_through_torch_compile(xs, ws, stride, padding, dilation, groups,
                                              dtype):
    """``torch.nn.grad.conv2d_input`` (one ``aten.convolution_backward`` asking for the
    input's gradient alone) through the torch backend."""
    x, w, dy, ref = _data(xs, ws, stride, padding, dilation, groups, dtype)

    def f(dy, w):
        return torch.nn.grad.conv2d_input(xs, w, dy, stride=stride, padding=padding,
                                          dilation=dilation, groups=groups)

    torch._dynamo.reset()  # a fresh compile, so that the report below is this case's
    comp = tt.compile(f)
    _poison()
    got = comp(dy, w)
    torch.cuda.synchronize()
    # the one op left to torch: conv2d_input's placeholder input (torch.empty)
    (graph,) = tt.last_report().graphs
    assert set(graph.fallback_ops) <= {"aten.empty.memory_format"}, graph.fallback_ops
    assert _err(got, ref) < TOL[dtype]


@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "dilation", "groups"),
                         [c for c in CASES if c[0][0] <= 4])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_input_gradient_through_ts_grad(xs, ws, stride, padding, dilation, groups, dtype):
    """The ``conv2d`` adjoint: ``ts.grad`` of ``sum(conv2d(x, w) * dy)`` with respect to
    ``x``."""
    x, w, dy, ref = _data(xs, ws, stride, padding, dilation, groups, dtype)
    fn = ts.grad(lambda x, w, dy: ts.sum(ts.conv2d(x, w, stride=stride, padding=padding,
                                                   dilation=dilation, groups=groups) * dy))
    _poison()
    got = fn(x, w, dy)
    torch.cuda.synchronize()
    assert _err(got, ref) < TOL[dtype]


@pytest.mark.parametrize(("k", "st", "pd", "hw"), [
    (3, 2, 1, 28), (1, 2, 0, 28), (3, 1, 1, 28),
    # gradients of 7 x 7 pixels: the weight gradient's kernel (the output gradient, 49
    # taps) read channel-swapped by the weight relayout, no transpose kernel; the 1x1/2
    # input gradient's zeros written by the implicit GEMM's epilogue
    (3, 1, 1, 7), (3, 2, 1, 14), (1, 2, 0, 14),
])
def test_training_step_gradients(k, st, pd, hw):
    """A layer's forward and both gradients through the torch backend, bf16."""
    x = torch.randn(8, 64, hw, hw, device="cuda", dtype=torch.bfloat16).requires_grad_()
    w = (torch.randn(128, 64, k, k, device="cuda", dtype=torch.bfloat16) / (64 * k * k) ** 0.5
         ).requires_grad_()

    def f(x, w):
        return F.conv2d(x, w, stride=st, padding=pd)

    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    y64 = f(x64, w64)
    dy = torch.randn_like(y64).to(torch.bfloat16)
    y64.backward(dy.double())
    _poison()
    y = tt.compile(f)(x, w)
    y.backward(dy)
    for got, ref in ((y, y64), (x.grad, x64.grad), (w.grad, w64.grad)):
        assert _err(got, ref) < 2e-2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_reverse_is_exact(dtype):
    """``ts.flip`` of a weight, alone and through its batch-channel swap: a copy, bit for
    bit."""
    w = torch.randn(96, 40, 3, 5, device="cuda", dtype=dtype)
    a = ts.jit(lambda w: ts.flip(w, (2, 3)))(w)
    b = ts.jit(lambda w: ts.flip(ts.transpose(w, (1, 0, 2, 3)), (2, 3)))(w)
    c = ts.jit(lambda w: ts.flip(w, (0, 3)))(w)
    torch.cuda.synchronize()
    assert torch.equal(a, w.flip(2, 3))
    assert torch.equal(b, w.transpose(0, 1).flip(2, 3))
    assert torch.equal(c, w.flip(0, 3))
