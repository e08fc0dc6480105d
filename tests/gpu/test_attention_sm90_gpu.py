"""The Hopper flash-attention kernel (``lower-attention-sm90``) on the GPU against torch in
float64: ragged and bench-like shapes, causal or not, bf16 and f16, head sizes 64 and 128;
and the ``mma.sync`` kernel it replaces, forced with ``TESSERA_SM90_MATMUL=0``. Skipped
without a compute capability 9.0 device."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="needs a compute capability 9.0 CUDA device",
    ),
]

import tessera as ts  # noqa: E402

TYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
TOL = {"bf16": 1e-2, "f16": 2e-3}


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    sq, sk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(d)
    if causal:
        keep = torch.arange(sk, device="cuda")[None, :] <= torch.arange(sq, device="cuda")[:, None]
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v.double()


def _poison_allocator(shape: tuple[int, ...], dt: torch.dtype) -> None:
    """Leave a NaN-filled block of the output's size in torch's caching allocator, so an
    output element the kernel does not write shows up as NaN."""
    junk = torch.full(shape, float("nan"), device="cuda", dtype=dt)
    del junk


def _run(b: int, h: int, sq: int, sk: int, d: int, elem: str, causal: bool) -> tuple[str, float]:
    @ts.jit
    def attn(q, k, v):
        return ts.flash_attention(q, k, v, causal=causal)

    dt = TYPES[elem]
    q = torch.randn(b, h, sq, d, device="cuda", dtype=dt)
    k = torch.randn(b, h, sk, d, device="cuda", dtype=dt)
    v = torch.randn(b, h, sk, d, device="cuda", dtype=dt)
    _poison_allocator((b, h, sq, d), dt)
    o = attn(q, k, v)
    torch.cuda.synchronize()
    want = _reference(q, k, v, causal)
    assert torch.isfinite(o).all(), "unwritten or non-finite output elements"
    err = float((o.double() - want).abs().max() / want.abs().max())
    return attn.inspect_ir("ptx"), err


@pytest.mark.parametrize(
    ("b", "h", "sq", "sk", "d", "elem"),
    [
        (1, 1, 128, 128, 128, "bf16"),
        (1, 2, 80, 80, 64, "bf16"),
        (2, 3, 130, 200, 128, "f16"),
        (1, 2, 200, 130, 64, "f16"),
        (1, 2, 1100, 1037, 128, "bf16"),
        (2, 2, 777, 1500, 64, "bf16"),
        (4, 16, 2048, 2048, 128, "bf16"),
        (8, 12, 197, 197, 64, "bf16"),
        (3, 40, 300, 300, 64, "f16"),
    ],
)
@pytest.mark.parametrize("causal", [False, True])
def test_attention_sm90(b: int, h: int, sq: int, sk: int, d: int, elem: str, causal: bool) -> None:
    ptx, err = _run(b, h, sq, sk, d, elem, causal)
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
    assert err < TOL[elem], err


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sms", [1, 7])
def test_attention_sm90_few_ctas(monkeypatch: pytest.MonkeyPatch, sms: int, causal: bool) -> None:
    """A persistent grid smaller than the SM count: every CTA takes many tiles, of
    different heads and (causal) different numbers of key blocks, in pairs (3 query
    tiles per head: a pair and the middle one alone)."""
    from tessera.passes.sm90 import lower_matmul_sm90

    monkeypatch.setenv("TESSERA_NO_DISK_CACHE", "1")
    monkeypatch.setattr(lower_matmul_sm90, "device_sms", lambda: sms)
    ptx, err = _run(2, 5, 333 + sms, 290, 64, "bf16", causal)
    assert "wgmma.mma_async" in ptx
    assert err < TOL["bf16"], err


def test_attention_mma_sync_when_sm90_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "0")
    ptx, err = _run(1, 2, 300, 300, 128, "bf16", True)
    assert "mma.sync" in ptx and "wgmma" not in ptx
    assert err < TOL["bf16"], err


def test_attention_sm90_bitwise_reproducible() -> None:
    @ts.jit
    def attn(q, k, v):
        return ts.flash_attention(q, k, v, causal=True)

    q, k, v = (torch.randn(2, 4, 1000, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    first = attn(q, k, v).clone()
    for _ in range(3):
        assert torch.equal(attn(q, k, v), first)
