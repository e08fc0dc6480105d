"""Cholesky factors, triangular solves and singular values through
``torch.compile(backend="tessera")`` on the CPU reference, against eager torch in
float64: ``linalg.cholesky`` (and its ``info``, and torch's own error for a matrix that
is not positive definite), the deprecated ``torch.cholesky`` and
``torch.triangular_solve``, ``linalg.solve_triangular`` in every form, ``svdvals``, the
gradients AOTAutograd derives, and the sizes left to torch."""

from __future__ import annotations

import pytest
import torch

import tessera.torch as tt
from tessera.errors import TesseraError
from tessera.torch import rules_linalg


def _spd(*shape: int, dtype=torch.float64, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    b = torch.randn(*shape, generator=g, dtype=torch.float64)
    n = shape[-1]
    return (b @ b.mT / n + torch.eye(n, dtype=torch.float64)).to(dtype)


def _no_fallback():
    rep = tt.last_report()
    assert not rep.fallback_ops, str(rep)
    return rep


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    assert got.dtype == want.dtype and got.shape == want.shape
    assert float((got.double() - want.double()).abs().max()) <= tol * max(1.0, float(want.abs().max()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,upper", [((6, 6), False), ((3, 5, 5), True), ((2, 2, 70, 70), False)])
def test_linalg_cholesky_matches_torch(shape, upper, dtype):
    a = _spd(*shape, dtype=dtype)
    # the triangle torch does not read holds garbage: it must not matter
    junk = torch.randn(*shape, dtype=dtype).triu(1)
    a_in = a + (junk.mT if upper else junk)
    f = tt.compile(lambda x: torch.linalg.cholesky(x, upper=upper) * 2.0)
    got = f(a_in)
    _no_fallback()
    want = torch.linalg.cholesky(a_in.double(), upper=upper) * 2.0
    _close(got, want.to(dtype), dtype)
    tri = got.triu(1) if not upper else got.tril(-1)
    assert bool((tri == 0).all())


def test_cholesky_ex_info_is_torchs():
    a = _spd(4, 6, 6)
    a[1, 3, 3] = -10.0  # the leading minor of order 4 is not positive definite
    a[2, 0, 0] = -1.0  # order 1
    f = tt.compile(lambda x: torch.linalg.cholesky_ex(x).info + 0)
    got = f(a)
    _no_fallback()
    want = torch.linalg.cholesky_ex(a).info
    assert got.dtype == torch.int32 and torch.equal(got, want), (got, want)
    assert want.tolist() == [0, 4, 1, 0]


def test_linalg_cholesky_not_positive_definite_raises_torchs_error():
    a = _spd(5, 5)
    a[2, 2] = -3.0
    f = tt.compile(lambda x: torch.linalg.cholesky(x) + 1.0)
    with pytest.raises(torch.linalg.LinAlgError, match="minor of order 3"):
        torch.linalg.cholesky(a)
    # torch's own check of the info Tessera computed
    with pytest.raises(torch.linalg.LinAlgError, match="minor of order 3"):
        f(a)


@pytest.mark.skipif(not hasattr(torch.ops.aten, "cholesky"), reason="torch.cholesky removed")
def test_deprecated_cholesky_raises_where_torch_raises():
    f = tt.compile(lambda x: torch.cholesky(x) + 1.0)
    a = _spd(3, 7, 7)
    _close(f(a), torch.cholesky(a) + 1.0, torch.float64)
    _no_fallback()
    a[1, 5, 5] = -100.0
    with pytest.raises(TesseraError, match="not positive-definite"):
        f(a)


def test_empty_matrices():
    a = torch.empty(3, 0, 0, dtype=torch.float64)
    f = tt.compile(lambda x: torch.linalg.cholesky_ex(x))
    l_, info = f(a)
    assert l_.shape == (3, 0, 0) and torch.equal(info, torch.zeros(3, dtype=torch.int32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("upper,left,unit", [(False, True, False), (True, True, False),
                                             (False, False, False), (True, False, True),
                                             (False, True, True)])
def test_solve_triangular_matches_torch(upper, left, unit, dtype):
    g = torch.Generator().manual_seed(1)
    n, k = 9, 4
    a = torch.randn(2, 1, n, n, generator=g, dtype=torch.float64)
    a = a + 4 * torch.eye(n, dtype=torch.float64)  # well conditioned on both triangles
    b = torch.randn(3, n, k, generator=g, dtype=torch.float64) if left else \
        torch.randn(3, k, n, generator=g, dtype=torch.float64)  # batch dims broadcast
    a, b = a.to(dtype), b.to(dtype)

    def fn(x, y):
        return torch.linalg.solve_triangular(x, y, upper=upper, left=left, unitriangular=unit)

    got = tt.compile(fn)(a, b)
    _no_fallback()
    _close(got, fn(a.double(), b.double()).to(dtype), dtype)


@pytest.mark.parametrize("upper,transpose,unit", [(True, False, False), (False, True, False),
                                                  (True, True, True)])
def test_deprecated_triangular_solve(upper, transpose, unit):
    g = torch.Generator().manual_seed(2)
    a = torch.randn(2, 6, 6, generator=g, dtype=torch.float64) + 3 * torch.eye(6, dtype=torch.float64)
    b = torch.randn(2, 6, 3, generator=g, dtype=torch.float64)

    def fn(y, x):
        sol, coef = torch.triangular_solve(y, x, upper=upper, transpose=transpose,
                                           unitriangular=unit)
        return sol * 1.0, coef * 1.0

    got = tt.compile(fn)(b, a)
    _no_fallback()
    for g_, w in zip(got, fn(b, a), strict=True):
        _close(g_, w, torch.float64)


def test_gradients_through_cholesky_and_solve():
    """AOTAutograd's backward of ``linalg.cholesky`` solves with ``solve_triangular``."""
    a0 = _spd(3, 8, 8)
    b0 = torch.randn(3, 8, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(3))

    def loss(a, b):
        l_ = torch.linalg.cholesky(a)
        x = torch.linalg.solve_triangular(l_, b, upper=False)
        return l_.sum() + (x * x).sum()

    grads = []
    for fn in (loss, tt.compile(loss)):
        a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
        fn(a, b).backward()
        grads.append((a.grad, b.grad))
    for g_, w in zip(grads[1], grads[0], strict=True):
        _close(g_, w, torch.float64)


def test_batches_of_larger_matrices_take_tesseras_factor():
    """Past CHOLESKY_MAX_N rows, a batch of CHOLESKY_BATCHED_MIN matrices is factored by
    Tessera (the batched blocked kernels beat cuSOLVER there), a single matrix by torch."""
    n = rules_linalg.CHOLESKY_MAX_N + 1
    a = _spd(rules_linalg.CHOLESKY_BATCHED_MIN, n, n)
    got = tt.compile(lambda x: torch.linalg.cholesky(x) * 1.0)(a)
    _no_fallback()
    _close(got, torch.linalg.cholesky(a), torch.float64)
    tt.compile(lambda x: torch.linalg.cholesky(x) * 1.0)(a[0])
    rep = tt.last_report()
    why = rep.graphs[-1].fallback_reasons.get("aten.linalg_cholesky_ex.default", "")
    assert why.startswith("1 matrix of 65 x 65 (a single matrix"), (str(rep), why)


def test_svdvals_matches_torch():
    a = torch.randn(4, 7, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    got = tt.compile(lambda x: torch.linalg.svdvals(x) * 1.0)(a)
    _no_fallback()
    _close(got, torch.linalg.svdvals(a), torch.float64)


def test_large_matrices_stay_with_torch_and_are_reported():
    n = rules_linalg.CHOLESKY_MAX_N + 1
    a = _spd(n, n)
    got = tt.compile(lambda x: torch.linalg.cholesky(x) * 1.0)(a)
    assert torch.equal(got, torch.linalg.cholesky(a))
    rep = tt.last_report()
    assert "aten.linalg_cholesky_ex.default" in str(rep), str(rep)
    n = rules_linalg.CHOLESKY_BATCHED_MAX_N + 1
    a = _spd(rules_linalg.CHOLESKY_BATCHED_MIN, n, n)
    tt.compile(lambda x: torch.linalg.cholesky(x) * 1.0)(a)
    assert "aten.linalg_cholesky_ex.default" in str(tt.last_report())
    m = rules_linalg.SOLVE_MAX_N + 1
    t = torch.eye(m, dtype=torch.float64) * 2
    tt.compile(lambda x, y: torch.linalg.solve_triangular(x, y, upper=True) * 1.0)(t, t)
    assert "aten.linalg_solve_triangular.default" in str(tt.last_report())
