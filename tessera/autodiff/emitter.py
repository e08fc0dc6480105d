"""A small builder of Graph IR used by the adjoint and tangent rules.

:class:`GraphEmitter` appends ``tgraph`` ops at the end of a block and infers
each result type from its operands (numpy broadcasting, reductions, matmul
shapes), so that a rule reads like the math it implements::

    e = GraphEmitter(block)
    dx = e.mul(g, e.sub(e.const(1.0, y), e.mul(y, y)))   # tanh: g * (1 - y*y)

Intermediate values carry plain ``tensor<shape x elem>`` types; numeric-policy
encodings are not propagated into the derivative computation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.builder import Builder, InsertPoint
from xdsl.dialects.builtin import (
    BytesAttr,
    ComplexType,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    UnitAttr,
    i1,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from tessera.ir import graph as g
from tessera.ir.graph import broadcast_shapes, elem_of, shape_of


def tensor(shape: Sequence[int], elem: Attribute) -> TensorType:
    """A plain ranked tensor type."""
    return TensorType(elem, list(shape))


def numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


Operand = SSAValue | float


class GraphEmitter:
    """Appends Graph IR ops to a block, inferring result types."""

    def __init__(self, block: Block):
        self.builder = Builder(InsertPoint.at_end(block))

    # ------------------------------------------------------------------ basics

    def insert(self, op: Operation) -> SSAValue:
        self.builder.insert(op)
        return op.results[0]

    def const(self, value: float, like: SSAValue | Attribute, shape: Sequence[int] = ()) -> SSAValue:
        """A splat constant ``value`` with the element type of ``like`` (a value or a type)."""
        elem = elem_of(like) if isinstance(like, SSAValue) else like
        if isinstance(elem, TensorType):
            elem = elem.element_type
        if isinstance(elem, ComplexType):  # value + 0i from two real splats
            part = elem.element_type
            return self.complex(self.const(value, part, shape), self.const(0.0, part, shape))
        if isinstance(elem, IntegerType):
            attr = DenseIntOrFPElementsAttr.from_list(tensor((), elem), [int(value)])
        else:
            attr = DenseIntOrFPElementsAttr.from_list(tensor((), elem), [float(value)])
        return self.insert(g.ConstantOp(attr, tensor(shape, elem)))

    def zeros_like(self, v: SSAValue) -> SSAValue:
        return self.const(0.0, v, shape_of(v))

    def dense_const(self, values: Sequence[float], shape: Sequence[int], like: SSAValue) -> SSAValue:
        """A dense constant (row-major ``values``) with the real element type of ``like``."""
        elem = elem_of(like)
        if isinstance(elem, ComplexType):
            elem = elem.element_type
        attr = DenseIntOrFPElementsAttr.from_list(tensor(shape, elem), [float(v) for v in values])
        return self.insert(g.ConstantOp(attr, tensor(shape, elem)))

    def bool_const(self, values: Sequence[bool] | np.ndarray, shape: Sequence[int]) -> SSAValue:
        """A dense ``i1`` constant (row-major ``values``), packed straight from numpy (a
        causal mask has S^2 elements; xDSL stores an ``i1`` true as the byte 0xff)."""
        flat = np.asarray(values, dtype=bool).reshape(-1)
        data = np.where(flat, np.int8(-1), np.int8(0)).tobytes()
        attr = DenseIntOrFPElementsAttr(tensor(shape, i1), BytesAttr(data))
        return self.insert(g.ConstantOp(attr, tensor(shape, i1)))

    def _lift(self, a: Operand, b: Operand) -> tuple[SSAValue, SSAValue]:
        if not isinstance(a, SSAValue):
            assert isinstance(b, SSAValue)
            a = self.const(a, b)
        if not isinstance(b, SSAValue):
            b = self.const(b, a)
        return a, b

    # ------------------------------------------------------------------ elementwise

    def binary(self, cls: type[g.ElementwiseBinaryOp], a: Operand, b: Operand) -> SSAValue:
        a, b = self._lift(a, b)
        shape = broadcast_shapes(shape_of(a), shape_of(b))
        assert shape is not None, f"{cls.name}: {shape_of(a)} and {shape_of(b)}"
        elem = i1 if cls.RESULT_IS_BOOL else elem_of(a)
        return self.insert(cls(a, b, tensor(shape, elem)))

    def add(self, a: Operand, b: Operand) -> SSAValue:
        return self.binary(g.AddOp, a, b)

    def sub(self, a: Operand, b: Operand) -> SSAValue:
        return self.binary(g.SubOp, a, b)

    def mul(self, a: Operand, b: Operand) -> SSAValue:
        return self.binary(g.MulOp, a, b)

    def div(self, a: Operand, b: Operand) -> SSAValue:
        return self.binary(g.DivOp, a, b)

    def pow(self, a: Operand, b: Operand) -> SSAValue:
        return self.binary(g.PowOp, a, b)

    def gt(self, a: Operand, b: Operand) -> SSAValue:
        return self.binary(g.GtOp, a, b)

    def lt(self, a: Operand, b: Operand) -> SSAValue:
        return self.binary(g.LtOp, a, b)

    def ge(self, a: Operand, b: Operand) -> SSAValue:
        return self.binary(g.GeOp, a, b)

    def eq(self, a: Operand, b: Operand) -> SSAValue:
        return self.binary(g.EqOp, a, b)

    def select(self, cond: SSAValue, a: Operand, b: Operand) -> SSAValue:
        a, b = self._lift(a, b)
        shape = broadcast_shapes(shape_of(a), shape_of(b))
        assert shape is not None
        shape = broadcast_shapes(shape, shape_of(cond))
        assert shape is not None
        return self.insert(
            g.SelectOp(operands=[cond, a, b], result_types=[tensor(shape, elem_of(a))])
        )

    def unary(self, cls: type[g.ElementwiseUnaryOp], x: SSAValue) -> SSAValue:
        return self.insert(cls(x, tensor(shape_of(x), elem_of(x))))

    def neg(self, x: SSAValue) -> SSAValue:
        return self.unary(g.NegOp, x)

    def exp(self, x: SSAValue) -> SSAValue:
        return self.unary(g.ExpOp, x)

    def log(self, x: SSAValue) -> SSAValue:
        return self.unary(g.LogOp, x)

    def tanh(self, x: SSAValue) -> SSAValue:
        return self.unary(g.TanhOp, x)

    def sigmoid(self, x: SSAValue) -> SSAValue:
        return self.unary(g.SigmoidOp, x)

    def rsqrt(self, x: SSAValue) -> SSAValue:
        return self.unary(g.RsqrtOp, x)

    def cast(self, x: SSAValue, to: Attribute) -> SSAValue:
        """Cast ``x`` to the element type (or full tensor type) ``to``; no-op if equal."""
        t = to if isinstance(to, TensorType) else tensor(shape_of(x), to)
        if x.type == t:
            return x
        return self.insert(g.CastOp(x, t))

    # ------------------------------------------------------------------ reductions

    def reduce(
        self,
        cls: type[g.ReductionOp],
        x: SSAValue,
        axes: Sequence[int],
        keepdims: bool = False,
    ) -> SSAValue:
        s = shape_of(x)
        ax = sorted(a % len(s) for a in axes) if axes else list(range(len(s)))
        if keepdims:
            out = [1 if i in ax else d for i, d in enumerate(s)]
        else:
            out = [d for i, d in enumerate(s) if i not in ax]
        return self.insert(cls(x, ax, keepdims, tensor(out, elem_of(x))))

    def sum(self, x: SSAValue, axes: Sequence[int], keepdims: bool = False) -> SSAValue:
        return self.reduce(g.SumOp, x, axes, keepdims)

    def mean(self, x: SSAValue, axes: Sequence[int], keepdims: bool = False) -> SSAValue:
        return self.reduce(g.MeanOp, x, axes, keepdims)

    def max(self, x: SSAValue, axes: Sequence[int], keepdims: bool = False) -> SSAValue:
        return self.reduce(g.MaxOp, x, axes, keepdims)

    # ------------------------------------------------------------------ shapes

    def reshape(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        if tuple(shape_of(x)) == tuple(shape):
            return x
        return self.insert(
            g.ReshapeOp(operands=[x], result_types=[tensor(shape, elem_of(x))])
        )

    def broadcast_to(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        if tuple(shape_of(x)) == tuple(shape):
            return x
        return self.insert(
            g.BroadcastOp(operands=[x], result_types=[tensor(shape, elem_of(x))])
        )

    def transpose(self, x: SSAValue, perm: Sequence[int]) -> SSAValue:
        s = shape_of(x)
        return self.insert(g.TransposeOp(x, perm, tensor([s[p] for p in perm], elem_of(x))))

    def reverse(self, x: SSAValue, dims: Sequence[int]) -> SSAValue:
        """``x`` reversed along ``dims`` (``x`` itself when each of them has one element)."""
        s = shape_of(x)
        dims = [d for d in dims if s[d] > 1]
        if not dims:
            return x
        return self.insert(g.ReverseOp(x, dims, tensor(s, elem_of(x))))

    def swap_last(self, x: SSAValue) -> SSAValue:
        r = len(shape_of(x))
        return self.transpose(x, [*range(r - 2), r - 1, r - 2])

    def slice(
        self, x: SSAValue, start: Sequence[int], limit: Sequence[int], stride: Sequence[int]
    ) -> SSAValue:
        out = [(b - a + c - 1) // c for a, b, c in zip(start, limit, stride)]
        props = {
            "start": DenseArrayBase.from_list(i64, list(start)),
            "limit": DenseArrayBase.from_list(i64, list(limit)),
            "stride": DenseArrayBase.from_list(i64, list(stride)),
        }
        return self.insert(
            g.SliceOp(operands=[x], result_types=[tensor(out, elem_of(x))], properties=props)
        )

    def concat(self, xs: Sequence[SSAValue], axis: int) -> SSAValue:
        if len(xs) == 1:
            return xs[0]
        s = list(shape_of(xs[0]))
        s[axis] = sum(shape_of(x)[axis] for x in xs)
        return self.insert(
            g.ConcatOp(
                operands=[list(xs)],
                result_types=[tensor(s, elem_of(xs[0]))],
                properties={"axis": IntegerAttr(axis, i64)},
            )
        )

    def matmul(
        self,
        a: SSAValue,
        b: SSAValue,
        *,
        transpose_lhs: bool = False,
        transpose_rhs: bool = False,
        result: Attribute | None = None,
    ) -> SSAValue:
        """``a @ b`` (``b`` cast to ``a``'s element type first), its result in element
        type ``result`` (default: the operands'): 16-bit operands with an f32 result are
        accumulated and stored in f32."""
        if elem_of(b) != elem_of(a):
            b = self.cast(b, elem_of(a))
        shape = g.MatmulOp.infer_shape(shape_of(a), shape_of(b), transpose_lhs, transpose_rhs)
        assert not isinstance(shape, str), shape
        return self.insert(
            g.MatmulOp(
                a,
                b,
                tensor(shape, result if result is not None else elem_of(a)),
                transpose_lhs=transpose_lhs,
                transpose_rhs=transpose_rhs,
            )
        )

    def unbroadcast(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        """Sum ``x`` over the dims along which ``shape`` was broadcast to ``x``'s shape."""
        s = shape_of(x)
        if tuple(s) == tuple(shape):
            return x
        lead = len(s) - len(shape)
        axes = list(range(lead)) + [
            lead + i for i, d in enumerate(shape) if d == 1 and s[lead + i] != 1
        ]
        if axes:
            x = self.sum(x, axes)
        return self.reshape(x, shape)

    def expand_reduced(
        self, x: SSAValue, in_shape: Sequence[int], axes: Sequence[int]
    ) -> SSAValue:
        """Broadcast a reduction result (kept dims or not) back to ``in_shape``."""
        if shape_of(x):
            x = self.reshape(x, [1 if i in axes else d for i, d in enumerate(in_shape)])
        return self.broadcast_to(x, in_shape)

    def pad(
        self, x: SSAValue, shape: Sequence[int], start: Sequence[int], stride: Sequence[int]
    ) -> SSAValue:
        """The transpose of a strided slice: place ``x`` at ``start + i*stride`` in zeros of
        ``shape``."""
        for d, (full, st, sr) in enumerate(zip(shape, start, stride)):
            cur = list(shape_of(x))
            n = cur[d]
            if n == full:
                continue
            if sr > 1 and n > 0:
                # interleave: [.., n, ..] -> [.., n, sr, ..] with zeros -> [.., n*sr, ..]
                col = self.reshape(x, [*cur[: d + 1], 1, *cur[d + 1 :]])
                zshape = [*cur[: d + 1], sr - 1, *cur[d + 1 :]]
                z = self.const(0.0, x, zshape)
                x = self.reshape(self.concat([col, z], d + 1), [*cur[:d], n * sr, *cur[d + 1 :]])
                keep = min(n * sr, full - st)
                if keep != n * sr:
                    lim = list(shape_of(x))
                    lim[d] = keep
                    x = self.slice(x, [0] * len(cur), lim, [1] * len(cur))
            parts = []
            cur = list(shape_of(x))
            if st:
                parts.append(self.const(0.0, x, [*cur[:d], st, *cur[d + 1 :]]))
            parts.append(x)
            after = full - st - cur[d]
            if after:
                parts.append(self.const(0.0, x, [*cur[:d], after, *cur[d + 1 :]]))
            x = self.concat(parts, d)
        return x

    # ------------------------------------------------------------------ complex parts

    def real(self, x: SSAValue) -> SSAValue:
        el = elem_of(x)
        assert isinstance(el, ComplexType)
        return self.insert(g.RealOp(operands=[x], result_types=[tensor(shape_of(x), el.element_type)]))

    def imag(self, x: SSAValue) -> SSAValue:
        el = elem_of(x)
        assert isinstance(el, ComplexType)
        return self.insert(g.ImagOp(operands=[x], result_types=[tensor(shape_of(x), el.element_type)]))

    def conj(self, x: SSAValue) -> SSAValue:
        """The complex conjugate of ``x``; ``x`` itself when it is real."""
        if not isinstance(elem_of(x), ComplexType):
            return x
        return self.complex(self.real(x), self.neg(self.imag(x)))

    def complex(self, re: SSAValue, im: SSAValue) -> SSAValue:
        return self.insert(
            g.ComplexOp(
                operands=[re, im], result_types=[tensor(shape_of(re), ComplexType(elem_of(re)))]
            )
        )

    # ------------------------------------------------------------------ linear algebra

    def triangular_solve(
        self, a: SSAValue, b: SSAValue, *, upper: bool = False, transpose_a: bool = False
    ) -> SSAValue:
        """``op(A)⁻¹ B`` for triangular A (see ``tgraph.triangular_solve``)."""
        return self.insert(
            g.TriangularSolveOp(
                a, b, tensor(shape_of(b), elem_of(b)), upper=upper, transpose_a=transpose_a
            )
        )

    def conv2d(
        self, x: SSAValue, w: SSAValue, stride: Sequence[int], padding: Sequence[int],
        dilation: Sequence[int] = (1, 1), groups: int = 1,
    ) -> SSAValue:
        shape = g.Conv2dOp.infer_shape(shape_of(x), shape_of(w), stride, padding, dilation,
                                       groups)
        assert not isinstance(shape, str), shape
        props = {
            "stride": DenseArrayBase.from_list(i64, list(stride)),
            "padding": DenseArrayBase.from_list(i64, list(padding)),
        }
        if tuple(dilation) != (1, 1):
            props["dilation"] = DenseArrayBase.from_list(i64, list(dilation))
        if groups != 1:
            props["groups"] = IntegerAttr(groups, i64)
        return self.insert(
            g.Conv2dOp(
                operands=[x, w, []], result_types=[tensor(shape, elem_of(x))], properties=props
            )
        )

    def csr(
        self,
        cls: type[g.SpMMOp | g.SpMMTransposeOp | g.SDDMMOp],
        indptr: SSAValue,
        indices: SSAValue,
        a: SSAValue,
        b: SSAValue,
        sparse_shape: Sequence[int],
        out_shape: Sequence[int],
    ) -> SSAValue:
        """A sparse product on the CSR pattern (``indptr``, ``indices``) of ``sparse_shape``."""
        return self.insert(
            cls(
                operands=[indptr, indices, a, b],
                result_types=[tensor(out_shape, elem_of(b))],
                properties={"sparse_shape": DenseArrayBase.from_list(i64, list(sparse_shape))},
            )
        )

    def fft(self, cls: type[g.FFTOp | g.FFT2dOp], x: SSAValue, *, inverse: bool) -> SSAValue:
        el = elem_of(x)
        out = el if isinstance(el, ComplexType) else ComplexType(el)
        return self.insert(
            cls(
                operands=[x],
                result_types=[tensor(shape_of(x), out)],
                properties={"inverse": UnitAttr()} if inverse else {},
            )
        )

    # ------------------------------------------------------------------ collectives

    def collective(
        self, cls: type[g.CollectiveOp], x: SSAValue, out_shape: Sequence[int], **props: object
    ) -> SSAValue:
        p: dict[str, Attribute] = {}
        for k, v in props.items():
            if isinstance(v, bool):
                if v:
                    p[k] = UnitAttr()
            elif isinstance(v, int):
                p[k] = IntegerAttr(v, i64)
            else:
                assert isinstance(v, str)
                p[k] = StringAttr(v)
        return self.insert(
            cls(operands=[x], result_types=[tensor(out_shape, elem_of(x))], properties=p)
        )
