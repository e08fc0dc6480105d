"""``ts.sin`` / ``ts.cos`` kernels on CUDA tensors against float64, over the argument
range rotary embeddings reach (``|x|`` up to 1e4 radians) and beyond (the f64 reduction
of f32 arguments above 2^17). Skipped without a CUDA device."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402

F32_ULPS = 2.0
"""Max error in f32 ulps of the result (the numpy emulation of the same instructions in
tests/frontend/test_sin_cos.py measures about 1.5)."""


def _ulps(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> float:
    """Max ``|got - want|`` in units of the spacing of ``dtype`` at ``want``."""
    w = want.abs().to(dtype)
    ulp = (torch.nextafter(w, torch.full_like(w, math.inf)) - w).double()
    return ((got.double() - want).abs() / ulp).max().item()


def _args(device: str = "cuda") -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(torch.seed() % 2**31)
    parts = [
        (torch.rand(1 << 20, generator=g, dtype=torch.float64) * 2 - 1) * 1e4,
        (torch.rand(1 << 16, generator=g, dtype=torch.float64) * 2 - 1) * 4,
        (torch.rand(1 << 14, generator=g, dtype=torch.float64) * 2 - 1) * 1e9,
        torch.tensor([0.0, math.pi / 4, math.pi / 2, math.pi, 1e4 * math.pi, 131072.0,
                      131073.0, -1e-30]),
    ]
    return torch.cat(parts).to(device)


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_f32_within_2_ulp_of_float64(name: str) -> None:
    x = _args().float()
    got = ts.jit(getattr(ts, name))(x)
    want = getattr(torch, name)(x.double())
    assert got.dtype == torch.float32
    assert _ulps(got, want, torch.float32) <= F32_ULPS
    mine = (got.double() - want).abs().max().item()
    torch_err = (getattr(torch, name)(x).double() - want).abs().max().item()
    assert mine <= 2 * torch_err + 6e-8, (mine, torch_err)


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_f64_against_torch(name: str) -> None:
    x = _args()
    got = ts.jit(getattr(ts, name))(x)
    want = getattr(torch, name)(x)
    assert got.dtype == torch.float64
    assert (got - want).abs().max().item() <= 6.7e-16  # 3 ulps of 1: ours and torch's, 1 each


def test_special_values() -> None:
    x = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 2.0**41], device="cuda")
    s, c = ts.jit(lambda t: (ts.sin(t), ts.cos(t)))(x)
    assert s[0].item() == 0 and not torch.signbit(s[0]) and torch.signbit(s[1])
    assert c[0].item() == 1 and c[1].item() == 1
    assert torch.isnan(s[2:]).all() and torch.isnan(c[2:]).all()


def test_rotary_embedding_fused_matches_torch() -> None:
    """A rotary embedding's cos/sin of position x frequency, fused with its neighbours."""
    pos = torch.arange(4096, device="cuda", dtype=torch.float32)
    inv = 1.0 / (10000 ** (torch.arange(0, 64, 2, device="cuda", dtype=torch.float32) / 64))

    def rope(p, f):
        ang = ts.reshape(p, (4096, 1)) * ts.reshape(f, (1, 32))
        return ts.cos(ang) * 2.0, ts.sin(ang) + 1.0

    c, s = ts.jit(rope)(pos, inv)
    ang = pos.double()[:, None] * inv.double()[None, :]
    ang32 = (pos[:, None] * inv[None, :]).double()  # the f32 product, as torch computes it
    torch.testing.assert_close(c.double(), torch.cos(ang32) * 2, rtol=0, atol=4e-7)
    torch.testing.assert_close(s.double(), torch.sin(ang32) + 1, rtol=0, atol=4e-7)
    assert ang.max().item() > 4000
