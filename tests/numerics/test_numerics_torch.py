"""cast_array against torch's own (CPU) casts to bf16, fp16 and fp8, bit for bit.

torch converts to float8_e4m3fn with saturation (finite overflow and Inf become
+-448; NaN stays NaN), which is Tessera's ``ts.fp8_e4m3 @saturate``; its other
casts follow each format's own overflow rule (Inf), which is the default policy.
"""

import numpy as np
import pytest

import tessera as ts
from tessera.numerics import cast_array
from tests.numerics.test_numerics_reference import all_codes

torch = pytest.importorskip("torch")

CASES = [
    (ts.bf16, "bfloat16", ts.bf16),
    (ts.fp16, "float16", ts.fp16),
    (ts.fp8_e4m3, "float8_e4m3fn", ts.fp8_e4m3 @ ts.saturate),
    (ts.fp8_e5m2, "float8_e5m2", ts.fp8_e5m2),
]


def cast_inputs(d: ts.DType) -> np.ndarray:
    """Random float32 bit patterns plus every value, tie and overflow edge of ``d``."""
    rng = np.random.default_rng(2)
    rand = rng.integers(0, 2**32, 300_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.unique(all_codes(d).astype(np.float64))
        v = v[np.isfinite(v)]
        mids = ((v[:-1] + v[1:]) / 2).astype(np.float32)
        top = float(v[-1]) + (float(v[-1]) - float(v[-2])) / 2
        edges = np.array([top, -top, 2 * top, np.inf, -np.inf, np.nan], dtype=np.float32)
    pts = np.concatenate([v.astype(np.float32), mids, edges])
    near = np.concatenate(
        [np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(-np.inf))]
    )
    return np.concatenate([rand, pts, near]).astype(np.float32)


def encodings(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint8 if a.itemsize == 1 else np.uint16)


def assert_same_bits(ours: np.ndarray, theirs: np.ndarray) -> None:
    """Equal encodings; NaN results must both be NaN (payloads are not compared)."""
    nan_o = np.isnan(ours.astype(np.float32))
    nan_t = np.isnan(theirs.astype(np.float32))
    assert np.array_equal(nan_o, nan_t)
    assert np.array_equal(encodings(ours)[~nan_o], encodings(theirs)[~nan_t])


@pytest.mark.parametrize(("d", "torch_name", "policy"), CASES, ids=lambda v: str(v))
def test_torch_cpu_casts_match(d: ts.DType, torch_name: str, policy: object) -> None:
    x = cast_inputs(d)
    theirs = torch.from_numpy(x).to(getattr(torch, torch_name))
    bits = theirs.view(torch.uint8 if d.bits == 8 else torch.int16).numpy()
    assert_same_bits(cast_array(x, policy), bits.view(d.np_dtype))
