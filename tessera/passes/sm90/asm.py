"""Building ``ttarget.func`` bodies instruction by instruction.

:class:`TargetAsm` is used by the kernels that are generated directly as Target IR
(``lower-matmul-sm90``, ``lower-attention-sm90``): each helper appends one or a few
Target IR ops and returns the destination register.
"""

from __future__ import annotations

from xdsl.dialects.builtin import FloatAttr, IntegerAttr, f32, i64
from xdsl.ir import SSAValue

from tessera.ir import target as tt


class TargetAsm:
    """Appends Target IR instructions to a ``ttarget.func`` body, with helpers for the
    integer arithmetic, predicates, labels and mbarrier waits of hand-scheduled kernels
    (the Hopper GEMM and attention)."""

    def __init__(self, func: tt.FuncOp):
        self.func = func
        self.block = func.block
        self.labels = 0

    def add(self, op: tt.PtxOp) -> None:
        self.block.add_op(op)

    def reg(self, cls: str) -> SSAValue:
        op = tt.RegOp(cls)
        self.block.add_op(op)
        return op.result

    def imm(self, v: int) -> SSAValue:
        op = tt.ImmOp(IntegerAttr(v, i64))
        self.block.add_op(op)
        return op.result

    def label(self, stem: str) -> str:
        self.labels += 1
        return f"{stem}_{self.labels}"

    def _v(self, v: SSAValue | int) -> SSAValue:
        return self.imm(v) if isinstance(v, int) else v

    def bin(self, cls: type[tt.ArithOp], mods: str, a: SSAValue | int, b: SSAValue | int,
            rc: str = "b32") -> SSAValue:
        d = self.reg(rc)
        self.add(cls(mods, d, self._v(a), self._v(b)))  # type: ignore[call-arg]
        return d

    def add32(self, a: SSAValue | int, b: SSAValue | int) -> SSAValue:
        return self.bin(tt.AddOp, "u32", a, b)

    def mul32(self, a: SSAValue | int, b: SSAValue | int) -> SSAValue:
        return self.bin(tt.MulOp, "lo.u32", a, b)

    def mad32(self, a: SSAValue, b: SSAValue | int, c: SSAValue | int) -> SSAValue:
        d = self.reg("b32")
        self.add(tt.MadOp("lo.u32", d, a, self._v(b), self._v(c)))
        return d

    def setp(self, cmp: str, a: SSAValue | int, b: SSAValue | int, ty: str = "u32") -> SSAValue:
        p = self.reg("pred")
        self.add(tt.SetpOp(f"{cmp}.{ty}", p, self._v(a), self._v(b)))
        return p

    def mov(self, ty: str, dst: SSAValue, src: SSAValue | int, guard: SSAValue | None = None) -> None:
        self.add(tt.MovOp(ty, dst, self._v(src), guard))

    def sreg(self, name: str) -> SSAValue:
        d = self.reg("b32")
        self.add(tt.SregOp(d, name))
        return d

    def wait(self, bar: SSAValue, parity: SSAValue) -> None:
        """Spin on ``mbarrier.try_wait.parity`` until the phase of ``parity`` completed."""
        loop = self.label("WAIT")
        p = self.reg("pred")
        self.add(tt.LabelOp(loop))
        self.add(tt.MbarrierTryWaitOp(p, bar, parity))
        self.add(tt.BraOp(loop, p, negate=True))

    def advance(self, stage: SSAValue, phase: SSAValue, stages: int) -> None:
        """``stage += 1``; on wrapping to 0 flip ``phase``."""
        self.add(tt.AddOp("u32", stage, stage, self.imm(1)))
        wrap = self.setp("eq", stage, stages)
        self.mov("u32", stage, 0, wrap)
        flipped = self.bin(tt.XorOp, "b32", phase, 1)
        self.add(tt.SelpOp("b32", phase, flipped, phase, wrap))

    def desc(self, addr32: SSAValue, hi: int) -> SSAValue:
        """A wgmma descriptor for the tile at shared address ``addr32``."""
        wide = self.reg("b64")
        self.add(tt.CvtOp("u64.u32", wide, [addr32]))
        self.add(tt.ShrOp("u64", wide, wide, self.imm(4)))
        self.add(tt.AndOp("b64", wide, wide, self.imm(0x3FFF)))
        self.add(tt.OrOp("b64", wide, wide, self.imm(hi)))
        return wide

    # ------------------------------------------------------------------ f32 helpers

    def fimm(self, v: float) -> SSAValue:
        """An ``f32`` immediate (printed in PTX's exact hex form)."""
        op = tt.ImmOp(FloatAttr(v, f32))
        self.block.add_op(op)
        return op.result

    def fbin(self, cls: type[tt.BinaryArithOp], a: SSAValue, b: SSAValue | float,
             mods: str = "f32") -> SSAValue:
        """``d = a <op> b`` on f32 registers (``mods`` e.g. ``"rn.f32"`` or ``"f32"``)."""
        d = self.reg("f32")
        self.add(cls(mods, d, a, self.fimm(b) if isinstance(b, float) else b))
        return d

    def fma(self, a: SSAValue, b: SSAValue | float, c: SSAValue | float,
            dst: SSAValue | None = None) -> SSAValue:
        """``d = a * b + c`` (``fma.rn.f32``), into ``dst`` when given."""
        d = dst if dst is not None else self.reg("f32")
        self.add(tt.FmaOp(
            "rn.f32", d, a, self.fimm(b) if isinstance(b, float) else b,
            self.fimm(c) if isinstance(c, float) else c,
        ))
        return d

    def ex2(self, a: SSAValue, dst: SSAValue | None = None) -> SSAValue:
        """``d = 2 ** a`` (``ex2.approx.ftz.f32``), into ``dst`` when given."""
        d = dst if dst is not None else self.reg("f32")
        self.add(tt.Ex2Op("approx.ftz.f32", d, a))
        return d

    def shfl_xor_f32(self, v: SSAValue, offset: int) -> SSAValue:
        """The f32 ``v`` of lane ``lane ^ offset`` (``shfl.sync.bfly.b32``, full mask)."""
        src, got, out = self.reg("b32"), self.reg("b32"), self.reg("f32")
        self.add(tt.MovOp("b32", src, v))
        self.add(tt.ShflOp("bfly", got, src, self.imm(offset), self.imm(31), self.imm(-1)))
        self.add(tt.MovOp("b32", out, got))
        return out
