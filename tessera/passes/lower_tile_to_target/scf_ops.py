"""Lowerings of the ``scf`` dialect: loops and conditionals become labels and
(predicated) branches; loop-carried values live in registers written at
``scf.yield`` through temporaries, so the copy is parallel."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import scf
from xdsl.dialects.builtin import VectorType
from xdsl.ir import Attribute, Operation, SSAValue

from tessera.ir import target as tt
from tessera.passes.lower_tile_to_target.kernel import TARGET_LOWERINGS, KernelLowering
from tessera.passes.lower_tile_to_target.types import int_type, reg_class_of


def _copy_in(lw: KernelLowering, dsts: Sequence[list[SSAValue]], srcs: Sequence[SSAValue], types: Sequence[Attribute]) -> None:
    """Parallel copy ``dsts[k] := srcs[k]`` (through temporaries)."""
    temps: list[list[SSAValue]] = []
    for s, t in zip(srcs, types):
        et = t.element_type if isinstance(t, VectorType) else t
        row = []
        for r in lw.vals[s]:
            tmp = lw.reg(reg_class_of(et))
            lw.mov(tmp, r, et)
            row.append(tmp)
        temps.append(row)
    for d, row, t in zip(dsts, temps, types):
        et = t.element_type if isinstance(t, VectorType) else t
        for x, y in zip(d, row):
            lw.mov(x, y, et)


def _regs_for(lw: KernelLowering, t: Attribute) -> list[SSAValue]:
    if isinstance(t, VectorType):
        return [lw.reg(reg_class_of(t.element_type)) for _ in range(t.get_shape()[0])]
    return [lw.reg(reg_class_of(t))]


@TARGET_LOWERINGS.register(scf.ForOp)
def _for(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, scf.ForOp)
    body = op.body.block
    iv = lw.reg(reg_class_of(op.lb.type))
    lw.mov(iv, lw.one(op.lb), op.lb.type)
    carried = [_regs_for(lw, a.type) for a in body.args[1:]]
    _copy_in(lw, carried, list(op.iter_args), [a.type for a in body.args[1:]])
    lw.vals[body.args[0]] = [iv]
    for a, regs in zip(body.args[1:], carried):
        lw.vals[a] = regs
    head, end = lw.label("for"), lw.label("endfor")
    ub = lw.one(op.ub)
    step = lw.one(op.step)
    lw.emit(tt.LabelOp(head))
    done = lw.reg("pred")
    ity = int_type(op.lb.type)
    lw.emit(tt.SetpOp(f"ge.{ity}", done, iv, ub))
    lw.emit(tt.BraOp(end, done))
    for inner in body.ops:
        if isinstance(inner, scf.YieldOp):
            _copy_in(lw, carried, list(inner.operands), [a.type for a in body.args[1:]])
        else:
            lw.lower_op(inner)
    lw.emit(tt.AddOp(ity, iv, iv, step))
    lw.emit(tt.BraOp(head))
    lw.emit(tt.LabelOp(end))
    for r, regs in zip(op.results, carried):
        lw.vals[r] = regs


@TARGET_LOWERINGS.register(scf.IfOp)
def _if(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, scf.IfOp)
    outs = [_regs_for(lw, r.type) for r in op.results]
    types = [r.type for r in op.results]
    else_l, end = lw.label("else"), lw.label("endif")
    lw.emit(tt.BraOp(else_l, lw.one(op.cond), negate=True))

    def branch(region) -> None:
        if not region.blocks:
            return
        for inner in region.block.ops:
            if isinstance(inner, scf.YieldOp):
                _copy_in(lw, outs, list(inner.operands), types)
            else:
                lw.lower_op(inner)

    branch(op.true_region)
    lw.emit(tt.BraOp(end))
    lw.emit(tt.LabelOp(else_l))
    branch(op.false_region)
    lw.emit(tt.LabelOp(end))
    for r, regs in zip(op.results, outs):
        lw.vals[r] = regs


@TARGET_LOWERINGS.register(scf.WhileOp)
def _while(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, scf.WhileOp)
    before, after = op.before_region.block, op.after_region.block
    bregs = [_regs_for(lw, a.type) for a in before.args]
    btypes = [a.type for a in before.args]
    _copy_in(lw, bregs, list(op.arguments), btypes)
    for a, regs in zip(before.args, bregs):
        lw.vals[a] = regs
    aregs = [_regs_for(lw, a.type) for a in after.args]
    atypes = [a.type for a in after.args]
    for a, regs in zip(after.args, aregs):
        lw.vals[a] = regs
    head, end = lw.label("while"), lw.label("endwhile")
    lw.emit(tt.LabelOp(head))
    for inner in before.ops:
        if isinstance(inner, scf.ConditionOp):
            _copy_in(lw, aregs, list(inner.args), atypes)
            lw.emit(tt.BraOp(end, lw.one(inner.condition), negate=True))
        else:
            lw.lower_op(inner)
    for inner in after.ops:
        if isinstance(inner, scf.YieldOp):
            _copy_in(lw, bregs, list(inner.operands), btypes)
        else:
            lw.lower_op(inner)
    lw.emit(tt.BraOp(head))
    lw.emit(tt.LabelOp(end))
    for r, regs in zip(op.results, aregs):
        lw.vals[r] = regs
