"""The attention backward as two Hopper TMA + wgmma kernels (``tgraph.flash_attention_bwd``).

The FlashAttention-2/3 algorithm on ``wgmma``, deterministic (every output element is
accumulated by one thread in a fixed order; no atomics). Both kernels have one shape:
a CTA keeps a *resident* tile of ``BLOCK_R = 128`` rows of two operands ``R1, R2`` in
shared memory (TMA, loaded once) and loops over blocks of ``BLOCK_S = 64`` rows of two
*streamed* operands ``S1, S2`` (TMA into a ring of ``stages`` slots with ``full`` /
``empty`` mbarriers, as in :mod:`.lower_attention_sm90`). Per streamed block, each of
the two consumer warpgroups (64 resident rows each) computes

* ``X = R1 S1ᵀ`` and ``Y = R2 S2ᵀ`` (``D / 16`` ``wgmma m64n64k16`` each, both operands
  K-major in shared memory);
* ``P = exp2(X scale log2e - lse log2e)`` from the log-sum-exp the forward saved, and
  ``dS = P ∘ (Y - Di)`` (``Di = rowsum(dO ∘ O)``), on the wgmma D fragments;
* ``accB += dS S1`` (and in ``dkdv`` ``accA += P S2``) with the 16-bit ``P`` / ``dS``
  packed in registers as the A operand (``wgmma_rs``, B N-major in shared memory).

``dkdv``: R = (K, V) of 128 keys, S = (Q, dO): ``X = Sᵀ``, ``Y = dPᵀ``, ``accA = dV``,
``accB = dK / scale``; lse and Di vary along the fragment's columns (queries) and are
read per block. ``dq``: R = (Q, dO) of 128 queries, S = (K, V): ``X = S``, ``Y = dP``,
``accB = dQ / scale``; lse and Di of the thread's two rows are read once.

The log-sum-exp (as ``-lse log2e``) and ``Di`` come from the ``attention_bwd_dot``
prologue kernel in buffers of ``[heads, pad]`` f32 (``pad = ceil(Sq / 128) 128``, zeros
past ``Sq``), so the kernels read them without bounds checks.

Scheduling within a consumer: ``X`` and ``Y`` are issued together; P is computed while
``Y`` runs, dS while ``accA += P S2`` runs, and a block's last accumulations stay in flight
while the next block's ``X`` and ``Y`` are issued (``wgmma.wait_group 2`` then frees the
block's ring slot). :data:`STAGES`, :data:`OVERLAP`, :data:`KEEP_P` and :data:`DQ_BLOCK_S`
choose among variants measured on an H100
(docs/perf/2026-11-24-h100-attention-bwd-wgmma.txt): the defaults were the fastest.

Masks: causal is key ``<=`` query (top-left aligned, as the forward). Streamed rows past
the end of the sequence (the next head's rows, or TMA's zero fill) are masked to
``P = 0`` in the blocks that need it (a uniform branch around the mask code); resident
rows past the end only produce rows that are not stored. Causal ``dkdv`` tiles start at
the first query block reaching their keys, ``dq`` tiles stop after the last key block
their queries see.

Persistent grid (as the forward's): one CTA per SM, each looping over work units
(:func:`builders.for_work_units`: resident tiles head by head, or when causal pairs of
a heavy and a light tile of one head, so that units cost about the same). The consumers
release R (``r_empty``) once a tile's last product is done, so the producer loads the
next tile's R under this tile's store; the streamed ring runs on across tiles.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import BFloat16Type, Float16Type, TensorType, f32
from xdsl.ir import SSAValue

from tessera.ir import graph as g
from tessera.ir import target as tt
from tessera.passes import tile_attention_bwd
from tessera.passes.matmul_config import NUM_SMS
from tessera.passes.sm90 import builders
from tessera.passes.sm90.asm import TargetAsm
from tessera.passes.sm90.constants import (
    ATTENTION_REGISTERS,
    ELEM_BYTES,
    MBARRIER_BYTES,
    SWIZZLE_BYTES,
    WARPGROUP_THREADS,
    WGMMA_K,
    WGMMA_M,
    desc_hi,
)
from tessera.passes.tile_builder import cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

LOG2E = 1.4426950408889634
BOX = SWIZZLE_BYTES // ELEM_BYTES
"""Columns (of D) per TMA box: one 128-byte swizzle row of 16-bit elements."""
BLOCK_R = 128
"""Resident rows per CTA (keys of ``dkdv``, queries of ``dq``): two warpgroups of 64."""
BLOCK_S = 64
"""Streamed rows per loop iteration."""
CONSUMERS = 2
STAGES = 2
"""Slots of the streamed ring; with :data:`OVERLAP` and :data:`KEEP_P` the variants
bench/attention_bwd_sm90.py times (:class:`Sm90AttentionBwd`)."""
STAGES_D64 = 3
"""Ring slots at head size 64: its smaller blocks leave room for a third, which took the
models' shapes 3-4 % faster (``bench/attention_shapes.py --variants``; at head size 128
the third slot was no faster)."""
OVERLAP = True
KEEP_P = True
DQ_BLOCK_S = BLOCK_S
HEAD_SIZES = (64, 128)
_TYPE_NAMES = {BFloat16Type: "bf16", Float16Type: "f16"}


def eligible(op: g.FlashAttentionBwdOp) -> str | None:
    """None if ``op`` can use the sm90 backward kernels, else why not (the ``mma.sync``
    kernels of :mod:`tessera.passes.tile_attention_bwd` take it then)."""
    et = g.elem_of(op.q)
    if not isinstance(et, BFloat16Type | Float16Type):
        return "q is not bf16 or f16"
    if any(g.elem_of(x) != et for x in (op.k, op.v, op.o, op.do)):
        return "q, k, v, o and do differ in element type"
    lse = op.lse.type
    if not isinstance(lse, TensorType) or lse.element_type != f32:
        return "the log-sum-exp is not f32"
    qs, ks, vs = g.shape_of(op.q), g.shape_of(op.k), g.shape_of(op.v)
    if len(qs) < 2 or qs[:-2] != ks[:-2] or qs[:-2] != vs[:-2]:
        return "batch dims differ"
    if g.shape_of(op.o) != qs or g.shape_of(op.do) != qs:
        return "o and do differ from q in shape"
    if qs[-1] not in HEAD_SIZES or ks[-1] != qs[-1] or vs[-1] != qs[-1]:
        return f"head size {qs[-1]} (needs {' or '.join(map(str, HEAD_SIZES))}, equal for q, k, v)"
    if ks[-2] != vs[-2] or ks[-2] < 1 or qs[-2] < 1 or 0 in qs[:-2]:
        return "empty or mismatched sequence lengths"
    return None


@dataclass(frozen=True)
class Sm90AttentionBwd:
    """One specialized backward kernel: ``kind`` ``"dkdv"`` or ``"dq"``, sizes, element
    type, scale and causality."""

    kind: str
    heads: int  # product of the batch dims
    sq: int
    sk: int
    d: int
    et: str  # "bf16" or "f16"
    scale: float
    causal: bool
    stages: int = 2
    overlap: bool = True
    """Leave a block's last wgmmas in flight while the next block's ``X`` and ``Y`` are
    issued (its slot is released then), instead of waiting for them at the block's end."""
    block_s: int = BLOCK_S
    """Streamed rows per loop iteration (64; 128 fits the registers of ``dq`` only)."""
    keep_p: bool = True
    """``dkdv``: keep P in f32 registers for dS (else it is unpacked from the 16-bit A
    operand of ``dV += P dO``: fewer live registers)."""
    sms: int = NUM_SMS
    """CTAs of the persistent grid: the device's SM count (any value is correct)."""

    @property
    def dkdv(self) -> bool:
        return self.kind == "dkdv"

    @property
    def n_res(self) -> int:
        """Rows of the resident operands per head."""
        return self.sk if self.dkdv else self.sq

    @property
    def n_str(self) -> int:
        """Rows of the streamed operands per head."""
        return self.sq if self.dkdv else self.sk

    @property
    def pad(self) -> int:
        """Row stride (per head) of the lse and Di buffers."""
        return lse_pad(self.sq)

    @property
    def nbox(self) -> int:
        return self.d // BOX

    @property
    def res_bytes(self) -> int:
        """One resident operand: ``D / 64`` boxes of ``BLOCK_R`` 128-byte rows."""
        return self.nbox * BLOCK_R * SWIZZLE_BYTES

    @property
    def str_bytes(self) -> int:
        """One streamed block of one operand."""
        return self.nbox * self.block_s * SWIZZLE_BYTES

    def res_offset(self, i: int) -> int:
        return i * self.res_bytes

    def str_offset(self, i: int, stage: int = 0) -> int:
        return 2 * self.res_bytes + (i * self.stages + stage) * self.str_bytes

    @property
    def bars_offset(self) -> int:
        return 2 * self.res_bytes + 2 * self.stages * self.str_bytes

    @property
    def smem_bytes(self) -> int:
        """Operands, ``2 + 4 stages`` mbarriers and 1 KiB for alignment."""
        return self.bars_offset + MBARRIER_BYTES * (2 + 4 * self.stages) + 1024

    @property
    def threads(self) -> int:
        return WARPGROUP_THREADS * (1 + CONSUMERS)

    @property
    def res_tiles(self) -> int:
        return cdiv(self.n_res, BLOCK_R)

    @property
    def units(self) -> int:
        """Work units of the persistent grid (:func:`builders.work_units`): resident
        tiles, or when causal pairs of them."""
        return builders.work_units(self.heads, self.res_tiles, self.causal)

    def grid(self) -> tuple[int, int, int]:
        """Persistent: at most one CTA per SM (and per work unit)."""
        return (max(1, min(self.units, self.sms)), 1, 1)

    @property
    def outputs(self) -> int:
        return 2 if self.dkdv else 1

    def boxes(self) -> list[int]:
        """``ttarget.launch_ex`` boxes: outputs by pointer, R1, R2, S1, S2 by TMA, lse and
        Di by pointer."""
        return [*[0, 0] * self.outputs, BOX, BLOCK_R, BOX, BLOCK_R,
                BOX, self.block_s, BOX, self.block_s, 0, 0, 0, 0]


def lse_pad(sq: int) -> int:
    """Rows per head of the lse and Di buffers the kernels read: ``Sq`` rounded up to
    ``BLOCK_R`` (every resident or streamed row has an entry)."""
    return cdiv(sq, BLOCK_R) * BLOCK_R


class _Builder:
    """Emits the kernel of one :class:`Sm90AttentionBwd` (see the module docstring)."""

    def __init__(self, name: str, spec: Sm90AttentionBwd):
        self.spec = spec
        params = ["u64"] * spec.outputs + ["tmap"] * 4 + ["u64", "u64"]
        self.func = tt.FuncOp(name, params, spec.threads, minnctapersm=1)
        self.e = TargetAsm(self.func)

    # ------------------------------------------------------------------ setup

    def build(self) -> tt.FuncOp:
        s, e = self.spec, self.e
        args = list(self.func.block.args)
        outs, tmaps, (lse_param, di_param) = args[: s.outputs], args[s.outputs:-2], args[-2:]
        self.tid, self.bid, self.sbase = builders.shared_base(e)
        bars = e.add32(self.sbase, s.bars_offset)
        self.r_full = bars
        self.r_empty = e.add32(bars, MBARRIER_BYTES)
        self.full = [e.add32(bars, MBARRIER_BYTES * (2 + i * s.stages)) for i in (0, 1)]
        self.empty = [e.add32(bars, MBARRIER_BYTES * (2 + (2 + i) * s.stages)) for i in (0, 1)]

        def barriers():
            yield self.r_full, 1
            yield self.r_empty, CONSUMERS
            for st in range(s.stages):
                for i in (0, 1):
                    yield e.add32(self.full[i], MBARRIER_BYTES * st), 1
                    yield e.add32(self.empty[i], MBARRIER_BYTES * st), CONSUMERS

        builders.init_barriers(e, self.tid, barriers())
        self.end = "DONE"
        wg, consumer = builders.split_warpgroups(e, self.tid)
        self.producer(tmaps)
        e.add(tt.LabelOp(consumer))
        self.consumer(outs, lse_param, di_param, e.bin(tt.SubOp, "u32", wg, 1))
        e.add(tt.LabelOp(self.end))
        e.add(tt.RetOp())
        return self.func

    def tiles(self, body: Callable[[SSAValue], None]) -> None:
        """Emit ``body(first)`` once per resident tile of this CTA
        (:func:`builders.for_work_units`), after setting ``bh``, ``r0`` and the block
        range for it; ``first`` is true in the CTA's first tile."""
        s = self.spec

        def tile(head: SSAValue, rt: SSAValue, first: SSAValue) -> None:
            self.bh = head
            self.r0 = self.e.mul32(rt, BLOCK_R)
            self.block_range()
            body(first)

        builders.for_work_units(self.e, self.bid, s.grid()[0], s.heads, s.res_tiles, s.causal,
                                tile)

    def block_range(self) -> None:
        """The streamed blocks ``[first, stop)`` this CTA visits and those whose mask it
        applies: ``jb < lo_end`` or ``jb >= hi_start``."""
        s, e = self.spec, self.e
        n_blocks = cdiv(s.n_str, s.block_s)
        full = s.n_str // s.block_s
        self.stop, self.lo_end = e.reg("b32"), e.reg("b32")
        self.hi_start = e.reg("b32")
        if s.dkdv and s.causal:
            # queries >= the first key: from block r0 / 64; masked up to the tile's last key
            self.first = e.bin(tt.DivOp, "u32", self.r0, s.block_s)
            e.mov("u32", self.stop, n_blocks)
            diag = e.add32(self.first, BLOCK_R // s.block_s)
            e.add(tt.MinOp("u32", self.lo_end, diag, e.imm(n_blocks)))
            e.mov("u32", self.hi_start, full)
            return
        self.first = e.reg("b32")
        e.mov("u32", self.first, 0)
        e.mov("u32", self.lo_end, 0)
        if s.causal:  # dq: keys up to the tile's last query; unmasked below its first
            last = e.bin(tt.DivOp, "u32", e.add32(self.r0, BLOCK_R + s.block_s - 1), s.block_s)
            e.add(tt.MinOp("u32", self.stop, last, e.imm(n_blocks)))
            below = e.bin(tt.DivOp, "u32", self.r0, s.block_s)
            e.add(tt.MinOp("u32", self.hi_start, below, e.imm(full)))
        else:
            e.mov("u32", self.stop, n_blocks)
            e.mov("u32", self.hi_start, full)

    # ------------------------------------------------------------------ producer

    def producer(self, tmaps: list[SSAValue]) -> None:
        """Per tile: R once the consumers released the previous tile's (``r_empty``),
        then its streamed blocks through the ring, which runs on across tiles."""
        s, e = self.spec, self.e
        builders.enter_producer(e, self.tid, self.end, ATTENTION_REGISTERS)
        maps = [builders.tensor_map(e, p) for p in tmaps]
        jb, n, stage, phase, rphase = (e.reg("b32") for _ in range(5))
        for v in (n, stage, phase, rphase):
            e.mov("u32", v, 0)

        def tile(first: SSAValue) -> None:
            builders.wait_slot_free(e, e.imm(0), rphase, self.r_empty, first)
            e.add(tt.MbarrierArriveOp(self.r_full, e.imm(2 * s.res_bytes)))
            r_row = e.mad32(self.bh, s.n_res, self.r0)
            for i in (0, 1):
                for b in range(s.nbox):
                    dst = e.add32(self.sbase, s.res_offset(i) + b * BLOCK_R * SWIZZLE_BYTES)
                    e.add(tt.CpAsyncBulkTensorOp(dst, maps[i], e.imm(b * BOX), r_row,
                                                 self.r_full))
            e.add(tt.XorOp("b32", rphase, rphase, e.imm(1)))
            e.mov("u32", jb, self.first)
            head_row = e.mul32(self.bh, s.n_str)
            loop, done = e.label("PRODUCE"), e.label("PRODUCE_END")
            e.add(tt.LabelOp(loop))
            e.add(tt.BraOp(done, e.setp("ge", jb, self.stop)))
            row = e.mad32(jb, s.block_s, head_row)
            fresh = e.setp("lt", n, s.stages)
            for i in (0, 1):
                builders.wait_slot_free(e, stage, phase, self.empty[i], fresh)
                full = builders.slot_barrier(e, stage, self.full[i])
                e.add(tt.MbarrierArriveOp(full, e.imm(s.str_bytes)))
                base = e.mad32(stage, s.str_bytes, e.add32(self.sbase, s.str_offset(i)))
                for b in range(s.nbox):
                    dst = e.add32(base, b * s.block_s * SWIZZLE_BYTES) if b else base
                    e.add(tt.CpAsyncBulkTensorOp(dst, maps[2 + i], e.imm(b * BOX), row, full))
            for v in (jb, n):
                e.add(tt.AddOp("u32", v, v, e.imm(1)))
            e.advance(stage, phase, s.stages)
            e.add(tt.BraOp(loop))
            e.add(tt.LabelOp(done))

        self.tiles(tile)
        e.add(tt.BraOp(self.end))

    # ------------------------------------------------------------------ consumers

    def consumer(
        self, outs: list[SSAValue], lse_param: SSAValue, di_param: SSAValue, cw: SSAValue
    ) -> None:
        s, e = self.spec, self.e
        builders.enter_consumer(e, ATTENTION_REGISTERS)
        t, warp, lane = builders.fragment_lanes(e, self.tid)
        self.leader = e.setp("eq", t, 0)
        self.always = e.setp("eq", t, t)
        self.never = e.setp("ne", t, t)
        self.cw, self.warp, self.lane = cw, warp, lane
        self.col0 = builders.fragment_col(e, lane)
        self.c = s.scale * LOG2E

        # descriptors: R1, R2 as A (this warpgroup's 64 rows), S1, S2 of slot 0 as B
        k_major = desc_hi(16, 8 * SWIZZLE_BYTES)
        self.r_desc = [
            e.desc(e.add32(e.mad32(cw, WGMMA_M * SWIZZLE_BYTES, self.sbase), s.res_offset(i)),
                   k_major)
            for i in (0, 1)
        ]
        self.s_desc = [e.desc(e.add32(self.sbase, s.str_offset(i)), k_major) for i in (0, 1)]
        n_major = desc_hi(s.block_s * SWIZZLE_BYTES, 8 * SWIZZLE_BYTES)
        self.s_desc_n = [e.desc(e.add32(self.sbase, s.str_offset(i)), n_major) for i in (0, 1)]

        self.x = [e.reg("f32") for _ in range(s.block_s // 2)]
        self.y = [e.reg("f32") for _ in range(s.block_s // 2)]
        self.acc_b = [e.reg("f32") for _ in range(s.d // 2)]
        self.acc_a = [e.reg("f32") for _ in range(s.d // 2)] if s.dkdv else []
        self.p = [e.reg("b32") for _ in range(s.block_s // 4)]
        self.ds = [e.reg("b32") for _ in range(s.block_s // 4)]
        self.lse0, self.di0 = (builders.global_pointer(e, p) for p in (lse_param, di_param))
        # the streamed ring's slot, running on across tiles
        self.stage, self.phase, self.rphase, self.prev = (e.reg("b32") for _ in range(4))
        for v in (self.stage, self.phase, self.rphase, self.prev):
            e.mov("u32", v, 0)
        self.tiles(lambda first: self.consumer_tile(outs))

    def consumer_tile(self, outs: list[SSAValue]) -> None:
        """One resident tile: its streamed blocks, then the accumulators stored. R is
        released (``r_empty``) once the last product reading it is done, so the producer
        loads the next tile's under this tile's store."""
        s, e = self.spec, self.e
        stage, phase = self.stage, self.phase
        self.row0 = builders.fragment_row(e, self.r0, self.cw, self.warp, self.lane)
        for r in self.acc_a + self.acc_b:
            e.mov("f32", r, e.fimm(0.0))

        # -lse log2e and Di: per row (dq, loaded once) or per column (dkdv, per block)
        lse_ptr, di_ptr = e.reg("b64"), e.reg("b64")
        e.mov("b64", lse_ptr, self.lse0)
        e.mov("b64", di_ptr, self.di0)
        if s.dkdv:
            base = e.mad32(self.bh, s.pad, self.col0)
            for ptr in (lse_ptr, di_ptr):
                builders.advance_pointer(e, ptr, base, 4)
        else:
            for ptr in (lse_ptr, di_ptr):
                builders.advance_pointer(e, ptr, e.mad32(self.bh, s.pad, self.row0), 4)
            self.row_lse = [self.load_f32(lse_ptr, 8 * h * 4) for h in (0, 1)]
            self.row_di = [self.load_f32(di_ptr, 8 * h * 4) for h in (0, 1)]
        self.lse_ptr, self.di_ptr = lse_ptr, di_ptr

        e.wait(self.r_full, self.rphase)
        e.add(tt.XorOp("b32", self.rphase, self.rphase, e.imm(1)))
        jb = e.reg("b32")
        e.mov("u32", jb, self.first)
        top, done = e.label("BWD_LOOP"), e.label("BWD_LOOP_END")
        e.add(tt.LabelOp(top))
        e.add(tt.BraOp(done, e.setp("ge", jb, self.stop)))
        self.iteration(jb, stage, phase)
        if s.overlap:
            e.mov("u32", self.prev, stage)
        e.add(tt.AddOp("u32", jb, jb, e.imm(1)))
        e.advance(stage, phase, s.stages)
        e.add(tt.BraOp(top))
        e.add(tt.LabelOp(done))
        e.add(tt.WgmmaWaitOp(0))
        # R and (with overlap) the last block's slot are read no more
        e.add(tt.MbarrierArriveOp(self.r_empty, guard=self.leader))
        if s.overlap:
            none = e.label("NO_BLOCKS")
            e.add(tt.BraOp(none, e.setp("eq", jb, self.first)))
            self.release(self.prev)
            e.add(tt.LabelOp(none))
        self.store(outs)

    def release(self, stage: SSAValue) -> None:
        """Hand slot ``stage`` of both streamed operands back to the producer."""
        for i in (0, 1):
            self.e.add(tt.MbarrierArriveOp(builders.slot_barrier(self.e, stage, self.empty[i]),
                                           guard=self.leader))

    def load_f32(self, ptr: SSAValue, offset: int) -> SSAValue:
        r = self.e.reg("f32")
        self.e.add(tt.LdOp("global.nc.f32", [r], ptr, offset))
        return r

    def iteration(self, jb: SSAValue, stage: SSAValue, phase: SSAValue) -> None:
        """One streamed block: X, Y, P, dS and the accumulations (module docstring)."""
        s, e = self.spec, self.e
        s64 = builders.stage_index64(e, stage)
        for i, acc in ((0, self.x), (1, self.y)):
            e.wait(builders.slot_barrier(e, stage, self.full[i]), phase)
            e.add(tt.FenceOp("wgmma"))
            self.gemm_ss(acc, self.r_desc[i], builders.stage_descriptor(
                e, s64, s.str_bytes, self.s_desc[i]))
            e.add(tt.FenceOp("wgmma_commit"))
        if s.overlap:  # the previous block's dV / dK wgmmas are done: release its slot
            e.add(tt.WgmmaWaitOp(2))
            skip = e.label("FIRST_BLOCK")
            e.add(tt.BraOp(skip, e.setp("eq", jb, self.first)))
            self.release(self.prev)
            e.add(tt.LabelOp(skip))
        if s.dkdv:  # this block's columns of -lse log2e and Di
            col = e.mul32(jb, s.block_s * 4)
            lse_ptr, di_ptr = (self.offset_ptr(p, col) for p in (self.lse_ptr, self.di_ptr))
            lse = self.load_pairs(lse_ptr)
        e.add(tt.WgmmaWaitOp(1))
        self.mask(jb)
        for j in range(s.block_s // 8):
            for h in (0, 1):
                for c in (0, 1):
                    neg = lse[2 * j + c] if s.dkdv else self.row_lse[h]
                    r = self.x[4 * j + 2 * h + c]
                    e.ex2(e.fma(r, self.c, neg), dst=r)
        if s.dkdv:
            self.pack(self.x, self.p)
            e.add(tt.FenceOp("wgmma"))
            self.gemm_rs(self.acc_a, self.p, builders.stage_descriptor(
                e, s64, s.str_bytes, self.s_desc_n[1]))
            e.add(tt.FenceOp("wgmma_commit"))
            di = self.load_pairs(di_ptr)
            e.add(tt.WgmmaWaitOp(1))
            probs = self.x if s.keep_p else self.unpack(self.p)
        else:
            e.add(tt.WgmmaWaitOp(0))
            probs = self.x
        for j in range(s.block_s // 8):
            for h in (0, 1):
                for c in (0, 1):
                    i = 4 * j + 2 * h + c
                    dd = di[2 * j + c] if s.dkdv else self.row_di[h]
                    y = self.y[i]
                    e.add(tt.SubOp("rn.f32", y, y, dd))
                    e.add(tt.MulOp("rn.f32", y, y, probs[i]))
        self.pack(self.y, self.ds)
        e.add(tt.FenceOp("wgmma"))
        self.gemm_rs(self.acc_b, self.ds, builders.stage_descriptor(
            e, s64, s.str_bytes, self.s_desc_n[0]))
        e.add(tt.FenceOp("wgmma_commit"))
        if not s.overlap:
            e.add(tt.WgmmaWaitOp(0))
            self.release(stage)

    def offset_ptr(self, ptr: SSAValue, byte_offset: SSAValue) -> SSAValue:
        out = self.e.reg("b64")
        wide = self.e.reg("b64")
        self.e.add(tt.CvtOp("u64.u32", wide, [byte_offset]))
        self.e.add(tt.AddOp("u64", out, ptr, wide))
        return out

    def load_pairs(self, ptr: SSAValue) -> list[SSAValue]:
        """The f32 pairs at columns ``8j + col0`` (j < block_s / 8) of a row buffer."""
        vals = []
        for j in range(self.spec.block_s // 8):
            a, b = self.e.reg("f32"), self.e.reg("f32")
            self.e.add(tt.LdOp("global.nc.v2.f32", [a, b], ptr, 32 * j))
            vals += [a, b]
        return vals

    def mask(self, jb: SSAValue) -> None:
        """In the blocks that need it (``jb < lo_end`` or ``jb >= hi_start``, a uniform
        branch), X of the masked positions becomes ``-inf``."""
        s, e = self.spec, self.e
        skip, apply = e.label("NO_MASK"), e.label("MASK")
        e.add(tt.BraOp(apply, e.setp("lt", jb, self.lo_end)))
        e.add(tt.BraOp(skip, e.setp("lt", jb, self.hi_start)))
        e.add(tt.LabelOp(apply))
        colbase = e.mad32(jb, s.block_s, self.col0)
        ninf = e.fimm(float("-inf"))
        for h in (0, 1):
            row = e.add32(self.row0, 8 * h)
            # columns c with c <= limit (streamed rows' end; causal dq: c <= row)
            limit = e.reg("b32")
            e.mov("u32", limit, s.n_str - 1)
            if s.causal and not s.dkdv:
                e.add(tt.MinOp("u32", limit, limit, row))
            rel = e.bin(tt.SubOp, "s32", limit, colbase)
            low = e.bin(tt.SubOp, "s32", row, colbase) if s.causal and s.dkdv else None
            for j in range(s.block_s // 8):
                for c in (0, 1):
                    r = self.x[4 * j + 2 * h + c]
                    e.add(tt.SelpOp("f32", r, r, ninf, e.setp("ge", rel, 8 * j + c, "s32")))
                    if low is not None:  # causal dkdv: query c >= key row
                        e.add(tt.SelpOp("f32", r, r, ninf, e.setp("le", low, 8 * j + c, "s32")))
        e.add(tt.LabelOp(skip))

    def gemm_ss(self, acc: list[SSAValue], a_desc: SSAValue, b_desc: SSAValue) -> None:
        """``acc = A Bᵀ`` over D (A: 64 resident rows, B: the streamed block, both K-major)."""
        s, e = self.spec, self.e
        for kk in range(s.d // WGMMA_K):
            a_step = (kk // 4) * BLOCK_R * SWIZZLE_BYTES + (kk % 4) * WGMMA_K * ELEM_BYTES
            b_step = (kk // 4) * s.block_s * SWIZZLE_BYTES + (kk % 4) * WGMMA_K * ELEM_BYTES
            ad = e.bin(tt.AddOp, "u64", a_desc, a_step >> 4, "b64") if a_step else a_desc
            bd = e.bin(tt.AddOp, "u64", b_desc, b_step >> 4, "b64") if b_step else b_desc
            e.add(tt.WgmmaOp(f"m64n{s.block_s}k16.f32.{s.et}.{s.et}", acc, ad, bd,
                             self.never if kk == 0 else self.always, trans_a=0, trans_b=0))

    def gemm_rs(self, acc: list[SSAValue], a: list[SSAValue], b_desc: SSAValue) -> None:
        """``acc += A B`` (A: packed registers, 64 x block_s; B: the streamed block, N-major)."""
        s, e = self.spec, self.e
        for kk in range(s.block_s // WGMMA_K):
            step = kk * WGMMA_K * SWIZZLE_BYTES
            bd = e.bin(tt.AddOp, "u64", b_desc, step >> 4, "b64") if step else b_desc
            e.add(tt.WgmmaRsOp(f"m64n{s.d}k16.f32.{s.et}.{s.et}", acc, a[4 * kk:4 * kk + 4], bd,
                               self.always, trans_b=1))

    def pack(self, vals: list[SSAValue], out: list[SSAValue]) -> None:
        """16-bit pairs of a D fragment as wgmma A registers: k-step ``kk`` takes column
        blocks ``2kk`` and ``2kk + 1``."""
        s, e = self.spec, self.e
        for kk in range(s.block_s // 16):
            for i, (j, h) in enumerate(((2 * kk, 0), (2 * kk, 1), (2 * kk + 1, 0), (2 * kk + 1, 1))):
                lo, hi = vals[4 * j + 2 * h], vals[4 * j + 2 * h + 1]
                e.add(tt.CvtOp(f"rn.{s.et}x2.f32", out[4 * kk + i], [hi, lo]))

    def unpack(self, packed: list[SSAValue]) -> list[SSAValue]:
        """The f32 values of :meth:`pack`'s registers, in fragment order."""
        s, e = self.spec, self.e
        vals: list[SSAValue] = [None] * (s.block_s // 2)  # type: ignore[list-item]
        for kk in range(s.block_s // 16):
            for i, (j, h) in enumerate(((2 * kk, 0), (2 * kk, 1), (2 * kk + 1, 0), (2 * kk + 1, 1))):
                halves = [e.reg("b16"), e.reg("b16")]
                e.add(tt.UnpackOp("b32", halves, packed[4 * kk + i]))
                for c in (0, 1):
                    f = e.reg("f32")
                    e.add(tt.CvtOp(f"f32.{s.et}", f, [halves[c]]))
                    vals[4 * j + 2 * h + c] = f
        return vals

    def store(self, outs: list[SSAValue]) -> None:
        """The accumulators in the element type (``accB`` times ``scale``), rows past the
        resident length skipped."""
        s, e = self.spec, self.e
        ragged = s.n_res % BLOCK_R != 0
        rows = [e.setp("lt", e.add32(self.row0, 8 * h), s.n_res) if ragged else None
                for h in (0, 1)]
        pairs = [(outs[0], self.acc_b, s.scale)]
        if s.dkdv:
            pairs.append((outs[1], self.acc_a, 1.0))
        for param, acc, factor in pairs:
            ptr = builders.global_pointer(e, param)
            builders.advance_pointer(e, ptr, e.mad32(self.bh, s.n_res, self.row0),
                                     s.d * ELEM_BYTES)
            builders.advance_pointer(e, ptr, self.col0, ELEM_BYTES)
            for j in range(s.d // 8):
                for h in (0, 1):
                    lo, hi = acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]
                    if factor != 1.0:
                        lo, hi = (e.fbin(tt.MulOp, x, factor, "rn.f32") for x in (lo, hi))
                    offset = (8 * h * s.d + 8 * j) * ELEM_BYTES
                    builders.store_pair(e, ptr, lo, hi, s.et, offset, rows[h])


def build_kernel(name: str, spec: Sm90AttentionBwd) -> tt.FuncOp:
    """The ``ttarget.func`` of ``spec`` (parameters: the output pointers, R1, R2, S1, S2
    tensor maps, the ``-lse log2e`` and ``Di`` pointers)."""
    return _Builder(name, spec).build()


def specs_for(op: g.FlashAttentionBwdOp) -> tuple[Sm90AttentionBwd, Sm90AttentionBwd]:
    """The ``dkdv`` and ``dq`` kernels of an :func:`eligible` op."""
    qs, ks = g.shape_of(op.q), g.shape_of(op.k)
    heads = 1
    for x in qs[:-2]:
        heads *= x
    d = qs[-1]
    scale = op.scale.value.data if op.scale is not None else 1.0 / pymath.sqrt(d)
    et = _TYPE_NAMES[type(g.elem_of(op.q))]
    from tessera.passes.sm90.lower_matmul_sm90 import device_sms

    sms = device_sms()
    return tuple(  # type: ignore[return-value]
        Sm90AttentionBwd(kind, heads, qs[-2], ks[-2], d, et, scale, op.causal is not None,
                         STAGES_D64 if d == 64 else STAGES, OVERLAP,
                         BLOCK_S if kind == "dkdv" else DQ_BLOCK_S, KEEP_P, sms)
        for kind in ("dkdv", "dq")
    )


# --------------------------------------------------------------------------- lowering


def lower_attention_bwd_sm90(lw: _FunctionLowering, op: g.FlashAttentionBwdOp) -> bool:
    """Lower ``op`` to the ``attention_bwd_dot`` prologue and the sm90 ``dkdv`` and ``dq``
    kernels if it is :func:`eligible`; False leaves it to the ``mma.sync`` kernels."""
    if eligible(op) is not None:
        return False
    dkdv, dq_spec = specs_for(op)
    dq, dk, dv = (lw.alloc(r.type) for r in op.results)
    lw.env[op.dq], lw.env[op.dk], lw.env[op.dv] = dq, dk, dv
    pad = lse_pad(dkdv.sq)
    buf = TensorType(f32, [dkdv.heads, pad])
    di, nlse = lw.alloc(buf), lw.alloc(buf)
    tile_attention_bwd.lower_dot_padded(lw, op, di, nlse, pad)
    q, k, v, do = (lw.mem(x) for x in (op.q, op.k, op.v, op.do))
    for spec, args in ((dkdv, [dk, dv, k, v, q, do, nlse, di]), (dq_spec, [dq, q, do, k, v, nlse, di])):
        name = lw.named_kernel(f"attention_bwd_{spec.kind}_sm90",
                               lambda nm, spec=spec: build_kernel(nm, spec))
        lw.hb.add_op(tt.LaunchExOp(name, args, spec.grid(), spec.smem_bytes, spec.boxes()))
    return True
