"""Elementwise functions on Python numbers fold at trace time (the guide's ``ts.sqrt(2 * ts.pi)``)."""

import math

import numpy as np
import pytest

import tessera as ts
from tessera.frontend.errors import TesseraTypeError


def test_unary_functions_fold_python_numbers():
    assert ts.sqrt(2 * ts.pi) == pytest.approx(math.sqrt(2 * math.pi))
    assert ts.exp(1.0) == pytest.approx(math.e)
    assert ts.tanh(0.5) == pytest.approx(math.tanh(0.5))
    with pytest.raises(TesseraTypeError, match=r"sqrt\(-1.0\)"):
        ts.sqrt(-1.0)


def test_guide_gaussian_pdf_traces_with_folded_constant():
    @ts.jit
    def pdf(x):
        return ts.exp(-0.5 * x**2) / ts.sqrt(2 * ts.pi)

    x = np.random.default_rng(3).standard_normal(37).astype(np.float32)
    want = np.exp(-0.5 * x.astype(np.float64) ** 2) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(pdf(x), want, rtol=1e-6, atol=1e-7)
    assert "tgraph.sqrt" not in pdf.inspect_ir("graph")
