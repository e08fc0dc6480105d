"""``ts.grad`` of flash attention on the GPU (``flash_attention_fwd`` saving the
log-sum-exp, the ``flash_attention_bwd`` kernels of tessera/passes/tile_attention_bwd.py)
against torch float64 autograd: ragged lengths, causal or not, head sizes 64 and 128,
bf16 and f16; and two runs give bitwise-identical gradients."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402

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


def _grad_fn(causal: bool):
    return ts.grad(
        lambda q, k, v, do: ts.sum(ts.flash_attention(q, k, v, causal=causal) * do),
        argnums=(0, 1, 2),
    )


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
    ],
)
def test_grad_matches_float64(b, h, sq, sk, d, elem, causal):
    step = _grad_fn(causal)
    q, k, v, do = _inputs(b, h, sq, sk, d, elem)
    for shape in ((b, h, sq, d), (b, h, sk, d)):  # unwritten outputs show up as NaN
        junk = torch.full(shape, float("nan"), device="cuda", dtype=TYPES[elem])
        del junk
    got = step(q, k, v, do)
    torch.cuda.synchronize()
    want = _reference(q, k, v, do, causal)
    ptx = step.inspect_ir("ptx")
    assert "attention_bwd_dkdv" in ptx and "attention_bwd_dq" in ptx
    for name, x, w in zip(("dq", "dk", "dv"), got, want):
        assert torch.isfinite(x).all(), name
        err = float((x.double() - w).abs().max() / w.abs().max())
        assert err < TOL[elem], (name, err)


def test_gradients_are_bitwise_deterministic():
    step = _grad_fn(True)
    q, k, v, do = _inputs(2, 4, 1000, 1000, 128, "bf16")
    first = [x.clone() for x in step(q, k, v, do)]
    second = step(q, k, v, do)
    torch.cuda.synchronize()
    for a, b in zip(first, second):
        assert torch.equal(a, b)
