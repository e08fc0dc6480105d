"""Packing fp4 / fp6 codes into bytes: layout and exact round trips."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.numerics import cast_array
from tessera.numerics.pack import pack_fp4, pack_fp6, packed_nbytes, unpack_fp4, unpack_fp6
from tests.numerics.test_numerics_reference import all_codes, codes_of


def test_fp4_all_codes_round_trip_and_layout() -> None:
    codes = all_codes(ts.fp4)  # 16 codes
    packed = pack_fp4(codes)
    assert packed.dtype == np.uint8 and packed.shape == (8,)
    # Element 2j in the low nibble, 2j + 1 in the high nibble.
    assert packed.tolist() == [(2 * j) | ((2 * j + 1) << 4) for j in range(8)]
    assert np.array_equal(codes_of(unpack_fp4(packed)), codes_of(codes))


@pytest.mark.parametrize("d", [ts.fp6_e2m3, ts.fp6_e3m2], ids=lambda d: d.name)
def test_fp6_all_codes_round_trip_and_layout(d: ts.DType) -> None:
    codes = all_codes(d)  # 64 codes
    packed = pack_fp6(codes)
    assert packed.dtype == np.uint8 and packed.shape == (48,)
    # First group: codes 0, 1, 2, 3 in bits 0-5, 6-11, 12-17, 18-23 (little endian).
    word = 0 | 1 << 6 | 2 << 12 | 3 << 18
    assert packed[:3].tolist() == [word & 0xFF, (word >> 8) & 0xFF, word >> 16]
    out = unpack_fp6(packed, dtype=d)
    assert out.dtype == d.np_dtype
    assert np.array_equal(codes_of(out), codes_of(codes))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 8])
def test_ragged_rows_round_trip(n: int) -> None:
    rng = np.random.default_rng(n)
    x = rng.standard_normal((3, 2, n)) * 3
    for d, pack, unpack in (
        (ts.fp4, pack_fp4, unpack_fp4),
        (ts.fp6_e2m3, pack_fp6, unpack_fp6),
        (ts.fp6_e3m2, pack_fp6, lambda p, n: unpack_fp6(p, n, dtype=ts.fp6_e3m2)),
    ):
        v = cast_array(x, d)
        p = pack(v)
        assert p.shape == (3, 2, packed_nbytes(n, d.bits))
        back = unpack(p, n)
        assert back.shape == v.shape
        assert np.array_equal(codes_of(back), codes_of(v))
        assert np.array_equal(back.astype(np.float64), v.astype(np.float64))


def test_padding_is_positive_zero() -> None:
    v = cast_array(np.array([6.0, -6.0, 1.0]), ts.fp4)
    assert unpack_fp4(pack_fp4(v)).astype(np.float64).tolist() == [6.0, -6.0, 1.0, 0.0]
    w = cast_array(np.array([7.5]), ts.fp6)
    assert unpack_fp6(pack_fp6(w)).astype(np.float64).tolist() == [7.5, 0.0, 0.0, 0.0]


def test_pack_rejects_wrong_inputs() -> None:
    with pytest.raises(TypeError, match="cast_array"):
        pack_fp4(np.zeros(4, np.float32))
    with pytest.raises(TypeError):
        pack_fp6(np.zeros(4, ml_dtypes.float4_e2m1fn))
    with pytest.raises(ValueError):
        unpack_fp6(np.zeros(4, np.uint8))
    with pytest.raises(ValueError):
        unpack_fp4(np.zeros(2, np.uint8), 7)
    with pytest.raises(TypeError):
        unpack_fp6(np.zeros(3, np.uint8), dtype=ts.fp4)
    with pytest.raises(TypeError):
        unpack_fp4(np.zeros(2, np.int8))
