"""Randomized elementwise ops, casts and data movement on the GPU, each against the same
function on Tessera's CPU reference (numpy inputs) and against torch: odd shapes,
broadcasting patterns, random permutations, strided slices, and special values (±0,
±inf, NaN, subnormals, values that round to a tie or overflow). Exact ops (copies,
casts, comparisons, min/max, abs, neg, add/mul in the input dtype) must agree bitwise
with the CPU reference; transcendental ones to a few ulps. Skipped without a GPU."""

from __future__ import annotations

import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

import ml_dtypes  # noqa: E402

import tessera as ts  # noqa: E402

NP = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
TORCH = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
FROM_TORCH = {torch.bfloat16: ml_dtypes.bfloat16, torch.float8_e4m3fn: ml_dtypes.float8_e4m3fn,
              torch.float8_e5m2: ml_dtypes.float8_e5m2}
ULP = {"f32": 2.0 ** -23, "bf16": 2.0 ** -7, "f16": 2.0 ** -10}


def _special(n: int, dt: str, rng: np.random.Generator) -> np.ndarray:
    """``n`` values: random normals and uniforms of several scales, with the special
    values of ``dt`` mixed in (±0, ±inf, NaN, the largest finite, a subnormal)."""
    fin = ml_dtypes.finfo(NP[dt])
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, float(fin.max), -float(fin.max),
                        float(fin.smallest_subnormal), 1.0, -1.0, 0.5, 2.5, -3.5], np.float64)
    x = rng.standard_normal(n) * rng.choice([1e-3, 1.0, 30.0], n)
    pos = rng.choice(n, size=min(n, len(special) * 3), replace=False)
    x[pos] = np.resize(special, len(pos))
    return x.astype(NP[dt])


def _gpu(fn, *arrays):
    args = [torch.from_numpy(np.ascontiguousarray(a).view(np.uint16)).view(torch.bfloat16).cuda()
            if a.dtype == ml_dtypes.bfloat16 else torch.from_numpy(np.ascontiguousarray(a)).cuda()
            for a in arrays]
    out = ts.jit(fn)(*args)
    outs = out if isinstance(out, tuple) else (out,)
    return [o.view(torch.uint8 if o.element_size() == 1 else torch.uint16).cpu().numpy()
            .view(FROM_TORCH[o.dtype]) if o.dtype in FROM_TORCH else o.cpu().numpy()
            for o in outs]


def _cpu(fn, *arrays):
    out = ts.jit(fn)(*arrays)
    outs = out if isinstance(out, tuple) else (out,)
    return [np.asarray(o) for o in outs]


def _same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"{what}: {got.shape} {got.dtype} != {want.shape} {want.dtype}")
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(g64) & np.isnan(w64)
    same = (g64 == w64) & (np.signbit(g64) == np.signbit(w64))
    bad = ~(both_nan | same)
    assert not bad.any(), (f"{what}: {int(bad.sum())} elements differ, first at "
                           f"{np.argwhere(bad)[0].tolist()}: {got[bad][:4]} vs {want[bad][:4]}")


def _close(got: np.ndarray, want: np.ndarray, ulps: float, dt: str, what: str,
           scale: np.ndarray | None = None) -> None:
    """Within ``ulps`` units in the last place of ``max(|want|, scale)`` (``scale``: a
    floor for results that cancel, e.g. gelu's negative tail, where the error of the
    formula is relative to the input); NaN and infinities in the same places."""
    assert got.shape == want.shape, what
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    assert (np.isnan(g64) == np.isnan(w64)).all(), f"{what}: NaN positions differ"
    fin = np.isfinite(w64)
    assert (g64[~fin & ~np.isnan(w64)] == w64[~fin & ~np.isnan(w64)]).all(), f"{what}: infinities differ"
    floor = float(ml_dtypes.finfo(NP[dt]).tiny)
    if scale is not None:
        floor = np.maximum(np.abs(scale.astype(np.float64)[fin]), floor)
    tol = ulps * ULP[dt] * np.maximum(np.abs(w64[fin]), floor)
    err = np.abs(g64[fin] - w64[fin])
    assert (err <= tol).all(), f"{what}: worst error {float((err / tol).max()) * ulps:.1f} ulps"


EXACT_UNARY = {"neg": lambda x: -x, "abs": ts.abs, "relu": ts.relu,
               "max0": lambda x: ts.maximum(x, 0.0), "square": lambda x: x * x}
APPROX_UNARY = {"exp": (ts.exp, 4), "log": (ts.log, 4), "tanh": (ts.tanh, 8),
                "sigmoid": (ts.sigmoid, 8), "erf": (ts.erf, 8), "sqrt": (ts.sqrt, 2),
                "rsqrt": (ts.rsqrt, 4), "silu": (ts.silu, 8), "gelu": (ts.gelu, 16)}


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("name", list(EXACT_UNARY))
def test_exact_unary(dt: str, name: str) -> None:
    x = _special(4099, dt, np.random.default_rng(len(name))).reshape(1, 4099)
    fn = EXACT_UNARY[name]
    _same_bits(_gpu(fn, x)[0], _cpu(fn, x)[0], f"{name} {dt}")


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("name", list(APPROX_UNARY))
def test_approx_unary(dt: str, name: str) -> None:
    fn, ulps = APPROX_UNARY[name]
    x = _special(3001, dt, np.random.default_rng(len(name) + 7))
    if name in ("log", "sqrt", "rsqrt"):
        x = np.abs(x)  # the negative half is NaN on both sides, checked by the exact test
    got = _gpu(fn, x)[0]
    want = torch.from_numpy(x.astype(np.float64))
    ref = {"exp": torch.exp, "log": torch.log, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
           "erf": torch.erf, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
           "silu": torch.nn.functional.silu,
           "gelu": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}[name](want)
    want = ref.to(TORCH[dt]).float().numpy().astype(NP[dt]) if dt != "bf16" else (
        ref.to(torch.bfloat16).view(torch.uint16).numpy().view(ml_dtypes.bfloat16))
    # 16-bit results: one rounding of the f32 value, so one ulp of the 16-bit type
    _close(got, want, ulps if dt == "f32" else 1.0, dt, f"{name} {dt}",
           scale=x if name in ("gelu", "silu") else None)


def _broadcast_cases(n: int) -> list[tuple]:
    rng = random.Random(5)
    cases = []
    for _ in range(n):
        rank = rng.choice([1, 2, 3, 4])
        shape = [rng.choice([1, 2, 3, 5, 7, 16, 33, 129]) for _ in range(rank)]
        other = [d if rng.random() < 0.6 else 1 for d in shape]
        other = other[rng.choice(range(rank)):] if rng.random() < 0.3 else other
        cases.append((rng.choice(["f32", "bf16", "f16"]), tuple(shape), tuple(other),
                      rng.choice(["add", "sub", "mul", "div", "maximum", "min_where", "lt"])))
    return cases


BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: a / b, "maximum": ts.maximum,
          "min_where": lambda a, b: ts.where(a < b, a, b),
          "lt": lambda a, b: ts.cast(a < b, ts.f32)}


@pytest.mark.parametrize(("dt", "sa", "sb", "name"), _broadcast_cases(30))
def test_binary_broadcast(dt, sa, sb, name) -> None:
    rng = np.random.default_rng(sum(sa) * 13 + sum(sb))
    a = _special(int(np.prod(sa)), dt, rng).reshape(sa)
    b = _special(int(np.prod(sb)), dt, rng).reshape(sb)
    fn = BINARY[name]
    got, want = _gpu(fn, a, b)[0], _cpu(fn, a, b)[0]
    if name == "div" and dt == "f32":
        _close(got, want, 1.0, dt, f"{name} {dt} {sa} {sb}")  # div.rn vs numpy: both exact
    else:
        _same_bits(got, want, f"{name} {dt} {sa} {sb}")


def _movement_cases(n: int) -> list[tuple]:
    rng = random.Random(17)
    cases = []
    for _ in range(n):
        rank = rng.choice([2, 3, 4, 5])
        shape = tuple(rng.choice([1, 2, 3, 7, 8, 31, 64, 65]) for _ in range(rank))
        perm = list(range(rank))
        rng.shuffle(perm)
        cases.append((rng.choice(["f32", "bf16", "f16"]), shape, tuple(perm),
                      rng.choice(["transpose", "slice", "concat", "reshape_t", "broadcast"])))
    return cases


@pytest.mark.parametrize(("dt", "shape", "perm", "kind"), _movement_cases(30))
def test_data_movement(dt, shape, perm, kind) -> None:
    rng = np.random.default_rng(sum(shape) + len(perm))
    x = _special(int(np.prod(shape)), dt, rng).reshape(shape)
    if kind == "transpose":
        fn = lambda x: ts.transpose(x, list(perm))  # noqa: E731
        want = np.transpose(x, perm)
    elif kind == "slice":
        start = [int(rng.integers(0, d)) for d in shape]
        stride = [int(rng.integers(1, 4)) for _ in shape]
        limit = [d for d in shape]
        fn = lambda x: ts.slice(x, start, limit, stride)  # noqa: E731
        want = x[tuple(slice(s, lim, st) for s, lim, st in zip(start, limit, stride))]
    elif kind == "concat":
        axis = perm[0]
        fn = lambda x: ts.concat([x, ts.transpose(ts.transpose(x, 1, 0), 1, 0), x], axis)  # noqa: E731
        want = np.concatenate([x, x, x], axis)
    elif kind == "reshape_t":
        flat = (int(np.prod(shape[:1])), int(np.prod(shape[1:])))
        fn = lambda x: ts.transpose(ts.reshape(x, flat), 1, 0)  # noqa: E731
        want = x.reshape(flat).T
    else:
        target = (3, *shape)
        fn = lambda x: ts.broadcast_to(x, target)  # noqa: E731
        want = np.broadcast_to(x, target)
    got = _gpu(fn, x)[0]
    _same_bits(got, np.ascontiguousarray(want), f"{kind} {dt} {shape} {perm}")


CASTS = [("f32", "bf16"), ("f32", "f16"), ("bf16", "f32"), ("f16", "f32"), ("bf16", "f16"),
         ("f16", "bf16"), ("f32", "fp8_e4m3"), ("f32", "fp8_e5m2"), ("bf16", "fp8_e4m3")]


@pytest.mark.parametrize(("src", "dst"), CASTS)
def test_casts_match_the_reference(src: str, dst: str) -> None:
    """Round-to-nearest-even, overflow and special values of every cast, bitwise equal
    to the CPU reference (ml_dtypes) and, for the 16-bit and f32 targets, to torch."""
    rng = np.random.default_rng(hash((src, dst)) % 1000)
    x = _special(5003, src, rng)
    if src == "f32":  # values exactly between two 16-bit neighbours (ties)
        ties = (rng.standard_normal(200).astype(np.float32).view(np.uint32) & 0xFFFF0000) | 0x8000
        x[:200] = ties.view(np.float32)
    dtype = getattr(ts, {"fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}.get(dst, dst))
    fn = lambda x: ts.cast(x, dtype)  # noqa: E731
    got, want = _gpu(fn, x)[0], _cpu(fn, x)[0]
    if dst.startswith("fp8"):
        assert got.view(np.uint8).shape == want.view(np.uint8).shape
        g, w = got.astype(np.float64), want.astype(np.float64)
        bad = ~((g == w) | (np.isnan(g) & np.isnan(w)))
        assert not bad.any(), f"cast {src}->{dst}: {int(bad.sum())} differ: {x[bad][:4]} -> {got[bad][:4]} vs {want[bad][:4]}"
        return
    _same_bits(got, want, f"cast {src}->{dst}")
    if dst in ("bf16", "f16", "f32"):
        t = torch.from_numpy(x.astype(np.float64)).to(TORCH[src]).to(TORCH[dst])
        tw = (t.view(torch.uint16).numpy().view(ml_dtypes.bfloat16) if dst == "bf16"
              else t.numpy())
        _same_bits(got, tw, f"cast {src}->{dst} vs torch")


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_take_along_axis_and_softmax_any_axis(axis: int, dt: str) -> None:
    rng = np.random.default_rng(axis)
    x = (rng.standard_normal((5, 33, 7)) * 4).astype(NP[dt])
    idx = rng.integers(0, x.shape[axis], size=tuple(3 if k == axis else d
                                                     for k, d in enumerate(x.shape)))
    fn = lambda x, i: ts.take_along_axis(x, i, axis)  # noqa: E731
    _same_bits(_gpu(fn, x, idx)[0], np.take_along_axis(x, idx, axis), f"take {dt} axis {axis}")
    sm = lambda x: ts.softmax(x, axis)  # noqa: E731
    got = _gpu(sm, x)[0].astype(np.float64)
    want = torch.softmax(torch.from_numpy(x.astype(np.float64)), axis).numpy()
    assert np.abs(got - want).max() < (1e-6 if dt == "f32" else 8e-3), f"softmax axis {axis}"
