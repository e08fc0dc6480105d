"""lower-graph-to-tile for fused Graph IR: ``tgraph.fused`` (elementwise chains, with an
optional trailing reduction) and ``tgraph.matmul_epilogue`` (bias, activation, cast).

Each program is fused by the graph passes, lowered, run by the Tile IR interpreter
and compared with numpy float64 on random non-zero inputs of ragged shapes; every
kernel also goes to PTX and through ptxas.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes import tile_colreduce
from tessera.passes.emit_ptx import emit_ptx, kernels
from tessera.passes.fuse_elementwise import FuseElementwisePass
from tessera.passes.fuse_matmul_epilogue import FuseMatmulEpiloguePass
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tessera.passes.lower_tile_to_target import LowerTileToTargetPass
from tessera.passes.pipelines import default_context
from tessera.runtime import ptxas
from tessera.runtime.tile_interpreter import run_host
from tests.passes.test_lower_graph_to_tile import BF16, NP, context, f64, rand


def ty(shape: tuple[int, ...], elem: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + elem + ">"


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0)


@dataclass
class Case:
    """A Graph IR function named ``name``; ``args`` are (shape, element type); ``ref`` computes the
    result in float64; ``fused`` is the fused op the passes must produce."""

    name: str
    args: list[tuple[tuple[int, ...], str]]
    result: tuple[tuple[int, ...], str]
    body: str
    ref: Callable[..., np.ndarray]
    fused: type = g.FusedOp
    vector: bool = False  # the kernel reads/writes with vector accesses
    positive: bool = False
    column: bool = False  # a column reduction (tile_colreduce)
    thin: bool = False  # a column reduction of few rows (tile_colreduce's thin kernel)
    kernels: int = 1

    def mlir(self) -> str:
        params = ", ".join(f"%a{i}: {ty(s, e)}" for i, (s, e) in enumerate(self.args))
        types = {f"t{i}": ty(s, e) for i, (s, e) in enumerate(self.args)}
        body = self.body.format(res=ty(*self.result), **types)
        return (
            f"func.func @{self.name}({params}) -> {ty(*self.result)} {{\n{body}\n"
            f"  func.return %r : {ty(*self.result)}\n}}\n"
        )

    def inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        out = []
        for s, e in self.args:
            if e == "i1":
                out.append(rng.uniform(size=s) < 0.5)
            elif e == "i32":
                x = rng.integers(-9, 10, size=s)
                out.append(np.where(x == 0, 3, x).astype(np.int32))
            else:
                lo = 0.1 if self.positive else -2.0
                out.append(rand(rng, s, e, lo, 2.0))
        return out


def _chain(name: str, shape, elem: str, unary: str = "exp", **kw) -> Case:
    """unary(x * y + z) - x over same-shaped operands (the bench's 4-op chain)."""
    t = ty(shape, elem)
    body = (
        f"  %0 = tgraph.mul %a0, %a1 : ({t}, {t}) -> {t}\n"
        f"  %1 = tgraph.add %0, %a2 : ({t}, {t}) -> {t}\n"
        f"  %2 = tgraph.{unary} %1 : ({t}) -> {t}\n"
        f"  %r = tgraph.sub %2, %a0 : ({t}, {t}) -> {t}"
    )
    return Case(name, [(shape, elem)] * 3, (shape, elem), body,
                lambda x, y, z: getattr(np, unary)(x * y + z) - x, **kw)


def _reduce(name: str, shape, elem: str, red: str, axes: str, out, np_red, keep=False) -> Case:
    """red(sqrt(x) * y) over ``axes``; y broadcasts along the first axis."""
    t = ty(shape, elem)
    yt = ty(shape[1:], elem)
    kd = " keepdims" if keep else ""
    body = (
        f"  %0 = tgraph.sqrt %a0 : ({t}) -> {t}\n"
        f"  %1 = tgraph.mul %0, %a1 : ({t}, {yt}) -> {t}\n"
        f"  %r = tgraph.{red} %1 axes = {axes}{kd} : ({t}) -> {{res}}"
    )
    ax = [a % len(shape) for a in json.loads(axes)] or list(range(len(shape)))
    column = tile_colreduce.column_groups(shape, ax)
    if column is not None and column[1] <= tile_colreduce.THIN_ROWS:
        column = None  # the thin kernel: a lane per output folds its few rows
        thin = True
    else:
        thin = False
    kernels = 1 if column is None or tile_colreduce.splits(*column) == 1 else 2
    return Case(name, [(shape, elem), (shape[1:], elem)], (out, elem), body,
                lambda x, y: np_red(np.sqrt(x) * y), positive=True,
                column=column is not None, thin=thin, kernels=kernels)


def _epilogue(name: str, a, b, bias, product: str, act: str | None, cast: str | None,
              elem: str = "bf16", transpose_rhs: bool = False, residual: bool = False) -> Case:
    """matmul -> + bias -> act -> + residual -> cast, fused into tgraph.matmul_epilogue."""
    m, k = a
    n = b[0] if transpose_rhs else b[1]
    pt = ty((m, n), product)
    tr = " transpose_rhs" if transpose_rhs else ""
    steps = [f"tgraph.matmul %a0, %a1{tr} : ({{t0}}, {{t1}}) -> {pt}"]
    if bias is not None:
        steps.append(f"tgraph.add %v{len(steps) - 1}, %a2 : ({pt}, {{t2}}) -> {pt}")
    if act is not None:
        steps.append(f"tgraph.{act} %v{len(steps) - 1} : ({pt}) -> {pt}")
    if residual:
        at = 3 if bias is not None else 2
        steps.append(f"tgraph.add %a{at}, %v{len(steps) - 1} : ({pt}, {pt}) -> {pt}")
    res = cast or product
    if cast is not None:
        steps.append(f"tgraph.cast %v{len(steps) - 1} : ({pt}) -> {ty((m, n), res)}")
    names = [f"%v{i}" for i in range(len(steps) - 1)] + ["%r"]
    lines = [f"  {v} = {s}" for v, s in zip(names, steps)]
    args = [(a, elem), (b, elem)] + ([(bias, product)] if bias is not None else [])
    args += [((m, n), product)] if residual else []
    fn = {"relu": relu, "gelu": gelu, "silu": silu, None: lambda x: x}[act]

    def ref(x, w, *more):
        y = x @ (w.T if transpose_rhs else w)
        if bias is not None:
            y = y + more[0]
        y = fn(y)
        return y + more[-1] if residual else y

    return Case(name, args, ((m, n), res), "\n".join(lines), ref, fused=g.MatmulEpilogueOp)


CASES: list[Case] = [
    _chain("chain_f32", (33, 20), "f32", vector=True),
    _chain("chain_bf16", (9, 56), "bf16", vector=True),
    _chain("chain_f16", (7, 24), "f16", vector=True),
    _chain("chain_f64", (5, 14), "f64", "abs", vector=True),  # no f64 exp in PTX lowering
    _chain("chain_ragged", (37, 45), "f32"),
    Case(  # odd rows with a broadcast column: mapped as rows (_row_map)
        "rows_odd_bcast",
        [((6, 1101), "bf16"), ((6, 1), "f32")], ((6, 1101), "f32"),
        "  %0 = tgraph.cast %a0 : ({t0}) -> {res}\n"
        "  %1 = tgraph.sub %0, %a1 : ({res}, {t1}) -> {res}\n"
        "  %r = tgraph.exp %1 : ({res}) -> {res}",
        lambda x, m: np.exp(x - m),
    ),
    _chain("chain_bf16_width2", (5, 54), "bf16", vector=True),
    Case(
        "broadcast_mixed",
        [((37, 56), "bf16"), ((56,), "bf16"), ((37, 1), "f32"), ((), "f32")], ((37, 56), "f32"),
        "  %0 = tgraph.add %a0, %a1 : ({t0}, {t1}) -> {t0}\n"
        "  %1 = tgraph.gelu %0 : ({t0}) -> {t0}\n"
        "  %2 = tgraph.cast %1 : ({t0}) -> {res}\n"
        "  %3 = tgraph.mul %2, %a2 : ({res}, {t2}) -> {res}\n"
        "  %r = tgraph.sub %3, %a3 : ({res}, {t3}) -> {res}",
        lambda x, b, c, d: gelu(x + b) * c - d, vector=True,
    ),
    Case(
        "leaky_relu_select",
        [((21, 16), "f32")], ((21, 16), "f32"),
        "  %z = tgraph.constant dense<0.0> : tensor<f32> -> {t0}\n"
        "  %s = tgraph.constant dense<0.1> : tensor<f32> -> {t0}\n"
        "  %c = tgraph.gt %a0, %z : ({t0}, {t0}) -> tensor<21x16xi1>\n"
        "  %m = tgraph.mul %a0, %s : ({t0}, {t0}) -> {t0}\n"
        "  %r = tgraph.select %c, %a0, %m : (tensor<21x16xi1>, {t0}, {t0}) -> {t0}",
        lambda x: np.where(x > 0, x, 0.1 * x), vector=True,
    ),
    Case(
        "compare_to_i1",
        [((13, 8), "f32"), ((8,), "f32")], ((13, 8), "i1"),
        "  %0 = tgraph.mul %a0, %a1 : ({t0}, {t1}) -> {t0}\n"
        "  %r = tgraph.lt %0, %a1 : ({t0}, {t1}) -> {res}",
        lambda x, y: x * y < y, vector=True,
    ),
    Case(
        "int_chain",
        [((11, 12), "i32"), ((12,), "i32")], ((11, 12), "i32"),
        "  %0 = tgraph.mul %a0, %a1 : ({t0}, {t1}) -> {t0}\n"
        "  %1 = tgraph.neg %0 : ({t0}) -> {t0}\n"
        "  %r = tgraph.maximum %1, %a0 : ({t0}, {t0}) -> {t0}",
        lambda x, y: np.maximum(-(x * y), x), vector=True,
    ),
    Case(  # a broadcast of per-row statistics read by two ops: copied into the body
        "broadcast_rows_twice",
        [((9, 64), "f32"), ((9, 1), "f32")], ((9, 64), "f32"),
        "  %b = tgraph.broadcast %a1 : ({t1}) -> {t0}\n"
        "  %0 = tgraph.mul %a0, %b : ({t0}, {t0}) -> {t0}\n"
        "  %r = tgraph.add %0, %b : ({t0}, {t0}) -> {t0}",
        lambda x, s: x * s + s, vector=True,
    ),
    Case(  # a rank-raising broadcast of a column vector closed by a row reduction
        "broadcast_into_sum",
        [((4, 6, 40), "bf16"), ((40,), "bf16")], ((4, 6), "f32"),
        "  %b = tgraph.broadcast %a1 : ({t1}) -> {t0}\n"
        "  %0 = tgraph.mul %a0, %b : ({t0}, {t0}) -> {t0}\n"
        "  %1 = tgraph.cast %0 : ({t0}) -> tensor<4x6x40xf32>\n"
        "  %r = tgraph.sum %1 axes = [2] : (tensor<4x6x40xf32>) -> {res}",
        # the body multiplies in bf16: each product rounded before the f32 sum
        lambda x, w: (x * w).astype(BF16).astype(np.float64).sum(2),
    ),
    _reduce("sum_last_bf16", (13, 20), "bf16", "sum", "[1]", (13,), lambda v: v.sum(1)),
    _reduce("sum_last_long", (6, 77), "f32", "sum", "[1]", (6,), lambda v: v.sum(1)),
    _reduce("mean_last", (9, 45), "f32", "mean", "[-1]", (9,), lambda v: v.mean(-1)),
    _reduce("max_all", (13, 29), "f32", "max", "[]", (), lambda v: v.max()),
    _reduce("sum_all_bf16", (7, 19), "bf16", "sum", "[]", (), lambda v: v.sum()),
    _reduce("mean_all", (5, 9), "f32", "mean", "[]", (), lambda v: v.mean()),
    _reduce("min_axis0_keep", (10, 7), "f32", "min", "[0]", (1, 7),
            lambda v: v.min(0, keepdims=True), keep=True),
    _reduce("sum_axis0_split", (700, 9), "f32", "sum", "[0]", (9,), lambda v: v.sum(0)),
    # a reduced size-1 dim after the kept one: still [A, R, C] = [1, 50, 3]
    _reduce("sum_axes02_unit", (50, 3, 1), "f32", "sum", "[0, 2]", (3,),
            lambda v: v.sum((0, 2))),
    _reduce("sum_heads_thin", (2, 4, 3, 40), "bf16", "sum", "[1]", (2, 3, 40),
            lambda v: v.sum(1)),
    _reduce("mean_axis1_bf16", (3, 300, 37), "bf16", "mean", "[1]", (3, 37),
            lambda v: v.mean(1)),
    _reduce("max_axes01_split", (40, 50, 5), "f32", "max", "[0, 1]", (5,),
            lambda v: v.max((0, 1))),
    _epilogue("epi_relu_bf16", (70, 40), (40, 50), (50,), "f32", "relu", "bf16"),
    _epilogue("epi_gelu_bf16", (30, 40), (40, 27), (27,), "f32", "gelu", "bf16"),
    _epilogue("epi_silu_bf16", (30, 40), (40, 27), (27,), "f32", "silu", "bf16"),
    _epilogue("epi_bf16_product", (37, 24), (24, 19), (19,), "bf16", "gelu", "f32"),
    _epilogue("epi_bias_2d", (33, 17), (17, 21), (33, 21), "bf16", None, None),
    _epilogue("epi_transposed", (40, 32), (24, 32), None, "bf16", "silu", None,
              transpose_rhs=True),
    _epilogue("epi_f32_fma", (30, 17), (17, 29), (29,), "f32", "gelu", "bf16", elem="f32"),
    _epilogue("epi_f32_relu", (30, 17), (17, 29), (30, 1), "f32", "relu", None, elem="f32"),
    _epilogue("epi_bias_residual_bf16", (37, 24), (19, 24), (19,), "bf16", None, None,
              transpose_rhs=True, residual=True),
    _epilogue("epi_gelu_residual_cast", (30, 40), (40, 27), None, "f32", "gelu", "bf16",
              residual=True),
    _epilogue("epi_f32_bias_relu_residual", (30, 17), (17, 29), (29,), "f32", "relu", None,
              elem="f32", residual=True),
]


def _parse(case: Case) -> ModuleOp:
    ctx = context()
    m = Parser(ctx, case.mlir()).parse_module()
    m.verify()
    FuseMatmulEpiloguePass().apply(ctx, m)
    FuseElementwisePass().apply(ctx, m)
    m.verify()
    return m


def lower(case: Case) -> ModuleOp:
    """The fused, Tile-level module of ``case``."""
    ctx = context()
    m = _parse(case)
    ops = [op for op in m.walk() if op.dialect_name() == "tgraph"
           and not isinstance(op.parent_op(), g.FusedOp)]
    assert [type(op) for op in ops] == [case.fused], f"{case.name}: not fused into one op"
    LowerGraphToTile().apply(ctx, m)
    m.verify()
    Parser(ctx, str(m)).parse_module().verify()
    return m


def _tolerance(case: Case) -> float:
    elems = {e for _, e in case.args} | {case.result[1]}
    if elems & {"bf16"}:
        return 3e-2
    if elems & {"f16"}:
        return 5e-3
    return 1e-5


@pytest.fixture(scope="module")
def lowered() -> dict[str, ModuleOp]:
    return {c.name: lower(c) for c in CASES}


def check_numerics(case: Case, module: ModuleOp) -> None:
    """``case``'s lowered ``module`` on the Tile IR interpreter against its float64
    reference, on random inputs."""
    rng = np.random.default_rng(abs(hash(case.name)) % 2**32)
    xs = case.inputs(rng)
    (got,) = run_host(module, case.name, xs)
    ref = np.asarray(case.ref(*(f64(x) if x.dtype != np.bool_ else x for x in xs)))
    assert got.shape == case.result[0]
    assert got.dtype == np.dtype({**NP, "bf16": BF16, "f16": np.float16}[case.result[1]])
    if case.result[1] in ("i1", "i32"):
        np.testing.assert_array_equal(got, ref)
        return
    tol = _tolerance(case)
    err = np.abs(f64(got) - ref)
    assert np.isfinite(f64(got)).all()
    assert (err <= tol * np.maximum(1.0, np.abs(ref))).all(), float(err.max())


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_numerics(case: Case, lowered: dict[str, ModuleOp]) -> None:
    check_numerics(case, lowered[case.name])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_one_kernel(case: Case, lowered: dict[str, ModuleOp]) -> None:
    ks = [op for op in lowered[case.name].walk() if isinstance(op, tt.KernelOp)]
    assert len(ks) == case.kernels
    names = {op.name for op in ks[0].walk()}
    if case.vector:
        assert "ttile.load_vector" in names or "ttile.store_vector" in names
    else:
        assert "ttile.load_vector" not in names and "ttile.store_vector" not in names
    if case.column:  # the warps' partials combine through shared memory
        assert "ttile.barrier" in names and "ttile.reduce" not in names
    elif case.thin:  # each lane folds its own rows
        assert "ttile.barrier" not in names and "ttile.reduce" not in names
    elif case.name.startswith(("sum", "mean", "max", "min")):
        assert "ttile.reduce" in names


def test_vector_widths(lowered: dict[str, ModuleOp]) -> None:
    """4 f32 / 8 bf16 / 8 f16 / 2 f64 per access, narrowed to divide a ragged last dim."""

    def widths(name: str) -> set[str]:
        return {str(op.results[0].type) for op in lowered[name].walk()
                if isinstance(op, tt.LoadVectorOp)}

    assert widths("chain_f32") == {"vector<4xf32>"}
    assert widths("chain_bf16") == {"vector<8xbf16>"}
    assert widths("chain_f16") == {"vector<8xf16>"}
    assert widths("chain_f64") == {"vector<2xf64>"}
    assert widths("chain_bf16_width2") == {"vector<2xbf16>"}
    # a bf16 input feeding an f32 result: the f32 side limits the width to 4
    assert widths("broadcast_mixed") == {"vector<4xbf16>"}


def assembled_ptx(modules: list[ModuleOp]) -> str:
    """The PTX of every kernel of the Tile-level ``modules`` as one module, checked by
    ptxas (skips the test without ptxas)."""
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found (set TESSERA_PTXAS or install nvidia-cuda-nvcc)")
    combined = ModuleOp([])
    for m in modules:
        t = m.clone()
        LowerTileToTargetPass().apply(default_context(), t)
        for k in kernels(t):
            combined.body.block.add_op(k.clone())
    text = emit_ptx(combined)
    ptxas.check(text)
    return text


def test_all_kernels_pass_ptxas(lowered: dict[str, ModuleOp]) -> None:
    text = assembled_ptx(list(lowered.values()))
    assert text.count(".visible .entry") == sum(c.kernels for c in CASES)
    assert "ld.global.v4.f32" in text and "st.global.v4.f32" in text
