"""The operator suite: every operator on PyTorch-OpInfo-style sample inputs
(tests/frontend/opinfo_samples.py), through ``@ts.jit`` on CPU torch tensors and on numpy
arrays, against torch on the same dtypes, a float64 reference for float32, and
``torch.autograd`` for the gradients of differentiable operators.

Checked per sample: the result's dtype and shape equal torch's (rank-0 included),
values within the dtype's tolerance (NaN where torch has NaN, infinities
equal), and the numpy-input result equal to the torch-input one bit for bit.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera.runtime import convert
from tests.frontend.opinfo_samples import (
    ALL,
    FLOATS,
    INTS,
    OpInfo,
    binary_samples,
    finite_f64,
    make,
    np_dtype,
    reduction_samples,
    row_samples,
    unary_samples,
    with_specials,
)

torch = pytest.importorskip("torch")
F = torch.nn.functional

RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-12}
ATOL = {"float16": 1e-3, "bfloat16": 1e-2, "float32": 2e-6, "float64": 1e-12}


def _t(a: np.ndarray) -> Any:
    return convert.to_torch(a)


# --------------------------------------------------------------------------- sample generators


def _where_samples(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    for sc, sa, sb in (((7,), (7,), (7,)), ((3, 1), (1, 4), (3, 4)), ((), (2, 3), (3,)), ((0,), (0,), ())):
        yield make(rng, sc, "bool"), make(rng, sa, dtype), make(rng, sb, dtype)


def _matmul_samples(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    for sa, sb in (((3, 4), (4, 5)), ((1, 7), (7, 1)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 2)), ((0, 3), (3, 2)), ((3, 0), (0, 2))):
        yield make(rng, sa, dtype, low=-1, high=1), make(rng, sb, dtype, low=-1, high=1)


def _norm_samples(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    for s in ((1, 1), (7,), (3, 5), (2, 3, 33)):
        yield make(rng, s, dtype), make(rng, s[-1:], dtype), make(rng, s[-1:], dtype)


def _mse_samples(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    for s in ((), (7,), (3, 5)):
        yield make(rng, s, dtype), make(rng, s, dtype)


def _concat_samples(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    for sa, sb in (((3,), (5,)), ((2, 3), (4, 3)), ((0, 3), (2, 3))):
        yield make(rng, sa, dtype), make(rng, sb, dtype)


def _spd_samples(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    for s in ((1, 1), (3, 3), (2, 5, 5)):
        a = rng.uniform(-1, 1, size=s)
        spd = a @ np.swapaxes(a, -1, -2) + s[-1] * np.eye(s[-1])
        yield (spd.astype(dtype),)


def _tri_samples(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    for n, k in ((1, 1), (4, 3), (5, 1)):
        a = np.tril(rng.uniform(-1, 1, size=(n, n))) + 3 * np.eye(n)
        yield a.astype(dtype), rng.uniform(-1, 1, size=(n, k)).astype(dtype)


def _conv_samples(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    for xs, ws in (((1, 2, 5, 5), (3, 2, 3, 3)), ((2, 1, 4, 7), (2, 1, 2, 3))):
        yield make(rng, xs, dtype, low=-1, high=1), make(rng, ws, dtype, low=-1, high=1)


def _grouped_conv_samples(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    # (input, weight) for groups = 2: two channels per group, and one (depthwise with a
    # channel multiplier 2 when C = 2)
    for xs, ws in (((1, 4, 5, 6), (4, 2, 3, 3)), ((2, 2, 6, 5), (4, 1, 3, 2))):
        yield make(rng, xs, dtype, low=-1, high=1), make(rng, ws, dtype, low=-1, high=1)


def _attention_samples(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    for b, s, d in ((1, 5, 4), (2, 7, 8)):
        yield tuple(make(rng, (b, s, d), dtype, low=-1, high=1) for _ in range(3))


def _fft_samples(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    for s in ((1,), (8,), (3, 7)):
        yield (make(rng, s, dtype),)


def _masked_rows(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    """Row samples, then rows with -inf (masked), +inf and NaN entries."""
    yield from row_samples(dtype, rng)
    inf, nan = np.inf, np.nan
    rows = [[-inf, 0, 1], [0, -inf, -inf], [nan, 1, 2], [inf, 1, 2], [-inf, -inf, -inf],
            [-0.0, 0.0, -0.0]]
    yield (np.array(rows, dtype=np_dtype(dtype)),)


def _cast_samples(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    yield from unary_samples(-100, 100)(dtype, rng)


def _positive(dtype: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    yield from unary_samples(0.05, 4.0)(dtype, rng)


# --------------------------------------------------------------------------- torch references


def _t_rmsnorm(x: Any, w: Any) -> Any:
    x64 = x.double()
    y = x64 / torch.sqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6) * w.double()
    return y.to(x.dtype)


def _t_softmax(x: Any, axis: int = -1) -> Any:
    return torch.softmax(x, dim=axis)


def _t_layernorm(x: Any, w: Any, b: Any) -> Any:
    return F.layer_norm(x, x.shape[-1:], w, b, eps=1e-5)


def _t_reduce(name: str, axis: Any, keepdims: bool) -> Callable[[Any], Any]:
    fn = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[name]

    def ref(x: Any) -> Any:
        if axis is None:
            r = fn(x) if name in ("sum", "mean") else fn(x, dim=tuple(range(x.ndim)))
            return r.reshape([1] * x.ndim) if keepdims else r
        return fn(x, dim=axis, keepdim=keepdims)

    return ref


def _ts_reduce(name: str, axis: Any, keepdims: bool) -> Callable[[Any], Any]:
    fn = getattr(ts, name)
    return lambda x: fn(x, axis=axis, keepdims=keepdims)


def _reduction_ops() -> list[OpInfo]:
    out = []
    for name, axis, keep in itertools.product(
        ("sum", "mean", "max", "min"), (None, 0, -1), (False, True)
    ):
        def samples(dtype: str, rng: np.random.Generator, axis: Any = axis, name: str = name) -> Any:
            for (x,) in reduction_samples(dtype, rng):
                if axis is not None and x.ndim == 0:
                    continue
                axes = range(x.ndim) if axis is None else [axis]
                if name in ("max", "min") and any(x.shape[a] == 0 for a in axes):
                    continue
                yield (x,)

        dtypes = FLOATS if name == "mean" else ALL
        out.append(OpInfo(
            f"{name}[axis={axis},keepdims={keep}]", _ts_reduce(name, axis, keep),
            _t_reduce(name, axis, keep), dtypes, samples, grad=name != "max" and name != "min",
        ))
    return out


def _gelu_tanh(x: Any) -> Any:
    return F.gelu(x, approximate="tanh")


UNARY_INT_TO_FLOAT = (*FLOATS, *INTS, "bool")

OPS: list[OpInfo] = [
    OpInfo("neg", ts.neg, torch.neg, (*FLOATS, *INTS), unary_samples(), grad=True),
    OpInfo("abs", ts.abs, torch.abs, (*FLOATS, *INTS), unary_samples(), grad=True),
    OpInfo("exp", ts.exp, torch.exp, UNARY_INT_TO_FLOAT, unary_samples(), grad=True),
    OpInfo("log", ts.log, torch.log, UNARY_INT_TO_FLOAT, unary_samples(), grad=True,
           grad_samples=finite_f64(_positive)),
    OpInfo("sqrt", ts.sqrt, torch.sqrt, UNARY_INT_TO_FLOAT, unary_samples(), grad=True,
           grad_samples=finite_f64(_positive)),
    OpInfo("rsqrt", ts.rsqrt, torch.rsqrt, FLOATS, unary_samples(), grad=True,
           grad_samples=finite_f64(_positive)),
    OpInfo("tanh", ts.tanh, torch.tanh, UNARY_INT_TO_FLOAT, unary_samples(), grad=True),
    OpInfo("sigmoid", ts.sigmoid, torch.sigmoid, UNARY_INT_TO_FLOAT, unary_samples(), grad=True),
    OpInfo("erf", ts.erf, torch.erf, UNARY_INT_TO_FLOAT, unary_samples(), grad=True),
    OpInfo("sin", ts.sin, torch.sin, UNARY_INT_TO_FLOAT, unary_samples(), grad=True),
    OpInfo("cos", ts.cos, torch.cos, UNARY_INT_TO_FLOAT, unary_samples(), grad=True),
    OpInfo("silu", ts.silu, F.silu, FLOATS, unary_samples(), grad=True),
    OpInfo("gelu", ts.gelu, _gelu_tanh, FLOATS, unary_samples(), grad=True),
    OpInfo("relu", ts.relu, torch.relu, (*FLOATS, *INTS), unary_samples(), grad=True),
    OpInfo("round", ts.round, torch.round, (*FLOATS, *INTS), unary_samples(-40, 40), grad=True),
    OpInfo("add", ts.add, torch.add, ALL, binary_samples(), grad=True),
    OpInfo("sub", ts.sub, torch.sub, (*FLOATS, *INTS), binary_samples(), grad=True),
    OpInfo("mul", ts.mul, torch.mul, ALL, binary_samples(), grad=True),
    OpInfo("div", ts.div, torch.div, (*FLOATS, *INTS), binary_samples(), grad=True),
    OpInfo("pow", ts.pow, torch.pow, FLOATS, binary_samples(0.1, 2.0), grad=True),
    OpInfo("pow_int", ts.pow, torch.pow, INTS, binary_samples(0, 4)),
    OpInfo("maximum", ts.maximum, torch.maximum, (*FLOATS, *INTS), binary_samples(), grad=True,
           signed_zeros=False),
    OpInfo("minimum", ts.minimum, torch.minimum, (*FLOATS, *INTS), binary_samples(), grad=True,
           signed_zeros=False),
    *(OpInfo(n, getattr(ts, n), getattr(torch, n), ALL, binary_samples())
      for n in ("lt", "le", "gt", "ge", "eq", "ne")),
    OpInfo("add_scalar", lambda x: x + 2.5, lambda x: x + 2.5, ALL, unary_samples()),
    OpInfo("mul_int_scalar", lambda x: x * 3, lambda x: x * 3, (*FLOATS, *INTS), unary_samples()),
    OpInfo("rdiv_scalar", lambda x: 2 / x, lambda x: 2 / x, (*FLOATS, *INTS), unary_samples()),
    OpInfo("square", lambda x: x**2, lambda x: x**2, (*FLOATS, *INTS), unary_samples(), grad=True),
    OpInfo("where", ts.where, torch.where, (*FLOATS, *INTS), _where_samples),
    *_reduction_ops(),
    OpInfo("softmax", ts.softmax, _t_softmax, FLOATS, _masked_rows, grad=True),
    OpInfo("logsumexp", lambda x: ts.logsumexp(x, -1), lambda x: torch.logsumexp(x, -1),
           UNARY_INT_TO_FLOAT,
           lambda d, r: _masked_rows(d, r) if d in FLOATS else row_samples(d, r), grad=True),
    OpInfo("logsumexp_keepdim", lambda x: ts.logsumexp(x, (0, -1), keepdim=True),
           lambda x: torch.logsumexp(x, (0, -1), keepdim=True), FLOATS,
           lambda d, r: (a for a in reduction_samples(d, r) if a[0].ndim >= 2), grad=True),
    OpInfo("softmax0", lambda x: ts.softmax(x, axis=0), lambda x: torch.softmax(x, 0), FLOATS,
           row_samples, grad=True),
    OpInfo("layernorm_plain", lambda x: ts.layernorm(x), lambda x: F.layer_norm(x, x.shape[-1:]),
           FLOATS, _masked_rows, grad=True, rtol={"bfloat16": 3e-2, "float16": 4e-3, "float32": 2e-5},
           signed_zeros=False),
    OpInfo("layernorm", ts.layernorm, _t_layernorm, FLOATS, _norm_samples, grad=True,
           rtol={"bfloat16": 3e-2, "float16": 4e-3, "float32": 2e-5}),
    OpInfo("rmsnorm", lambda x, w: ts.rmsnorm(x, w), _t_rmsnorm, FLOATS,
           lambda d, r: ((x, w) for x, w, _ in _norm_samples(d, r)), grad=True,
           rtol={"float32": 1e-5}),
    OpInfo("matmul", ts.matmul, torch.matmul, (*FLOATS, *INTS), _matmul_samples, grad=True,
           rtol={"float32": 1e-5, "bfloat16": 2e-2}),
    OpInfo("mse", ts.mse, F.mse_loss, FLOATS, _mse_samples, grad=True,
           rtol={"float32": 1e-5}),
    OpInfo("transpose", lambda x: ts.transpose(x, 0, -1), lambda x: x.transpose(0, -1), ALL,
           lambda d, r: (a for a in row_samples(d, r)), grad=True),
    OpInfo("T", lambda x: x.T, lambda x: x.mT, ALL,
           lambda d, r: (a for a in row_samples(d, r) if a[0].ndim >= 2), grad=True),
    OpInfo("reshape", lambda x: x.reshape(-1), lambda x: x.reshape(-1), ALL, unary_samples(), grad=True),
    OpInfo("flip", lambda x: ts.flip(x, (0, -1)), lambda x: x.flip(0, -1), ALL,
           lambda d, r: (a for a in row_samples(d, r) if a[0].ndim >= 2), grad=True),
    OpInfo("broadcast_to", lambda x: ts.broadcast_to(x, (2, *x.shape)),
           lambda x: x.broadcast_to((2, *x.shape)), ALL, unary_samples(), grad=True),
    OpInfo("getitem", lambda x: x[..., 1:], lambda x: x[..., 1:], ALL,
           lambda d, r: (a for a in unary_samples()(d, r) if a[0].ndim >= 1), grad=True),
    OpInfo("index_array", lambda x: x[np.array([0, 0, -1])], lambda x: x[[0, 0, -1]], ALL,
           lambda d, r: (a for a in row_samples(d, r)), grad=True),
    OpInfo("concat", lambda a, b: ts.concat([a, b], axis=0), lambda a, b: torch.cat([a, b], 0), ALL,
           _concat_samples, grad=True),
    OpInfo("cast_f32", lambda x: ts.cast(x, ts.f32), lambda x: x.to(torch.float32), ALL,
           _cast_samples),
    OpInfo("cast_i32", lambda x: ts.cast(x, ts.int32), lambda x: x.to(torch.int32),
           (*FLOATS, *INTS, "bool"), lambda d, r: (a for a in _cast_samples(d, r)
                                                   if d not in FLOATS or np.all(np.isfinite(a[0])))),
    OpInfo("cast_bool", lambda x: ts.cast(x, ts.bool_), lambda x: x.to(torch.bool), ALL,
           _cast_samples),
    OpInfo("cholesky", ts.cholesky, torch.linalg.cholesky, ("float32", "float64"), _spd_samples,
           grad=True, rtol={"float32": 1e-5}),
    OpInfo("triangular_solve", ts.triangular_solve,
           lambda a, b: torch.linalg.solve_triangular(a, b, upper=False), ("float32", "float64"),
           _tri_samples, grad=True, rtol={"float32": 1e-5}),
    OpInfo("conv2d", ts.conv2d, F.conv2d, ("float32", "float64"), _conv_samples, grad=True,
           rtol={"float32": 1e-5}),
    OpInfo("conv2d_bias_stride",
           lambda x, w: ts.conv2d(x, w, w[:, 0, 0, 0], stride=2, padding=1),
           lambda x, w: F.conv2d(x, w, w[:, 0, 0, 0], stride=2, padding=1),
           ("float32", "float64"), _conv_samples, grad=True, rtol={"float32": 1e-5}),
    OpInfo("conv2d_groups",
           lambda x, w: ts.conv2d(x, w, w[:, 0, 0, 0], padding=1, groups=2),
           lambda x, w: F.conv2d(x, w, w[:, 0, 0, 0], padding=1, groups=2),
           ("float32", "float64"), _grouped_conv_samples, grad=True, rtol={"float32": 1e-5}),
    OpInfo("flash_attention_causal", lambda q, k, v: ts.flash_attention(q, k, v, causal=True),
           lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
           ("float32", "float64"), _attention_samples, grad=True, rtol={"float32": 1e-5}),
    OpInfo("flash_attention", ts.flash_attention, F.scaled_dot_product_attention,
           ("float32", "float64"), _attention_samples, grad=True, rtol={"float32": 1e-5}),
    OpInfo("fft", ts.fft, torch.fft.fft, ("float32", "float64"), _fft_samples,
           rtol={"float32": 1e-5}),
]

_IDS = [op.name for op in OPS]
assert len(set(_IDS)) == len(_IDS), "operator names must be unique"


# --------------------------------------------------------------------------- comparison


def _jit(fn: Callable[..., Any], n: int) -> Any:
    """``ts.jit`` of ``fn`` with ``n`` plain positional parameters."""
    params = ", ".join(f"a{i}" for i in range(n))
    wrapper = eval(f"lambda {params}: fn({params})", {"fn": fn})  # noqa: S307
    return ts.jit(wrapper)


def _same_zero_signs(got: Any, want: Any, what: str) -> None:
    if not want.dtype.is_floating_point:
        return
    zero = (want == 0) & (got == 0)
    g, w = torch.signbit(got[zero]), torch.signbit(want[zero])
    assert torch.equal(g, w), f"{what}: signs of zero differ from torch's"


def _close(got: Any, want: Any, dtype: str, rtol: float | None = None, what: str = "") -> None:
    assert isinstance(got, torch.Tensor), f"{what}: got {type(got).__name__}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, torch {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {list(got.shape)}, torch {list(want.shape)}"
    if want.dtype.is_floating_point or want.dtype.is_complex:
        r = rtol if rtol is not None else RTOL.get(dtype, 2e-6)
        a = r * 0.5 if rtol is not None else ATOL.get(dtype, 2e-6)
        wide = torch.complex128 if want.dtype.is_complex else torch.float64
        torch.testing.assert_close(got.to(wide), want.to(wide), rtol=r, atol=a, equal_nan=True,
                                   msg=lambda m: f"{what}: {m}")
    else:
        assert torch.equal(got, want), f"{what}: {got} != {want}"


def _check_op(op: OpInfo, dtype: str) -> int:
    rng = np.random.default_rng(abs(hash((op.name, dtype))) % 2**32)
    samples = list(op.samples(dtype, rng))
    assert samples, f"{op.name} has no samples for {dtype}"
    fns: dict[int, Any] = {}
    for args in samples:
        what = f"{op.name}[{dtype}] on {[list(a.shape) for a in args]}"
        f = fns.setdefault(len(args), _jit(op.ts_fn, len(args)))
        targs = [_t(a) for a in args]
        want = op.torch_fn(*targs)
        got = f(*targs)
        _close(got, want, dtype, op.rtol.get(dtype), what)
        if op.signed_zeros:
            _same_zero_signs(got, want, what)
        got_np = f(*args)
        assert isinstance(got_np, np.ndarray), f"{what}: numpy inputs gave {type(got_np).__name__}"
        same = convert.to_numpy(got)
        assert got_np.dtype == same.dtype and got_np.shape == tuple(want.shape), what
        assert np.ascontiguousarray(got_np).tobytes() == same.tobytes(), f"{what}: numpy != torch"
        if dtype == "float32":  # float64 reference
            want64 = op.torch_fn(*[t.double() if t.is_floating_point() else t for t in targs])
            got64 = got.to(want64.dtype)
            _close(got64, want64, "float64", op.rtol.get("float32", 5e-6), what + " vs float64")
    return len(samples)


@pytest.mark.parametrize("op", OPS, ids=_IDS)
def test_op_matches_torch(op: OpInfo) -> None:
    n = 0
    for dtype in op.dtypes:
        n += _check_op(op, dtype)
    assert n >= len(op.dtypes)


def _grad_cases() -> list[OpInfo]:
    return [op for op in OPS if op.grad]


@pytest.mark.parametrize("op", _grad_cases(), ids=[op.name for op in _grad_cases()])
def test_grad_matches_torch_autograd(op: OpInfo) -> None:
    rng = np.random.default_rng(7)
    gen = op.grad_samples or finite_f64(op.samples)
    cases = list(gen(rng))[:4]
    assert cases, f"{op.name}: no finite float64 samples"
    for args in cases:
        n = len(args)
        targs = [_t(a).requires_grad_(True) for a in args]
        out = op.torch_fn(*targs)
        w = rng.uniform(-1, 1, size=tuple(out.shape))
        want = torch.autograd.grad((out * _t(w)).sum(), targs)
        params = ", ".join(f"a{i}" for i in range(n))
        loss = eval(  # noqa: S307
            f"lambda {params}, w: ts.sum(fn({params}) * w)", {"fn": op.ts_fn, "ts": ts}
        )
        grads = ts.grad(ts.jit(loss), argnums=tuple(range(n)))(*args, w)
        for i, (g, t) in enumerate(zip(grads, want)):
            np.testing.assert_allclose(
                np.asarray(g), t.numpy(), rtol=1e-9, atol=1e-10,
                err_msg=f"{op.name}: gradient of argument {i} on {[list(a.shape) for a in args]}",
            )


def test_special_values_reach_every_float_op() -> None:
    rng = np.random.default_rng(0)
    x = with_specials(make(rng, (3, 4), "float32"))
    assert np.isnan(x).any() and np.isinf(x).any() and np.signbit(x[x == 0]).any()
