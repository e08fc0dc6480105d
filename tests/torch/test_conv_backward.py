"""``aten.convolution_backward`` through the torch backend: the input gradient is one
stride-1 convolution of the undilated output gradient (stride phases as output
channels, :mod:`tessera.autodiff.conv_grad`), the weight's flip one ``tgraph.reverse``.
Random configurations against eager float64, and the backward graph's ops counted."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

import tessera.torch as tt
from tests.autodiff.test_conv_grad import random_config


def _grads(f, *ts):
    out = f(*ts)
    out.pow(2).sum().backward()
    got = [t.grad.clone() for t in ts]
    for t in ts:
        t.grad = None
    return got


@pytest.mark.parametrize("seed", range(8))
def test_random_convolutions_match_eager_float64(seed):
    """Both gradients of random convolutions (stride 1-3, padding 0-3, dilation 1-2,
    kernels 1-7, groups and depthwise, odd sizes, batches 1-3), no graph break."""
    rng = random.Random(seed)
    xs, ws, s, p, d, groups = random_config(rng)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*xs, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.randn(*ws, dtype=torch.float64, generator=gen, requires_grad=True)

    def f(x, w):
        return F.conv2d(x, w, stride=s, padding=p, dilation=d, groups=groups)

    got = _grads(tt.compile(f), x, w)
    assert tt.last_report().graph_breaks == 0
    want = _grads(f, x, w)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def _backward_ir(tmp_path, monkeypatch, f, *ts) -> tuple[str, list[torch.Tensor]]:
    """The backward graph's Graph IR (optimized) and the gradients of ``ts``."""
    monkeypatch.setenv("TESSERA_DUMP_DIR", str(tmp_path))
    got = _grads(tt.compile(f), *ts)
    (graph,) = tmp_path.glob("*backward*/*-graph.mlir")
    return graph.read_text(), got


@pytest.mark.parametrize("kernel,stride,padding,convs,reverses,slices", [
    (3, 1, 1, 2, 1, 0),  # ResNet's 3x3: the flip is one reverse (was 6 slices + 2 concats)
    # 3x3/2: both phases of both axes from one 2x2-tap convolution; one crop of each
    # gradient (the input's phases start a row early, the weight gradient's convolution
    # has a fourth row and column)
    (3, 2, 1, 2, 1, 2),
    # 1x1/2: the product at the reached pixels, zeros by one select (the slice: the
    # weight gradient's view of the reached input pixels)
    (1, 2, 0, 1, 0, 1),
])
def test_backward_has_no_dilated_gradient(tmp_path, monkeypatch, kernel, stride, padding,
                                          convs, reverses, slices):
    """The backward of a ResNet layer: no concat or slice of the output gradient
    (no stride dilation), one reverse of the weight, one convolution per gradient
    (the 1x1 weight gradient is a batched product)."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 8, 14, 14, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.randn(16, 8, kernel, kernel, dtype=torch.float64, generator=gen,
                    requires_grad=True)

    def f(x, w):
        return F.conv2d(x, w, stride=stride, padding=padding)

    ir, got = _backward_ir(tmp_path, monkeypatch, f, x, w)
    assert ir.count("tgraph.conv2d") == convs, ir
    assert ir.count("tgraph.reverse") == reverses, ir
    # the 3x3/2's weight is padded by a zero row and column (two weight-sized concats)
    assert ir.count("tgraph.concat") == (2 if stride == 2 and kernel == 3 else 0), ir
    assert ir.count("tgraph.slice") == slices, ir
    assert ir.count("tgraph.select") == (1 if kernel == 1 else 0), ir
    want = _grads(f, x, w)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stride,padding,dilation,groups,bias", [
    (1, 1, 1, 1, True),   # Whisper's first convolution: kernel 3, padding 1
    (2, 1, 1, 1, False),  # Whisper's second: stride 2
    (5, 0, 1, 1, False),  # wav2vec2's feature encoder: kernel 10 / stride 5 style
    (1, 4, 2, 4, True),   # wav2vec2's grouped positional convolution, with dilation
])
def test_conv1d_forward_and_gradients_match_eager_float64(stride, padding, dilation, groups,
                                                            bias):
    """``F.conv1d`` and its backward as the 2-D convolution over one row: the output and
    the input, weight and bias gradients, no graph break."""
    gen = torch.Generator().manual_seed(stride * 7 + groups)
    x = torch.randn(2, 8, 23, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.randn(12, 8 // groups, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    b = torch.randn(12, dtype=torch.float64, generator=gen, requires_grad=True)

    def f(x, w, *b):
        return F.conv1d(x, w, *b, stride=stride, padding=padding, dilation=dilation,
                        groups=groups)

    args = (x, w, b) if bias else (x, w)
    torch.testing.assert_close(tt.compile(f)(*args), f(*args), rtol=1e-12, atol=1e-12)
    torch._dynamo.reset()
    got = _grads(tt.compile(f), *args)
    assert tt.last_report().graph_breaks == 0, str(tt.last_report())
    want = _grads(f, *args)
    for a, c in zip(got, want):
        torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-12)
