"""Single elementwise kernels (merged dims, broadcasts, casts, selects) and column
reductions (tile_colreduce) on CUDA tensors, against torch in float64.

Skipped without a CUDA device.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402


def _rand(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, device="cuda", dtype=torch.float64, generator=gen).to(dtype)


def _close(got: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    assert got.shape == ref.shape
    tol = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}[dtype]
    err = (got.double() - ref).abs().max().item()
    assert err <= tol * max(1.0, ref.abs().max().item()), err


ELEMENTWISE = [
    ("same_shape", [(8, 33, 64), (8, 33, 64)], lambda x, y: x * y),
    ("row_bias", [(6, 130, 96), (96,)], lambda x, b: x + b),
    ("column", [(64, 517), (64, 1)], lambda x, m: x - m),
    ("odd_same", [(3, 5, 7), (3, 5, 7)], lambda x, y: x - y),
    ("middle", [(4, 1, 40), (4, 9, 40)], lambda x, y: x * y),
    ("pos_embed", [(16, 197, 768), (197, 768)], lambda x, p: x + p),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", ELEMENTWISE, ids=lambda c: c[0])
def test_elementwise_kernels_on_the_gpu(case, dtype) -> None:
    _, shapes, fn = case
    xs = [_rand(s, dtype, k) for k, s in enumerate(shapes)]
    _close(ts.jit(fn)(*xs), fn(*[x.double() for x in xs]), dtype)


def test_cast_and_select_on_the_gpu() -> None:
    x = _rand((96, 50257), torch.bfloat16, 5)
    got = ts.jit(lambda t: ts.cast(t, ts.f32))(x)
    assert got.dtype == torch.float32 and torch.equal(got, x.float())
    y = _rand((96, 50257), torch.bfloat16, 6)
    sel = ts.jit(lambda a, b: ts.where(ts.gt(a, b), a, b))(x, y)
    assert torch.equal(sel, torch.where(x > y, x, y))


REDUCTIONS = [
    ((8192, 768), (0,), "sum"),
    ((4, 1000, 96), (1,), "mean"),
    ((128, 64, 49), (0,), "sum"),
    ((40, 50, 5), (0, 1), "max"),
    ((3000, 7), (0,), "min"),
    ((4, 8, 4, 256, 64), (2,), "sum"),  # grouped-query heads: the thin kernel
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", REDUCTIONS, ids=lambda c: f"{c[2]}{list(c[1])}{list(c[0])}")
def test_column_reductions_on_the_gpu(case, dtype) -> None:
    shape, axes, kind = case
    x = _rand(shape, dtype, 3)
    f = ts.jit(lambda t: getattr(ts, kind)(t, axis=axes))
    got = f(x)
    x64 = x.double()
    ref = {"sum": lambda: x64.sum(axes), "mean": lambda: x64.mean(axes),
           "max": lambda: x64.amax(axes), "min": lambda: x64.amin(axes)}[kind]()
    _close(got, ref, dtype)
    assert torch.equal(f(x), got)  # a fixed combination order: the same bits again
