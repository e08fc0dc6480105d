"""Narrow float formats in kernels (docs/NUMERICS.md, "On the GPU"): fp8 casts, packed
fp6/fp4 and fp8 GEMM lowered to Tile IR, run by the Tile IR interpreter and compared with
``cast_array`` bit for bit (casts) or a float64 reference with an error bound (GEMM);
every kernel's PTX goes through ptxas."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

import tessera as ts
from tessera.numerics import cast_array
from tessera.numerics.pack import pack_fp4, pack_fp6, unpack_fp4, unpack_fp6
from tessera.passes.emit_ptx import emit_ptx
from tessera.passes.pipelines import lower_to_target
from tessera.passes.tile_numerics import PACKED
from tessera.runtime import ptxas
from tessera.runtime.tile_interpreter import run_host
from tests.passes.test_lower_graph_to_tile import lower

IR = {
    ts.fp8_e4m3: "f8E4M3FN", ts.fp8_e5m2: "f8E5M2", ts.fp6_e2m3: "f6E2M3FN",
    ts.fp6_e3m2: "f6E3M2FN", ts.fp4_e2m1: "f4E2M1FN", ts.fp32: "f32", ts.fp16: "f16",
    ts.bf16: "bf16", ts.fp64: "f64",
}
FP8 = (ts.fp8_e4m3, ts.fp8_e5m2)
PACKED_TS = (ts.fp4_e2m1, ts.fp6_e2m3, ts.fp6_e3m2)


def _t(shape: tuple[int, ...], d: ts.DType) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{IR[d]}>"


def cast_module(src: ts.DType, dst: ts.DType, shape: tuple[int, ...]) -> ModuleOp:
    a, b = _t(shape, src), _t(shape, dst)
    return lower(
        f"func.func @c(%x: {a}) -> {b} {{\n  %y = tgraph.cast %x : ({a}) -> {b}\n"
        f"  func.return %y : {b}\n}}"
    )


def all_codes(d: ts.DType) -> np.ndarray:
    """Every encoding of ``d`` as an array of ``d``."""
    return np.arange(1 << d.bits, dtype=np.uint8).view(d.np_dtype)


def edge_inputs(d: ts.DType, n_random: int = 20_000) -> np.ndarray:
    """float32: every value of ``d``, every midpoint (tie), their float32 neighbours, the
    overflow edges, +-Inf, NaN and random bit patterns."""
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.unique(all_codes(d).astype(np.float64))
        v = v[np.isfinite(v)]
        mids = (v[:-1] + v[1:]) / 2
        top = v[-1] + (v[-1] - v[-2]) / 2
        edges = np.array([top, -top, 2 * top, v[-1] + (v[-1] - v[-2]), np.inf, -np.inf, np.nan,
                          -np.nan, 1e30, -1e-30, 0.0, -0.0])
        pts = np.concatenate([v, -v, mids, -mids, edges]).astype(np.float32)
    near = np.concatenate(
        [np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(-np.inf))]
    )
    rng = np.random.default_rng(7)
    rand = rng.integers(0, 2**32, n_random, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([pts, near, rand])


def same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal encodings; NaNs compare by sign and NaN-ness (payloads are not significant)."""
    gf, wf = got.astype(np.float32), want.astype(np.float32)
    gn, wn = np.isnan(gf), np.isnan(wf)
    if not np.array_equal(gn, wn) or not np.array_equal(np.signbit(gf[gn]), np.signbit(wf[wn])):
        return False
    enc = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    return got.dtype == want.dtype and np.array_equal(got.view(enc)[~gn], want.view(enc)[~wn])


# --------------------------------------------------------------------------- fp8 casts


@pytest.mark.parametrize("dst", FP8, ids=repr)
@pytest.mark.parametrize("src", (ts.fp32, ts.fp16, ts.bf16), ids=repr)
def test_fp8_cast_kernel_matches_cast_array(src: ts.DType, dst: ts.DType) -> None:
    x = edge_inputs(dst)
    if src != ts.fp32:
        with np.errstate(over="ignore", invalid="ignore"):
            x = np.concatenate([x, edge_inputs(src, 0)]).astype(src.np_dtype)
    (y,) = run_host(cast_module(src, dst, x.shape), "c", [x])
    assert y.dtype == dst.np_dtype
    assert same_bits(y, cast_array(x, dst))


def test_fp8_e4m3_overflow_rule_in_kernel() -> None:
    x = np.array([448, 463.9, 464, 464.01, 1e6, np.inf, -464, -464.5], np.float32)
    (y,) = run_host(cast_module(ts.fp32, ts.fp8_e4m3, x.shape), "c", [x])
    assert list(y.view(np.uint8)) == [0x7E, 0x7E, 0x7E, 0x7F, 0x7F, 0x7F, 0xFE, 0xFF]


@pytest.mark.parametrize("dst", (ts.fp32, ts.fp16, ts.bf16, ts.fp64), ids=repr)
@pytest.mark.parametrize("src", FP8, ids=repr)
def test_fp8_widening_is_exact(src: ts.DType, dst: ts.DType) -> None:
    x = all_codes(src)
    (y,) = run_host(cast_module(src, dst, x.shape), "c", [x])
    want = x.astype(np.float64)
    got = y.astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok], want[ok])
    assert np.array_equal(np.signbit(got[ok]), np.signbit(want[ok]))


def test_f64_to_fp8_is_refused() -> None:
    with pytest.raises(NotImplementedError, match="round twice"):
        cast_module(ts.fp64, ts.fp8_e4m3, (4,))


# --------------------------------------------------------------------------- packed fp6 / fp4


def _pack(x: np.ndarray, d: ts.DType) -> np.ndarray:
    return pack_fp4(x) if d == ts.fp4_e2m1 else pack_fp6(x)


def _unpack(p: np.ndarray, n: int, d: ts.DType) -> np.ndarray:
    return unpack_fp4(p, n) if d == ts.fp4_e2m1 else unpack_fp6(p, n, d)


def test_packed_formats_match_ml_dtypes() -> None:
    for d in PACKED_TS:
        fmt = PACKED[type(d.ir_type)]
        info = ml_dtypes.finfo(d.np_dtype)
        assert float(np.array(fmt.max_f32_bits, np.uint32).view(np.float32)) == float(info.max)
        assert fmt.bits == d.bits and fmt.mbits == info.nmant


@pytest.mark.parametrize("d", PACKED_TS, ids=repr)
def test_packed_quantize_kernel_matches_cast_array(d: ts.DType) -> None:
    x = edge_inputs(d, 4_000)
    x = x[: (x.size // 61) * 61].reshape(-1, 61)  # ragged rows: 61 is not a multiple of 4
    (p,) = run_host(cast_module(ts.fp32, d, x.shape), "c", [x])
    want = cast_array(x, d)
    assert np.array_equal(p.view(np.uint8), _pack(want, d))


@pytest.mark.parametrize("d", PACKED_TS, ids=repr)
def test_packed_dequantize_kernel_is_exact(d: ts.DType) -> None:
    codes = np.tile(all_codes(d) if d.bits == 4 else np.arange(64, dtype=np.uint8).view(
        d.np_dtype), 3)[:-3].reshape(1, -1)
    n = codes.shape[-1]
    packed = _pack(codes, d).view(np.int8)
    for dst in (ts.fp32, ts.bf16):
        (y,) = run_host(cast_module(d, dst, codes.shape), "c", [packed])
        assert np.array_equal(y.astype(np.float64), codes.astype(np.float64))
        assert np.array_equal(np.signbit(y.astype(np.float32)), np.signbit(codes.astype(np.float32)))
    assert _unpack(packed.view(np.uint8), n, d).shape == (1, n)


@pytest.mark.parametrize("d", PACKED_TS, ids=repr)
def test_packed_round_trip_through_kernels(d: ts.DType) -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 13)) * 4).astype(np.float32)
    (p,) = run_host(cast_module(ts.fp32, d, x.shape), "c", [x])
    (y,) = run_host(cast_module(d, ts.fp32, x.shape), "c", [p])
    assert np.array_equal(y, cast_array(x, d).astype(np.float32))


def test_packed_operands_only_cast() -> None:
    t = _t((4, 8), ts.fp4_e2m1)
    with pytest.raises(NotImplementedError, match="packed"):
        lower(f"func.func @f(%x: {t}) -> {t} {{\n  %y = tgraph.neg %x : ({t}) -> {t}\n"
              f"  func.return %y : {t}\n}}")


# --------------------------------------------------------------------------- fp8 GEMM


def gemm_module(m: int, k: int, n: int, d: ts.DType) -> ModuleOp:
    a, b, c = _t((m, k), d), _t((k, n), d), _t((m, n), ts.fp32)
    return lower(
        f"func.func @mm(%a: {a}, %b: {b}) -> {c} {{\n"
        f"  %c = tgraph.matmul %a, %b : ({a}, {b}) -> {c}\n  func.return %c : {c}\n}}"
    )


def accumulation_bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bound on |C - A B| for exact products of the stored inputs accumulated in f32."""
    k = a.shape[1]
    u32 = 2.0**-24
    gamma = k * u32 / (1 - k * u32)
    return gamma * (np.abs(a) @ np.abs(b)) + u32 * np.abs(a @ b)


@pytest.mark.parametrize(
    ("d", "shape"),
    [(ts.fp8_e4m3, (37, 70, 29)), (ts.fp8_e5m2, (64, 96, 40)), (ts.fp8_e4m3, (16, 32, 8))],
    ids=str,
)
def test_fp8_gemm_kernel_error_bound(d: ts.DType, shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    a8, b8 = cast_array(a, d), cast_array(b, d)
    mod = gemm_module(m, k, n, d)
    assert "ttile.mma" in str(mod) and "vector<16x" in str(mod)
    (c,) = run_host(mod, "mm", [a8, b8])
    a_h, b_h = a8.astype(np.float64), b8.astype(np.float64)
    acc = accumulation_bound(a_h, b_h)
    assert (np.abs(c - a_h @ b_h) <= acc).all()
    # against the unrounded inputs: unit roundoff u = eps/2, subnormal half-step eta
    u, eta = (2.0**-4, 2.0**-10) if d == ts.fp8_e4m3 else (2.0**-3, 2.0**-17)
    in_bound = (u * np.abs(a) + eta) @ np.abs(b_h) + np.abs(a) @ (u * np.abs(b) + eta)
    assert (np.abs(c - a @ b) <= in_bound + acc).all()


# --------------------------------------------------------------------------- PTX


def test_narrow_kernels_pass_ptxas() -> None:
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found (set TESSERA_PTXAS or install nvidia-cuda-nvcc)")
    mods = [gemm_module(37, 70, 29, ts.fp8_e4m3), gemm_module(64, 64, 64, ts.fp8_e5m2)]
    for d in FP8:
        for o in (ts.fp32, ts.fp16, ts.bf16):
            mods += [cast_module(o, d, (100,)), cast_module(d, o, (100,))]
        mods.append(cast_module(d, ts.fp64, (100,)))
    for d in PACKED_TS:
        mods += [cast_module(ts.fp32, d, (3, 37)), cast_module(d, ts.fp32, (3, 37)),
                 cast_module(ts.bf16, d, (3, 37)), cast_module(d, ts.bf16, (3, 37))]
    texts = [emit_ptx(lower_to_target(m), verify=False) for m in mods]
    assert any("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32" in t for t in texts)
    assert any("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32" in t for t in texts)
    assert any("cvt.rn.satfinite.e4m3x2.f32" in t for t in texts)
    assert any("cvt.rn.f16x2.e5m2x2" in t for t in texts)
    for t in texts:
        assert ".version 9." not in t or t.split(".version ")[1][:3] <= "9.0"
        ptxas.check(t)
