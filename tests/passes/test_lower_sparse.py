"""lower-graph-to-tile for the CSR products (tessera/passes/tile_sparse.py): spmm and
sddmm and spmm_transpose run on the Tile IR interpreter against float64 products on random patterns with
empty rows, one very long row and power-law row lengths, row widths N in {1, 7, 32, 33,
256, 257} and every float type; spmm and spmm_transpose equal the Graph IR interpreter bit for bit (same
terms, same CSR order); the launch plans (vector width, lanes per row, column blocks);
every kernel passes ptxas."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, Float64Type, ModuleOp

from tessera.ir import tile as tt
from tessera.passes.emit_ptx import emit_ptx, kernels
from tessera.passes.lower_tile_to_target import LowerTileToTargetPass
from tessera.passes.pipelines import default_context
from tessera.passes.tile_sparse import spmm_plan, vector_width
from tessera.runtime import ptxas
from tessera.runtime.graph_interpreter import run_function
from tessera.runtime.tile_interpreter import run_host
from tests.passes.test_lower_graph_to_tile import NP, context, f64, lower, ty

RNG = np.random.default_rng(19)
TOL = {"f32": 2e-6, "f64": 1e-14, "bf16": 8e-3, "f16": 1e-3}
"""Relative error allowed per unit of sum of |terms| (the result type's rounding plus
the f32 / f64 accumulation)."""
ELEMS = ["f32", "f64", "bf16", "f16"]


def pattern(m: int, k: int, kind: str, rng: np.random.Generator):
    """``(indptr, indices)`` of an ``m x k`` CSR pattern: ``"mixed"`` (empty rows, short
    rows and a repeated column), ``"long"`` (one row of 4k entries, the others short
    or empty) or ``"power"`` (power-law row lengths, Zipf-like)."""
    if kind == "mixed":
        counts = rng.integers(0, 6, size=m)
        counts[:: 3] = 0
    elif kind == "long":
        counts = rng.integers(0, 3, size=m)
        counts[m // 2] = 4 * k
    else:
        counts = np.minimum((rng.pareto(1.2, size=m) * 2).astype(np.int64), 3 * k)
        counts[0] = 0
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    indices = rng.integers(0, k, size=int(indptr[-1]))
    if indices.size > 2:
        indices[1] = indices[0]  # a repeated column
    return indptr, indices


def values(shape, elem, rng):
    x = rng.uniform(0.25, 2.0, size=shape) * np.where(rng.uniform(size=shape) < 0.5, -1, 1)
    return x.astype(NP[elem])


def spmm_text(elem, m, k, n, nnz, it="i32", op="spmm") -> str:
    pt, xt = ty((m + 1,), it), ty((nnz,), it)
    if op == "spmm":
        a, b, r = ty((nnz,), elem), ty((k, n), elem), ty((m, n), elem)
    else:  # sddmm
        a, b, r = ty((m, n), elem), ty((k, n), elem), ty((nnz,), elem)
    return f"""func.func @f(%p: {pt}, %i: {xt}, %a: {a}, %b: {b}) -> {r} {{
      %0 = tgraph.{op} %p, %i, %a, %b sparse_shape = [{m}, {k}] : ({pt}, {xt}, {a}, {b}) -> {r}
      func.return %0 : {r} }}"""


def graph_reference(text: str, args: list[np.ndarray]) -> np.ndarray:
    from xdsl.parser import Parser

    (want,) = run_function(Parser(context(), text).parse_module(), "f", [a.copy() for a in args])
    return want


def within(got: np.ndarray, want: np.ndarray, scale: np.ndarray, elem: str) -> None:
    """``|got - want| <= TOL * max(scale, 1)`` elementwise (``scale``: the sum of the
    terms' magnitudes), and nothing unwritten (NaN)."""
    g = f64(got)
    assert g.shape == want.shape
    assert not np.isnan(g).any(), "unwritten (NaN) elements"
    err = np.abs(g - want) / np.maximum(scale, 1.0)
    assert float(err.max(initial=0.0)) <= TOL[elem], float(err.max())


def run_spmm(elem, m, k, n, kind, it="i32", seed=0):
    rng = np.random.default_rng(seed)
    indptr, indices = pattern(m, k, kind, rng)
    v, d = values(indices.size, elem, rng), values((k, n), elem, rng)
    idt = np.int32 if it == "i32" else np.int64
    text = spmm_text(elem, m, k, n, indices.size, it)
    args = [indptr.astype(idt), indices.astype(idt), v, d]
    (got,) = run_host(lower(text), "f", [a.copy() for a in args])
    rows = np.repeat(np.arange(m), np.diff(indptr))
    terms = f64(v)[:, None] * f64(d)[indices]
    want, scale = np.zeros((m, n)), np.zeros((m, n))
    np.add.at(want, rows, terms)
    np.add.at(scale, rows, np.abs(terms))
    assert got.dtype == NP[elem] and got.shape == (m, n)
    within(got, want, scale, elem)
    # same products summed in the same (CSR) order and precision: bit for bit
    np.testing.assert_array_equal(f64(got), f64(graph_reference(text, args)))


SPMM = [
    # (elem, M, K, N, pattern, index type)
    ("f32", 9, 11, 1, "mixed", "i32"),
    ("f32", 23, 13, 7, "power", "i64"),
    ("f32", 11, 40, 32, "long", "i32"),
    ("f32", 9, 17, 33, "mixed", "i32"),
    ("f32", 5, 9, 256, "power", "i32"),
    ("f32", 4, 7, 257, "mixed", "i64"),
    ("f64", 10, 12, 7, "long", "i32"),
    ("f64", 7, 9, 33, "power", "i32"),
    ("f64", 4, 6, 256, "mixed", "i32"),
    ("bf16", 12, 9, 1, "power", "i32"),
    ("bf16", 6, 8, 32, "mixed", "i32"),
    ("bf16", 3, 5, 257, "long", "i32"),
    ("f16", 8, 10, 7, "mixed", "i64"),
    ("f16", 4, 6, 256, "power", "i32"),
    ("f16", 5, 9, 33, "long", "i32"),
]


@pytest.mark.parametrize(("elem", "m", "k", "n", "kind", "it"), SPMM)
def test_spmm(elem, m, k, n, kind, it):
    run_spmm(elem, m, k, n, kind, it, seed=m * 1000 + n)


def test_spmm_column_blocks():
    """N = 1030 f32: 2-wide vectors (1030 = 2 * 515), 32 lanes of 8 vectors = 512-wide
    column blocks, the third with 6 columns."""
    (kern,) = [o for o in lower(spmm_text("f32", 3, 4, 1030, 5)).walk()
               if isinstance(o, tt.KernelOp)]
    assert kern.group_size.value.data == 128
    (launch,) = [o for o in lower(spmm_text("f32", 3, 4, 1030, 5)).walk()
                 if isinstance(o, tt.LaunchOp)]
    assert launch.grid_value() == (1, 3, 1)  # 32 lanes per row: 4 rows per tile
    run_spmm("f32", 6, 5, 1030, "mixed", seed=3)


def test_spmm_empty_operands():
    """No stored entries (all-zero result) and no rows (no kernel)."""
    text = spmm_text("f32", 3, 4, 5, 0)
    args = [np.zeros(4, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32),
            values((4, 5), "f32", RNG)]
    (got,) = run_host(lower(text), "f", args)
    np.testing.assert_array_equal(got, np.zeros((3, 5), np.float32))
    m = lower(spmm_text("f32", 0, 4, 5, 0))
    assert not [o for o in m.walk() if isinstance(o, tt.LaunchOp)]


def test_spmm_malformed_does_not_fault():
    """A row extent past nnz is clamped and a column outside [0, K) reads zeros (the CPU
    reference raises; the kernel must not read out of bounds)."""
    ip = np.array([0, 2, 9], np.int32)
    ix = np.array([1, 7, 0], np.int32)
    v, d = values(3, "f64", RNG), values((4, 6), "f64", RNG)
    (got,) = run_host(lower(spmm_text("f64", 2, 4, 6, 3)), "f", [ip, ix, v, d])
    np.testing.assert_array_equal(got[0], v[0] * d[1] + v[1] * 0.0)
    np.testing.assert_array_equal(got[1], v[2] * d[0])


@pytest.mark.parametrize(("elem", "n", "plan"), [
    ("f32", 1, (1, 1, 1)), ("f32", 7, (1, 8, 1)), ("f32", 32, (4, 8, 1)),
    ("f32", 33, (1, 32, 2)), ("f32", 256, (4, 32, 2)), ("f32", 512, (4, 32, 4)),
    ("f32", 4096, (4, 32, 4)), ("f64", 256, (2, 32, 4)), ("bf16", 256, (8, 32, 1)),
    ("f16", 512, (8, 32, 2)), ("f16", 6, (2, 4, 1)),
])
def test_spmm_plan(elem, n, plan):
    et = {"f32": Float32Type(), "f64": Float64Type(), "bf16": BFloat16Type(),
          "f16": Float16Type()}[elem]
    assert spmm_plan(et, n) == plan
    assert vector_width(et, n) == plan[0]


# --------------------------------------------------------------------------- sddmm


def run_sddmm(elem, m, k, n, kind, it="i32", seed=0):
    rng = np.random.default_rng(seed)
    indptr, indices = pattern(m, k, kind, rng)
    lhs, rhs = values((m, n), elem, rng), values((k, n), elem, rng)
    idt = np.int32 if it == "i32" else np.int64
    text = spmm_text(elem, m, k, n, indices.size, it, op="sddmm")
    args = [indptr.astype(idt), indices.astype(idt), lhs, rhs]
    (got,) = run_host(lower(text), "f", [a.copy() for a in args])
    rows = np.repeat(np.arange(m), np.diff(indptr))
    terms = f64(lhs)[rows] * f64(rhs)[indices]
    assert got.dtype == NP[elem] and got.shape == (indices.size,)
    within(got, terms.sum(axis=1), np.abs(terms).sum(axis=1), elem)
    within(got, f64(graph_reference(text, args)), np.abs(terms).sum(axis=1), elem)


SDDMM = [
    ("f32", 9, 11, 1, "mixed", "i32"),
    ("f32", 23, 13, 7, "power", "i64"),
    ("f32", 11, 6, 32, "long", "i32"),
    ("f32", 9, 17, 33, "mixed", "i32"),
    ("f32", 5, 9, 256, "power", "i32"),
    ("f32", 4, 7, 257, "mixed", "i32"),
    ("f64", 10, 12, 7, "mixed", "i32"),
    ("f64", 7, 9, 257, "power", "i64"),
    ("bf16", 12, 9, 33, "power", "i32"),
    ("bf16", 6, 8, 256, "mixed", "i32"),
    ("f16", 8, 10, 7, "mixed", "i64"),
    ("f16", 4, 6, 1040, "mixed", "i32"),
]


@pytest.mark.parametrize(("elem", "m", "k", "n", "kind", "it"), SDDMM)
def test_sddmm(elem, m, k, n, kind, it):
    run_sddmm(elem, m, k, n, kind, it, seed=m * 1000 + n + 1)


def test_sddmm_malformed_does_not_fault():
    ip, ix = np.array([0, 2, 3], np.int32), np.array([0, 7, 1], np.int32)
    lhs, rhs = values((2, 3), "f64", RNG), values((4, 3), "f64", RNG)
    (got,) = run_host(lower(spmm_text("f64", 2, 4, 3, 3, op="sddmm")), "f", [ip, ix, lhs, rhs])
    assert got[1] == 0.0 and got[0] == pytest.approx(lhs[0] @ rhs[0], rel=1e-15)
    assert got[2] == pytest.approx(lhs[1] @ rhs[1], rel=1e-15)


# --------------------------------------------------------------------------- spmm_transpose


def transpose_text(elem, m, k, n, nnz, it="i32") -> str:
    pt, xt = ty((m + 1,), it), ty((nnz,), it)
    a, b, r = ty((nnz,), elem), ty((m, n), elem), ty((k, n), elem)
    return f"""func.func @f(%p: {pt}, %i: {xt}, %a: {a}, %b: {b}) -> {r} {{
      %0 = tgraph.spmm_transpose %p, %i, %a, %b sparse_shape = [{m}, {k}] : ({pt}, {xt}, {a}, {b}) -> {r}
      func.return %0 : {r} }}"""


TRANSPOSE = [
    ("f32", 9, 11, 1, "mixed", "i32"),
    ("f32", 23, 13, 33, "power", "i64"),
    ("f32", 11, 6, 32, "long", "i32"),
    ("f64", 10, 12, 7, "power", "i32"),
    ("bf16", 12, 9, 256, "mixed", "i32"),
    ("f16", 8, 10, 257, "long", "i32"),
]


@pytest.mark.parametrize(("elem", "m", "k", "n", "kind", "it"), TRANSPOSE)
def test_spmm_transpose(elem, m, k, n, kind, it):
    """Aᵀ @ D through the sort by column: each output row sums its column's entries in
    storage order, bit for bit the Graph IR interpreter's ``numpy.add.at``."""
    rng = np.random.default_rng(m * 1000 + n + 2)
    indptr, indices = pattern(m, k, kind, rng)
    v, d = values(indices.size, elem, rng), values((m, n), elem, rng)
    idt = np.int32 if it == "i32" else np.int64
    text = transpose_text(elem, m, k, n, indices.size, it)
    args = [indptr.astype(idt), indices.astype(idt), v, d]
    (got,) = run_host(lower(text), "f", [a.copy() for a in args])
    rows = np.repeat(np.arange(m), np.diff(indptr))
    terms = f64(v)[:, None] * f64(d)[rows]
    want, scale = np.zeros((k, n)), np.zeros((k, n))
    np.add.at(want, indices, terms)
    np.add.at(scale, indices, np.abs(terms))
    assert got.dtype == NP[elem] and got.shape == (k, n)
    within(got, want, scale, elem)
    np.testing.assert_array_equal(f64(got), f64(graph_reference(text, args)))


@pytest.mark.parametrize(("m", "k", "top"), [(150, 37, 18), (400, 3, 16)])
def test_spmm_transpose_many_entries(m, k, top):
    """More than 1,024 entries: tiles sort 256 each in shared memory (the last one
    partial), then merge levels in global memory (runs of 256, 512, ...: merge path);
    with K = 3 almost every key is repeated, so only a stable sort keeps each column's
    entries in storage order (the bitwise comparison with the CPU reference)."""
    rng = np.random.default_rng(4)
    counts = rng.integers(0, top, size=m)
    counts[::7] = 0
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    indices = rng.integers(0, k, size=int(indptr[-1])).astype(np.int32)
    assert indices.size > 1024 and indices.size % 256
    v, d = values(indices.size, "f32", rng), values((m, 3), "f32", rng)
    text = transpose_text("f32", m, k, 3, indices.size)
    args = [indptr, indices, v, d]
    (got,) = run_host(lower(text), "f", [a.copy() for a in args])
    np.testing.assert_array_equal(got, graph_reference(text, args))


def test_spmm_transpose_edge_cases():
    """No entries (zeros), and malformed operands (a column outside [0, K), an extent
    past nnz) that must not fault: the bad entry is left out."""
    d = values((3, 5), "f32", RNG)
    args = [np.zeros(4, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32), d]
    (got,) = run_host(lower(transpose_text("f32", 3, 4, 5, 0)), "f", args)
    np.testing.assert_array_equal(got, np.zeros((4, 5), np.float32))
    ip, ix = np.array([0, 2, 9], np.int32), np.array([1, 7, 0], np.int32)
    v, d = values(3, "f64", RNG), values((2, 6), "f64", RNG)
    (got,) = run_host(lower(transpose_text("f64", 2, 4, 6, 3)), "f", [ip, ix, v, d])
    want = np.zeros((4, 6))
    want[1] = v[0] * d[0]
    want[0] = v[2] * d[1]
    np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- ptxas


def test_sparse_kernels_pass_ptxas():
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found (set TESSERA_PTXAS or install nvidia-cuda-nvcc)")
    texts = [spmm_text(e, m, k, n, 2 * m + 1, it) for e, m, k, n, _, it in SPMM[::2]]
    texts += [spmm_text(e, m, k, n, 2 * m + 1, it, op="sddmm")
              for e, m, k, n, _, it in SDDMM[::3] + SDDMM[10:11]]
    texts += [transpose_text(e, m, k, n, 600, it) for e, m, k, n, _, it in TRANSPOSE[:2]]
    combined = ModuleOp([])
    for i, text in enumerate(texts):
        mod = lower(text.replace("func.func @f(", f"func.func @f{i}("))
        LowerTileToTargetPass().apply(default_context(), mod)
        for kern in kernels(mod):
            combined.body.block.add_op(kern.clone())
    joined = emit_ptx(combined)
    assert joined.count(".visible .entry") == len(texts) + 2 * 4  # + sort, merge, colptr, gather
    ptxas.check(joined)
    assert "ld.global.v4.f32" in joined and "shfl.sync.bfly" in joined
