"""``torch.compile(backend="tessera")``: FX graphs through AOTAutograd into Tessera.

Each test compiles a small module, checks the forward result and the parameter
gradients of one backward pass against eager torch, and checks the report:
which ops Tessera ran and which fell back to eager torch.
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

import tessera.torch as tt
from tessera.torch import aten_ops


def _run(model: nn.Module, *inputs: torch.Tensor, dynamic: bool | None = None):
    """(compiled output, eager output, compiled grads, eager grads) of ``model``."""
    ref_model = copy.deepcopy(model)
    compiled = tt.compile(model, dynamic=dynamic)
    out = compiled(*inputs)
    ref = ref_model(*inputs)
    out.float().pow(2).sum().backward()
    ref.float().pow(2).sum().backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    ref_grads = {n: p.grad for n, p in ref_model.named_parameters()}
    return out, ref, grads, ref_grads


def _assert_close(out, ref, grads, ref_grads, rtol=1e-5, atol=1e-6):
    torch.testing.assert_close(out, ref, rtol=rtol, atol=atol)
    scale = max(g.abs().max().item() for g in ref_grads.values())
    for n, g in ref_grads.items():
        torch.testing.assert_close(grads[n], g, rtol=rtol, atol=atol * max(scale, 1.0), msg=n)


class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.norm = nn.LayerNorm(32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        h = self.norm(F.gelu(self.fc1(x)))
        return torch.log_softmax(self.fc2(F.silu(h)), dim=-1) + torch.sigmoid(h).mean(-1, keepdim=True)


def test_mlp_forward_and_gradients_match_eager():
    torch.manual_seed(0)
    _assert_close(*_run(_MLP(), torch.randn(5, 8)))
    rep = tt.last_report()
    assert [g.kind for g in rep.graphs] == ["forward", "backward"]
    assert rep.graph_breaks == 0 and not rep.fallback_ops
    assert rep.partitions == 2 and rep.tessera_ops > 20


def test_backend_is_registered_under_its_name():
    torch.manual_seed(0)
    m = _MLP()
    x = torch.randn(3, 8)
    tt.reset()
    out = torch.compile(m, backend="tessera")(x)
    torch.testing.assert_close(out, m(x), rtol=1e-5, atol=1e-6)
    assert tt.last_report().partitions >= 1


def test_float64_is_exact_to_rounding():
    """In float64 everything is Tessera's, the exact GELU's erf included, and agrees with
    torch to rounding."""
    torch.manual_seed(0)
    m = _MLP().double()
    _assert_close(*_run(m, torch.randn(5, 8, dtype=torch.float64)), rtol=1e-12, atol=1e-12)
    assert not tt.last_report().fallback_ops


class _CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv1(x)))
        h = torch.relu(self.conv2(h))
        return self.fc(torch.flatten(self.pool(h), 1))


def test_cnn_training_step_matches_eager():
    torch.manual_seed(0)
    m = _CNN()
    x = torch.randn(2, 3, 8, 8)
    res = _run(m, x)
    _assert_close(*res, rtol=1e-4, atol=1e-5)
    rep = tt.last_report()
    assert [g.kind for g in rep.graphs] == ["forward", "backward"]
    assert rep.graph_breaks == 0, str(rep)  # conv2d and its backward, batch norm, pooling


@pytest.mark.parametrize(
    "kernel, stride, padding, size, dilation",
    [(3, 1, 1, 8, 1), (3, 2, 1, 9, 1), (7, 2, 3, 16, 1), (1, 2, 0, 7, 1), (4, 4, 0, 16, 1),
     (3, 2, 0, 8, 1),
     # windows that do not overlap: the weight gradient is one GEMM over the patches
     (4, 4, 0, 10, 1), (3, 3, 1, 9, 1), (2, 3, 1, 8, 1), (2, 5, 2, 11, 1),
     # padding beyond the kernel; dilated kernels (dilation, then stride and dilation)
     (3, 1, 4, 8, 1), ((3, 2), 1, (1, 0), 11, (2, 1)), (3, (2, 1), 2, 12, 2),
     # pointwise: the product first, then the zeros between reached pixels
     (1, 1, 0, 5, 1), (1, 2, 1, 9, 1), (1, (3, 2), 0, 8, 1),
     # pointwise kernels over 8 x 9 pixels, plain and strided
     (1, 1, 0, 8, 1), (1, 2, 0, 16, 1),
     ((2, 3), 3, 0, 13, (3, 2))],
)
def test_convolution_backward_as_convolutions(kernel, stride, padding, size, dilation):
    g = torch.Generator().manual_seed(0)
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    x = torch.randn(2, 3, size, size + 1, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(4, 3, kh, kw, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, generator=g, requires_grad=True)

    def f(x, w, b):
        return F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation)

    tt.compile(f)(x, w, b).pow(2).sum().backward()
    got = [t.grad.clone() for t in (x, w, b)]
    assert tt.last_report().graph_breaks == 0
    for t in (x, w, b):
        t.grad = None
    f(x, w, b).pow(2).sum().backward()
    for a, t in zip(got, (x, w, b)):
        torch.testing.assert_close(a, t.grad, rtol=1e-12, atol=1e-12)


def test_patch_embedding_backward_is_one_gemm_without_input_gradient(tmp_path, monkeypatch):
    """A stride-equal-kernel convolution of an input that needs no gradient (an image):
    the backward has no convolution and no dilated gradient, only the patch GEMM."""
    monkeypatch.setenv("TESSERA_DUMP_DIR", str(tmp_path))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 3, 12, 12, dtype=torch.float64, generator=g)
    w = torch.randn(5, 3, 4, 4, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, generator=g, requires_grad=True)

    def f(x, w, b):
        return F.conv2d(x, w, b, stride=4)

    tt.compile(f)(x, w, b).pow(2).sum().backward()
    got = [w.grad.clone(), b.grad.clone()]
    rep = tt.last_report()
    assert rep.graph_breaks == 0
    assert [gr.kind for gr in rep.graphs] == ["forward", "backward"]
    (graph,) = tmp_path.glob("*backward*/*-graph.mlir")
    ir = graph.read_text()
    assert "tgraph.conv2d" not in ir and "tgraph.concat" not in ir, ir
    assert ir.count("tgraph.matmul") == 1, ir
    w.grad = b.grad = None
    f(x, w, b).pow(2).sum().backward()
    torch.testing.assert_close(got[0], w.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got[1], b.grad, rtol=1e-12, atol=1e-12)


def test_pointwise_weight_gradient_is_one_batched_product(tmp_path, monkeypatch):
    """A 1x1 convolution's weight gradient multiplies each image's gradient by its input
    as stored (a batched product, f32 partials summed over the batch): no transposed
    copies of either. (With fewer than 64 output channels, or rows of no 16-byte
    multiple, it keeps the one product over transposed copies.)"""
    monkeypatch.setenv("TESSERA_DUMP_DIR", str(tmp_path))
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 6, 8, 8, dtype=torch.bfloat16, generator=g)
    w = torch.randn(64, 6, 1, 1, dtype=torch.bfloat16, generator=g, requires_grad=True)
    tt.compile(lambda x, w: F.conv2d(x, w))(x, w).float().pow(2).sum().backward()
    got = w.grad.clone()
    (graph,) = tmp_path.glob("*backward*/*-graph.mlir")
    ir = graph.read_text()
    assert "tgraph.transpose" not in ir, ir
    assert "tensor<3x64x64xbf16>, tensor<3x6x64xbf16>) -> tensor<3x64x6xf32>" in ir, ir
    w64 = w.detach().double().requires_grad_()
    F.conv2d(x.double(), w64).pow(2).sum().backward()
    err = (got.double() - w64.grad).abs().max() / w64.grad.abs().max()
    assert err < 1e-2, err


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_16bit_gelu_and_its_backward_round_once(tmp_path, monkeypatch, approximate):
    """Exact GELU and both GELU backwards of 16-bit tensors compute their several steps in
    f32 and round once, as torch does (within one bf16 rounding of eager)."""
    monkeypatch.setenv("TESSERA_DUMP_DIR", str(tmp_path))
    g = torch.Generator().manual_seed(5)
    x = torch.randn(64, 96, generator=g).to(torch.bfloat16).requires_grad_()
    dy = torch.randn(64, 96, generator=g).to(torch.bfloat16)

    def f(x):
        return F.gelu(x, approximate=approximate)

    y = tt.compile(f)(x)
    y.backward(dy)
    got = x.grad.clone()
    x.grad = None
    ref = f(x)
    ref.backward(dy)
    torch.testing.assert_close(y, ref, rtol=2**-7, atol=2**-7)
    torch.testing.assert_close(got, x.grad, rtol=2**-7, atol=2**-7)
    (graph,) = tmp_path.glob("*backward*/*-graph.mlir")
    ir = graph.read_text()
    assert ir.count("tgraph.cast") >= 1 and "x96xf32>" in ir, ir


@pytest.mark.parametrize(
    "c, o, groups, kernel, stride, padding, dilation, mask",
    [(6, 6, 6, 3, 1, 1, 1, (True, True, True)),  # depthwise
     (6, 6, 6, 3, 2, 1, 1, (True, True, False)),
     (4, 8, 4, 3, 1, 2, 2, (True, True, True)),  # channel multiplier 2, dilated
     (4, 6, 2, (3, 2), (2, 1), (1, 0), 1, (True, True, True)),
     (8, 8, 4, 3, 2, 0, (1, 2), (False, True, True)),  # an input needing no gradient
     (8, 12, 4, 1, 1, 0, 1, (True, True, False)),  # pointwise grouped
     (8, 8, 2, 1, 2, 1, 1, (True, False, False)),
     (6, 6, 6, 7, 1, 3, 1, (True, True, True))],
)
def test_grouped_convolution_forward_and_backward(c, o, groups, kernel, stride, padding,
                                                  dilation, mask):
    """Grouped and depthwise convolutions and both their gradients (the input's a grouped
    transposed convolution, the weight's per-image partials summed over the batch) in
    float64 against eager, with no graph break; only the gradients asked for."""
    g = torch.Generator().manual_seed(7)
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    x = torch.randn(2, c, 9, 10, dtype=torch.float64, generator=g, requires_grad=mask[0])
    w = torch.randn(o, c // groups, kh, kw, dtype=torch.float64, generator=g,
                    requires_grad=mask[1])
    b = torch.randn(o, dtype=torch.float64, generator=g, requires_grad=mask[2])

    def f(x, w, b):
        return F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation,
                        groups=groups)

    out = tt.compile(f)(x, w, b)
    torch.testing.assert_close(out, f(x, w, b), rtol=1e-12, atol=1e-12)
    out.pow(2).sum().backward()
    rep = tt.last_report()
    assert rep.graph_breaks == 0, str(rep)
    assert [gr.kind for gr in rep.graphs] == ["forward", "backward"]
    leaves = [t for t in (x, w, b) if t.requires_grad]
    got = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    f(x, w, b).pow(2).sum().backward()
    for a, t in zip(got, leaves):
        torch.testing.assert_close(a, t.grad, rtol=1e-12, atol=1e-12)


def test_depthwise_weight_gradient_is_per_image_partials(tmp_path, monkeypatch):
    """A depthwise convolution's weight gradient reads the input and the output gradient
    as they are stored (reshapes, no transposed copies): one grouped convolution with a
    partial per (image, channel), summed over the batch."""
    monkeypatch.setenv("TESSERA_DUMP_DIR", str(tmp_path))
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 5, 11, 12, dtype=torch.float64, generator=g)
    w = torch.randn(5, 1, 3, 3, dtype=torch.float64, generator=g, requires_grad=True)

    def f(x, w):
        return F.conv2d(x, w, padding=1, groups=5)

    tt.compile(f)(x, w).pow(2).sum().backward()
    got = w.grad.clone()
    (graph,) = tmp_path.glob("*backward*/*-graph.mlir")
    ir = graph.read_text()
    assert "tgraph.transpose" not in ir, ir
    assert "groups = 15 : tensor<1x15x11x12xf64>, tensor<15x1x11x12xf64>" in ir, ir
    w.grad = None
    f(x, w).pow(2).sum().backward()
    torch.testing.assert_close(got, w.grad, rtol=1e-12, atol=1e-12)


class _DepthwiseBlock(nn.Module):
    """MobileNet's block: depthwise 3x3 -> batch norm -> relu -> pointwise 1x1."""

    def __init__(self, c: int = 8, o: int = 16, stride: int = 1):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, stride=stride, padding=1, groups=c, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.pw = nn.Conv2d(c, o, 1)

    def forward(self, x):
        return self.pw(torch.relu(self.bn(self.dw(x))))


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_block_training_step_matches_eager(stride):
    torch.manual_seed(0)
    m = _DepthwiseBlock(stride=stride)
    x = torch.randn(2, 8, 13, 17)
    res = _run(m, x)
    _assert_close(*res, rtol=1e-4, atol=1e-5)
    rep = tt.last_report()
    assert [g.kind for g in rep.graphs] == ["forward", "backward"]
    assert rep.graph_breaks == 0, str(rep)


def test_weight_gradient_is_one_convolution_of_the_undilated_gradient(tmp_path, monkeypatch):
    """A strided convolution's weight gradient reads the output gradient as it is (the
    convolution's dilation takes the stride): no zeros interleaved into it."""
    monkeypatch.setenv("TESSERA_DUMP_DIR", str(tmp_path))
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 15, 15, dtype=torch.float64, generator=g)
    w = torch.randn(4, 3, 7, 7, dtype=torch.float64, generator=g, requires_grad=True)

    def f(x, w):
        return F.conv2d(x, w, stride=2, padding=3)

    tt.compile(f)(x, w).pow(2).sum().backward()
    got = w.grad.clone()
    (graph,) = tmp_path.glob("*backward*/*-graph.mlir")
    ir = graph.read_text()
    assert ir.count("tgraph.conv2d") == 1 and "dilation = [2, 2]" in ir, ir
    assert "tgraph.concat" not in ir, ir
    w.grad = None
    f(x, w).pow(2).sum().backward()
    torch.testing.assert_close(got, w.grad, rtol=1e-12, atol=1e-12)


def test_cnn_eval_mode_uses_running_statistics():
    torch.manual_seed(0)
    m = _CNN()
    m.bn.running_mean.uniform_(-0.5, 0.5)
    m.bn.running_var.uniform_(0.5, 2.0)
    m.eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        out = tt.compile(m)(x)
    torch.testing.assert_close(out, m(x), rtol=1e-5, atol=1e-6)
    assert [g.kind for g in tt.last_report().graphs] == ["inference"]


class _Attention(nn.Module):
    def __init__(self, heads=4, kv_heads=2, dim=32, causal=True):
        super().__init__()
        self.h, self.kv, self.d, self.causal = heads, kv_heads, dim // heads, causal
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, kv_heads * self.d)
        self.v = nn.Linear(dim, kv_heads * self.d)
        self.o = nn.Linear(dim, dim)

    def forward(self, x, mask=None):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.h, self.d).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv, self.d).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=self.causal and mask is None,
            enable_gqa=self.kv != self.h,
        )
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_attention_becomes_flash_attention_and_its_backward_is_translated(kv_heads):
    torch.manual_seed(0)
    m = _Attention(kv_heads=kv_heads)
    _assert_close(*_run(m, torch.randn(2, 6, 32)), rtol=1e-4, atol=1e-5)
    rep = tt.last_report()
    assert rep.graph_breaks == 0, str(rep)


def test_attention_with_an_additive_mask():
    torch.manual_seed(0)
    m = _Attention(kv_heads=4, causal=False)
    x = torch.randn(2, 5, 32)
    mask = torch.randn(2, 1, 5, 5)
    ref_m = copy.deepcopy(m)
    out = tt.compile(m)(x, mask)
    torch.testing.assert_close(out, ref_m(x, mask), rtol=1e-5, atol=1e-6)


class _WithSort(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        h = self.fc(x)
        top, _ = torch.sort(h, dim=-1)
        return torch.tanh(top) * 2.0


def test_unsupported_ops_run_in_torch_and_are_counted(caplog):
    torch.manual_seed(0)
    with caplog.at_level(logging.INFO, logger="tessera.torch"):
        _assert_close(*_run(_WithSort(), torch.randn(3, 6)))
    rep = tt.last_report()
    assert rep.fallback_ops["aten.sort.default"] == 1
    assert rep.graphs[0].partitions == 2  # linear | sort | tanh * 2
    assert rep.graph_breaks >= 1
    assert any("aten.sort.default x1" in r.getMessage() for r in caplog.records)
    assert "aten.sort.default" in str(rep)


def test_bfloat16_within_bf16_tolerance():
    torch.manual_seed(0)
    m = _MLP().to(torch.bfloat16)
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    with torch.no_grad():
        out = tt.compile(m)(x)
        ref = m.float()(x.float())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=3e-2, atol=3e-2)


def test_dynamic_sequence_lengths_reuse_the_graph_and_stay_correct():
    torch.manual_seed(0)
    m = _Attention(kv_heads=4)
    compiled = tt.compile(m, dynamic=True)
    for s in (5, 9, 12):
        x = torch.randn(2, s, 32)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), m(x), rtol=1e-5, atol=1e-6)
    rep = tt.last_report()
    assert len(rep.graphs) == 1  # one symbolic graph for every length
    part = rep.graphs[0]
    assert part.tessera_calls >= 3


def test_every_rule_target_is_an_aten_or_prims_op():
    """... or one of Tessera's own ops that its decompositions put in graphs."""
    for target in aten_ops.RULES:
        name = getattr(target, "namespace", None)
        assert name in ("aten", "prims", "tessera") or target.__module__ == "_operator"


def test_exact_gelu_uses_erf_to_float32_precision():
    x = torch.linspace(-6, 6, 101, dtype=torch.float32, requires_grad=True)
    f = tt.compile(lambda t: F.gelu(t))
    y = f(x)
    y.sum().backward()
    assert tt.last_report().graph_breaks == 0
    xr = x.detach().double().requires_grad_()
    yr = F.gelu(xr)
    yr.sum().backward()
    torch.testing.assert_close(y.double(), yr, rtol=0, atol=1e-6)
    torch.testing.assert_close(x.grad.double(), xr.grad, rtol=0, atol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_fused_attention_backwards_recompute_exactly(causal, kv_heads):
    """The decompositions of the fused attention backwards (CPU flash, CUDA flash,
    memory-efficient, cuDNN) equal autograd through plain attention, in float64."""
    from tessera.torch.backend import ATTENTION_BACKWARDS

    aten = torch.ops.aten
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 5, 8, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(2, kv_heads, 5, 8, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(2, kv_heads, 5, 8, dtype=torch.float64, generator=g, requires_grad=True)
    bias = torch.randn(2, 1, 5, 5, dtype=torch.float64, generator=g)
    go = torch.randn(2, 4, 5, 8, dtype=torch.float64, generator=g)

    def reference(mask):
        for t in (q, k, v):
            t.grad = None
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=kv_heads != 4, scale=0.3
        )
        out.backward(go)
        return [t.grad.clone() for t in (q, k, v)]

    qd, kd, vd = q.detach(), k.detach(), v.detach()
    none = torch.empty(0)
    calls = {
        aten._scaled_dot_product_flash_attention_for_cpu_backward.default: (
            (go, qd, kd, vd, none, none, 0.0, causal), {"scale": 0.3}, None),
        aten._scaled_dot_product_flash_attention_backward.default: (
            (go, qd, kd, vd, none, none, none, none, 5, 5, 0.0, causal, none, none),
            {"scale": 0.3}, None),
        aten._scaled_dot_product_efficient_attention_backward.default: (
            (go, qd, kd, vd, bias, none, none, none, none, 0.0, [True, True, True, False],
             causal), {"scale": 0.3}, bias),
        aten._scaled_dot_product_cudnn_attention_backward.default: (
            (go, qd, kd, vd, none, none, none, none, bias, none, none, 5, 5, 0.0, causal),
            {"scale": 0.3}, bias),
    }
    for op, (args, kwargs, mask) in calls.items():
        got = ATTENTION_BACKWARDS[op](*args, **kwargs)[:3]
        for a, r in zip(got, reference(mask)):
            torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12, msg=str(op))


@pytest.mark.parametrize("kernel, stride, padding", [(3, 2, 1), (2, 2, 0), (3, 1, 1), (3, 2, 0),
                                                     (2, 3, 0), (3, 3, 1), (5, 2, 2),
                                                     ((3, 2), (1, 2), (1, 0))])
def test_max_pool_and_its_backward_pick_torchs_first_maximum(kernel, stride, padding):
    """After a ReLU, windows of zeros tie: the gradient goes to the first maximum in
    torch's scan order, as its indices say."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 9, 10, dtype=torch.float64, generator=g, requires_grad=True)

    def f(x):
        return F.max_pool2d(torch.relu(x), kernel, stride, padding, return_indices=True)

    out, idx = tt.compile(f)(x)
    weights = torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape)
    (out * weights).sum().backward()
    got = x.grad.clone()
    assert tt.last_report().graph_breaks == 0
    x.grad = None
    ref, ref_idx = f(x)
    (ref * weights).sum().backward()
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.testing.assert_close(idx, ref_idx, rtol=0, atol=0)
    torch.testing.assert_close(got, x.grad, rtol=0, atol=0)


@pytest.mark.parametrize("kernel, stride, padding", [(3, 2, 1), (2, 2, 0), (3, 1, 1)])
def test_max_pool_nan_and_minus_infinity_windows_follow_torch(kernel, stride, padding):
    """A window with NaNs gives NaN and the index of its last NaN (torch's kernels take
    every NaN they meet); a window of ``-inf`` gives ``-inf`` and the index of its first
    cell inside the image, never one in the padding. The gradient follows the index."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 2, 8, 9, dtype=torch.float64, generator=g)
    x[0, 0, 1, 1] = x[0, 0, 2, 3] = float("nan")
    x[0, 1, :4, :4] = float("-inf")
    x[0, 1, 6, 7] = float("nan")
    x.requires_grad_()

    def f(x):
        return F.max_pool2d(x, kernel, stride, padding, return_indices=True)

    out, idx = tt.compile(f)(x)
    weights = torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape)
    (torch.nan_to_num(out, nan=0.0, neginf=0.0) * weights).sum().backward()
    got = x.grad.clone()
    x.grad = None
    ref, ref_idx = f(x)
    (torch.nan_to_num(ref, nan=0.0, neginf=0.0) * weights).sum().backward()
    torch.testing.assert_close(out, ref, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(idx, ref_idx, rtol=0, atol=0)
    torch.testing.assert_close(got, x.grad, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_max_pool_backward_sums_overlaps_in_f32(dtype):
    """Overlapping 3x3/2 windows send up to four gradients to one cell: they are summed
    in f32 and rounded once, as torch's kernels accumulate."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 4, 12, 12, generator=g).round().to(dtype).requires_grad_()  # many ties
    dy = torch.randn(2, 4, 6, 6, generator=g).to(dtype)

    def f(x):
        return F.max_pool2d(x, 3, 2, 1)

    tt.compile(f)(x).backward(dy)
    got = x.grad.clone()
    x.grad = None
    x64 = x.detach().double().requires_grad_()
    out64, idx = F.max_pool2d(x64, 3, 2, 1, return_indices=True)
    _, want_idx = F.max_pool2d(x.detach(), 3, 2, 1, return_indices=True)
    assert torch.equal(idx, want_idx)
    out64.backward(dy.double())
    # bf16: four bf16 gradients add exactly in f32, so one rounding gives the exact sum's
    tol = 0 if dtype == torch.bfloat16 else 3e-7
    torch.testing.assert_close(got, x64.grad.to(dtype), rtol=tol, atol=tol)


def test_a_partition_that_cannot_be_traced_runs_in_torch_and_is_reported(monkeypatch):
    """A rule that gives up at trace time sends its partition to torch, with the reason
    in the report: the result is still right."""
    original = aten_ops.RULES[torch.ops.aten.tanh.default]

    def refuse(node, *args, **kwargs):
        raise aten_ops.Unsupported("tanh refused for the test")

    monkeypatch.setitem(
        aten_ops.RULES, torch.ops.aten.tanh.default,
        aten_ops.Rule(refuse, original.check, original.compute),
    )
    x = torch.randn(3, 4)
    out = tt.compile(lambda t: torch.tanh(t * 2.0) + 1.0)(x)
    torch.testing.assert_close(out, torch.tanh(x * 2.0) + 1.0)
    (why,) = tt.last_report().runtime_fallbacks.values()
    assert "tanh refused for the test" in why


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind, dims, keep", [
    ("sum", (0, 2, 3), False), ("mean", (0, 2, 3), True), ("amax", (0, 2), False),
    ("sum", (1, 3), True), ("amin", (0, 3), False),
])
def test_reductions_over_axes_apart_match_float64(kind, dims, keep, dtype):
    """Axes apart with the last reduced (a batch norm's statistics and their gradients)
    are two reductions: the trailing run, then the rest; 16-bit sums in f32."""
    torch.manual_seed(0)
    x = torch.randn(3, 5, 4, 7).to(dtype)

    def f(t):
        return getattr(torch, kind)(t, dim=dims, keepdim=keep)

    got = torch.compile(f, backend="tessera")(x)
    ref = f(x.double())
    assert got.dtype == dtype and got.shape == ref.shape
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(got.double(), ref, rtol=tol, atol=tol)


def test_views_of_weights_are_made_in_the_backward(monkeypatch):
    """A linear layer's ``t(weight)``, read by the backward, is not saved by the forward
    (a Tessera partition would return it as a copy): the backward makes it from the
    weight, which the forward saves instead; the gradients match eager."""
    import importlib

    backend = importlib.import_module("tessera.torch.backend")  # the module, not the function

    forwards = []
    real = backend.default_partition

    def spy(joint, inputs, **kw):
        fw, bw = real(joint, inputs, **kw)
        forwards.append(fw)
        return fw, bw

    monkeypatch.setattr(backend, "default_partition", spy)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 8)).double()
    x = torch.randn(4, 16, dtype=torch.float64, requires_grad=True)
    tt.compile(m)(x).pow(2).sum().backward()
    got = [p.grad.clone() for p in m.parameters()] + [x.grad.clone()]
    for p in m.parameters():
        p.grad = None
    x.grad = None
    m(x).pow(2).sum().backward()
    for a, b in zip(got, [p.grad for p in m.parameters()] + [x.grad]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    (fw,) = forwards
    out = next(n for n in fw.graph.nodes if n.op == "output")
    saved = [a for a in out.args[0] if isinstance(a, torch.fx.Node)]
    # no saved view but reshapes of the saved tensors made by torch (no copies)
    assert not [a for a in saved if a.op == "call_function" and a.target in backend.VIEW_OPS
                and a.target is not torch.ops.aten.reshape.default]
    weights = [n for n in fw.graph.nodes if n.op == "placeholder"
               and tuple(n.meta["val"].shape) in ((32, 16), (8, 32))]
    assert len(weights) == 2 and all(w in saved for w in weights)


def test_views_of_one_result_are_made_by_torch():
    """Results that view one intermediate (or an input) are reshapes made by torch, not
    copies returned by the partition: the partition's results share no memory, and the
    values are the eager ones."""
    from tessera.torch import report
    from tessera.torch.partition import TesseraPartition, partition, views_of_results_in_torch

    def f(x, w):
        h = torch.relu(x @ w)
        return h.view(4, 2, 8), h.view(-1), x.view(-1)

    x, w = torch.randn(8, 16, dtype=torch.float64), torch.randn(16, 8, dtype=torch.float64)
    gm = make_fx(f)(x, w)
    probe = make_fx(f)(x, w)
    assert len(views_of_results_in_torch(probe)) == 2  # h.view(-1) of the first, x.view(-1)
    fused = partition(gm, "views", report.GraphReport(name="views", kind="inference"))
    parts = [m for m in fused.modules() if isinstance(m, TesseraPartition)]
    assert len(parts) == 1
    got = fused(x, w)
    want = f(x, w)
    # the product is Tessera's (its own summation order): eager's values to f64 rounding
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert torch.equal(got[1], got[0].reshape(-1)) and torch.equal(got[2], x.reshape(-1))
    assert got[1].data_ptr() == got[0].data_ptr()  # a view of the partition's result
    assert got[2].data_ptr() == x.data_ptr()  # a view of the input


def test_mode_reduce_overhead_runs_partitions_with_cuda_graphs_requested(monkeypatch):
    """``mode="reduce-overhead"`` (torch.compile passes it to the backend) runs every
    partition inside ``cuda_graphs.requested_here()``, forward and backward; the default
    mode does not. On the CPU reference nothing else changes."""
    from tessera.runtime import cuda_graphs
    from tessera.torch.partition import TesseraPartition

    seen: list[bool] = []
    forward = TesseraPartition.forward

    def spy(self, *args):
        seen.append(cuda_graphs.requested())
        return forward(self, *args)

    monkeypatch.setattr(TesseraPartition, "forward", spy)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    x = torch.randn(4, 6)
    ref = copy.deepcopy(model)
    out = torch.compile(model, backend="tessera", mode="reduce-overhead")(x)
    out.pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    assert len(seen) >= 2 and all(seen)  # forward and backward partitions
    torch.testing.assert_close(out, ref(x), rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    seen.clear()
    torch._dynamo.reset()
    torch.compile(model, backend="tessera")(x)
    assert seen and not any(seen)
    assert not cuda_graphs.requested()


@pytest.mark.parametrize("kw,match", [
    ({"mode": "max-autotune"}, "mode 'max-autotune' is not supported"),
    ({"options": {"shape_padding": True}}, r"options \['shape_padding'\] are not supported"),
])
def test_modes_and_options_the_backend_lacks_are_errors(kw, match):
    """A mode or options the backend does not have fail the compile, naming them, instead
    of being ignored."""
    f = torch.compile(lambda x: x.sin() * 2, backend="tessera", **kw)
    with pytest.raises(Exception, match=match):
        f(torch.randn(5))
