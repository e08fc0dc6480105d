"""Fused kernels holding index maps (transposes keeping the last dim, slices, concats) on
the GPU against torch in float64: a rotary embedding of a transposed projection and its
gradient, a stack of attention gradients transposed back into a projection's layout, and
a rotary attention block through ``torch.compile`` (forward and backward against eager).
Skipped without a CUDA device."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402
import tessera.torch as tt  # noqa: E402

TYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
TOL = {"bf16": 1e-2, "f16": 2e-3, "f32": 1e-6}


def rope(x, cos, sin):
    """``x`` ``[B, S, H, D]`` transposed to ``[B, H, S, D]`` and rotated by halves."""
    t = ts.transpose(x, 0, 2, 1, 3)
    d = t.shape[-1]
    rot = ts.concat([-t[..., d // 2:], t[..., : d // 2]], axis=-1)
    return t * cos + rot * sin


def _rel(got, want) -> float:
    return float((got.double() - want).abs().max() / want.abs().max())


@pytest.mark.parametrize(
    ("shape", "elem"),
    [((4, 2048, 32, 64), "bf16"), ((2, 197, 12, 64), "bf16"), ((3, 5, 2, 6), "f32"),
     ((2, 33, 4, 128), "f16")],
)
def test_rope(shape: tuple[int, ...], elem: str) -> None:
    dt = TYPES[elem]
    b, s, h, d = shape
    x = torch.randn(*shape, device="cuda").to(dt)
    cos, sin = (torch.randn(s, d, device="cuda").to(dt) for _ in range(2))
    f = ts.jit(rope)
    got = f(x, cos, sin)
    assert f.inspect_ir("tile").count("ttile.kernel @") == 1
    X = x.double().permute(0, 2, 1, 3)
    want = X * cos.double() + torch.cat([-X[..., d // 2:], X[..., : d // 2]], -1) * sin.double()
    assert got.shape == (b, h, s, d) and got.dtype == dt
    assert _rel(got, want) <= TOL[elem]


@pytest.mark.parametrize(("b", "h", "s", "d"), [(128, 12, 197, 64), (2, 3, 5, 8)])
def test_qkv_gradients_stacked(b: int, h: int, s: int, d: int) -> None:
    f = ts.jit(lambda q, k, v: ts.transpose(ts.concat(
        [q.reshape(1, b, h, s, d), k.reshape(1, b, h, s, d), v.reshape(1, b, h, s, d)], 0),
        1, 3, 0, 2, 4))
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    got = f(q, k, v)
    want = torch.stack([q, k, v]).permute(1, 3, 0, 2, 4)
    assert torch.equal(got, want)


class RotaryBlock(torch.nn.Module):
    """A projection to q, k, v, a rotary embedding, causal attention and an output
    projection (the layout of LLaMA's attention)."""

    def __init__(self, dim: int = 256, heads: int = 4):
        super().__init__()
        self.h, self.d = heads, dim // heads
        self.q = torch.nn.Linear(dim, dim, bias=False)
        self.k = torch.nn.Linear(dim, dim, bias=False)
        self.v = torch.nn.Linear(dim, dim, bias=False)
        self.o = torch.nn.Linear(dim, dim, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape

        def heads(t):
            return t.view(b, s, self.h, self.d).transpose(1, 2)

        def rot(t):
            return torch.cat([-t[..., self.d // 2:], t[..., : self.d // 2]], -1)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        q = q * cos + rot(q) * sin
        k = k * cos + rot(k) * sin
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


def test_rotary_block_training_step() -> None:
    torch.manual_seed(0)
    m = RotaryBlock().cuda().to(torch.bfloat16)
    x = torch.randn(2, 128, 256, device="cuda", dtype=torch.bfloat16)
    cos, sin = (torch.randn(128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    ref = [p.detach().clone() for p in m.parameters()]
    out = tt.compile(m)(x, cos, sin)
    out.float().square().mean().backward()
    grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m64 = RotaryBlock().cuda().double()
    with torch.no_grad():
        for p, r in zip(m64.parameters(), ref):
            p.copy_(r.double())
    want = m64(x.double(), cos.double(), sin.double())
    want.square().mean().backward()
    assert _rel(out, want) <= 3e-2
    for g_, p in zip(grads, m64.parameters()):
        assert _rel(g_, p.grad) <= 5e-2
