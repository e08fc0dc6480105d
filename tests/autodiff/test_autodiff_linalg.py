"""Adjoint rules of conv2d, fft/fft2d, cholesky, svd and spmm (and of the ops
their adjoints are written with) against torch in float64.

Each case is a small Graph IR function on f64 (or complex128) tensors. The
``autodiff`` pass builds its VJP; the numpy interpreter runs it with random
cotangents, and the gradients must equal ``torch.autograd.grad`` (relative
1e-8) and agree with central finite differences of the forward function along
random directions. The forward-mode function must equal ``torch.func.jvp``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import VerifyException

from tessera.passes.autodiff import AutodiffPass
from tessera.runtime.graph_interpreter import run_function
from tests.autodiff.test_autodiff_rules import parse


def ty(shape: Sequence[int], elem: str = "f64") -> str:
    return f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}{elem}>"


C64 = "complex<f64>"
Gen = Callable[[np.random.Generator], list[np.ndarray]]


@dataclass
class LCase:
    """A function ``@f`` (``mlir``) of ``gen``'s arrays, differentiated w.r.t. ``wrt``.

    ``ref`` is the same function in torch; ``sym`` marks arguments read as
    symmetric matrices (cholesky), whose directions and tangents are symmetric.
    """

    name: str
    mlir: str
    gen: Gen
    ref: Callable[..., tuple[torch.Tensor, ...]]
    wrt: tuple[int, ...]
    sym: tuple[int, ...] = ()
    fd_step: float = 1e-6


def func_text(args: Sequence[tuple[str, str]], body: Sequence[str], results: Sequence[tuple[str, str]]) -> str:
    params = ", ".join(f"%{n}: {t}" for n, t in args)
    rtypes = ", ".join(t for _, t in results)
    ops = "\n".join(f"  {line}" for line in body)
    ret = f"  func.return {', '.join('%' + n for n, _ in results)} : {rtypes}"
    return f"func.func @f({params}) -> ({rtypes}) {{\n{ops}\n{ret}\n}}\n"


def randn(*shapes: Sequence[int]) -> Gen:
    return lambda rng: [rng.standard_normal(s) for s in shapes]


# --------------------------------------------------------------------------- conv2d


def conv_case(name, xs, ws, stride, pad, bias: bool, dil=(1, 1), groups: int = 1) -> LCase:
    n, c, h, w = xs
    o, _, kh, kw = ws
    ho = (h + 2 * pad[0] - (kh - 1) * dil[0] - 1) // stride[0] + 1
    wo = (w + 2 * pad[1] - (kw - 1) * dil[1] - 1) // stride[1] + 1
    ys = (n, o, ho, wo)
    args = [("x", ty(xs)), ("w", ty(ws))] + ([("b", ty((o,)))] if bias else [])
    b = f" bias %b : {ty((o,))}" if bias else ""
    extra = (f" dilation = {list(dil)}" if tuple(dil) != (1, 1) else "") + (
        f" groups = {groups}" if groups != 1 else "")
    body = [
        f"%y = tgraph.conv2d %x, %w{b} stride = {list(stride)} padding = {list(pad)}{extra} "
        f": {ty(xs)}, {ty(ws)} -> {ty(ys)}"
    ]
    shapes = [xs, ws] + ([(o,)] if bias else [])
    return LCase(
        name,
        func_text(args, body, [("y", ty(ys))]),
        randn(*shapes),
        lambda *t: (F.conv2d(*t, stride=tuple(stride), padding=tuple(pad), dilation=tuple(dil),
                             groups=groups),),
        tuple(range(len(shapes))),
    )


CONV = [
    conv_case("conv2d_stride2_pad_bias", (2, 3, 8, 7), (4, 3, 3, 2), (2, 2), (1, 0), True),
    conv_case("conv2d_plain", (1, 2, 5, 6), (3, 2, 2, 3), (1, 1), (0, 0), False),
    conv_case("conv2d_stride3x1_pad2x1", (2, 1, 6, 5), (2, 1, 3, 3), (3, 1), (2, 1), True),
    conv_case("conv2d_1x1_kernel_stride2", (1, 3, 5, 4), (2, 3, 1, 1), (2, 2), (1, 1), False),
    # windows that do not overlap: the weight gradient is a GEMM over the input's patches
    conv_case("conv2d_patches", (2, 3, 8, 12), (4, 3, 4, 4), (4, 4), (0, 0), True),
    conv_case("conv2d_patches_gaps_pad", (1, 2, 7, 9), (3, 2, 2, 3), (3, 4), (1, 1), False),
    # grouped: the input gradient a grouped transposed convolution, the weight gradient
    # per-image partials in N*G groups summed over N
    conv_case("conv2d_groups2_stride2", (2, 4, 7, 6), (6, 2, 3, 2), (2, 1), (1, 0), True,
              groups=2),
    conv_case("conv2d_depthwise_dilated", (2, 3, 8, 7), (3, 1, 3, 3), (1, 2), (2, 1), False,
              dil=(2, 1), groups=3),
    conv_case("conv2d_depthwise_multiplier", (1, 2, 6, 5), (4, 1, 2, 2), (2, 2), (0, 1), True,
              groups=2),
]


# --------------------------------------------------------------------------- fft


def fft_case(name: str, shape: Sequence[int], op: str, inverse: bool) -> LCase:
    inv = " inverse" if inverse else ""
    body = [
        f"%z = tgraph.{op} %x{inv} : ({ty(shape)}) -> {ty(shape, C64)}",
        f"%re = tgraph.real %z : ({ty(shape, C64)}) -> {ty(shape)}",
        f"%im = tgraph.imag %z : ({ty(shape, C64)}) -> {ty(shape)}",
        f"%p = tgraph.mul %re, %im : ({ty(shape)}, {ty(shape)}) -> {ty(shape)}",
    ]
    tfn = {
        ("fft", False): torch.fft.fft,
        ("fft", True): torch.fft.ifft,
        ("fft2d", False): torch.fft.fft2,
        ("fft2d", True): torch.fft.ifft2,
    }[(op, inverse)]

    def ref(x):
        z = tfn(x)
        return z, z.real * z.imag

    return LCase(
        name,
        func_text([("x", ty(shape))], body, [("z", ty(shape, C64)), ("p", ty(shape))]),
        randn(shape),
        ref,
        (0,),
    )


def complex_fft_case(name: str, shape: Sequence[int], op: str, inverse: bool) -> LCase:
    """A complex input built from two real ones, and complex products and quotients."""
    inv = " inverse" if inverse else ""
    t, c = ty(shape), ty(shape, C64)
    body = [
        f"%x = tgraph.complex %a, %b : ({t}, {t}) -> {c}",
        f"%z = tgraph.{op} %x{inv} : ({c}) -> {c}",
        f"%zz = tgraph.mul %z, %x : ({c}, {c}) -> {c}",
        f"%q = tgraph.div %zz, %w : ({c}, {c}) -> {c}",
        f"%r = tgraph.real %q : ({c}) -> {t}",
    ]
    tfn = {("fft", False): torch.fft.fft, ("fft", True): torch.fft.ifft,
           ("fft2d", False): torch.fft.fft2, ("fft2d", True): torch.fft.ifft2}[(op, inverse)]

    def gen(rng):
        w = rng.standard_normal(shape) + 1j * rng.standard_normal(shape) + 2.0
        return [rng.standard_normal(shape), rng.standard_normal(shape), w]

    def ref(a, b, w):
        x = torch.complex(a, b)
        z = tfn(x)
        q = z * x / w
        return z, q.real

    return LCase(
        name,
        func_text([("a", t), ("b", t), ("w", c)], body, [("z", c), ("r", t)]),
        gen,
        ref,
        (0, 1, 2),
    )


FFT = [
    fft_case("fft_last_dim", (3, 8), "fft", False),
    fft_case("ifft_last_dim", (2, 5), "fft", True),
    fft_case("fft2d", (2, 4, 6), "fft2d", False),
    fft_case("ifft2d", (3, 5), "fft2d", True),
    complex_fft_case("fft_complex_input", (2, 6), "fft", False),
    complex_fft_case("ifft2d_complex_input", (3, 4), "fft2d", True),
]


# --------------------------------------------------------------------------- cholesky / triangular solve


def spd(shape: Sequence[int]) -> Gen:
    def gen(rng):
        *b, n, _ = shape
        x = rng.standard_normal((*b, n, n))
        return [x @ np.swapaxes(x, -1, -2) + n * np.eye(n)]

    return gen


def chol_case(name: str, shape: Sequence[int]) -> LCase:
    body = [
        f"%l = tgraph.cholesky %a : ({ty(shape)}) -> {ty(shape)}",
        f"%e = tgraph.exp %l : ({ty(shape)}) -> {ty(shape)}",
    ]
    return LCase(
        name,
        func_text([("a", ty(shape))], body, [("e", ty(shape))]),
        spd(shape),
        lambda a: (torch.exp(torch.linalg.cholesky(a)),),
        (0,),
        sym=(0,),
    )


def trisolve_case(name: str, an: Sequence[int], bn: Sequence[int], upper: bool, trans: bool) -> LCase:
    flags = (" upper" if upper else "") + (" transpose_a" if trans else "")
    body = [f"%x = tgraph.triangular_solve %a, %b{flags} : ({ty(an)}, {ty(bn)}) -> {ty(bn)}"]

    def gen(rng):
        n = an[-1]
        return [rng.standard_normal(an) + 3.0 * np.eye(n), rng.standard_normal(bn)]

    def ref(a, b):
        t = torch.triu(a) if upper else torch.tril(a)
        if trans:
            return (torch.linalg.solve_triangular(t.mT, b, upper=not upper),)
        return (torch.linalg.solve_triangular(t, b, upper=upper),)

    return LCase(name, func_text([("a", ty(an)), ("b", ty(bn))], body, [("x", ty(bn))]), gen, ref, (0, 1))


LINALG = [
    chol_case("cholesky_4x4", (4, 4)),
    chol_case("cholesky_batched", (2, 3, 3)),
    trisolve_case("triangular_solve_lower", (4, 4), (4, 2), False, False),
    trisolve_case("triangular_solve_upper_transposed", (2, 3, 3), (2, 3, 4), True, True),
    trisolve_case("triangular_solve_lower_transposed", (3, 3), (3, 1), False, True),
]


# --------------------------------------------------------------------------- svd


def svd_case(name: str, shape: Sequence[int], parts: str = "usv") -> LCase:
    """Gauge-invariant functions of (U, S, Vh): ``U∘U``, ``S``, ``Vh∘Vh`` and
    ``U diag(tanh S) Vh``, so torch's and numpy's sign choices agree."""
    *b, m, n = shape
    k = min(m, n)
    us, ss, vs = (*b, m, k), (*b, k), (*b, k, n)
    body = [f"%u, %s, %vh = tgraph.svd %a : ({ty(shape)}) -> ({ty(us)}, {ty(ss)}, {ty(vs)})"]
    results = []
    if "u" in parts:
        body.append(f"%uu = tgraph.mul %u, %u : ({ty(us)}, {ty(us)}) -> {ty(us)}")
        results.append(("uu", ty(us)))
    if "s" in parts:
        body.append(f"%s2 = tgraph.mul %s, %s : ({ty(ss)}, {ty(ss)}) -> {ty(ss)}")
        results.append(("s2", ty(ss)))
    if "v" in parts:
        body.append(f"%vv = tgraph.mul %vh, %vh : ({ty(vs)}, {ty(vs)}) -> {ty(vs)}")
        results.append(("vv", ty(vs)))
    if "w" in parts:
        body += [
            f"%ts = tgraph.tanh %s : ({ty(ss)}) -> {ty(ss)}",
            f"%tr = tgraph.reshape %ts : ({ty(ss)}) -> {ty((*b, 1, k))}",
            f"%us = tgraph.mul %u, %tr : ({ty(us)}, {ty((*b, 1, k))}) -> {ty(us)}",
            f"%w = tgraph.matmul %us, %vh : ({ty(us)}, {ty(vs)}) -> {ty(shape)}",
        ]
        results.append(("w", ty(shape)))

    def ref(a):
        u, s, vh = torch.linalg.svd(a, full_matrices=False)
        out = []
        if "u" in parts:
            out.append(u * u)
        if "s" in parts:
            out.append(s * s)
        if "v" in parts:
            out.append(vh * vh)
        if "w" in parts:
            out.append((u * torch.tanh(s).unsqueeze(-2)) @ vh)
        return tuple(out)

    return LCase(name, func_text([("a", ty(shape))], body, results), randn(shape), ref, (0,))


SVD = [
    svd_case("svd_tall", (5, 3), "usvw"),
    svd_case("svd_wide", (3, 5), "usvw"),
    svd_case("svd_batched_square", (2, 4, 4), "usvw"),
    svd_case("svd_tall_u_only", (4, 2), "u"),
    svd_case("svd_wide_v_only", (2, 4), "v"),
    svd_case("svd_s_only", (3, 4), "s"),
]


# --------------------------------------------------------------------------- spmm


def csr_case(name: str, indptr: Sequence[int], indices: Sequence[int], k: int, n: int,
             op: str = "spmm") -> LCase:
    m = len(indptr) - 1
    nnz = len(indices)
    ip, ix = ty((m + 1,), "i32"), ty((nnz,), "i32")
    ss = f"sparse_shape = [{m}, {k}]"
    rows = np.repeat(np.arange(m), np.diff(indptr))
    if op == "spmm":
        shapes, out = [(nnz,), (k, n)], (m, n)
        names = ("v", "d")
    elif op == "spmm_transpose":
        shapes, out = [(nnz,), (m, n)], (k, n)
        names = ("v", "d")
    else:  # sddmm
        shapes, out = [(m, n), (k, n)], (nnz,)
        names = ("l", "r")
    args = [("ip", ip), ("ix", ix)] + [(nm, ty(s)) for nm, s in zip(names, shapes)]
    body = [
        f"%y = tgraph.{op} %ip, %ix, %{names[0]}, %{names[1]} {ss} : "
        f"({ip}, {ix}, {ty(shapes[0])}, {ty(shapes[1])}) -> {ty(out)}"
    ]

    def gen(rng):
        return [np.asarray(indptr, np.int32), np.asarray(indices, np.int32),
                rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])]

    def dense_a(v):
        a = torch.zeros(m, k, dtype=torch.float64)
        return a.index_put((torch.as_tensor(rows), torch.as_tensor(np.asarray(indices))), v,
                           accumulate=True)

    def ref(_ip, _ix, p, q):
        if op == "spmm":
            return (dense_a(p) @ q,)
        if op == "spmm_transpose":
            return (dense_a(p).T @ q,)
        return ((p[torch.as_tensor(rows)] * q[torch.as_tensor(np.asarray(indices))]).sum(1),)

    return LCase(name, func_text(args, body, [("y", ty(out))]), gen, ref, (2, 3))


SPARSE = [
    csr_case("spmm_empty_rows", [0, 2, 2, 5, 5], [0, 3, 1, 2, 4], 5, 3),
    csr_case("spmm_empty_first_last_rows_duplicates", [0, 0, 3, 4, 4], [1, 1, 2, 0], 3, 2),
    csr_case("spmm_transpose", [0, 2, 2, 5], [0, 3, 1, 2, 3], 4, 2, "spmm_transpose"),
    csr_case("sddmm", [0, 1, 1, 4], [2, 0, 1, 2], 3, 4, "sddmm"),
]

CASES = CONV + FFT + LINALG + SVD + SPARSE


# --------------------------------------------------------------------------- harness


def build(case: LCase, **opts) -> ModuleOp:
    m = parse(case.mlir)
    AutodiffPass(wrt=case.wrt, **opts).apply(Context(), m)
    m.verify()
    return m


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().resolve_conj().numpy()


def assert_close(got: np.ndarray, want: np.ndarray | torch.Tensor, rtol: float, what: str) -> None:
    """Max-abs error relative to the largest entry of ``want`` (real or complex)."""
    if isinstance(want, torch.Tensor):
        want = _np(want)
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert np.iscomplexobj(got) == np.iscomplexobj(want), f"{what}: {got.dtype} vs {want.dtype}"
    scale = max(float(np.max(np.abs(want))), 1e-300) if want.size else 1.0
    err = float(np.max(np.abs(got - want))) / scale if want.size else 0.0
    assert err <= rtol, f"{what}: relative error {err:.3e} > {rtol:.0e}\n{got}\n{want}"


def _cotangent(rng: np.random.Generator, y: np.ndarray) -> np.ndarray:
    c = rng.standard_normal(y.shape)
    if np.iscomplexobj(y):
        c = c + 1j * rng.standard_normal(y.shape)
    return c


def _direction(rng: np.random.Generator, x: np.ndarray, sym: bool) -> np.ndarray:
    d = rng.standard_normal(x.shape)
    return (d + np.swapaxes(d, -1, -2)) / 2 if sym else d


def _torch_args(case: LCase, xs: list[np.ndarray]) -> list[torch.Tensor]:
    return [torch.tensor(x, requires_grad=i in case.wrt) for i, x in enumerate(xs)]


def _inner(a: np.ndarray, b: np.ndarray) -> float:
    """The real inner product ``Re <a, b>`` (torch's pairing of cotangents and tangents)."""
    return float(np.real(np.vdot(a, b)))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_vjp_matches_torch_and_finite_differences(case: LCase) -> None:
    rng = np.random.default_rng(7)
    xs = case.gen(rng)
    m = build(case)
    ys = run_function(m, "f", xs)
    cts = [_cotangent(rng, y) for y in ys]
    grads = run_function(m, "f_grad", [*xs, *cts])
    assert len(grads) == len(case.wrt)

    targs = _torch_args(case, xs)
    outs = case.ref(*targs)
    for y, t in zip(ys, outs):
        assert_close(y, t, 1e-10, f"{case.name}: forward value")
    want = torch.autograd.grad(outs, [targs[i] for i in case.wrt], [torch.tensor(c) for c in cts])
    for i, got, w in zip(case.wrt, grads, want):
        assert got.dtype == xs[i].dtype
        assert_close(got, w, 1e-8, f"{case.name}: d/d arg {i} vs torch")

    h = case.fd_step
    for i, got in zip(case.wrt, grads):
        d = _direction(rng, xs[i], i in case.sym)
        plus, minus = list(xs), list(xs)
        plus[i], minus[i] = xs[i] + h * d, xs[i] - h * d
        fp, fm = run_function(m, "f", plus), run_function(m, "f", minus)
        fd = sum(_inner(c, (a - b) / (2 * h)) for c, a, b in zip(cts, fp, fm))
        an = _inner(got, d)
        assert math.isclose(fd, an, rel_tol=1e-6, abs_tol=1e-8), (case.name, i, fd, an)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_jvp_matches_torch(case: LCase) -> None:
    rng = np.random.default_rng(11)
    xs = case.gen(rng)
    tangents = [_direction(rng, xs[i], i in case.sym) for i in case.wrt]
    tangents = [
        t + 1j * rng.standard_normal(t.shape) if np.iscomplexobj(xs[i]) else t
        for i, t in zip(case.wrt, tangents)
    ]
    m = build(case, mode="forward")
    res = run_function(m, "f_jvp", [*xs, *tangents])
    n_out = len(res) // 2
    ys, ts = res[:n_out], res[n_out:]

    def fn(*active):
        full = [torch.tensor(x) for x in xs]
        for i, v in zip(case.wrt, active):
            full[i] = v
        return case.ref(*full)

    prim = tuple(torch.tensor(xs[i]) for i in case.wrt)
    want_y, want_t = torch.func.jvp(fn, prim, tuple(torch.tensor(t) for t in tangents))
    for y, w in zip(ys, want_y):
        assert_close(y, w, 1e-10, f"{case.name}: primal")
    for t, w in zip(ts, want_t):
        assert_close(t, w, 1e-8, f"{case.name}: tangent")


# --------------------------------------------------------------------------- determinism


@pytest.mark.parametrize(
    "case", [CONV[0], FFT[4], LINALG[1], SVD[0], SPARSE[0]], ids=lambda c: c.name
)
def test_gradient_is_deterministic(case: LCase) -> None:
    m1, m2 = build(case), build(case)
    assert str(m1) == str(m2)
    rng = np.random.default_rng(3)
    xs = case.gen(rng)
    cts = [_cotangent(rng, y) for y in run_function(m1, "f", xs)]
    g1 = run_function(m1, "f_grad", [*xs, *cts])
    g2 = run_function(m2, "f_grad", [*xs, *cts])
    for a, b in zip(g1, g2):
        assert a.tobytes() == b.tobytes()


# --------------------------------------------------------------------------- support ops


SUPPORT_OPS = """
func.func @ops(%z: tensor<2x3xcomplex<f32>>, %a: tensor<2x3xf32>, %l: tensor<2x4x4xf64>, %b: tensor<2x4x3xf64>, %ip: tensor<3xi32>, %ix: tensor<3xi32>, %v: tensor<3xf32>, %d: tensor<2x5xf32>, %e: tensor<4x5xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xcomplex<f32>>, tensor<2x4x3xf64>, tensor<4x5xf32>, tensor<3xf32>) {
  %0 = tgraph.real %z : (tensor<2x3xcomplex<f32>>) -> tensor<2x3xf32>
  %1 = tgraph.imag %z : (tensor<2x3xcomplex<f32>>) -> tensor<2x3xf32>
  %2 = tgraph.complex %0, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xcomplex<f32>>
  %3 = tgraph.triangular_solve %l, %b upper transpose_a : (tensor<2x4x4xf64>, tensor<2x4x3xf64>) -> tensor<2x4x3xf64>
  %4 = tgraph.spmm_transpose %ip, %ix, %v, %d sparse_shape = [2, 4] : (tensor<3xi32>, tensor<3xi32>, tensor<3xf32>, tensor<2x5xf32>) -> tensor<4x5xf32>
  %5 = tgraph.sddmm %ip, %ix, %d, %e sparse_shape = [2, 4] : (tensor<3xi32>, tensor<3xi32>, tensor<2x5xf32>, tensor<4x5xf32>) -> tensor<3xf32>
  func.return %0, %1, %2, %3, %4, %5 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xcomplex<f32>>, tensor<2x4x3xf64>, tensor<4x5xf32>, tensor<3xf32>
}
"""


def test_support_ops_round_trip() -> None:
    text = str(parse(SUPPORT_OPS))
    assert "tgraph.triangular_solve %l, %b upper transpose_a :" in text
    assert "tgraph.sddmm %ip, %ix, %d, %e sparse_shape = [2, 4] :" in text
    assert str(parse(text)) == text


def test_support_ops_run_on_the_interpreter() -> None:
    rng = np.random.default_rng(5)
    z = (rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))).astype(np.complex64)
    a = rng.standard_normal((2, 3)).astype(np.float32)
    lo = rng.standard_normal((2, 4, 4)) + 4 * np.eye(4)
    b = rng.standard_normal((2, 4, 3))
    ip, ix = np.array([0, 1, 3], np.int32), np.array([2, 0, 3], np.int32)
    v = rng.standard_normal(3).astype(np.float32)
    d = rng.standard_normal((2, 5)).astype(np.float32)
    e = rng.standard_normal((4, 5)).astype(np.float32)
    re, im, c, x, st, sd = run_function(parse(SUPPORT_OPS), "ops", [z, a, lo, b, ip, ix, v, d, e])
    np.testing.assert_array_equal(re, z.real)
    np.testing.assert_array_equal(im, z.imag)
    np.testing.assert_array_equal(c, z.real + 1j * a)
    assert c.dtype == np.complex64
    np.testing.assert_allclose(np.swapaxes(np.triu(lo), -1, -2) @ x, b, rtol=1e-12, atol=1e-12)
    dense = np.zeros((2, 4), np.float32)
    dense[[0, 1, 1], ix] = v
    np.testing.assert_allclose(st, dense.T @ d, rtol=1e-5)
    np.testing.assert_allclose(sd, [d[0] @ e[2], d[1] @ e[0], d[1] @ e[3]], rtol=1e-5)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("tgraph.real %a : (tensor<2x3xf32>) -> tensor<2x3xf32>", "needs a complex operand"),
        ("tgraph.imag %z : (tensor<2x3xcomplex<f32>>) -> tensor<2x3xf64>", "must be f32"),
        ("tgraph.complex %a, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>",
         "result element type must be complex<f32>"),
        ("tgraph.complex %z, %z : (tensor<2x3xcomplex<f32>>, tensor<2x3xcomplex<f32>>) "
         "-> tensor<2x3xcomplex<f32>>", "needs floating-point parts"),
        ("tgraph.triangular_solve %b, %b : (tensor<2x4x3xf64>, tensor<2x4x3xf64>) "
         "-> tensor<2x4x3xf64>", "A must be square"),
        ("tgraph.triangular_solve %l, %l2 : (tensor<2x4x4xf64>, tensor<3x4x3xf64>) "
         "-> tensor<3x4x3xf64>", "batch dims differ"),
        ("tgraph.spmm_transpose %ip, %ix, %v, %e sparse_shape = [2, 4] : (tensor<3xi32>, "
         "tensor<3xi32>, tensor<3xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>",
         "dense operand has shape [4, 5], expected [2, N]"),
        ("tgraph.sddmm %ip, %ix, %d, %d sparse_shape = [2, 4] : (tensor<3xi32>, tensor<3xi32>, "
         "tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<3xf32>", "rhs has shape [2, 5], expected [4, 5]"),
        ("tgraph.sddmm %v, %ix, %d, %e sparse_shape = [2, 4] : (tensor<3xf32>, tensor<3xi32>, "
         "tensor<2x5xf32>, tensor<4x5xf32>) -> tensor<3xf32>", "indptr must be an integer tensor"),
    ],
)
def test_support_ops_reject_bad_input(line: str, message: str) -> None:
    text = f"""
    func.func @bad(%z: tensor<2x3xcomplex<f32>>, %a: tensor<2x3xf32>, %l: tensor<2x4x4xf64>, %b: tensor<2x4x3xf64>, %l2: tensor<3x4x3xf64>, %ip: tensor<3xi32>, %ix: tensor<3xi32>, %v: tensor<3xf32>, %d: tensor<2x5xf32>, %e: tensor<4x5xf32>) {{
      %r = {line}
      func.return
    }}
    """
    with pytest.raises(VerifyException, match=re.escape(message)):
        parse(text)


def test_support_ops_report_bad_values() -> None:
    text = """
    func.func @f(%a: tensor<3x3xf64>, %b: tensor<3x1xf64>, %ip: tensor<3xi32>, %ix: tensor<2xi32>, %l: tensor<2x2xf64>, %r: tensor<4x2xf64>) -> (tensor<3x1xf64>, tensor<2xf64>) {
      %x = tgraph.triangular_solve %a, %b : (tensor<3x3xf64>, tensor<3x1xf64>) -> tensor<3x1xf64>
      %s = tgraph.sddmm %ip, %ix, %l, %r sparse_shape = [2, 4] : (tensor<3xi32>, tensor<2xi32>, tensor<2x2xf64>, tensor<4x2xf64>) -> tensor<2xf64>
      func.return %x, %s : tensor<3x1xf64>, tensor<2xf64>
    }
    """
    m = parse(text)
    good = [np.eye(3), np.ones((3, 1)), np.array([0, 1, 2], np.int32), np.array([0, 3], np.int32),
            np.ones((2, 2)), np.ones((4, 2))]
    run_function(m, "f", good)
    singular = list(good)
    singular[0] = np.diag([1.0, 0.0, 2.0])
    with pytest.raises(ValueError, match="tgraph.triangular_solve: the triangular matrix is singular"):
        run_function(m, "f", singular)
    bad_csr = list(good)
    bad_csr[3] = np.array([0, 4], np.int32)
    with pytest.raises(ValueError, match=r"tgraph.sddmm: malformed CSR operands"):
        run_function(m, "f", bad_csr)


def test_frontend_functions_and_ts_grad() -> None:
    import tessera as ts

    def f(x, a, b, c):
        z = ts.fft(x)
        lo = ts.cholesky(a)
        y = ts.triangular_solve(lo, b, transpose_a=True)
        w = ts.complex(ts.real(z), ts.imag(z) * 2.0)
        return ts.sum(ts.real(w) * ts.imag(w) * c) + ts.sum(y * y)

    def tf(x, a, b, c):
        z = torch.fft.fft(x)
        y = torch.linalg.solve_triangular(torch.linalg.cholesky(a).mT, b, upper=True)
        return torch.sum(z.real * z.imag * 2.0 * c) + torch.sum(y * y)

    rng = np.random.default_rng(9)
    x = rng.standard_normal((3, 8))
    m = rng.standard_normal((4, 4))
    a = m @ m.T + 4 * np.eye(4)
    b = rng.standard_normal((4, 2))
    c = rng.standard_normal((3, 8))
    got = ts.grad(f, argnums=(0, 1, 2))(x, a, b, c)
    targs = [torch.tensor(v, requires_grad=True) for v in (x, a, b)]
    want = torch.autograd.grad(tf(*targs, torch.tensor(c)), targs)
    for g_, w in zip(got, want):
        assert_close(np.asarray(g_), w, 1e-8, "ts.grad")
    with pytest.raises(ts.TesseraTypeError, match="real: needs a complex tensor"):
        ts.jit(lambda v: ts.real(v))(x)
    with pytest.raises(ts.ShapeError, match="triangular_solve needs A"):
        ts.jit(lambda u, v: ts.triangular_solve(u, v))(a, x)
