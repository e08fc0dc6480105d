"""Tile IR kernels for elementwise arithmetic on complex tensors.

A ``tensor<S x complex<fT>>`` is stored as a ``memref<S x 2 x fT>`` of interleaved
(real, imaginary) pairs (``tile_fft.complex_memref``), f32 and f64 only. One lane per
element loads the pair of each complex operand (broadcasting as for real tensors),
computes in ``fT`` and stores the pair of the result:

* ``tgraph.add`` / ``tgraph.sub``: part by part.
* ``tgraph.mul``: ``(a + bi)(c + di) = (ac - bd) + (ad + bc)i``, numpy's formula.
* ``tgraph.div``: Smith's algorithm, as numpy computes it: with ``|c| >= |d|``,
  ``r = d/c``, ``s = 1/(c + d r)``, the quotient is ``((a + b r) s, (b - a r) s)``;
  otherwise ``r = c/d``, ``s = 1/(d + c r)``, ``((a r + b) s, (b r - a) s)``; a zero
  divisor gives ``(a/|c|, b/|d|)`` (inf or NaN, as numpy).
* ``tgraph.neg``: ``(-a, -b)``.
* ``tgraph.select``: the pair of ``on_true`` or ``on_false`` (the condition is real).
* ``tgraph.fused`` whose body computes a complex value from these ops: one kernel, its
  body evaluated on pairs per element (real values of the body, such as a select's
  condition, on scalars as in the real fused kernels). A fused body that ends in a
  reduction of complex values is not lowered.

Every result element is computed by one lane in a fixed order: deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import ComplexType, TensorType
from xdsl.ir import Attribute, Operation, SSAValue

from tessera.ir import graph as g
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv, f32_or_f64, not_lowered

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

GROUP = 256
"""Most lanes per tile (fewer, a multiple of 32, for less work)."""

Pair = tuple[SSAValue, SSAValue]
"""A complex scalar: (real, imaginary)."""

Value = SSAValue | Pair

COMPLEX_ELEMENTWISE: tuple[type[Operation], ...] = (
    g.AddOp, g.SubOp, g.MulOp, g.DivOp, g.NegOp, g.SelectOp,
)
"""The elementwise ops lowered on complex tensors."""


def is_complex(v: SSAValue) -> bool:
    t = v.type
    return isinstance(t, TensorType) and isinstance(t.element_type, ComplexType)


def handles(op: Operation) -> bool:
    """True when ``op`` is complex elementwise arithmetic this module lowers."""
    if isinstance(op, COMPLEX_ELEMENTWISE):
        return is_complex(op.results[0])
    if isinstance(op, g.FusedOp):
        return any(is_complex(v) for v in (*op.inputs, op.result))
    return False


# --------------------------------------------------------------------------- scalars


def cmul(e: KernelEmitter, x: Pair, y: Pair) -> Pair:
    """``x * y``: ``(ac - bd, ad + bc)``."""
    (a, b), (c, d) = x, y
    return e.fsub(e.fmul(a, c), e.fmul(b, d)), e.fadd(e.fmul(a, d), e.fmul(b, c))


def cdiv_smith(e: KernelEmitter, x: Pair, y: Pair, t: Attribute) -> Pair:
    """``x / y`` by Smith's algorithm (see the module docstring)."""
    (a, b), (c, d) = x, y
    ac, ad = e.op(math.AbsFOp(c)), e.op(math.AbsFOp(d))
    one, zero = e.const(1.0, t), e.const(0.0, t)
    c_big = e.op(arith.CmpfOp(ac, ad, "oge"))
    # |c| >= |d|
    r1 = e.fdiv(d, c)
    s1 = e.fdiv(one, e.fadd(c, e.fmul(d, r1)))
    re1 = e.fmul(e.fadd(a, e.fmul(b, r1)), s1)
    im1 = e.fmul(e.fsub(b, e.fmul(a, r1)), s1)
    # |c| < |d|
    r2 = e.fdiv(c, d)
    s2 = e.fdiv(one, e.fadd(d, e.fmul(c, r2)))
    re2 = e.fmul(e.fadd(e.fmul(a, r2), b), s2)
    im2 = e.fmul(e.fsub(e.fmul(b, r2), a), s2)
    # 0 / 0 divisor: numpy's (a/|c|, b/|d|)
    both0 = e.op(arith.AndIOp(e.feq(ac, zero), e.feq(ad, zero)))
    re = e.vselect(both0, e.fdiv(a, ac), e.vselect(c_big, re1, re2))
    im = e.vselect(both0, e.fdiv(b, ad), e.vselect(c_big, im1, im2))
    return re, im


def complex_scalar(e: KernelEmitter, op: Operation, xs: Sequence[Value], t: Attribute) -> Pair:
    """One element of the complex elementwise op ``op`` (parts of type ``t``)."""
    if isinstance(op, g.AddOp | g.SubOp):
        (a, b), (c, d) = xs  # type: ignore[misc]
        f = e.fsub if isinstance(op, g.SubOp) else e.fadd
        return f(a, c), f(b, d)
    if isinstance(op, g.MulOp):
        return cmul(e, xs[0], xs[1])  # type: ignore[arg-type]
    if isinstance(op, g.DivOp):
        return cdiv_smith(e, xs[0], xs[1], t)  # type: ignore[arg-type]
    if isinstance(op, g.NegOp):
        a, b = xs[0]  # type: ignore[misc]
        return e.op(arith.NegfOp(a)), e.op(arith.NegfOp(b))
    if isinstance(op, g.SelectOp):
        c, (a, b), (u, v) = xs  # type: ignore[misc]
        return e.vselect(c, a, u), e.vselect(c, b, v)  # type: ignore[arg-type]
    raise not_lowered(op, "complex tensors: only add, sub, mul, div, neg and select are "
                          "lowered elementwise")


# --------------------------------------------------------------------------- kernels


def _part_type(op: Operation, v: SSAValue) -> Attribute:
    el = g.elem_of(v)
    assert isinstance(el, ComplexType)
    return f32_or_f64(op, el.element_type)


def lower(lw: _FunctionLowering, op: Operation) -> None:
    """Lower complex elementwise ``op`` (:func:`handles`) as one kernel."""
    from tessera.passes.lower_graph_to_tile import (
        _bcast_index,
        _live_ops,
        _splat,
        elementwise_scalar,
    )

    if isinstance(op, g.FusedOp):
        if op.reduction() is not None:
            raise not_lowered(op, "a reduction of complex values")
        result = op.yield_op.values[0]
        body = _live_ops(op, result)
        leaves = list(op.block.args)
        refs = [lw.mem(v) for v in op.inputs]
        for c in body:
            if isinstance(c, g.ConstantOp) and (_splat(c) is None or is_complex(c.result)):
                raise not_lowered(op, "a constant in a complex fused body")
    else:
        result = op.results[0]
        body = [op]
        leaves = list(op.operands)
        refs = [lw.mem(v) for v in leaves]
    _part_type(op, result)  # f32 / f64 only
    shape = list(g.shape_of(result))
    index = [_bcast_index(g.shape_of(v), shape) for v in leaves]
    work = prod(shape)
    group = min(GROUP, max(32, cdiv(work, 32) * 32))
    out = lw.alloc(op.results[0].type)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        oref, ins = args[0], args[1:]
        i = e.linear_id()
        ok = None if work % group == 0 else e.lt(i, work)
        idx: list[Idx] = e.unravel(i, shape)
        env: dict[SSAValue, Value] = {}
        for v, ref, f in zip(leaves, ins, index):
            ix = f(e, idx, i)
            if is_complex(v):
                env[v] = (e.load(ref, [*ix, 0], mask=ok), e.load(ref, [*ix, 1], mask=ok))
            else:
                env[v] = e.load(ref, ix, mask=ok)
        for o in body:
            if isinstance(o, g.ConstantOp):
                env[o.result] = e.const(_splat(o), g.elem_of(o.result))  # type: ignore[arg-type]
            elif is_complex(o.results[0]):
                ot = _part_type(op, o.results[0])
                env[o.results[0]] = complex_scalar(e, o, [env[x] for x in o.operands], ot)
            elif any(is_complex(x) for x in o.operands):
                raise not_lowered(op, f"{o.name} of complex operands with a real result")
            else:
                env[o.results[0]] = elementwise_scalar(e, o, [env[x] for x in o.operands])
        re, im = env[result]  # type: ignore[misc]
        e.store(re, oref, [*idx, 0], mask=ok)
        e.store(im, oref, [*idx, 1], mask=ok)

    tag = "cfused" if isinstance(op, g.FusedOp) else "c" + op.name.split(".")[1]
    lw.kernel(tag, [out, *refs], group, [cdiv(work, group), 1, 1], build)
    lw.env[op.results[0]] = out
