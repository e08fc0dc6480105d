"""A small emitter for writing Tile IR kernels in Python.

:class:`KernelEmitter` appends ``arith`` / ``math`` / ``scf`` / ``ttile`` ops to a
block, folding index arithmetic on Python ints, so that lowering code reads
like the kernel it produces::

    e = KernelEmitter(block)
    i = e.linear_id()
    m = e.lt(i, n)
    v = e.load(x, [i], mask=m)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod

from xdsl.dialects import arith, math, scf, vector
from xdsl.dialects.arith import FastMathFlag, FastMathFlagsAttr
from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    TensorType,
    VectorType,
    f32,
    i1,
    i32,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from tessera.ir import tile as tt

Idx = SSAValue | int


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for integers (the number of size-``b`` blocks covering ``a``)."""
    return -(-a // b)


def not_lowered(op: Operation, why: str = "") -> NotImplementedError:
    """The error ``lower-graph-to-tile`` raises for an op (or a case of one) it does not lower."""
    return NotImplementedError(
        f"lower-graph-to-tile: {op.name} has no Tile IR lowering" + (f" ({why})" if why else "")
    )


def f32_or_f64(op: Operation, et: Attribute) -> Attribute:
    """``et`` if it is f32 or f64, else :func:`not_lowered` for ``op`` (the kernels that
    compute in their element type only)."""
    if not isinstance(et, Float32Type | Float64Type):
        raise not_lowered(op, f"element type {et}; only f32 and f64 are lowered")
    return et


def float_elem(op: Operation, t: Attribute) -> Attribute:
    """The element type of tensor type ``t`` if it is f64, f32, f16 or bf16, else
    :func:`not_lowered` for ``op`` (the kernels that compute in f32/f64 and store any of
    these)."""
    assert isinstance(t, TensorType)
    et = t.element_type
    if not isinstance(et, Float64Type | Float32Type | Float16Type | BFloat16Type):
        raise not_lowered(op, f"element type {et}; f64, f32, f16 and bf16 are lowered")
    return et


def is_float(t: Attribute) -> bool:
    return isinstance(t, AnyFloat)


def compute_type(t: Attribute) -> Attribute:
    """Arithmetic type for storage type ``t``: f32 for 16-bit floats, else ``t``."""
    return f32 if isinstance(t, BFloat16Type | Float16Type) else t


I32_UNRAVEL = 2**31 - 2**20
"""Shapes with fewer elements unravel flat indices in ``i32`` (see
:meth:`KernelEmitter.unravel`)."""


class KernelEmitter:
    """Appends ops to ``block``; index helpers accept Python ints and fold constants."""

    def __init__(self, block: Block):
        self.block = block

    # ------------------------------------------------------------------ basics
    def op(self, o: Operation) -> SSAValue:
        self.block.add_op(o)
        return o.results[0] if o.results else None  # type: ignore[return-value]

    def emit(self, o: Operation) -> Operation:
        self.block.add_op(o)
        return o

    def index(self, v: Idx) -> SSAValue:
        if isinstance(v, int):
            return self.op(arith.ConstantOp(IntegerAttr(v, IndexType())))
        return v

    def const(self, value: float | int, t: Attribute) -> SSAValue:
        if isinstance(t, VectorType):
            return self.op(
                arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(t, [value]), t)
            )
        if is_float(t):
            return self.op(arith.ConstantOp(FloatAttr(float(value), t)))
        if t == i1:
            return self.op(arith.ConstantOp(IntegerAttr(int(bool(value)), i1)))
        return self.op(arith.ConstantOp(IntegerAttr(int(value), t)))

    # ------------------------------------------------------------------ index math
    def add(self, a: Idx, b: Idx) -> Idx:
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if b == 0:
            return a
        if a == 0:
            return b
        return self.op(arith.AddiOp(self.index(a), self.index(b)))

    def sub(self, a: Idx, b: Idx) -> Idx:
        if isinstance(a, int) and isinstance(b, int):
            return a - b
        if b == 0:
            return a
        return self.op(arith.SubiOp(self.index(a), self.index(b)))

    def mul(self, a: Idx, b: Idx) -> Idx:
        if isinstance(a, int) and isinstance(b, int):
            return a * b
        if b == 1:
            return a
        if a == 1:
            return b
        if a == 0 or b == 0:
            return 0
        return self.op(arith.MuliOp(self.index(a), self.index(b)))

    def div(self, a: Idx, b: int) -> Idx:
        """``a // b`` (unsigned); a shift when ``b`` is a power of two (a 64-bit division
        is a long instruction sequence on the GPU)."""
        if isinstance(a, int):
            return a // b
        if b == 1:
            return a
        if b & (b - 1) == 0:
            return self.op(arith.ShRUIOp(a, self.index(b.bit_length() - 1)))
        return self.op(arith.DivUIOp(a, self.index(b)))

    def rem(self, a: Idx, b: int) -> Idx:
        """``a % b`` (unsigned); a mask when ``b`` is a power of two."""
        if isinstance(a, int):
            return a % b
        if b == 1:
            return 0
        if b & (b - 1) == 0:
            return self.op(arith.AndIOp(a, self.index(b - 1)))
        return self.op(arith.RemUIOp(a, self.index(b)))

    def min(self, a: Idx, b: Idx) -> Idx:
        if isinstance(a, int) and isinstance(b, int):
            return min(a, b)
        return self.op(arith.MinSIOp(self.index(a), self.index(b)))

    def max(self, a: Idx, b: Idx) -> Idx:
        if isinstance(a, int) and isinstance(b, int):
            return max(a, b)
        return self.op(arith.MaxSIOp(self.index(a), self.index(b)))

    def lt(self, a: Idx, b: Idx) -> SSAValue:
        return self.op(arith.CmpiOp(self.index(a), self.index(b), "slt"))

    def le(self, a: Idx, b: Idx) -> SSAValue:
        return self.op(arith.CmpiOp(self.index(a), self.index(b), "sle"))

    def eq(self, a: Idx, b: Idx) -> SSAValue:
        return self.op(arith.CmpiOp(self.index(a), self.index(b), "eq"))

    def and_(self, a: SSAValue | None, b: SSAValue | None) -> SSAValue | None:
        if a is None:
            return b
        if b is None:
            return a
        return self.op(arith.AndIOp(a, b))

    def select(self, c: SSAValue, a: Idx, b: Idx) -> SSAValue:
        return self.op(arith.SelectOp(c, self.index(a), self.index(b)))

    def unravel(self, lin: Idx, shape: Sequence[int]) -> list[Idx]:
        """Row-major multi-index of flat index ``lin`` in ``shape``.

        With a division to do and fewer than ``I32_UNRAVEL`` elements in ``shape``, the
        divisions are done in ``i32`` (PTX divides a 32-bit value by a constant with a
        multiply-high and a shift, a 64-bit one with an emulated sequence several times
        longer). ``lin`` may exceed ``shape`` by the lanes of a masked tail, never by
        2**20."""
        divides = not isinstance(lin, int) and any(d != 1 for d in shape[1:])
        if divides and prod(shape) < I32_UNRAVEL:
            lin32 = self.op(arith.IndexCastOp(lin, i32))
            return [i if isinstance(i, int) else self.op(arith.IndexCastOp(i, IndexType()))
                    for i in self._unravel(lin32, shape, i32)]
        return self._unravel(lin, shape, IndexType())

    def _unravel(self, lin: Idx, shape: Sequence[int], t: Attribute) -> list[Idx]:
        out: list[Idx] = []
        for k in range(len(shape) - 1, -1, -1):
            d = shape[k]
            if d == 1:
                out.append(0)
                continue
            if k == 0 or isinstance(lin, int):
                out.append(lin % d if isinstance(lin, int) and k > 0 else lin)
                lin = lin // d if isinstance(lin, int) and k > 0 else lin
                continue
            if d & (d - 1) == 0:
                out.append(self.op(arith.AndIOp(lin, self.const(d - 1, t))))
                lin = self.op(arith.ShRUIOp(lin, self.const(d.bit_length() - 1, t)))
            else:
                out.append(self.op(arith.RemUIOp(lin, self.const(d, t))))
                lin = self.op(arith.DivUIOp(lin, self.const(d, t)))
        return list(reversed(out))

    # ------------------------------------------------------------------ lanes
    def tile_id(self, dim: str = "x") -> SSAValue:
        return self.op(tt.TileIdOp(dim))

    def local_id(self) -> SSAValue:
        return self.op(tt.LocalIdOp())

    def linear_id(self) -> SSAValue:
        return self.op(tt.LinearIdOp())

    def lane_id(self) -> SSAValue:
        return self.op(tt.LaneIdOp())

    def warp_id(self) -> SSAValue:
        return self.op(tt.WarpIdOp())

    # ------------------------------------------------------------------ memory
    def load(
        self,
        ref: SSAValue,
        idx: Sequence[Idx],
        mask: SSAValue | None = None,
        other: SSAValue | None = None,
    ) -> SSAValue:
        return self.op(tt.LoadOp(ref, [self.index(i) for i in idx], mask, other))

    def store(
        self, value: SSAValue, ref: SSAValue, idx: Sequence[Idx], mask: SSAValue | None = None
    ) -> None:
        self.emit(tt.StoreOp(value, ref, [self.index(i) for i in idx], mask))

    def barrier(self) -> None:
        self.emit(tt.BarrierOp())

    # ------------------------------------------------------------------ values
    def convert(self, v: SSAValue, to: Attribute) -> SSAValue:
        """Numeric conversion between scalar types (float <-> float / int, int <-> int)."""
        fr = v.type
        if fr == to:
            return v
        if is_float(fr) and is_float(to):
            fb, tb = _float_bits(fr), _float_bits(to)
            if fb < tb:
                return self.op(arith.ExtFOp(v, to))
            return self.op(arith.TruncFOp(v, to))
        if isinstance(fr, IntegerType | IndexType) and is_float(to):
            if fr == i1:
                return self.op(arith.UIToFPOp(v, to))
            return self.op(arith.SIToFPOp(v, to))
        if is_float(fr) and isinstance(to, IntegerType):
            if to == i1:  # x != 0, compared in f32 for 16-bit floats (widening is exact)
                if _float_bits(fr) < 32:
                    v, fr = self.op(arith.ExtFOp(v, f32)), f32
                z = self.const(0.0, fr)
                return self.op(arith.CmpfOp(v, z, "une"))
            return self.op(arith.FPToSIOp(v, to))
        if isinstance(fr, IntegerType) and isinstance(to, IntegerType):
            if to == i1:
                z = self.const(0, fr)
                return self.op(arith.CmpiOp(v, z, "ne"))
            if fr.width.data < to.width.data:
                if fr == i1:
                    return self.op(arith.ExtUIOp(v, to))
                return self.op(arith.ExtSIOp(v, to))
            return self.op(arith.TruncIOp(v, to))
        if isinstance(fr, IndexType) or isinstance(to, IndexType):
            return self.op(arith.IndexCastOp(v, to))
        raise NotImplementedError(f"no conversion from {fr} to {to}")

    def fadd(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(arith.AddfOp(a, b))

    def fsub(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(arith.SubfOp(a, b))

    def fmul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(arith.MulfOp(a, b))

    def fdiv(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(arith.DivfOp(a, b))

    def feq(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(arith.CmpfOp(a, b, "oeq"))

    def fmax(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(arith.MaximumfOp(a, b))

    def fgt(self, a: SSAValue, b: SSAValue) -> SSAValue:
        """``a > b`` (ordered: false where either is NaN)."""
        return self.op(arith.CmpfOp(a, b, "ogt"))

    def sqrt(self, a: SSAValue) -> SSAValue:
        """The correctly rounded square root."""
        return self.op(math.SqrtOp(a))

    def exp(self, a: SSAValue, *, approx: bool = True) -> SSAValue:
        """``e^a``. ``approx`` (the default, for the kernels' own arithmetic: softmax's
        ``exp(x - max)``, attention's scores) marks it ``fastmath<afn>``, which lowers to
        ``ex2.approx`` of ``a log2 e``; without it, the 1-2 ulp lowering of ``ts.exp``."""
        flags = FastMathFlagsAttr([FastMathFlag.APPROX_FUNC]) if approx else None
        return self.op(math.ExpOp(a, flags))

    def rsqrt(self, a: SSAValue) -> SSAValue:
        return self.op(math.RsqrtOp(a))

    def vselect(self, c: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(arith.SelectOp(c, a, b))

    def extract(self, v: SSAValue, i: int) -> SSAValue:
        t = v.type
        assert isinstance(t, VectorType)
        return self.op(vector.ExtractOp(v, [i], t.element_type))

    def insert(self, s: SSAValue, v: SSAValue, i: int) -> SSAValue:
        return self.op(vector.InsertOp(s, v, [i]))

    def store_lanes(
        self, values: Sequence[SSAValue], ref: SSAValue, idx: Sequence[Idx],
        mask: SSAValue | None,
    ) -> None:
        """Store ``values`` (scalars of one type) as one vector at ``idx`` of ``ref``."""
        t = values[0].type
        vec = self.const(0.0 if is_float(t) else 0, VectorType(t, [len(values)]))
        for k, y in enumerate(values):
            vec = self.insert(y, vec, k)
        self.emit(tt.StoreVectorOp(vec, ref, [self.index(i) for i in idx], mask))

    # ------------------------------------------------------------------ control flow
    def for_(
        self,
        lb: Idx,
        ub: Idx,
        step: Idx,
        carried: Sequence[SSAValue],
        body: Callable[[KernelEmitter, SSAValue, list[SSAValue]], Sequence[SSAValue]],
    ) -> list[SSAValue]:
        """``scf.for``; ``body(emitter, iv, carried) -> yielded values``."""
        blk = Block(arg_types=[IndexType(), *(c.type for c in carried)])
        inner = KernelEmitter(blk)
        ys = body(inner, blk.args[0], list(blk.args[1:]))
        blk.add_op(scf.YieldOp(*ys))
        op = scf.ForOp(self.index(lb), self.index(ub), self.index(step), list(carried), blk)
        self.block.add_op(op)
        return list(op.results)

    def if_(
        self,
        cond: SSAValue,
        then: Callable[[KernelEmitter], Sequence[SSAValue]],
        else_: Callable[[KernelEmitter], Sequence[SSAValue]] | None = None,
        result_types: Sequence[Attribute] = (),
    ) -> list[SSAValue]:
        tb = Block()
        ys = then(KernelEmitter(tb))
        tb.add_op(scf.YieldOp(*ys))
        fr = Region()
        if else_ is not None:
            fb = Block()
            ys2 = else_(KernelEmitter(fb))
            fb.add_op(scf.YieldOp(*ys2))
            fr = Region(fb)
        op = scf.IfOp(cond, list(result_types), Region(tb), fr)
        self.block.add_op(op)
        return list(op.results)


def _float_bits(t: Attribute) -> int:
    w = getattr(t, "bitwidth", None)
    assert isinstance(w, int), t
    return w
