"""GPU numerics: torch's CUDA casts against cast_array bit for bit, and the guide's fp8 GEMM
through ``ts.jit`` on CUDA tensors. Skipped without a CUDA device."""

import ml_dtypes
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
    # On Hopper the GEMM runs on fp8 wgmma: the tensor cores align each MMA's products to
    # about 13 bits before adding them (torch._scaled_mm's accuracy), then each 128-element
    # K stage is added into f32: |C - A^B^| <= 2^-11 |A^||B^| + gamma_K |A^||B^|
    u32 = 2.0**-24
    gamma = k * u32 / (1 - k * u32)
    bound = (2.0**-11 + gamma) * (np.abs(a_h) @ np.abs(b_h)) + u32 * np.abs(a_h @ b_h)
    assert (np.abs(c - a_h @ b_h) <= bound).all()
    assert np.linalg.norm(c - a_h @ b_h) <= 3e-4 * np.linalg.norm(a_h @ b_h)
    u8, eta = 2.0**-4, 2.0**-10
    in_bound = (u8 * np.abs(a) + eta) @ np.abs(b_h) + np.abs(a) @ (u8 * np.abs(b) + eta)
    assert (np.abs(c - a @ b) <= in_bound + bound).all()
    # The CPU reference path gives the same result within the accumulation bound.
    cpu = mixed_precision_gemm(a8, b8).astype(np.float64)
    assert (np.abs(c - cpu) <= 2 * bound).all()


# --------------------------------------------------------------------------- Tessera kernels


def _run_gpu(module, name: str, args: list) -> list:
    """Lower a Tile IR module to PTX and run its host function on CUDA tensors."""
    from tessera.passes.emit_ptx import emit_ptx
    from tessera.passes.pipelines import lower_to_target
    from tessera.runtime import cuda

    target = lower_to_target(module)
    return cuda.run_host(target, name, args, ptx=emit_ptx(target))


def _cuda(x: np.ndarray):
    """A CUDA tensor with the bytes of ``x`` (fp8 as torch float8, packed bytes as int8)."""
    names = {1: {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}}
    if x.dtype.name in names[1]:
        return torch.from_numpy(x.view(np.uint8)).cuda().view(names[1][x.dtype.name])
    if x.dtype == np.dtype(ml_dtypes.bfloat16):
        return torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16)
    return torch.from_numpy(x).cuda()


def _mismatches(got: np.ndarray, want: np.ndarray, x: np.ndarray) -> str:
    """The first elements whose encodings differ (NaNs: NaN-ness and sign), for the message."""
    gf, wf = got.astype(np.float32), want.astype(np.float32)
    both_nan = np.isnan(gf) & np.isnan(wf)
    enc = {1: np.uint8, 2: np.uint16, 4: np.uint32}[got.dtype.itemsize]
    bad = ~(both_nan & (np.signbit(gf) == np.signbit(wf))) & (
        (got.view(enc) != want.view(enc)) | (np.isnan(gf) != np.isnan(wf))
    )
    idx = np.flatnonzero(bad)[:6]
    rows = [
        f"x={x.flat[i]!r} got={gf.flat[i]!r}/{got.view(enc).flat[i]:#x} "
        f"want={wf.flat[i]!r}/{want.view(enc).flat[i]:#x}"
        for i in idx
    ]
    return f"{int(bad.sum())} of {bad.size} differ: " + "; ".join(rows)


def _host(t, like: np.dtype) -> np.ndarray:
    """A CUDA tensor's bytes as a numpy array of ``like``."""
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[like.itemsize]
    return t.contiguous().view(view).cpu().numpy().view(like)


@pytest.mark.parametrize("dst", [ts.fp8_e4m3, ts.fp8_e5m2], ids=repr)
@pytest.mark.parametrize("src", [ts.fp32, ts.fp16, ts.bf16], ids=repr)
def test_fp8_cast_kernel_gpu_bitwise(src: ts.DType, dst: ts.DType) -> None:
    from tests.numerics.test_numerics_kernels import cast_module, edge_inputs, same_bits

    x = edge_inputs(dst, 200_000)
    if src != ts.fp32:
        with np.errstate(over="ignore", invalid="ignore"):
            x = np.concatenate([x, edge_inputs(src, 0)]).astype(src.np_dtype)
    (y,) = _run_gpu(cast_module(src, dst, x.shape), "c", [_cuda(x)])
    got = _host(y, dst.np_dtype)
    want = cast_array(x, dst)
    assert same_bits(got, want), _mismatches(got, want, x)


@pytest.mark.parametrize("dst", [ts.fp32, ts.fp16, ts.bf16], ids=repr)
@pytest.mark.parametrize("src", [ts.fp8_e4m3, ts.fp8_e5m2], ids=repr)
def test_fp8_widen_kernel_gpu_exact(src: ts.DType, dst: ts.DType) -> None:
    from tests.numerics.test_numerics_kernels import all_codes, cast_module, same_bits

    x = all_codes(src)
    (y,) = _run_gpu(cast_module(src, dst, x.shape), "c", [_cuda(x)])
    got, want = _host(y, dst.np_dtype), x.astype(dst.np_dtype)
    assert same_bits(got, want), _mismatches(got, want, x)


@pytest.mark.parametrize("d", [ts.fp4_e2m1, ts.fp6_e2m3, ts.fp6_e3m2], ids=repr)
def test_packed_cast_kernels_gpu_match_cpu(d: ts.DType) -> None:
    from tessera.runtime.tile_interpreter import run_host
    from tests.numerics.test_numerics_kernels import _pack, cast_module, edge_inputs

    x = edge_inputs(d, 60_000)
    x = x[: (x.size // 61) * 61].reshape(-1, 61)
    (p,) = _run_gpu(cast_module(ts.fp32, d, x.shape), "c", [_cuda(x)])
    packed = _host(p, np.dtype(np.uint8))
    assert np.array_equal(packed, _pack(cast_array(x, d), d))
    (y,) = _run_gpu(cast_module(d, ts.fp32, x.shape), "c", [p])
    (y_cpu,) = run_host(cast_module(d, ts.fp32, x.shape), "c", [packed.view(np.int8)])
    assert np.array_equal(_host(y, np.dtype(np.uint32)), y_cpu.view(np.uint32))


def test_packed_fp4_dequant_matmul_gpu() -> None:
    """W stored as packed fp4 (uint8 bytes), dequantized to bf16 in a kernel, then a bf16
    mma.sync matmul with f32 accumulation."""
    from tessera.numerics.pack import pack_fp4
    from tests.passes.test_lower_graph_to_tile import lower

    m, k, n = 70, 96, 50
    rng = np.random.default_rng(9)
    a = cast_array(rng.standard_normal((m, k)), ts.bf16)
    w = cast_array(rng.standard_normal((k, n)) * 2, ts.fp4_e2m1)
    text = f"""func.func @qmm(%a: tensor<{m}x{k}xbf16>, %w: tensor<{k}x{n}xf4E2M1FN>) -> tensor<{m}x{n}xf32> {{
  %wb = tgraph.cast %w : (tensor<{k}x{n}xf4E2M1FN>) -> tensor<{k}x{n}xbf16>
  %c = tgraph.matmul %a, %wb : (tensor<{m}x{k}xbf16>, tensor<{k}x{n}xbf16>) -> tensor<{m}x{n}xf32>
  func.return %c : tensor<{m}x{n}xf32>
}}"""
    packed = torch.from_numpy(pack_fp4(w)).cuda()  # uint8 bytes, passed as int8
    (c,) = _run_gpu(lower(text), "qmm", [_cuda(a), packed.view(torch.int8)])
    c = c.cpu().numpy().astype(np.float64)
    a_h, w_h = a.astype(np.float64), w.astype(np.float64)
    u32 = 2.0**-24
    bound = k * u32 / (1 - k * u32) * (np.abs(a_h) @ np.abs(w_h)) + u32 * np.abs(a_h @ w_h)
    assert (np.abs(c - a_h @ w_h) <= bound).all()


def test_bf16_gemm_gpu_error_bound() -> None:
    @ts.jit
    def bf16_gemm(
        A: ts.Tensor["M", "K", ts.bf16 @ ts.accum(ts.f32)],  # noqa: N803, F821
        B: ts.Tensor["K", "N", ts.bf16 @ ts.accum(ts.f32)],  # noqa: N803, F821
    ) -> ts.Tensor["M", "N", ts.f32]:  # noqa: F821
        return ts.gemm(A, B)

    m, k, n = 130, 200, 70
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    ab, bb = cast_array(a, ts.bf16), cast_array(b, ts.bf16)
    c = bf16_gemm(_cuda(ab), _cuda(bb))
    assert c.is_cuda and c.dtype == torch.float32
    c = c.cpu().numpy().astype(np.float64)
    a_h, b_h = ab.astype(np.float64), bb.astype(np.float64)
    u32 = 2.0**-24
    bound = k * u32 / (1 - k * u32) * (np.abs(a_h) @ np.abs(b_h)) + u32 * np.abs(a_h @ b_h)
    assert (np.abs(c - a_h @ b_h) <= bound).all()
    u16 = 2.0**-8  # bf16 unit roundoff; inputs are normal, so no subnormal term
    in_bound = u16 * (np.abs(a) @ np.abs(b_h) + np.abs(a) @ np.abs(b))
    assert (np.abs(c - a @ b) <= in_bound + bound).all()


@pytest.mark.parametrize("d", [ts.fp8_e4m3, ts.fp8_e5m2], ids=repr)
def test_fp8_gemm_kernel_gpu_ragged(d: ts.DType) -> None:
    from tessera.runtime.tile_interpreter import run_host
    from tests.numerics.test_numerics_kernels import accumulation_bound, gemm_module

    m, k, n = 100, 150, 45
    rng = np.random.default_rng(8)
    a8 = cast_array(rng.standard_normal((m, k)), d)
    b8 = cast_array(rng.standard_normal((k, n)), d)
    mod = gemm_module(m, k, n, d)
    (c,) = _run_gpu(mod, "mm", [_cuda(a8), _cuda(b8)])
    c = c.cpu().numpy().astype(np.float64)
    a_h, b_h = a8.astype(np.float64), b8.astype(np.float64)
    bound = accumulation_bound(a_h, b_h)
    assert (np.abs(c - a_h @ b_h) <= bound).all()
    (cpu,) = run_host(mod, "mm", [a8, b8])
    assert (np.abs(c - cpu) <= 2 * bound).all()


# --------------------------------------------------------------------------- rounding policies


POLICY_TARGETS = [ts.bf16, ts.fp16, ts.fp8_e4m3, ts.fp8_e5m2, ts.fp6_e2m3, ts.fp6_e3m2,
                  ts.fp4_e2m1, ts.fp32]
POLICY_MODS = {
    "sr": (ts.stochastic_round,), "sat": (ts.saturate,),
    "sr_sat": (ts.stochastic_round, ts.saturate),
    "sr_scale128": (ts.loss_scale(128.0), ts.stochastic_round),
    "scale3_sat": (ts.loss_scale(3.0), ts.saturate),
}


@pytest.mark.parametrize("mods", list(POLICY_MODS), ids=str)
@pytest.mark.parametrize("dst", POLICY_TARGETS, ids=repr)
def test_policy_cast_kernel_gpu_bitwise(dst: ts.DType, mods: str) -> None:
    """Casts to @stochastic_round / @saturate / @loss_scale types on the GPU: the kernel's
    bytes equal cast_array's (same Philox stream, same float64 decisions)."""
    from tessera.ir.policy import NumericPolicy
    from tests.numerics.test_numerics_kernels import edge_inputs, same_bits
    from tests.numerics.test_numerics_policy_kernels import PACKED_TS, _pack, policy_cast_text, rows
    from tests.passes.test_lower_graph_to_tile import lower

    p = NumericPolicy(dst)
    for m in POLICY_MODS[mods]:
        p = p @ m
    x = rows(edge_inputs(dst if dst != ts.fp32 else ts.bf16, 100_000))
    (y,) = _run_gpu(lower(policy_cast_text(NumericPolicy(ts.fp32), p, x.shape, 1234)), "c",
                    [_cuda(x)])
    with np.errstate(over="ignore", invalid="ignore"):
        want = cast_array(x, p, seed=1234)
    if dst in PACKED_TS:
        assert np.array_equal(_host(y, np.dtype(np.uint8)), _pack(want, dst))
    else:
        got = _host(y, dst.np_dtype)
        assert same_bits(got, want), _mismatches(got, want, x)


def test_policy_op_results_gpu_match_cpu_reference() -> None:
    """Ops whose results carry rounding policies, on the GPU, equal the Graph IR
    interpreter bit for bit."""
    from tests.numerics.test_numerics_policy_kernels import (
        _policy,
        policy_type,
        reference,
        stored,
    )
    from tests.passes.test_lower_graph_to_tile import lower

    sr, sat = ts.stochastic_round, ts.saturate
    m, k = 300, 128
    b16 = policy_type((m, k), _policy(ts.bf16, (sr, sat)))
    f4 = policy_type((m, m), _policy(ts.fp4_e2m1, (sr,)))
    e4 = policy_type((m, k), _policy(ts.bf16, (sr, ts.loss_scale(64.0))))
    plain = f"tensor<{m}x{k}xbf16>"
    text = f"""func.func @f(%x: {plain}, %y: {plain}) -> ({b16}, {f4}, {e4}) {{
  %a = tgraph.mul %x, %y : ({plain}, {plain}) -> {b16}
  %m = tgraph.matmul %x, %y transpose_rhs : ({plain}, {plain}) -> {f4}
  %e = tgraph.sub %x, %y : ({plain}, {plain}) -> {e4}
  func.return %a, %m, %e : {b16}, {f4}, {e4}
}}"""
    rng = np.random.default_rng(13)
    # multiples of 1/16 below 4: the matmul's f32 sums are exact in any order
    x = cast_array(rng.integers(-63, 64, (m, k)) / 16.0, ts.bf16)
    y = cast_array(rng.integers(-63, 64, (m, k)) / 16.0, ts.bf16)
    got = _run_gpu(lower(text), "f", [_cuda(x), _cuda(y)])
    want = reference(text, "f", [x, y])
    likes = (np.dtype(ml_dtypes.bfloat16), np.dtype(np.uint8), np.dtype(ml_dtypes.bfloat16))
    for g_, w_, d, like in zip(got, want, (ts.bf16, ts.fp4_e2m1, ts.bf16), likes):
        assert stored(_host(g_, like), w_, d), d


def test_guide_stochastic_cast_jit_gpu_equals_cpu() -> None:
    """The guide's ``ts.bf16 @accum(ts.f32) @stochastic_round`` type through ``ts.jit``: the
    CUDA call and the CPU call give the same bits."""
    pol = ts.bf16 @ ts.accum(ts.f32) @ ts.stochastic_round

    @ts.jit
    def to_bf16_sr(x: ts.Tensor["B", "D", ts.f32]) -> ts.Tensor["B", "D", pol]:  # noqa: F821
        return ts.cast(x * 3.0, pol, seed=99)

    x = np.random.default_rng(3).standard_normal((257, 300)).astype(np.float32)
    cpu = to_bf16_sr(x)
    gpu = to_bf16_sr(torch.from_numpy(x).cuda())
    assert gpu.is_cuda
    got = _host(gpu, np.dtype(ml_dtypes.bfloat16))
    assert np.array_equal(got.view(np.uint16), np.asarray(cpu).view(np.uint16))
    assert np.array_equal(got.view(np.uint16),
                          cast_array(x * np.float32(3.0), pol, seed=99).view(np.uint16))


@pytest.mark.parametrize("d", [ts.fp4_e2m1, ts.fp6_e2m3, ts.fp6_e3m2], ids=repr)
def test_packed_gemm_gpu_error_bound(d: ts.DType) -> None:
    """fp6/fp4 x fp6/fp4 GEMM: packed operands unpacked to bf16 by a kernel, the bf16
    tensor-core GEMM with f32 accumulation; against float64 of the dequantized operands."""
    from tessera.runtime.tile_interpreter import run_host
    from tests.numerics.test_numerics_policy_kernels import _pack, gemm_bound, packed_gemm_text
    from tests.passes.test_lower_graph_to_tile import lower

    m, k, n = 200, 320, 136
    rng = np.random.default_rng(17)
    a = cast_array(rng.standard_normal((m, k)) * 2, d)
    b = cast_array(rng.standard_normal((k, n)) * 2, d)
    pa, pb = _pack(a, d), _pack(b, d)
    mod = lower(packed_gemm_text(m, k, n, d, d))
    ta = torch.from_numpy(pa).cuda().view(torch.int8)
    tb = torch.from_numpy(pb).cuda().view(torch.int8)
    (c,) = _run_gpu(mod, "mm", [ta, tb])
    c = c.cpu().numpy().astype(np.float64)
    a_h, b_h = a.astype(np.float64), b.astype(np.float64)
    bound = gemm_bound(a_h, b_h)
    assert (np.abs(c - a_h @ b_h) <= bound).all()
    (cpu,) = run_host(mod, "mm", [pa.view(np.int8), pb.view(np.int8)])
    assert (np.abs(c - cpu) <= 2 * bound).all()


def test_precision_policy_matmul_gpu() -> None:
    """A ``@ts.precision_policy`` (int8 storage, f32 accumulate) matmul operand on CUDA."""
    from tests.numerics.test_numerics_policy_kernels import QuantizedPolicy, gemm_bound

    @ts.jit
    def qmm(
        x: ts.Tensor["B", "D", ts.f32],  # noqa: F821
        w: ts.Tensor["D", "D", QuantizedPolicy],  # noqa: F821
    ) -> ts.Tensor["B", "D", ts.f32]:  # noqa: F821
        return ts.matmul(x, w)

    rng = np.random.default_rng(23)
    x = rng.standard_normal((130, 96)).astype(np.float32)
    wq, _ = QuantizedPolicy().quantize(rng.standard_normal((96, 96)).astype(np.float32))
    y = qmm(torch.from_numpy(x).cuda(), torch.from_numpy(wq).cuda())
    assert y.is_cuda and y.dtype == torch.float32
    y = y.cpu().numpy().astype(np.float64)
    x64, w64 = x.astype(np.float64), wq.astype(np.float64)
    assert (np.abs(y - x64 @ w64) <= gemm_bound(x64, w64)).all()


@pytest.mark.parametrize("mods", ["sr", "sat", "sr_scale128", "scale3_sat"], ids=str)
@pytest.mark.parametrize("dst", [ts.int8, ts.int32], ids=repr)
def test_policy_cast_to_integers_gpu(dst: ts.DType, mods: str) -> None:
    """Casts to int8/int32 of a rounding policy on the GPU equal the interpreter's."""
    from tessera.ir.policy import NumericPolicy
    from tests.numerics.test_numerics_policy_kernels import policy_cast_text, reference
    from tests.passes.test_lower_graph_to_tile import lower

    p = NumericPolicy(dst)
    for m in POLICY_MODS[mods]:
        p = p @ m
    rng = np.random.default_rng(19)
    x = np.concatenate([
        rng.standard_normal(200_000) * 100, rng.integers(-300, 300, 50_000) + 0.5,
        [np.nan, np.inf, -np.inf, 2.0**40, 127.5, -128.5, 2.5, -2.5, -0.0],
    ]).astype(np.float32).reshape(1, -1)
    text = policy_cast_text(NumericPolicy(ts.fp32), p, x.shape, seed=5)
    (y,) = _run_gpu(lower(text), "c", [_cuda(x)])
    (want,) = reference(text, "c", [x])
    assert np.array_equal(y.cpu().numpy(), want)
