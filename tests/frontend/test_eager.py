"""Operators called outside traced functions on arrays run at once (``tessera.frontend.eager``),
checked against numpy/torch in float64; calls that cannot run eagerly keep their located
errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tessera as ts
from tessera import op
from tessera.frontend import eager


def rnd(*shape: int, seed: int = 0, dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_matmul_on_numpy_arrays() -> None:
    a, b = rnd(37, 19), rnd(19, 23, seed=1)
    y = op.matmul(a, b, tile_shape=(128, 128, 64))
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == (37, 23)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_torch_tensors_give_torch_tensors() -> None:
    x = torch.randn(5, 7, dtype=torch.float64)
    y = ts.softmax(x, axis=-1)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float64
    torch.testing.assert_close(y, torch.softmax(x, -1))


def test_arrays_in_lists_and_keyword_arguments() -> None:
    a, b = rnd(2, 3), rnd(4, 3, seed=1)
    np.testing.assert_array_equal(ts.concat([a, b], axis=0), np.concatenate([a, b]))
    np.testing.assert_allclose(ts.sum(a, axis=1), a.astype(np.float64).sum(1), rtol=1e-6)
    np.testing.assert_allclose(ts.where(a > 0, a, b[:2]), np.where(a > 0, a, b[:2]))


def test_compiled_once_per_operator_and_static_arguments() -> None:
    eager._CACHE.clear()
    a = rnd(3, 4)
    ts.sum(a, axis=0)
    ts.sum(a * 2, axis=0)  # same operator and axis: reused
    assert len(eager._CACHE) == 1
    ts.sum(a, axis=1)  # another axis: another function
    ts.exp(a)
    assert len(eager._CACHE) == 3


def test_arrays_where_the_operator_takes_values_are_constants() -> None:
    """A shape given as an array is a constant of the compiled function, as in a traced
    one; ``ts.constant`` makes a value inside traced functions only."""
    a = rnd(2, 6)
    np.testing.assert_array_equal(ts.reshape(a, np.array([3, 4])), a.reshape(3, 4))
    with pytest.raises(ts.TraceError, match=r"constant: called outside a traced function"):
        ts.constant(np.ones(3, np.float32))


def test_unhashable_argument_still_runs() -> None:
    a = rnd(2, 6)
    got = ts.reshape(a, [3, 4])  # a list shape: compiled for this call only
    np.testing.assert_array_equal(got, a.reshape(3, 4))


def test_errors_name_the_operator_and_the_call() -> None:
    with pytest.raises(ts.ShapeError, match=r"matmul"):
        ts.matmul(rnd(3, 4), rnd(5, 6))
    # no array argument: nothing to run on
    with pytest.raises(ts.TraceError, match=r"constant: called outside a traced function"):
        ts.constant(1.0)
    # collectives need the ranks of a mesh
    with pytest.raises(ts.TraceError, match=r"all_reduce: called outside a traced function"):
        ts.all_reduce(rnd(4), op="sum", axis="dp")


def test_inside_a_traced_function_nothing_changes() -> None:
    @ts.jit
    def f(x, w):
        return ts.relu(ts.matmul(x, w))

    x, w = rnd(6, 5), rnd(5, 4, seed=1)
    np.testing.assert_allclose(f(x, w), np.maximum(x.astype(np.float64) @ w, 0), rtol=1e-5,
                               atol=1e-6)
    assert "tgraph.matmul" in f.inspect_ir("graph")


def test_static_arguments_that_compare_equal_are_told_apart() -> None:
    """``1``, ``1.0`` and ``True`` promote differently, ``0.0`` and ``-0.0`` add
    differently: each gets its own compiled function, never another's result."""
    ints = np.arange(4, dtype=np.int32)
    assert ts.add(ints, 1).dtype == np.int32
    got = ts.add(ints, 1.5)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, ints + np.float32(1.5))
    assert ts.add(ints, 1.0).dtype == np.float32
    zeros = np.array([-0.0, 0.0], np.float32)
    assert np.signbit(ts.add(zeros, -0.0)).tolist() == [True, False]
    assert np.signbit(ts.add(zeros, 0.0)).tolist() == [False, False]


def test_every_operator_declares_its_tensor_parameters() -> None:
    """Eager calls find an operator's tensor inputs by its annotations (``Any``); an
    operator whose tensors were annotated otherwise would never run eagerly."""
    import inspect

    from tessera.frontend.ops import OP_FUNCTIONS

    without = set()
    for name in OP_FUNCTIONS:
        if name in eager.NOT_EAGER:
            continue
        sig = inspect.signature(getattr(ts, name))
        if not any(p.annotation in eager.TENSOR_ANNOTATIONS for p in sig.parameters.values()):
            without.add(name)
    assert without == set()
