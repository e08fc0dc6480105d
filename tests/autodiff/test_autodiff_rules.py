"""Adjoint rules of the ``autodiff`` pass, op by op, against torch.autograd in float64.

Each case is a one-op (or few-op) Graph IR function on f64 tensors. The pass
builds its VJP function, the numpy interpreter runs it with a random
cotangent, and the gradients must equal ``torch.autograd.grad`` (relative
1e-8) and agree with central finite differences of the forward function. The
forward-mode function (``mode=forward``) is checked against ``torch.func.jvp``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.dialects.func import Func
from xdsl.parser import Parser

from tessera.ir.attrs import Tessera
from tessera.ir.graph import Graph
from tessera.passes.autodiff import AutodiffPass
from tessera.runtime.graph_interpreter import run_function


def parse(text: str) -> ModuleOp:
    ctx = Context()
    for d in (Builtin, Func, Graph, Tessera):
        ctx.load_dialect(d)
    m = Parser(ctx, text).parse_module()
    m.verify()
    return m


def ty(shape: Sequence[int], elem: str = "f64") -> str:
    return f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}{elem}>"


@dataclass
class Case:
    """``body`` uses %a0, %a1 ... and must define %r of type ``out``."""

    name: str
    args: list[tuple[Sequence[int], str]]  # shape, kind: "float" | "pos" | "bool"
    out: Sequence[int]
    body: str
    ref: Callable[..., torch.Tensor]
    seed: int = 0
    fd_step: float = 1e-6
    values: list[np.ndarray] | None = field(default=None)

    def mlir(self) -> str:
        params = ", ".join(
            f"%a{i}: {ty(s, 'i1' if k == 'bool' else 'f64')}" for i, (s, k) in enumerate(self.args)
        )
        return (
            f"func.func @f({params}) -> {ty(self.out)} {{\n{self.body}\n"
            f"  func.return %r : {ty(self.out)}\n}}\n"
        )

    def inputs(self) -> list[np.ndarray]:
        if self.values is not None:
            return [np.asarray(v) for v in self.values]
        rng = np.random.default_rng(self.seed)
        out = []
        for s, k in self.args:
            if k == "bool":
                out.append(rng.random(s) < 0.5)
            elif k == "pos":
                out.append(rng.uniform(0.5, 2.0, s))
            else:
                out.append(rng.standard_normal(s))
        return out

    @property
    def float_args(self) -> list[int]:
        return [i for i, (_, k) in enumerate(self.args) if k != "bool"]


def _bin(op: str, sa: Sequence[int], sb: Sequence[int], out: Sequence[int]) -> str:
    return f"  %r = tgraph.{op} %a0, %a1 : ({ty(sa)}, {ty(sb)}) -> {ty(out)}"


def _un(op: str, s: Sequence[int]) -> str:
    return f"  %r = tgraph.{op} %a0 : ({ty(s)}) -> {ty(s)}"


def _red(op: str, s, axes, out, keep=False) -> str:
    k = " keepdims" if keep else ""
    return f"  %r = tgraph.{op} %a0 axes = {list(axes)}{k} : ({ty(s)}) -> {ty(out)}"


F2, P2 = "float", "pos"
S = (3, 4)

CASES: list[Case] = [
    Case("add_bcast", [(S, F2), ((4,), F2)], S, _bin("add", S, (4,), S), lambda a, b: a + b),
    Case("sub_bcast", [((3, 1), F2), (S, F2)], S, _bin("sub", (3, 1), S, S), lambda a, b: a - b),
    Case("mul_bcast", [(S, F2), ((1, 4), F2)], S, _bin("mul", S, (1, 4), S), lambda a, b: a * b),
    Case("div_bcast", [(S, F2), ((3, 1), P2)], S, _bin("div", S, (3, 1), S), lambda a, b: a / b),
    Case("pow", [(S, P2), (S, F2)], S, _bin("pow", S, S, S), lambda a, b: a**b),
    Case("pow_bcast", [(S, P2), ((), F2)], S, _bin("pow", S, (), S), lambda a, b: a**b),
    Case(
        "pow_const_exponents",
        [(S, F2)],
        S,
        "\n".join(
            f"  %c{i} = tgraph.constant dense<{c}> : tensor<f64> -> tensor<f64>\n"
            f"  %p{i} = tgraph.pow %a0, %c{i} : ({ty(S)}, {ty(())}) -> {ty(S)}"
            for i, c in enumerate(["0.0", "1.0", "2.0", "3.0"])
        )
        + f"\n  %s0 = tgraph.add %p0, %p1 : ({ty(S)}, {ty(S)}) -> {ty(S)}"
        + f"\n  %s1 = tgraph.add %s0, %p2 : ({ty(S)}, {ty(S)}) -> {ty(S)}"
        + f"\n  %r = tgraph.add %s1, %p3 : ({ty(S)}, {ty(S)}) -> {ty(S)}",
        lambda x: x**0.0 + x**1.0 + x**2.0 + x**3.0,
    ),
    Case("maximum", [(S, F2), ((4,), F2)], S, _bin("maximum", S, (4,), S), torch.maximum),
    Case("minimum", [(S, F2), ((4,), F2)], S, _bin("minimum", S, (4,), S), torch.minimum),
    Case(
        "select",
        [(S, "bool"), (S, F2), ((4,), F2)],
        S,
        f"  %r = tgraph.select %a0, %a1, %a2 : ({ty(S, 'i1')}, {ty(S)}, {ty((4,))}) -> {ty(S)}",
        lambda c, a, b: torch.where(c, a, b),
    ),
    Case("neg", [(S, F2)], S, _un("neg", S), torch.neg),
    Case("abs", [(S, F2)], S, _un("abs", S), torch.abs),
    Case("exp", [(S, F2)], S, _un("exp", S), torch.exp),
    Case("log", [(S, P2)], S, _un("log", S), torch.log),
    Case("sqrt", [(S, P2)], S, _un("sqrt", S), torch.sqrt),
    Case("rsqrt", [(S, P2)], S, _un("rsqrt", S), torch.rsqrt),
    Case("tanh", [(S, F2)], S, _un("tanh", S), torch.tanh),
    Case("relu", [(S, F2)], S, _un("relu", S), torch.relu),
    Case("gelu", [(S, F2)], S, _un("gelu", S), lambda x: F.gelu(x, approximate="tanh")),
    Case("silu", [(S, F2)], S, _un("silu", S), F.silu),
    Case("sigmoid", [(S, F2)], S, _un("sigmoid", S), torch.sigmoid),
    Case(
        "cast_roundtrip",
        [(S, F2)],
        S,
        f"  %t = tgraph.cast %a0 : ({ty(S)}) -> {ty(S, 'f32')}\n"
        f"  %r = tgraph.cast %t : ({ty(S, 'f32')}) -> {ty(S)}",
        lambda x: x.float().double(),
        fd_step=1e-2,
    ),
    Case("sum_axis", [((2, 3, 4), F2)], (2, 4), _red("sum", (2, 3, 4), [1], (2, 4)),
         lambda x: x.sum(1)),
    Case("sum_all", [(S, F2)], (), _red("sum", S, [], ()), lambda x: x.sum()),
    Case("mean_keep", [((2, 3, 4), F2)], (1, 3, 1),
         _red("mean", (2, 3, 4), [0, 2], (1, 3, 1), keep=True),
         lambda x: x.mean((0, 2), keepdim=True)),
    Case("max_axis", [(S, F2)], (3,), _red("max", S, [1], (3,)), lambda x: x.amax(1)),
    Case("min_neg_axis", [(S, F2)], (4,), _red("min", S, [-2], (4,)), lambda x: x.amin(0)),
    Case(
        "softmax_last",
        [(S, F2)],
        S,
        f"  %r = tgraph.softmax %a0 axis = -1 : ({ty(S)}) -> {ty(S)}",
        lambda x: torch.softmax(x, -1),
    ),
    Case(
        "softmax_0",
        [(S, F2)],
        S,
        f"  %r = tgraph.softmax %a0 axis = 0 : ({ty(S)}) -> {ty(S)}",
        lambda x: torch.softmax(x, 0),
    ),
    Case(
        "layernorm",
        [((2, 3, 4), F2), ((4,), F2), ((4,), F2)],
        (2, 3, 4),
        f"  %r = tgraph.layernorm %a0 weight %a1 : {ty((4,))} bias %a2 : {ty((4,))} "
        f"eps = 1.0e-05 : {ty((2, 3, 4))} -> {ty((2, 3, 4))}",
        lambda x, w, b: F.layer_norm(x, (4,), w, b, eps=1e-5),
    ),
    Case(
        "layernorm_plain",
        [(S, F2)],
        S,
        f"  %r = tgraph.layernorm %a0 eps = 1.0e-03 : {ty(S)} -> {ty(S)}",
        lambda x: F.layer_norm(x, (4,), eps=1e-3),
    ),
    Case(
        "rmsnorm",
        [((2, 3, 4), F2), ((4,), F2)],
        (2, 3, 4),
        f"  %r = tgraph.rmsnorm %a0 weight %a1 : {ty((4,))} eps = 1.0e-06 : "
        f"{ty((2, 3, 4))} -> {ty((2, 3, 4))}",
        lambda x, w: F.rms_norm(x, (4,), w, eps=1e-6),
    ),
    Case("matmul", [((3, 5), F2), ((5, 4), F2)], S, _bin("matmul", (3, 5), (5, 4), S),
         torch.matmul),
    Case(
        "matmul_tl",
        [((5, 3), F2), ((5, 4), F2)],
        S,
        f"  %r = tgraph.matmul %a0, %a1 transpose_lhs : ({ty((5, 3))}, {ty((5, 4))}) -> {ty(S)}",
        lambda a, b: a.T @ b,
    ),
    Case(
        "matmul_tr",
        [((3, 5), F2), ((4, 5), F2)],
        S,
        f"  %r = tgraph.matmul %a0, %a1 transpose_rhs : ({ty((3, 5))}, {ty((4, 5))}) -> {ty(S)}",
        lambda a, b: a @ b.T,
    ),
    Case(
        "matmul_tt_batch",
        [((2, 5, 3), F2), ((4, 5), F2)],
        (2, 3, 4),
        f"  %r = tgraph.matmul %a0, %a1 transpose_lhs transpose_rhs : "
        f"({ty((2, 5, 3))}, {ty((4, 5))}) -> {ty((2, 3, 4))}",
        lambda a, b: a.transpose(-1, -2) @ b.T,
    ),
    Case(
        "matmul_batch_bcast",
        [((1, 3, 5), F2), ((2, 1, 5, 4), F2)],
        (2, 1, 3, 4),
        _bin("matmul", (1, 3, 5), (2, 1, 5, 4), (2, 1, 3, 4)),
        torch.matmul,
    ),
    Case(
        "transpose",
        [((2, 3, 4), F2)],
        (4, 2, 3),
        f"  %r = tgraph.transpose %a0 permutation = [2, 0, 1] : ({ty((2, 3, 4))}) -> "
        f"{ty((4, 2, 3))}",
        lambda x: x.permute(2, 0, 1),
    ),
    Case(
        "reshape",
        [(S, F2)],
        (2, 6),
        f"  %r = tgraph.reshape %a0 : ({ty(S)}) -> {ty((2, 6))}",
        lambda x: x.reshape(2, 6),
    ),
    Case(
        "broadcast",
        [((3, 1), F2)],
        (2, 3, 4),
        f"  %r = tgraph.broadcast %a0 : ({ty((3, 1))}) -> {ty((2, 3, 4))}",
        lambda x: x.expand(2, 3, 4),
    ),
    Case(
        "slice_strided",
        [((7, 6), F2)],
        (2, 2),
        f"  %r = tgraph.slice %a0 start = [1, 0] limit = [6, 4] stride = [3, 2] : "
        f"({ty((7, 6))}) -> {ty((2, 2))}",
        lambda x: x[1:6:3, 0:4:2],
    ),
    Case(
        "slice_tail",
        [((5, 6), F2)],
        (2, 3),
        f"  %r = tgraph.slice %a0 start = [3, 1] limit = [5, 6] stride = [1, 2] : "
        f"({ty((5, 6))}) -> {ty((2, 3))}",
        lambda x: x[3:5, 1:6:2],
    ),
    Case(
        "concat",
        [((2, 4), F2), ((1, 4), F2), ((3, 4), F2)],
        (6, 4),
        f"  %r = tgraph.concat %a0, %a1, %a2 axis = 0 : ({ty((2, 4))}, {ty((1, 4))}, "
        f"{ty((3, 4))}) -> {ty((6, 4))}",
        lambda a, b, c: torch.cat([a, b, c], 0),
    ),
    Case(
        "mse_bcast",
        [(S, F2), ((4,), F2)],
        (),
        f"  %r = tgraph.mse %a0, %a1 : ({ty(S)}, {ty((4,))}) -> {ty(())}",
        lambda a, b: ((a - b) ** 2).mean(),
    ),
    Case(
        "flash_attention",
        [((2, 3, 4), F2), ((2, 5, 4), F2), ((2, 5, 6), F2)],
        (2, 3, 6),
        f"  %r = tgraph.flash_attention %a0, %a1, %a2 : ({ty((2, 3, 4))}, {ty((2, 5, 4))}, "
        f"{ty((2, 5, 6))}) -> {ty((2, 3, 6))}",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
    ),
    Case(
        "flash_attention_causal_scaled",
        [((4, 3), F2), ((4, 3), F2), ((4, 2), F2)],
        (4, 2),
        f"  %r = tgraph.flash_attention %a0, %a1, %a2 scale = 0.7 causal : ({ty((4, 3))}, "
        f"{ty((4, 3))}, {ty((4, 2))}) -> {ty((4, 2))}",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.7),
    ),
    Case(
        "chain_shared_operand",
        [(S, F2)],
        S,
        f"  %m = tgraph.mul %a0, %a0 : ({ty(S)}, {ty(S)}) -> {ty(S)}\n"
        f"  %e = tgraph.exp %m : ({ty(S)}) -> {ty(S)}\n"
        f"  %r = tgraph.add %e, %a0 : ({ty(S)}, {ty(S)}) -> {ty(S)}",
        lambda x: torch.exp(x * x) + x,
    ),
]

# ties and kinks, where the convention must match torch's
CASES += [
    Case("relu_at_zero", [((4,), F2)], (4,), _un("relu", (4,)), torch.relu,
         values=[np.array([-1.0, 0.0, 0.0, 2.0])]),
    Case("abs_at_zero", [((4,), F2)], (4,), _un("abs", (4,)), torch.abs,
         values=[np.array([-1.0, 0.0, 0.5, 2.0])]),
    Case("maximum_ties", [((4,), F2), ((4,), F2)], (4,), _bin("maximum", (4,), (4,), (4,)),
         torch.maximum, values=[np.array([1.0, 2.0, 3.0, -1.0]), np.array([1.0, 0.0, 3.0, 5.0])]),
    Case("max_reduce_ties", [((2, 3), F2)], (2,), _red("max", (2, 3), [1], (2,)),
         lambda x: x.amax(1), values=[np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])]),
    Case("pow_zero_base", [((3,), F2), ((3,), F2)], (3,), _bin("pow", (3,), (3,), (3,)),
         lambda a, b: a**b, values=[np.array([0.0, 0.0, 2.0]), np.array([2.0, 0.0, 1.5])]),
]

KINKED = {"relu_at_zero", "abs_at_zero", "maximum_ties", "max_reduce_ties", "pow_zero_base"}


def grad_module(case: Case, **opts) -> ModuleOp:
    m = parse(case.mlir())
    AutodiffPass(**opts).apply(Context(), m)
    m.verify()
    return m


def torch_vjp(case: Case, xs: list[np.ndarray], ct: np.ndarray) -> list[np.ndarray]:
    ts = [torch.tensor(x, requires_grad=case.args[i][1] != "bool") for i, x in enumerate(xs)]
    out = case.ref(*ts)
    fl = [ts[i] for i in case.float_args]
    gs = torch.autograd.grad(out, fl, torch.tensor(ct), allow_unused=True)
    return [
        np.zeros_like(xs[i]) if gr is None else gr.numpy() for i, gr in zip(case.float_args, gs)
    ]


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = max(np.max(np.abs(want)), 1e-300) if want.size else 1.0
    err = np.max(np.abs(got - want)) / scale if want.size else 0.0
    assert err <= rtol, f"{what}: relative error {err:.3e} > {rtol:.0e}\n{got}\n{want}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_vjp_matches_torch_and_finite_differences(case: Case) -> None:
    xs = case.inputs()
    rng = np.random.default_rng(100 + case.seed)
    ct = rng.standard_normal(case.out)
    m = grad_module(case)
    if math.prod(case.out) == 1:  # a loss: the seed is 1, no cotangent argument
        ct = np.ones(case.out)
        grads = run_function(m, "f_grad", xs)
    else:
        grads = run_function(m, "f_grad", [*xs, ct])
    assert len(grads) == len(case.float_args)
    for i, gt, gw in zip(case.float_args, grads, torch_vjp(case, xs, ct)):
        assert_close(gt, gw, 1e-8, f"{case.name}: d/d arg {i} vs torch")
    if case.name in KINKED:
        return
    # central differences of <ct, f(x)> along a random direction
    h = case.fd_step
    for i, gt in zip(case.float_args, grads):
        d = rng.standard_normal(xs[i].shape)
        plus = [x.copy() for x in xs]
        minus = [x.copy() for x in xs]
        plus[i] = plus[i] + h * d
        minus[i] = minus[i] - h * d
        fp = run_function(m, "f", plus)[0]
        fm = run_function(m, "f", minus)[0]
        fd = float(np.sum(ct * (fp - fm)) / (2 * h))
        an = float(np.sum(gt * d))
        assert math.isclose(fd, an, rel_tol=1e-5 if h < 1e-4 else 1e-3, abs_tol=1e-7), (case.name, i, fd, an)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.name not in KINKED], ids=lambda c: c.name
)
def test_jvp_matches_torch(case: Case) -> None:
    xs = case.inputs()
    rng = np.random.default_rng(200 + case.seed)
    tangents = [rng.standard_normal(xs[i].shape) for i in case.float_args]
    m = grad_module(case, mode="forward")
    y, ty_ = run_function(m, "f_jvp", [*xs, *tangents])

    def fn(*fl):
        full = [torch.tensor(x) for x in xs]
        for i, v in zip(case.float_args, fl):
            full[i] = v
        return case.ref(*full)

    prim = tuple(torch.tensor(xs[i]) for i in case.float_args)
    want_y, want_t = torch.func.jvp(fn, prim, tuple(torch.tensor(t) for t in tangents))
    assert_close(y, want_y.numpy(), 1e-12, f"{case.name}: primal")
    assert_close(ty_, want_t.numpy(), 1e-8, f"{case.name}: tangent")
