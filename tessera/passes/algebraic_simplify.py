"""``algebraic-simplify``: exact algebraic rewrites on Graph IR.

Each rewrite keeps the program's meaning exactly (bit for bit on the
reference interpreter), and each can be switched off by a pass option:

* ``fold-transposes``: ``transpose(transpose(x, p), q)`` becomes one transpose
  (or ``x`` when the composition is the identity); an identity transpose is ``x``.
* ``fold-transpose-into-matmul``: a transpose of the last two dims feeding a
  matmul operand becomes the matmul's ``transpose_lhs`` / ``transpose_rhs``.
* ``fold-arith-identities``: ``x * 1``, ``1 * x``, ``x / 1``, ``x - (+0.0)``,
  ``x + (-0.0)``, ``(-0.0) + x`` (and integer ``x + 0``, ``x - 0``) are ``x`` when
  the result has ``x``'s type. ``x + 0.0`` is ``x`` only up to the sign of a zero
  (``-0.0 + 0.0 = +0.0``), so for floats it is folded only with ``no-signed-zeros``.
* ``fold-reshapes``: ``reshape(reshape(x))`` is one reshape; a reshape to the
  same type is ``x``.
* ``fold-casts``: ``cast(cast(x : A) : B) : C`` is ``cast(x : A) : C`` when every
  value of A is exact in B (a widening), so ``A -> B -> A`` is ``x``; a cast to
  the same type is ``x``. Types carrying a numeric policy are left alone.
* ``fold-constants``: a tgraph op whose operands are all constants becomes a
  constant, computed by the reference interpreter (the semantics of record),
  when the result has at most ``max-fold-elements`` elements and is finite.
* ``fold-broadcasts``: an operand of an elementwise binary op or a ``select`` that is
  a ``broadcast`` of ``x`` is ``x`` when the op's result keeps its shape (the op
  broadcasts by itself); a ``reshape`` of a broadcast one-element value is a broadcast
  of it. torch's ``grad.expand(n).view(n, 1)`` then no longer makes a fused kernel
  index its elements through maps.
* ``fold-empty``: an op with an operand of no elements and a non-empty result: a
  ``concat`` drops the empty operands; a ``sum`` over an empty axis or a ``matmul``
  whose contracted dim is 0 (other operands constant) becomes its constant result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

import numpy as np
from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.dialects.builtin import TensorType, UnitAttr
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.transforms.dead_code_elimination import region_dce

from tessera.ir import graph as g
from tessera.passes.algebra_utils import (
    array_to_attr,
    constant_op,
    embeds_exactly,
    has_encoding,
    is_last_two_swap,
    is_zero,
    np_dtype_of,
    reference_interpreter,
    splat_value,
)


def _perm(op: g.TransposeOp) -> list[int]:
    return list(op.permutation.get_values())


class FoldTransposeOfTranspose(RewritePattern):
    """``transpose(transpose(x, p), q)`` -> ``transpose(x, p∘q)``, or ``x`` if that is
    the identity. Result dim i of the outer op is dim ``p[q[i]]`` of ``x``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.TransposeOp, rewriter: PatternRewriter) -> None:
        inner = op.input.owner
        if not isinstance(inner, g.TransposeOp):
            return
        p, q = _perm(inner), _perm(op)
        combined = [p[i] for i in q]
        if combined == list(range(len(combined))) and inner.input.type == op.result.type:
            rewriter.replace(op, [], [inner.input])
            return
        rewriter.replace(op, g.TransposeOp(inner.input, combined, op.result.type))


class FoldIdentityTranspose(RewritePattern):
    """``transpose(x, [0, 1, ..., n-1])`` -> ``x``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.TransposeOp, rewriter: PatternRewriter) -> None:
        if _perm(op) == list(range(len(_perm(op)))) and op.input.type == op.result.type:
            rewriter.replace(op, [], [op.input])


class FoldTransposeIntoMatmul(RewritePattern):
    """``matmul(transpose(a, swap last two), b)`` -> ``matmul(a, b) transpose_lhs`` (the
    flag toggles), and likewise for the right operand; also for
    ``tgraph.matmul_epilogue``."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, g.MatmulOp | g.MatmulEpilogueOp):
            return
        operands = list(op.operands)
        props = dict(op.properties)
        changed = False
        for i, flag in ((0, "transpose_lhs"), (1, "transpose_rhs")):
            t = operands[i].owner
            if not isinstance(t, g.TransposeOp) or not is_last_two_swap(_perm(t)):
                continue
            operands[i] = t.input
            if flag in props:
                del props[flag]
            else:
                props[flag] = UnitAttr()
            changed = True
        if not changed:
            return
        new = type(op).create(
            operands=operands,
            result_types=[r.type for r in op.results],
            properties=props,
            attributes=dict(op.attributes),
        )
        rewriter.replace(op, new)


def _elem_is_float(t: Attribute) -> bool:
    assert isinstance(t, TensorType)
    return not isinstance(t.element_type, builtin.IntegerType)


class FoldArithIdentity(RewritePattern):
    """``x * 1``, ``1 * x``, ``x / 1``, ``x - 0``, ``x + 0``, ``0 + x`` -> ``x``, with the
    sign of a float zero respected unless ``no_signed_zeros``; the constant may be
    ``broadcast`` (as the autodiff pass's seed ``1`` is).

    Only when the result type is ``x``'s type (the constant does not broadcast
    ``x`` to a larger shape).
    """

    def __init__(self, no_signed_zeros: bool = False):
        self.no_signed_zeros = no_signed_zeros

    @staticmethod
    def _splat(v: SSAValue) -> float | int | bool | None:
        """The splat value of a constant, or of a ``broadcast`` of one (an autodiff seed)."""
        if isinstance(v.owner, g.BroadcastOp):
            v = v.owner.input
        return splat_value(v)

    def _zero(self, v: SSAValue, *, negative: bool) -> bool:
        return is_zero(self._splat(v), negative=None if self.no_signed_zeros else negative)

    @classmethod
    def _one(cls, v: SSAValue) -> bool:
        c = cls._splat(v)
        return c is not None and not isinstance(c, bool) and c == 1

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, g.MulOp | g.DivOp | g.AddOp | g.SubOp):
            return
        lhs, rhs = op.lhs, op.rhs
        keep: SSAValue | None = None
        if isinstance(op, g.MulOp):
            keep = lhs if self._one(rhs) else rhs if self._one(lhs) else None
        elif isinstance(op, g.DivOp):
            keep = lhs if self._one(rhs) else None
        elif isinstance(op, g.SubOp):
            keep = lhs if self._zero(rhs, negative=False) else None
        else:
            keep = (
                lhs if self._zero(rhs, negative=True)
                else rhs if self._zero(lhs, negative=True)
                else None
            )
        if keep is not None and keep.type == op.result.type:
            rewriter.replace(op, [], [keep])


class FoldReshapeChain(RewritePattern):
    """``reshape(reshape(x))`` -> ``reshape(x)``; a reshape to ``x``'s own type -> ``x``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ReshapeOp, rewriter: PatternRewriter) -> None:
        if op.input.type == op.result.type:
            rewriter.replace(op, [], [op.input])
            return
        inner = op.input.owner
        if isinstance(inner, g.ReshapeOp):
            src = inner.input
            if src.type == op.result.type:
                rewriter.replace(op, [], [src])
            else:
                rewriter.replace(
                    op, g.ReshapeOp.create(operands=[src], result_types=[op.result.type])
                )


class FoldCastChain(RewritePattern):
    """``cast(cast(x : A) : B) : C`` -> ``cast(x) : C`` when A embeds exactly in B;
    -> ``x`` when moreover C is A. A cast to its operand's type -> ``x``.

    Types with a numeric policy encoding (scaling, saturation, stochastic
    rounding) are never involved, and the outer cast keeps its seed.
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.CastOp, rewriter: PatternRewriter) -> None:
        if (
            op.input.type == op.result.type
            and not has_encoding(op.result.type)
            and op.seed is None
        ):
            rewriter.replace(op, [], [op.input])
            return
        inner = op.input.owner
        if not isinstance(inner, g.CastOp):
            return
        a_t, b_t = inner.input.type, inner.result.type
        if has_encoding(a_t) or has_encoding(b_t):
            return
        assert isinstance(a_t, TensorType) and isinstance(b_t, TensorType)
        if not embeds_exactly(a_t.element_type, b_t.element_type):
            return
        if a_t == op.result.type and op.seed is None:
            rewriter.replace(op, [], [inner.input])
            return
        seed = op.seed.value.data if op.seed is not None else None
        rewriter.replace(op, g.CastOp(inner.input, op.result.type, seed))


class FoldBroadcastIntoElementwise(RewritePattern):
    """An operand ``broadcast(x)`` of an elementwise binary op or ``select`` -> ``x``
    when the result's shape does not change (the op broadcasts ``x`` itself);
    ``reshape(broadcast(x))`` with one element in ``x`` -> ``broadcast(x)`` to the
    reshape's shape."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, g.ReshapeOp):
            inner = op.input.owner
            if (
                isinstance(inner, g.BroadcastOp)
                and prod(g.shape_of(inner.input)) == 1
                and len(g.shape_of(inner.input)) <= len(g.shape_of(op.result))
            ):
                rewriter.replace(op, g.BroadcastOp.create(
                    operands=[inner.input], result_types=[op.result.type]))
            return
        if not isinstance(op, g.ElementwiseBinaryOp | g.SelectOp):
            return
        out = tuple(g.shape_of(op.results[0]))
        operands = list(op.operands)
        for k, v in enumerate(operands):
            inner = v.owner
            if not isinstance(inner, g.BroadcastOp):
                continue
            trial = [*operands[:k], inner.input, *operands[k + 1:]]
            shape: tuple[int, ...] | None = ()
            for t in trial:
                shape = None if shape is None else g.broadcast_shapes(shape, g.shape_of(t))
            if shape is not None and tuple(shape) == out:
                op.operands[k] = inner.input
                rewriter.notify_op_modified(op)
                return


FOLDABLE_OPS: tuple[type[Operation], ...] = (
    *g.FUSIBLE_ELEMENTWISE_OPS, *g.FUSIBLE_REDUCTION_OPS,
    g.SoftmaxOp, g.MatmulOp, g.TransposeOp, g.ReshapeOp, g.BroadcastOp, g.SliceOp, g.ConcatOp,
)
"""Ops that constant folding evaluates (deterministic, one result, no regions)."""


class FoldConstantOp(RewritePattern):
    """An op of :data:`FOLDABLE_OPS` whose operands are all ``tgraph.constant`` becomes a
    ``tgraph.constant`` holding the reference interpreter's result for it."""

    def __init__(self, max_elements: int = 4096):
        self.max_elements = max_elements

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, FOLDABLE_OPS) or len(op.results) != 1 or not op.operands:
            return
        rt = op.results[0].type
        if not isinstance(rt, TensorType) or has_encoding(rt):
            return
        n = 1
        for d in rt.get_shape():
            n *= d
        if n > self.max_elements:
            return
        consts = [constant_op(v) for v in op.operands]
        if any(c is None or has_encoding(c.result.type) for c in consts):
            return
        interp = reference_interpreter()
        try:
            args = tuple(interp.run_op(c, ())[0] for c in consts if c is not None)
            out = np.asarray(interp.run_op(op, args)[0])
        except Exception:
            return
        if out.dtype.kind not in "biu" and not np.all(np.isfinite(out.astype(np.float64))):
            # xDSL prints inf/NaN in dense attributes as hex that it reads back as an
            # integer, so such a constant would not survive a print/parse round trip.
            return
        attr = array_to_attr(out, rt)
        if attr is None:
            return
        rewriter.replace(op, g.ConstantOp(attr, rt))


def _is_empty(v: SSAValue) -> bool:
    return isinstance(v.type, TensorType) and 0 in v.type.get_shape()


class FoldEmptyOperands(RewritePattern):
    """An op with an operand of no elements and a result of some:

    * ``concat`` drops its empty operands (the one left is the result);
    * an op of :data:`FOLDABLE_OPS` whose other operands are constants (``sum`` over an
      empty axis, a ``matmul`` whose contracted dim is 0) becomes the reference
      interpreter's result, a constant that depends on the shapes alone; splats of any
      size, other values up to ``max_elements``. A non-finite splat (``mean`` of nothing
      is NaN, ``logsumexp`` of nothing ``-inf``) becomes ``0/0`` or ``±1/0``, which the
      printed IR carries; a ``max`` of nothing stays (the lowering names it)."""

    def __init__(self, max_elements: int = 4096):
        self.max_elements = max_elements

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, (*FOLDABLE_OPS, g.LogSumExpOp)) or len(op.results) != 1:
            return
        rt = op.results[0].type
        if not isinstance(rt, TensorType) or has_encoding(rt) or _is_empty(op.results[0]):
            return
        if not any(_is_empty(v) for v in op.operands):
            return
        if isinstance(op, g.ConcatOp):
            kept = [v for v in op.operands if not _is_empty(v)]
            if len(kept) == 1 and kept[0].type == rt:
                rewriter.replace(op, [], [kept[0]])
            else:
                rewriter.replace(op, g.ConcatOp.create(
                    operands=kept, result_types=[rt], properties={"axis": op.axis}))
            return
        interp = reference_interpreter()
        args = []
        for v in op.operands:
            c = constant_op(v)
            if _is_empty(v):
                t = v.type
                assert isinstance(t, TensorType)
                dt = np_dtype_of(t.element_type)
                if dt is None or has_encoding(t):
                    return
                args.append(np.empty(t.get_shape(), dt))
            elif c is None or has_encoding(c.result.type):
                return
            else:
                try:
                    args.append(interp.run_op(c, ())[0])
                except Exception:
                    return
        try:
            out = np.asarray(interp.run_op(op, tuple(args))[0])
        except Exception:
            return
        flat = out.reshape(-1) if out.dtype.kind in "biu" else out.reshape(-1).astype(np.float64)
        nan = flat != flat
        splat = bool(nan.all()) or (not nan.any() and bool(np.all(flat == flat[0])))
        # a splat is one 0-d value (filled by a kernel), not a buffer of the result's size
        scalar = TensorType(rt.element_type, [])
        if not np.all(np.isfinite(flat)):
            if splat:  # NaN = 0/0, ±inf = ±1/0: finite constants in the printed IR
                x = float(flat[0])
                num = 0.0 if x != x else (1.0 if x > 0 else -1.0)
                n, d = (g.ConstantOp(array_to_attr(np.full((), c), scalar), rt)
                        for c in (num, 0.0))
                rewriter.replace(op, [n, d, g.DivOp(n.result, d.result, rt)])
            return
        if out.size > self.max_elements and not splat:
            return
        attr = array_to_attr(out.reshape(-1)[:1].reshape(()), scalar) if splat else array_to_attr(
            out, rt)
        if attr is None:
            return
        rewriter.replace(op, g.ConstantOp(attr, rt))


@dataclass(frozen=True)
class AlgebraicSimplifyPass(ModulePass):
    """Exact algebraic simplification of Graph IR; every rewrite has an on/off option."""

    name = "algebraic-simplify"

    fold_transposes: bool = True
    fold_transpose_into_matmul: bool = True
    fold_arith_identities: bool = True
    no_signed_zeros: bool = False
    fold_reshapes: bool = True
    fold_casts: bool = True
    fold_constants: bool = True
    fold_empty: bool = True
    fold_broadcasts: bool = True
    max_fold_elements: int = 4096

    def patterns(self) -> Sequence[RewritePattern]:
        ps: list[RewritePattern] = []
        if self.fold_transposes:
            ps += [FoldTransposeOfTranspose(), FoldIdentityTranspose()]
        if self.fold_transpose_into_matmul:
            ps.append(FoldTransposeIntoMatmul())
        if self.fold_arith_identities:
            ps.append(FoldArithIdentity(self.no_signed_zeros))
        if self.fold_reshapes:
            ps.append(FoldReshapeChain())
        if self.fold_casts:
            ps.append(FoldCastChain())
        if self.fold_constants:
            ps.append(FoldConstantOp(self.max_fold_elements))
        if self.fold_empty:
            ps.append(FoldEmptyOperands(self.max_fold_elements))
        if self.fold_broadcasts:
            ps.append(FoldBroadcastIntoElementwise())
        return ps

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        ps = self.patterns()
        if not ps:
            return
        PatternRewriteWalker(
            GreedyRewritePatternApplier(list(ps)), post_walk_func=region_dce
        ).rewrite_module(op)
