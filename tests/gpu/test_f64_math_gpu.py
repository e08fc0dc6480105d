"""The f64 transcendentals (``ts.exp``, ``log``, ``tanh``, ``erf``, ``pow``; ``exp2`` and
``log2`` have no front-end function and are checked in tests/passes) on CUDA tensors against torch float64 on the CPU in ulps, over wide ranges and the
special values; f64 softmax, logsumexp and sigmoid; and a float64 model through
``torch.compile(backend="tessera")``, forward and backward. Skipped without a CUDA device.
The bounds are those the numpy mirror in tests/passes/test_f64_math_lowering.py measures
against mpmath, plus one ulp for the CPU reference's own error."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402
import tessera.torch as tt  # noqa: E402

ULPS = {"exp": 2.0, "exp2": 2.0, "log": 1.5, "log2": 1.5, "tanh": 2.5, "erf": 2.0, "pow": 2.5}


def _gen() -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(torch.seed() % 2**31)


def _u(g: torch.Generator, lo: float, hi: float, n: int) -> torch.Tensor:
    return torch.rand(n, generator=g, dtype=torch.float64) * (hi - lo) + lo


def _args(name: str) -> torch.Tensor:
    g, n = _gen(), 1 << 18
    parts = {
        "exp": [_u(g, -745.2, 709.78, n), _u(g, -1, 1, n), _u(g, -745.2, -708, n // 4)],
        "exp2": [_u(g, -1075, 1023.99, n), _u(g, -2, 2, n)],
        "log": [torch.exp(_u(g, -705, 709, n)), _u(g, 0.5, 2, n), 1 + _u(g, -1e-6, 1e-6, n),
                _u(g, 0, 2.2250738585072014e-308, n // 4)],
        "tanh": [_u(g, -20, 20, n), _u(g, -1.2, 1.2, n), torch.exp(_u(g, -700, 1, n))],
        "erf": [_u(g, -6.5, 6.5, n), _u(g, -1.5, 1.5, n), torch.exp(_u(g, -700, 0, n))],
    }
    parts["log2"] = parts["log"]
    return torch.cat(parts[name])


def _ulps(got: torch.Tensor, want: torch.Tensor) -> float:
    """Max ``|got - want|`` in ulps of ``want`` where both are finite; where either is not,
    they must agree."""
    got = got.cpu()
    fin = torch.isfinite(want) & (want != 0)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(got[torch.isinf(want)], want[torch.isinf(want)])
    w = want[fin].abs()
    ulp = torch.nextafter(w, torch.full_like(w, math.inf)) - w
    return ((got[fin] - want[fin]).abs() / ulp).max().item()


SPECIAL = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 5e-324,
                        -5e-324, 710.0, -750.0, 1e308, -1e308], dtype=torch.float64)


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "erf"])
def test_f64_within_ulps_of_torch(name: str) -> None:
    x = _args(name)
    got = ts.jit(getattr(ts, name))(x.cuda())
    assert got.dtype == torch.float64
    assert _ulps(got, getattr(torch, name)(x)) <= ULPS[name]
    s = ts.jit(getattr(ts, name))(SPECIAL.cuda()).cpu()
    want = getattr(torch, name)(SPECIAL)
    assert torch.equal(torch.isnan(s), torch.isnan(want))
    ok = ~torch.isnan(want)
    assert torch.equal(s[ok], want[ok]) or _ulps(s, want) <= ULPS[name]
    assert torch.equal(torch.signbit(s[ok & (want == 0)]), torch.signbit(want[ok & (want == 0)]))


def test_f64_pow_within_ulps_of_torch() -> None:
    g = _gen()
    a = torch.cat([torch.exp(_u(g, -700, 700, 1 << 18)), _u(g, 0.9, 1.1, 1 << 18)])
    b = torch.cat([_u(g, -1, 1, 1 << 18), _u(g, -6000, 6000, 1 << 18)])
    keep = (b * torch.log(a)).abs() < 705
    a, b = a[keep], b[keep]
    got = ts.jit(ts.pow)(a.cuda(), b.cuda())
    assert _ulps(got, torch.pow(a, b)) <= ULPS["pow"]
    sa = torch.tensor([0.0, 0.0, math.nan, 1.0, -2.0, -2.0, -2.0, math.inf, 2.0], dtype=torch.float64)
    sb = torch.tensor([2.0, -1.0, 0.0, math.nan, 3.0, 2.0, 0.5, -1.0, 1e4], dtype=torch.float64)
    got = ts.jit(ts.pow)(sa.cuda(), sb.cuda()).cpu()
    want = torch.pow(sa, sb)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(got[~torch.isnan(want)], want[~torch.isnan(want)])


def test_f64_softmax_logsumexp_sigmoid() -> None:
    g = _gen()
    x = (torch.randn(64, 1000, generator=g, dtype=torch.float64) * 30)

    def f(x: ts.Tensor[64, 1000, ts.f64]):
        return ts.softmax(x, axis=-1), ts.logsumexp(x, -1), ts.sigmoid(x)

    sm, lse, sg = ts.jit(f)(x.cuda())
    torch.testing.assert_close(sm.cpu(), torch.softmax(x, -1), rtol=1e-14, atol=1e-300)
    torch.testing.assert_close(lse.cpu(), torch.logsumexp(x, -1), rtol=1e-14, atol=0)
    torch.testing.assert_close(sg.cpu(), torch.sigmoid(x), rtol=1e-14, atol=1e-300)


def test_torch_compile_f64_model_forward_backward() -> None:
    torch.manual_seed(torch.seed() % 2**31)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.SiLU(), torch.nn.Softmax(-1))
    model = model.double().cuda()
    x = torch.randn(32, 16, dtype=torch.float64, device="cuda") * 4
    w = torch.randn(32, 16, dtype=torch.float64, device="cuda")
    compiled = tt.compile(model)
    (model(x) * w).sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    want_y = model(x)
    model.zero_grad()
    y = compiled(x)
    (y * w).sum().backward()
    torch.testing.assert_close(y, want_y, rtol=1e-12, atol=1e-14)
    for p, gw in zip(model.parameters(), want):
        torch.testing.assert_close(p.grad, gw, rtol=1e-10, atol=1e-12)
