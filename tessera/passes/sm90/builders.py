"""The steps the warpgroup-specialized Hopper kernels share, each appending Target IR
through a :class:`~tessera.passes.sm90.asm.TargetAsm`.

Prologue: :func:`shared_base` (the 1024-byte-aligned dynamic shared memory),
:func:`init_barriers` (thread 0 initializes the mbarriers, then the CTA or cluster
synchronizes) and :func:`split_warpgroups` (warpgroup 0 produces, the others consume).
Producer: :func:`enter_producer`, :func:`tensor_map`, :func:`wait_slot_free`.
Persistent grids: :func:`work_units` / :func:`for_work_units`.
Consumer: :func:`enter_consumer`, :func:`fragment_lanes` / :func:`fragment_row` /
:func:`fragment_col` (where a thread's wgmma D fragment lies) and
:func:`stage_descriptor`. Epilogue: :func:`global_pointer`, :func:`advance_pointer`,
:func:`pack_pair` and :func:`store_pair`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from xdsl.ir import SSAValue

from tessera.ir import target as tt
from tessera.passes.sm90.asm import TargetAsm
from tessera.passes.sm90.constants import (
    LANE_MASK,
    MBARRIER_BYTES,
    SMEM_ALIGN,
    WARP_SHIFT,
    WARPGROUP_SHIFT,
    WARPGROUP_THREADS,
    WGMMA_M,
    RegisterBudget,
)

# --------------------------------------------------------------------------- prologue


def shared_base(e: TargetAsm) -> tuple[SSAValue, SSAValue, SSAValue]:
    """Declares the dynamic shared array; returns ``(tid.x, ctaid.x, base)`` with ``base``
    its shared address rounded up to :data:`SMEM_ALIGN` (the launch adds that much)."""
    e.add(tt.ExternSharedOp("smem", SMEM_ALIGN))
    tid = e.sreg("tid.x")
    bid = e.sreg("ctaid.x")
    raw = e.reg("b32")
    e.add(tt.ExternSharedAddrOp(raw, "smem"))
    base = e.bin(tt.AndOp, "b32", e.add32(raw, SMEM_ALIGN - 1), ~(SMEM_ALIGN - 1) & 0xFFFFFFFF)
    return tid, bid, base


def init_barriers(
    e: TargetAsm, tid: SSAValue, barriers: Iterable[tuple[SSAValue, int]], cluster: bool = False
) -> None:
    """Thread 0 initializes each ``(address, arrival count)`` of ``barriers`` (computed
    as the iterable is consumed, inside the thread-0 branch) and fences the inits for the
    async proxy and the cluster; then the CTA (or the whole cluster, whose peers arrive
    on and multicast into these barriers) synchronizes."""
    skip = e.label("INIT_DONE")
    e.add(tt.BraOp(skip, e.setp("ne", tid, 0)))
    for addr, count in barriers:
        e.add(tt.MbarrierInitOp(addr, e.imm(count)))
    e.add(tt.FenceOp("mbarrier_init"))
    e.add(tt.FenceOp("proxy_async"))
    e.add(tt.LabelOp(skip))
    if cluster:
        cluster_sync(e)
    else:
        e.add(tt.BarSyncOp(0))


def cluster_sync(e: TargetAsm) -> None:
    """Every thread of every CTA of the cluster arrives before any goes on."""
    e.add(tt.FenceOp("cluster_arrive"))
    e.add(tt.FenceOp("cluster_wait"))


def split_warpgroups(e: TargetAsm, tid: SSAValue) -> tuple[SSAValue, str]:
    """``(warpgroup index, consumer label)``: warpgroup 0 falls through into the producer,
    the others branch to the label (placed where the consumer code starts)."""
    wg = e.bin(tt.ShrOp, "u32", tid, WARPGROUP_SHIFT)
    consumer = e.label("CONSUMER")
    e.add(tt.BraOp(consumer, e.setp("ne", wg, 0)))
    return wg, consumer


def slot_barrier(e: TargetAsm, stage: SSAValue, first: SSAValue) -> SSAValue:
    """The address of stage ``stage``'s mbarrier in an array starting at ``first``."""
    return e.mad32(stage, MBARRIER_BYTES, first)


# --------------------------------------------------------------------------- persistent grids


def work_units(heads: int, tiles: int, paired: bool) -> int:
    """Work units of a persistent grid over ``tiles`` tiles of each of ``heads`` heads:
    one per tile, or with ``paired`` one per pair of tiles (:func:`for_work_units`)."""
    return heads * ((tiles + 1) // 2 if paired else tiles)


def for_work_units(
    e: TargetAsm, bid: SSAValue, grid: int, heads: int, tiles: int, paired: bool,
    body: Callable[[SSAValue, SSAValue, SSAValue], None],
) -> None:
    """Emit ``body(head, tile, first)`` once per tile of CTA ``bid`` of a persistent grid
    of ``grid`` CTAs; ``first`` is true in the CTA's first tile.

    The CTA takes work units ``bid``, ``bid + grid``, ... in order, head by head. A unit
    is one tile, or with ``paired`` (causal attention, whose tiles cost more the later
    or earlier they lie in a head) the pair of the ``j``-th tile from the end and the
    ``j``-th from the start (the middle tile of an odd count alone), so that every unit
    costs about the same and a static round-robin over units stays balanced; the heads
    running at once keep their data in L2."""
    units = work_units(heads, tiles, paired)
    u, second = e.reg("b32"), e.reg("b32")  # the unit; 1 for a pair's second tile
    e.mov("u32", u, bid)
    e.mov("u32", second, 0)
    first = e.reg("pred")
    e.add(tt.SetpOp("eq.u32", first, u, u))
    top, done = e.label("UNIT"), e.label("UNIT_END")
    e.add(tt.LabelOp(top))
    e.add(tt.BraOp(done, e.setp("ge", u, units)))
    if not paired:
        body(e.bin(tt.DivOp, "u32", u, tiles), e.bin(tt.RemOp, "u32", u, tiles), first)
        e.add(tt.SetpOp("ne.u32", first, u, u))
    else:
        pairs = (tiles + 1) // 2
        head = e.bin(tt.DivOp, "u32", u, pairs)
        j = e.bin(tt.RemOp, "u32", u, pairs)
        back = e.bin(tt.SubOp, "u32", tiles - 1, j)
        is_second = e.setp("ne", second, 0)
        tile = e.reg("b32")
        e.add(tt.SelpOp("b32", tile, j, back, is_second))
        body(head, tile, first)
        e.add(tt.SetpOp("ne.u32", first, u, u))
        # the pair's second tile next, unless this was it or the unit is the middle tile
        next_unit = e.label("NEXT_UNIT")
        e.add(tt.BraOp(next_unit, is_second))
        e.add(tt.BraOp(next_unit, e.setp("eq", back, j)))
        e.mov("u32", second, 1)
        e.add(tt.BraOp(top))
        e.add(tt.LabelOp(next_unit))
        e.mov("u32", second, 0)
    e.add(tt.AddOp("u32", u, u, e.imm(grid)))
    e.add(tt.BraOp(top))
    e.add(tt.LabelOp(done))


# --------------------------------------------------------------------------- producer


def enter_producer(e: TargetAsm, tid: SSAValue, end: str, budget: RegisterBudget) -> None:
    """The producer warpgroup gives registers up; all but its thread 0 leave (to ``end``)."""
    e.add(tt.SetmaxnregOp("dec", budget.producer))
    e.add(tt.BraOp(end, e.setp("ne", tid, 0)))


def tensor_map(e: TargetAsm, param: SSAValue, reg: SSAValue | None = None) -> SSAValue:
    """The generic address TMA expects of a ``!ttarget.param<tmap>`` kernel parameter
    (into ``reg`` when given)."""
    if reg is None:
        reg = e.reg("b64")
    e.add(tt.ParamAddrOp(reg, param))
    e.add(tt.CvtaOp("param.u64", reg, reg))
    return reg


def wait_slot_free(
    e: TargetAsm, stage: SSAValue, phase: SSAValue, empty0: SSAValue, fresh: SSAValue
) -> None:
    """Unless ``fresh`` (the ring's first pass, slots never used), wait until the consumers
    released slot ``stage``: its ``empty`` barrier completed the phase before ``phase``."""
    ready = e.label("SLOT_FREE")
    e.add(tt.BraOp(ready, fresh))
    e.wait(slot_barrier(e, stage, empty0), e.bin(tt.XorOp, "b32", phase, 1))
    e.add(tt.LabelOp(ready))


# --------------------------------------------------------------------------- consumers


def enter_consumer(e: TargetAsm, budget: RegisterBudget) -> None:
    """The consumer warpgroups take the registers the producer gave up."""
    e.add(tt.SetmaxnregOp("inc", budget.consumer))


def fragment_lanes(e: TargetAsm, tid: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue]:
    """``(t, warp, lane)``: the thread's index within its warpgroup, its warp in the
    warpgroup and its lane in the warp."""
    t = e.bin(tt.AndOp, "b32", tid, WARPGROUP_THREADS - 1)
    warp, lane = e.bin(tt.ShrOp, "u32", t, WARP_SHIFT), e.bin(tt.AndOp, "b32", t, LANE_MASK)
    return t, warp, lane


def fragment_row(
    e: TargetAsm, origin: SSAValue, cw: SSAValue, warp: SSAValue, lane: SSAValue
) -> SSAValue:
    """The first row of the wgmma D fragment of this thread (the second is 8 below):
    ``origin + 64 cw + 16 warp + lane / 4`` for consumer warpgroup ``cw``."""
    return e.add32(
        e.add32(origin, e.mul32(cw, WGMMA_M)),
        e.add32(e.mul32(warp, 16), e.bin(tt.ShrOp, "u32", lane, 2)),
    )


def fragment_col(e: TargetAsm, lane: SSAValue) -> SSAValue:
    """The first column of this thread's pairs in each 8-column block: ``2 (lane % 4)``."""
    return e.mul32(e.bin(tt.AndOp, "b32", lane, 3), 2)


def stage_index64(e: TargetAsm, stage: SSAValue) -> SSAValue:
    """``stage`` widened to 64 bits (descriptor arithmetic is 64-bit)."""
    s64 = e.reg("b64")
    e.add(tt.CvtOp("u64.u32", s64, [stage]))
    return s64


def stage_descriptor(
    e: TargetAsm, s64: SSAValue, stage_bytes: int, desc0: SSAValue, dst: SSAValue | None = None
) -> SSAValue:
    """The wgmma descriptor of stage ``s64`` of a ring whose stage 0 has ``desc0`` (the
    start address field counts 16-byte units); into ``dst`` when given."""
    d = dst if dst is not None else e.reg("b64")
    e.add(tt.MadOp("lo.u64", d, s64, e.imm(stage_bytes >> 4), desc0))
    return d


# --------------------------------------------------------------------------- epilogue


def global_pointer(e: TargetAsm, param: SSAValue) -> SSAValue:
    """A global address register holding the ``.u64`` pointer parameter ``param``."""
    ptr = e.reg("b64")
    e.add(tt.LdParamOp("u64", ptr, param))
    e.add(tt.CvtaOp("to.global.u64", ptr, ptr))
    return ptr


def advance_pointer(e: TargetAsm, ptr: SSAValue, index: SSAValue, scale: int) -> None:
    """``ptr += index * scale`` (``index`` a u32 register)."""
    off = e.reg("b64")
    e.add(tt.MulOp("wide.u32", off, index, e.imm(scale)))
    e.add(tt.AddOp("u64", ptr, ptr, off))


def pack_pair(e: TargetAsm, lo: SSAValue, hi: SSAValue, et: str) -> SSAValue:
    """Two f32 values rounded to ``et`` (bf16 or f16) in one b32 register, ``lo`` in the
    low half."""
    packed = e.reg("b32")
    e.add(tt.CvtOp(f"rn.{et}x2.f32", packed, [hi, lo]))
    return packed


def store_pair(
    e: TargetAsm, ptr: SSAValue, lo: SSAValue, hi: SSAValue, et: str, offset: int,
    guard: SSAValue | None, guard_hi: SSAValue | None = None, split: bool = False,
) -> None:
    """Store two adjacent f32 results at ``ptr + offset`` as ``et`` (f32, bf16 or f16).

    One vector store (4 bytes for 16-bit, 8 for f32 results) under ``guard``; with
    ``split`` (rows of an odd number of elements: the pair is only element-aligned) two
    scalar stores, ``lo`` under ``guard`` and ``hi`` under ``guard_hi``."""
    if not split:
        if et == "f32":
            e.add(tt.StOp("global.v2.f32", ptr, [lo, hi], offset, guard))
            return
        e.add(tt.StOp("global.b32", ptr, [pack_pair(e, lo, hi, et)], offset, guard))
        return
    size = 4 if et == "f32" else 2
    for i, (v, gd) in enumerate(((lo, guard), (hi, guard_hi))):
        if et == "f32":
            e.add(tt.StOp("global.f32", ptr, [v], offset + i * size, gd))
            continue
        h = e.reg("b16")
        e.add(tt.CvtOp(f"rn.{et}.f32", h, [v]))
        e.add(tt.StOp("global.b16", ptr, [h], offset + i * size, gd))
