"""The staged store's emitted Target IR, run on a small lockstep simulator of one consumer
warpgroup (the ~20 instructions it uses), against the wgmma fragment layout: every element
of the tile inside the bounds gets its accumulator's value (rounded as the register store
rounds), nothing outside them is written, and every access is aligned and in bounds.

Lockstep execution runs each instruction for all 128 threads before the next, which is
what the named barriers guarantee between the write and read phases (the barriers' own
placement is checked in the filecheck tests)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tessera.ir import target as tt
from tessera.passes.sm90 import builders
from tessera.passes.sm90 import staged_store as ss
from tessera.passes.sm90.asm import TargetAsm

GLOBAL = 1 << 24
"""The simulated address of C."""
POISON = 0xFF
_BYTES = {"b16": 2, "b32": 4, "f32": 4}


class Warpgroup:
    """Runs a straight-line ``ttarget.func`` body for 128 threads in lockstep."""

    def __init__(self, shared: int, global_bytes: int) -> None:
        self.shared = np.zeros(shared, np.uint8)
        self.glob = np.full(global_bytes, POISON, np.uint8)
        self.vals: dict = {}

    def val(self, v) -> np.ndarray:
        op = v.owner
        if isinstance(op, tt.ImmOp):
            x = op.value.value.data
            return np.full(128, x, np.float32 if isinstance(x, float) else np.int64)
        return self.vals[v]

    def run(self, func: tt.FuncOp, params: list[int]) -> None:
        for op in func.block.ops:
            getattr(self, "op_" + op.name.split(".")[1], self.unknown)(op, params)

    def unknown(self, op, params) -> None:
        raise NotImplementedError(op.name)

    def op_reg(self, op, params) -> None:
        pass

    op_imm = op_label = op_bar_sync = op_ret = op_reg

    def op_sreg(self, op, params) -> None:
        assert op.sreg.data == "tid.x"
        self.vals[op.dst] = np.arange(128, dtype=np.int64)

    def op_ld_param(self, op, params) -> None:
        self.vals[op.dst] = np.full(128, params[op.param.index], np.int64)

    def op_cvta(self, op, params) -> None:
        self.vals[op.dst] = self.val(op.src).copy()

    def op_mov(self, op, params) -> None:
        assert op.guard is None
        self.vals[op.dst] = self.val(op.src).copy()

    def _int(self, op, f) -> None:
        ty = op.mods.data.split(".")[-1]
        r = f(self.val(op.a), self.val(op.b)) if not hasattr(op, "c") else f(
            self.val(op.a), self.val(op.b), self.val(op.c))
        if ty == "pred":
            self.vals[op.dst] = r.astype(bool)
            return
        r = r.astype(np.int64)
        if ty != "u64":  # simulated addresses stay far below 2^63
            r = r & 0xFFFFFFFF
        if ty == "s32":
            r = np.where(r >= 1 << 31, r - (1 << 32), r)
        self.vals[op.dst] = r

    def op_add(self, op, params) -> None:
        self._int(op, lambda a, b: a + b)

    def op_sub(self, op, params) -> None:
        self._int(op, lambda a, b: a - b)

    def op_and(self, op, params) -> None:
        self._int(op, lambda a, b: a & b)

    def op_shr(self, op, params) -> None:
        self._int(op, lambda a, b: a >> b)

    def op_mul(self, op, params) -> None:
        assert op.mods.data in ("lo.u32", "wide.u32")
        if op.mods.data == "wide.u32":  # a 64-bit result
            self.vals[op.dst] = self.val(op.a) * self.val(op.b)
            return
        self._int(op, lambda a, b: a * b)

    def op_mad(self, op, params) -> None:
        self._int(op, lambda a, b, c: a * b + c)

    def op_setp(self, op, params) -> None:
        cmp, ty = op.mods.data.split(".")
        a, b = self.val(op.a), self.val(op.b)
        if ty == "s32":
            a, b = (np.where(x >= 1 << 31, x - (1 << 32), x) for x in (a & 0xFFFFFFFF,
                                                                       b & 0xFFFFFFFF))
        self.vals[op.dst] = {"gt": a > b, "lt": a < b, "ne": a != b, "eq": a == b}[cmp]

    def op_cvt(self, op, params) -> None:
        mods = op.mods.data
        assert mods in ("rn.bf16x2.f32", "rn.f16x2.f32"), mods
        et = ml_dtypes.bfloat16 if "bf16" in mods else np.float16
        hi, lo = (self.val(s).astype(np.float32).astype(et).view(np.uint16).astype(np.int64)
                  for s in op.srcs)
        self.vals[op.dst] = (hi << 16) | lo

    def _access(self, op) -> tuple[np.ndarray, str, int, int, np.ndarray]:
        parts = op.mods.data.split(".")
        space, ty = parts[0], parts[-1]
        n = 4 if "v4" in parts else 2 if "v2" in parts else 1
        size = _BYTES[ty]
        mem = self.shared if space == "shared" else self.glob
        base = 0 if space == "shared" else GLOBAL
        addr = self.val(op.addr) + op.offset.value.data - base
        on = np.ones(128, bool) if op.guard is None else self.val(op.guard)
        a = addr[on]
        assert (a % (n * size) == 0).all(), f"{op.mods.data}: misaligned"
        assert (a >= 0).all() and (a + n * size <= mem.size).all(), f"{op.mods.data}: out of bounds"
        return mem, ty, n, size, on

    def op_st(self, op, params) -> None:
        mem, ty, n, size, on = self._access(op)
        addr = self.val(op.addr) + op.offset.value.data - (0 if mem is self.shared else GLOBAL)
        for i, src in enumerate(op.srcs):
            v = self.val(src)
            bits = (v.astype(np.float32).view(np.uint32).astype(np.int64) if ty == "f32"
                    else v & ((1 << 8 * size) - 1))
            for lane in np.nonzero(on)[0]:
                at = int(addr[lane]) + i * size
                mem[at:at + size] = np.frombuffer(int(bits[lane]).to_bytes(size, "little"),
                                                  np.uint8)

    def op_ld(self, op, params) -> None:
        mem, ty, n, size, on = self._access(op)
        assert on.all()
        addr = self.val(op.addr) + op.offset.value.data
        for i, dst in enumerate(op.dsts):
            self.vals[dst] = np.array([int.from_bytes(mem[int(x) + i * size:int(x) + (i + 1) * size]
                                                      .tobytes(), "little") for x in addr],
                                      np.int64)


def _fragment(t: int, i: int) -> float:
    """Accumulator ``i`` of thread ``t``: distinct values, exact in f32."""
    return float(t * 256 + i) - 9000.5


@pytest.mark.parametrize(("out", "n", "tile_cols", "n0", "rows", "row0", "row_off"), [
    ("bf16", 50257, 256, 50176, 333, 320, 0),  # odd N, ragged right edge and rows
    ("bf16", 4100, 128, 4096, 333, 256, 0),  # N % 8 == 4
    ("f16", 1002, 128, 896, 64, 0, 0),  # 4-byte stores
    ("f32", 50257, 128, 50176, 333, 300, 0),
    ("f32", 1000, 128, 896, 300, 256, 0),  # 16-byte stores
    ("f32", 1002, 64, 960, 64, 0, 0),  # 8-byte stores, a 64-column tile
    ("f32", 4096, 128, 1024, 128, 64, 192),  # split-K: 192 rows further down
])
def test_staged_store_writes_the_fragment(out: str, n: int, tile_cols: int, n0: int, rows: int,
                                          row0: int, row_off: int) -> None:
    esize = ss.STORE_TYPES[out]
    shape = ss.StoreShape(out, rows, n, n, tile_cols)
    func = tt.FuncOp("store", ["u64"], 128)
    e = TargetAsm(func)
    tid = e.sreg("tid.x")
    acc = [e.reg("f32") for _ in range(tile_cols // 2)]
    store = ss.StagedStore(e, shape, e.add32(e.imm(0), 0), tid,
                           lambda: e.add(tt.BarSyncOp(1, threads=128)),
                           builders.global_pointer(e, func.block.args[0]))

    def pair(j: int, h: int):
        return acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]

    store.tile(e.add32(e.imm(row0), 0), e.add32(e.imm(n0), 0), pair,
               e.add32(e.imm(row_off), 0) if row_off else None)
    e.add(tt.RetOp())
    func.verify()

    total_rows = row_off + max(rows, row0 + 64)
    wg = Warpgroup(ss.staged_bytes(1, esize), total_rows * n * esize)
    for i, r in enumerate(acc):
        wg.vals[r] = np.array([_fragment(t, i) for t in range(128)], np.float32)
    wg.run(func, [GLOBAL])

    et = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}[out]
    want = np.full(total_rows * n * esize, POISON, np.uint8)
    view = want.view({2: np.uint16, 4: np.uint32}[esize]).reshape(total_rows, n)
    for t in range(128):
        warp, lane = divmod(t, 32)
        for i in range(tile_cols // 2):
            j, h, x = i // 4, (i // 2) % 2, i % 2
            r = row0 + 16 * warp + lane // 4 + 8 * h
            c = n0 + 8 * j + 2 * (lane % 4) + x
            if r < rows and c < n:
                view[row_off + r, c] = np.array([_fragment(t, i)], np.float32).astype(et).view(
                    view.dtype)[0]
    got = wg.glob.view(view.dtype).reshape(total_rows, n)
    bad = np.argwhere(got != view)
    assert not len(bad), f"{len(bad)} elements differ, first at {bad[:3].tolist()}"
    written = (view != np.array(POISON * 0x01010101, np.uint32).astype(view.dtype)).sum()
    assert written == (min(rows, row0 + 64) - row0) * (min(n, n0 + tile_cols) - n0)
