"""The staged store of the sm90 GEMM: a result TMA cannot store leaves through shared memory.

A wgmma accumulator fragment is spread thinly over the output: thread ``t`` of warp ``w``
of a consumer warpgroup holds rows ``16w + t/4`` and ``+ 8`` and, in each 8-column block
``j``, the columns ``8j + 2(t%4)`` and ``+ 1``. Stored from registers (``st.global``),
one warp instruction touches 8 rows and 4 bytes (f32: 8) of each, or with rows of an
odd number of 16-bit elements (a vocabulary of 50257: a pair is only element-aligned)
2 bytes of each: 8 partly written sectors per instruction. The staged store instead
moves each consumer warpgroup's ``64 x BN`` slice through a shared-memory buffer in
chunks of :data:`CHUNK_BYTES` bytes of every row (64 16-bit or 32 f32 columns):

* **Layout**: the warpgroup's buffer holds 64 rows of one chunk, row ``r`` at
  ``r * stride`` with ``stride = CHUNK_BYTES + pad`` (:func:`row_stride`: a pad of 8
  elements, 16 bytes for 16-bit and 32 for f32 results) so that the fragment's writes
  are bank-conflict free: a warp's ``st.shared.b32`` of packed 16-bit pairs lands in
  banks ``4 (t/4) + t%4`` (all 32 distinct), and each half-warp's ``st.shared.v2.f32``
  of f32 pairs in 8-byte slots ``4 (t/4) + t%4`` mod 16 (distinct). The reads below
  take whole rows (a quarter, half or whole warp per row, by vector width) and are
  conflict free as any contiguous access.
* **Writes**: each thread writes its pairs of the chunk's 8-column blocks, after the
  fused epilogue (bias, activation: :class:`~tessera.passes.sm90.epilogue.EpilogueEmitter`,
  unchanged) and the conversion to the result type (``cvt.rn`` to 16 bits: the same bits
  as the register store).
* **Synchronization**: the warpgroup's own named barrier (``bar.sync 1 + cw, 128``, the
  one the TMA-store epilogue uses) before the writes (every thread has read the previous
  chunk, of this tile or the last) and after them (the chunk is in shared memory); the
  other consumer warpgroup and the producer never wait on it.
* **Reads and stores**: the warpgroup's 128 threads then copy the chunk row by row,
  consecutive threads on consecutive vectors of a row, ``V`` elements per vector: the
  widest of 16, 8, 4 and 2 bytes dividing a row's bytes (:func:`vector_bytes`; ``ld``
  the row stride in elements: with N odd 16-bit results take 2-byte stores, with
  ``N % 8 == 4`` 8-byte ones, f32 results with ``N % 4 == 0`` 16-byte ones). Thread
  ``t`` takes vector ``t % (CHUNK_BYTES / vb)`` of rows ``t / (CHUNK_BYTES / vb) + k R``
  (``R = 128 vb / CHUNK_BYTES``), so a warp writes a contiguous run of a row (64 bytes
  with 2-byte vectors, else whole 128-byte chunk rows). Stores are predicated on the
  row being below ``rows`` and the vector's first column below ``cols`` (as ``cols`` is
  a multiple of ``V``, a vector is wholly in or out).

The buffer is :func:`staged_bytes` per kernel (``BM x stride``: 18 KiB for a 128-row
tile of 16-bit results, 20 KiB of f32), much less than the ``BM x BN`` tile the TMA
store stages, so the stage count of the register store is kept. :class:`StagedStore`
knows nothing of the GEMM besides the fragment layout: a row stride, bounds and an
element type, so any wgmma kernel can store through it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.ir import SSAValue

from tessera.ir import target as tt
from tessera.passes.sm90 import builders
from tessera.passes.sm90.asm import TargetAsm
from tessera.passes.sm90.constants import WARPGROUP_THREADS, WGMMA_M

CHUNK_BYTES = 128
"""Bytes of each staged row per chunk: a full 128-byte line of C (4 sectors)."""
STORE_TYPES = {"bf16": 2, "f16": 2, "f32": 4}
"""Bytes of an element of each result type the staged store takes."""
_VECTOR = {16: ("v4.b32", 4, "b32"), 8: ("v2.b32", 2, "b32"), 4: ("b32", 1, "b32"),
           2: ("b16", 1, "b16")}
"""Per vector width in bytes: the ld/st modifiers, registers per vector, register class."""


def row_stride(esize: int) -> int:
    """Bytes between staged rows: the chunk and a pad of 8 elements (bank-conflict free
    fragment writes, module docstring)."""
    return CHUNK_BYTES + 8 * esize


def staged_bytes(warpgroups: int, esize: int) -> int:
    """Shared memory of the staging buffers of ``warpgroups`` consumer warpgroups."""
    return warpgroups * WGMMA_M * row_stride(esize)


def vector_bytes(ld: int, esize: int) -> int:
    """The widest store (bytes, at most 16) that every row start of a tensor with rows of
    ``ld`` elements of ``esize`` bytes keeps aligned (from a 16-byte aligned base)."""
    for vb in (16, 8, 4, 2):
        if vb >= esize and (ld * esize) % vb == 0:
            return vb
    return esize


def read_plan(vb: int) -> tuple[int, int, int]:
    """``(vectors per chunk row, rows apart of a thread's consecutive vectors, vectors per
    thread)`` of the read phase with ``vb``-byte vectors: thread ``t`` reads vector
    ``t % vpr`` of rows ``t // vpr + k * step`` for ``k < count``."""
    vpr = CHUNK_BYTES // vb
    return vpr, WARPGROUP_THREADS // vpr, WGMMA_M * vpr // WARPGROUP_THREADS


def read_slots(t: int, vb: int) -> list[tuple[int, int]]:
    """``(row, byte column)`` in the chunk of each vector thread ``t`` copies (what the
    emitted read phase does, for tests)."""
    vpr, step, count = read_plan(vb)
    return [(t // vpr + k * step, (t % vpr) * vb) for k in range(count)]


def write_slots(t: int, esize: int) -> list[tuple[int, int]]:
    """``(row, byte column)`` in the chunk of each pair thread ``t`` (of its warpgroup)
    writes, in the order the write phase emits them (``jj``-major, then ``h``)."""
    warp, lane = divmod(t, 32)
    row, col = 16 * warp + lane // 4, 2 * (lane % 4)
    return [(row + 8 * h, (8 * jj + col) * esize)
            for jj in range(CHUNK_BYTES // (8 * esize)) for h in (0, 1)]


@dataclass(frozen=True)
class StoreShape:
    """Where a warpgroup's ``64 x tile_cols`` fragment goes in global memory."""

    out_type: str
    """``bf16``, ``f16`` or ``f32``: the stored element type."""
    rows: int
    """Rows at or past this one (in the row numbers given to :meth:`StagedStore.tile`) are
    not stored."""
    cols: int
    """Columns at or past this one are not stored (a multiple of the vector width)."""
    ld: int
    """Elements between consecutive rows in global memory."""
    tile_cols: int
    """Columns of the fragment (the wgmma's N, a multiple of the chunk's columns)."""
    ragged_rows: bool = True
    """Some tile reaches past ``rows`` (else the row bound is not checked)."""
    ragged_cols: bool = True
    """Some tile reaches past ``cols`` (else the column bound is not checked)."""

    def __post_init__(self) -> None:
        if self.out_type not in STORE_TYPES:
            raise ValueError(f"staged store: result type {self.out_type!r}")
        if (self.tile_cols * self.esize) % CHUNK_BYTES:
            raise ValueError(f"staged store: {self.tile_cols} columns of {self.out_type} are "
                             f"no multiple of {CHUNK_BYTES} bytes")
        if self.cols % (self.vb // self.esize):
            raise ValueError(f"staged store: {self.cols} columns are no multiple of the "
                             f"{self.vb}-byte vector")

    @property
    def esize(self) -> int:
        return STORE_TYPES[self.out_type]

    @property
    def vb(self) -> int:
        """Bytes of each global store (:func:`vector_bytes` of the row stride)."""
        return vector_bytes(self.ld, self.esize)

    @property
    def chunk_cols(self) -> int:
        return CHUNK_BYTES // self.esize


class StagedStore:
    """Emits the staged store (module docstring) of one consumer warpgroup.

    ``buf`` is the shared address of this warpgroup's buffer (:func:`staged_bytes` / its
    warpgroups), ``t`` the thread's index in its warpgroup, ``sync`` emits the warpgroup's
    barrier, ``base`` is a global (``cvta``'d) pointer to element ``(0, 0)``; set up once,
    then :meth:`tile` per tile.
    """

    def __init__(
        self, e: TargetAsm, shape: StoreShape, buf: SSAValue, t: SSAValue,
        sync: Callable[[], None], base: SSAValue,
    ) -> None:
        self.e, self.shape, self.sync, self.base = e, shape, sync, base
        es, stride = shape.esize, row_stride(shape.esize)
        warp, lane = e.bin(tt.ShrOp, "u32", t, 5), e.bin(tt.AndOp, "b32", t, 31)
        # write phase: rows 16 warp + lane / 4 (+ 8), byte column 2 (lane % 4) esize
        wrow = e.add32(e.mul32(warp, 16), e.bin(tt.ShrOp, "u32", lane, 2))
        wcol = e.mul32(e.bin(tt.AndOp, "b32", lane, 3), 2 * es)
        self.wbase = e.mad32(wrow, stride, e.add32(buf, wcol))
        # read phase: vector t % vpr of rows t / vpr + k step
        vpr, self.step, self.count = read_plan(shape.vb)
        self.rrow = e.bin(tt.ShrOp, "u32", t, vpr.bit_length() - 1)
        self.rvec = e.bin(tt.AndOp, "b32", t, vpr - 1)  # vector index in the chunk row
        self.rbase = e.mad32(self.rrow, stride, e.mad32(self.rvec, shape.vb, buf))

    def tile(
        self, row0: SSAValue, col0: SSAValue,
        pair: Callable[[int, int], tuple[SSAValue, SSAValue]], row_off: SSAValue | None = None,
    ) -> None:
        """Store the fragment whose first row is ``row0`` and first column ``col0``:
        ``pair(j, h)`` gives the f32 values at fragment rows ``+ 8h``, columns ``8j`` and
        ``+ 1`` (called once each, ``j``-major); ``row_off`` more rows down (a split-K
        range), not counted against ``rows``."""
        e, sh = self.e, self.shape
        es, vb, stride = sh.esize, sh.vb, row_stride(sh.esize)
        mods, nregs, rc = _VECTOR[vb]
        # this thread's first element: (row_off + row0 + rrow) * ld + col0 + rvec * V
        row = e.add32(row0, self.rrow)
        col = e.mad32(self.rvec, vb // es, col0)
        ptr = e.reg("b64")
        e.add(tt.MovOp("b64", ptr, self.base))
        builders.advance_pointer(e, ptr, row if row_off is None else e.add32(row, row_off),
                                 sh.ld * es)
        builders.advance_pointer(e, ptr, col, es)
        rows_left = e.bin(tt.SubOp, "s32", sh.rows, row) if sh.ragged_rows else None
        cols_left = e.bin(tt.SubOp, "s32", sh.cols, col) if sh.ragged_cols else None
        row_bytes = sh.ld * es
        far = WGMMA_M * row_bytes + sh.tile_cols * es >= 1 << 31  # offsets past an immediate
        ptrs = [ptr]
        for k in range(1, self.count if far else 0):
            p = e.reg("b64")
            e.add(tt.AddOp("u64", p, ptr, e.imm(k * self.step * row_bytes)))
            ptrs.append(p)
        blocks = sh.chunk_cols // 8  # 8-column blocks of the fragment per chunk
        for c in range(sh.tile_cols // sh.chunk_cols):
            self.sync()  # every thread has read the buffer's previous chunk
            for jj in range(blocks):
                for h in (0, 1):
                    lo, hi = pair(c * blocks + jj, h)
                    off = 8 * h * stride + 8 * jj * es
                    if sh.out_type == "f32":
                        e.add(tt.StOp("shared.v2.f32", self.wbase, [lo, hi], off))
                    else:
                        packed = builders.pack_pair(e, lo, hi, sh.out_type)
                        e.add(tt.StOp("shared.b32", self.wbase, [packed], off))
            self.sync()  # the chunk is in shared memory
            vals = []
            for k in range(self.count):
                regs = [e.reg(rc) for _ in range(nregs)]
                e.add(tt.LdOp(f"shared.{mods}", regs, self.rbase, k * self.step * stride))
                vals.append(regs)
            col_ok = (e.setp("gt", cols_left, c * sh.chunk_cols, "s32")
                      if cols_left is not None else None)
            for k, regs in enumerate(vals):
                row_ok = (e.setp("gt", rows_left, k * self.step, "s32")
                          if rows_left is not None else None)
                guard = _both(e, row_ok, col_ok)
                base, off = (ptrs[k], c * CHUNK_BYTES) if far else (
                    ptr, k * self.step * row_bytes + c * CHUNK_BYTES)
                e.add(tt.StOp(f"global.{mods}", base, regs, off, guard))


def _both(e: TargetAsm, a: SSAValue | None, b: SSAValue | None) -> SSAValue | None:
    if a is None or b is None:
        return a if b is None else b
    p = e.reg("pred")
    e.add(tt.AndOp("pred", p, a, b))
    return p


def warpgroup_sync(e: TargetAsm, cw: SSAValue, consumers: int) -> None:
    """A barrier of consumer warpgroup ``cw``'s 128 threads: named barrier ``1 + cw`` (the
    id is an immediate, so with two consumers each branches to its own)."""
    if consumers == 1:
        e.add(tt.BarSyncOp(1, threads=WARPGROUP_THREADS))
        return
    skip, done = e.label("WG1_SYNC"), e.label("SYNCED")
    e.add(tt.BraOp(skip, e.setp("ne", cw, 0)))
    e.add(tt.BarSyncOp(1, threads=WARPGROUP_THREADS))
    e.add(tt.BraOp(done))
    e.add(tt.LabelOp(skip))
    e.add(tt.BarSyncOp(2, threads=WARPGROUP_THREADS))
    e.add(tt.LabelOp(done))
