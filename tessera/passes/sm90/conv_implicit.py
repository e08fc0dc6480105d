"""``tgraph.conv2d`` as an implicit GEMM on the sm90 wgmma kernel (no im2col buffer).

``y[n, o, ho, wo] = sum_{i, j, c} x[n, c, ho*sh + i - ph, wo*sw + j - pw] w[o, c, i, j]``
is the GEMM ``Y[M, O] = A[M, K] @ B[O, K]^T`` with ``M = N*Ho*Wo`` output pixels and
``K = kh*kw*Cp`` ordered ``(i, j, c)``: at one filter tap a run of channels is contiguous
once the input is channels-last. Three kernels:

1. **NHWC copy**: ``xt[n, h, w, c] = x[n, c, h, w]`` with the channels zero-padded to
   ``Cp``, a multiple of 8 (f32: 4; 16-byte pixels), through a shared-memory tile (both sides
   coalesced; :mod:`tessera.passes.sm90.conv_layout`). ``Cp`` a multiple of 64 (ResNet's
   channel counts) lets a whole 128-byte K-chunk come from one filter tap.
2. **weight**: ``wk[o, (i*kw + j)*Cp + c] = w[o, c, i, j]`` (0 for ``c >= C``), the GEMM's
   K-major B operand, read by TMA like ``nn.Linear``'s weight (``conv_layout``); a kernel
   of many taps (a weight gradient's) by the NHWC copy, whose layout this is.
3. **the GEMM** (:func:`tessera.passes.sm90.lower_matmul_sm90.build_kernel` with
   :attr:`Sm90Gemm.gather`): its producer warpgroup gathers the A tile itself. Thread
   ``t`` owns row ``t % BM`` of the ``BM x 128``-byte tile (one output pixel: its image, ``ho``
   and ``wo`` are divided out once per tile) and ``BM / 16`` of its eight 16-byte chunks;
   per K-step it issues ``cp.async.cg`` 16-byte copies from the pixel ``(ho*sh + i - ph,
   wo*sw + j - pw)`` of the step's tap ``(i, j)`` straight into the 128-byte-swizzled slot
   (chunk ``q`` of row ``r`` at ``q ^ (r % 8)``, the layout TMA writes and the wgmma
   descriptors read), with ``src_size = 0`` (zero fill) in the padding, past ``M`` and
   past ``K``. Thread 0 loads the weight boxes by TMA (``arrive.expect_tx``). A slot's
   ``full`` barrier counts the TMA transaction, thread 0's arrive and one arrive per
   producer thread, which ``cp.async.mbarrier.arrive.noinc`` makes once the thread's
   copies have landed (:data:`SYNC`), so every slot of the ring can be in flight.
   When a K-step lies within one filter tap (``Cp`` a multiple of 64), eight lanes
   copy one pixel's 128-byte line instead (lane ``t`` chunk ``t % 8`` of rows ``t / 8 +
   16 i``), so every ``cp.async`` instruction moves whole lines: the gather's L2 requests
   halve against a lane per row (ResNet-50's 3x3 convolutions ran 1.6-2.0x faster).
   With few channels (``packs``: an RGB stem's 8-channel pixels) a K-step is one
   *filter row* instead: ``128 / (Cp * eb)`` consecutive pixels of the input row, the
   filter's row zero-padded to that many taps in the weight's K, gathered the same way
   (a lane past the row's taps copies zeros, so no pixel outside the window is read);
   not for kernels of :data:`WIDE_KERNEL_TAPS` taps or more, whose weight the NHWC copy
   reorders unpadded.
   f32 operands are read as TF32 parts: the two copies write ``hi`` and ``lo`` planes
   (3xTF32; one plane with ``allow_tf32``) and the producer fills both halves of the
   slot, as the 3xTF32 GEMM's TMA producer does.
   The epilogue stores ``y`` in NCHW straight from the accumulators: the thread's two
   rows are pixels ``(n, p)``, its columns channels, so ``y[n, o, p]`` is
   ``n*O*Ho*Wo + o*Ho*Wo + p``; the bias is added in f32 and the sum rounded once to the
   result type (as the direct kernel does). Rows past ``M`` and columns past ``O`` are
   not stored, so any ``O`` works.

An input gradient's convolution reads its kernel from the forward weight (a flipped,
channel-swapped one through :func:`conv_layout.weight_kernel`, a strided one's phase
kernel through :mod:`tessera.passes.sm90.conv_phase_weight`) and, when strided, stores
``dx`` itself (:mod:`tessera.passes.sm90.conv_interleave`): no interleave pass.

:func:`implicit_eligible` says which convolutions take it (bf16, f16, f32; index ranges
within 32 bits); the rest keep :mod:`tessera.passes.sm90.conv` or the direct kernel.
Measured on the H100 against cuDNN: docs/PERFORMANCE.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, TensorType, f32
from xdsl.ir import SSAValue

from tessera.ir import graph as g
from tessera.ir import target as tt
from tessera.passes.matmul_config import BN_SPEED, NUM_SMS, SMEM_BUDGET, Sm90Config
from tessera.passes.sm90 import builders, conv_interleave, conv_layout, conv_phase_weight
from tessera.passes.sm90.asm import TargetAsm
from tessera.passes.sm90.constants import SWIZZLE_BYTES, RegisterBudget
from tessera.passes.sm90.conv_interleave import Interleave
from tessera.passes.tile_builder import KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering
    from tessera.passes.sm90.lower_matmul_sm90 import Sm90Gemm

CONV_REGISTERS = RegisterBudget(producer=56, consumer=224)
"""The gathering producer keeps a pixel's coordinates and the ring's counters in all 128
threads (the TMA producer runs in one thread on 40 registers)."""
SYNC = "noinc"
"""How a producer thread tells the consumers its copies of a K-step landed: ``"noinc"``,
``cp.async.mbarrier.arrive.noinc`` on the slot's ``full`` barrier right after issuing
them (the hardware arrives when they complete; every slot of the ring can be in flight,
as with TMA); ``"fence"``, :data:`LAG` steps later ``cp.async.wait_group``,
``fence.proxy.async`` and an ``mbarrier.arrive`` (the generic-proxy writes explicitly
ordered before the wgmmas' async-proxy reads)."""
LAG = 2
"""With ``SYNC = "fence"``: K-steps a producer thread's copies stay in flight before it
arrives on their slot."""
CHUNK = 16
"""Bytes of one ``cp.async``: 8 channels of one pixel."""
GROUP = 256
"""Lanes per tile of the NHWC copy and the weight kernel."""
SIDE = 64
"""Side of the NHWC copy's shared-memory tile (pixels x channels)."""
I32_MAX = 2**31 - 1


@dataclass(frozen=True)
class ConvGather:
    """The convolution a :class:`Sm90Gemm` with ``gather`` computes: A is gathered from the
    channels-last input ``xt[N, H, W, Cp]``, C is stored as ``y[N, O, Ho, Wo]``."""

    n: int
    h: int
    w: int
    cp: int
    """Channels of ``xt``: C padded to a multiple of 8."""
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    ho: int
    wo: int
    bias: bool = False
    """The kernel takes a bias ``[O]`` pointer as its fourth parameter."""
    eb: int = 2
    """Bytes of an element: 2 (bf16/f16), 4 (f32 as TF32 parts)."""
    parts: int = 1
    """TF32 parts of f32 operands: 2 (3xTF32: hi and lo planes), else 1."""
    dh: int = 1
    dw: int = 1
    """Dilation: filter tap ``(i, j)`` reads input pixel ``(ho*sh + i*dh - ph, wo*sw +
    j*dw - pw)``."""
    packed: bool = False
    """A K-step is one filter row: :attr:`kwp` consecutive input pixels of ``cp``
    channels, 128 contiguous bytes of the channels-last input, the filter's row
    zero-padded to ``kwp`` taps (:func:`packs`: an RGB stem's 7 x 7 filter rows)."""
    interleave: Interleave | None = None
    """Store C at the strided places of an input gradient's phases
    (:mod:`tessera.passes.sm90.conv_interleave`) instead of as ``y[N, O, Ho, Wo]``."""

    @property
    def kwp(self) -> int:
        """Taps of a filter row in K: ``kw``, or with :attr:`packed` the pixels of a
        128-byte line."""
        return SWIZZLE_BYTES // (self.cp * self.eb) if self.packed else self.kw

    @property
    def k(self) -> int:
        return self.kh * self.kwp * self.cp

    @property
    def cpe(self) -> int:
        """Channels per 16-byte copy."""
        return CHUNK // self.eb

    @property
    def uniform(self) -> bool:
        """Every K-step (a 128-byte row of K) lies within one filter tap."""
        return self.cp % (SWIZZLE_BYTES // self.eb) == 0

    @property
    def lines(self) -> bool:
        """Every K-step is one 128-byte run of the input per output pixel (one tap's
        channels, or with :attr:`packed` one filter row's pixels)."""
        return self.uniform or self.packed

    @property
    def plane_bytes(self) -> int:
        """Bytes of one TF32 part of the channels-last input (the lo plane's offset)."""
        return self.n * self.h * self.w * self.cp * self.eb


def grouped(op: g.Conv2dOp) -> str | None:
    """Why a grouped ``op`` (``groups != 1``) stays on the direct kernel, else None: the
    GEMM paths compute one product over all input channels, and a grouped convolution is
    ``groups`` block-diagonal products (a depthwise one, ``C / groups = 1``, has a K of
    only ``kh kw``: memory-bound work the direct kernel does from shared memory)."""
    gr = op.groups_value
    if gr == 1:
        return None
    return (f"groups={gr}: a grouped convolution is {gr} independent products, not one "
            "GEMM over the channels (the direct kernel takes it)")


def packs(cp: int, eb: int, kw: int, dw: int, uniform: bool) -> bool:
    """Whether a convolution gathers filter rows (:attr:`ConvGather.packed`): pixels of
    ``cp * eb`` bytes dividing a 128-byte line whose ``128 / (cp * eb)`` pixels hold a whole
    undilated filter row, more than half of them the row's taps (the padding taps cost
    tensor-core work; the tap-by-tap gather of such small pixels costs more)."""
    if uniform or dw != 1 or SWIZZLE_BYTES % (cp * eb):
        return False
    kwp = SWIZZLE_BYTES // (cp * eb)
    return kw <= kwp < 2 * kw


def implicit_eligible(op: g.Conv2dOp) -> str | None:
    """None if the implicit-GEMM kernel takes ``op``, else why not."""
    if (why := grouped(op)) is not None:
        return why
    et = g.elem_of(op.input)
    if not isinstance(et, BFloat16Type | Float16Type | Float32Type):
        return "operands are not bf16, f16 or f32"
    xs, ws, ys = g.shape_of(op.input), g.shape_of(op.weight), g.shape_of(op.result)
    if min(*xs, *ws, *ys) < 1:
        return "empty dimension"
    eb = 4 if isinstance(et, Float32Type) else 2
    cp = cdiv(xs[1], CHUNK // eb) * (CHUNK // eb)
    if xs[0] * xs[2] * xs[3] * cp * eb * 2 > I32_MAX or ys[0] * ys[1] * ys[2] * ys[3] > I32_MAX:
        return "input or result too large for 32-bit indices and offsets"
    return None


def conv_config(m: int, o: int, k: int, sms: int = NUM_SMS, copies: int = 1) -> Sm90Config:
    """The tile of the implicit GEMM: of ``BM`` 64 or 128 and ``BN`` 64, 128 or 256, the one
    with the fewest waves of tiles over the SMs weighted by the tile's area and speed
    (``BN_SPEED``; a 64-row tile runs one consumer warpgroup, taken as 0.8 of the speed),
    so a small ``M x O`` (ResNet's last layers) still fills the GPU; no cluster; as many
    stages as fit (at most 6; results leave from registers: no staging tile). 3xTF32
    (``copies = 2``: hi and lo parts per stage) tiles are at most 128 wide (the f32
    totals share the registers)."""

    def cost(shape: tuple[int, int]) -> float:
        bm, bn = shape
        waves = cdiv(cdiv(m, bm) * cdiv(o, bn), sms)
        return waves * bm * bn / (BN_SPEED[bn] * (1.0 if bm == 128 else 0.8))

    widths = (64, 128) if copies == 2 else (64, 128, 256)
    shapes = [(bm, bn) for bm in (128, 64) for bn in widths if bn < 2 * o or bn == 64]
    bm, bn = min(shapes, key=cost)
    stages = max(s for s in range(2, 7) if Sm90Config(
        bn=bn, stages=s, consumers=bm // 64).smem_bytes(copies, staging=False) <= SMEM_BUDGET)
    return Sm90Config(bn=bn, stages=stages, consumers=bm // 64)


# --------------------------------------------------------------------------- producer


def produce(
    e: TargetAsm, gemm: Sm90Gemm, a_param: SSAValue, b_param: SSAValue, sbase: SSAValue,
    tid: SSAValue, full0: SSAValue, empty0: SSAValue, unit0: SSAValue, nunits: SSAValue,
    units: int, tile_origin: Callable[[SSAValue], tuple[SSAValue, SSAValue, SSAValue | None]],
    k_range: Callable[[SSAValue], tuple[SSAValue, SSAValue | int, SSAValue | int]], end: str,
) -> None:
    """The gathering producer warpgroup (module docstring), branching to ``end`` when done;
    with split-K a work unit is one K range of a tile (``k_range``)."""
    cv = gemm.gather
    assert cv is not None
    bm, bn, stages = gemm.bm, gemm.cfg.bn, gemm.cfg.stages
    e.add(tt.SetmaxnregOp("dec", CONV_REGISTERS.producer))
    lines = cv.lines
    # rows of the tile this thread copies: with ``lines`` (a K-step is 128 contiguous
    # bytes per output pixel) eight lanes copy one pixel's 128-byte line, chunk
    # ``q = tid % 8`` each, rows ``tid / 8 + 16 i``; else row ``tid % BM``, chunks from
    # ``qbase`` on
    nrows = bm // 16 if lines else 1
    nch = 1 if lines else bm // 16  # 16-byte chunks of a row this thread copies
    qbase = None
    if lines:
        r = e.bin(tt.ShrOp, "u32", tid, 3)
        qline = e.bin(tt.AndOp, "b32", tid, 7)
    elif bm == 128:
        r = tid
    else:
        r = e.bin(tt.RemOp, "u32", tid, bm)
        qbase = e.mul32(e.bin(tt.DivOp, "u32", tid, bm), nch * CHUNK)  # first chunk's bytes
    xbase = builders.global_pointer(e, a_param)
    tmap_b = builders.tensor_map(e, b_param)
    leader = e.setp("eq", tid, 0)
    # row r of stage 0's A tile with its swizzle: chunk q of the row is at (dst ^ 16 q)
    dst0 = e.add32(sbase, e.add32(e.mul32(r, SWIZZLE_BYTES),
                                  e.mul32(e.bin(tt.AndOp, "b32", r, 7), CHUNK)))
    if qbase is not None:
        dst0 = e.bin(tt.XorOp, "b32", dst0, qbase)
    if lines:  # this thread's chunk of each of its rows (rows 16 apart: same swizzle)
        dst0 = e.bin(tt.XorOp, "b32", dst0, e.mul32(qline, CHUNK))
    if cv.packed:  # the filter-row tap (pixel) the lane's chunk belongs to
        lane_px = e.bin(tt.DivOp, "u32", qline, cv.cp // cv.cpe)
        past_row = e.setp("ge", lane_px, cv.kw)
    kt, stage, phase, issued, tile, dstage, arrived = (e.reg("b32") for _ in range(7))
    for v in (stage, phase, issued, dstage, arrived):
        e.mov("u32", v, 0)
    e.mov("u32", tile, unit0)
    hw = cv.ho * cv.wo
    # per row: first input row and column of its window (hi0 past any H for rows past M)
    # and, with ``lines``, the element offset of its window's corner plus the chunk's
    hi0s, wi0s, bases = ([e.reg("b32") for _ in range(nrows)] for _ in range(3))

    tile_loop = e.label("GATHER_TILE")
    e.add(tt.LabelOp(tile_loop))
    tunit, kbeg, kend = k_range(tile)
    m0, n0, _ = tile_origin(tunit)
    for i in range(nrows):
        m = e.add32(m0, e.add32(r, 16 * i) if i else r)
        mm = e.reg("b32")
        e.add(tt.SelpOp("b32", mm, m, e.imm(0), e.setp("lt", m, gemm.m)))
        img, p = e.bin(tt.DivOp, "u32", mm, hw), e.bin(tt.RemOp, "u32", mm, hw)
        ho, wo = e.bin(tt.DivOp, "u32", p, cv.wo), e.bin(tt.RemOp, "u32", p, cv.wo)
        # may wrap below 0: compared unsigned against H and W
        e.add(tt.SubOp("u32", hi0s[i], e.mul32(ho, cv.sh), e.imm(cv.ph)))
        e.add(tt.SubOp("u32", wi0s[i], e.mul32(wo, cv.sw), e.imm(cv.pw)))
        pix0 = e.mul32(img, cv.h * cv.w)
        corner = e.mad32(hi0s[i], cv.w, e.add32(pix0, wi0s[i]))
        e.add(tt.MadOp("lo.u32", bases[i], corner, e.imm(cv.cp),
                       e.mul32(qline, cv.cpe) if lines else e.imm(0)))
        # every tap of a row past M misses
        e.mov("u32", hi0s[i], 1 << 30, e.setp("ge", m, gemm.m))
        if cv.packed:  # the lane's pixel of the filter row; none past the row's taps
            e.add(tt.AddOp("u32", wi0s[i], wi0s[i], lane_px))
            e.mov("u32", wi0s[i], 1 << 30, past_row)
    e.mov("u32", kt, kbeg)

    loop = e.label("GATHER")
    e.add(tt.LabelOp(loop))
    builders.wait_slot_free(e, stage, phase, empty0, e.setp("lt", issued, stages))
    full = builders.slot_barrier(e, stage, full0)
    # thread 0: the weight boxes by TMA
    e.add(tt.MbarrierArriveOp(full, e.imm(gemm.b_bytes), guard=leader))
    k0 = e.mul32(kt, gemm.box_k)
    b_dst = e.mad32(stage, gemm.b_bytes, e.add32(sbase, stages * gemm.a_bytes))
    for j in range(bn // 64):
        dst = e.add32(b_dst, j * 64 * SWIZZLE_BYTES) if j else b_dst
        col = e.add32(n0, j * 64) if j else n0
        e.add(tt.CpAsyncBulkTensorOp(dst, tmap_b, k0, col, full, guard=leader))
        if cv.parts == 2:  # B's lo part: rows O.. of the [2 O, K] weight, the slot's 2nd half
            e.add(tt.CpAsyncBulkTensorOp(e.add32(dst, gemm.b_bytes // 2), tmap_b, k0,
                                         e.add32(col, gemm.n), full, guard=leader))
    dst = e.mad32(stage, gemm.a_bytes, dst0)

    def copy(d: SSAValue, src: SSAValue, size: SSAValue, src_offset: int = 0) -> None:
        """16 bytes from ``src`` to ``d`` (3xTF32: the lo part too, from the input's second
        plane to the slot's second half)."""
        e.add(tt.CpAsyncOp("cg", d, src, CHUNK, size, src_offset=src_offset))
        if cv.parts == 2:
            s = e.reg("b64")
            e.add(tt.AddOp("u64", s, src, e.imm(cv.plane_bytes)))
            e.add(tt.CpAsyncOp("cg", e.add32(d, gemm.a_bytes // 2), s, CHUNK, size,
                               src_offset=src_offset))

    def tap_of(kc: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue]:
        """(input rows, input columns, channel) K index ``kc`` is past a window's corner."""
        tap, c = e.bin(tt.DivOp, "u32", kc, cv.cp), e.bin(tt.RemOp, "u32", kc, cv.cp)
        i, j = e.bin(tt.DivOp, "u32", tap, cv.kw), e.bin(tt.RemOp, "u32", tap, cv.kw)
        return (e.mul32(i, cv.dh) if cv.dh != 1 else i, e.mul32(j, cv.dw) if cv.dw != 1 else j,
                c)

    def source(row: int, di: SSAValue, dj: SSAValue, delta: SSAValue,
               in_k: SSAValue | None) -> tuple[SSAValue, SSAValue]:
        """(global address, bytes to copy: 16 or 0) of row ``row``'s chunk ``delta``
        elements past its base, at tap offset ``(di, dj)``."""
        hi, wi = e.add32(hi0s[row], di), e.add32(wi0s[row], dj)
        ok = e.reg("pred")
        e.add(tt.AndOp("pred", ok, e.setp("lt", hi, cv.h), e.setp("lt", wi, cv.w)))
        if in_k is not None:
            e.add(tt.AndOp("pred", ok, ok, in_k))
        off = e.reg("b32")
        e.add(tt.SelpOp("b32", off, e.add32(bases[row], delta), e.imm(0), ok))
        size = e.reg("b32")
        e.add(tt.SelpOp("b32", size, e.imm(CHUNK), e.imm(0), ok))
        src = e.reg("b64")
        e.add(tt.MulOp("wide.u32", src, off, e.imm(cv.eb)))
        e.add(tt.AddOp("u64", src, src, xbase))
        return src, size

    if cv.packed:  # one filter row per step: its pixels are the lanes' (in wi0s)
        fr = e.bin(tt.DivOp, "u32", k0, cv.kwp * cv.cp)
        di = e.mul32(fr, cv.dh) if cv.dh != 1 else fr
        delta = e.mul32(di, cv.w * cv.cp)
        for i in range(nrows):
            src, size = source(i, di, e.imm(0), delta, None)
            copy(e.add32(dst, i * 16 * SWIZZLE_BYTES) if i else dst, src, size)
    elif lines:  # one tap per step: each row's chunk is one line's, 16 rows apart
        di, dj, c = tap_of(k0)
        delta = e.mad32(e.mad32(di, cv.w, dj), cv.cp, c)
        for i in range(nrows):
            src, size = source(i, di, dj, delta, None)
            copy(e.add32(dst, i * 16 * SWIZZLE_BYTES) if i else dst, src, size)
    else:
        for q in range(nch):
            kc = e.add32(k0, q * cv.cpe)
            if qbase is not None:
                kc = e.add32(kc, e.bin(tt.DivOp, "u32", qbase, cv.eb))  # first chunk's K
            di, dj, c = tap_of(kc)
            delta = e.mad32(e.mad32(di, cv.w, dj), cv.cp, c)
            src, size = source(0, di, dj, delta, e.setp("lt", kc, cv.k))
            copy(e.bin(tt.XorOp, "b32", dst, q * CHUNK) if q else dst, src, size)
    if SYNC == "noinc":  # the barrier gets this thread's arrive once its copies land
        e.add(tt.CpAsyncMbarrierArriveOp(full))
        e.add(tt.AddOp("u32", kt, kt, e.imm(1)))
        e.add(tt.AddOp("u32", issued, issued, e.imm(1)))
        e.advance(stage, phase, stages)
        e.add(tt.BraOp(loop, e.setp("lt", kt, kend)))
        e.add(tt.AddOp("u32", tile, tile, nunits))
        e.add(tt.BraOp(tile_loop, e.setp("lt", tile, units)))
        e.add(tt.CpAsyncCommitOp())  # wait for the last copies before the thread leaves
        e.add(tt.CpAsyncWaitOp(0))
        e.add(tt.BraOp(end))
        return
    e.add(tt.CpAsyncCommitOp())
    # the copies of the step LAG steps back have landed: publish them to the wgmmas
    lag = min(LAG, stages - 1)
    skip = e.label("NO_ARRIVE")
    e.add(tt.BraOp(skip, e.setp("lt", issued, lag)))
    e.add(tt.CpAsyncWaitOp(lag))
    _publish(e, full0, dstage, arrived, stages)
    e.add(tt.LabelOp(skip))
    e.add(tt.AddOp("u32", kt, kt, e.imm(1)))
    e.add(tt.AddOp("u32", issued, issued, e.imm(1)))
    e.advance(stage, phase, stages)
    e.add(tt.BraOp(loop, e.setp("lt", kt, kend)))
    e.add(tt.AddOp("u32", tile, tile, nunits))
    e.add(tt.BraOp(tile_loop, e.setp("lt", tile, units)))
    # the last steps' copies
    e.add(tt.CpAsyncWaitOp(0))
    done = e.label("GATHER_DONE")
    drain = e.label("DRAIN")
    e.add(tt.LabelOp(drain))
    e.add(tt.BraOp(done, e.setp("ge", arrived, issued)))
    _publish(e, full0, dstage, arrived, stages)
    e.add(tt.BraOp(drain))
    e.add(tt.LabelOp(done))
    e.add(tt.BraOp(end))


def _publish(e: TargetAsm, full0: SSAValue, dstage: SSAValue, arrived: SSAValue,
             stages: int) -> None:
    """Make this thread's landed copies visible to the async proxy and arrive on the
    ``full`` barrier of slot ``dstage``; advance ``dstage`` and ``arrived``."""
    e.add(tt.FenceOp("proxy_async"))
    e.add(tt.MbarrierArriveOp(builders.slot_barrier(e, dstage, full0)))
    e.add(tt.AddOp("u32", dstage, dstage, e.imm(1)))
    e.mov("u32", dstage, 0, e.setp("eq", dstage, stages))
    e.add(tt.AddOp("u32", arrived, arrived, e.imm(1)))


# --------------------------------------------------------------------------- epilogue


def nchw_epilogue(
    e: TargetAsm, gemm: Sm90Gemm, c_param: SSAValue, bias_param: SSAValue | None,
    tid: SSAValue, cw: SSAValue, m0: SSAValue, n0: SSAValue, acc: Sequence[SSAValue],
    c_rows: SSAValue | None = None,
) -> None:
    """Store consumer warpgroup ``cw``'s fragment of the tile at ``(m0, n0)`` as
    ``y[n, o, p]`` (module docstring), bias added in f32, rounded once. With split-K
    (``c_rows``: the K range times M) the f32 partial goes to the range's ``[N, O, Ho,
    Wo]`` block of the workspace, ``c_rows * O`` elements in."""
    cv = gemm.gather
    assert cv is not None
    ty, o, hw, bn = gemm.out_type, gemm.n, cv.ho * cv.wo, gemm.cfg.bn
    if cv.interleave is not None:
        assert bias_param is None and c_rows is None
        conv_interleave.epilogue(e, cv.interleave, ty, gemm.m, bn, c_param, tid, cw, m0, n0,
                                 acc)
        return
    eb = 4 if ty == "f32" else 2
    _, warp, lane = builders.fragment_lanes(e, tid)
    row0 = builders.fragment_row(e, m0, cw, warp, lane)
    col0 = e.add32(n0, builders.fragment_col(e, lane))
    ragged_n = o % bn != 0
    cols = {(j, x): e.setp("lt", e.add32(col0, 8 * j + x), o) if ragged_n else None
            for j in range(bn // 8) for x in (0, 1)}
    bias: dict[tuple[int, int], SSAValue] = {}
    if bias_param is not None:
        bptr = builders.global_pointer(e, bias_param)
        builders.advance_pointer(e, bptr, col0, eb)
        for (j, x), gd in cols.items():
            v = e.reg("f32")
            if eb == 4:
                e.add(tt.MovOp("f32", v, e.fimm(0.0)))
                e.add(tt.LdOp("global.f32", [v], bptr, (8 * j + x) * 4, gd))
            else:
                h16 = e.reg("b16")
                e.mov("b16", h16, 0)
                e.add(tt.LdOp("global.b16", [h16], bptr, (8 * j + x) * 2, gd))
                e.add(tt.CvtOp(f"f32.{ty}", v, [h16]))
            bias[j, x] = v
    for h in (0, 1):
        m = e.add32(row0, 8 * h)
        ok = e.setp("lt", m, gemm.m)
        mm = e.reg("b32")
        e.add(tt.SelpOp("b32", mm, m, e.imm(0), ok))
        img, p = e.bin(tt.DivOp, "u32", mm, hw), e.bin(tt.RemOp, "u32", mm, hw)
        # y[img, col0, p]: then column 8j + x is (8j + x) * HW elements further
        lin = e.mad32(img, o * hw, e.mad32(col0, hw, p))
        if c_rows is not None:
            lin = e.mad32(c_rows, o, lin)
        ptr = builders.global_pointer(e, c_param)
        builders.advance_pointer(e, ptr, lin, eb)
        for j in range(bn // 8):
            for x in (0, 1):
                v = acc[4 * j + 2 * h + x]
                if bias:
                    v = e.fbin(tt.AddOp, v, bias[j, x], "rn.f32")
                gd = ok
                if cols[j, x] is not None:
                    gd = e.reg("pred")
                    e.add(tt.AndOp("pred", gd, ok, cols[j, x]))
                if eb == 4:
                    e.add(tt.StOp("global.f32", ptr, [v], (8 * j + x) * hw * 4, gd))
                    continue
                out = e.reg("b16")
                e.add(tt.CvtOp(f"rn.{ty}.f32", out, [v]))
                e.add(tt.StOp("global.b16", ptr, [out], (8 * j + x) * hw * 2, gd))


# --------------------------------------------------------------------------- lowering


def lower_conv2d_implicit(lw: _FunctionLowering, op: g.Conv2dOp, split_k: str = "off") -> bool:
    """Lower ``op`` as the NHWC copy, the weight reorder and the implicit GEMM; False
    (nothing emitted) when :func:`implicit_eligible` refuses it.

    Under ``split_k`` (``CompileOptions.split_k``) a convolution with few output tiles and
    a long K (a weight gradient: the batch and the gradient's pixels are its K) cuts K
    into ranges whose f32 partials, stored as ``[S, N, O, Ho, Wo]``,
    :func:`~tessera.passes.sm90.split_k.reduce_splits` adds in range order, then adds the
    bias and rounds once."""
    if implicit_eligible(op) is not None:
        return False
    from tessera.passes.sm90.lower_matmul_sm90 import (
        Sm90Gemm,
        build_kernel,
        device_sms,
        splits_for,
    )
    from tessera.passes.sm90.split_k import reduce_splits, workspace_type

    et = g.elem_of(op.input)
    f32 = isinstance(et, Float32Type)
    eb, parts = (4, 1 if lw.allow_tf32 else 2) if f32 else (2, 1)
    n, c, h, w = g.shape_of(op.input)
    o, _, kh, kw = g.shape_of(op.weight)
    _, _, ho, wo = g.shape_of(op.result)
    sh, sw = op.stride.get_values()
    ph, pw = op.padding.get_values()
    dh, dw = op.dilation_values
    cpe = CHUNK // eb
    cp = cdiv(c, cpe) * cpe
    uniform = cp % (SWIZZLE_BYTES // eb) == 0
    # a kernel of many taps is reordered by the NHWC copy (below), which writes K as
    # kh x kw x Cp: no filter rows padded to a line there
    packed = packs(cp, eb, kw, dw, uniform) and kh * kw < WIDE_KERNEL_TAPS
    cv = ConvGather(n, h, w, cp, kh, kw, sh, sw, ph, pw, ho, wo, op.bias is not None, eb, parts,
                    dh, dw, packed)
    # the channels-last input and the K-major weight (f32: their TF32 parts, hi then lo)
    xt = lw.alloc(TensorType(et, [parts, n, h, w, cp] if f32 else [n, h, w, cp]))
    # a weight gradient's input is the batch-channel transpose of an activation: read
    # the activation in that order instead of a transposed copy
    x_src = _swapped_source(lw, op.input)
    nhwc = lw.named_kernel(
        "conv_nhwc", lambda nm: conv_layout.nhwc_kernel(nm, n, c, h * w, cp, eb, parts,
                                                        x_src is not None),
        ("swapped", x_src is not None))
    conv_layout.launch(lw, nhwc, [xt, x_src if x_src is not None else lw.mem(op.input)],
                       conv_layout.nhwc_grid(n, c, h * w, cp, eb), conv_layout.NHWC_SMEM)
    wk = lw.alloc(TensorType(et, [parts * o, cv.k]))
    phase = lw.notes.get((conv_phase_weight.NOTE, op))

    def relayout_weight(channel_major: bool) -> None:
        """Launch the weight's relayout into ``wk`` (``channel_major``: a phase kernel's
        output channels in (channel, phase) order, :mod:`conv_phase_weight`)."""
        if kh * kw >= WIDE_KERNEL_TAPS:  # [O, C, taps] -> [O, taps, Cp]: the NHWC layout
            w_src = _swapped_source(lw, op.weight)  # a weight gradient's output gradient
            weight = lw.named_kernel(
                "conv_weight",
                lambda nm: conv_layout.nhwc_kernel(nm, o, c, kh * kw, cp, eb, parts,
                                                   w_src is not None),
                ("swapped", w_src is not None))
            conv_layout.launch(lw, weight,
                               [wk, w_src if w_src is not None else lw.mem(op.weight)],
                               conv_layout.nhwc_grid(o, c, kh * kw, cp, eb),
                               conv_layout.NHWC_SMEM)
        elif phase is not None:
            # a strided input gradient's phase kernel: read from the forward weight
            pwt, w_root = phase
            weight = lw.named_kernel(
                "conv_weight",
                lambda nm: conv_phase_weight.weight_kernel(nm, pwt, cp, eb, parts, cv.kwp,
                                                           channel_major),
                ("phases", pwt, channel_major))
            conv_layout.launch(lw, weight, [wk, lw.mem(w_root)],
                               conv_layout.weight_grid(o, cv.k), 0)
        else:
            # an input gradient's kernel, reverse(transpose(w)): read w flipped and swapped;
            # a one-tap one's, transpose(w): read w swapped
            flipped = _flipped_source(lw, op.weight)
            flip, swapped = flipped is not None, flipped is not None and flipped[1]
            if flipped is None and (w_src := _swapped_source(lw, op.weight)) is not None:
                flipped, swapped = (w_src, True), True
            weight = lw.named_kernel(
                "conv_weight",
                lambda nm: conv_layout.weight_kernel(nm, o, c, kh, kw, cp, eb, parts, cv.kwp,
                                                     flip, swapped),
                ("flip", flip, swapped))
            w_buf = flipped[0] if flipped is not None else lw.mem(op.weight)
            conv_layout.launch(lw, weight, [wk, w_buf], conv_layout.weight_grid(o, cv.k), 0)

    m = n * ho * wo
    sms = device_sms()
    if f32:
        in_type, out_type = ("tf32" if parts == 1 else "3xtf32"), "f32"
    else:
        in_type = out_type = "bf16" if isinstance(et, BFloat16Type) else "f16"
    gemm = Sm90Gemm(m, o, cv.k, in_type, out_type, conv_config(m, o, cv.k, sms, parts), sms,
                    b_t=True, gather=cv)
    splits = splits_for(replace(gemm, out_type="f32"), split_k, MAX_SPLITS)
    target = (conv_interleave.lower_target(lw, op) if splits == 1 and op.bias is None
              else None)
    # with both the phase kernel relaid out here and the phases stored by the epilogue,
    # the GEMM's columns are (channel, phase): a warp's stores of one channel's phases
    # then fill whole runs of dx's rows
    relayout_weight(target is not None and phase is not None)
    if target is not None:
        # an input gradient's phases: the epilogue stores dx itself, and the ops that
        # would interleave the convolution's output are not lowered
        il, out = target
        if phase is not None:
            il = replace(il, channel_major=True)
        # only the convolution's rows and columns that reach dx: its pixel grid starts
        # (rmin, qmin) in, which the gather sees as that much less padding
        trimmed, rmin, qmin = il.trimmed()
        if rmin <= cv.ph and qmin <= cv.pw:
            il = trimmed
            cv = replace(cv, ho=il.rows, wo=il.cols, ph=cv.ph - rmin, pw=cv.pw - qmin)
            m = n * il.rows * il.cols
            gemm = replace(gemm, m=m, cfg=conv_config(m, o, cv.k, sms, parts))
        cv = replace(cv, interleave=il)
        gemm = replace(gemm, gather=cv)
    else:
        out = lw.alloc(op.result.type)
        lw.env[op.result] = out
    if splits == 1:
        name = lw.named_kernel("conv", lambda nm: build_kernel(nm, gemm),
                               ("interleave", cv.interleave))
        args = [out, xt, wk] + ([lw.mem(op.bias)] if op.bias is not None else [])
        lw.hb.add_op(tt.LaunchExOp(name, args, gemm.grid(), gemm.smem_bytes, gemm.boxes()))
        return True
    part = replace(gemm, out_type="f32", splits=splits,
                   gather=replace(cv, bias=False))
    result = op.result.type
    assert isinstance(result, TensorType)
    workspace = lw.alloc(workspace_type(splits, result))
    name = lw.named_kernel("conv", lambda nm: build_kernel(nm, part))
    lw.hb.add_op(tt.LaunchExOp(name, [workspace, xt, wk], part.grid(), part.smem_bytes,
                               part.boxes()))
    extra = [lw.mem(op.bias)] if op.bias is not None else []
    reduce_splits(lw, workspace, out, result, splits, _bias_epilogue if extra else None, extra)
    return True


SWAP = (1, 0, 2, 3)
"""The batch-channel transpose the layout copies read through (``swapped``)."""


def _flipped_source(lw: _FunctionLowering, v: SSAValue) -> tuple[SSAValue, bool] | None:
    """``(buffer of w, swapped)`` when ``v`` is a deferred ``reverse(w, [2, 3])`` or
    ``reverse(transpose(w, SWAP), [2, 3])`` (``swapped``;
    :data:`tessera.passes.tile_datamove.READS_FLIPPED`), else None."""
    view = lw.peek_view(v)
    if view is None or view[2] != (2, 3) or view[1] not in (SWAP, (0, 1, 2, 3)):
        return None
    return lw.mem(view[0]), view[1] == SWAP


def _swapped_source(lw: _FunctionLowering, v: SSAValue) -> SSAValue | None:
    """The buffer of ``x`` when ``v`` is a deferred ``transpose(x, SWAP)``
    (:data:`tessera.passes.tile_datamove.READS_THROUGH`), else None."""
    through = lw.peek_transpose(v)
    return lw.mem(through[0]) if through is not None and through[1] == SWAP else None
WIDE_KERNEL_TAPS = 64
"""Kernels of at least this many taps (a weight gradient's kernel is the output gradient,
``Ho x Wo`` taps) are reordered by the tiled NHWC copy (both sides coalesced) instead of
the one-element-per-thread weight kernel."""
MAX_SPLITS = 128
"""Most K ranges of a split convolution: a weight gradient's K (batch x output pixels)
can be a million long over a handful of output tiles."""


def _bias_epilogue(e: KernelEmitter, extra: list[SSAValue], acc: SSAValue,
                   pre: list[SSAValue], row: SSAValue, col: SSAValue, ok: SSAValue) -> SSAValue:
    """The split convolution's epilogue: ``bias[o]`` (``pre = [n, o]``) added to the f32
    sum, rounded once to the result type."""
    ty = extra[0].type
    et = ty.element_type  # type: ignore[attr-defined]
    b = e.convert(e.load(extra[0], [pre[1]], mask=ok), f32)
    return e.convert(e.fadd(acc, b), et)
