"""``lower-attention-sm90``: bf16/f16 flash attention as a Hopper TMA + wgmma kernel.

``lower-graph-to-tile`` with one change: every ``tgraph.flash_attention`` that
:func:`eligible` accepts becomes a Target IR kernel built here (a ``ttarget.func``)
and a host ``ttarget.launch_ex``, instead of the ``mma.sync`` Tile IR kernel of
``tile_attention``. ``tessera.passes.pipelines.lower_to_tile`` uses it, with
``lower-matmul-sm90``, when compiling for a compute capability 9.0 device.

The kernel computes ``O = softmax(scale Q Kᵀ [+ causal mask]) V`` for q [..., Sq, D],
k [..., Sk, D], v [..., Sk, D] (D = 64 or 128); every batch/head is a contiguous
``S x D`` slab of the tensors seen as 2-D ``[rows, D]``, which is how the TMA tensor
maps address them. A tile is ``BQ = 128`` query rows of one batch/head. The grid is
persistent (one CTA per SM); each CTA loops over work units (:meth:`_Builder.tiles`:
tiles, or for causal attention pairs of a heavy and a light tile of one head), so
that one tile's prologue and store overlap the previous or next one's work:

* 384 threads: warpgroup 0 is the producer, warpgroups 1 and 2 are consumers, each
  owning 64 query rows. ``setmaxnreg`` gives the producer 24 registers and the
  consumers 240.
* The producer's thread 0 loads a tile's Q once (TMA, ``D / 64`` boxes of
  ``128 x 64``) when the consumers have released the previous one (``q_empty``: after
  their last ``S`` product of that tile), then the K and V blocks of ``BKV = 128``
  keys into ``stages`` shared-memory slots each, K and V with their own ``full`` /
  ``empty`` mbarriers, all with the 128-byte swizzle; the slot ring runs on across
  tiles. Out-of-bounds rows are zero-filled; rows past a
  head's end belong to the next head and are masked (keys) or not stored (queries).
* A consumer computes ``S = Q Kᵀ`` with ``D / 16`` ``wgmma m64n128k16`` (A = Q and
  B = K both K-major in shared memory), then an online softmax on the wgmma D
  fragment (thread ``t`` of warp ``w`` holds rows ``16w + t/4`` and ``+8``, column
  pairs ``8j + 2(t%4)``): row max over the 4 threads of a row with ``shfl.bfly`` 1
  and 2, ``p = exp2(s * scale log2e - m * scale log2e)`` (one FMA and ``ex2``),
  partial row sums per thread. ``P`` rounded to bf16/f16 is, two 8-column blocks at
  a time, exactly the register A operand of ``wgmma`` (``ttarget.wgmma_rs``), so
  ``O += P V`` takes ``BKV / 16`` ``wgmma m64nDk16`` with B = V N-major in shared
  memory.
* Software pipelining within a consumer: in iteration ``j`` the ``S`` wgmmas of
  block ``j + 1`` and the ``P V`` wgmmas of block ``j`` are both in flight; the
  softmax of block ``j + 1`` runs while ``P_j V_j`` is still on the tensor cores
  (``wgmma.wait_group 1``), then ``O`` is rescaled and ``P_{j+1}`` packed.
* Turns (``pingpong``, off by default: measured no faster): the consumers alternate
  issuing their wgmmas (two named barriers), so that one's softmax runs while the
  other's products are on the tensor cores.
* Causal (key ``<=`` query, top-left aligned) visits only the key blocks up to the
  tile's last query; masks (and the ragged end of the keys) are applied only in the
  blocks that need them, a second copy of the loop.
* ``O / l`` is converted and stored as 4-byte pairs with ``st.global``, rows past
  ``Sq`` skipped.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects.builtin import BFloat16Type, Float16Type
from xdsl.ir import Operation, SSAValue

from tessera.ir import graph as g
from tessera.ir import target as tt
from tessera.passes.lower_graph_to_tile import LowerGraphToTile, Override, _FunctionLowering
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

LOG2E = 1.4426950408889634
BOX = SWIZZLE_BYTES // ELEM_BYTES
"""Elements of D per TMA box: one 128-byte swizzle row of 16-bit elements."""
BLOCK_Q = 128
BLOCK_KV = 128
CONSUMERS = 2
HEAD_SIZES = (64, 128)
TURN_THREADS = CONSUMERS * WARPGROUP_THREADS
"""Threads at a turn barrier: the waiting consumer and the arriving one."""


def eligible(op: g.FlashAttentionOp) -> str | None:
    """None if ``op`` can use the sm90 kernel, else why not."""
    et = g.elem_of(op.q)
    if not isinstance(et, BFloat16Type | Float16Type):
        return "q is not bf16 or f16"
    if g.elem_of(op.k) != et or g.elem_of(op.v) != et or g.elem_of(op.result) != et:
        return "q, k, v and the result differ in element type"
    qs, ks, vs = g.shape_of(op.q), g.shape_of(op.k), g.shape_of(op.v)
    if len(qs) < 2 or qs[:-2] != ks[:-2] or qs[:-2] != vs[:-2]:
        return "batch dims differ"
    if qs[-1] not in HEAD_SIZES or vs[-1] != qs[-1] or ks[-1] != qs[-1]:
        return f"head size {qs[-1]} (needs {' or '.join(map(str, HEAD_SIZES))}, equal for q, k, v)"
    if ks[-2] != vs[-2] or ks[-2] < 1 or qs[-2] < 1:
        return "empty or mismatched sequence lengths"
    return None


@dataclass(frozen=True)
class Sm90Attention:
    """One specialized kernel: sizes, element type, scale and causality."""

    heads: int  # product of the batch dims
    sq: int
    sk: int
    d: int
    et: str  # "bf16" or "f16"
    scale: float
    causal: bool
    stages: int = 2
    lse: bool = False
    """Also store each query row's log-sum-exp (f32; ``tgraph.flash_attention_fwd``)."""
    pingpong: bool = False
    """Consumers take turns issuing their wgmmas (named barriers ``1 + consumer``), so
    one's softmax runs under the other's products. Measured on an H100 it did not help
    at head size 64 or 128 and cost 7 % at ViT's 197 tokens, so it is off."""
    sms: int = NUM_SMS
    """CTAs of the persistent grid: the device's SM count (any value is correct)."""

    @property
    def nbox(self) -> int:
        return self.d // BOX

    @property
    def q_bytes(self) -> int:
        return self.nbox * BLOCK_Q * SWIZZLE_BYTES

    @property
    def kv_bytes(self) -> int:
        """One K (or V) block: ``D / 64`` boxes of ``BKV`` 128-byte rows."""
        return self.nbox * BLOCK_KV * SWIZZLE_BYTES

    def k_offset(self, stage: int) -> int:
        return self.q_bytes + stage * self.kv_bytes

    def v_offset(self, stage: int) -> int:
        return self.q_bytes + (self.stages + stage) * self.kv_bytes

    @property
    def bars_offset(self) -> int:
        return self.q_bytes + 2 * self.stages * self.kv_bytes

    @property
    def smem_bytes(self) -> int:
        """Q, the K and V slots, ``2 + 4 stages`` mbarriers and 1 KiB for alignment."""
        return self.bars_offset + MBARRIER_BYTES * (2 + 4 * self.stages) + 1024

    @property
    def threads(self) -> int:
        return WARPGROUP_THREADS * (1 + CONSUMERS)

    @property
    def q_tiles(self) -> int:
        return cdiv(self.sq, BLOCK_Q)

    @property
    def tiles(self) -> int:
        """Work units: one per ``BQ`` query rows of one batch/head."""
        return self.q_tiles * self.heads

    @property
    def units(self) -> int:
        """Work units of the persistent grid (:func:`builders.work_units`): tiles, or
        for causal attention pairs of tiles."""
        return builders.work_units(self.heads, self.q_tiles, self.causal)

    def grid(self) -> tuple[int, int, int]:
        """Persistent: at most one CTA per SM (and per work unit)."""
        return (max(1, min(self.units, self.sms)), 1, 1)

    def boxes(self) -> list[int]:
        """``ttarget.launch_ex`` boxes for (O, Q, K, V[, lse]): O and lse by pointer, the
        others TMA."""
        return [0, 0, BOX, BLOCK_Q, BOX, BLOCK_KV, BOX, BLOCK_KV, *([0, 0] if self.lse else [])]


class _Builder:
    """Emits the kernel of one :class:`Sm90Attention` (see the module docstring)."""

    def __init__(self, name: str, spec: Sm90Attention):
        self.spec = spec
        params = ["u64", "tmap", "tmap", "tmap", *(["u64"] if spec.lse else [])]
        self.func = tt.FuncOp(name, params, spec.threads, minnctapersm=1)
        self.e = TargetAsm(self.func)

    # ------------------------------------------------------------------ setup

    def build(self) -> tt.FuncOp:
        s, e = self.spec, self.e
        o_param, q_param, k_param, v_param = self.func.block.args[:4]
        self.lse_param = self.func.block.args[4] if s.lse else None
        self.tid, self.bid, self.sbase = builders.shared_base(e)
        bars = e.add32(self.sbase, s.bars_offset)
        self.q_full = bars
        self.q_empty = e.add32(bars, MBARRIER_BYTES)
        self.k_full = e.add32(bars, MBARRIER_BYTES * 2)
        self.k_empty = e.add32(bars, MBARRIER_BYTES * (2 + s.stages))
        self.v_full = e.add32(bars, MBARRIER_BYTES * (2 + 2 * s.stages))
        self.v_empty = e.add32(bars, MBARRIER_BYTES * (2 + 3 * s.stages))

        def barriers():
            yield self.q_full, 1
            yield self.q_empty, CONSUMERS
            for st in range(s.stages):
                for base, count in ((self.k_full, 1), (self.v_full, 1),
                                    (self.k_empty, CONSUMERS), (self.v_empty, CONSUMERS)):
                    yield e.add32(base, MBARRIER_BYTES * st), count

        builders.init_barriers(e, self.tid, barriers())
        self.end = "DONE"
        wg, consumer = builders.split_warpgroups(e, self.tid)
        self.producer(q_param, k_param, v_param)
        e.add(tt.LabelOp(consumer))
        self.consumer(o_param, e.bin(tt.SubOp, "u32", wg, 1))
        e.add(tt.LabelOp(self.end))
        e.add(tt.RetOp())
        return self.func

    def tiles(self, body: Callable[[SSAValue], None]) -> None:
        """Emit ``body(first)`` once per tile of this CTA (:func:`builders.for_work_units`:
        tiles head by head, or for causal attention pairs of the heavy ``j``-th tile from
        the end and the light ``j``-th from the start), after setting ``bh``, ``q0``,
        ``n_blocks`` and ``n_plain`` for it; ``first`` is true in the CTA's first tile."""
        s = self.spec

        def tile(head: SSAValue, qt: SSAValue, first: SSAValue) -> None:
            self.coords(head, qt)
            body(first)

        builders.for_work_units(self.e, self.bid, s.grid()[0], s.heads, s.q_tiles, s.causal,
                                tile)

    def coords(self, bh: SSAValue, qt: SSAValue) -> None:
        """Set tile (``bh``, ``qt``)'s batch/head, first query ``q0`` and key blocks: all
        of them (``n_blocks``) and those without masks (``n_plain``)."""
        s, e = self.spec, self.e
        self.bh = bh
        self.q0 = e.mul32(qt, BLOCK_Q)
        nkv = cdiv(s.sk, BLOCK_KV)
        if s.causal:
            last = e.add32(e.bin(tt.DivOp, "u32", e.add32(self.q0, BLOCK_Q - 1), BLOCK_KV), 1)
            self.n_blocks = e.bin(tt.MinOp, "u32", last, nkv)
            full = e.bin(tt.DivOp, "u32", e.add32(self.q0, 1), BLOCK_KV)
            self.n_plain = e.bin(tt.MinOp, "u32", full, s.sk // BLOCK_KV)
        else:
            self.n_blocks = e.reg("b32")
            e.mov("u32", self.n_blocks, nkv)
            self.n_plain = e.reg("b32")
            e.mov("u32", self.n_plain, s.sk // BLOCK_KV)

    # ------------------------------------------------------------------ producer

    def producer(self, q_param: SSAValue, k_param: SSAValue, v_param: SSAValue) -> None:
        """Per tile: Q once the consumers released the previous tile's (``q_empty``),
        then its K and V blocks through the ring, which runs on across tiles."""
        s, e = self.spec, self.e
        builders.enter_producer(e, self.tid, self.end, ATTENTION_REGISTERS)
        tmap_q, tmap_k, tmap_v = (builders.tensor_map(e, p) for p in (q_param, k_param, v_param))
        kb, kg, stage, phase, qphase = (e.reg("b32") for _ in range(5))
        for v in (kg, stage, phase, qphase):
            e.mov("u32", v, 0)

        def tile(first: SSAValue) -> None:
            builders.wait_slot_free(e, e.imm(0), qphase, self.q_empty, first)
            e.add(tt.MbarrierArriveOp(self.q_full, e.imm(s.q_bytes)))
            q_row = e.mad32(self.bh, s.sq, self.q0)
            for b in range(s.nbox):
                dst = e.add32(self.sbase, b * BLOCK_Q * SWIZZLE_BYTES)
                e.add(tt.CpAsyncBulkTensorOp(dst, tmap_q, e.imm(b * BOX), q_row, self.q_full))
            e.add(tt.XorOp("b32", qphase, qphase, e.imm(1)))
            e.mov("u32", kb, 0)
            head_row = e.mul32(self.bh, s.sk)
            loop = e.label("PRODUCE")
            e.add(tt.LabelOp(loop))
            row = e.mad32(kb, BLOCK_KV, head_row)
            fresh = e.setp("lt", kg, s.stages)
            for full0, empty0, tmap, offset in (
                (self.k_full, self.k_empty, tmap_k, s.k_offset(0)),
                (self.v_full, self.v_empty, tmap_v, s.v_offset(0)),
            ):
                builders.wait_slot_free(e, stage, phase, empty0, fresh)
                full = builders.slot_barrier(e, stage, full0)
                e.add(tt.MbarrierArriveOp(full, e.imm(s.kv_bytes)))
                base = e.mad32(stage, s.kv_bytes, e.add32(self.sbase, offset))
                for b in range(s.nbox):
                    dst = e.add32(base, b * BLOCK_KV * SWIZZLE_BYTES) if b else base
                    e.add(tt.CpAsyncBulkTensorOp(dst, tmap, e.imm(b * BOX), row, full))
            e.add(tt.AddOp("u32", kb, kb, e.imm(1)))
            e.add(tt.AddOp("u32", kg, kg, e.imm(1)))
            e.advance(stage, phase, s.stages)
            e.add(tt.BraOp(loop, e.setp("lt", kb, self.n_blocks)))

        self.tiles(tile)
        e.add(tt.BraOp(self.end))

    # ------------------------------------------------------------------ consumers

    def consumer(self, o_param: SSAValue, cw: SSAValue) -> None:
        s, e = self.spec, self.e
        builders.enter_consumer(e, ATTENTION_REGISTERS)
        t, warp, lane = builders.fragment_lanes(e, self.tid)
        self.leader = e.setp("eq", t, 0)
        self.always = e.setp("eq", t, t)
        self.cw, self.warp, self.lane = cw, warp, lane
        self.col0 = builders.fragment_col(e, lane)

        # shared-memory descriptors: the first k-step of each operand
        self.q_desc = e.desc(
            e.mad32(cw, WGMMA_M * SWIZZLE_BYTES, self.sbase), desc_hi(16, 8 * SWIZZLE_BYTES)
        )
        self.k_desc = e.desc(e.add32(self.sbase, s.k_offset(0)), desc_hi(16, 8 * SWIZZLE_BYTES))
        self.v_desc = e.desc(
            e.add32(self.sbase, s.v_offset(0)),
            desc_hi(BLOCK_KV * SWIZZLE_BYTES, 8 * SWIZZLE_BYTES),
        )

        self.sacc = [e.reg("f32") for _ in range(BLOCK_KV // 2)]
        self.oacc = [e.reg("f32") for _ in range(s.d // 2)]
        self.p = [e.reg("b32") for _ in range(BLOCK_KV // 4)]
        self.m = [e.reg("f32") for _ in range(2)]
        self.l = [e.reg("f32") for _ in range(2)]
        self.c = s.scale * LOG2E
        # the K/V ring's current and next slot, running on across tiles
        self.st_c, self.ph_c, self.st_n, self.ph_n, self.qphase = (e.reg("b32") for _ in range(5))
        for v in (self.st_n, self.ph_n, self.qphase):
            e.mov("u32", v, 0)
        self.first_turn(cw)
        self.tiles(lambda first: self.consumer_tile(o_param))
        self.last_turn(cw)

    def consumer_tile(self, o_param: SSAValue) -> None:
        """One tile: the online softmax over its key blocks, then ``O / l`` stored. Q is
        released (``q_empty``) once its last product is done, so the producer loads the
        next tile's Q under this tile's last ``P V`` and store."""
        s, e = self.spec, self.e
        cw, st_c, ph_c, st_n, ph_n = self.cw, self.st_c, self.ph_c, self.st_n, self.ph_n
        # rows of this thread (the two halves of the D fragment)
        self.row0 = builders.fragment_row(e, self.q0, cw, self.warp, self.lane)
        for r in self.oacc + self.l:
            e.mov("f32", r, e.fimm(0.0))
        for r in self.m:
            e.mov("f32", r, e.fimm(float("-inf")))
        e.mov("u32", st_c, st_n)
        e.mov("u32", ph_c, ph_n)

        e.wait(self.q_full, self.qphase)
        e.add(tt.XorOp("b32", self.qphase, self.qphase, e.imm(1)))
        # prologue: S of block 0, its softmax and P
        kb = e.reg("b32")
        e.mov("u32", kb, 0)
        e.wait(builders.slot_barrier(e, st_c, self.k_full), ph_c)
        self.take_turn(cw)
        e.add(tt.FenceOp("wgmma"))
        self.qk(st_c)
        e.add(tt.FenceOp("wgmma_commit"))
        self.pass_turn(cw)
        e.add(tt.WgmmaWaitOp(0))
        e.add(tt.MbarrierArriveOp(builders.slot_barrier(e, st_c, self.k_empty), guard=self.leader))
        self.softmax(kb, masked=True, first=True)
        self.pack_p()
        e.mov("u32", st_n, st_c)
        e.mov("u32", ph_n, ph_c)
        e.advance(st_n, ph_n, s.stages)
        e.add(tt.AddOp("u32", kb, kb, e.imm(1)))

        # the pipelined loop: unmasked blocks, then the masked ones
        for masked, bound in ((False, self.n_plain), (True, self.n_blocks)):
            top, done = e.label("ATTN_LOOP"), e.label("ATTN_LOOP_END")
            e.add(tt.LabelOp(top))
            e.add(tt.BraOp(done, e.setp("ge", kb, bound)))
            e.wait(builders.slot_barrier(e, st_n, self.k_full), ph_n)
            e.wait(builders.slot_barrier(e, st_c, self.v_full), ph_c)
            self.take_turn(cw)
            e.add(tt.FenceOp("wgmma"))
            self.qk(st_n)
            e.add(tt.FenceOp("wgmma_commit"))
            e.add(tt.FenceOp("wgmma"))
            self.pv(st_c)
            e.add(tt.FenceOp("wgmma_commit"))
            self.pass_turn(cw)
            e.add(tt.WgmmaWaitOp(1))
            release = builders.slot_barrier(e, st_n, self.k_empty)
            e.add(tt.MbarrierArriveOp(release, guard=self.leader))
            alpha = self.softmax(kb, masked=masked, first=False)
            e.add(tt.WgmmaWaitOp(0))
            release = builders.slot_barrier(e, st_c, self.v_empty)
            e.add(tt.MbarrierArriveOp(release, guard=self.leader))
            for i, o in enumerate(self.oacc):
                e.add(tt.MulOp("rn.f32", o, o, alpha[(i // 2) % 2]))
            self.pack_p()
            e.mov("u32", st_c, st_n)
            e.mov("u32", ph_c, ph_n)
            e.advance(st_n, ph_n, s.stages)
            e.add(tt.AddOp("u32", kb, kb, e.imm(1)))
            e.add(tt.BraOp(top))
            e.add(tt.LabelOp(done))

        # every product with Q is done: the producer may load the next tile's
        e.add(tt.MbarrierArriveOp(self.q_empty, guard=self.leader))
        # the last block's P V
        e.wait(builders.slot_barrier(e, st_c, self.v_full), ph_c)
        self.take_turn(cw)
        e.add(tt.FenceOp("wgmma"))
        self.pv(st_c)
        e.add(tt.FenceOp("wgmma_commit"))
        self.pass_turn(cw)
        e.add(tt.WgmmaWaitOp(0))
        e.add(tt.MbarrierArriveOp(builders.slot_barrier(e, st_c, self.v_empty),
                                  guard=self.leader))
        self.store(o_param)

    # Turns (``pingpong``): consumer ``c`` waits at named barrier ``1 + c`` before issuing
    # its wgmmas and then arrives at the other's, so the two alternate on the tensor
    # cores. Both consumers visit the same tiles and key blocks, so they take equally
    # many turns; consumer 0 is let in first by consumer 1's arrival.

    def first_turn(self, cw: SSAValue) -> None:
        """Consumer 1 lets consumer 0 take the first turn."""
        if self.spec.pingpong:
            self._turn(cw, (None, tt.BarArriveOp(1, TURN_THREADS)))

    def take_turn(self, cw: SSAValue) -> None:
        """Wait for this consumer's turn at the tensor cores."""
        if self.spec.pingpong:
            self._turn(cw, (tt.BarSyncOp(1, TURN_THREADS), tt.BarSyncOp(2, TURN_THREADS)))

    def pass_turn(self, cw: SSAValue) -> None:
        """Let the other consumer issue."""
        if self.spec.pingpong:
            self._turn(cw, (tt.BarArriveOp(2, TURN_THREADS), tt.BarArriveOp(1, TURN_THREADS)))

    def last_turn(self, cw: SSAValue) -> None:
        """Consumer 0 takes the turn consumer 1 passed it last, so that every arrival at a
        turn barrier is matched by a wait."""
        if self.spec.pingpong:
            self._turn(cw, (tt.BarSyncOp(1, TURN_THREADS), None))

    def _turn(self, cw: SSAValue, ops: tuple[Operation | None, Operation | None]) -> None:
        """``ops[c]`` in consumer ``c`` (a branch on the warpgroup: uniform per warp)."""
        e = self.e
        second, done = e.label("TURN_1"), e.label("TURN_END")
        e.add(tt.BraOp(second, e.setp("ne", cw, 0)))
        if ops[0] is not None:
            e.add(ops[0])
        e.add(tt.BraOp(done))
        e.add(tt.LabelOp(second))
        if ops[1] is not None:
            e.add(ops[1])
        e.add(tt.LabelOp(done))

    def qk(self, stage: SSAValue) -> None:
        """Issue ``S = Q K_stageᵀ`` (``D / 16`` wgmmas, S overwritten by the first)."""
        s, e = self.spec, self.e
        kd = builders.stage_descriptor(e, builders.stage_index64(e, stage), s.kv_bytes, self.k_desc)
        never = e.setp("ne", self.tid, self.tid)
        for kk in range(s.d // WGMMA_K):
            step = (kk // 4) * BLOCK_Q * SWIZZLE_BYTES + (kk % 4) * WGMMA_K * ELEM_BYTES
            qd = e.bin(tt.AddOp, "u64", self.q_desc, step >> 4, "b64") if step else self.q_desc
            kstep = (kk // 4) * BLOCK_KV * SWIZZLE_BYTES + (kk % 4) * WGMMA_K * ELEM_BYTES
            kdk = e.bin(tt.AddOp, "u64", kd, kstep >> 4, "b64") if kstep else kd
            mma = f"m64n{BLOCK_KV}k16.f32.{s.et}.{s.et}"
            e.add(tt.WgmmaOp(mma, self.sacc, qd, kdk, never if kk == 0 else self.always,
                             trans_a=0, trans_b=0))

    def pv(self, stage: SSAValue) -> None:
        """Issue ``O += P V_stage`` (``BKV / 16`` wgmmas, A = P from registers)."""
        s, e = self.spec, self.e
        vd = builders.stage_descriptor(e, builders.stage_index64(e, stage), s.kv_bytes, self.v_desc)
        mma = f"m64n{s.d}k16.f32.{s.et}.{s.et}"
        for kk in range(BLOCK_KV // WGMMA_K):
            step = kk * WGMMA_K * SWIZZLE_BYTES
            vdk = e.bin(tt.AddOp, "u64", vd, step >> 4, "b64") if step else vd
            e.add(tt.WgmmaRsOp(mma, self.oacc, self.p[4 * kk:4 * kk + 4], vdk, self.always,
                               trans_b=1))

    def softmax(self, kb: SSAValue, masked: bool, first: bool) -> list[SSAValue]:
        """Online softmax of block ``kb`` in place on S: the new row maxima, row sums and
        ``exp2`` probabilities; returns the two rows' rescale factors for O."""
        s, e = self.spec, self.e
        acc = self.sacc
        if masked:
            colbase = e.mad32(kb, BLOCK_KV, self.col0)
            for h in (0, 1):
                limit = e.reg("b32")
                e.mov("u32", limit, s.sk - 1)
                if s.causal:
                    e.add(tt.MinOp("u32", limit, limit, e.add32(self.row0, 8 * h)))
                rel = e.bin(tt.SubOp, "s32", limit, colbase)
                ninf = e.fimm(float("-inf"))
                for j in range(BLOCK_KV // 8):
                    for c in (0, 1):
                        r = acc[4 * j + 2 * h + c]
                        ok = e.setp("ge", rel, 8 * j + c, "s32")
                        e.add(tt.SelpOp("f32", r, r, ninf, ok))
        alphas = []
        for h in (0, 1):
            vals = [acc[4 * j + 2 * h + c] for j in range(BLOCK_KV // 8) for c in (0, 1)]
            mx = _tree(vals, lambda a, b: e.fbin(tt.MaxOp, a, b))
            mx = e.fbin(tt.MaxOp, mx, e.shfl_xor_f32(mx, 1))
            mx = e.fbin(tt.MaxOp, mx, e.shfl_xor_f32(mx, 2))
            m_new = e.fbin(tt.MaxOp, mx, self.m[h])
            alpha = e.ex2(e.fbin(tt.MulOp, e.fbin(tt.SubOp, self.m[h], m_new, "rn.f32"),
                                 self.c, "rn.f32"))
            neg = e.fbin(tt.MulOp, m_new, -self.c, "rn.f32")
            for r in vals:
                e.ex2(e.fma(r, self.c, neg), dst=r)
            total = _tree(vals, lambda a, b: e.fbin(tt.AddOp, a, b, "rn.f32"))
            if first:
                e.mov("f32", self.l[h], total)
            else:
                e.fma(self.l[h], alpha, total, dst=self.l[h])
            e.mov("f32", self.m[h], m_new)
            alphas.append(alpha)
        return alphas

    def pack_p(self) -> None:
        """P (the probabilities in S) rounded to the element type, as wgmma A registers:
        k-step ``kk`` takes column blocks ``2kk`` and ``2kk + 1``."""
        s, e = self.spec, self.e
        acc = self.sacc
        for kk in range(BLOCK_KV // 16):
            for i, (j, h) in enumerate(((2 * kk, 0), (2 * kk, 1), (2 * kk + 1, 0), (2 * kk + 1, 1))):
                lo, hi = acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]
                e.add(tt.CvtOp(f"rn.{s.et}x2.f32", self.p[4 * kk + i], [hi, lo]))

    def store(self, o_param: SSAValue) -> None:
        """``O / l`` in the element type, rows past ``Sq`` skipped."""
        s, e = self.spec, self.e
        ptr = builders.global_pointer(e, o_param)
        builders.advance_pointer(e, ptr, e.mad32(self.bh, s.sq, self.row0), s.d * ELEM_BYTES)
        builders.advance_pointer(e, ptr, self.col0, ELEM_BYTES)
        inv = []
        for h in (0, 1):
            lt = self.l[h]
            lt = e.fbin(tt.AddOp, lt, e.shfl_xor_f32(lt, 1), "rn.f32")
            lt = e.fbin(tt.AddOp, lt, e.shfl_xor_f32(lt, 2), "rn.f32")
            r = e.reg("f32")
            e.add(tt.RcpOp("rn.f32", r, lt))
            inv.append(r)
            if self.lse_param is not None:
                self.store_lse(h, lt)
        ragged = s.sq % BLOCK_Q != 0
        rows = [e.setp("lt", e.add32(self.row0, 8 * h), s.sq) if ragged else None for h in (0, 1)]
        for j in range(s.d // 8):
            for h in (0, 1):
                lo = e.fbin(tt.MulOp, self.oacc[4 * j + 2 * h], inv[h], "rn.f32")
                hi = e.fbin(tt.MulOp, self.oacc[4 * j + 2 * h + 1], inv[h], "rn.f32")
                offset = (8 * h * s.d + 8 * j) * ELEM_BYTES
                builders.store_pair(e, ptr, lo, hi, s.et, offset, rows[h])


    def store_lse(self, h: int, total: SSAValue) -> None:
        """``lse = ln 2 (m c + log2 l)`` of row half ``h`` (``c = scale log2 e``: the
        kernel's exp2 units undone), stored by the first thread of the row's quad."""
        s, e = self.spec, self.e
        assert self.lse_param is not None
        ptr = builders.global_pointer(e, self.lse_param)
        row = e.add32(self.row0, 8 * h)
        builders.advance_pointer(e, ptr, e.mad32(self.bh, s.sq, row), 4)
        lg = e.reg("f32")
        e.add(tt.Lg2Op("approx.ftz.f32", lg, total))
        val = e.fbin(tt.MulOp, e.fma(self.m[h], self.c, lg), 1.0 / LOG2E, "rn.f32")
        # row + sq * (lane % 4) < sq: the quad's first thread, inside the queries
        quad = e.bin(tt.AndOp, "b32", self.col0, 6)
        ok = e.setp("lt", e.mad32(quad, s.sq, row), s.sq)
        e.add(tt.StOp("global.f32", ptr, [val], 0, ok))


def _tree(vals: list[SSAValue], combine: Callable[[SSAValue, SSAValue], SSAValue]) -> SSAValue:
    """Combine ``vals`` pairwise (a balanced tree: short dependency chains)."""
    level = list(vals)
    while len(level) > 1:
        nxt = [combine(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def build_kernel(name: str, spec: Sm90Attention) -> tt.FuncOp:
    """The ``ttarget.func`` computing attention for ``spec`` (parameters: O pointer, Q, K
    and V tensor maps)."""
    return _Builder(name, spec).build()


# --------------------------------------------------------------------------- lowering


_TYPE_NAMES = {BFloat16Type: "bf16", Float16Type: "f16"}


def spec_for(op: g.FlashAttentionOp | g.FlashAttentionFwdOp) -> Sm90Attention:
    qs, ks = g.shape_of(op.q), g.shape_of(op.k)
    heads = 1
    for x in qs[:-2]:
        heads *= x
    d = qs[-1]
    scale = op.scale.value.data if op.scale is not None else 1.0 / pymath.sqrt(d)
    from tessera.passes.sm90.lower_matmul_sm90 import device_sms

    return Sm90Attention(
        heads, qs[-2], ks[-2], d, _TYPE_NAMES[type(g.elem_of(op.q))], scale,
        op.causal is not None, lse=isinstance(op, g.FlashAttentionFwdOp), sms=device_sms(),
    )


def lower_attention_sm90(
    lw: _FunctionLowering, op: g.FlashAttentionOp | g.FlashAttentionFwdOp
) -> bool:
    """Lower ``op`` to the sm90 kernel if it is eligible (``flash_attention_fwd`` also
    stores the log-sum-exp); False leaves it to the generic path."""
    if eligible(op) is not None:
        return False
    spec = spec_for(op)
    out = lw.alloc(op.result.type)
    lw.env[op.result] = out
    extra = []
    if isinstance(op, g.FlashAttentionFwdOp):
        extra = [lw.alloc(op.lse.type)]
        lw.env[op.lse] = extra[0]
    if spec.heads == 0:
        return True
    name = lw.named_kernel("attention", lambda nm: build_kernel(nm, spec))
    lw.hb.add_op(
        tt.LaunchExOp(
            name, [out, lw.mem(op.q), lw.mem(op.k), lw.mem(op.v), *extra], spec.grid(),
            spec.smem_bytes, spec.boxes(),
        )
    )
    return True


@dataclass(frozen=True)
class LowerAttentionSm90(LowerGraphToTile):
    """``lower-graph-to-tile`` with bf16/f16 flash attention (and, unless
    ``sm90_attention_bwd=false``, its backward: :mod:`.attention_bwd_sm90`) as TMA + wgmma
    kernels (sm_90a)."""

    name = "lower-attention-sm90"

    def overrides(self) -> dict[type[Operation], tuple[Override, ...]]:
        from tessera.passes.sm90.attention_bwd_sm90 import lower_attention_bwd_sm90

        found: dict[type[Operation], tuple[Override, ...]] = {
            g.FlashAttentionOp: (lower_attention_sm90,),  # type: ignore[dict-item]
            g.FlashAttentionFwdOp: (lower_attention_sm90,),  # type: ignore[dict-item]
        }
        if self.sm90_attention_bwd:  # and flash_attention_bwd (attention_bwd_sm90)
            found[g.FlashAttentionBwdOp] = (lower_attention_bwd_sm90,)  # type: ignore[assignment]
        return found
