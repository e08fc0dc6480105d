"""ATen rules: Cholesky factors, triangular solves and singular values.

``torch.linalg.cholesky`` reaches the backend as ``linalg_cholesky_ex`` (the factor and
``info``) followed by torch's own ``_linalg_check_errors`` of ``info``, which stays in
torch; ``linalg_solve_triangular`` is also what AOTAutograd's Cholesky backward solves
with. f32 and f64 only (Tessera's factorizations; torch has no 16-bit ones).

The rules register themselves in :data:`tessera.torch.aten_ops.RULES` when this
module is imported (``aten_ops`` imports it).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import torch
import torch.fx

from tessera.frontend import ops
from tessera.torch.aten_ops import (
    TracedTensor,
    Unsupported,
    fail_at_run_time_if,
    only_outputs,
    out_dtype,
    rule,
    to,
    torch_dtype,
    ts_dtype,
    val,
)

aten = torch.ops.aten

LINALG_DTYPES = (torch.float32, torch.float64)

CHOLESKY_MAX_N = 64
"""A single matrix larger than this (the one-tile kernel's limit) stays with torch
(cuSOLVER): Tessera's blocked factor measured 0.51-0.77x cuSOLVER for one matrix of 80
to 16384 rows (docs/PERFORMANCE.md, H200, 2026-12-03)."""

CHOLESKY_BATCHED_MAX_N = 2048
"""Batches of at least :data:`CHOLESKY_BATCHED_MIN` matrices up to this size take
Tessera's factor: 1.6-2.5x cuSOLVER from 2 x 512² to 4 x 2048², 2.09x for 256 x 128²
(same run; larger batched matrices were not measured)."""

CHOLESKY_BATCHED_MIN = 2

SOLVE_MAX_N = 128
"""Larger triangles stay with torch (cuBLAS ``trsm``): Tessera's blocked solve
(``tile_triangular_blocked``) measured 0.72-0.84x for 16 triangles of 512 rows and
0.10-0.50x for one of 4096 (docs/PERFORMANCE.md, H200, 2026-12-03)."""


SVD_MAX_N = 256
"""Larger matrices stay with torch (cuSOLVER): Tessera's Jacobi SVD is faster for
batches of matrices up to 256 x 256, slower from 700 x 1024 on (docs/PERFORMANCE.md)."""


def _linalg_only(node: torch.fx.Node, max_n: int | None = None, arg: int = 0) -> str | None:
    """f32/f64 matrices (the dtype of input ``arg``) of at most ``max_n`` rows."""
    x = node.args[arg]
    v = val(x) if isinstance(x, torch.fx.Node) else None
    if v is None or v.dtype not in LINALG_DTYPES:
        return f"{None if v is None else v.dtype} matrices (f32 and f64 only)"
    if max_n is not None and v.ndim >= 2 and v.shape[-1] > max_n:
        return f"{v.shape[-1]} x {v.shape[-1]} matrices (more than {max_n} rows stay with torch)"
    return None


def _cholesky_check(node: torch.fx.Node) -> str | None:
    bad = _linalg_only(node)
    if bad:
        return bad
    v = val(node.args[0])
    n, batch = v.shape[-1], int(np.prod(v.shape[:-2])) if v.ndim > 2 else 1
    if n <= CHOLESKY_MAX_N or (batch >= CHOLESKY_BATCHED_MIN and n <= CHOLESKY_BATCHED_MAX_N):
        return None
    return (f"{batch} matrix of {n} x {n}" if batch == 1 else f"{batch} matrices of {n} x {n}") + (
        f" (a single matrix of more than {CHOLESKY_MAX_N} rows, or batched ones of more than "
        f"{CHOLESKY_BATCHED_MAX_N}, stay with torch)")


def _eye(n: int) -> TracedTensor:
    """The ``n x n`` identity as a mask, from two ``n``-element index constants (not an
    ``n * n`` one)."""
    i32 = ts_dtype(torch.int32)
    idx = np.arange(n, dtype=np.int32)
    return ops.eq(ops.constant(idx.reshape(n, 1), i32), ops.constant(idx.reshape(1, n), i32))


def _factor(a: TracedTensor, upper: bool) -> TracedTensor:
    """torch's factor: the lower one reads A's lower triangle; ``upper`` reads its upper
    triangle and returns ``U = L^T``."""
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise Unsupported(f"cholesky of a {list(a.shape)} tensor (square matrices only)")
    return ops.transpose(ops.cholesky(ops.transpose(a))) if upper else ops.cholesky(a)


def _info(f: TracedTensor) -> TracedTensor:
    """LAPACK's ``info`` of a factor (int32, one per matrix): 0, or the order of the
    first leading minor that is not positive definite. Tessera's factor is NaN from that
    column on, its first NaN pivot."""
    n = f.shape[-1]
    if n == 0 or 0 in f.shape:
        return ops.broadcast_to(to(0, torch.int32), list(f.shape[:-2]))
    diag = ops.sum(ops.where(_eye(n), f, to(0.0, torch_dtype(f))), axis=-1)
    order = ops.constant(np.arange(1, n + 1, dtype=np.int32), ts_dtype(torch.int32))
    first = ops.min(ops.where(ops.ne(diag, diag), order, to(n + 1, torch.int32)), axis=-1)
    return ops.where(ops.eq(first, to(n + 1, torch.int32)), to(0, torch.int32), first)


def _not_pd_message(name: str) -> str:
    return (f"{name}: The factorization could not be completed because the input is not "
            "positive-definite")


@rule(aten.linalg_cholesky_ex.default, check=_cholesky_check)
def _linalg_cholesky_ex(
    node: torch.fx.Node, a: Any, upper: bool = False, check_errors: bool = False
) -> tuple[TracedTensor, TracedTensor]:
    f = _factor(a, bool(upper))
    used = {u.args[1] for u in node.users if u.target is operator.getitem}
    if not check_errors and 1 not in used:
        return f, f  # info unused: not computed
    info = _info(f)
    if check_errors:
        fail_at_run_time_if(ops.ne(info, to(0, torch.int32)), _not_pd_message("linalg.cholesky"))
    return f, info


def _cholesky(node: torch.fx.Node, a: Any, upper: bool = False) -> TracedTensor:
    """The deprecated ``torch.cholesky``: raises where the matrix is not positive definite."""
    f = _factor(a, bool(upper))
    fail_at_run_time_if(ops.ne(_info(f), to(0, torch.int32)), _not_pd_message("cholesky"))
    return f


if hasattr(aten, "cholesky"):  # removed in torch 2.14, with torch.cholesky
    rule(aten.cholesky.default, check=_cholesky_check)(_cholesky)


def _solve(a: TracedTensor, b: TracedTensor, *, upper: bool, left: bool,
           unitriangular: bool) -> TracedTensor:
    """``X`` of ``A X = B`` (``left``) or ``X A = B``, batch dims broadcast as torch's."""
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise Unsupported(f"a triangular solve of {list(a.shape)} and {list(b.shape)}")
    if unitriangular:
        a = ops.where(_eye(a.shape[-1]), to(1.0, torch_dtype(a)), a)
    batch = list(torch.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2])))
    a = ops.broadcast_to(a, [*batch, *a.shape[-2:]]) if list(a.shape[:-2]) != batch else a
    b = ops.broadcast_to(b, [*batch, *b.shape[-2:]]) if list(b.shape[:-2]) != batch else b
    if left:
        return ops.triangular_solve(a, b, upper=upper)
    # X A = B  <=>  A^T X^T = B^T
    return ops.transpose(ops.triangular_solve(a, ops.transpose(b), upper=upper, transpose_a=True))


def _solve_check(node: torch.fx.Node) -> str | None:
    bad = _linalg_only(node, SOLVE_MAX_N)
    if bad:
        return bad
    b = node.args[1]
    return None if val(b).dtype == val(node.args[0]).dtype else "mixed dtypes"


@rule(aten.linalg_solve_triangular.default, check=_solve_check)
def _linalg_solve_triangular(
    node: torch.fx.Node, a: Any, b: Any, *, upper: bool, left: bool = True,
    unitriangular: bool = False,
) -> TracedTensor:
    return _solve(a, b, upper=bool(upper), left=bool(left), unitriangular=bool(unitriangular))


def _legacy_solve_check(node: torch.fx.Node) -> str | None:
    """``torch.triangular_solve(b, A)``: B first."""
    b, a = node.args[0], node.args[1]
    if val(b).dtype != val(a).dtype:
        return "mixed dtypes"
    return _linalg_only(node, SOLVE_MAX_N, arg=1)


@rule(aten.triangular_solve.default, check=_legacy_solve_check)
def _triangular_solve(
    node: torch.fx.Node, b: Any, a: Any, upper: bool = True, transpose: bool = False,
    unitriangular: bool = False,
) -> tuple[TracedTensor, TracedTensor]:
    """The deprecated ``torch.triangular_solve``: ``(X, A)`` with ``op(A) X = B``."""
    if transpose:
        x = ops.transpose(_solve(a, ops.transpose(b), upper=bool(upper), left=False, unitriangular=bool(unitriangular)))
    else:
        x = _solve(a, b, upper=bool(upper), left=True, unitriangular=bool(unitriangular))
    ca = a
    batch = list(val(node)[1].shape)
    if list(a.shape) != batch:
        ca = ops.broadcast_to(a, batch)
    return x, ca


def _svdvals_check(node: torch.fx.Node) -> str | None:
    bad = _linalg_only(node)
    if bad:
        return bad
    if max(val(node.args[0]).shape[-2:], default=0) > SVD_MAX_N:
        return f"matrices of more than {SVD_MAX_N} rows or columns stay with torch"
    # singular vectors are unique only up to signs (and rotations of equal values):
    # Tessera's Jacobi vectors need not be LAPACK's, so only the values are taken
    # (``linalg.svdvals`` asks for the vectors too when its input requires grad)
    return only_outputs(1)(node) and "singular vectors"


@rule(aten._linalg_svd.default, check=_svdvals_check)
def _linalg_svd(
    node: torch.fx.Node, a: Any, full_matrices: bool = False, compute_uv: bool = True,
    driver: Any = None,
) -> tuple[TracedTensor, TracedTensor, TracedTensor]:
    """The singular values (``torch.linalg.svdvals``), descending; U and Vh are unused."""
    if a.ndim < 2 or 0 in a.shape[-2:]:
        raise Unsupported(f"svd of a {list(a.shape)} tensor")
    _, s, _ = ops.svd(a)
    s = to(s, out_dtype(node, 1))
    return s, s, s
