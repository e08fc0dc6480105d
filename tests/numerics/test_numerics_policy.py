"""@ts.precision_policy: the guide's QuantizedPolicy on numpy arrays and in annotations."""

import numpy as np
import pytest

import tessera as ts
from tessera.ir.dtypes import dtype_of
from tessera.numerics import cast_array
from tessera.numerics.policy_classes import is_precision_policy


@ts.precision_policy
class QuantizedPolicy:
    storage = ts.int8
    scale = ts.f32
    compute = ts.f32
    accumulate = ts.f32

    def quantize(self, x: ts.f32) -> ts.int8:
        scale = ts.max(ts.abs(x)) / 127.0
        return ts.round(x / scale).astype(ts.int8), scale

    def dequantize(self, x: ts.int8, scale: ts.f32) -> ts.f32:
        return x.astype(ts.f32) * scale


@ts.precision_policy
class Fp8Policy:
    storage = ts.fp8_e4m3
    scale = "f32"

    def quantize(self, x):  # noqa: ANN001, ANN201
        scale = ts.max(ts.abs(x)) / 448.0
        return (x / scale).astype(ts.fp8_e4m3 @ ts.saturate), scale

    def dequantize(self, x, scale):  # noqa: ANN001, ANN201
        return x.astype(ts.f32) * scale


def test_policy_class_fields() -> None:
    assert is_precision_policy(QuantizedPolicy) and is_precision_policy(QuantizedPolicy())
    assert QuantizedPolicy.storage == ts.int8 and QuantizedPolicy.scale == ts.f32
    assert QuantizedPolicy.numeric_policy == ts.int8 @ ts.accum(ts.f32)
    assert Fp8Policy.scale == ts.f32 and Fp8Policy.compute == ts.fp8_e4m3
    assert Fp8Policy.numeric_policy == ts.NumericPolicy(ts.fp8_e4m3)
    assert dtype_of(QuantizedPolicy) == ts.int8


def test_quantize_on_numpy_matches_a_float64_reference() -> None:
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((16, 16)) * 3).astype(np.float32)
    q, scale = QuantizedPolicy().quantize(x)
    assert type(q) is np.ndarray and q.dtype == np.int8 and q.shape == x.shape
    assert isinstance(scale, np.float32)
    amax = float(np.abs(x.astype(np.float64)).max())
    assert float(scale) == pytest.approx(amax / 127.0, rel=2.0**-23)
    # Each code is the nearest integer to x/scale (ties to even), |code| <= 127.
    ratio = x.astype(np.float64) / float(scale)
    assert (np.abs(q.astype(np.float64) - ratio) <= 0.5 + 1e-5).all()
    assert np.abs(q).max() == 127
    d = QuantizedPolicy().dequantize(q, scale)
    assert type(d) is np.ndarray and d.dtype == np.float32
    assert (np.abs(d.astype(np.float64) - x) <= float(scale) * (0.5 + 1e-5)).all()


def test_fp8_policy_round_trip_error() -> None:
    rng = np.random.default_rng(9)
    x = rng.standard_normal(4096).astype(np.float32)
    q, scale = Fp8Policy().quantize(x)
    assert q.dtype == ts.fp8_e4m3.np_dtype
    assert float(np.abs(q.astype(np.float64)).max()) == 448.0
    d = Fp8Policy().dequantize(q, scale).astype(np.float64)
    u = 2.0**-4  # e4m3: 3 fraction bits, unit roundoff eps/2
    eta = 2.0**-10 * float(scale)  # half a subnormal step, scaled back
    assert (np.abs(d - x) <= (u + 2.0**-20) * np.abs(x) + eta).all()


def test_annotation_uses_the_storage_type() -> None:
    ann = ts.Tensor["D", "D", QuantizedPolicy]  # noqa: F821
    assert ann.policy.storage == ts.int8

    @ts.jit
    def dequant(w: ts.Tensor["D", "D", QuantizedPolicy]) -> ts.Tensor["D", "D", ts.f32]:  # noqa: F821
        return QuantizedPolicy().dequantize(w, 0.25)

    rng = np.random.default_rng(1)
    w = cast_array(rng.integers(-127, 128, (8, 8)), ts.int8)
    out = dequant(w)
    assert out.dtype == np.float32
    assert np.array_equal(out, QuantizedPolicy().dequantize(w, np.float32(0.25)))
    assert np.array_equal(out, w.astype(np.float64) * 0.25)


def test_policy_errors() -> None:
    with pytest.raises(TypeError, match="storage"):

        @ts.precision_policy
        class NoStorage:
            scale = ts.f32

    with pytest.raises(TypeError, match="unknown dtype"):

        @ts.precision_policy
        class BadType:
            storage = "int3"

    with pytest.raises(TypeError):
        ts.precision_policy(lambda x: x)


def test_round_and_abs_on_numpy() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 3.7], dtype=np.float32)
    r = ts.round(x)
    assert r.dtype == np.float32 and r.tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, 4.0]
    assert ts.round(2.5) == 2.0 and ts.round([1.5]).tolist() == [2.0]
    assert ts.abs(np.array([-3, 4], np.int8)).tolist() == [3, 4]
