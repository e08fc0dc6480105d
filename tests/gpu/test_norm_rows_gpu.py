"""The norms' training row kernels on the GPU against torch in float64:
``tgraph.layernorm_fwd`` / ``tgraph.rmsnorm_fwd`` (the normalized rows and each row's
statistics from one kernel), ``tgraph.layernorm_bwd`` / ``tgraph.rmsnorm_bwd`` (the input gradient in one
pass), ``ts.grad`` of the norms, and training steps through ``torch.compile`` (the
forward's ``native_layer_norm`` and its backward; Hugging Face's written-out RMS norm). Skipped without a CUDA device."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402
import tessera.torch as tt  # noqa: E402
from tessera.frontend.ops.nn import (  # noqa: E402
    layernorm_bwd,
    layernorm_fwd,
    rmsnorm_bwd,
    rmsnorm_fwd,
)

TYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
TOL = {"bf16": 1e-2, "f16": 2e-3, "f32": 1e-5}


@pytest.mark.parametrize(
    ("shape", "elem"),
    [((25216, 768), "bf16"), ((5, 1001), "bf16"), ((3, 7, 4099), "f16"), ((9, 768), "f32"),
     ((3, 40000), "f32")],
)
def test_layernorm_fwd(shape: tuple[int, ...], elem: str) -> None:
    f = ts.jit(lambda x, w, b: layernorm_fwd(x, w, b, eps=1e-5))
    dt = TYPES[elem]
    n = shape[-1]
    x = (torch.randn(*shape, device="cuda") * 2 + 3).to(dt)
    w, b = (torch.randn(n, device="cuda").to(dt) for _ in range(2))
    y, mean, rstd = f(x, w, b)
    X = x.double()
    mu = X.mean(-1, keepdim=True)
    rs = 1 / ((X - mu) ** 2).mean(-1, keepdim=True).add(1e-5).sqrt()
    want = (X - mu) * rs * w.double() + b.double()
    assert y.dtype == dt and mean.dtype == rstd.dtype == torch.float32
    assert mean.shape == rstd.shape == (*shape[:-1], 1)
    assert float((y.double() - want).abs().max() / want.abs().max()) <= TOL[elem]
    assert float(((mean.double() - mu) / mu).abs().max()) <= 1e-5
    assert float(((rstd.double() - rs) / rs).abs().max()) <= 1e-5


@pytest.mark.parametrize(
    ("shape", "elem"),
    [((8192, 2048), "bf16"), ((5, 1001), "bf16"), ((3, 7, 4099), "f16"), ((9, 768), "f32"),
     ((3, 40000), "f32")],
)
def test_rmsnorm_fwd(shape: tuple[int, ...], elem: str) -> None:
    f = ts.jit(lambda x, w: rmsnorm_fwd(x, w, eps=1e-6))
    dt = TYPES[elem]
    x = (torch.randn(*shape, device="cuda") * 2 + 1).to(dt)
    w = torch.randn(shape[-1], device="cuda").to(dt)
    y, rstd = f(x, w)
    X = x.double()
    rs = 1 / (X**2).mean(-1, keepdim=True).add(1e-6).sqrt()
    want = X * rs * w.double()
    assert y.dtype == dt and rstd.dtype == torch.float32 and rstd.shape == (*shape[:-1], 1)
    assert float((y.double() - want).abs().max() / want.abs().max()) <= TOL[elem]
    assert float(((rstd.double() - rs) / rs).abs().max()) <= 1e-5


class _LlamaNorm(torch.nn.Module):
    """Hugging Face's LlamaRMSNorm as written there."""

    def __init__(self, d: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, h):
        dt = h.dtype
        h = h.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(dt)


class _RMSBlock(torch.nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.n1, self.n2 = _LlamaNorm(d), _LlamaNorm(d)
        self.f1, self.f2 = torch.nn.Linear(d, d), torch.nn.Linear(d, d)

    def forward(self, x):
        x = x + self.f1(self.n1(x))
        return x + self.f2(torch.nn.functional.silu(self.n2(x)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rms_norm_training_step(dtype: torch.dtype) -> None:
    """The written-out RMS norm becomes ``rmsnorm_fwd`` / ``rmsnorm_bwd``: every gradient
    against float64."""
    torch._dynamo.reset()
    torch.manual_seed(4)
    model = _RMSBlock(2048).to("cuda", dtype)
    with torch.no_grad():
        for m in (model.n1, model.n2):
            m.weight.normal_(1.0, 0.2)
    x = torch.randn(2, 512, 2048, device="cuda", dtype=dtype, requires_grad=True)
    out = tt.compile(model)(x)
    out.float().pow(2).sum().backward()
    got = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    params = {n: p.detach().double().requires_grad_() for n, p in model.named_parameters()}
    xd = x.detach().double().requires_grad_()
    ref = torch.func.functional_call(model.double(), params, (xd,))
    ref.pow(2).sum().backward()
    want = [p.grad for p in params.values()] + [xd.grad]
    tol = 3e-2 if dtype == torch.bfloat16 else 1e-4
    assert float((out.double() - ref).abs().max() / ref.abs().max()) <= tol
    for a, b in zip(got, want):
        assert float((a.double() - b).abs().max() / b.abs().max()) <= tol
    rep = tt.last_report()
    assert not rep.fallback_ops and not rep.runtime_fallbacks, str(rep)
    torch._dynamo.reset()


@pytest.mark.parametrize(
    ("shape", "elem"),
    [((25216, 768), "bf16"), ((5, 1001), "bf16"), ((3, 7, 4099), "f16"), ((9, 768), "f32"),
     ((3, 40000), "f32")],
)
@pytest.mark.parametrize("kind", ["ln", "rms"])
def test_norm_bwd(shape: tuple[int, ...], elem: str, kind: str) -> None:
    dt = TYPES[elem]
    n = shape[-1]
    x = (torch.randn(*shape, device="cuda") * 2 + 1).to(dt)
    dy = torch.randn(*shape, device="cuda").to(dt)
    w = (torch.randn(n, device="cuda") * 0.5 + 1).to(dt)
    X, DY, W = x.double(), dy.double(), w.double()
    mu = X.mean(-1, keepdim=True) if kind == "ln" else torch.zeros_like(X[..., :1])
    rstd = 1 / ((X - mu) ** 2).mean(-1, keepdim=True).add(1e-5).sqrt()
    xhat, gy = (X - mu) * rstd, DY * W
    inner = gy - xhat * (gy * xhat).mean(-1, keepdim=True)
    if kind == "ln":
        inner = inner - gy.mean(-1, keepdim=True)
    want = rstd * inner
    if kind == "ln":
        f = ts.jit(lambda dy, x, m, r, w: layernorm_bwd(dy, x, m, r, w))
        got = f(dy, x, mu.float(), rstd.float(), w)
    else:
        f = ts.jit(lambda dy, x, r, w: rmsnorm_bwd(dy, x, r, w))
        got = f(dy, x, rstd.float(), w)
    assert got.dtype == dt and got.shape == x.shape
    assert float((got.double() - want).abs().max() / want.abs().max()) <= TOL[elem]


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_grad_of_norms(norm: str) -> None:
    op = getattr(ts, norm)
    grad = ts.grad(lambda x, w: ts.sum(op(x, w) * x), argnums=(0, 1))
    x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(1024, device="cuda") * 0.3 + 1).to(torch.bfloat16)
    gx, gw = grad(x, w)
    tx, tw = (t.double().requires_grad_() for t in (x, w))
    if norm == "layernorm":
        y = torch.nn.functional.layer_norm(tx, (1024,), tw, eps=1e-5)
    else:
        y = tx / torch.sqrt((tx * tx).mean(-1, keepdim=True) + 1e-6) * tw
    (y * tx).sum().backward()
    for got, want in ((gx, tx.grad), (gw, tw.grad)):
        assert float((got.double() - want).abs().max() / want.abs().max()) <= 2e-2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_layer_norm_training_step(dtype: torch.dtype) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 768), torch.nn.LayerNorm(768), torch.nn.GELU(),
        torch.nn.Linear(768, 64),
    ).to("cuda", dtype)
    x = torch.randn(8, 197, 64, device="cuda", dtype=dtype, requires_grad=True)
    out = tt.compile(model)(x)
    out.float().pow(2).sum().backward()
    got = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    # float64 reference
    ref_model = {n: p.detach().double() for n, p in model.named_parameters()}
    xd = x.detach().double().requires_grad_()
    params = [ref_model[n].requires_grad_() for n, _ in model.named_parameters()]
    ref = torch.func.functional_call(model.double(), dict(zip(ref_model, params)), (xd,))
    ref.pow(2).sum().backward()
    want = [p.grad for p in params] + [xd.grad]
    tol = 3e-2 if dtype == torch.bfloat16 else 1e-4
    assert float((out.double() - ref).abs().max() / ref.abs().max()) <= tol
    for a, b in zip(got, want):
        assert float((a.double() - b).abs().max() / b.abs().max()) <= tol
    rep = tt.last_report()
    assert not rep.fallback_ops and not rep.runtime_fallbacks, str(rep)
    torch._dynamo.reset()


class _PreNormBlock(torch.nn.Module):
    """``x + mlp(ln(x))`` twice: each norm's input gradient joins a residual stream
    (folded into the norm's gradient kernel)."""

    def __init__(self, d: int):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.f1, self.f2 = torch.nn.Linear(d, d), torch.nn.Linear(d, d)

    def forward(self, x):
        x = x + self.f1(self.ln1(x))
        return x + self.f2(torch.nn.functional.gelu(self.ln2(x)))


def test_residual_stream_training_step() -> None:
    torch._dynamo.reset()
    torch.manual_seed(3)
    model = _PreNormBlock(768).to("cuda", torch.bfloat16)
    x = torch.randn(16, 197, 768, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    out = tt.compile(model)(x)
    out.float().pow(2).sum().backward()
    got = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    params = {n: p.detach().double().requires_grad_() for n, p in model.named_parameters()}
    xd = x.detach().double().requires_grad_()
    ref = torch.func.functional_call(model.double(), params, (xd,))
    ref.pow(2).sum().backward()
    want = [p.grad for p in params.values()] + [xd.grad]
    for a, b in zip(got, want):
        assert float((a.double() - b).abs().max() / b.abs().max()) <= 3e-2
    rep = tt.last_report()
    assert not rep.fallback_ops and not rep.runtime_fallbacks, str(rep)
    torch._dynamo.reset()


@pytest.mark.parametrize(("rows", "c", "elem"), [((128, 197), 768, "bf16"), ((8, 1024), 768, "bf16"),
                                                 ((3, 70), 64, "f32")])
def test_fused_column_sums(rows: tuple[int, int], c: int, elem: str) -> None:
    """A norm's weight and bias gradients: fused column reductions (the vector kernel)."""
    dt = TYPES[elem]
    f = ts.jit(lambda dy, x, m, r: (
        ts.sum(ts.cast(dy, ts.f32) * ((ts.cast(x, ts.f32) - m) * r), axis=(0, 1)),
        ts.sum(ts.cast(dy, ts.f32) * 2.0, axis=(0, 1))))
    dy = torch.randn(*rows, c, device="cuda").to(dt)
    x = torch.randn(*rows, c, device="cuda").to(dt)
    m = torch.randn(*rows, 1, device="cuda")
    r = torch.rand(*rows, 1, device="cuda") + 0.5
    gw, gb = f(dy, x, m, r)
    terms = dy.double() * (x.double() - m.double()) * r.double()
    for got, want, scale in ((gw, terms.sum((0, 1)), terms.abs().sum((0, 1))),
                             (gb, 2 * dy.double().sum((0, 1)), 2 * dy.double().abs().sum((0, 1)))):
        assert bool(((got.double() - want).abs() <= 1e-5 * scale + 1e-6).all())
