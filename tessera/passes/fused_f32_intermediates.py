"""``fused-f32-intermediates``: inside a fused kernel, 16-bit float values are computed
and passed on in f32, and rounded once where they leave the kernel (Inductor's
numerics), in functions that ask for it with the unit attribute
``tessera.f32_intermediates`` (the torch backend's partitions do).

Graph IR gives every op a rounding to its result type: a bf16 ``tgraph.add`` rounds its
sum to bf16, and torch's rules that compute one aten op in f32 end with a
``tgraph.cast`` back to 16 bits. Eager torch rounds after each aten op as well, but
``torch.compile`` does not round the intermediates of a fused kernel, and one aten op
that dynamo or AOTAutograd splits into several (``addcdiv(value=)``, the backward
formulas) would round at each step where eager's single kernel rounds once. In the
body of each ``tgraph.fused`` op of a marked function this pass:

* gives each elementwise op with a bf16/f16 result an f32 twin, computed from the f32
  twins of its operands (or their exact widening), and uses the 16-bit value only where
  something other than an elementwise op reads it (the yield, a reduction);
* takes a ``tgraph.cast`` from f32 to 16 bits as a rounding that the twin skips, unless
  the cast carries ``tessera.rounds`` (an explicit conversion: ``x.to(torch.bfloat16)``),
  and a cast of a value with a twin back to f32 as the twin itself;
* moves twins through the body's broadcasts and index maps (transpose, slice, concat,
  reshape), and compares and casts to other types read the twin (a value without one is
  widened once, exactly, for all its f32 readers).

Ops carrying a numeric policy (an encoding) are left as they are. Without the attribute
the pass changes nothing: ``ts.jit`` programs keep the rounding of every op.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, TensorType, f32
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.transforms.dead_code_elimination import region_dce

from tessera.ir import graph as g
from tessera.ir.graph.fusion import is_index_map

ATTR = "tessera.f32_intermediates"
"""The function attribute that asks for f32 intermediates in fused kernels."""
ROUNDS_ATTR = "tessera.rounds"
"""A ``tgraph.cast`` attribute: the rounding is the program's (an explicit conversion)."""


def _is16(t: Attribute) -> bool:
    return (
        isinstance(t, TensorType)
        and isinstance(t.element_type, BFloat16Type | Float16Type)
        and isinstance(t.encoding, builtin.NoneAttr)
    )


def _is32(t: Attribute) -> bool:
    return (
        isinstance(t, TensorType)
        and isinstance(t.element_type, Float32Type)
        and isinstance(t.encoding, builtin.NoneAttr)
    )


def _wide(t: TensorType) -> TensorType:
    return TensorType(f32, t.get_shape())


def _plain(op: Operation) -> bool:
    """No operand or result carries a numeric policy."""
    return all(
        not isinstance(v.type, TensorType) or isinstance(v.type.encoding, builtin.NoneAttr)
        for v in (*op.operands, *op.results)
    )


class _Body:
    """The rewrite of one fused body: ``twin`` maps a 16-bit value to its f32 twin."""

    def __init__(self, op: g.FusedOp):
        self.block = op.block
        self.twin: dict[SSAValue, SSAValue] = {}

    def widened(self, v: SSAValue, before: Operation) -> SSAValue:
        """``v``'s twin, else ``v`` widened exactly (a cast placed before ``before``)."""
        found = self.twin.get(v)
        if found is not None:
            return found
        assert isinstance(v.type, TensorType)
        cast = g.CastOp(v, _wide(v.type))
        Rewriter.insert_op(cast, InsertPoint.before(before))
        self.twin[v] = cast.result  # exact: later readers share it
        return cast.result

    def twin_op(self, op: Operation, operands: list[SSAValue]) -> None:
        """Replace ``op`` (of a 16-bit result) by its copy on ``operands`` computing in
        f32, the twin, and the twin's rounding to the 16-bit type for other readers."""
        r = op.results[0]
        assert isinstance(r.type, TensorType)
        copy = type(op).create(
            operands=operands, result_types=[_wide(r.type)], properties=dict(op.properties),
            attributes=dict(op.attributes),
        )
        narrow = g.CastOp(copy.results[0], r.type)
        Rewriter.replace_op(op, [copy, narrow])
        self.twin[narrow.result] = copy.results[0]

    def run(self) -> None:
        for op in list(self.block.ops):
            if len(op.results) != 1 or not _plain(op):
                continue
            r = op.results[0]
            if isinstance(op, g.CastOp):
                self.cast(op)
            elif isinstance(op, g.FUSIBLE_ELEMENTWISE_OPS) and _is16(r.type):
                ins = list(op.operands)
                if isinstance(op, g.SelectOp):  # the condition stays as it is
                    ins = [ins[0], *(self.widened(v, op) for v in ins[1:])]
                else:
                    ins = [self.widened(v, op) if _is16(v.type) else v for v in ins]
                self.twin_op(op, ins)
            elif isinstance(op, g.FUSIBLE_ELEMENTWISE_OPS) and any(
                v in self.twin for v in op.operands
            ):
                # a compare of 16-bit values reads their twins (both sides alike)
                ins = [self.widened(v, op) if _is16(v.type) else v for v in op.operands]
                new = type(op).create(
                    operands=ins, result_types=[r.type], properties=dict(op.properties),
                    attributes=dict(op.attributes),
                )
                Rewriter.replace_op(op, new)
            elif (is_index_map(op) or isinstance(op, g.BroadcastOp)) and _is16(r.type) and any(
                v in self.twin for v in op.operands
            ):
                ins = [self.widened(v, op) if _is16(v.type) else v for v in op.operands]
                self.twin_op(op, ins)

    def cast(self, op: g.CastOp) -> None:
        src, r = op.input, op.result
        if _is32(src.type) and _is16(r.type) and ROUNDS_ATTR not in op.attributes:
            self.twin[r] = src  # a rounding of an op's result: the twin skips it
        elif _is16(src.type) and src in self.twin and _is32(r.type):
            r.replace_all_uses_with(self.twin[src])
            op.detach()
            op.erase()
        elif _is16(src.type) and _is32(r.type):
            self.twin[src] = r  # an exact widening: later f32 readers share it
        elif src in self.twin and not _is16(r.type):
            # a conversion to another type reads the unrounded value
            new = g.CastOp(self.twin[src], r.type)
            Rewriter.replace_op(op, new)
        elif src in self.twin and _is16(r.type) and ROUNDS_ATTR not in op.attributes:
            self.twin[r] = self.twin[src]  # bf16 <-> f16 of a twin: the twin again


def widen_fused_bodies(fn: Operation) -> None:
    """Rewrite every ``tgraph.fused`` body inside ``fn``."""
    for op in list(fn.walk()):
        if isinstance(op, g.FusedOp):
            body = _Body(op)
            body.run()
            # the 16-bit values now read by nothing (their twins took their users)
            region_dce(op.body)


@dataclass(frozen=True)
class FusedF32IntermediatesPass(ModulePass):
    """16-bit intermediates of fused kernels in f32, in functions marked with
    ``tessera.f32_intermediates``."""

    name = "fused-f32-intermediates"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        for fn in op.ops:
            if ATTR in fn.attributes:
                widen_fused_bodies(fn)
