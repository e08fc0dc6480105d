"""Data movement on the GPU (tile_datamove): reshapes as views (no kernel), vector
copies for transpose / slice / concat and the shared-memory tiled transpose, through
``ts.jit`` on CUDA tensors against numpy (exact: data movement), with NaN-poisoned
outputs on the checked path and again through the prepared fast path. Skipped without
a CUDA device."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402
from tessera.runtime import cuda  # noqa: E402

DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "f64": torch.float64,
      "i32": torch.int32}


def _rand(shape, dtype: str, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    if dtype == "i32":
        return torch.randint(-1000, 1000, shape, device="cuda", generator=gen, dtype=torch.int32)
    x = torch.randn(*shape, device="cuda", dtype=torch.float64, generator=gen)
    x = torch.where(x.abs() < 0.05, torch.full_like(x, 0.3), x)
    return x.to(DT[dtype])


def _np(t: torch.Tensor) -> np.ndarray:
    return (t.double() if t.is_floating_point() else t.long()).cpu().numpy()


def _check(fn, args, refs) -> None:
    """Poisoned checked run, then the fast path twice; every result equals its numpy
    reference and shares no memory with an argument."""
    spec = fn.specialize(*args)
    outs = cuda.run_host(spec.ir("target"), spec.name, list(args), poison=True,
                         ptx=spec.ir("ptx"))
    fast = fn(*args)
    fast = list(fast) if isinstance(fast, tuple | list) else [fast]
    for got in (outs, fast):
        assert len(got) == len(refs)
        for o, r in zip(got, refs):
            assert tuple(o.shape) == r.shape
            np.testing.assert_array_equal(_np(o), r)
            for a in args:
                assert o.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()


@pytest.mark.parametrize("dtype", ["bf16", "f32", "i32"])
def test_reshape_chain(dtype):
    x = _rand((8, 33, 96), dtype, 1)

    @ts.jit
    def f(x):
        y = ts.reshape(x, (8, 33, 3, 32))
        z = ts.reshape(y + y, (264, 96))  # a view of the sum's buffer
        w = ts.reshape(z, (8, 33 * 96)) + ts.reshape(x, (8, 33 * 96))
        return ts.reshape(x, (33, 8, 96)), z, ts.reshape(w, (8 * 33 * 96,))

    xn = _np(x)
    # the sums round to the storage type per op, as torch's do: the reference is torch's
    w = ((x + x).reshape(8, -1) + x.reshape(8, -1)).reshape(-1)
    _check(f, [x], [xn.reshape(33, 8, 96), _np(x + x).reshape(264, 96), _np(w)])


@pytest.mark.parametrize("shape,perm,dtype", [
    ((8, 67, 12, 64), (0, 2, 1, 3), "bf16"),
    ((3, 33, 5, 17), (2, 0, 1, 3), "f32"),
    ((97, 131), (1, 0), "bf16"),
    ((2, 65, 3, 70), (0, 3, 2, 1), "f32"),
    ((5, 37, 41), (0, 2, 1), "f64"),
    ((4, 129, 66), (2, 1, 0), "f16"),
])
def test_transpose(shape, perm, dtype):
    x = _rand(shape, dtype, 2)

    @ts.jit
    def f(x):
        return ts.transpose(x, list(perm))

    _check(f, [x], [np.transpose(_np(x), perm)])


@pytest.mark.parametrize("shape,start,limit,dtype", [
    ((8, 67, 2304), (0, 0, 768), (8, 67, 1536), "bf16"),
    ((5, 41), (1, 3), (4, 38), "f32"),
    ((3, 7, 24), (1, 2, 8), (3, 7, 16), "f16"),
])
def test_slice(shape, start, limit, dtype):
    x = _rand(shape, dtype, 3)

    @ts.jit
    def f(x):
        return ts.slice(x, list(start), list(limit))

    _check(f, [x], [_np(x)[tuple(slice(a, b) for a, b in zip(start, limit))]])


@pytest.mark.parametrize("shapes,axis,dtype", [
    (((8, 67, 768), (8, 67, 768)), 2, "bf16"),
    (((3, 5), (3, 3), (3, 7)), 1, "f32"),
    (((2, 9, 8), (5, 9, 8)), 0, "f16"),
])
def test_concat(shapes, axis, dtype):
    xs = [_rand(s, dtype, 4 + i) for i, s in enumerate(shapes)]

    if len(xs) == 2:
        f = ts.jit(lambda a, b: ts.concat([a, b], axis=axis))
    else:
        f = ts.jit(lambda a, b, c: ts.concat([a, b, c], axis=axis))

    _check(f, xs, [np.concatenate([_np(x) for x in xs], axis=axis)])
