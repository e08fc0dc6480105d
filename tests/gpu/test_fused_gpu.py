"""Fused programs through ``ts.jit`` on CUDA tensors, against torch in float64.

The graph pipeline fuses each function into one ``tgraph.fused`` (elementwise chain,
optionally ending in a reduction) or ``tgraph.matmul_epilogue`` (matmul, bias,
activation, cast); the test checks that it did, then compares the GPU result with
torch on random inputs of ragged shapes. Skipped without a CUDA device.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402

F = torch.nn.functional


def _gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed + sum(shape))
    x = torch.randn(*shape, device="cuda", dtype=torch.float64, generator=gen)
    x = torch.where(x.abs() < 0.05, torch.full_like(x, 0.3), x)
    return x.to(dtype)


def _check(fn: ts.CompiledFunction, args: list[torch.Tensor], ref: Callable[..., torch.Tensor],
           fused: str, tol: float) -> None:
    got = fn(*args)
    torch.cuda.synchronize()
    assert fused in fn.inspect_ir("graph")
    want = ref(*(a.double() for a in args))
    assert got.shape == want.shape
    assert torch.isfinite(got.double()).all(), "non-finite (unwritten?) elements"
    err = (got.double() - want).abs() / want.abs().clamp(min=1.0)
    assert float(err.max()) < tol, float(err.max())


@pytest.mark.parametrize(
    ("shape", "dtype", "tol"),
    [((1000, 256), torch.float32, 1e-5), ((37, 45), torch.float32, 1e-5),
     ((513, 136), torch.bfloat16, 2e-2), ((1 << 20,), torch.float32, 1e-5)],
)
def test_elementwise_chain(shape: tuple[int, ...], dtype: torch.dtype, tol: float) -> None:
    @ts.jit
    def chain(x, y, z):
        return ts.exp(x * y + z) - x

    args = [_rand(*shape, dtype=dtype, seed=i) for i in range(3)]
    # Each Graph IR op rounds to its result type, so the reference rounds after each op too.
    def r(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype).double()

    _check(chain, args, lambda x, y, z: r(r(torch.exp(r(r(x * y) + z))) - x), "tgraph.fused", tol)


def test_broadcast_and_cast() -> None:
    @ts.jit
    def f(x, b, s):
        return ts.cast(ts.gelu(x + b), ts.f32) * s

    args = [_rand(77, 56, dtype=torch.bfloat16), _rand(56, dtype=torch.bfloat16, seed=1),
            _rand(77, 1, seed=2)]
    _check(f, args, lambda x, b, s: _gelu(x + b) * s, "tgraph.fused", 3e-2)


@pytest.mark.parametrize(
    ("name", "red", "ref"),
    [("sum_last", lambda v: ts.sum(v, axis=-1), lambda v: v.sum(-1)),
     ("max_all", lambda v: ts.max(v), lambda v: v.amax()),
     ("mean_last", lambda v: ts.mean(v, axis=1), lambda v: v.mean(1))],
)
def test_trailing_reduction(name: str, red: Callable, ref: Callable) -> None:
    @ts.jit
    def f(x, y):
        return red(ts.exp(x) * y)

    args = [_rand(129, 300, seed=3), _rand(300, seed=4)]
    _check(f, args, lambda x, y: ref(torch.exp(x) * y), "tgraph.fused", 1e-4)


@pytest.mark.parametrize("act", ["relu", "gelu", "silu"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_matmul_epilogue(act: str, dtype: torch.dtype) -> None:
    ts_act = {"relu": ts.relu, "gelu": ts.gelu, "silu": ts.silu}[act]
    torch_act = {"relu": torch.relu, "gelu": _gelu, "silu": F.silu}[act]

    @ts.jit
    def f(x, w, b):
        return ts.cast(ts_act(ts.matmul(x, w) + b), ts.bf16)

    args = [_rand(200, 136, dtype=dtype), _rand(136, 72, dtype=dtype, seed=1),
            _rand(72, dtype=dtype, seed=2)]
    _check(f, args, lambda x, w, b: torch_act(x @ w + b), "tgraph.matmul_epilogue", 3e-2)


@pytest.mark.parametrize(("dtype", "n", "tol"), [
    (torch.bfloat16, 768, 3e-2), (torch.bfloat16, 71, 3e-2), (torch.float32, 200, 1e-4),
])
def test_matmul_bias_residual_epilogue(dtype: torch.dtype, n: int, tol: float) -> None:
    """A linear layer on ``[B, S, D]`` activations and its skip connection: the bias and
    the residual both in the GEMM's epilogue (one kernel), ragged and odd widths too."""
    @ts.jit
    def f(x, w, b, r):
        return r + ts.reshape(ts.matmul(x, w, transpose_b=True) + b, (4, 75, n))

    args = [_rand(300, 256, dtype=dtype), _rand(n, 256, dtype=dtype, seed=1),
            _rand(n, dtype=dtype, seed=2), _rand(4, 75, n, dtype=dtype, seed=3)]
    _check(f, args, lambda x, w, b, r: r + (x @ w.T + b).reshape(4, 75, n), "residual", tol)
    target = f.inspect_ir("target")
    assert target.count("ttarget.launch_ex") == 1 and "matmul_epilogue" not in target
