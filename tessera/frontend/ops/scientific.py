"""Scientific operator functions: FFTs, ``cholesky``, ``svd``, ``spmm`` (and its adjoints
``spmm_transpose`` and ``sddmm``), complex parts,
``triangular_solve`` and the random samplers."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from xdsl.dialects.builtin import (
    ComplexType,
    IntegerAttr,
    TensorType,
    UnitAttr,
    f32,
    f64,
    i64,
)
from xdsl.ir import Attribute

from tessera.frontend.errors import ShapeError, TesseraTypeError, located
from tessera.frontend.ops.base import (
    _check_same_elem,
    _dense_props,
    _emit,
    _int,
    _operands,
    _policy,
    _shape,
    _tensor_arg,
)
from tessera.frontend.tracing import TracedTensor, current_trace, result_type
from tessera.ir import graph as g
from tessera.ir.attrs import tensor_type
from tessera.ir.dtypes import fp32

# --------------------------------------------------------------------------- scientific ops


def _complex_type(x: TracedTensor, opname: str) -> Attribute:
    el = x.type.element_type
    if isinstance(el, ComplexType):
        return el
    if el in (f32, f64):
        return ComplexType(el)
    raise TesseraTypeError(located(f"{opname}: needs f32, f64 or complex input, got {el}"))


def _check_fft_size(x: TracedTensor, opname: str, ndims: int) -> None:
    if x.ndim >= ndims and 0 in x.shape[-ndims:]:
        raise ShapeError(
            located(f"{opname} of {g.fmt_shape(x.shape)}: a transform of 0 points is undefined")
        )


def fft(x: Any, *, inverse: bool = False) -> TracedTensor:
    """Discrete Fourier transform along the last dim (complex result)."""
    x = _tensor_arg(x, "fft")
    _check_fft_size(x, "fft", 1)
    rt = TensorType(_complex_type(x, "fft"), list(x.shape))
    return _emit(
        g.FFTOp, x.trace, operands=[x.value], result_types=[rt],
        properties={"inverse": UnitAttr()} if inverse else {},
    )


def ifft(x: Any) -> TracedTensor:
    """Inverse DFT along the last dim (normalized by 1/n)."""
    return fft(x, inverse=True)


def fft2d(x: Any, *, inverse: bool = False) -> TracedTensor:
    """2-D DFT over the last two dims (complex result)."""
    x = _tensor_arg(x, "fft2d")
    _check_fft_size(x, "fft2d", 2)
    rt = TensorType(_complex_type(x, "fft2d"), list(x.shape))
    return _emit(
        g.FFT2dOp, x.trace, operands=[x.value], result_types=[rt],
        properties={"inverse": UnitAttr()} if inverse else {},
    )


def ifft2d(x: Any) -> TracedTensor:
    """Inverse 2-D DFT (normalized)."""
    return fft2d(x, inverse=True)


def cholesky(x: Any) -> TracedTensor:
    """Lower Cholesky factor of symmetric positive-definite matrices [..., n, n]."""
    x = _tensor_arg(x, "cholesky")
    return _emit(g.CholeskyOp, x.trace, operands=[x.value], result_types=[x.type])


def svd(x: Any) -> tuple[TracedTensor, TracedTensor, TracedTensor]:
    """Reduced SVD: returns (U, S, Vh) with ``x = U diag(S) Vh``."""
    x = _tensor_arg(x, "svd")
    if x.ndim < 2:
        raise ShapeError(located(f"svd needs rank >= 2, got {g.fmt_shape(x.shape)}"))
    *b, m, n = x.shape
    k = builtins.min(m, n)
    op = x.trace.add(
        g.SVDOp.build(
            operands=[x.value],
            result_types=[
                result_type((*b, m, k), x.type),
                result_type((*b, k), x.type),
                result_type((*b, k, n), x.type),
            ],
        )
    )
    u, s, vh = (TracedTensor(r, x.trace) for r in op.results)
    return u, s, vh


def spmm(
    indptr: Any, indices: Any, values: Any, dense: Any, sparse_shape: Sequence[int]
) -> TracedTensor:
    """CSR sparse [M, K] (``indptr``, ``indices``, ``values``) times ``dense`` [K, N]."""
    ts_ = _operands("spmm", indptr, indices, values, dense)
    dims = _shape(sparse_shape, "spmm sparse_shape")
    if len(dims) != 2:
        raise ShapeError(located(f"spmm sparse_shape must be [M, K], got {dims}"))
    m = dims[0]
    d = ts_[3]
    shape = (m, d.shape[1] if d.ndim == 2 else 0)
    return _emit(
        g.SpMMOp,
        d.trace,
        operands=[t.value for t in ts_],
        result_types=[result_type(shape, d.type)],
        properties=_dense_props("sparse_shape", sparse_shape),
    )


def spmm_transpose(
    indptr: Any, indices: Any, values: Any, dense: Any, sparse_shape: Sequence[int]
) -> TracedTensor:
    """``Aᵀ @ dense`` for CSR A [M, K] (``indptr``, ``indices``, ``values``) and ``dense``
    [M, N] -> [K, N] (the adjoint of ``spmm`` in its dense operand)."""
    ts_ = _operands("spmm_transpose", indptr, indices, values, dense)
    dims = _shape(sparse_shape, "spmm_transpose sparse_shape")
    if len(dims) != 2:
        raise ShapeError(located(f"spmm_transpose sparse_shape must be [M, K], got {dims}"))
    d = ts_[3]
    if d.ndim != 2 or d.shape[0] != dims[0]:
        raise ShapeError(located(
            f"spmm_transpose: dense has shape {g.fmt_shape(d.shape)}, expected [{dims[0]}, N]"))
    return _emit(
        g.SpMMTransposeOp,
        d.trace,
        operands=[t.value for t in ts_],
        result_types=[result_type((dims[1], d.shape[1]), d.type)],
        properties=_dense_props("sparse_shape", sparse_shape),
    )


def sddmm(
    indptr: Any, indices: Any, lhs: Any, rhs: Any, sparse_shape: Sequence[int]
) -> TracedTensor:
    """Sampled dense-dense product: ``out[p] = sum_n lhs[i, n] * rhs[indices[p], n]`` for
    each stored entry ``p`` (row ``i``) of the CSR pattern (``indptr``, ``indices``) of an
    [M, K] matrix; ``lhs`` [M, N], ``rhs`` [K, N] -> [nnz] (``(lhs @ rhsᵀ)`` at the
    pattern; the adjoint of ``spmm`` in its values)."""
    ts_ = _operands("sddmm", indptr, indices, lhs, rhs)
    dims = _shape(sparse_shape, "sddmm sparse_shape")
    if len(dims) != 2:
        raise ShapeError(located(f"sddmm sparse_shape must be [M, K], got {dims}"))
    a, b, ix = ts_[2], ts_[3], ts_[1]
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != dims[0] or b.shape != (dims[1], a.shape[1]):
        raise ShapeError(located(
            f"sddmm: lhs {g.fmt_shape(a.shape)} and rhs {g.fmt_shape(b.shape)} must be "
            f"[{dims[0]}, N] and [{dims[1]}, N]"))
    return _emit(
        g.SDDMMOp,
        a.trace,
        operands=[t.value for t in ts_],
        result_types=[result_type(tuple(ix.shape[:1]), a.type)],
        properties=_dense_props("sparse_shape", sparse_shape),
    )


# --------------------------------------------------------------------------- complex parts, triangular solve


def _complex_part(opcls: type[g.IRDLOperation], opname: str, x: Any) -> TracedTensor:
    x = _tensor_arg(x, opname)
    el = x.type.element_type
    if not isinstance(el, ComplexType):
        raise TesseraTypeError(located(f"{opname}: needs a complex tensor, got {el}"))
    return _emit(
        opcls, x.trace, operands=[x.value], result_types=[TensorType(el.element_type, list(x.shape))]
    )


def real(x: Any) -> TracedTensor:
    """Real part of a complex tensor (``complex<f32>`` -> ``f32``)."""
    return _complex_part(g.RealOp, "real", x)


def imag(x: Any) -> TracedTensor:
    """Imaginary part of a complex tensor (``complex<f32>`` -> ``f32``)."""
    return _complex_part(g.ImagOp, "imag", x)


def complex(re: Any, im: Any) -> TracedTensor:  # noqa: A001
    """``re + i * im`` from two f32 (or f64) tensors of one shape."""
    a, b = _operands("complex", re, im)
    _check_same_elem("complex", a, b)
    el = a.type.element_type
    if el not in (f32, f64):
        raise TesseraTypeError(located(f"complex: needs f32 or f64 parts, got {el}"))
    if tuple(a.shape) != tuple(b.shape):
        raise ShapeError(
            located(f"complex: parts have shapes {g.fmt_shape(a.shape)} and {g.fmt_shape(b.shape)}")
        )
    return _emit(
        g.ComplexOp,
        a.trace,
        operands=[a.value, b.value],
        result_types=[TensorType(ComplexType(el), list(a.shape))],
    )


def triangular_solve(
    a: Any, b: Any, *, upper: bool = False, transpose_a: bool = False
) -> TracedTensor:
    """Solve ``op(A) X = B`` for triangular A [..., n, n] and B [..., n, k]
    (``op(A) = Aᵀ`` with ``transpose_a``); only A's lower (or ``upper``) triangle is read."""
    x, y = _operands("triangular_solve", a, b)
    _check_same_elem("triangular_solve", x, y)
    sa, sb = tuple(x.shape), tuple(y.shape)
    if len(sa) < 2 or sa[-1] != sa[-2] or len(sb) != len(sa) or sb[-2] != sa[-1] or sa[:-2] != sb[:-2]:
        raise ShapeError(
            located(
                f"triangular_solve needs A [..., n, n] and B [..., n, k] with one batch shape, "
                f"got {g.fmt_shape(sa)} and {g.fmt_shape(sb)}"
            )
        )
    props: dict[str, Attribute] = {}
    if upper:
        props["upper"] = UnitAttr()
    if transpose_a:
        props["transpose_a"] = UnitAttr()
    return _emit(
        g.TriangularSolveOp,
        x.trace,
        operands=[x.value, y.value],
        result_types=[y.type],
        properties=props,
    )


# --------------------------------------------------------------------------- random


def randn(
    shape: Sequence[int], dtype: Any = fp32, *, seed: int = 0, offset: int | None = None
) -> TracedTensor:
    """Standard-normal samples; ``(seed, offset)`` fix the stream (offset defaults to a
    per-function counter, so two calls give different values)."""
    trace = current_trace("randn")
    pol = _policy(dtype, "randn")
    off = trace.next_seed() if offset is None else _int(offset, "randn offset")
    return _emit(
        g.RandnOp,
        trace,
        result_types=[tensor_type(_shape(shape, "randn shape"), pol)],
        properties={
            "seed": IntegerAttr(_int(seed, "randn seed"), i64), "offset": IntegerAttr(off, i64)
        },
    )


def poisson(lam: Any, *, seed: int = 0, offset: int | None = None) -> TracedTensor:
    """Poisson samples with rates ``lam`` (result has ``lam``'s type)."""
    x = _tensor_arg(lam, "poisson", "lam")
    off = x.trace.next_seed() if offset is None else _int(offset, "poisson offset")
    return _emit(
        g.PoissonOp,
        x.trace,
        operands=[x.value],
        result_types=[x.type],
        properties={
            "seed": IntegerAttr(_int(seed, "poisson seed"), i64), "offset": IntegerAttr(off, i64)
        },
    )


