"""RMS norms under ``torch.compile(backend="tessera")``: the written-out pattern of
Hugging Face's ``LlamaRMSNorm`` / ``T5LayerNorm`` and ``nn.RMSNorm`` become
``tessera::rms_norm`` (``tgraph.rmsnorm_fwd`` forward, ``tgraph.rmsnorm_bwd`` backward).

Outputs and gradients are checked against float64 on fresh random inputs (CPU: Tessera's
reference interpreter), next to eager torch's own error in the same dtype. Patterns the
rewrite must not take (a weight of another dtype, an intermediate used elsewhere) are
left as written and still give eager's values.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import tessera.torch as tt
from tessera.torch import rules_nn
from tessera.torch.rms_norm import fuse_rms_norm, rms_norm_backward, rms_norm_rows


class LlamaStyle(nn.Module):
    """Hugging Face's LlamaRMSNorm, written as it is there."""

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class T5Style(nn.Module):
    """Hugging Face's T5LayerNorm: the f32 variance times the input itself."""

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


class SquareByProduct(nn.Module):
    """``x * x`` for the square, ``torch.mean(..., dim=[-1])``, the weight on the right."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        r = torch.rsqrt(torch.mean(h * h, dim=[-1], keepdim=True) + 1e-5)
        return (h * r).to(x.dtype) * self.weight


class Block(nn.Module):
    """Two norms around a linear layer with a residual: the norm's input gradient and
    the residual stream's meet in the backward."""

    def __init__(self, d: int, norm: type[nn.Module]) -> None:
        super().__init__()
        self.n1, self.n2 = norm(d), norm(d)
        self.lin = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.lin(self.n1(x))
        return self.n2(h)


def _randomize(model: nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3 + (1.0 if p.dim() == 1 else 0.0))


def _grads(model: nn.Module, x: torch.Tensor, dy: torch.Tensor, fn) -> list[torch.Tensor]:
    x = x.detach().clone().requires_grad_()
    y = fn(x)
    y.backward(dy)
    out = [y.detach(), x.grad, *(p.grad for p in model.parameters())]
    model.zero_grad(set_to_none=True)
    return out


def _check(model: nn.Module, x: torch.Tensor, *, rewritten: int,
           compute: torch.dtype | None = None) -> None:
    """Tessera's output and gradients against float64, within twice eager's error in
    the same dtype plus two roundings (in ``compute``, default ``x``'s dtype) of the
    largest value."""
    gen = torch.Generator().manual_seed(5)
    dy = torch.randn(x.shape, generator=gen).to(x.dtype)
    ref_model = copy.deepcopy(model).double()
    want = _grads(ref_model, x.double(), dy.double(), ref_model)
    eager = _grads(model, x, dy, model)
    seen = []

    def counting(gm, example_inputs):
        seen.append(fuse_rms_norm(copy.deepcopy(gm)))
        return tt.backend(gm, example_inputs)

    got = _grads(model, x, dy, torch.compile(model, backend=counting))
    assert sum(seen) == rewritten
    ulp = {torch.float64: 1e-15, torch.float32: 2e-7, torch.bfloat16: 2**-8, torch.float16: 2**-11}
    for name, g, e, w in zip(["y", "dx", *(n for n, _ in model.named_parameters())],
                             got, eager, want):
        assert g.dtype == e.dtype and g.shape == e.shape, name
        err = (g.double() - w).abs().max().item()
        eager_err = (e.double() - w).abs().max().item()
        bound = 2 * eager_err + 2 * ulp[compute or x.dtype] * w.abs().max().item()
        assert err <= bound, f"{name}: {err} > {bound} (eager {eager_err})"
    rep = tt.last_report()
    assert not rep.fallback_ops and not rep.runtime_fallbacks, str(rep)


@pytest.mark.parametrize("norm", [LlamaStyle, T5Style, SquareByProduct, nn.RMSNorm])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_patterns_train_against_float64(norm, dtype):
    gen = torch.Generator().manual_seed(1)
    model = Block(48, norm).to(dtype)
    _randomize(model, gen)
    x = (torch.randn(3, 5, 48, generator=gen) * 2 + 0.5).to(dtype)
    # the written-out forms cast an f64 input down to f32: those stay as written
    narrowing = dtype == torch.float64 and norm is not nn.RMSNorm
    _check(model, x, rewritten=0 if narrowing else 2,
           compute=torch.float32 if narrowing else None)


def test_training_uses_the_row_kernels(monkeypatch):
    """A training step: one ``rmsnorm_fwd`` per norm in the forward (its ``rstd`` saved),
    one ``rmsnorm_bwd`` per norm in the backward; inference takes ``rmsnorm``."""
    calls: dict[str, int] = {}

    def spying(name):
        real = getattr(rules_nn, name)

        def spy(*a, **kw):
            calls[name] = calls.get(name, 0) + 1
            return real(*a, **kw)
        return spy

    for name in ("rmsnorm_fwd", "rmsnorm_bwd"):
        monkeypatch.setattr(rules_nn, name, spying(name))
    gen = torch.Generator().manual_seed(2)
    model = Block(32, LlamaStyle)
    _randomize(model, gen)
    x = torch.randn(4, 32, generator=gen, requires_grad=True)
    compiled = tt.compile(model)
    compiled(x).square().sum().backward()
    assert calls == {"rmsnorm_fwd": 2, "rmsnorm_bwd": 2}
    torch._dynamo.reset()
    calls.clear()
    with torch.no_grad():
        y = tt.compile(model)(x)
    torch.testing.assert_close(y, model(x), rtol=2e-6, atol=2e-6)
    assert calls == {}


def test_no_weight_and_default_eps():
    gen = torch.Generator().manual_seed(3)
    model = nn.Sequential(nn.Linear(16, 16), nn.RMSNorm(16, elementwise_affine=False))
    _randomize(model, gen)
    _check(model, torch.randn(6, 16, generator=gen), rewritten=1)


class MixedWeight(LlamaStyle):
    """An f32 weight times the bf16 normalized rows (an f32 result): the norm is
    rewritten without the weight, whose product stays an op of its own."""


class VarianceReturned(LlamaStyle):
    def forward(self, hidden_states: torch.Tensor):
        h = hidden_states.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        y = self.weight * (h * torch.rsqrt(variance + self.variance_epsilon)).to(hidden_states.dtype)
        return y + variance


class OtherAxis(LlamaStyle):
    def forward(self, hidden_states: torch.Tensor):
        h = hidden_states.to(torch.float32)
        variance = h.pow(2).mean(0, keepdim=True)
        return self.weight * (h * torch.rsqrt(variance + self.variance_epsilon)).to(hidden_states.dtype)


def test_weight_of_another_dtype_stays_outside():
    gen = torch.Generator().manual_seed(4)
    model = MixedWeight(24)
    _randomize(model, gen)
    x = torch.randn(5, 24, generator=gen).bfloat16()  # the weight stays f32
    seen = []

    def counting(gm, example_inputs):
        seen.append(fuse_rms_norm(copy.deepcopy(gm)))
        return tt.backend(gm, example_inputs)

    got = torch.compile(model, backend=counting)(x)
    assert seen == [1] and got.dtype == torch.float32
    torch.testing.assert_close(got, model(x), rtol=0, atol=0)


@pytest.mark.parametrize("case", [VarianceReturned, OtherAxis])
def test_patterns_left_alone(case):
    """Forms that are not the RMS norm of :func:`rms_norm` keep their ops and their
    values."""
    gen = torch.Generator().manual_seed(4)
    model = case(24)
    _randomize(model, gen)
    _check(model, torch.randn(5, 24, generator=gen), rewritten=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_custom_ops_registration(dtype):
    """The ops' fake implementations, autograd formula and schemas pass torch's checks,
    and the eager formula of the backward is the float64 gradient."""
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(3, 4, 10, generator=gen).to(dtype).requires_grad_()
    w = torch.randn(10, generator=gen).to(dtype).requires_grad_()
    torch.library.opcheck(rms_norm_rows, (x, w, 1e-5))
    torch.library.opcheck(rms_norm_rows, (x, None, 1e-5))
    y, rstd = rms_norm_rows(x, w, 1e-5)
    assert rstd.dtype == torch.float32 and rstd.shape == (3, 4, 1)
    dy = torch.randn(x.shape, generator=gen).to(dtype)
    x64 = x.detach().double().requires_grad_()
    y64 = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-5) * w.detach().double()
    y64.backward(dy.double())
    dx = rms_norm_backward(dy, x.detach(), rstd, w.detach())
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(dx.double(), x64.grad, rtol=tol, atol=tol * x64.grad.abs().max().item())


def test_hugging_face_llama_step():
    """A two-layer Hugging Face LLaMA built from a configuration: every RMS norm is
    rewritten (two per layer and the final one) and the step's loss and gradients match
    eager in float32."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 97, (2, 9))
    seen = []

    def counting(gm, example_inputs):
        seen.append(fuse_rms_norm(copy.deepcopy(gm)))
        return tt.backend(gm, example_inputs)

    ref = copy.deepcopy(model)
    out = torch.compile(model, backend=counting)(input_ids=ids, labels=ids)
    out.loss.backward()
    want = ref(input_ids=ids, labels=ids)
    want.loss.backward()
    assert sum(seen) == 5
    torch.testing.assert_close(out.loss, want.loss, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("shape", [(1,), (6,)])
def test_a_single_row_gets_a_weight_gradient_of_its_shape(shape):
    """One row (a 1-D input): the weight's gradient is ``dy * xhat`` itself, not a sum over
    no dims (``sum(dim=())`` sums everything: a 0-d gradient that autograd rejected)."""
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    w = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(shape, dtype=torch.float64)

    def f(x, w):
        return torch.nn.functional.rms_norm(x, shape, w, 1e-6)

    (tt.compile(f)(x, w) * dy).sum().backward()
    got = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    (f(x, w) * dy).sum().backward()
    torch.testing.assert_close(got[0], x.grad)
    torch.testing.assert_close(got[1], w.grad)
