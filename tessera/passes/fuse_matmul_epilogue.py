"""``fuse-matmul-epilogue``: a matmul followed by a bias add, an activation, a residual
add and/or a cast becomes one ``tgraph.matmul_epilogue`` op.

The chain must appear in that order (each step optional, each switchable):
``add(matmul, bias)`` (either operand order; the add must not broadcast the
product to a larger shape), then ``relu`` / ``gelu`` / ``silu``, then
``add(·, residual)`` with a residual of the product's shape (a skip connection
after a layer that has a bias: ``x + (x W + b)``), then a ``tgraph.cast`` without a
seed. Every value of the chain except the last must
have exactly one user, so nothing is computed twice. The fused op computes the
same steps on the same types (``compute_type`` keeps the product's type when a
cast follows), so the rewrite keeps the program's meaning exactly.

A 2-D product may reach an add through one ``tgraph.reshape`` that only splits its
rows (``[M, N] -> [..., N]``: a linear layer on ``[B, S, D]`` activations, then the
residual add). The chain is then matched on the reshaped values: addends of the
reshaped shape are reshaped to ``[M, N]`` (the same row-major elements, no copy) and
row biases to ``[N]``, the epilogue computes on ``[M, N]``, and its result is
reshaped back.

A bias that is a bf16/f16 value widened to an f32 product (``cast(b) : f32``, torch's
``addmm`` in 16 bits) is taken before the cast: the epilogue reads it in 16 bits and
widens it exactly, so no kernel widens it first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from tessera.ir import graph as g
from tessera.ir.attrs import rounds_specially
from tessera.ir.graph.base import shape_of
from tessera.passes.algebra_utils import single_user

ACTIVATION_OPS: dict[type[Operation], str] = {
    g.ReluOp: "relu",
    g.GeluOp: "gelu",
    g.SiluOp: "silu",
}


class FuseMatmulEpilogue(RewritePattern):
    """matmul -> [add bias] -> [relu|gelu|silu] -> [add residual] -> [cast]
    => tgraph.matmul_epilogue (one row-splitting reshape may come before an add)."""

    def __init__(
        self, bias: bool = True, activation: bool = True, cast: bool = True,
        residual: bool = True,
    ):
        self.bias = bias
        self.activation = activation
        self.cast = cast
        self.residual = residual

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.MatmulOp, rewriter: PatternRewriter) -> None:
        if rounds_specially(op.result.type):
            return  # a rounding policy on the product: its own store kernel applies it
        m = _Chain(op)
        if self.bias and (add := m.add()) is not None:
            m.bias = m.take(add)
        if self.activation and type(m.user) in ACTIVATION_OPS and (
            m.user.results[0].type == m.cur.type
        ):
            m.act = ACTIVATION_OPS[type(m.user)]
            m.step(m.user)
        if self.residual and (add := m.add()) is not None and (
            shape_of(add.addend) == shape_of(add.op.result)
        ):
            m.residual = m.take(add)
        if (
            self.cast
            and isinstance(m.user, g.CastOp)
            and m.user.seed is None
            and not rounds_specially(m.user.result.type)
        ):
            m.out_type = m.user.result.type
            m.step(m.user)
        if m.ops:
            m.rewrite(rewriter)


@dataclass(frozen=True)
class _Add:
    """An add that can join the chain: ``op``, the row-splitting reshape before it (or
    None) and its other operand."""

    op: g.AddOp
    split: g.ReshapeOp | None
    addend: SSAValue


class _Chain:
    """The ops after a matmul that one ``tgraph.matmul_epilogue`` can compute, matched in
    order: ``cur`` is the chain's value so far, ``user`` its one user (or None), ``ops``
    the matched ops in program order (a row-splitting reshape among them)."""

    def __init__(self, op: g.MatmulOp):
        self.op = op
        self.cur: SSAValue = op.result
        self.user = single_user(self.cur)
        self.ops: list[Operation] = []
        self.split: g.ReshapeOp | None = None
        self.bias: SSAValue | None = None
        self.residual: SSAValue | None = None
        self.reshaped: set[SSAValue] = set()
        """Addends given in the split shape (reshaped back to ``[M, N]``)."""
        self.act: str | None = None
        self.out_type: Attribute | None = None

    def step(self, user: Operation) -> None:
        self.ops.append(user)
        self.cur = user.results[0]
        self.user = single_user(self.cur)

    def add(self) -> _Add | None:
        """The add using ``cur`` next (through a row-splitting reshape if none was taken
        yet) that keeps its type, or None."""
        split, v, add = None, self.cur, self.user
        if self.split is None and isinstance(add, g.ReshapeOp):
            src, dst = shape_of(self.op.result), shape_of(add.result)
            if len(src) != 2 or shape_of(v) != src or len(dst) < 2 or dst[-1] != src[1]:
                return None
            split, v, add = add, add.result, single_user(add.result)
        if not isinstance(add, g.AddOp) or add.result.type != v.type:
            return None
        if add.lhs is v and add.rhs is not v:
            return _Add(add, split, add.rhs)
        if add.rhs is v and add.lhs is not v:
            return _Add(add, split, add.lhs)
        return None

    def take(self, add: _Add) -> SSAValue:
        """Takes ``add`` (and its reshape) into the chain: its addend."""
        if add.split is not None:
            self.split = add.split
            self.step(add.split)
        if self.split is not None:
            self.reshaped.add(add.addend)
        self.step(add.op)
        return add.addend

    def _flat_shape(self, v: SSAValue, full: bool) -> tuple[int, ...] | None:
        """The shape ``v`` is added at on the ``[M, N]`` product: ``[M, N]`` for an addend
        of the reshaped shape, ``[N]`` for a row of it; None for another broadcast (not
        one of the epilogue's bias kinds)."""
        prod, vs = shape_of(self.op.result), shape_of(v)
        if full or vs == shape_of(self.cur):
            return prod
        if math.prod(vs) == prod[1] and vs[-1:] == (prod[1],):
            return (prod[1],)
        return None

    def rewrite(self, rewriter: PatternRewriter) -> None:
        op, last = self.op, self.ops[-1]
        at = InsertPoint.before(last)
        shapes = {v: self._flat_shape(v, v is self.residual)
                  for v in (self.bias, self.residual) if v is not None and v in self.reshaped}
        if None in shapes.values():
            return

        def flat(v: SSAValue | None) -> SSAValue | None:
            """``v`` as an addend of the ``[M, N]`` product."""
            if v is None or v not in shapes:
                return v
            r = g.ReshapeOp.build(operands=[v], result_types=[_with_shape(v.type, shapes[v])])
            rewriter.insert(r, at)
            return r.result

        bias = self.bias
        narrow = _widened_from(bias, op.result.type)
        if narrow is not None:  # the epilogue reads a 16-bit bias and widens it
            if bias in shapes:
                shapes[narrow] = shapes.pop(bias)
            bias = narrow
        new = g.MatmulEpilogueOp(
            op.lhs,
            op.rhs,
            _with_shape(self.cur.type, shape_of(op.result)),
            bias=flat(bias),
            residual=flat(self.residual),
            transpose_lhs=op.transpose_lhs is not None,
            transpose_rhs=op.transpose_rhs is not None,
            activation=self.act,
            compute_type=op.result.type if self.out_type is not None else None,
            tile_shape=op.tile_shape.get_values() if op.tile_shape is not None else None,
        )
        if self.split is None:
            rewriter.replace(last, new)
        else:
            rewriter.insert(new, at)
            rewriter.replace(last, g.ReshapeOp.build(
                operands=[new.result], result_types=[self.cur.type]))
        for d in reversed([op, *self.ops[:-1]]):  # users first
            rewriter.erase(d)


def _widened_from(v: SSAValue | None, product: Attribute) -> SSAValue | None:
    """The bf16/f16 value that ``v`` widens to an f32 ``product``'s type (``v`` a
    ``tgraph.cast`` of it), else None."""
    cast = v.owner if v is not None else None
    if not isinstance(cast, g.CastOp):
        return None
    src = cast.input
    if not isinstance(src.type, builtin.TensorType) or not isinstance(
        product, builtin.TensorType
    ):
        return None
    if cast.result.type.element_type != product.element_type:
        return None
    ok = isinstance(src.type.element_type, builtin.BFloat16Type | builtin.Float16Type) and (
        isinstance(product.element_type, builtin.Float32Type)
        and isinstance(src.type.encoding, builtin.NoneAttr)
        and isinstance(cast.result.type.encoding, builtin.NoneAttr)
    )
    return src if ok else None


def _with_shape(ty: Attribute, shape: tuple[int, ...]) -> builtin.TensorType:
    """The tensor type ``ty`` (element type and encoding) at ``shape``."""
    assert isinstance(ty, builtin.TensorType)
    return builtin.TensorType(ty.element_type, shape, ty.encoding)


@dataclass(frozen=True)
class FuseMatmulEpiloguePass(ModulePass):
    """Fuse bias add, activation and output cast into the matmul that feeds them."""

    name = "fuse-matmul-epilogue"

    fuse_bias: bool = True
    fuse_activation: bool = True
    fuse_cast: bool = True
    fuse_residual: bool = True

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        PatternRewriteWalker(
            FuseMatmulEpilogue(
                self.fuse_bias, self.fuse_activation, self.fuse_cast, self.fuse_residual
            )
        ).rewrite_module(op)
