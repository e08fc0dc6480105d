"""Every Graph IR op, traced through ``@ts.jit`` and run on the numpy reference
interpreter, against torch in float64 on random inputs (odd shapes included)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tessera as ts
from tessera.ir.attrs import tensor_type
from tessera.numerics.random import randn_array
from tessera.runtime.graph_interpreter import run_function

RNG = np.random.default_rng(1234)


def rnd(*shape: int, dtype: Any = np.float32, low: float | None = None) -> np.ndarray:
    x = RNG.standard_normal(shape)
    if low is not None:
        x = np.abs(x) + low
    return x.astype(dtype)


def t64(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x).astype(np.float64))


@dataclass
class Case:
    id: str
    fn: Callable[..., Any]
    ref: Callable[..., Any]
    inputs: Callable[[], list[np.ndarray]]
    rtol: float = 1e-5
    atol: float = 1e-6


def _unary(name: str, tref: Callable[[torch.Tensor], torch.Tensor], low: float | None = None):
    return [
        Case(
            f"{name}-{dt.__name__}",
            lambda x, n=name: getattr(ts, n)(x),
            lambda x: tref(t64(x)),
            lambda dt=dt: [rnd(3, 5, dtype=dt, low=low)],
            *((1e-5, 1e-6) if dt is np.float32 else (1e-12, 1e-13)),
        )
        for dt in (np.float32, np.float64)
    ]


def _binary(name: str, tref: Callable[..., torch.Tensor], low: float | None = None):
    return [
        Case(
            f"{name}-{dt.__name__}",
            lambda a, b, n=name: getattr(ts, n)(a, b),
            lambda a, b: tref(t64(a), t64(b)),
            lambda dt=dt: [rnd(3, 5, dtype=dt, low=low), rnd(5, dtype=dt, low=low)],
            *((1e-5, 1e-6) if dt is np.float32 else (1e-12, 1e-13)),
        )
        for dt in (np.float32, np.float64)
    ]


def _csr_dense(ip: np.ndarray, ix: np.ndarray, v: np.ndarray, shape: tuple[int, int]):
    dense = torch.zeros(shape, dtype=torch.float64)
    for r in range(shape[0]):
        for j in range(ip[r], ip[r + 1]):
            dense[r, ix[j]] += float(v[j])
    return dense


def _gelu_ref(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


CASES: list[Case] = [
    *_unary("neg", torch.neg),
    *_unary("abs", torch.abs),
    *_unary("exp", torch.exp),
    *_unary("log", torch.log, low=0.1),
    *_unary("sqrt", torch.sqrt, low=0.1),
    *_unary("rsqrt", torch.rsqrt, low=0.1),
    *_unary("tanh", torch.tanh),
    *_unary("relu", torch.relu),
    *_unary("gelu", _gelu_ref),
    *_unary("silu", F.silu),
    *_unary("sigmoid", torch.sigmoid),
    *_unary("round", torch.round),
    *_binary("add", torch.add),
    *_binary("sub", torch.sub),
    *_binary("mul", torch.mul),
    *_binary("div", torch.div, low=0.5),
    *_binary("pow", torch.pow, low=0.5),
    *_binary("maximum", torch.maximum),
    *_binary("minimum", torch.minimum),
    *[
        Case(
            f"cmp-{name}",
            lambda a, b, n=name: getattr(ts, n)(a, b),
            lambda a, b, f=f: f(t64(a), t64(b)),
            lambda: [np.round(rnd(3, 5)), np.round(rnd(5))],
        )
        for name, f in [
            ("lt", torch.lt), ("le", torch.le), ("gt", torch.gt),
            ("ge", torch.ge), ("eq", torch.eq), ("ne", torch.ne),
        ]
    ],
    Case(
        "operators",
        lambda a, b: (-a + 2.0 * b - a / 3.0) ** 2 * (a > b).astype(ts.f32) + 1.0 - b,
        lambda a, b: (-t64(a) + 2.0 * t64(b) - t64(a) / 3.0) ** 2
        * (t64(a) > t64(b)).double()
        + 1.0
        - t64(b),
        lambda: [rnd(4, 3), rnd(3)],
    ),
    Case(
        "where",
        lambda c, a, b: ts.where(c > 0.0, a, b),
        lambda c, a, b: torch.where(t64(c) > 0, t64(a), t64(b)),
        lambda: [rnd(3, 1), rnd(3, 5), rnd(5)],
    ),
    Case("cast-bf16", lambda x: ts.cast(x, ts.bf16),
         lambda x: torch.from_numpy(x).to(torch.bfloat16).double(),
         lambda: [rnd(3, 7)], 0, 0),
    Case("cast-f16", lambda x: ts.cast(x, ts.f16),
         lambda x: torch.from_numpy(x).to(torch.float16).double(),
         lambda: [rnd(3, 7)], 0, 0),
    Case("cast-f32", lambda x: ts.cast(x, ts.f32),
         lambda x: torch.from_numpy(x).to(torch.float32).double(),
         lambda: [rnd(5, 3, dtype=np.float64)], 0, 0),
    Case("cast-fp8", lambda x: ts.cast(x, ts.fp8_e4m3),
         lambda x: torch.from_numpy(x).to(torch.float8_e4m3fn).double(),
         lambda: [rnd(3, 7)], 0, 0),
    *[
        Case(
            f"{name}-axis{axis}-keep{int(keep)}",
            lambda x, n=name, a=axis, k=keep: getattr(ts, n)(x, axis=a, keepdims=k),
            lambda x, f=f, a=axis, k=keep: f(t64(x), a, k),
            lambda: [rnd(3, 5, 7)],
        )
        for name, f in [
            ("sum", lambda x, a, k: torch.sum(x, dim=a, keepdim=k) if a is not None else x.sum()),
            ("mean", lambda x, a, k: torch.mean(x, dim=a, keepdim=k) if a is not None else x.mean()),
            ("max", lambda x, a, k: torch.amax(x, dim=a, keepdim=k) if a is not None else x.max()),
            ("min", lambda x, a, k: torch.amin(x, dim=a, keepdim=k) if a is not None else x.min()),
        ]
        for axis, keep in [(-1, True), ((0, 2), False), (None, False)]
    ],
    Case("softmax-last", lambda x: ts.softmax(x), lambda x: torch.softmax(t64(x), -1),
         lambda: [rnd(3, 7)]),
    Case("softmax-axis0", lambda x: ts.softmax(x, axis=0), lambda x: torch.softmax(t64(x), 0),
         lambda: [rnd(5, 3)]),
    Case("layernorm", lambda x, w, b: ts.layernorm(x, w, b),
         lambda x, w, b: F.layer_norm(t64(x), (x.shape[-1],), t64(w), t64(b), 1e-5),
         lambda: [rnd(2, 3, 7), rnd(7), rnd(7)], 1e-4, 1e-5),
    Case("layernorm-plain", lambda x: ts.layernorm_safe(x),
         lambda x: F.layer_norm(t64(x), (x.shape[-1],), eps=1e-5),
         lambda: [rnd(3, 9)], 1e-4, 1e-5),
    Case("rmsnorm", lambda x, w: ts.rmsnorm(x, w),
         lambda x, w: F.rms_norm(t64(x), (x.shape[-1],), t64(w), 1e-6),
         lambda: [rnd(3, 7), rnd(7)], 1e-4, 1e-5),
    Case("rmsnorm-safe", lambda x: ts.rmsnorm_safe(x),
         lambda x: F.rms_norm(t64(x), (x.shape[-1],), eps=1e-6),
         lambda: [rnd(5, 3)], 1e-4, 1e-5),
    Case("matmul", lambda a, b: a @ b, lambda a, b: t64(a) @ t64(b),
         lambda: [rnd(3, 5), rnd(5, 7)]),
    Case("matmul-batched", lambda a, b: ts.matmul(a, b), lambda a, b: t64(a) @ t64(b),
         lambda: [rnd(2, 3, 5), rnd(5, 4)]),
    Case("matmul-transposed", lambda a, b: ts.matmul(a, b, transpose_a=True, transpose_b=True),
         lambda a, b: t64(a).mT @ t64(b).mT, lambda: [rnd(5, 3), rnd(7, 5)]),
    Case("gemm-f64", lambda a, b: ts.gemm(a, b), lambda a, b: t64(a) @ t64(b),
         lambda: [rnd(3, 5, dtype=np.float64), rnd(5, 2, dtype=np.float64)], 1e-12, 1e-13),
    Case("gemm-bf16", lambda a, b: ts.gemm(a, b),
         lambda a, b: (t64(a) @ t64(b)).to(torch.bfloat16).double(),
         lambda: [rnd(3, 5, dtype=ml_dtypes.bfloat16), rnd(5, 2, dtype=ml_dtypes.bfloat16)],
         1e-2, 1e-2),
    Case("flash_attention", lambda q, k, v: ts.flash_attention(q, k, v),
         lambda q, k, v: F.scaled_dot_product_attention(t64(q), t64(k), t64(v)),
         lambda: [rnd(2, 5, 3), rnd(2, 7, 3), rnd(2, 7, 4)]),
    Case("flash_attention-causal", lambda q, k, v: ts.flash_attention(q, k, v, causal=True, scale=0.3),
         lambda q, k, v: F.scaled_dot_product_attention(
             t64(q), t64(k), t64(v), is_causal=True, scale=0.3),
         lambda: [rnd(5, 3), rnd(5, 3), rnd(5, 2)]),
    Case("conv2d", lambda x, w, b: ts.conv2d(x, w, b, stride=(2, 1), padding=1),
         lambda x, w, b: F.conv2d(t64(x), t64(w), t64(b), stride=(2, 1), padding=1),
         lambda: [rnd(2, 3, 7, 6), rnd(4, 3, 3, 2), rnd(4)], 1e-5, 1e-5),
    Case("mse", lambda a, b: ts.mse(a, b), lambda a, b: F.mse_loss(t64(a), t64(b)),
         lambda: [rnd(3, 5), rnd(3, 5)]),
    Case("transpose", lambda x: ts.transpose(x, (2, 0, 1)), lambda x: t64(x).permute(2, 0, 1),
         lambda: [rnd(2, 3, 5)], 0, 0),
    Case("transpose-T", lambda x: x.T, lambda x: t64(x).mT, lambda: [rnd(2, 3, 5)], 0, 0),
    Case("reshape", lambda x: ts.reshape(x, (5, -1)), lambda x: t64(x).reshape(5, -1),
         lambda: [rnd(3, 5)], 0, 0),
    Case("broadcast_to", lambda x: ts.broadcast_to(x, (2, 3, 5)),
         lambda x: t64(x).broadcast_to(2, 3, 5), lambda: [rnd(3, 1)], 0, 0),
    Case("slice", lambda x: ts.slice(x, (1, 0), (3, 5), (1, 2)), lambda x: t64(x)[1:3, 0:5:2],
         lambda: [rnd(3, 5)], 0, 0),
    Case("getitem", lambda x: x[1, ..., 1::2], lambda x: t64(x)[1, ..., 1::2],
         lambda: [rnd(3, 4, 5)], 0, 0),
    Case("concat", lambda a, b: ts.concat([a, b, a], axis=1),
         lambda a, b: torch.cat([t64(a), t64(b), t64(a)], 1),
         lambda: [rnd(3, 2), rnd(3, 5)], 0, 0),
    Case("split_qkv", lambda x: ts.split_qkv(x, heads=2),
         lambda x: tuple(
             t64(x)[..., i * 4:(i + 1) * 4].reshape(3, 5, 2, 2).transpose(1, 2)
             for i in range(3)),
         lambda: [rnd(3, 5, 12)], 0, 0),
    Case("constant-array", lambda x: x + np.arange(5, dtype=np.float32),
         lambda x: t64(x) + torch.arange(5).double(), lambda: [rnd(3, 5)]),
    Case("fft", lambda x: ts.fft(x), lambda x: torch.fft.fft(t64(x)),
         lambda: [rnd(3, 7)], 1e-5, 1e-5),
    Case("ifft", lambda x: ts.ifft(x), lambda x: torch.fft.ifft(t64(x)),
         lambda: [rnd(3, 5, dtype=np.float64)], 1e-12, 1e-12),
    Case("fft2d", lambda x: ts.fft2d(x), lambda x: torch.fft.fft2(t64(x)),
         lambda: [rnd(2, 3, 5)], 1e-5, 1e-5),
    Case("cholesky", lambda a: ts.cholesky(a), lambda a: torch.linalg.cholesky(t64(a)),
         lambda: [(lambda m: (m @ m.T + 5 * np.eye(5)).astype(np.float32))(rnd(5, 5))],
         1e-5, 1e-5),
    Case("svd", lambda a: ts.svd(a)[1], lambda a: torch.linalg.svdvals(t64(a)),
         lambda: [rnd(5, 3)], 1e-5, 1e-5),
    Case("svd-reconstruct",
         lambda a: (lambda u, s, vh: (u * ts.reshape(s, (1, 3))) @ vh)(*ts.svd(a)),
         lambda a: t64(a), lambda: [rnd(5, 3)], 1e-5, 1e-5),
    Case("spmm",
         lambda ip, ix, v, d: ts.spmm(ip, ix, v, d, sparse_shape=(3, 4)),
         lambda ip, ix, v, d: _csr_dense(ip, ix, v, (3, 4)) @ t64(d),
         lambda: [np.array([0, 2, 2, 5], np.int32), np.array([0, 3, 1, 2, 3], np.int32),
                  rnd(5), rnd(4, 6)]),
    Case("all_reduce", lambda x: ts.all_reduce(x, op="sum", axis="dp"), lambda x: t64(x),
         lambda: [rnd(3, 5)], 0, 0),
    Case("all_gather", lambda x: ts.all_gather(x, axis="tp"), lambda x: t64(x),
         lambda: [rnd(3, 5)], 0, 0),
    Case("reduce_scatter", lambda x: ts.reduce_scatter(x, axis="tp", dim=0), lambda x: t64(x),
         lambda: [rnd(3, 5)], 0, 0),
    Case("all_to_all", lambda x: ts.all_to_all(x, axis="tp", split_dim=1, concat_dim=0),
         lambda x: t64(x), lambda: [rnd(3, 5)], 0, 0),
    Case("all_slice", lambda x: ts.all_slice(x, axis="tp"), lambda x: t64(x),
         lambda: [rnd(3, 5)], 0, 0),
]


def _compare(got: Any, want: Any, case: Case) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g_, w_ in zip(got, want):
            _compare(g_, w_, case)
        return
    w = want.resolve_conj().numpy()
    g_ = np.asarray(got)
    assert g_.shape == w.shape
    if w.dtype == np.bool_:
        np.testing.assert_array_equal(g_, w)
        return
    g64 = g_.astype(np.complex128 if np.iscomplexobj(g_) else np.float64)
    np.testing.assert_allclose(g64, w, rtol=case.rtol, atol=case.atol)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_against_torch(case: Case) -> None:
    inputs = case.inputs()
    assert any(np.any(np.asarray(x, dtype=np.float64) != 0) for x in inputs)
    fn = ts.jit(case.fn)
    with ts.dist.use_mesh({"dp": 1, "tp": 1}):  # the collective cases: one-rank axes
        got = fn(*inputs)
    _compare(got, case.ref(*inputs), case)


def test_elementwise_results_are_rounded_to_storage() -> None:
    a = rnd(4, 3, dtype=ml_dtypes.bfloat16)
    b = rnd(4, 3, dtype=ml_dtypes.bfloat16)
    got = ts.jit(lambda x, y: ts.exp(x) * y)(a, b)
    assert got.dtype == np.dtype(ml_dtypes.bfloat16)
    e = torch.exp(t64(a).float()).to(torch.bfloat16).float()
    want = (e * t64(b).float()).to(torch.bfloat16).double().numpy()
    np.testing.assert_array_equal(got.astype(np.float64), want)


FP8_ACC = ts.fp8_e4m3 @ ts.accum(ts.f32)
A_MK = ts.Tensor["M", "K", FP8_ACC]
B_KN = ts.Tensor["K", "N", FP8_ACC]


def test_mixed_precision_matmul_accumulates_in_f32() -> None:
    @ts.jit
    def mm(a: A_MK, b: B_KN):
        return ts.gemm(a, b)

    a = rnd(3, 9).astype(ml_dtypes.float8_e4m3fn)
    b = rnd(9, 5).astype(ml_dtypes.float8_e4m3fn)
    got = mm(a, b)
    assert got.dtype == np.float32
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_randn_deterministic_from_seed_and_offset() -> None:
    a = ts.jit(lambda: ts.randn((40, 50), seed=3, offset=1))()
    b = ts.jit(lambda: ts.randn((40, 50), seed=3, offset=1))()
    c = ts.jit(lambda: ts.randn((40, 50), seed=3, offset=2))()
    d = ts.jit(lambda: ts.randn((40, 50), seed=4, offset=1))()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c) and not np.array_equal(a, d)
    assert abs(float(a.mean())) < 0.1 and abs(float(a.std()) - 1) < 0.1
    want = randn_array((40, 50), seed=3, offset=1).astype(np.float32)
    np.testing.assert_array_equal(a, want)


def test_poisson_deterministic_and_mean() -> None:
    lam = np.full((30, 40), 3.5, np.float32)
    f = ts.jit(lambda x: ts.poisson(x, seed=9, offset=0))
    a, b = f(lam), f(lam)
    np.testing.assert_array_equal(a, b)
    assert abs(float(a.mean()) - 3.5) < 0.2
    assert np.all(a == np.round(a))


def test_two_randn_calls_without_offset_differ() -> None:
    x, y = ts.jit(lambda: (ts.randn((8, 8)), ts.randn((8, 8))))()
    assert not np.array_equal(x, y)


def test_collective_on_larger_group_needs_distributed_executor() -> None:
    f = ts.jit(lambda x: ts.all_reduce(x, op="sum", axis="dp"), mesh={"dp": 2})
    with pytest.raises(NotImplementedError, match="distributed executor"):
        f(rnd(3, 4))
    g_ = ts.jit(lambda x: ts.all_gather(x, axis="tp"), mesh={"tp": 4})
    assert "tensor<3x16xf32>" in g_.inspect_ir("traced") if g_.trace(rnd(3, 4)) else False


def test_run_function_checks_arguments() -> None:
    from tessera.frontend.tracing import Trace

    tr = Trace("f")
    x = tr.add_argument(tensor_type((2, 3), ts.f32))
    module = tr.finish([x])
    out = run_function(module, "f", [rnd(2, 3)])
    assert out[0].shape == (2, 3)
    with pytest.raises(ts.ShapeError, match=r"argument 0 has shape \[3, 2\]"):
        run_function(module, "f", [rnd(3, 2)])
    with pytest.raises(ts.TesseraTypeError, match="dtype float64"):
        run_function(module, "f", [rnd(2, 3, dtype=np.float64)])
    with pytest.raises(KeyError, match="no function 'g'"):
        run_function(module, "g", [rnd(2, 3)])


def test_torch_in_torch_out_bf16() -> None:
    f = ts.jit(lambda x, y: ts.relu(x) + y)
    x = torch.randn(3, 5, dtype=torch.float64).to(torch.bfloat16)
    y = torch.randn(5, dtype=torch.float64).to(torch.bfloat16)
    got = f(x, y)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    want = (torch.relu(x.float()) + y.float()).to(torch.bfloat16)
    assert torch.equal(got, want)


def test_lambda_names_become_valid_symbols() -> None:
    f = ts.jit(lambda x: x + 1.0)
    spec = f.specialize(rnd(2, 2))
    assert "func.func @lambda(" in spec.ir("graph").__str__()
    assert ".visible .entry lambda_" in spec.ir("ptx")


