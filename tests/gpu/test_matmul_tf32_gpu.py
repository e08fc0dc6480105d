"""f32 matmuls on the Hopper tf32 wgmma kernels against float64.

Default f32 (3xTF32, full f32 accuracy) and ``CompileOptions(allow_tf32=True)`` (one
TF32 product), through ``ts.jit`` with NaN-poisoned outputs (an unwritten element fails):
every layout on ragged and square shapes, batched and broadcast products, fused bias and
activation, and the accuracy of 3xTF32 against torch's f32 matmul (TF32 off) at large K.
Skipped without a compute capability 9.0 device.
"""

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
from tessera.options import CompileOptions  # noqa: E402
from tessera.runtime import cuda  # noqa: E402

LAYOUTS = ["a @ b", "a @ b.T", "a.T @ b", "a.T @ b.T"]
SHAPES = [(1000, 136, 72), (200, 264, 1000), (1024, 1024, 1024)]
MODES = {"3xtf32": False, "tf32": True}
TOL = {"3xtf32": 2e-6, "tf32": 2e-3}
"""Normwise relative error bounds: 3xTF32 within f32 rounding (a TF32 product is ~3e-4)."""


def _jit(expr: str, allow_tf32: bool):
    return ts.jit(eval(f"lambda a, b: {expr}", {"ts": ts}),
                  options=CompileOptions.from_env(allow_tf32=allow_tf32))


def _run_poisoned(fn, *args: torch.Tensor) -> torch.Tensor:
    """One call with NaN-filled outputs; returns the first result."""
    spec = fn.specialize(*args)
    return cuda.run_host(spec.ir("target"), spec.name, list(args), poison=True,
                         ptx=spec.ir("ptx"))[0]


def _operands(expr: str, m: int, n: int, k: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(*((k, m) if expr.startswith("a.T") else (m, k)), device="cuda",
                    generator=gen)
    b = torch.randn(*((n, k) if expr.endswith("b.T") else (k, n)), device="cuda",
                    generator=gen)
    return a, b


def _err(c: torch.Tensor, ref: torch.Tensor) -> float:
    assert torch.isfinite(c).all(), "unwritten (NaN) elements in the result"
    return float((c.double() - ref).norm() / ref.norm())


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
@pytest.mark.parametrize("expr", LAYOUTS)
def test_f32_layouts(mode: str, m: int, n: int, k: int, expr: str) -> None:
    a, b = _operands(expr, m, n, k, m + 3 * n + 7 * k + LAYOUTS.index(expr))
    fn = _jit(expr, MODES[mode])
    c = _run_poisoned(fn, a, b)
    assert "k8.f32.tf32.tf32" in fn.inspect_ir("ptx")
    ref = eval(f"lambda a, b: {expr}")(a.double(), b.double())
    assert c.shape == ref.shape and c.dtype == torch.float32
    err = _err(c, ref)
    assert err < TOL[mode], err
    if mode == "tf32":  # rounded operands: a TF32-sized error, not an f32 one
        assert err > 1e-5, err


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(
    ("expr", "ash", "bsh"),
    [
        ("a @ b", (4, 128, 66), (4, 66, 72)),
        ("a @ b.T", (2, 3, 192, 64), (2, 3, 200, 64)),
        ("a.T @ b", (3, 64, 128), (64, 72)),
        ("a @ b", (128, 40), (5, 40, 72)),
        ("a @ b", (3, 100, 96), (96, 64)),
    ],
)
def test_f32_batched(mode: str, expr: str, ash, bsh) -> None:
    """Batched and broadcast products (the last one folds its batch into M)."""
    fn = _jit(expr, MODES[mode])
    a = torch.randn(ash, device="cuda")
    b = torch.randn(bsh, device="cuda")
    c = _run_poisoned(fn, a, b)
    assert "k8.f32.tf32.tf32" in fn.inspect_ir("ptx")
    ref = eval(f"lambda a, b: {expr}".replace(".T", ".mT"))(a.double(), b.double())
    assert c.shape == ref.shape
    for i in range(ref.shape[0]):
        assert _err(c[i], ref[i]) < TOL[mode]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("act", ["gelu", "relu", None])
@pytest.mark.parametrize("bias_shape", [(136,), (1000, 136)])
def test_f32_linear_epilogue(mode: str, act: str | None, bias_shape) -> None:
    """``x @ w.T + bias`` and an activation, fused into the tf32 kernels' epilogue."""
    x = torch.randn(1000, 264, device="cuda")
    w = torch.randn(136, 264, device="cuda") / 16
    bias = torch.randn(bias_shape, device="cuda")

    def linear(x, w, bias):
        y = x @ w.T + bias
        return getattr(ts, act)(y) if act else y

    fn = ts.jit(linear, options=CompileOptions.from_env(allow_tf32=MODES[mode]))
    out = _run_poisoned(fn, x, w, bias)
    ptx = fn.inspect_ir("ptx")
    assert "k8.f32.tf32.tf32" in ptx and ptx.count(".entry") <= 3  # splits + the GEMM
    y = x.double() @ w.double().T + bias.double()
    ref = {"relu": torch.relu, "gelu": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
           None: lambda t: t}[act](y)
    assert _err(out, ref) < TOL[mode]


@pytest.mark.parametrize("k", [4096, 8192])
def test_3xtf32_is_as_accurate_as_torch_f32(k: int) -> None:
    """The default f32 product's error against float64 is no larger than torch's f32
    matmul with TF32 off (cuBLAS SGEMM), normwise and in the worst element."""
    m = n = 1024
    gen = torch.Generator(device="cuda").manual_seed(k)
    a = torch.randn(m, k, device="cuda", generator=gen)
    b = torch.randn(k, n, device="cuda", generator=gen)
    ref = a.double() @ b.double()
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        peer = a @ b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    c = _run_poisoned(_jit("a @ b", False), a, b)
    scale = float(ref.abs().max())
    ours = float((c.double() - ref).abs().max()) / scale
    theirs = float((peer.double() - ref).abs().max()) / scale
    assert ours <= theirs, (ours, theirs)
    assert _err(c, ref) <= _err(peer, ref)


@pytest.mark.parametrize("mode", list(MODES))
def test_f32_product_cast_to_bf16(mode: str) -> None:
    """A bf16 result of an f32 product (bias, gelu and the cast in the epilogue; the
    TMA-store path), ragged in M and N."""
    x = torch.randn(1000, 264, device="cuda")
    w = torch.randn(136, 264, device="cuda") / 16
    bias = torch.randn(136, device="cuda")
    fn = ts.jit(lambda x, w, b: ts.cast(ts.gelu(x @ w.T + b), ts.bf16),
                options=CompileOptions.from_env(allow_tf32=MODES[mode]))
    out = _run_poisoned(fn, x, w, bias)
    assert out.dtype == torch.bfloat16 and "k8.f32.tf32.tf32" in fn.inspect_ir("ptx")
    ref = torch.nn.functional.gelu(x.double() @ w.double().T + bias.double(), approximate="tanh")
    assert _err(out, ref) < 1e-2


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("expr", ["a @ b", "a @ b.T"])
def test_f32_split_k(mode: str, expr: str) -> None:
    """f32 products with too few output tiles (16) for the SMs, K cut into ranges whose
    f32 partials are added in order: as accurate as the unsplit kernels."""
    fn = ts.jit(eval(f"lambda a, b: {expr}", {"ts": ts}),
                options=CompileOptions.from_env(allow_tf32=MODES[mode], split_k="auto"))
    a, b = _operands(expr, 512, 512, 8192, 17)
    c = _run_poisoned(fn, a, b)
    torch.cuda.synchronize()
    assert "split_k_reduce" in fn.inspect_ir("ptx")
    ref = a.double() @ (b.double().T if expr.endswith("b.T") else b.double())
    assert _err(c, ref) < TOL[mode]
