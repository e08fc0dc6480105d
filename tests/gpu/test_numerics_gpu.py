"""GPU numerics: torch's CUDA casts against cast_array bit for bit, and the guide's fp8 GEMM
through ``ts.jit`` on CUDA tensors. Skipped without a CUDA device."""

import numpy as np
import pytest

import tessera as ts
from tessera.numerics import cast_array

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# On CUDA, torch's float8_e4m3fn conversion does not saturate: overflow becomes NaN, as in
# ml_dtypes and Tessera's plain fp8_e4m3 (seen on an H200, driver 580).
CASES = [
    (ts.bf16, "bfloat16", ts.bf16),
    (ts.fp16, "float16", ts.fp16),
    (ts.fp8_e4m3, "float8_e4m3fn", ts.fp8_e4m3),
    (ts.fp8_e5m2, "float8_e5m2", ts.fp8_e5m2),
]


def _all_values(d: ts.DType) -> np.ndarray:
    container = np.uint8 if d.bits == 8 else np.uint16
    codes = np.arange(1 << d.bits, dtype=np.uint32).astype(container).view(d.np_dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.unique(codes.astype(np.float64))
    return v[np.isfinite(v)]


def cast_inputs(d: ts.DType) -> np.ndarray:
    """Random float32 bit patterns plus every value, tie and overflow edge of ``d``."""
    rng = np.random.default_rng(2)
    rand = rng.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    v = _all_values(d)
    with np.errstate(over="ignore"):
        mids = ((v[:-1] + v[1:]) / 2).astype(np.float32)
        top = float(v[-1]) + (float(v[-1]) - float(v[-2])) / 2
        edges = np.array([top, -top, 2 * top, np.inf, -np.inf, np.nan], dtype=np.float32)
        pts = np.concatenate([v.astype(np.float32), mids, edges])
    near = np.concatenate(
        [np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(-np.inf))]
    )
    return np.concatenate([rand, pts, near]).astype(np.float32)


@pytest.mark.parametrize(("d", "torch_name", "policy"), CASES, ids=lambda v: str(v))
def test_cuda_casts_match_cast_array_bitwise(d: ts.DType, torch_name: str, policy: object) -> None:
    x = cast_inputs(d)
    theirs = torch.from_numpy(x).cuda().to(getattr(torch, torch_name))
    view = torch.uint8 if d.bits == 8 else torch.int16
    bits = theirs.view(view).cpu().numpy().view(d.np_dtype)
    ours = cast_array(x, policy)
    nan_o = np.isnan(ours.astype(np.float32))
    nan_t = np.isnan(bits.astype(np.float32))
    assert np.array_equal(nan_o, nan_t)
    enc = np.uint8 if d.bits == 8 else np.uint16
    assert np.array_equal(ours.view(enc)[~nan_o], bits.view(enc)[~nan_t])


def test_fp8_gemm_on_gpu_error_bound() -> None:
    @ts.jit
    def mixed_precision_gemm(
        A: ts.Tensor["M", "K", ts.fp8_e4m3 @ ts.accum(ts.f32)],  # noqa: N803, F821
        B: ts.Tensor["K", "N", ts.fp8_e4m3 @ ts.accum(ts.f32)],  # noqa: N803, F821
    ) -> ts.Tensor["M", "N", ts.f32]:  # noqa: F821
        return ts.gemm(A, B)

    m, k, n = 128, 256, 64
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    a8, b8 = cast_array(a, ts.fp8_e4m3), cast_array(b, ts.fp8_e4m3)
    ta = torch.from_numpy(a8.view(np.uint8)).cuda().view(torch.float8_e4m3fn)
    tb = torch.from_numpy(b8.view(np.uint8)).cuda().view(torch.float8_e4m3fn)
    c = mixed_precision_gemm(ta, tb)
    assert c.is_cuda and c.dtype == torch.float32
    c = c.cpu().numpy().astype(np.float64)
    a_h, b_h = a8.astype(np.float64), b8.astype(np.float64)
    u32 = 2.0**-24
    gamma = k * u32 / (1 - k * u32)
    bound = gamma * (np.abs(a_h) @ np.abs(b_h)) + u32 * np.abs(a_h @ b_h)
    assert (np.abs(c - a_h @ b_h) <= bound).all()
    u8, eta = 2.0**-4, 2.0**-10
    in_bound = (u8 * np.abs(a) + eta) @ np.abs(b_h) + np.abs(a) @ (u8 * np.abs(b) + eta)
    assert (np.abs(c - a @ b) <= in_bound + bound).all()
    # The CPU reference path gives the same result within the accumulation bound.
    cpu = mixed_precision_gemm(a8, b8).astype(np.float64)
    assert (np.abs(c - cpu) <= 2 * bound).all()
