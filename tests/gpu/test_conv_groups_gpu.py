"""Grouped and depthwise conv2d on the GPU against torch in float64 on fresh random
inputs, results in memory that held NaN (an unwritten element shows): the plane kernel
(at most 64 taps per output: depthwise, or a few channels per group) and the direct
kernel over a group's channels
through ts.jit, forward and both gradients through ``torch.compile(backend="tessera")``
(bf16 and f32, odd sizes), and the time of MobileNet's 56x56 depthwise 3x3 layer against
eager torch (printed; run with ``-s``). Skipped without a GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

import tessera as ts  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.models import _time_ms  # noqa: E402  (CUDA events, median)

F = torch.nn.functional
TOL = {torch.bfloat16: 1e-2, torch.float32: 1e-5}

CASES = [
    # (x shape, w shape, groups, stride, padding, dilation, bias, kernel)
    ((2, 24, 13, 17), (24, 1, 3, 3), 24, 1, 1, 1, True, "plane"),  # depthwise
    ((2, 24, 13, 17), (24, 1, 3, 3), 24, 2, 1, 1, False, "plane"),
    ((2, 24, 13, 17), (24, 1, 7, 7), 24, 1, 3, 1, True, "plane"),  # ConvNeXt's 7x7
    ((2, 12, 13, 17), (24, 1, 3, 3), 12, (2, 1), 2, 2, True, "plane"),  # multiplier 2, dilated
    ((3, 16, 70, 61), (16, 1, 3, 3), 16, 1, 1, 1, False, "plane"),  # several row blocks
    ((2, 24, 13, 17), (24, 4, 3, 3), 6, 1, 1, 1, True, "plane"),  # 4 channels per group
    ((2, 24, 13, 17), (24, 8, 3, 3), 3, 1, 1, 1, True, "conv2d"),  # 8 per group: direct
    ((2, 24, 13, 17), (48, 12, 3, 2), 2, 2, (1, 0), 1, False, "conv2d"),
    # weight-gradient shapes (few outputs, large kernels): the window kernel, its plane
    # staged in f32; at 110x110 staged as bf16 (f32: read from global memory)
    ((1, 8, 30, 31), (8, 1, 28, 29), 8, 1, 1, 1, True, "window"),
    ((1, 8, 110, 110), (8, 1, 107, 107), 8, 1, 0, 1, False, "window"),
]


def _poison() -> None:
    """Free blocks of NaN for the next allocations to come from."""
    big = torch.full((1 << 26,), float("nan"), device="cuda", dtype=torch.float32)
    small = [torch.full((1 << 18,), float("nan"), device="cuda") for _ in range(8)]
    del big, small


def _rel(got: torch.Tensor, ref: torch.Tensor) -> float:
    assert got.shape == ref.shape and bool(torch.isfinite(got).all()), "unwritten elements"
    return float((got.detach().double() - ref).norm() / ref.norm())


@pytest.mark.parametrize(("xs", "ws", "groups", "stride", "padding", "dilation", "bias", "kind"),
                         CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_grouped_conv2d_forward(xs, ws, groups, stride, padding, dilation, bias, kind, dtype):
    x = torch.randn(xs, device="cuda", dtype=dtype)
    w = torch.randn(ws, device="cuda", dtype=dtype) / (ws[1] * ws[2] * ws[3]) ** 0.5
    b = torch.randn(ws[0], device="cuda", dtype=dtype) if bias else None
    ref = F.conv2d(x.double(), w.double(), b.double() if bias else None, stride=stride,
                   padding=padding, dilation=dilation, groups=groups)
    _poison()
    if bias:
        fn = ts.jit(lambda x, w, b: ts.conv2d(x, w, b, stride=stride, padding=padding,
                                              dilation=dilation, groups=groups))
        y = fn(x, w, b)
    else:
        fn = ts.jit(lambda x, w: ts.conv2d(x, w, stride=stride, padding=padding,
                                           dilation=dilation, groups=groups))
        y = fn(x, w)
    torch.cuda.synchronize()
    target = fn.inspect_ir("target")
    assert (f"conv2d_{kind}" if kind != "conv2d" else "conv2d_0") in target
    assert _rel(y, ref) < TOL[dtype]


@pytest.mark.parametrize(("c", "o", "groups", "stride"),
                         [(24, 24, 24, 1), (24, 24, 24, 2), (24, 24, 3, 1), (12, 24, 12, 2)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_grouped_conv2d_training_through_torch_compile(c, o, groups, stride, dtype):
    """Forward, input and weight gradients (and the bias's) of a grouped convolution
    through the torch backend, no graph break, against float64 autograd."""
    import tessera.torch as tt

    def f(x, w, b):
        return F.conv2d(x, w, b, stride=stride, padding=1, groups=groups)

    x = torch.randn(2, c, 13, 17, device="cuda", dtype=dtype).requires_grad_()
    w = (torch.randn(o, c // groups, 3, 3, device="cuda", dtype=dtype)
         / (9 * c // groups) ** 0.5).requires_grad_()
    b = torch.randn(o, device="cuda", dtype=dtype).requires_grad_()
    leaves64 = [t.detach().double().requires_grad_() for t in (x, w, b)]
    y64 = f(*leaves64)
    dy = torch.randn_like(y64).to(dtype)
    y64.backward(dy.double())
    _poison()
    y = tt.compile(f)(x, w, b)
    y.backward(dy)
    torch.cuda.synchronize()
    assert tt.last_report().graph_breaks == 0
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    for got, ref in [(y, y64)] + [(t.grad, t64.grad) for t, t64 in zip((x, w, b), leaves64)]:
        assert _rel(got, ref) < tol


def test_depthwise_3x3_time_against_eager():
    """MobileNet's depthwise 3x3 layer (N=64, C=256, 56x56, bf16): correctness on these
    inputs, then the median time (CUDA events) of the plane kernel and of eager torch, and
    of a training step's backward through the torch backend, printed as a table."""
    import tessera.torch as tt

    n, c, hw = 64, 256, 56
    x = torch.randn(n, c, hw, hw, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(c, 1, 3, 3, device="cuda", dtype=torch.bfloat16) / 3
    fn = ts.jit(lambda x, w: ts.conv2d(x, w, padding=1, groups=c))
    _poison()
    y = fn(x, w)
    torch.cuda.synchronize()
    assert "conv2d_plane" in fn.inspect_ir("target")
    ref = F.conv2d(x[:4].double(), w.double(), padding=1, groups=c)
    assert _rel(y[:4], ref) < 1e-2
    ours = _time_ms(lambda: fn(x, w), 30)
    eager = _time_ms(lambda: F.conv2d(x, w, padding=1, groups=c), 30)
    gbs = 2 * x.numel() * x.element_size() / (ours * 1e-3) / 1e9

    xg = x.detach().requires_grad_()
    wg = w.detach().requires_grad_()
    dy = torch.randn_like(y)

    def conv(x, w):
        return F.conv2d(x, w, padding=1, groups=c)

    compiled = tt.compile(conv)

    def step(f):
        def run():
            xg.grad = wg.grad = None
            f(xg, wg).backward(dy)
        return run

    step(compiled)()
    assert tt.last_report().graph_breaks == 0
    train_ours = _time_ms(step(compiled), 10)
    train_eager = _time_ms(step(conv), 10)
    print("\ndepthwise 3x3, N=64 C=256 56x56 bf16 (median ms, CUDA events)")
    print(f"{'':24}{'tessera':>10}{'eager':>10}")
    print(f"{'forward':24}{ours:10.3f}{eager:10.3f}   tessera {gbs:.0f} GB/s (x read + y written)")
    print(f"{'forward + backward':24}{train_ours:10.3f}{train_eager:10.3f}")
