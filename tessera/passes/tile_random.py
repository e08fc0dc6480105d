"""Tile IR kernels for ``tgraph.randn`` and ``tgraph.poisson``.

One lane per output element (``group_size = 256``, grid ``[ceil(N / 256), 1, 1]``). The
lane runs the sampler of :mod:`tessera.numerics.random` for its flat element index,
emitted here as Tile IR through :class:`TileOps` (the same float64 operations the
Graph IR interpreter runs on numpy through ``NumpyOps``), so the kernel's samples equal
the interpreter's bit for bit:

* Philox4x32-10 on ``i64`` values holding 32-bit words (``arith.muli`` gives the
  64-bit product, ``arith.shrui`` / ``arith.andi`` its high and low words); the key
  and the offset words are constants of the op, and the first round, whose counter
  words 2 and 3 are constants, is partly folded at compile time;
* float64 ``arith.addf/subf/mulf/divf`` and ``math.sqrt`` (``.rn`` in PTX, never
  contracted into FMAs), ``arith.cmpf``, ``arith.select``, ``arith.fptosi`` /
  ``arith.sitofp`` for truncation and ``arith.bitcast`` for the exponent split;
* Poisson's loops (arrivals below rate 10, PTRS rejection above) are per-lane
  ``scf.while`` loops.

The float64 sample is rounded once to the result type (``arith.truncf``).
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from xdsl.dialects import arith, math, scf
from xdsl.dialects.builtin import (
    IntegerType,
    f64,
    i1,
)
from xdsl.ir import Block, Region, SSAValue

from tessera.ir import graph as g
from tessera.numerics import random as rnd
from tessera.numerics.philox import (
    PHILOX_M0,
    PHILOX_M1,
    PHILOX_W0,
    PHILOX_W1,
    ROUNDS,
    key_from_seed,
)
from tessera.passes.tile_builder import KernelEmitter, cdiv, float_elem

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

GROUP = 256
"""Lanes per tile."""

i64 = IntegerType(64)
_MASK32 = 0xFFFFFFFF

Word = SSAValue | int
"""A 32-bit Philox word: an ``i64`` SSA value, or a Python int when known at compile time."""


class TileOps:
    """:class:`tessera.numerics.random.ScalarOps` emitting Tile IR (float64 and ``i1``
    SSA values; element indices are ``i64``)."""

    def __init__(self, e: KernelEmitter, seed: int, offset: int):
        self.e = e
        self.key = key_from_seed(seed)
        off = int(offset) & 0xFFFFFFFFFFFFFFFF
        self.c2, self.c3 = off & _MASK32, off >> 32
        self._true: SSAValue | None = None

    # ------------------------------------------------------------------ floats
    def f(self, x: float) -> SSAValue:
        return self.e.const(x, f64)

    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.e.op(arith.AddfOp(a, b))

    def sub(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.e.op(arith.SubfOp(a, b))

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.e.op(arith.MulfOp(a, b))

    def div(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.e.op(arith.DivfOp(a, b))

    def sqrt(self, a: SSAValue) -> SSAValue:
        return self.e.op(math.SqrtOp(a))

    def absf(self, a: SSAValue) -> SSAValue:
        return self.e.op(math.AbsFOp(a))

    def lt(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.e.op(arith.CmpfOp(a, b, "olt"))

    def le(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.e.op(arith.CmpfOp(a, b, "ole"))

    def eq(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.e.op(arith.CmpfOp(a, b, "oeq"))

    # ------------------------------------------------------------------ booleans
    def and_(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.e.op(arith.AndIOp(a, b))

    def or_(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.e.op(arith.OrIOp(a, b))

    def not_(self, a: SSAValue) -> SSAValue:
        return self.e.op(arith.XOrIOp(a, self.e.const(1, i1)))

    def sel(self, c: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.e.op(arith.SelectOp(c, a, b))

    # ------------------------------------------------------------------ bits
    def _i(self, v: int) -> SSAValue:
        return self.e.const(v, i64)

    def trunc(self, a: SSAValue) -> SSAValue:
        return self.e.op(arith.SIToFPOp(self.e.op(arith.FPToSIOp(a, i64)), f64))

    def frexp(self, a: SSAValue) -> tuple[SSAValue, SSAValue]:
        e = self.e
        bits = e.op(arith.BitcastOp(a, i64))
        ex = e.op(arith.AndIOp(e.op(arith.ShRUIOp(bits, self._i(52))), self._i(0x7FF)))
        ef = self.sub(e.op(arith.SIToFPOp(ex, f64)), self.f(1023.0))
        mb = e.op(arith.AndIOp(bits, self._i(0xFFFFFFFFFFFFF)))
        mb = e.op(arith.OrIOp(mb, self._i(0x3FF0000000000000)))
        return e.op(arith.BitcastOp(mb, f64)), ef

    def _xor(self, a: Word, b: Word) -> Word:
        if isinstance(a, int) and isinstance(b, int):
            return a ^ b
        if isinstance(a, int):
            a, b = b, a
        if b == 0:
            return a
        return self.e.op(arith.XOrIOp(a, self._i(b) if isinstance(b, int) else b))

    def _mulhilo(self, m: int, x: Word) -> tuple[Word, Word]:
        if isinstance(x, int):
            p = m * x
            return p >> 32, p & _MASK32
        p = self.e.op(arith.MuliOp(x, self._i(m)))
        hi = self.e.op(arith.ShRUIOp(p, self._i(32)))
        lo = self.e.op(arith.AndIOp(p, self._i(_MASK32)))
        return hi, lo

    def philox(self, c: Sequence[Word]) -> list[Word]:
        """Philox4x32-10 of counter words ``c`` under this op's key."""
        c0, c1, c2, c3 = c
        k0, k1 = self.key
        for r in range(ROUNDS):
            if r:
                k0 = (k0 + PHILOX_W0) & _MASK32
                k1 = (k1 + PHILOX_W1) & _MASK32
            hi0, lo0 = self._mulhilo(PHILOX_M0, c0)
            hi1, lo1 = self._mulhilo(PHILOX_M1, c2)
            c0, c1, c2, c3 = self._xor(self._xor(hi1, c1), k0), lo1, self._xor(
                self._xor(hi0, c3), k1
            ), lo0
        return [c0, c1, c2, c3]

    def _u53(self, wa: Word, wb: Word) -> SSAValue:
        e = self.e

        def top26(w: Word) -> SSAValue:
            if isinstance(w, int):
                return self.f(float(w >> 6))
            return e.op(arith.SIToFPOp(e.op(arith.ShRUIOp(w, self._i(6))), f64))

        k = self.add(self.mul(top26(wa), self.f(67108864.0)), top26(wb))
        return self.mul(self.add(k, self.f(0.5)), self.f(2.0**-52))

    def uniforms(self, i: SSAValue, j: SSAValue) -> tuple[SSAValue, SSAValue]:
        e = self.e
        c0 = e.op(arith.AndIOp(i, self._i(_MASK32)))
        hi = e.op(arith.ShRUIOp(i, self._i(32)))
        jj = e.op(arith.ShLIOp(e.op(arith.FPToSIOp(j, i64)), self._i(16)))
        c1 = e.op(arith.AndIOp(e.op(arith.AddiOp(hi, jj)), self._i(_MASK32)))
        w = self.philox([c0, c1, self.c2, self.c3])
        return self._u53(w[0], w[1]), self._u53(w[2], w[3])

    # ------------------------------------------------------------------ control flow
    def while_(
        self,
        state: Sequence[SSAValue],
        consts: Sequence[SSAValue],
        cond: Callable[[list[SSAValue], list[SSAValue]], SSAValue],
        body: Callable[[list[SSAValue], list[SSAValue]], list[SSAValue]],
    ) -> list[SSAValue]:
        types = [s.type for s in state]
        outer = self.e
        before, after = Block(arg_types=types), Block(arg_types=types)
        self.e = KernelEmitter(before)
        c = cond(list(before.args), list(consts))
        self.e.emit(scf.ConditionOp(c, *before.args))
        self.e = KernelEmitter(after)
        nxt = body(list(after.args), list(consts))
        self.e.emit(scf.YieldOp(*nxt))
        self.e = outer
        op = scf.WhileOp(list(state), types, Region(before), Region(after))
        outer.emit(op)
        return list(op.results)


def _offset(op: g.RandnOp | g.PoissonOp) -> int:
    return op.offset.value.data if op.offset is not None else 0


def _lower(
    lw: _FunctionLowering,
    op: g.RandnOp | g.PoissonOp,
    tag: str,
    inputs: Sequence[SSAValue],
    sample: Callable[[TileOps, SSAValue, list[SSAValue]], SSAValue],
) -> None:
    shape = g.shape_of(op.result)
    et = float_elem(op, op.result.type)
    n = pymath.prod(shape)
    out = lw.alloc(op.result.type)
    seed, offset = op.seed.value.data, _offset(op)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o, ins = args[0], args[1:]
        lin = e.linear_id()
        ok = e.lt(lin, n)
        idx = e.unravel(lin, shape)
        vals = [e.load(ref, idx, mask=ok) for ref in ins]
        i = e.op(arith.IndexCastOp(lin, i64))
        z = sample(TileOps(e, seed, offset), i, vals)
        e.store(e.convert(z, et), o, idx, mask=ok)

    lw.kernel(tag, [out, *inputs], GROUP, [cdiv(n, GROUP), 1, 1], build)
    lw.env[op.result] = out


def lower_randn(lw: _FunctionLowering, op: g.RandnOp) -> None:
    """``tgraph.randn``: Box-Muller on Philox, one lane per element."""
    _lower(lw, op, "randn", [], lambda o, i, _: rnd.normal(o, i))


def lower_poisson(lw: _FunctionLowering, op: g.PoissonOp) -> None:
    """``tgraph.poisson``: arrivals (rate < 10) or PTRS (rate >= 10), one lane per element."""
    float_elem(op, op.lam.type)

    def sample(o: TileOps, i: SSAValue, vals: list[SSAValue]) -> SSAValue:
        lam = o.e.convert(vals[0], f64)
        return rnd.poisson(o, i, lam)

    _lower(lw, op, "poisson", [lw.mem(op.lam)], sample)

