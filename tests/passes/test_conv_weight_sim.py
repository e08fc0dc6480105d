"""The implicit convolution's weight relayout (``conv_layout.weight_kernel``) as emitted
Target IR, run on a small simulator of its ~15 instructions (every thread of every CTA,
straight-line code), against numpy: ``wk[o, (i*kwp + j)*Cp + c] = w'[o, c, i, j]`` with
``w'`` the weight as stored, flipped (``w[o, c, kh-1-i, kw-1-j]``: an input gradient's
kernel read without a flipped copy) and swapped (``w`` stored ``[C, O, kh, kw]``), zeros
for padded channels and padded filter-row taps, nothing written past the end."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.ir import target as tt
from tessera.passes.sm90 import conv_layout

OUT, SRC = 1 << 20, 1 << 28
"""The simulated addresses of the relayout and of the weight."""
POISON = 0xBEEF


class Grid:
    """Runs a straight-line ``ttarget.func`` for ``n`` threads (CTA-major) at once."""

    def __init__(self, n: int, threads: int, mem: dict[int, np.ndarray]):
        self.n, self.threads, self.mem = n, threads, mem
        self.vals: dict = {}

    def val(self, v) -> np.ndarray:
        if isinstance(v.owner, tt.ImmOp):
            return np.full(self.n, v.owner.value.value.data, np.int64)
        return self.vals[v]

    def run(self, func: tt.FuncOp, params: list[int]) -> None:
        for op in func.block.ops:
            name = op.name.split(".")[1]
            if name in ("reg", "imm", "ret"):
                continue
            getattr(self, "op_" + name)(op, params)

    def guard(self, op) -> np.ndarray:
        return np.ones(self.n, bool) if op.guard is None else self.val(op.guard)

    def op_sreg(self, op, params) -> None:
        t = np.arange(self.n, dtype=np.int64)
        self.vals[op.dst] = {"tid.x": t % self.threads, "ctaid.x": t // self.threads}[
            op.sreg.data]

    def op_ld_param(self, op, params) -> None:
        self.vals[op.dst] = np.full(self.n, params[op.param.index], np.int64)

    def op_cvta(self, op, params) -> None:
        self.vals[op.dst] = self.val(op.src).copy()

    def op_mov(self, op, params) -> None:
        old = self.vals.get(op.dst, np.zeros(self.n, np.int64))
        self.vals[op.dst] = np.where(self.guard(op), self.val(op.src), old)

    def _int(self, op, f, *srcs) -> None:
        ty = op.mods.data.split(".")[-1]
        r = f(*(self.val(s) for s in srcs))
        if ty == "pred":
            self.vals[op.dst] = r.astype(bool)
            return
        r = r.astype(np.int64)
        self.vals[op.dst] = r if ty == "u64" else r & 0xFFFFFFFF

    def op_add(self, op, params) -> None:
        self._int(op, lambda a, b: a + b, op.a, op.b)

    def op_sub(self, op, params) -> None:
        self._int(op, lambda a, b: a - b, op.a, op.b)

    def op_and(self, op, params) -> None:
        self._int(op, lambda a, b: a & b, op.a, op.b)

    def op_div(self, op, params) -> None:
        self._int(op, lambda a, b: a // b, op.a, op.b)

    def op_rem(self, op, params) -> None:
        self._int(op, lambda a, b: a % b, op.a, op.b)

    def op_mul(self, op, params) -> None:
        if op.mods.data == "wide.u32":
            self.vals[op.dst] = self.val(op.a) * self.val(op.b)
            return
        self._int(op, lambda a, b: a * b, op.a, op.b)

    def op_mad(self, op, params) -> None:
        self._int(op, lambda a, b, c: a * b + c, op.a, op.b, op.c)

    def op_setp(self, op, params) -> None:
        cmp = op.mods.data.split(".")[0]
        a, b = self.val(op.a), self.val(op.b)
        self.vals[op.dst] = {"lt": a < b, "ge": a >= b, "eq": a == b, "ne": a != b}[cmp]

    def _where(self, addr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        base = OUT if (addr < SRC).all() else SRC
        mem = self.mem[base]
        idx = (addr - base) // 2
        assert ((addr - base) % 2 == 0).all() and (idx >= 0).all() and (idx < mem.size).all()
        return mem, idx

    def op_ld(self, op, params) -> None:
        on = self.guard(op)
        addr = self.val(op.addr) + op.offset.value.data
        (dst,) = op.dsts
        out = self.vals.get(dst, np.zeros(self.n, np.int64)).copy()
        if on.any():
            mem, idx = self._where(addr[on])
            out[on] = mem[idx]
        self.vals[dst] = out

    def op_st(self, op, params) -> None:
        on = self.guard(op)
        addr = self.val(op.addr) + op.offset.value.data
        (src,) = op.srcs
        if on.any():
            mem, idx = self._where(addr[on])
            mem[idx] = self.val(src)[on]


@pytest.mark.parametrize(("o", "c", "kh", "kw", "cp", "kwp"), [
    (5, 3, 3, 3, 8, 0),      # channels padded to 8
    (16, 64, 3, 3, 64, 0),   # ResNet's 3x3
    (4, 3, 7, 7, 8, 8),      # the stem's filter rows padded to 8 taps
    (6, 8, 2, 3, 8, 0),
])
@pytest.mark.parametrize(("flip", "swapped"), [(False, False), (True, False), (True, True),
                                               (False, True)])
def test_weight_relayout_flips_and_swaps(o, c, kh, kw, cp, kwp, flip, swapped):
    rng = np.random.default_rng(o * 100 + c)
    w = rng.integers(1, 1 << 15, (o, c, kh, kw), dtype=np.int64)  # distinct-ish 16-bit words
    stored = np.ascontiguousarray(w.transpose(1, 0, 2, 3)) if swapped else w
    func = conv_layout.weight_kernel("w", o, c, kh, kw, cp, 2, 1, kwp, flip, swapped)
    func.verify()
    kp = max(kwp, kw)
    k = kh * kp * cp
    grid = conv_layout.weight_grid(o, k)
    out = np.full(o * k + 64, POISON, np.int64)
    sim = Grid(grid * conv_layout.THREADS, conv_layout.THREADS,
               {OUT: out, SRC: stored.reshape(-1).copy()})
    sim.run(func, [OUT, SRC])
    want = np.zeros((o, kh, kp, cp), np.int64)
    src = w[:, :, ::-1, ::-1] if flip else w
    want[:, :, :kw, :c] = src.transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(out[: o * k].reshape(o, kh, kp, cp), want)
    assert (out[o * k:] == POISON).all()
