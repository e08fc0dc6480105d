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
        if self.residual and (add := m.add()) is not None and m.is_full(add):
            m.residual = m.take(add)
        if (
            self.cast
            and isinstance(m.user, g.CastOp)
            and m.user.seed is None
            and not rounds_specially(m.user.result.type)
        ):
            m.out_type = m.user.result.type
            m.step(m.user)
        if m.chain:
            m.rewrite(rewriter)


class _Chain:
    """The ops after a matmul that one ``tgraph.matmul_epilogue`` can compute, matched in
    order: ``cur`` is the chain's value so far, ``user`` its one user (or None)."""

    def __init__(self, op: g.MatmulOp):
        self.op = op
        self.cur: SSAValue = op.result
        self.user = single_user(self.cur)
        self.chain: list[Operation] = []
        self.split: g.ReshapeOp | None = None
        self.bias: SSAValue | None = None
        self.residual: SSAValue | None = None
        self.reshaped: set[SSAValue] = set()
        """Addends given in the split shape (reshaped back to ``[M, N]``)."""
        self.act: str | None = None
        self.out_type: Attribute | None = None

    def step(self, user: Operation) -> None:
        self.chain.append(user)
        self.cur = user.results[0]
        self.user = single_user(self.cur)

    def add(self) -> g.AddOp | None:
        """The add using ``cur`` next (through a row-splitting reshape if none was taken
        yet), of ``cur``'s type, or None."""
        user = self.user
        if self.split is None and isinstance(user, g.ReshapeOp):
            src, dst = shape_of(self.op.result), shape_of(user.result)
            after = single_user(user.result)
            if (len(src) == 2 and shape_of(self.cur) == src and len(dst) >= 2
                    and dst[-1] == src[1] and isinstance(after, g.AddOp)
                    and after.result.type == user.result.type
                    and self._other(after, user.result) is not None):
                return after
            return None
        if isinstance(user, g.AddOp) and user.result.type == self.cur.type and (
            self._other(user, self.cur) is not None
        ):
            return user
        return None

    def is_full(self, add: g.AddOp) -> bool:
        """Whether ``add`` (from :meth:`add`) adds a value of its result's shape."""
        other = self._other(add, self.user.results[0]) if self.user is not add else (
            self._other(add, self.cur))
        return other is not None and shape_of(other) == shape_of(add.result)

    @staticmethod
    def _other(add: g.AddOp, v: SSAValue) -> SSAValue | None:
        if add.lhs is v and add.rhs is not v:
            return add.rhs
        if add.rhs is v and add.lhs is not v:
            return add.lhs
        return None

    def take(self, add: g.AddOp) -> SSAValue:
        """Takes ``add`` (and the reshape before it) into the chain: its other operand."""
        if self.user is not add:  # the row-splitting reshape first
            assert isinstance(self.user, g.ReshapeOp)
            self.split = self.user
            self.cur = self.user.result
        other = self._other(add, self.cur)
        assert other is not None
        if self.split is not None:
            self.reshaped.add(other)
        self.step(add)
        return other

    def rewrite(self, rewriter: PatternRewriter) -> None:
        op, last = self.op, self.chain[-1]
        prod = shape_of(op.result)
        at = InsertPoint.before(last)

        def flat(v: SSAValue | None, full: bool) -> SSAValue | None:
            """``v`` as an addend of the ``[M, N]`` product."""
            if v is None or v not in self.reshaped:
                return v
            vs, n = shape_of(v), prod[1]
            if full or vs == shape_of(self.cur):
                to: tuple[int, ...] = prod
            elif math.prod(vs) == n and vs[-1:] == (n,):
                to = (n,)
            else:
                return None  # another broadcast: not one of the epilogue's bias kinds
            r = g.ReshapeOp.build(operands=[v], result_types=[_with_shape(v.type, to)])
            rewriter.insert(r, at)
            return r.result

        if self.bias is not None and self.bias in self.reshaped:
            vs, n = shape_of(self.bias), prod[1]
            if vs != shape_of(self.cur) and not (math.prod(vs) == n and vs[-1:] == (n,)):
                return  # decided before anything is inserted
        bias, residual = flat(self.bias, False), flat(self.residual, True)
        new = g.MatmulEpilogueOp(
            op.lhs,
            op.rhs,
            self.cur.type if self.split is None else _with_shape(self.cur.type, prod),
            bias=bias,
            residual=residual,
            transpose_lhs=op.transpose_lhs is not None,
            transpose_rhs=op.transpose_rhs is not None,
            activation=self.act,
            compute_type=op.result.type if self.out_type is not None else None,
            tile_shape=op.tile_shape.get_values() if op.tile_shape is not None else None,
        )
        if self.split is None:
            rewriter.replace(last, new)
            dead = [op, *self.chain[:-1]]
        else:
            rewriter.insert(new, at)
            rewriter.replace(last, g.ReshapeOp.build(
                operands=[new.result], result_types=[self.cur.type]))
            dead = [op, self.split, *self.chain[:-1]]
        block = op.parent_block()
        assert block is not None
        order = {o: i for i, o in enumerate(block.ops)}
        for d in sorted(dead, key=order.__getitem__, reverse=True):  # users first
            rewriter.erase(d)


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
