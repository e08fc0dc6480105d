"""``ts.grad`` of flash attention on the GPU (``flash_attention_fwd`` saving the
log-sum-exp; ``flash_attention_bwd`` as the mma.sync kernels of
tessera/passes/tile_attention_bwd.py and, on sm90, the wgmma kernels of
tessera/passes/sm90/attention_bwd_sm90.py) against torch float64 autograd: ragged
lengths, causal or not, head sizes 64 and 128, bf16 and f16; and two runs give
bitwise-identical gradients."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402
from tessera.options import CompileOptions  # noqa: E402

SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
PATHS = ["mma_sync", pytest.param("wgmma", marks=pytest.mark.skipif(not SM90, reason="needs sm_90"))]

TYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
TOL = {"bf16": 2e-2, "f16": 4e-3}


def _reference(q, k, v, do, causal):
    q, k, v = (x.double().requires_grad_() for x in (q, k, v))
    sq, sk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    if causal:
        keep = torch.arange(sk, device="cuda")[None, :] <= torch.arange(sq, device="cuda")[:, None]
        s = s.masked_fill(~keep, float("-inf"))
    o = torch.softmax(s, -1) @ v
    return torch.autograd.grad(o, (q, k, v), do.double())


def _grad_fn(causal: bool, path: str = "mma_sync"):
    """``path`` "wgmma": the sm90 backward kernels; "mma_sync": the Tile IR ones."""
    opts = CompileOptions.from_env(sm90_attention_bwd=path == "wgmma")
    f = ts.jit(lambda q, k, v, do: ts.sum(ts.flash_attention(q, k, v, causal=causal) * do),
               options=opts)
    return ts.grad(f, argnums=(0, 1, 2))


def _inputs(b, h, sq, sk, d, elem):
    dt = TYPES[elem]
    q, do = (torch.randn(b, h, sq, d, device="cuda", dtype=dt) for _ in range(2))
    k, v = (torch.randn(b, h, sk, d, device="cuda", dtype=dt) for _ in range(2))
    return q, k, v, do


@pytest.mark.parametrize(
    "b,h,sq,sk,d,elem,causal",
    [
        (1, 2, 67, 67, 64, "bf16", True),
        (2, 3, 130, 200, 64, "f16", False),
        (1, 2, 300, 130, 128, "bf16", True),
        (1, 2, 257, 257, 128, "bf16", False),
        (2, 4, 1024, 1024, 128, "bf16", True),
        (1, 4, 1000, 1000, 64, "f16", True),
        (1, 2, 257, 1000, 128, "f16", True),
        (1, 1, 4097, 4097, 128, "bf16", True),
        (1, 1, 4097, 4097, 64, "f16", False),
    ],
)
@pytest.mark.parametrize("path", PATHS)
def test_grad_matches_float64(b, h, sq, sk, d, elem, causal, path):
    step = _grad_fn(causal, path)
    q, k, v, do = _inputs(b, h, sq, sk, d, elem)
    junk = torch.full((64 << 20,), float("nan"), device="cuda", dtype=torch.float16)
    del junk  # outputs land in memory full of NaN: unwritten elements show up
    got = step(q, k, v, do)
    torch.cuda.synchronize()
    want = _reference(q, k, v, do, causal)
    ptx = step.inspect_ir("ptx")
    suffix = "_sm90" if path == "wgmma" else ""
    assert f"attention_bwd_dkdv{suffix}_" in ptx and f"attention_bwd_dq{suffix}_" in ptx
    for name, x, w in zip(("dq", "dk", "dv"), got, want):
        assert torch.isfinite(x).all(), name
        err = float((x.double() - w).abs().max() / w.abs().max())
        assert err < TOL[elem], (name, err)


@pytest.mark.skipif(not SM90, reason="needs sm_90")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sms", [1, 7])
def test_grad_with_few_ctas(monkeypatch, sms, causal):
    """Persistent grids smaller than the SM count (forward, dK/dV and dQ kernels): every
    CTA takes many resident tiles of different heads, in pairs when causal."""
    from tessera.passes.sm90 import lower_matmul_sm90

    monkeypatch.setenv("TESSERA_NO_DISK_CACHE", "1")
    monkeypatch.setattr(lower_matmul_sm90, "device_sms", lambda: sms)
    step = _grad_fn(causal, "wgmma")
    q, k, v, do = _inputs(2, 5, 340 + sms, 290, 64, "bf16")
    junk = torch.full((64 << 20,), float("nan"), device="cuda", dtype=torch.float16)
    del junk
    got = step(q, k, v, do)
    torch.cuda.synchronize()
    want = _reference(q, k, v, do, causal)
    for name, x, w in zip(("dq", "dk", "dv"), got, want):
        assert torch.isfinite(x).all(), name
        err = float((x.double() - w).abs().max() / w.abs().max())
        assert err < TOL["bf16"], (name, err)


@pytest.mark.parametrize("path", PATHS)
def test_gradients_are_bitwise_deterministic(path):
    step = _grad_fn(True, path)
    q, k, v, do = _inputs(2, 4, 1000, 1000, 128, "bf16")
    first = [x.clone() for x in step(q, k, v, do)]
    second = step(q, k, v, do)
    torch.cuda.synchronize()
    for a, b in zip(first, second):
        assert torch.equal(a, b)
