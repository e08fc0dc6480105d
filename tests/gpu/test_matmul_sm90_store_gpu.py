"""The sm90 GEMM's staged store on a Hopper GPU: results that TMA does not store (N % 8
!= 0, f32 results, split-K's f32 partials) leave through shared memory
(:mod:`tessera.passes.sm90.staged_store`). Each case runs with the staged store and with
the register store (``CompileOptions.sm90_store``), checks both against float64 and checks
that they are bitwise equal. Outputs are poisoned with NaN first, so unwritten elements
fail. Skipped without a compute capability 9.0 device."""

from __future__ import annotations

import re

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

TYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
TOL = {"bf16": 1e-2, "f16": 1e-2, "f32": 1e-5}
NS = [50257, 1000, 4100, 4096]


def _run(fn, args, store: str, split_k: str = "off"):
    """``fn(*args)`` compiled with ``sm90_store=store``, its output poisoned with NaN
    before any kernel runs; the output and the PTX."""
    opts = CompileOptions.from_env(sm90_store=store, split_k=split_k)
    spec = ts.jit(fn, options=opts).specialize(*args)
    (out,) = cuda.run_host(spec.ir("target"), spec.name, list(args), poison=True,
                           ptx=spec.ir("ptx"))
    torch.cuda.synchronize()
    return out, spec.ir("ptx")


def _check(out, ref, tol: float) -> None:
    assert out.shape == ref.shape
    assert torch.isfinite(out).all(), "unwritten (NaN) elements in the result"
    err = float((out.double() - ref).norm() / ref.norm())
    assert err < tol, err


def _gemm_ptx(ptx: str) -> str:
    """The PTX of the program's (one) wgmma kernel."""
    (kernel,) = [k for k in re.split(r"(?=\.visible \.entry )", ptx) if "wgmma.mma_async" in k]
    return kernel


def _both(fn, args, ref, tol: float, split_k: str = "off", staged: bool = True) -> None:
    """Both stores against ``ref`` and against each other (bitwise); ``staged``: the
    GEMM stores through shared memory (a result TMA does not store), else by TMA."""
    out, ptx = _run(fn, args, "staged", split_k)
    _check(out, ref, tol)
    kernel = _gemm_ptx(ptx)
    assert ("ld.shared" in kernel) == staged
    assert ("cp.async.bulk.tensor.2d.global.shared" in kernel) == (not staged)
    old, old_ptx = _run(fn, args, "registers", split_k)
    assert "ld.shared" not in _gemm_ptx(old_ptx)
    _check(old, ref, tol)
    assert torch.equal(out, old), "the staged and register stores differ"


def _rand(shape, dtype, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, device="cuda", dtype=torch.float32, generator=gen).to(dtype)


@pytest.mark.parametrize("m", [333, 1, 65])
@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("n", NS)
def test_products(n: int, dtype: str, m: int) -> None:
    """``a @ b.T`` (a linear layer) with odd M; 16-bit results with N % 8 == 0 are TMA
    stored (both options the same kernel)."""
    a = _rand((m, 320), TYPES[dtype], 1)
    b = _rand((n, 320), TYPES[dtype], 2) / 8
    staged = dtype == "f32" or n % 8 != 0
    _both(lambda a, b: a @ b.T, (a, b), a.double() @ b.double().T, TOL[dtype],
          staged=staged)


@pytest.mark.parametrize("n", NS)
def test_f32_results_of_bf16(n: int) -> None:
    a, b = _rand((333, 256), torch.bfloat16, 3), _rand((256, n), torch.bfloat16, 4)
    _both(lambda a, b: ts.matmul(a, b, out_dtype=ts.f32), (a, b),
          a.double() @ b.double(), 1e-5)


@pytest.mark.parametrize("n", [50257, 4100])
def test_lm_head(n: int) -> None:
    """GPT-2's logits (8192 x N x 768), both layouts of the weight."""
    x = _rand((8192, 768), torch.bfloat16, 5)
    w = _rand((n, 768), torch.bfloat16, 6) / 8
    _both(lambda a, b: a @ b.T, (x, w), x.double() @ w.double().T, 1e-2)
    _both(lambda a, b: a @ b, (x, w.T.contiguous()), x.double() @ w.double().T, 1e-2)


@pytest.mark.parametrize("act", ["gelu", "relu"])
@pytest.mark.parametrize("full", [False, True], ids=["row-bias", "full-bias"])
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("n", NS)
def test_fused_epilogue(n: int, dtype: str, full: bool, act: str) -> None:
    x = _rand((333, 192), TYPES[dtype], 7)
    w = _rand((n, 192), TYPES[dtype], 8) / 8
    bias = _rand((333, n) if full else (n,), TYPES[dtype], 9)
    f = ts.gelu if act == "gelu" else ts.relu

    def linear(x, w, bias):
        return f(x @ w.T + bias)

    y = x.double() @ w.double().T + bias.double()
    ref = torch.nn.functional.gelu(y, approximate="tanh") if act == "gelu" else torch.relu(y)
    _both(linear, (x, w, bias), ref, 2e-2 if dtype == "bf16" else 1e-4,
          staged=dtype == "f32" or n % 8 != 0)


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("n", [1001, 4100])
def test_batched(n: int, dtype: str) -> None:
    a = _rand((3, 128, 64), TYPES[dtype], 10)
    b = _rand((3, 64, n), TYPES[dtype], 11)
    _both(lambda a, b: a @ b, (a, b), a.double() @ b.double(), TOL[dtype])


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("n", NS[1:] + [1001])
def test_split_k(n: int, dtype: str) -> None:
    """Split-K (3 ranges): the f32 partials at rows ``range * M`` of the workspace are
    staged whatever the result type; M = 333 ragged."""
    a = _rand((333, 4096), TYPES[dtype], 12)
    b = _rand((4096, n), TYPES[dtype], 13) / 16
    _both(lambda a, b: a @ b, (a, b), a.double() @ b.double(), TOL[dtype], split_k="3")
