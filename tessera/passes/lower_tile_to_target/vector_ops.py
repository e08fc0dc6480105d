"""Lowerings of the ``vector`` dialect: a vector is one register per element, so
extract, insert and broadcast are register moves."""

from __future__ import annotations

from xdsl.dialects import vector
from xdsl.dialects.builtin import VectorType
from xdsl.ir import Operation

from tessera.passes.lower_tile_to_target.kernel import TARGET_LOWERINGS, KernelLowering
from tessera.passes.lower_tile_to_target.types import reg_class_of


@TARGET_LOWERINGS.register(vector.ExtractOp)
def _vextract(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, vector.ExtractOp)
    if op.dynamic_position:
        raise lw.fail(op, "dynamic positions are not lowered")
    (pos,) = op.static_position.get_values()
    src = lw.vals[op.vector][pos]
    d = lw.define(op.result)
    lw.mov(d, src, op.result.type)


@TARGET_LOWERINGS.register(vector.InsertOp)
def _vinsert(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, vector.InsertOp)
    if op.dynamic_position:
        raise lw.fail(op, "dynamic positions are not lowered")
    (pos,) = op.static_position.get_values()
    vt = op.result.type
    assert isinstance(vt, VectorType)
    et = vt.element_type
    out = []
    for k, r in enumerate(lw.vals[op.dest]):
        n = lw.reg(reg_class_of(et))
        lw.mov(n, lw.one(op.source) if k == pos else r, et)
        out.append(n)
    lw.vals[op.result] = out


@TARGET_LOWERINGS.register(vector.BroadcastOp)
def _vbroadcast(lw: KernelLowering, op: Operation) -> None:
    assert isinstance(op, vector.BroadcastOp)
    vt = op.vector.type
    assert isinstance(vt, VectorType)
    s = lw.one(op.source)
    out = []
    for _ in range(vt.get_shape()[0]):
        n = lw.reg(reg_class_of(vt.element_type))
        lw.mov(n, s, vt.element_type)
        out.append(n)
    lw.vals[op.vector] = out
