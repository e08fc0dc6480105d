"""Stochastic rounding: Philox known answers, reproducibility, neighbours, unbiasedness."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tessera as ts
from tessera.numerics import cast_array
from tessera.numerics.philox import philox4x32, uniform_bits
from tests.numerics.test_numerics_reference import NARROW_FLOATS, finfo, grid_round

# Random123's kat_vectors for philox4x32 with 10 rounds: counter, key, output.
PHILOX_KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    (
        (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF),
        (0xFFFFFFFF, 0xFFFFFFFF),
        (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
    ),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]

ALL_TARGETS = NARROW_FLOATS + (ts.f32, ts.int8)


@pytest.mark.parametrize(("ctr", "key", "out"), PHILOX_KAT)
def test_philox_known_answers(ctr: tuple, key: tuple, out: tuple) -> None:
    got = philox4x32(tuple(np.array([c], dtype=np.uint32) for c in ctr), key)
    assert tuple(int(w[0]) for w in got) == out


def test_uniform_bits_counter_layout() -> None:
    """Element i uses counter (offset + i) as (low word, high word, 0, 0)."""
    offset = 2**32 - 2
    bits = uniform_bits(4, seed=(7 << 32) | 5, offset=offset)
    for i in range(4):
        c = offset + i
        w = philox4x32(
            (np.uint32(c & 0xFFFFFFFF), np.uint32(c >> 32), np.uint32(0), np.uint32(0)), (5, 7)
        )
        assert int(bits[i]) == int(w[0])


def neighbours(x: np.ndarray, d: ts.DType) -> tuple[np.ndarray, np.ndarray]:
    """Representable neighbours (signed) of each x, from the exact rational grid."""
    if d == ts.int8:
        return np.floor(x), np.ceil(x)
    if d == ts.f32:
        r = x.astype(np.float32).astype(np.float64)
        below = np.where(r > x, np.nextafter(r.astype(np.float32), np.float32(-np.inf)), r)
        above = np.where(r < x, np.nextafter(r.astype(np.float32), np.float32(np.inf)), r)
        return below.astype(np.float64), above.astype(np.float64)
    lo = np.empty_like(x)
    hi = np.empty_like(x)
    for i, v in enumerate(x):
        a, b = grid_round(float(v), d)
        if v < 0:
            lo[i], hi[i] = -float(b), -float(a)
        else:
            lo[i], hi[i] = float(a), float(b)
    return lo, hi


def _in_range_samples(d: ts.DType, n: int, rng: np.random.Generator) -> np.ndarray:
    if d == ts.int8:
        return rng.uniform(-100, 100, n)
    fi = finfo(d) if d != ts.f32 else np.finfo(np.float32)
    lo = math.log2(float(fi.smallest_subnormal))
    hi = math.log2(float(fi.max)) - 0.1
    return 2.0 ** rng.uniform(lo, hi, n) * rng.choice([-1.0, 1.0], n)


@pytest.mark.parametrize("d", ALL_TARGETS, ids=lambda d: d.name)
def test_result_is_one_of_the_two_neighbours(d: ts.DType) -> None:
    rng = np.random.default_rng(21)
    x = _in_range_samples(d, 2000, rng)
    out = cast_array(x, d @ ts.stochastic_round, seed=3).astype(np.float64)
    lo, hi = neighbours(x, d)
    assert ((out == lo) | (out == hi)).all()
    # Both directions happen, and exact values never move.
    assert (out == lo).any() and (out == hi).any()
    exact = cast_array(x, d).astype(np.float64)
    assert np.array_equal(cast_array(exact, d @ ts.stochastic_round, seed=9).astype(np.float64),
                          exact)


@pytest.mark.parametrize("d", ALL_TARGETS, ids=lambda d: d.name)
def test_reproducible_from_seed_and_offset(d: ts.DType) -> None:
    rng = np.random.default_rng(4)
    x = _in_range_samples(d, 4096, rng).reshape(64, 64)
    p = d @ ts.stochastic_round
    a = cast_array(x, p, seed=123)
    b = cast_array(x, p, seed=123)
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
    c = cast_array(x, p, seed=124)
    assert not np.array_equal(a.view(np.uint8), c.view(np.uint8))
    # The stream is indexed by element: a slice cast with offset = its start is the same slice.
    flat = x.reshape(-1)
    tail = cast_array(flat[1000:], p, seed=123, offset=1000)
    assert np.array_equal(tail.view(np.uint8), a.reshape(-1)[1000:].view(np.uint8))
    # No seed means seed 0.
    assert np.array_equal(cast_array(x, p).view(np.uint8), cast_array(x, p, seed=0).view(np.uint8))


@pytest.mark.parametrize("d", ALL_TARGETS, ids=lambda d: d.name)
@pytest.mark.parametrize("frac", [0.05, 0.3, 0.5, 0.77])
def test_rounds_up_with_probability_of_the_fraction(d: ts.DType, frac: float) -> None:
    """x = lo + frac*(hi - lo): the up-rate and the mean error match, within 5 sigma of N draws."""
    n = 40_000
    base = {ts.int8: 3.0, ts.f32: 1.5}.get(d, 1.0)
    lo, hi = neighbours(np.array([base * (1 + 1e-9)]), d)
    lo_v, hi_v = float(lo[0]), float(hi[0])
    x = lo_v + frac * (hi_v - lo_v)
    assert lo_v < x < hi_v
    xs = np.full(n, x)
    out = cast_array(xs, d @ ts.stochastic_round, seed=2024).astype(np.float64)
    ups = (out == hi_v).mean()
    sigma = math.sqrt(frac * (1 - frac) / n)
    assert abs(ups - frac) < 5 * sigma + 2.0**-32
    mean_err = (out - x).mean()
    assert abs(mean_err) < 5 * sigma * (hi_v - lo_v) + 2.0**-32 * (hi_v - lo_v)
    # Nearest-even rounding of the same values is biased whenever frac != 1/2.
    if frac != 0.5:
        nearest = cast_array(xs, d).astype(np.float64)
        assert abs((nearest - x).mean()) > 10 * abs(mean_err)


@pytest.mark.parametrize("d", NARROW_FLOATS, ids=lambda d: d.name)
def test_mean_error_vanishes_over_many_values(d: ts.DType) -> None:
    """Over varied values in [1, 2), the relative mean error is within 5 sigma of 0."""
    n = 50_000
    rng = np.random.default_rng(99)
    x = rng.uniform(1.0, 2.0, n)
    out = cast_array(x, d @ ts.stochastic_round, seed=77).astype(np.float64)
    lo, hi = neighbours(x[:2000], d)
    gap = float(np.max(hi - lo))
    sigma = gap / 2 / math.sqrt(n)  # each error has |e| <= gap, variance <= gap**2 / 4
    assert abs((out - x).mean()) < 5 * sigma


def test_negative_values_round_symmetrically() -> None:
    x = np.full(20_000, -1.3)
    pos = cast_array(-x, ts.fp8_e4m3 @ ts.stochastic_round, seed=5).astype(np.float64)
    neg = cast_array(x, ts.fp8_e4m3 @ ts.stochastic_round, seed=5).astype(np.float64)
    assert np.array_equal(neg, -pos)


def test_stochastic_overflow_follows_format_rules() -> None:
    # Beyond the finite max, the virtual next value stands for overflow.
    x = np.full(4000, 448.0 + 16.0)  # halfway to e4m3's (NaN) next code 480
    out = cast_array(x, ts.fp8_e4m3 @ ts.stochastic_round, seed=1).astype(np.float64)
    assert set(np.unique(out[~np.isnan(out)])) == {448.0}
    assert 0.4 < np.isnan(out).mean() < 0.6
    sat = cast_array(x, ts.fp8_e4m3 @ ts.stochastic_round @ ts.saturate, seed=1)
    assert (sat.astype(np.float64) == 448.0).all()
    fp4 = cast_array(np.full(100, 7.0), ts.fp4 @ ts.stochastic_round, seed=1)
    assert (fp4.astype(np.float64) == 6.0).all()
    e5 = cast_array(np.array([1e9, -1e9, np.inf, np.nan]), ts.fp8_e5m2 @ ts.stochastic_round)
    assert np.isinf(e5[:3].astype(np.float64)).all() and np.isnan(float(e5[3]))
