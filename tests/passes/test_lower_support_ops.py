"""lower-graph-to-tile for the derivative support ops (tgraph.real, tgraph.imag,
tgraph.complex, tgraph.triangular_solve, tgraph.spmm_transpose, tgraph.sddmm) and
complex add/sub: the lowered program, run by the Tile IR interpreter, equals numpy and
the Graph IR interpreter in float64 on random inputs (odd sizes, batches, empty rows,
repeated columns); every kernel passes ptxas -arch=sm_90a; and the gradients of a
cholesky, an spmm and an fft loss (ts.grad) lower and run on the tile interpreter as on
the Graph IR interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.ir import tile as tt
from tessera.runtime.graph_interpreter import run_function
from tessera.runtime.tile_interpreter import run_host
from tests.passes.test_lower_graph_to_tile import lower
from tests.passes.test_lower_linalg_ops import (
    EPS,
    NP,
    as_complex,
    check_ptx,
    graph_reference,
    rand,
    ty,
)

# --------------------------------------------------------------------------- complex parts


def parts_text(shape, elem) -> str:
    """``x`` complex from ``(a, b)``; returns ``x``, ``real(x + x)``, ``imag(x - y)``."""
    t, c = ty(shape, elem), ty(shape, f"complex<{elem}>")
    return f"""func.func @f(%a: {t}, %b: {t}, %y: {c}) -> ({c}, {t}, {t}) {{
  %x = tgraph.complex %a, %b : ({t}, {t}) -> {c}
  %s = tgraph.add %x, %x : ({c}, {c}) -> {c}
  %d = tgraph.sub %x, %y : ({c}, {c}) -> {c}
  %r = tgraph.real %s : ({c}) -> {t}
  %i = tgraph.imag %d : ({c}) -> {t}
  func.return %x, %r, %i : {c}, {t}, {t} }}"""


@pytest.mark.parametrize("shape,elem", [((3, 7), "f64"), ((5,), "f32"), ((2, 3, 5), "f64"),
                                        ((300,), "f32")])
def test_complex_parts_match_numpy(shape, elem):
    a, b = rand(shape, elem), rand(shape, elem)
    y = np.stack([rand(shape, elem), rand(shape, elem)], axis=-1)  # interleaved pairs
    x, r, i = run_host(lower(parts_text(shape, elem)), "f", [a, b, y])
    assert x.shape == (*shape, 2) and x.dtype == NP[elem]
    # pure data movement and one add / sub per part: exact
    assert np.array_equal(x[..., 0], a) and np.array_equal(x[..., 1], b)
    assert np.array_equal(r, a + a)
    assert np.array_equal(i, b - y[..., 1])
    yc = as_complex(y).astype(np.complex128 if elem == "f64" else np.complex64)
    _, r_ref, i_ref = graph_reference(parts_text(shape, elem), [a, b, yc])
    assert np.array_equal(r, r_ref) and np.array_equal(i, i_ref)


def test_complex_add_broadcasts():
    c3, c1 = ty((4, 3), "complex<f64>"), ty((1, 3), "complex<f64>")
    text = f"""func.func @f(%x: {c3}, %y: {c1}) -> {c3} {{
      %0 = tgraph.add %x, %y : ({c3}, {c1}) -> {c3}
      func.return %0 : {c3} }}"""
    x, y = rand((4, 3, 2), "f64"), rand((1, 3, 2), "f64")
    (got,) = run_host(lower(text), "f", [x, y])
    assert np.array_equal(got, x + y)


def test_complex_part_of_f16_is_reported():
    t, c = ty((4,), "f16"), ty((4,), "complex<f16>")
    text = f"""func.func @f(%a: {t}, %b: {t}) -> {c} {{
      %0 = tgraph.complex %a, %b : ({t}, {t}) -> {c}
      func.return %0 : {c} }}"""
    with pytest.raises(NotImplementedError, match=r"tgraph.complex has no Tile IR lowering "
                                                  r"\(element type f16"):
        lower(text)


# --------------------------------------------------------------------------- triangular solve


def trisolve_text(an, bn, elem, upper: bool, trans: bool) -> str:
    flags = (" upper" if upper else "") + (" transpose_a" if trans else "")
    ta, tb = ty(an, elem), ty(bn, elem)
    return f"""func.func @f(%a: {ta}, %b: {tb}) -> {tb} {{
  %0 = tgraph.triangular_solve %a, %b{flags} : ({ta}, {tb}) -> {tb}
  func.return %0 : {tb} }}"""


TRISOLVE = [
    ((5, 5), (5, 3), "f64", False, False),
    ((5, 5), (5, 3), "f64", True, False),
    ((2, 7, 7), (2, 7, 1), "f64", False, True),
    ((3, 4, 4), (3, 4, 9), "f64", True, True),
    ((1, 1), (1, 2), "f64", True, False),
    ((2, 3, 6, 6), (2, 3, 6, 5), "f32", False, False),
    ((9, 9), (9, 300), "f32", True, True),  # 300 columns: two tiles
]


def _check_solve(got, a, b, elem, upper: bool, trans: bool) -> float:
    """``got`` solves ``op(A) X = B`` within ``8 n eps cond max|X|`` of float64; that
    tolerance."""
    assert got.dtype == NP[elem] and got.shape == b.shape
    t = np.triu(a.astype(np.float64)) if upper else np.tril(a.astype(np.float64))
    if trans:
        t = np.swapaxes(t, -1, -2)
    want = np.linalg.solve(t, b.astype(np.float64))
    tol = 8 * a.shape[-1] * EPS[elem] * np.linalg.cond(t).max() * np.abs(want).max()
    assert np.abs(got - want).max() <= tol
    return tol


@pytest.mark.parametrize("an,bn,elem,upper,trans", TRISOLVE)
def test_triangular_solve_matches_numpy(an, bn, elem, upper, trans):
    n = an[-1]
    a = (rand(an, "f64") + 3.0 * np.eye(n)).astype(NP[elem])
    b = rand(bn, elem)
    text = trisolve_text(an, bn, elem, upper, trans)
    (got,) = run_host(lower(text), "f", [a, b])
    tol = _check_solve(got, a, b, elem, upper, trans)
    # only the named triangle is read: garbage in the other one must not matter
    other = np.tril(rand(an, elem), -1) if upper else np.triu(rand(an, elem), 1)
    (got2,) = run_host(lower(text), "f", [a + 100 * other, b])
    assert np.array_equal(got, got2)
    (ref,) = graph_reference(text, [a, b])
    assert np.abs(got - ref).max() <= tol


TRISOLVE_BLOCKED = [
    ((100, 100), (100, 7), "f64", False, False, 256, 64),
    ((100, 100), (100, 7), "f64", True, False, 64, 64),
    ((2, 150, 150), (2, 150, 70), "f32", False, True, 64, 64),  # 70 columns: two tiles
    ((130, 130), (130, 1), "f64", True, True, 64, 64),
    ((2, 1, 97, 97), (2, 1, 97, 3), "f64", False, False, 32, 64),  # a panel per block row
    ((2, 200, 200), (2, 200, 130), "f32", True, False, 64, 128),  # 128-square update blocks
]


@pytest.mark.parametrize("an,bn,elem,upper,trans,panel,tile", TRISOLVE_BLOCKED)
def test_triangular_solve_blocked_matches_numpy(an, bn, elem, upper, trans, panel, tile,
                                                monkeypatch):
    """n > 64: one launch per panel (in it, per block row, a diagonal solve and an inner
    update of the panel's rows below), and a trailing-update GEMM after each panel but
    the last (``tile``-square output blocks); upper triangles from the bottom row up."""
    from tessera.passes import tile_triangular_blocked as tb

    monkeypatch.setattr(tb, "PANEL", panel)
    monkeypatch.setattr(tb, "UPDATE_TILE", tile)
    n = an[-1]
    a = (rand(an, "f64") / np.sqrt(n) + 2.0 * np.eye(n)).astype(NP[elem])
    b = rand(bn, elem)
    text = trisolve_text(an, bn, elem, upper, trans)
    m = lower(text)
    names = {o.sym_name.data for o in m.walk() if isinstance(o, tt.KernelOp)}
    npanels = -(-n // panel)
    kinds = ("copy", "panel", "update") if npanels > 1 else ("copy", "panel")
    assert names == {f"f_trsm_{x}_0" for x in kinds}
    launches = [o for o in m.walk() if isinstance(o, tt.LaunchOp)]
    assert len(launches) == tb.launch_count(n) == 1 + npanels + (npanels - 1)
    (got,) = run_host(m, "f", [a, b])
    _check_solve(got, a, b, elem, upper, trans)
    other = np.tril(rand(an, elem), -1) if upper else np.triu(rand(an, elem), 1)
    (got2,) = run_host(m, "f", [a + 100 * other, b])
    assert np.array_equal(got, got2)


def test_triangular_solve_kernel_shape():
    m = lower(trisolve_text((3, 4, 4), (3, 4, 9), "f32", False, False))
    (k,) = [o for o in m.walk() if isinstance(o, tt.KernelOp)]
    assert k.group_size.value.data == 32  # 27 columns, one lane each
    (launch,) = [o for o in m.walk() if isinstance(o, tt.LaunchOp)]
    assert launch.grid_value() == (1, 1, 1)


def test_triangular_solve_bf16_is_reported():
    with pytest.raises(NotImplementedError, match=r"tgraph.triangular_solve has no Tile IR "
                                                  r"lowering \(element type bf16"):
        lower(trisolve_text((3, 3), (3, 2), "bf16", False, False))


# --------------------------------------------------------------------------- sparse


def csr_text(op: str, m: int, k: int, nnz: int, n: int, elem: str, idx: str = "i32") -> str:
    ip, ix = ty((m + 1,), idx), ty((nnz,), idx)
    if op == "spmm_transpose":
        shapes, out = [(nnz,), (m, n)], (k, n)
    else:
        shapes, out = [(m, n), (k, n)], (nnz,)
    t0, t1, to = ty(shapes[0], elem), ty(shapes[1], elem), ty(out, elem)
    return f"""func.func @f(%ip: {ip}, %ix: {ix}, %p: {t0}, %q: {t1}) -> {to} {{
  %0 = tgraph.{op} %ip, %ix, %p, %q sparse_shape = [{m}, {k}] : ({ip}, {ix}, {t0}, {t1}) -> {to}
  func.return %0 : {to} }}"""


def random_csr(m: int, k: int, rng: np.random.Generator, empty_rows: bool = True):
    """A CSR pattern with some empty rows and some repeated columns within a row."""
    counts = rng.integers(0, 5, size=m)
    if empty_rows and m > 2:
        counts[0] = 0
        counts[m // 2] = 0
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    indices = rng.integers(0, k, size=int(indptr[-1]))
    if indices.size > 2:
        indices[1] = indices[2]
    return indptr, indices


def dense_of(indptr, indices, values, m, k) -> np.ndarray:
    a = np.zeros((m, k))
    rows = np.repeat(np.arange(m), np.diff(indptr))
    np.add.at(a, (rows, indices), values.astype(np.float64))
    return a


SPARSE = [(7, 5, 3, "f64", "i32"), (1, 4, 1, "f64", "i64"), (13, 9, 300, "f32", "i32"),
          (40, 3, 2, "f64", "i64"), (6, 11, 7, "f32", "i32")]


@pytest.mark.parametrize("m,k,n,elem,idx", SPARSE)
def test_spmm_transpose_matches_numpy(m, k, n, elem, idx):
    rng = np.random.default_rng(m * 100 + n)
    indptr, indices = random_csr(m, k, rng)
    nnz = indices.size
    v, d = rand((nnz,), elem), rand((m, n), elem)
    ip, ix = indptr.astype(NP_INT[idx]), indices.astype(NP_INT[idx])
    text = csr_text("spmm_transpose", m, k, nnz, n, elem, idx)
    (got,) = run_host(lower(text), "f", [ip, ix, v, d])
    assert got.dtype == NP[elem] and got.shape == (k, n)
    want = dense_of(indptr, indices, v, m, k).T @ d.astype(np.float64)
    tol = 4 * max(1, nnz) * EPS[elem]
    assert np.abs(got - want).max() <= tol
    (ref,) = graph_reference(text, [ip, ix, v, d])
    if elem == "f64":  # same terms in the same (storage) order
        assert np.array_equal(got, ref)
    assert np.abs(got - ref).max() <= tol


@pytest.mark.parametrize("m,k,n,elem,idx", SPARSE)
def test_sddmm_matches_numpy(m, k, n, elem, idx):
    rng = np.random.default_rng(m * 100 + n + 1)
    indptr, indices = random_csr(m, k, rng)
    nnz = indices.size
    lhs, rhs = rand((m, n), elem), rand((k, n), elem)
    ip, ix = indptr.astype(NP_INT[idx]), indices.astype(NP_INT[idx])
    text = csr_text("sddmm", m, k, nnz, n, elem, idx)
    (got,) = run_host(lower(text), "f", [ip, ix, lhs, rhs])
    assert got.dtype == NP[elem] and got.shape == (nnz,)
    rows = np.repeat(np.arange(m), np.diff(indptr))
    want = np.sum(lhs.astype(np.float64)[rows] * rhs.astype(np.float64)[indices], axis=1)
    tol = 4 * n * EPS[elem]
    assert np.abs(got - want).max() <= tol
    (ref,) = graph_reference(text, [ip, ix, lhs, rhs])
    assert np.abs(got - ref).max() <= tol


def test_sddmm_many_entries_and_rows():
    """More entries than one tile has lanes, rows found by binary search over 200 rows."""
    m, k, n = 200, 17, 3
    rng = np.random.default_rng(5)
    indptr, indices = random_csr(m, k, rng)
    assert indices.size > 256
    lhs, rhs = rand((m, n), "f64"), rand((k, n), "f64")
    text = csr_text("sddmm", m, k, indices.size, n, "f64")
    (got,) = run_host(lower(text), "f", [indptr.astype(np.int32), indices.astype(np.int32),
                                         lhs, rhs])
    rows = np.repeat(np.arange(m), np.diff(indptr))
    assert np.abs(got - np.sum(lhs[rows] * rhs[indices], axis=1)).max() <= 8 * EPS["f64"]


def test_sparse_out_of_range_columns_do_not_fault():
    """The CPU reference raises for a column >= K; the kernels skip the entry."""
    ip, ix = np.array([0, 2, 3], np.int32), np.array([0, 7, 1], np.int32)
    v, d = rand((3,), "f64"), rand((2, 3), "f64")
    (got,) = run_host(lower(csr_text("spmm_transpose", 2, 4, 3, 3, "f64")), "f", [ip, ix, v, d])
    want = np.zeros((4, 3))
    want[0] += v[0] * d[0]
    want[1] += v[2] * d[1]
    assert np.array_equal(got, want)
    lhs, rhs = rand((2, 3), "f64"), rand((4, 3), "f64")
    (got,) = run_host(lower(csr_text("sddmm", 2, 4, 3, 3, "f64")), "f", [ip, ix, lhs, rhs])
    assert got[1] == 0.0 and got[0] == pytest.approx(lhs[0] @ rhs[0], rel=1e-15)


def test_spmm_transpose_kernel_shape():
    """Aᵀ as CSR (a stable merge sort by column: 256 entries per tile in shared memory,
    then ceil(log2(nnz)) - 8 merge launches of one kernel; the column pointers, the
    gathered rows and values), then the spmm kernel."""
    m = lower(csr_text("spmm_transpose", 7, 5, 9, 300, "f32"))
    names = [o.sym_name.data for o in m.walk() if isinstance(o, tt.KernelOp)]
    assert names == ["f_sparse_sort_local_0", "f_sparse_colptr_0", "f_sparse_gather_0",
                     "f_spmm_transpose_0"]
    launches = [o for o in m.walk() if isinstance(o, tt.LaunchOp)]
    assert launches[-1].grid_value() == (2, 1, 1)  # 5 rows of Aᵀ, 32 lanes (4 rows) a tile
    m = lower(csr_text("spmm_transpose", 7, 5, 3000, 3, "f32"))
    launches = [o.callee.root_reference.data for o in m.walk() if isinstance(o, tt.LaunchOp)]
    assert launches.count("f_sparse_merge_0") == 4  # runs of 256 .. 2048


@pytest.mark.parametrize("op", ["spmm_transpose", "sddmm"])
def test_sparse_integer_is_reported(op):
    with pytest.raises(NotImplementedError, match=rf"tgraph.{op} has no Tile IR lowering "
                                                  r"\(element type i32"):
        lower(csr_text(op, 3, 4, 5, 2, "i32"))


NP_INT = {"i32": np.int32, "i64": np.int64}


# --------------------------------------------------------------------------- ptxas

PTX_PROGRAMS = {
    "complex-parts-f32": parts_text((3, 7), "f32"),
    "complex-parts-f64": parts_text((2, 5), "f64"),
    "triangular-solve-lower-f64": trisolve_text((2, 7, 7), (2, 7, 3), "f64", False, False),
    "triangular-solve-upper-transposed-f32": trisolve_text((9, 9), (9, 300), "f32", True, True),
    "triangular-solve-blocked-f32": trisolve_text((2, 300, 300), (2, 300, 65), "f32", True, False),
    "triangular-solve-blocked-f64": trisolve_text((97, 97), (97, 5), "f64", False, True),
    "spmm-transpose-f32": csr_text("spmm_transpose", 7, 5, 9, 3, "f32"),
    "spmm-transpose-f64-i64": csr_text("spmm_transpose", 7, 5, 9, 300, "f64", "i64"),
    "sddmm-f32": csr_text("sddmm", 13, 9, 20, 3, "f32"),
    "sddmm-f64-i64": csr_text("sddmm", 13, 9, 300, 5, "f64", "i64"),
}


@pytest.mark.parametrize("name", PTX_PROGRAMS)
def test_kernels_pass_ptxas(name):
    check_ptx(PTX_PROGRAMS[name])


# --------------------------------------------------------------------------- gradients, end to end


def chol_loss(a, c):
    import tessera as ts

    return ts.sum(ts.cholesky(a) * c)


def fft_loss(x, c):
    import tessera as ts

    z = ts.fft(x)
    return ts.sum(ts.real(z) * ts.imag(z) * c)


def spmm_loss(ip, ix, v, d, c):
    import tessera as ts

    return ts.sum(ts.spmm(ip, ix, v, d, sparse_shape=(6, 5)) * c)


def loss_cases() -> dict[str, tuple]:
    rng = np.random.default_rng(11)
    b = rng.standard_normal((7, 7))
    spd = b @ b.T + 7 * np.eye(7)
    indptr = np.array([0, 2, 2, 5, 6, 6, 9], np.int32)
    indices = np.array([0, 3, 1, 2, 4, 4, 0, 0, 3], np.int32)
    return {
        "cholesky": (chol_loss, (spd, rng.standard_normal((7, 7))), 0),
        "fft": (fft_loss, (rng.standard_normal((3, 10)), rng.standard_normal((3, 10))), 0),
        "spmm": (spmm_loss, (indptr, indices, rng.standard_normal(9),
                             rng.standard_normal((5, 3)), rng.standard_normal((6, 3))), (2, 3)),
    }


LOSS_OPS = {"cholesky": "tgraph.triangular_solve", "fft": "tgraph.complex",
            "spmm": "tgraph.sddmm"}


@pytest.mark.parametrize("name", ["cholesky", "fft", "spmm"])
def test_gradients_lower_and_run_on_the_tile_interpreter(name):
    import tessera as ts

    f, args, argnums = loss_cases()[name]
    spec = ts.grad(f, argnums=argnums).specialize(*args)
    graph = spec.ir("graph")
    assert LOSS_OPS[name] in {o.name for o in graph.walk()}
    want = run_function(graph, spec.name, list(args))
    tile = spec.ir("tile")
    assert not [o for o in tile.walk() if o.name.startswith("tgraph.")]
    got = run_host(tile, spec.name, list(args))
    assert len(got) == len(want)
    for x, y in zip(got, want):
        assert x.shape == y.shape
        assert np.abs(x - y).max() <= 1e-12 * max(1.0, np.abs(y).max())
