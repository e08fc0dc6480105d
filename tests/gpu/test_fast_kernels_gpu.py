"""The register-resident row kernels and the tensor-core flash attention on the GPU,
against torch in float64 on ragged and bench-like shapes. Skipped without a CUDA
device."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402

TYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
TOL = {"bf16": 1e-2, "f16": 2e-3, "f32": 1e-5}


def _err(got: torch.Tensor, want: torch.Tensor) -> float:
    assert torch.isfinite(got).all(), "non-finite elements in the result"
    return float((got.double() - want).abs().max() / want.abs().max())


@pytest.mark.parametrize(
    ("shape", "elem"),
    [((5, 300), "bf16"), ((3, 8192), "bf16"), ((1000, 8192), "bf16"), ((7, 2050), "f16"),
     ((33, 37), "f32"), ((6, 4096), "f32")],
)
def test_rows(shape: tuple[int, int], elem: str) -> None:
    @ts.jit
    def rows(x, w, b):
        return (
            ts.softmax(x, -1),
            ts.rmsnorm(x, w, eps=1e-6),
            ts.layernorm(x, w, b, eps=1e-5),
        )

    dt = TYPES[elem]
    x = torch.randn(*shape, device="cuda", dtype=dt) * 2
    w = torch.randn(shape[-1], device="cuda", dtype=dt)
    b = torch.randn(shape[-1], device="cuda", dtype=dt)
    sm, rms, ln = rows(x, w, b)
    torch.cuda.synchronize()
    X, W, B = x.double(), w.double(), b.double()
    assert _err(sm, torch.softmax(X, -1)) < TOL[elem]
    assert _err(rms, X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + 1e-6) * W) < TOL[elem]
    want = torch.nn.functional.layer_norm(X, (shape[-1],), W, B, eps=1e-5)
    assert _err(ln, want) < TOL[elem]


@pytest.mark.parametrize(
    ("b", "h", "sq", "sk", "d", "elem"),
    [(1, 2, 80, 80, 64, "bf16"), (2, 3, 130, 200, 128, "f16"), (1, 2, 1100, 1100, 128, "bf16"),
     (4, 16, 2048, 2048, 128, "bf16")],
)
@pytest.mark.parametrize("causal", [False, True])
def test_attention(b: int, h: int, sq: int, sk: int, d: int, elem: str, causal: bool) -> None:
    @ts.jit
    def attn(q, k, v):
        return ts.flash_attention(q, k, v, causal=causal)

    dt = TYPES[elem]
    q = torch.randn(b, h, sq, d, device="cuda", dtype=dt)
    k = torch.randn(b, h, sk, d, device="cuda", dtype=dt)
    v = torch.randn(b, h, sk, d, device="cuda", dtype=dt)
    o = attn(q, k, v)
    torch.cuda.synchronize()
    ptx = attn.inspect_ir("ptx")
    # Hopper takes the TMA + wgmma kernel (tests/gpu/test_attention_sm90_gpu.py), others mma.sync
    assert ("wgmma.mma_async" in ptx) if torch.cuda.get_device_capability() == (9, 0) else (
        "mma.sync" in ptx
    )
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(d)
    if causal:
        keep = torch.arange(sk, device="cuda")[None, :] <= torch.arange(sq, device="cuda")[:, None]
        s = s.masked_fill(~keep, float("-inf"))
    want = torch.softmax(s, -1) @ v.double()
    assert _err(o, want) < TOL[elem]
