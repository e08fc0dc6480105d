"""The sm90 matmul at row lengths that are no 16-byte multiple, on a Hopper GPU, against
float64: zero-padded operand copies and st.global stores of C (odd N), every layout,
batched, fused epilogues, fp8 and f32. Outputs are poisoned with NaN first, so unwritten
elements fail. Skipped without a compute capability 9.0 device."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="needs a compute capability 9.0 (Hopper) GPU",
    ),
]

import tessera as ts  # noqa: E402
from tessera.runtime import cuda  # noqa: E402

TYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def _run(fn, *args):
    """``fn(*args)`` with its outputs NaN-poisoned before any kernel runs; the PTX."""
    spec = fn.specialize(*args)
    (out,) = cuda.run_host(spec.ir("target"), spec.name, list(args), poison=True,
                           ptx=spec.ir("ptx"))
    torch.cuda.synchronize()
    return out, spec.ir("ptx")


def _check(out, ref, tol: float = 1e-2) -> None:
    assert out.shape == ref.shape
    assert torch.isfinite(out).all(), "unwritten (NaN) elements in the result"
    err = float((out.double() - ref).norm() / ref.norm())
    assert err < tol, err


def _rand(shape, dtype, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, device="cuda", dtype=torch.float32, generator=gen).to(dtype)


@pytest.mark.parametrize(("expr", "ash", "bsh"), [
    ("a @ b", (257, 77), (77, 1001)),
    ("a @ b.T", (257, 77), (1001, 77)),
    ("a.T @ b", (77, 257), (77, 1001)),
    ("a.T @ b.T", (77, 257), (1001, 77)),
    ("a @ b", (257, 80), (80, 1002)),  # N even, not a multiple of 8: 4-byte pair stores
    ("a @ b", (130, 3), (3, 9)),  # K smaller than one 16-byte row
])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_layouts(expr: str, ash, bsh, dtype: str) -> None:
    a, b = _rand(ash, TYPES[dtype], 1), _rand(bsh, TYPES[dtype], 2)
    out, ptx = _run(ts.jit(eval(f"lambda a, b: {expr}")), a, b)
    assert "wgmma.mma_async" in ptx
    _check(out, eval(f"lambda a, b: {expr}")(a.double(), b.double()))


def test_lm_head() -> None:
    """GPT-2's logits ``x @ wte.T`` (8192 x 50257 x 768) and its gradients' products."""
    x = _rand((8192, 768), torch.bfloat16, 3)
    w = _rand((50257, 768), torch.bfloat16, 4) / 8
    out, ptx = _run(ts.jit(lambda a, b: a @ b.T), x, w)
    assert "wgmma.mma_async" in ptx
    _check(out, x.double() @ w.double().T)
    del out
    dc = _rand((2048, 50257), torch.bfloat16, 5)  # dX = dC @ wte; dW = dC.T @ x
    out, _ = _run(ts.jit(lambda a, b: a @ b), dc, w)
    _check(out, dc.double() @ w.double())
    del out
    out, _ = _run(ts.jit(lambda a, b: a.T @ b), dc, x[:2048])
    _check(out, dc.double().T @ x[:2048].double())


@pytest.mark.parametrize(("expr", "ash", "bsh"), [
    ("a @ b", (3, 128, 64), (3, 64, 1001)),
    ("a @ b.T", (3, 128, 64), (3, 1001, 64)),
    ("a.T @ b", (3, 64, 128), (3, 64, 1001)),
    ("a @ b", (2, 129, 77), (77, 1001)),  # 3-D A times 2-D B: the batch folds into M
    # both operands K-major with a K tail (a 1x1 convolution's per-image weight gradient:
    # K = pixels 784, 49 (padded rows), 100)
    ("a @ b.T", (4, 128, 784), (4, 512, 784)),
    ("a @ b.T", (3, 256, 49), (3, 64, 49)),
    ("a @ b.T", (2, 64, 100), (2, 40, 100)),
])
def test_batched(expr: str, ash, bsh) -> None:
    a, b = _rand(ash, torch.bfloat16, 6), _rand(bsh, torch.bfloat16, 7)
    out, ptx = _run(ts.jit(eval(f"lambda a, b: {expr}")), a, b)
    assert "wgmma.mma_async" in ptx
    ref = eval(f"lambda a, b: {expr}".replace(".T", ".mT"))(a.double(), b.double())
    for i in range(ref.shape[0]):
        _check(out[i], ref[i])


@pytest.mark.parametrize("act", ["gelu", None])
@pytest.mark.parametrize("bias_shape", [(1001,), (257, 1001)])
def test_fused_epilogue(act, bias_shape) -> None:
    x = _rand((257, 77), torch.bfloat16, 8)
    w = _rand((1001, 77), torch.bfloat16, 9) / 8
    bias = _rand(bias_shape, torch.bfloat16, 10)

    def linear(x, w, bias):
        y = x @ w.T + bias
        return ts.gelu(y) if act else y

    out, ptx = _run(ts.jit(linear), x, w, bias)
    assert "wgmma.mma_async" in ptx
    y = x.double() @ w.double().T + bias.double()
    _check(out, torch.nn.functional.gelu(y, approximate="tanh") if act else y)


@pytest.mark.parametrize("expr", ["a @ b", "a @ b.T"])
def test_f32_odd_n(expr: str) -> None:
    a = _rand((257, 77), torch.float32, 11)
    b = _rand((1001, 77) if expr.endswith(".T") else (77, 1001), torch.float32, 12)
    out, ptx = _run(ts.jit(eval(f"lambda a, b: {expr}")), a, b)
    assert "wgmma.mma_async" in ptx
    _check(out, eval(f"lambda a, b: {expr}")(a.double(), b.double()), 1e-5)


@pytest.mark.parametrize("expr", ["ts.matmul(a, b, transpose_b=True, out_dtype=ts.f32)",
                                  "ts.matmul(a, b, out_dtype=ts.bf16)"])
def test_fp8_k_and_n_unaligned(expr: str) -> None:
    a = _rand((257, 77), torch.float8_e4m3fn, 13)
    b = _rand((1001, 77) if "transpose_b" in expr else (77, 1001), torch.float8_e4m3fn, 14)
    out, ptx = _run(ts.jit(eval(f"lambda a, b: {expr}", {"ts": ts})), a, b)
    assert "e4m3.e4m3" in ptx
    bt = b.double().T if "transpose_b" in expr else b.double()
    _check(out, a.double() @ bt, 1e-2)
