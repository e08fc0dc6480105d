"""Sample inputs for the operator suite (tests/frontend/test_opinfo.py), in the style of
PyTorch's OpInfo: per operator, the dtypes it accepts and a generator of
argument tuples (numpy arrays; bf16 as ``ml_dtypes``) covering odd sizes,
broadcasting, rank-0 and empty tensors and special values (inf, -inf, NaN, -0.0).

Sample counts are moderate and fixed (seeded), so the suite runs in seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int32", "int64")
ALL = (*FLOATS, *INTS, "bool")

SPECIALS = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 1.0, -2.5, 0.5], dtype=np.float64)

UNARY_SHAPES: tuple[tuple[int, ...], ...] = ((), (0,), (7,), (3, 5), (2, 1, 33))
BINARY_SHAPES: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((7,), (7,)),
    ((3, 5), (5,)),
    ((3, 1), (1, 4)),
    ((), (4,)),
    ((2, 3, 1), (3, 6)),
    ((0, 3), (3,)),
)


def np_dtype(name: str) -> np.dtype:
    """The numpy (or ml_dtypes) dtype called ``name``."""
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def make(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: str, *, low: float = -3.0,
    high: float = 3.0,
) -> np.ndarray:
    """Random values of ``shape``: uniform floats in [low, high), ints in [-9, 9], bools."""
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype in INTS:
        lo = 0 if low >= 0 else -9
        return np.asarray(rng.integers(lo, 10, size=shape), dtype=dtype)
    return np.asarray(rng.uniform(low, high, size=shape), dtype=np_dtype(dtype))


def with_specials(x: np.ndarray) -> np.ndarray:
    """``x`` (float, at least 8 elements) with the special values in its first entries."""
    out = x.copy().reshape(-1)
    out[: SPECIALS.size] = SPECIALS.astype(x.dtype)
    return out.reshape(x.shape)


@dataclass
class OpInfo:
    """One operator of the suite.

    ``ts_fn`` is applied to traced tensors inside ``@ts.jit``; ``torch_fn`` is the
    reference on torch tensors (CPU, same dtypes, or float64 for the float64
    reference). ``samples(dtype, rng)`` yields argument tuples. ``grad``: compare
    gradients with ``torch.autograd`` on float64 samples (``grad_samples``, or the
    finite samples of ``samples``).
    """

    name: str
    ts_fn: Callable[..., Any]
    torch_fn: Callable[..., Any]
    dtypes: tuple[str, ...]
    samples: Callable[[str, np.random.Generator], Iterator[tuple[np.ndarray, ...]]]
    grad: bool = False
    grad_samples: Callable[[np.random.Generator], Iterator[tuple[np.ndarray, ...]]] | None = None
    signed_zeros: bool = True
    """Zero results must carry torch's sign (off where the sign is unspecified)."""
    rtol: dict[str, float] = field(default_factory=dict)
    """Tolerance overrides per dtype name."""


def unary_samples(low: float = -3.0, high: float = 3.0) -> Callable[..., Iterator[tuple[np.ndarray, ...]]]:
    def gen(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
        for s in UNARY_SHAPES:
            yield (make(rng, s, dtype, low=low, high=high),)
        if dtype in FLOATS:
            yield (with_specials(make(rng, (3, 4), dtype, low=low, high=high)),)
    return gen


def binary_samples(
    low: float = -3.0, high: float = 3.0, rhs_low: float | None = None
) -> Callable[..., Iterator[tuple[np.ndarray, ...]]]:
    def gen(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
        for sa, sb in BINARY_SHAPES:
            a = make(rng, sa, dtype, low=low, high=high)
            b = make(rng, sb, dtype, low=low if rhs_low is None else rhs_low, high=high)
            yield a, b
        if dtype in FLOATS:
            a = with_specials(make(rng, (2, 8), dtype))
            yield a, np.flip(a, axis=1).copy()
            yield a, make(rng, (8,), dtype)
    return gen


def reduction_samples(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    for s in ((), (7,), (3, 5), (2, 3, 4), (0, 3)):
        yield (make(rng, s, dtype),)
    if dtype in FLOATS:
        yield (with_specials(make(rng, (2, 4), dtype)),)


def row_samples(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    for s in ((1, 1), (7,), (3, 5), (2, 3, 33)):
        yield (make(rng, s, dtype),)


def finite_f64(gen: Callable[..., Iterator[tuple[np.ndarray, ...]]]) -> Callable[..., Any]:
    """The float64 samples of ``gen`` without special values and away from zero (for
    gradients at differentiable points)."""

    def grad_gen(rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
        for args in gen("float64", rng):
            if all(np.all(np.isfinite(a)) for a in args) and all(a.size for a in args):
                yield tuple(np.where(np.abs(a) < 0.1, 0.7, a) for a in args)

    return grad_gen
