"""Rounding policies in kernels (docs/NUMERICS.md, "On the GPU"): casts to and ops producing
``@stochastic_round``, ``@saturate`` and ``@loss_scale`` types lowered to Tile IR, run by the
Tile IR interpreter and compared with the CPU reference (``cast_array`` / the Graph IR
interpreter) bit for bit; fp6/fp4 and ``@ts.precision_policy`` matmul operands; ptxas on
every kernel kind."""


import numpy as np
import pytest
from xdsl.parser import Parser

import tessera as ts
from tessera.ir.policy import NumericPolicy
from tessera.numerics import cast_array
from tessera.passes.emit_ptx import emit_ptx
from tessera.passes.pipelines import lower_to_target
from tessera.runtime import ptxas
from tessera.runtime.graph_interpreter import run_function
from tessera.runtime.tile_interpreter import run_host
from tests.numerics.test_numerics_kernels import IR, PACKED_TS, _pack, edge_inputs, same_bits
from tests.passes.test_lower_graph_to_tile import context, lower

SR, SAT = ts.stochastic_round, ts.saturate


IR = {**IR, ts.int8: "i8", ts.int32: "i32"}


def policy_type(shape: tuple[int, ...], p: NumericPolicy) -> str:
    """The IR spelling of a tensor of policy ``p``."""
    s = IR[p.storage]
    fields = [s]
    if p.rounding == "stochastic":
        fields.append("rounding = stochastic")
    if p.loss_scale is not None:
        fields.append(f"loss_scale = {p.loss_scale!r}")
    if p.saturate:
        fields.append("saturate")
    dims = "x".join(map(str, shape))
    if p.is_default():
        return f"tensor<{dims}x{s}>"
    return f"tensor<{dims}x{s}, #tessera.policy<{', '.join(fields)}>>"


def policy_cast_text(src: NumericPolicy, dst: NumericPolicy, shape: tuple[int, ...],
                     seed: int) -> str:
    a, b = policy_type(shape, src), policy_type(shape, dst)
    return (f"func.func @c(%x: {a}) -> {b} {{\n  %y = tgraph.cast %x seed = {seed} : ({a}) -> "
            f"{b}\n  func.return %y : {b}\n}}")


def reference(text: str, name: str, args: list[np.ndarray]) -> list[np.ndarray]:
    """The Graph IR interpreter's results (the CPU reference)."""
    return run_function(Parser(context(), text).parse_module(), name, args)


def stored(y: np.ndarray, want: np.ndarray, d: ts.DType) -> bool:
    """``y`` (a kernel's buffer) holds ``want`` (the reference's array) bit for bit."""
    if d in PACKED_TS:
        return np.array_equal(y.view(np.uint8), _pack(want, d))
    return same_bits(y, want)


def rows(x: np.ndarray, n: int = 61) -> np.ndarray:
    """``x`` cut into rows of ``n`` (ragged for the packed formats' byte groups)."""
    return x[: (x.size // n) * n].reshape(-1, n)


TARGETS = (ts.bf16, ts.fp16, ts.fp8_e4m3, ts.fp8_e5m2, ts.fp6_e2m3, ts.fp6_e3m2, ts.fp4_e2m1,
           ts.fp32)
MODIFIERS = {
    "sr": (SR,), "sat": (SAT,), "sr_sat": (SR, SAT), "sr_scale128": (ts.loss_scale(128.0), SR),
    "scale3_sat": (ts.loss_scale(3.0), SAT),
}


def _policy(d: ts.DType, mods: tuple) -> NumericPolicy:
    p = NumericPolicy(d)
    for m in mods:
        p = p @ m
    return p


@pytest.mark.parametrize("mods", list(MODIFIERS), ids=str)
@pytest.mark.parametrize("dst", TARGETS, ids=repr)
def test_policy_cast_kernel_matches_cast_array(dst: ts.DType, mods: str) -> None:
    p = _policy(dst, MODIFIERS[mods])
    x = rows(edge_inputs(dst if dst != ts.fp32 else ts.bf16, 1_500))
    text = policy_cast_text(NumericPolicy(ts.fp32), p, x.shape, seed=77)
    (y,) = run_host(lower(text), "c", [x])
    with np.errstate(over="ignore", invalid="ignore"):
        want = cast_array(x, p, seed=77)
    assert stored(y, want, dst)
    (ref,) = reference(text, "c", [x])
    assert stored(y, ref, dst)


@pytest.mark.parametrize(
    ("src", "dst"),
    [(ts.bf16, ts.fp8_e4m3), (ts.fp16, ts.bf16), (ts.fp64, ts.bf16), (ts.fp64, ts.fp32),
     (ts.fp8_e5m2, ts.fp4_e2m1), (ts.fp6_e3m2, ts.fp8_e4m3), (ts.bf16, ts.fp6_e2m3)],
    ids=str,
)
def test_policy_cast_from_other_sources(src: ts.DType, dst: ts.DType) -> None:
    rng = np.random.default_rng(4)
    x64 = rng.standard_normal(7 * 61).reshape(7, 61) * 9
    x = cast_array(x64, src) if src != ts.fp64 else x64
    fed = _pack(x, src).view(np.int8) if src in PACKED_TS else x
    for mods in ((SR,), (SR, SAT), (ts.loss_scale(0.25), SR)):
        p = _policy(dst, mods)
        text = policy_cast_text(NumericPolicy(src), p, x.shape, seed=2**40 + 3)
        (y,) = run_host(lower(text), "c", [fed])
        assert stored(y, cast_array(x, p, seed=2**40 + 3), dst), (src, p)


def test_stochastic_rounding_in_kernel_is_unbiased_and_seeded() -> None:
    """The kernel's stochastic rounding really is random: the mean of many roundings of one
    value approaches it, and another seed gives other roundings."""
    x = np.full((64, 64), 1.0 + 2.0**-9, np.float32)  # 1/4 of the way from 1 to 1 + 2^-7
    p = _policy(ts.bf16, (SR,))
    y1 = run_host(lower(policy_cast_text(NumericPolicy(ts.fp32), p, x.shape, 1)), "c", [x])[0]
    y2 = run_host(lower(policy_cast_text(NumericPolicy(ts.fp32), p, x.shape, 2)), "c", [x])[0]
    up = y1.astype(np.float64) > 1.0
    assert abs(up.mean() - 0.25) < 0.03
    assert not np.array_equal(y1.view(np.uint16), y2.view(np.uint16))
    assert set(np.unique(y1.astype(np.float64))) == {1.0, 1.0 + 2.0**-7}


def test_ops_with_policy_results_match_reference() -> None:
    """Elementwise ops and a matmul whose result types carry rounding policies: the kernel
    computes in f32, then stores through the policy like the interpreter's ``store`` (seed
    0, no loss scale), bit for bit."""
    b16 = policy_type((6, 40), _policy(ts.bf16, (SR, SAT)))
    f4 = policy_type((6, 6), _policy(ts.fp4_e2m1, (SR,)))
    e4 = policy_type((6, 40), _policy(ts.bf16, (SR, ts.loss_scale(64.0))))
    plain = "tensor<6x40xbf16>"
    text = f"""func.func @f(%x: {plain}, %y: {plain}) -> ({b16}, {f4}, {e4}) {{
  %a = tgraph.mul %x, %y : ({plain}, {plain}) -> {b16}
  %m = tgraph.matmul %x, %y transpose_rhs : ({plain}, {plain}) -> {f4}
  %e = tgraph.sub %x, %y : ({plain}, {plain}) -> {e4}
  func.return %a, %m, %e : {b16}, {f4}, {e4}
}}"""
    rng = np.random.default_rng(12)
    # multiples of 1/16 below 4: products and the 40-term sums are exact in f32, so the
    # matmul's f32 value (before rounding) is the same in every summation order
    x = cast_array(rng.integers(-63, 64, (6, 40)) / 16.0, ts.bf16)
    y = cast_array(rng.integers(-63, 64, (6, 40)) / 16.0, ts.bf16)
    got = run_host(lower(text), "f", [x, y])
    want = reference(text, "f", [x, y])
    for g_, w_, d in zip(got, want, (ts.bf16, ts.fp4_e2m1, ts.bf16)):
        assert stored(g_, w_, d), d
    # the loss scale only scales on an explicit cast: the difference is stored unscaled
    assert same_bits(want[2], cast_array(x.astype(np.float32) - y.astype(np.float32),
                                         _policy(ts.bf16, (SR,)), seed=0))


POLICY_RESULT_OPS = {
    "transpose": ("tensor<6x10xbf16>", "10x6", "tgraph.transpose %x permutation = [1, 0]"),
    "reshape": ("tensor<6x10xbf16>", "60", "tgraph.reshape %x"),
    "sum": ("tensor<6x10xbf16>", "6", "tgraph.sum %x axes = [1]"),
    "max": ("tensor<6x10xbf16>", "10", "tgraph.max %x axes = [0]"),
    "exp": ("tensor<6x10xbf16>", "6x10", "tgraph.exp %x"),
}


@pytest.mark.parametrize("case", list(POLICY_RESULT_OPS), ids=str)
def test_shape_ops_and_reductions_with_policy_results(case: str) -> None:
    """Shape ops move their operand's stored values (Inf stays Inf, as in the interpreter);
    reductions and unary ops store their f32 result through the policy (sums of multiples
    of 1/8: exact in any order)."""
    a, dims, body = POLICY_RESULT_OPS[case]
    b = f"tensor<{dims}xbf16, #tessera.policy<bf16, rounding = stochastic, saturate>>"
    text = f"func.func @f(%x: {a}) -> {b} {{\n  %y = {body} : ({a}) -> {b}\n  func.return %y : {b}\n}}"
    rng = np.random.default_rng(6)
    x = cast_array(rng.integers(-60, 60, (6, 10)) / 8.0, ts.bf16)
    x[0, 0] = np.inf  # saturates to the largest bf16
    (got,) = run_host(lower(text), "f", [x])
    (want,) = reference(text, "f", [x])
    assert same_bits(got, want)


def test_policy_result_of_other_ops_is_refused() -> None:
    a = "tensor<6x10xbf16>"
    b = "tensor<6x10xbf16, #tessera.policy<bf16, rounding = stochastic>>"
    with pytest.raises(NotImplementedError, match="tgraph.softmax .*cast the result"):
        lower(f"func.func @f(%x: {a}) -> {b} {{\n  %y = tgraph.softmax %x axis = 1 : ({a}) -> "
              f"{b}\n  func.return %y : {b}\n}}")


@pytest.mark.parametrize("mods", ["sr", "sat", "sr_scale128", "scale3_sat"], ids=str)
@pytest.mark.parametrize("dst", (ts.int8, ts.int32), ids=repr)
def test_policy_cast_to_integers(dst: ts.DType, mods: str) -> None:
    """Casts to integer types of a rounding policy: floor / floor + 1 in f64, stochastic or
    nearest-even, clamped to the range (NaN -> 0); a plain-rounding cast truncates first,
    as the interpreter's ``tgraph.cast``. Bit for bit against the Graph IR interpreter."""
    p = _policy(dst, MODIFIERS[mods])
    rng = np.random.default_rng(9)
    x = np.concatenate([
        rng.standard_normal(900) * 100, rng.integers(-300, 300, 300) + 0.5,
        [np.nan, -np.nan, np.inf, -np.inf, 2.0**40, -(2.0**40), 127.5, -128.5, 2.5, -2.5,
         2.0**53 + 2, -0.0],
    ]).astype(np.float32).reshape(1, -1)
    text = policy_cast_text(NumericPolicy(ts.fp32), p, x.shape, seed=5)
    (y,) = run_host(lower(text), "c", [x])
    (want,) = reference(text, "c", [x])
    assert y.dtype == want.dtype and np.array_equal(y, want)


def test_policy_result_of_integer_op_is_refused() -> None:
    t = "tensor<8xi32>"
    r = "tensor<8xi32, #tessera.policy<i32, rounding = stochastic>>"
    with pytest.raises(NotImplementedError, match="casts to integers"):
        lower(f"func.func @f(%x: {t}) -> {r} {{\n  %y = tgraph.add %x, %x : ({t}, {t}) -> "
              f"{r}\n  func.return %y : {r}\n}}")


def test_f64_accumulate_operand_is_refused() -> None:
    t = "tensor<4x4xf32, #tessera.policy<f32, accum = f64>>"
    with pytest.raises(NotImplementedError, match="accumulate"):
        lower(f"func.func @f(%x: {t}) -> tensor<4x4xf32> {{\n  %y = tgraph.matmul %x, %x : "
              f"({t}, {t}) -> tensor<4x4xf32>\n  func.return %y : tensor<4x4xf32>\n}}")


# --------------------------------------------------------------------------- fp6 / fp4 GEMM


def packed_gemm_text(m: int, k: int, n: int, da: ts.DType, db: ts.DType) -> str:
    a, b = f"tensor<{m}x{k}x{IR[da]}>", f"tensor<{k}x{n}x{IR[db]}>"
    c = f"tensor<{m}x{n}xf32>"
    return (f"func.func @mm(%a: {a}, %b: {b}) -> {c} {{\n  %c = tgraph.matmul %a, %b : ({a}, "
            f"{b}) -> {c}\n  func.return %c : {c}\n}}")


def gemm_bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|C - A B| for exact products accumulated in f32 (A, B the dequantized operands)."""
    u32, k = 2.0**-24, a.shape[1]
    return k * u32 / (1 - k * u32) * (np.abs(a) @ np.abs(b)) + u32 * np.abs(a @ b)


def _operand(rng: np.random.Generator, shape: tuple[int, int], d: ts.DType):
    v = cast_array(rng.standard_normal(shape) * 2, d)
    return v, (_pack(v, d).view(np.int8) if d in PACKED_TS else v)


@pytest.mark.parametrize("d", PACKED_TS, ids=repr)
def test_packed_gemm_kernel_error_bound(d: ts.DType) -> None:
    m, k, n = 37, 70, 29
    da = db = d
    rng = np.random.default_rng(21)
    (a, fa), (b, fb) = _operand(rng, (m, k), da), _operand(rng, (k, n), db)
    text = packed_gemm_text(m, k, n, da, db)
    mod = lower(text)
    # one kernel: the bf16 tensor-core GEMM, unpacking in its shared-memory tile fill
    assert "ttile.mma" in str(mod) and "ttile.alloc_shared" in str(mod)
    assert str(mod).count("ttile.kernel") == 1
    (c,) = run_host(mod, "mm", [fa, fb])
    a_h, b_h = a.astype(np.float64), b.astype(np.float64)
    assert (np.abs(c - a_h @ b_h) <= gemm_bound(a_h, b_h)).all()
    (ref,) = reference(text, "mm", [a, b])
    assert (np.abs(c - ref) <= 2 * gemm_bound(a_h, b_h)).all()


def test_guide_fp6_gemm_through_jit() -> None:
    """The guide's ``x: Tensor["B","D", fp6 @accum(fp32)]`` GEMM: f32 result on the CPU path,
    and the lowered program (Tile IR) has the unpack kernels and the tensor-core GEMM."""

    @ts.jit
    def fp6_gemm(
        x: ts.Tensor["B", "D", ts.fp6 @ ts.accum(ts.f32)],  # noqa: F821
        w: ts.Tensor["D", "K", ts.fp6 @ ts.accum(ts.f32)],  # noqa: F821
    ) -> ts.Tensor["B", "K", ts.f32]:  # noqa: F821
        return ts.gemm(x, w)

    rng = np.random.default_rng(5)
    x, w = cast_array(rng.standard_normal((9, 33)), ts.fp6), cast_array(
        rng.standard_normal((33, 17)), ts.fp6)
    y = fp6_gemm(x, w)
    xh, wh = x.astype(np.float64), w.astype(np.float64)
    assert y.dtype == np.float32 and (np.abs(y - xh @ wh) <= gemm_bound(xh, wh)).all()
    tile = fp6_gemm.inspect_ir("tile")
    assert "ttile.mma" in tile and "memref<9x27xi8>" in tile


def test_packed_gemm_sm90_unpacks_then_wgmma() -> None:
    """With the sm90 kernels on, packed operands are unpacked to bf16 by cast kernels and
    the TMA + wgmma GEMM takes the copies (its tiles arrive by TMA, not by a lane fill)."""
    from tessera.passes.lower_graph_to_tile import LowerGraphToTile

    m = Parser(context(), packed_gemm_text(128, 256, 128, ts.fp4_e2m1, ts.fp4_e2m1)).parse_module()
    LowerGraphToTile(sm90=True).apply(context(), m)
    text = str(m)
    assert text.count("ttile.kernel @mm_cast_") == 2 and "ttarget.launch_ex @mm_matmul_0" in text
    if ptxas.find_ptxas() is not None:
        ptxas.check(emit_ptx(lower_to_target(m), verify=False), arch="sm_90a")


# --------------------------------------------------------------------------- precision policy


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


def test_precision_policy_matmul_operand() -> None:
    """``ts.Tensor["D","D", QuantizedPolicy]`` as a matmul operand: the int8 codes are
    converted to the f32 accumulate type, so ``matmul(x, w) * scale`` is the dequantized
    product, on the CPU and in the lowered program."""

    @ts.jit
    def qmm(
        x: ts.Tensor["B", "D", ts.f32],  # noqa: F821
        w: ts.Tensor["D", "D", QuantizedPolicy],  # noqa: F821
    ) -> ts.Tensor["B", "D", ts.f32]:  # noqa: F821
        return ts.matmul(x, w)

    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, 24)).astype(np.float32)
    wq, scale = QuantizedPolicy().quantize(rng.standard_normal((24, 24)).astype(np.float32))
    assert wq.dtype == np.int8
    y = qmm(x, wq)
    x64, w64 = x.astype(np.float64), wq.astype(np.float64)
    assert (np.abs(y - x64 @ w64) <= gemm_bound(x64, w64)).all()
    deq = QuantizedPolicy().dequantize(wq, scale)
    assert np.allclose(y * scale, x64 @ deq.astype(np.float64), rtol=1e-5, atol=1e-5)
    graph = qmm.inspect_ir("graph")
    assert "accum = f32" in graph and "tgraph.cast" in graph
    tile = qmm.inspect_ir("tile")
    assert "memref<24x24xi8>" in tile and "arith.sitofp" in tile
    spec = qmm._last
    assert spec is not None
    (y_tile,) = run_host(spec.ir("tile"), "qmm", [x, wq])
    assert (np.abs(y_tile - x64 @ w64) <= gemm_bound(x64, w64)).all()
    # negative codes are sign-extended by the kernel's byte loads
    assert "ld.global.s8" in spec.ir("ptx") and (wq < 0).any()


# --------------------------------------------------------------------------- PTX


def test_policy_kernels_pass_ptxas() -> None:
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found (set TESSERA_PTXAS or install nvidia-cuda-nvcc)")
    pols = [_policy(d, mods) for d in (ts.bf16, ts.fp16, ts.fp8_e4m3, ts.fp6_e2m3, ts.fp4_e2m1,
                                       ts.fp32) for mods in ((SR,), (SAT, ts.loss_scale(8.0)))]
    pols += [_policy(ts.int8, (SR,)), _policy(ts.int32, (ts.loss_scale(3.0), SAT))]
    x = policy_type((3, 37), NumericPolicy(ts.fp32))
    outs = [policy_type((3, 37), p) for p in pols]
    body = "\n".join(f"  %y{i} = tgraph.cast %x seed = {i} : ({x}) -> {t}"
                     for i, t in enumerate(outs))
    casts = (f"func.func @c(%x: {x}) -> ({', '.join(outs)}) {{\n{body}\n  func.return "
             f"{', '.join(f'%y{i}' for i in range(len(outs)))} : {', '.join(outs)}\n}}")
    ptx = [emit_ptx(lower_to_target(lower(t)), verify=False)
           for t in (casts, packed_gemm_text(37, 70, 29, ts.fp6_e3m2, ts.fp6_e3m2))]
    assert "mul.lo.s64" in ptx[0] or "mul.lo.u64" in ptx[0]  # Philox's products
    assert ptx[0].count(".entry") == len(pols)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx[1]
    for t in ptx:
        ptxas.check(t)


def test_jit_program_with_policies_on_tile_interpreter() -> None:
    """A ``ts.jit`` function mixing policy casts, ops whose results inherit a rounding
    policy and plain ops: its lowered program (run by the Tile IR interpreter) equals the
    CPU call bit for bit; fuse-elementwise left the rounding ops unfused."""
    pol = ts.bf16 @ SR @ SAT

    @ts.jit
    def f(
        x: ts.Tensor["B", "D", ts.bf16],  # noqa: F821
        y: ts.Tensor["B", "D", ts.bf16],  # noqa: F821
    ) -> ts.Tensor["B", "D", ts.f32]:  # noqa: F821
        a = ts.cast(x * 3.0, pol)
        c = a * ts.cast(y, pol)  # the result keeps the policy: rounded stochastically
        return ts.cast(ts.relu(c) + c, ts.f32) * 0.5

    rng = np.random.default_rng(31)
    x = cast_array(rng.standard_normal((9, 70)) * 40, ts.bf16)
    y = cast_array(rng.standard_normal((9, 70)) * 1e36, ts.bf16)  # some products saturate
    cpu = f(x, y)
    spec = f._last
    assert spec is not None
    (tile,) = run_host(spec.ir("tile"), "f", [x, y])
    assert np.array_equal(tile.view(np.uint32), np.asarray(cpu).view(np.uint32))
    assert np.isfinite(cpu).all() and (np.abs(cpu) > 1e38).any()


# --------------------------------------------------------------------------- loss scaling


def test_loss_scale_scales_the_loss_and_unscales_the_gradients() -> None:
    """``ts.grad`` of a loss cast to ``@loss_scale(k)``: the value is ``k L``, the backward
    pass runs on cotangents scaled by ``k`` and the gradients come back unscaled; the
    lowered gradient program equals the CPU one bit for bit."""
    pol = ts.bf16 @ ts.loss_scale(1024.0)

    @ts.jit
    def loss(x: ts.Tensor["N", ts.bf16], w: ts.Tensor["N", ts.bf16]) -> ts.Tensor[ts.f32]:  # noqa: F821
        r = ts.cast(x * w, ts.f32)
        return ts.cast(ts.cast(ts.sum(r * r), pol), ts.f32)

    rng = np.random.default_rng(41)
    x = cast_array(rng.standard_normal(50), ts.bf16)
    w = cast_array(rng.standard_normal(50), ts.bf16)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    value = loss(x, w)
    exact = np.sum((x64 * w64) ** 2)
    assert abs(float(value) - 1024.0 * exact) <= 2.0**-7 * 1024.0 * exact
    grad = ts.grad(loss, argnums=1)
    gw = grad(x, w)
    want = 2 * x64 * x64 * w64  # d/dw of the unscaled loss
    assert np.allclose(gw.astype(np.float64), want, rtol=2.0**-7, atol=0)
    graph = grad.inspect_ir("graph")
    assert "1.024000e+03" in graph and "9.76562" in graph  # scale, then unscale (1/1024)
    spec = grad._last
    assert spec is not None
    tile = Parser(context(), str(spec.ir("tile"))).parse_module()
    (gw_tile,) = run_host(tile, grad.name, [x, w])
    assert np.array_equal(gw_tile.view(np.uint16), np.asarray(gw).view(np.uint16))


def test_loss_scale_cast_inside_the_program_has_its_derivative() -> None:
    """A scaled cast whose value the program goes on to use: its derivative is ``k``."""
    pol = ts.f32 @ ts.loss_scale(128.0)

    @ts.jit
    def f(x: ts.Tensor["N", ts.f32]) -> ts.Tensor[ts.f32]:  # noqa: F821
        return ts.sum(ts.cast(ts.cast(x, pol) * x, ts.f32))  # sum(128 x^2)

    x = np.random.default_rng(2).standard_normal(7).astype(np.float32)
    assert np.allclose(ts.grad(f)(x), 256.0 * x.astype(np.float64), rtol=1e-6)
