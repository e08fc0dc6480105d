"""``tgraph`` scientific ops: FFTs, ``cholesky``, ``svd``, sparse products, random samplers and
the ops their derivatives use (complex parts, triangular solve, ``spmm_transpose``, ``sddmm``)."""

from __future__ import annotations

from abc import ABC
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    ComplexType,
    DenseArrayBase,
    IntegerAttr,
    IntegerType,
    UnitAttr,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from tessera.ir.graph.base import (
    _FN,
    TensorT,
    _check_same_elem,
    _check_shape,
    _is_float,
    elem_of,
    fmt_shape,
    shape_of,
)

# --------------------------------------------------------------------------- scientific ops


class _FFTBase(IRDLOperation, ABC):
    input = operand_def(TensorT)
    inverse = opt_prop_def(UnitAttr)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input (`inverse` $inverse^)? " + _FN
    NDIMS: ClassVar[int] = 1

    def verify_(self) -> None:
        s = shape_of(self.input)
        if len(s) < self.NDIMS:
            raise VerifyException(f"{self.name}: needs rank >= {self.NDIMS}")
        _check_shape(self, "result", shape_of(self.result), s)
        if not isinstance(elem_of(self.result), ComplexType):
            raise VerifyException(f"{self.name}: result must be complex")


@irdl_op_definition
class FFTOp(_FFTBase):
    """Discrete Fourier transform along the last dimension; ``inverse`` for the inverse
    (normalized by 1/n). The result is complex."""

    name = "tgraph.fft"


@irdl_op_definition
class FFT2dOp(_FFTBase):
    """2-D discrete Fourier transform over the last two dimensions (complex result)."""

    name = "tgraph.fft2d"
    NDIMS: ClassVar[int] = 2


@irdl_op_definition
class CholeskyOp(IRDLOperation):
    """Lower Cholesky factor L (A = L Lᵀ) of symmetric positive-definite [..., n, n]."""

    name = "tgraph.cholesky"
    input = operand_def(TensorT)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input " + _FN

    def verify_(self) -> None:
        s = shape_of(self.input)
        if len(s) < 2 or s[-1] != s[-2]:
            raise VerifyException(f"{self.name}: needs square matrices, got {fmt_shape(s)}")
        _check_same_elem(self, self.input, self.result)
        _check_shape(self, "result", shape_of(self.result), s)


@irdl_op_definition
class SVDOp(IRDLOperation):
    """Reduced SVD: A [..., m, n] = U [..., m, k] diag(S [..., k]) Vh [..., k, n], k = min(m, n)."""

    name = "tgraph.svd"
    input = operand_def(TensorT)
    u = result_def(TensorT)
    s = result_def(TensorT)
    vh = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input " + _FN

    def verify_(self) -> None:
        a = shape_of(self.input)
        if len(a) < 2:
            raise VerifyException(f"{self.name}: needs rank >= 2, got {fmt_shape(a)}")
        *b, m, n = a
        k = min(m, n)
        _check_same_elem(self, self.input, self.u, self.s, self.vh)
        _check_shape(self, "U", shape_of(self.u), (*b, m, k))
        _check_shape(self, "S", shape_of(self.s), (*b, k))
        _check_shape(self, "Vh", shape_of(self.vh), (*b, k, n))


class _SpMMBase(IRDLOperation):
    """Operands, syntax and checks shared by ``tgraph.spmm`` and ``tgraph.spmm_transpose``:
    A [M, K] in CSR (``indptr`` [M+1], ``indices`` [nnz], ``values`` [nnz],
    ``sparse_shape = [M, K]``) times a dense matrix, A or Aᵀ as ``TRANSPOSED`` says."""

    TRANSPOSED: ClassVar[bool] = False
    indptr = operand_def(TensorT)
    indices = operand_def(TensorT)
    values = operand_def(TensorT)
    dense = operand_def(TensorT)
    sparse_shape = prop_def(DenseArrayBase[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = (
        "$indptr `,` $indices `,` $values `,` $dense `sparse_shape` `=` $sparse_shape " + _FN
    )

    def verify_(self) -> None:
        m, k, nnz = _check_csr(self, self.indptr, self.indices, self.sparse_shape)
        rows, cols = (k, m) if self.TRANSPOSED else (m, k)  # of op(A)
        _check_shape(self, "values", shape_of(self.values), (nnz,))
        d = shape_of(self.dense)
        if len(d) != 2 or d[0] != cols:
            raise VerifyException(
                f"{self.name}: dense operand has shape {fmt_shape(d)}, expected [{cols}, N]"
            )
        _check_same_elem(self, self.values, self.dense, self.result)
        _check_shape(self, "result", shape_of(self.result), (rows, d[1]))


@irdl_op_definition
class SpMMOp(_SpMMBase):
    """Sparse (CSR) × dense: A [M, K] given by ``indptr`` [M+1], ``indices`` [nnz] and
    ``values`` [nnz], times ``dense`` [K, N] -> [M, N]. ``sparse_shape = [M, K]``."""

    name = "tgraph.spmm"


# --------------------------------------------------------------------------- random


@irdl_op_definition
class RandnOp(IRDLOperation):
    """Standard-normal samples of the result type from a counter-based stream.
    ``seed`` and ``offset`` fix the stream, so the same op gives the same values."""

    name = "tgraph.randn"
    seed = prop_def(IntegerAttr[I64])
    offset = opt_prop_def(IntegerAttr[I64])
    result = result_def(TensorT)
    assembly_format = "`seed` `=` $seed (`offset` `=` $offset^)? attr-dict `:` type($result)"

    def verify_(self) -> None:
        if not _is_float(elem_of(self.result)):
            raise VerifyException(f"{self.name}: result must be floating point")


@irdl_op_definition
class PoissonOp(IRDLOperation):
    """Poisson samples with rates ``lam`` (same shape), from a seeded stream."""

    name = "tgraph.poisson"
    lam = operand_def(TensorT)
    seed = prop_def(IntegerAttr[I64])
    offset = opt_prop_def(IntegerAttr[I64])
    result = result_def(TensorT)
    assembly_format = "$lam `seed` `=` $seed (`offset` `=` $offset^)? " + _FN

    def verify_(self) -> None:
        _check_shape(self, "result", shape_of(self.result), shape_of(self.lam))


# --------------------------------------------------------------------------- derivative support ops
#
# Ops the adjoint rules of the autodiff pass are written with: complex parts
# (fft), triangular solves (cholesky) and the two sparse products that are the
# transposes of spmm. They run on the numpy interpreter and lower to Tile IR
# (tessera/passes/tile_support.py).


class _ComplexPartOp(IRDLOperation, ABC):
    input = operand_def(TensorT)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$input " + _FN

    def verify_(self) -> None:
        el = elem_of(self.input)
        if not isinstance(el, ComplexType):
            raise VerifyException(f"{self.name}: needs a complex operand, got {el}")
        if elem_of(self.result) != el.element_type:
            raise VerifyException(
                f"{self.name}: result element type must be {el.element_type}, got "
                f"{elem_of(self.result)}"
            )
        _check_shape(self, "result", shape_of(self.result), shape_of(self.input))


@irdl_op_definition
class RealOp(_ComplexPartOp):
    """Real part of a complex tensor: ``tensor<.. x complex<fT>>`` -> ``tensor<.. x fT>``."""

    name = "tgraph.real"


@irdl_op_definition
class ImagOp(_ComplexPartOp):
    """Imaginary part of a complex tensor: ``tensor<.. x complex<fT>>`` -> ``tensor<.. x fT>``."""

    name = "tgraph.imag"


@irdl_op_definition
class ComplexOp(IRDLOperation):
    """``real + i * imag`` from two real tensors of one shape and element type ``fT``;
    the result is ``tensor<.. x complex<fT>>``."""

    name = "tgraph.complex"
    real = operand_def(TensorT)
    imag = operand_def(TensorT)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = "$real `,` $imag " + _FN

    def verify_(self) -> None:
        _check_same_elem(self, self.real, self.imag)
        el = elem_of(self.real)
        if not _is_float(el):
            raise VerifyException(f"{self.name}: needs floating-point parts, got {el}")
        _check_shape(self, "imag", shape_of(self.imag), shape_of(self.real))
        _check_shape(self, "result", shape_of(self.result), shape_of(self.real))
        if elem_of(self.result) != ComplexType(el):
            raise VerifyException(
                f"{self.name}: result element type must be {ComplexType(el)}, got "
                f"{elem_of(self.result)}"
            )


@irdl_op_definition
class TriangularSolveOp(IRDLOperation):
    """Solve ``op(A) X = B`` for X with A triangular.

    A: [..., n, n], B: [..., n, k] -> X: [..., n, k], one batch shape for all.
    A is lower triangular unless ``upper``; only that triangle (diagonal
    included) is read. ``transpose_a`` solves with ``Aᵀ`` (``op(A) = Aᵀ``).
    """

    name = "tgraph.triangular_solve"
    a = operand_def(TensorT)
    b = operand_def(TensorT)
    upper = opt_prop_def(UnitAttr)
    transpose_a = opt_prop_def(UnitAttr)
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = (
        "$a `,` $b (`upper` $upper^)? (`transpose_a` $transpose_a^)? " + _FN
    )

    def __init__(
        self,
        a: SSAValue,
        b: SSAValue,
        result_type: Attribute,
        *,
        upper: bool = False,
        transpose_a: bool = False,
    ):
        props: dict[str, Attribute] = {}
        if upper:
            props["upper"] = UnitAttr()
        if transpose_a:
            props["transpose_a"] = UnitAttr()
        super().__init__(operands=[a, b], result_types=[result_type], properties=props)

    def verify_(self) -> None:
        _check_same_elem(self, self.a, self.b, self.result)
        if not _is_float(elem_of(self.a)):
            raise VerifyException(
                f"{self.name}: needs floating-point operands, got {elem_of(self.a)}"
            )
        a, b = shape_of(self.a), shape_of(self.b)
        if len(a) < 2 or a[-1] != a[-2]:
            raise VerifyException(f"{self.name}: A must be square matrices, got {fmt_shape(a)}")
        if len(b) != len(a) or b[-2] != a[-1]:
            raise VerifyException(
                f"{self.name}: B must be [..., {a[-1]}, k] of rank {len(a)}, got {fmt_shape(b)}"
            )
        if a[:-2] != b[:-2]:
            raise VerifyException(
                f"{self.name}: batch dims differ: A {fmt_shape(a[:-2])}, B {fmt_shape(b[:-2])}"
            )
        _check_shape(self, "result", shape_of(self.result), b)


def _check_csr(op: Operation, indptr: SSAValue, indices: SSAValue, sparse_shape: DenseArrayBase) -> tuple[int, int, int]:
    """Check CSR operands as in ``tgraph.spmm`` (A [M, K] by ``indptr`` [M+1] and
    ``indices`` [nnz], ``sparse_shape = [M, K]``); return (M, K, nnz)."""
    vals = list(sparse_shape.get_values())
    if len(vals) != 2 or min(vals) < 0:
        raise VerifyException(f"{op.name}: sparse_shape must be [M, K], got {vals}")
    m, k = vals
    for name, v in (("indptr", indptr), ("indices", indices)):
        if not isinstance(elem_of(v), IntegerType):
            raise VerifyException(f"{op.name}: {name} must be an integer tensor")
    _check_shape(op, "indptr", shape_of(indptr), (m + 1,))
    nnz = shape_of(indices)
    if len(nnz) != 1:
        raise VerifyException(f"{op.name}: indices must be 1-D")
    return m, k, nnz[0]


@irdl_op_definition
class SpMMTransposeOp(_SpMMBase):
    """Transposed sparse (CSR) × dense: ``Aᵀ @ dense`` with A [M, K] given as for
    ``tgraph.spmm`` and ``dense`` [M, N] -> [K, N]. The adjoint of spmm in its
    dense operand."""

    name = "tgraph.spmm_transpose"
    TRANSPOSED: ClassVar[bool] = True


@irdl_op_definition
class SDDMMOp(IRDLOperation):
    """Sampled dense-dense product: for each stored entry ``p`` of the CSR pattern
    (row ``i``, column ``indices[p]``), ``result[p] = sum_n lhs[i, n] * rhs[indices[p], n]``.

    lhs [M, N], rhs [K, N] -> [nnz]. The adjoint of spmm in its values.
    """

    name = "tgraph.sddmm"
    indptr = operand_def(TensorT)
    indices = operand_def(TensorT)
    lhs = operand_def(TensorT)
    rhs = operand_def(TensorT)
    sparse_shape = prop_def(DenseArrayBase[I64])
    result = result_def(TensorT)
    traits = traits_def(Pure())
    assembly_format = (
        "$indptr `,` $indices `,` $lhs `,` $rhs `sparse_shape` `=` $sparse_shape " + _FN
    )

    def verify_(self) -> None:
        m, k, nnz = _check_csr(self, self.indptr, self.indices, self.sparse_shape)
        a, b = shape_of(self.lhs), shape_of(self.rhs)
        if len(a) != 2 or a[0] != m:
            raise VerifyException(f"{self.name}: lhs has shape {fmt_shape(a)}, expected [{m}, N]")
        if len(b) != 2 or b[0] != k or b[1] != a[1]:
            raise VerifyException(
                f"{self.name}: rhs has shape {fmt_shape(b)}, expected [{k}, {a[1]}]"
            )
        _check_same_elem(self, self.lhs, self.rhs, self.result)
        _check_shape(self, "result", shape_of(self.result), (nnz,))


