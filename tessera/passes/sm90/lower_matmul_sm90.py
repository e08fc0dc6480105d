"""``lower-matmul-sm90``: bf16/f16, fp8 and f32 matmuls as Hopper TMA + wgmma kernels.

``lower-graph-to-tile`` with one change: every ``tgraph.matmul`` that
:func:`eligible` accepts becomes a Target IR kernel built here (a
``ttarget.func``) and a host ``ttarget.launch_ex`` instead of the generic
``mma.sync`` Tile IR kernel; everything else lowers as before.
The ``tile`` stage of ``tessera.passes.pipelines`` uses it when the compile options
enable the sm90 kernels (``CompileOptions.sm90_kernels``: a compute capability 9.0
device, or ``TESSERA_SM90_MATMUL=1``).

The kernel (``C[M, N] = A[M, K] @ B[K, N]``, f32 accumulate), one ``BM x BN``
output tile per CTA:

* ``128 * (1 + consumers)`` threads: warpgroup 0 is the producer, warpgroups
  1.. are consumers, each owning 64 rows of the tile (``BM = 64 * consumers``).
  ``setmaxnreg`` moves registers from the producer (40) to the consumers (232).
* ``stages`` shared-memory slots, each an A box ``BM x 64`` and ``BN / 64`` B
  boxes ``64 x 64``, filled by TMA (``cp.async.bulk.tensor.2d``) through host-built
  ``CUtensorMap``s with the 128-byte swizzle; out-of-bounds elements are zero
  filled, so ragged M, N and K need no masking on the load side. A slot has a
  ``full`` mbarrier (the producer's ``arrive.expect_tx`` + the TMA bytes) and an
  ``empty`` mbarrier (one arrive per consumer warpgroup once its wgmmas have read
  the slot).
* Consumers wait on ``full``, issue ``BK / 16`` ``wgmma.mma_async m64nBNk16``
  (A K-major, B N-major, both through shared-memory descriptors with the same
  128-byte swizzle as the tensor maps), commit, keep one group in flight
  (``wgmma.wait_group 1``) and release the previous slot.
* The first wgmma of a tile overwrites the accumulators (``scale_d`` false).
* Epilogue (the wgmma D fragment: thread ``t`` of warp ``w`` holds rows
  ``16w + t/4 (+8)`` and column pairs ``8j + 2(t%4)``): for bf16/f16 results each
  consumer warpgroup converts its ``64 x BN`` slice into a shared-memory staging
  tile laid out like the C tensor map's 128-byte-swizzled ``64 x 64`` boxes
  (bank-conflict free), and one thread TMA-stores the boxes
  (``cp.async.bulk.tensor`` shared → global, clipped at ragged edges); the
  warpgroup goes straight on to its next tile while the stores drain
  (:class:`~tessera.passes.sm90.gemm_store.TmaStore`). f32 results, split-K partials and those with ``N % 8 != 0``
  (rows of C that are no 16-byte multiple) take the staged store
  (:mod:`tessera.passes.sm90.staged_store`): each consumer warpgroup moves its slice
  through a padded shared-memory buffer of one 128-byte chunk of its 64 rows at a time
  (its named barrier before and after the writes) and stores whole rows with the widest
  ``st.global`` the rows' alignment allows, predicated on ``row < M`` and ``col < N``
  when the tile is ragged. ``Sm90Gemm.store = "registers"`` (``CompileOptions.
  sm90_store``) stores them from registers instead (same bits).
* Clusters (``cfg.cluster = 2``, when the tile rows pair up): the two CTAs of a
  cluster compute vertically adjacent tiles that share their B boxes; each loads
  half of them and multicasts it to both (``.multicast::cluster``), a slot's
  ``empty`` barrier counts the consumers of both CTAs (remote arrives through
  ``mapa``), and cluster barriers fence the start and the end.
* Persistent grid: one CTA per SM (``min(tiles, SMs)``); CTA ``b`` takes tiles ``b``,
  ``b + grid``, ... in groups of ``group_m`` tile rows (an L2-friendly order). The
  stage ring runs on across tiles, and a consumer releases its last slot before its
  epilogue, so the producer already loads the next tile while the consumers store.

f32 operands run on ``wgmma ... k8.f32.tf32.tf32`` (4-byte elements: a 128-byte swizzle
row is 32 of K, 4 k8 wgmmas per stage). tf32 reads both operands K-major only, so an
MN-major operand is first copied K-major by :func:`~tessera.passes.sm90.split_tf32.split_tf32`
(which also pads K to a 16-byte row):

* ``allow_tf32`` (``CompileOptions.allow_tf32``): one TF32 product; K-major operands with
  K a multiple of 4 are read as they are (the tensor cores use the top 19 bits of each
  element), the others through a TF32-rounded copy.
* default (``3xtf32``, full f32 accuracy): both operands are split into ``hi = tf32(x)``
  and ``lo = tf32(x - hi)`` copies (one ``[2, rows, K]`` buffer, lo after hi in the same
  tensor map); each stage loads both, each k8 step issues ``A_lo B_hi``, ``A_hi B_lo``,
  ``A_hi B_hi``, and each stage's product is added into f32 totals with ``add.rn``
  (as for fp8) -- measured more accurate than cuBLAS SGEMM
  (docs/perf/2026-11-24-h100-f32-gemm.txt).

Row lengths that are no 16-byte multiple (the TMA row-stride unit: a vocabulary of 50257,
an odd hidden size) take the same kernel (:func:`staging` says how):

* an operand whose stored rows are not 16-byte multiples is first copied, in its own
  layout, into a buffer with rows zero-padded to 16 bytes
  (:func:`~tessera.passes.sm90.pad_rows.pad_rows`); the zero columns are K (adding
  nothing) or rows of M or N past the problem (never stored). fp8 operands pad K in
  their K-major copy (:func:`~tessera.passes.sm90.transpose.transpose_2d`), f32 ones in
  their TF32 copies;
* a result with ``N % 8 != 0`` is stored with ``st.global`` like an f32 one, through the
  staged store (bounds-checked; with N odd in 2-byte stores, as rows are then only
  element-aligned), after the same fused epilogue.

Split-K (``CompileOptions.split_k``, :func:`splits_for`): a product with too few output
tiles for the SMs cuts K into ``S`` ranges; the kernel's work units are ``tiles * S``, each
storing its f32 partial product in a ``[S, M, N]`` workspace, and
:mod:`tessera.passes.sm90.split_k` adds the partials in range order (deterministic) and
applies the epilogue.

Promoting kernels may use two accumulator sets by turns (``Sm90Gemm.overlap``: a stage's
wgmmas run while the previous stage is added into the totals); same bits, measured slower
on an H100 for fp8 at 8192^3, so no lowering chooses it.

``tgraph.matmul_epilogue`` ops apply their bias (a row vector or a full ``[M, N]``
tensor), activation and cast to the accumulators before the store
(:mod:`tessera.passes.sm90.epilogue`); other bias broadcasts compute the product into a
buffer and apply the epilogue in one elementwise kernel.

Tile shapes and stages come from the matmul's ``tile_shape`` when it is a valid
sm90 shape, else from :func:`tessera.passes.matmul_config.sm90_config`: the tuned
config of the pass's ``sm90_tiles`` option (filled from ``CompileOptions.sm90_tiles``)
or the heuristic (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float8E4M3FNType,
    Float8E5M2Type,
    Float16Type,
    Float32Type,
    TensorType,
)
from xdsl.ir import Attribute, Operation, SSAValue

from tessera.ir import graph as g
from tessera.ir import target as tt
from tessera.passes.lower_graph_to_tile import (
    LowerGraphToTile,
    Override,
    _FunctionLowering,
    matmul_epilogue,
)
from tessera.passes.matmul_config import (
    MAX_SPLITS,
    NUM_SMS,
    SMEM_BUDGET,
    Sm90Config,
    sm90_config,
    split_k,
)
from tessera.passes.sm90 import builders, conv_implicit
from tessera.passes.sm90.asm import TargetAsm
from tessera.passes.sm90.constants import (
    BOX_MN,
    GEMM_REGISTERS,
    MBARRIER_BYTES,
    SWIZZLE_BYTES,
    WARPGROUP_THREADS,
    WGMMA_M,
    desc_hi,
)
from tessera.passes.sm90.conv import lower_conv2d_sm90
from tessera.passes.sm90.conv_implicit import ConvGather
from tessera.passes.sm90.epilogue import EpilogueEmitter, Sm90Epilogue
from tessera.passes.sm90.gemm_store import (
    STORES,
    TmaStore,
    c_staging_bytes,
    register_store,
    staged_store_of,
    staged_tile,
)
from tessera.passes.sm90.pad_rows import pad_rows, padded
from tessera.passes.sm90.split_k import reduce_splits, workspace_type
from tessera.passes.sm90.split_tf32 import split_tf32
from tessera.passes.sm90.transpose import transpose_2d
from tessera.passes.tile_builder import KernelEmitter, cdiv
from tessera.passes.tile_gemm import FMA_GROUP

BOX_K = 64
"""Elements of K per stage for 16-bit operands: one 128-byte swizzle row (fp8: 128)."""
BOX_BYTES = BOX_MN * SWIZZLE_BYTES
"""One box of 64 rows of 128 bytes (8 KiB): ``64 x 64`` 16-bit, ``64 x 128`` fp8 or
``64 x 32`` f32 elements."""
FP8 = ("e4m3", "e5m2")
TF32 = ("tf32", "3xtf32")
"""The f32 products on tf32 wgmmas: one TF32 product (``CompileOptions.allow_tf32``), or
the error-compensated 3xTF32 one (full f32 accuracy, the default)."""


# --------------------------------------------------------------------------- eligibility


def _elem_bytes(t: Attribute) -> int:
    return 4 if isinstance(t, Float32Type) else 2


def eligible(op: g.MatmulOp | g.MatmulEpilogueOp) -> str | None:
    """None if ``op``'s product can use the sm90 kernel, else why not."""
    et, bt = g.elem_of(op.lhs), g.elem_of(op.rhs)
    fp8 = isinstance(et, Float8E4M3FNType | Float8E5M2Type)
    f32 = isinstance(et, Float32Type)
    if fp8:
        if not isinstance(bt, Float8E4M3FNType | Float8E5M2Type):
            return "an fp8 operand times a non-fp8 one"
    elif f32:
        if not isinstance(bt, Float32Type):
            return "an f32 operand times a non-f32 one"
    elif not isinstance(et, BFloat16Type | Float16Type) or bt != et:
        return "operands are not both bf16 or both f16"
    rt = g.elem_of(_product_type(op))
    if not isinstance(rt, BFloat16Type | Float16Type | Float32Type):
        return f"result type {rt}"
    prob = _problem(op)
    if isinstance(prob, str):
        return prob
    if min(prob.m, prob.n, prob.k) < 1:
        return "empty dimension"
    # Any row length: an operand whose stored rows are no 16-byte multiple (TMA row
    # strides) is read from a zero-padded copy (pad_rows; f32 and fp8 operands from their
    # K-major copies, padded there), and a result with N % 8 != 0 is stored from registers
    # (st.global) instead of by TMA.
    box_k = SWIZZLE_BYTES // (4 if f32 else 1 if fp8 else 2)
    if fp8 and prob.batch > 1 and (op.transpose_lhs is not None or op.transpose_rhs is None):
        return "batched fp8 operands must both be K-major (A row-major, B stored N x K)"
    if prob.batch > 1 and f32:
        if prob.m % 64:
            return f"batched operands need M a multiple of 64 (M = {prob.m})"
    elif prob.batch > 1 and prob.m % 64:
        return f"batched operands need M a multiple of 64 (M = {prob.m})"
    elif prob.batch > 1 and (op.transpose_lhs is not None or op.transpose_rhs is None) and (
            prob.k % box_k):
        # an MN-major operand's rows are K: a K tail would read the next batch's rows
        return (f"batched operands with an MN-major operand need K a multiple of {box_k} "
                f"(K = {prob.k})")
    return None


def staging(op: g.MatmulOp | g.MatmulEpilogueOp) -> list[str]:
    """How an eligible matmul reaches the kernel beyond reading its operands as they are
    (empty for aligned bf16/f16 operands and N % 8 == 0): ``"pad A"`` / ``"pad B"`` (a
    zero-padded copy, :mod:`~tessera.passes.sm90.pad_rows`), ``"K-major copy A/B"``
    (fp8 and f32 operands the kernel reads K-major only), ``"st.global C"`` (a result
    with N % 8 != 0, or f32, stored from registers instead of by TMA)."""
    prob = _problem(op)
    assert isinstance(prob, _Problem), prob
    et = g.elem_of(op.lhs)
    out: list[str] = []
    if isinstance(et, Float32Type | Float8E4M3FNType | Float8E5M2Type):
        unit = 4 if isinstance(et, Float32Type) else 16
        for name, kmaj in (("A", op.transpose_lhs is None), ("B", op.transpose_rhs is not None)):
            if isinstance(et, Float32Type) or not kmaj:
                out.append(f"K-major copy {name}")
            elif prob.k % unit:
                out.append(f"pad {name}")
    else:
        for name, operand in (("A", op.lhs), ("B", op.rhs)):
            if g.shape_of(operand)[-1] % 8:
                out.append(f"pad {name}")
    rt = g.elem_of(op.result) if isinstance(op, g.MatmulEpilogueOp) else g.elem_of(
        _product_type(op))
    if isinstance(rt, Float32Type) or prob.n % 8:
        out.append("st.global C")
    return out


@dataclass(frozen=True)
class _Problem:
    """The sizes of a matmul as the kernel sees them."""

    m: int
    n: int
    k: int
    batch: int = 1
    a_batched: bool = True
    b_batched: bool = True


def _problem(op: g.MatmulOp | g.MatmulEpilogueOp) -> _Problem | str:
    """M, N, K and the batch of ``op``, or why the kernel cannot take its operands.

    A row-major A with batch dims times a 2-D B folds the batch into M (one product);
    otherwise the batch dims of A and B must be equal, or one operand 2-D (broadcast).
    """
    ash, bsh = g.shape_of(op.lhs), g.shape_of(op.rhs)
    ta, tb = op.transpose_lhs is not None, op.transpose_rhs is not None
    if len(ash) < 2 or len(bsh) < 2:
        return "operands of rank < 2"
    m, k = (ash[-1], ash[-2]) if ta else (ash[-2], ash[-1])
    n = bsh[-2] if tb else bsh[-1]
    if len(bsh) == 2 and not ta:
        return _Problem(math.prod(ash[:-1]), n, k)
    abatch, bbatch = tuple(ash[:-2]), tuple(bsh[:-2])
    if abatch and bbatch and abatch != bbatch:
        return f"batch dims {list(abatch)} and {list(bbatch)} differ (broadcast batch)"
    batch = math.prod(abatch or bbatch)
    return _Problem(m, n, k, batch, bool(abatch), bool(bbatch))


# --------------------------------------------------------------------------- the kernel


@dataclass(frozen=True)
class Sm90Gemm:
    """One specialized kernel: sizes, element types and configuration."""

    m: int
    n: int
    k: int
    in_type: str
    """"bf16", "f16", "e4m3" or "e5m2" (A's; B's is ``b_type`` for fp8), or for f32
    operands "tf32" (one TF32 product) or "3xtf32" (A and B are ``[2, rows, K]`` hi/lo
    copies, :mod:`tessera.passes.sm90.split_tf32`)."""
    out_type: str  # "bf16", "f16" or "f32"
    cfg: Sm90Config
    sms: int = NUM_SMS
    """CTAs of the persistent grid: the device's SM count (any value is correct)."""
    a_t: bool = False
    """A is stored transposed (``K x M`` row-major): its tiles are read M-major."""
    b_t: bool = False
    """B is stored transposed (``N x K`` row-major, ``nn.Linear``'s weight): read K-major."""
    batch: int = 1
    """Independent products ``C[b] = A[b] @ B[b]``: the operands and C are seen as 2-D
    ``[batch * rows, cols]`` tensor maps, so a tile must not straddle two batches: M is a
    multiple of BM and K of 64 (:func:`eligible` checks)."""
    a_batched: bool = True
    """A has the batch dim (else one A is broadcast to every batch)."""
    b_batched: bool = True
    """B has the batch dim (else one B is broadcast to every batch)."""
    b_type: str | None = None
    """B's element type when it differs from A's (e4m3 times e5m2)."""
    epilogue: Sm90Epilogue | None = None
    """Bias add and activation applied to the accumulators before the store (the kernel
    then takes the bias pointer as a fourth parameter when there is one)."""
    overlap: bool = False
    """Promoting kernels (fp8, 3xTF32) with two accumulator sets used by turns: a stage's
    wgmmas run while the previous stage's product is added into the f32 totals (instead
    of waiting for each stage's wgmmas before adding)."""
    splits: int = 1
    """Split-K: K is cut into ``splits`` ranges of :attr:`split_ktiles` stages; work unit
    ``u`` computes range ``u // tiles`` of tile ``u % tiles`` and stores its f32 partial
    product at rows ``range * M`` of C, a ``[splits * M, N]`` f32 workspace that
    :func:`~tessera.passes.sm90.split_k.reduce_splits` sums in range order."""
    gather: ConvGather | None = None
    """A convolution as an implicit GEMM (:mod:`tessera.passes.sm90.conv_implicit`): the
    producer warpgroup gathers A from a channels-last input pointer (``cp.async``) and
    the consumers store C as NCHW from registers."""
    store: str = "staged"
    """How a result that TMA does not store (:attr:`tma_store` false: f32 results, split-K
    partials, N % 8 != 0) leaves: ``"staged"`` through shared memory, coalesced
    (:mod:`tessera.passes.sm90.staged_store`), or ``"registers"``, ``st.global`` from the
    accumulator registers (``CompileOptions.sm90_store``; same bits either way)."""

    def __post_init__(self) -> None:
        mn_major = self.a_t or not self.b_t
        if self.store not in STORES:
            raise ValueError(f"lower-matmul-sm90: store must be one of {', '.join(STORES)}, "
                             f"got {self.store!r}")
        if self.splits > 1 and (self.batch > 1 or self.out_type != "f32"
                                or self.epilogue is not None
                                or self.splits * self.m * self.n >= 1 << 31):
            raise ValueError("lower-matmul-sm90: split-K stores f32 partial products of an "
                             "unbatched product without epilogue (workspace below 2^31 "
                             "elements)")
        if self.splits > 1 and cdiv(self.ktiles, self.split_ktiles) != self.splits:
            raise ValueError(f"lower-matmul-sm90: {self.splits} K ranges of "
                             f"{self.split_ktiles} stages leave one empty ({self.ktiles} "
                             "stages)")
        if self.batch > 1 and (self.m % self.bm or mn_major and self.k % self.box_k):
            raise ValueError(
                f"lower-matmul-sm90: a batched product needs M a multiple of BM = {self.bm} "
                f"and, with an MN-major operand, K a multiple of {self.box_k}, got "
                f"M = {self.m}, K = {self.k}"
            )
        if self.overlap and not self.promotes:
            raise ValueError("lower-matmul-sm90: two accumulator sets are for kernels that "
                             "promote (fp8, 3xTF32)")
        if self.promotes and self.cfg.bn > 128:
            raise ValueError("lower-matmul-sm90: tiles that promote (fp8, 3xTF32) are at "
                             "most 128 wide (the accumulators and their f32 totals share "
                             "the registers)")
        if (self.fp8 or self.tf32) and mn_major:
            raise ValueError(f"lower-matmul-sm90: {self.in_type} operands must both be "
                             "K-major (A row-major, B stored N x K)")
        if not self.cfg.valid(self.copies, self.staging_bytes):
            raise ValueError(
                f"lower-matmul-sm90: {self.cfg} is not a valid sm90 configuration (BN in "
                f"64/128/192/256, 1 or 2 consumers and clusters, stages and the output tile "
                f"within {SMEM_BUDGET} bytes of shared memory; needs "
                f"{self.cfg.smem_bytes(self.copies, self.staging_bytes)})"
            )

    @property
    def bm(self) -> int:
        return 64 * self.cfg.consumers

    @property
    def ktiles(self) -> int:
        """K stages of the whole product."""
        return cdiv(self.k, self.box_k)

    @property
    def split_ktiles(self) -> int:
        """K stages of one split-K range (the last may be shorter)."""
        return cdiv(self.ktiles, self.splits)

    @property
    def cluster(self) -> int:
        """CTAs per cluster: ``cfg.cluster`` when the tile rows pair up evenly, else 1."""
        c = self.cfg.cluster
        return c if cdiv(self.m, self.bm) % c == 0 else 1

    @property
    def fp8(self) -> bool:
        return self.in_type in FP8

    @property
    def tf32(self) -> bool:
        return self.in_type in TF32

    @property
    def copies(self) -> int:
        """Operand copies per stage: 2 for 3xTF32 (hi and lo), else 1."""
        return 2 if self.in_type == "3xtf32" else 1

    @property
    def promotes(self) -> bool:
        """Each stage's product is added into f32 totals with ``add.rn.f32`` (fp8 and
        3xTF32): the tensor cores' own accumulation does not round to nearest, and over
        all of K it costs 3xTF32 ~90x its error (2.9e-5 against 3.2e-7 normwise at
        K = 4096; docs/perf/2026-11-24-h100-f32-gemm.txt)."""
        return self.fp8 or self.copies == 2

    @property
    def elem_bytes(self) -> int:
        return 1 if self.fp8 else 4 if self.tf32 else 2

    @property
    def box_k(self) -> int:
        """Elements of K per stage: one 128-byte swizzle row."""
        return SWIZZLE_BYTES // self.elem_bytes

    @property
    def mma_k(self) -> int:
        """K of one wgmma: 16 for 16-bit operands, 32 for fp8, 8 for tf32 (32 bytes)."""
        return 32 // self.elem_bytes

    @property
    def mma_type(self) -> str:
        """The wgmma's operand types (``A.B``)."""
        if self.tf32:
            return "tf32.tf32"
        return f"{self.in_type}.{self.b_type or self.in_type}"

    @property
    def a_bytes(self) -> int:
        return self.bm * SWIZZLE_BYTES * self.copies

    @property
    def b_bytes(self) -> int:
        return self.cfg.bn * SWIZZLE_BYTES * self.copies

    @property
    def a_rows(self) -> int:
        """Rows of A's 2-D (K-major) view: its lo copy starts there (3xTF32)."""
        return self.m * (self.batch if self.a_batched else 1)

    @property
    def b_rows(self) -> int:
        """Rows of B's 2-D (K-major) view: its lo copy starts there (3xTF32)."""
        return self.n * (self.batch if self.b_batched else 1)

    @property
    def tma_store(self) -> bool:
        """16-bit results with N a multiple of 8 (16-byte rows, the TMA row-stride unit)
        leave through shared memory and TMA stores; f32 ones and those of other N through
        ``st.global`` from registers."""
        return self.out_type != "f32" and self.n % 8 == 0 and self.gather is None

    @property
    def c_store(self) -> str:
        """How C leaves: ``"tma"`` (:class:`~tessera.passes.sm90.gemm_store.TmaStore`), ``"staged"``
        (:class:`~tessera.passes.sm90.staged_store.StagedStore`), ``"registers"``
        (:func:`~tessera.passes.sm90.gemm_store.register_store`) or ``"nchw"`` (a convolution's
        :func:`~tessera.passes.sm90.conv_implicit.nchw_epilogue`)."""
        if self.gather is not None:
            return "nchw"
        return "tma" if self.tma_store else self.store

    @property
    def staging_bytes(self) -> int:
        """Shared memory of the output's staging: the ``BM x BN`` tile of the TMA store,
        the staged store's chunk buffers, or none."""
        return c_staging_bytes(self.cfg, self.c_store, self.out_type)

    @property
    def c_offset(self) -> int:
        """Shared-memory offset of the output staging tile (after the stages)."""
        return self.cfg.stages * (self.a_bytes + self.b_bytes)

    @property
    def bars_offset(self) -> int:
        return self.c_offset + self.staging_bytes

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: the stages, the output staging tile (or the staged
        store's buffers), 2 mbarriers per stage, 1 KiB for alignment."""
        return self.bars_offset + 16 * self.cfg.stages + 1024

    @property
    def threads(self) -> int:
        return 128 * (1 + self.cfg.consumers)

    @property
    def tiles(self) -> int:
        return self.batch * cdiv(self.m, self.bm) * cdiv(self.n, self.cfg.bn)

    def grid(self) -> tuple[int, int, int]:
        """Persistent: one CTA per SM (at most one per tile), whole clusters; each CTA loops
        over tiles."""
        c = self.cluster
        return (c * min(self.tiles * self.splits // c, max(1, self.sms // c)), 1, 1)

    def boxes(self) -> list[int]:
        """``ttarget.launch_ex`` boxes (inner, outer) for (C, A, B): C ``64 x 64`` (a tensor
        map for the TMA store; by pointer for f32); A ``64 (K) x BM`` row-major, or
        ``64 (M) x 64 (K)`` boxes when stored transposed; B ``64 x 64`` boxes either way
        (N x K rows when row-major, K x N when transposed)."""
        c = [BOX_MN, BOX_MN] if self.tma_store else [0, 0]
        a = [BOX_MN, BOX_K] if self.a_t else [self.box_k, self.bm]
        if self.gather is not None:  # A by pointer
            a = [0, 0]
        b = [self.box_k, BOX_MN] if self.b_t else [BOX_MN, BOX_K]
        return [*c, *a, *b, *[0, 0] * self.pointers]

    @property
    def pointers(self) -> int:
        """Pointer parameters after C, A and B: the convolution's bias, or the fused
        epilogue's bias and residual."""
        if self.gather is not None:
            return int(self.gather.bias)
        return self.epilogue.pointers if self.epilogue is not None else 0


def build_kernel(name: str, gemm: Sm90Gemm) -> tt.FuncOp:
    """The ``ttarget.func`` computing ``C = A @ B`` for ``gemm`` (parameters: C pointer,
    A tensor map, B tensor map)."""
    cfg = gemm.cfg
    bm, bn, stages, cl = gemm.bm, cfg.bn, cfg.stages, gemm.cluster
    gather = gemm.gather
    func = tt.FuncOp(
        name, ["tmap" if gemm.tma_store else "u64", "u64" if gather else "tmap", "tmap"]
        + (["u64"] * gemm.pointers),
        gemm.threads, cluster=cl if cl > 1 else None, minnctapersm=1,
    )
    c_param, a_param, b_param, *ptr_params = func.block.args
    bias_param = ptr_params[:1] if gemm.gather is not None else []
    e = TargetAsm(func)
    end = "DONE"

    tid, bid, sbase = builders.shared_base(e)
    full0 = e.add32(sbase, gemm.bars_offset)
    empty0 = e.add32(sbase, gemm.bars_offset + MBARRIER_BYTES * stages)

    def barriers():
        for s in range(stages):
            # gathering: thread 0's expect_tx and each producer thread's arrive
            yield e.add32(full0, MBARRIER_BYTES * s), 1 + WARPGROUP_THREADS * bool(gather)
            # a slot is free once every consumer warpgroup of every CTA it is multicast to
            # has read it
            yield e.add32(empty0, MBARRIER_BYTES * s), cfg.consumers * cl

    # with clusters, the peer's barriers are initialized before any multicast or remote
    # arrive
    builders.init_barriers(e, tid, barriers(), cluster=cl > 1)

    # work units: one tile per CTA of a cluster (vertically adjacent tiles sharing B)
    if cl > 1:
        unit0 = e.bin(tt.ShrOp, "u32", bid, cl.bit_length() - 1)
        nunits = e.bin(tt.ShrOp, "u32", e.sreg("nctaid.x"), cl.bit_length() - 1)
        rank = e.sreg("cluster_ctarank")
    else:
        unit0, nunits, rank = bid, e.sreg("nctaid.x"), None
    tunits = gemm.tiles // cl
    units = tunits * gemm.splits
    ktiles = gemm.ktiles

    def k_range(unit: SSAValue) -> tuple[SSAValue, SSAValue | int, SSAValue | int]:
        """(tile unit, first K stage, end K stage) of work unit ``unit``: split-K range
        ``unit // tunits`` of tile unit ``unit % tunits``; all of K without split-K."""
        if gemm.splits == 1:
            return unit, 0, ktiles
        split = e.bin(tt.DivOp, "u32", unit, tunits)
        kbeg = e.mul32(split, gemm.split_ktiles)
        kend = e.bin(tt.MinOp, "u32", e.add32(kbeg, gemm.split_ktiles), ktiles)
        return e.bin(tt.RemOp, "u32", unit, tunits), kbeg, kend

    def tile_origin(unit: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue | None]:
        """(m0, n0, batch index) of this CTA's tile in work unit ``unit``; the units of a
        batch go in groups of ``group_m`` tile rows (the batch index is None unbatched)."""
        rows, tiles_n = cdiv(gemm.m, bm) // cl, cdiv(gemm.n, bn)
        bidx = None
        if gemm.batch > 1:
            bidx = e.bin(tt.DivOp, "u32", unit, rows * tiles_n)
            unit = e.bin(tt.RemOp, "u32", unit, rows * tiles_n)
        group = max(1, cfg.group_m // cl)
        per_group = group * tiles_n
        first_m = e.mul32(e.bin(tt.DivOp, "u32", unit, per_group), group)
        gsize = e.bin(tt.MinOp, "u32", e.bin(tt.SubOp, "u32", rows, first_m), group)
        r = e.bin(tt.RemOp, "u32", unit, per_group)
        pid_m = e.add32(first_m, e.bin(tt.RemOp, "u32", r, gsize))
        pid_n = e.bin(tt.DivOp, "u32", r, gsize)
        if rank is not None:
            pid_m = e.mad32(pid_m, cl, rank)
        return e.mul32(pid_m, bm), e.mul32(pid_n, bn), bidx

    def batch_rows(bidx: SSAValue | None, rows: int, on: bool) -> SSAValue | None:
        """The first row of batch ``bidx`` in a 2-D view with ``rows`` rows per batch (None
        when unbatched or broadcast)."""
        return e.mul32(bidx, rows) if bidx is not None and on else None

    def plus(a: SSAValue, b: SSAValue | None) -> SSAValue:
        return a if b is None else e.add32(a, b)

    wg, consumer = builders.split_warpgroups(e, tid)

    # ---------------------------------------------------------------- producer
    if gather is not None:
        conv_implicit.produce(e, gemm, a_param, b_param, sbase, tid, full0, empty0, unit0,
                              nunits, units, tile_origin, k_range, end)
    else:
        _tma_producer(e, gemm, a_param, b_param, sbase, tid, full0, empty0, unit0, nunits,
                      units, rank, tile_origin, k_range, batch_rows, plus, end)

    # ---------------------------------------------------------------- consumers
    e.add(tt.LabelOp(consumer))
    budget = conv_implicit.CONV_REGISTERS if gather is not None else GEMM_REGISTERS
    builders.enter_consumer(e, budget)
    cw = e.bin(tt.SubOp, "u32", wg, 1)
    acc = [e.reg("f32") for _ in range(bn // 2)]
    # fp8: the tensor cores keep fp8 partial sums at reduced precision; 3xTF32: they do not
    # round to nearest. Each stage's product (a 128-byte row of K) starts afresh and is
    # added into f32 totals (``promote``)
    promote = gemm.promotes
    tot = [e.reg("f32") for _ in range(bn // 2)] if promote else acc
    # K-major tiles: 128-byte rows of K, 8-row groups 1 KiB apart; a k16 step is 32 bytes.
    # MN-major tiles: 64-element boxes of M or N 8 KiB apart, 8 K-rows 1 KiB apart; a k16
    # step is 16 rows of 128 bytes.
    k_major, mn_major = desc_hi(16, 8 * SWIZZLE_BYTES), desc_hi(BOX_BYTES, 8 * SWIZZLE_BYTES)
    k_step, mn_step = (16 * 2) >> 4, (16 * SWIZZLE_BYTES) >> 4
    a_desc0 = e.desc(
        e.mad32(cw, WGMMA_M * SWIZZLE_BYTES, sbase), mn_major if gemm.a_t else k_major
    )
    b_desc0 = e.desc(e.add32(sbase, stages * gemm.a_bytes), k_major if gemm.b_t else mn_major)
    a_step, b_step = (mn_step if gemm.a_t else k_step), (k_step if gemm.b_t else mn_step)
    always = e.setp("eq", tid, tid)
    leader = e.setp("eq", e.bin(tt.AndOp, "b32", tid, WARPGROUP_THREADS - 1), 0)
    fused = None
    if gemm.epilogue is not None:
        fused = EpilogueEmitter(
            e, gemm.epilogue, gemm.m, gemm.n, ptr_params, gemm.m % bm != 0, gemm.n % bn != 0,
        )
    store = TmaStore(e, gemm, c_param, sbase, tid, cw, leader, fused) if gemm.tma_store else None
    staged = staged_store_of(e, gemm, c_param, sbase, tid, cw) if gemm.c_store == "staged" else None
    kt, stage, phase, prev, tile = (e.reg("b32") for _ in range(5))
    for v in (stage, phase, prev):
        e.mov("u32", v, 0)
    e.mov("u32", tile, unit0)
    mma = f"m64n{bn}k{gemm.mma_k}.f32.{gemm.mma_type}"

    def release(slot: SSAValue, guard: SSAValue) -> None:
        """The warpgroup leader frees ``slot`` in every CTA that shares it."""
        bar = builders.slot_barrier(e, slot, empty0)
        if cl == 1:
            e.add(tt.MbarrierArriveOp(bar, guard=guard))
            return
        for r in range(cl):
            remote = e.reg("b32")
            e.add(tt.MapaOp(remote, bar, e.imm(r)))
            e.add(tt.MbarrierArriveOp(remote, guard=guard, cluster=True))

    tile_loop = e.label("CONSUME_TILE")
    e.add(tt.LabelOp(tile_loop))
    tunit, kbeg, kend = k_range(tile)
    m0, n0, bidx = tile_origin(tunit)
    if bidx is not None:  # C's rows of this batch (M is a multiple of BM)
        m0 = e.mad32(bidx, gemm.m, m0)
    # split-K: this range's partial product goes to rows (tile // tunits) * M of C
    c_rows = e.mul32(e.bin(tt.DivOp, "u32", tile, tunits), gemm.m) if gemm.splits > 1 else None
    e.mov("u32", kt, kbeg)
    if promote:
        for r in tot:
            e.add(tt.MovOp("f32", r, e.fimm(0.0)))
    loop = e.label("CONSUME")
    e.add(tt.LabelOp(loop))

    def issue_stage(into: Sequence[SSAValue], accumulate: SSAValue) -> None:
        """Wait for the current slot and issue its wgmmas into ``into`` (committed as one
        group); the first one overwrites the accumulators unless ``accumulate``."""
        e.wait(builders.slot_barrier(e, stage, full0), phase)
        s64 = builders.stage_index64(e, stage)
        da, db = e.reg("b64"), e.reg("b64")
        builders.stage_descriptor(e, s64, gemm.a_bytes, a_desc0, da)
        builders.stage_descriptor(e, s64, gemm.b_bytes, b_desc0, db)
        e.add(tt.FenceOp("wgmma"))
        for kk in range(gemm.box_k // gemm.mma_k):
            dak, dbk = da, db
            if kk:
                dak = e.bin(tt.AddOp, "u64", da, kk * a_step, "b64")
                dbk = e.bin(tt.AddOp, "u64", db, kk * b_step, "b64")
            pairs = [(dak, dbk)]
            if gemm.copies == 2:  # 3xTF32: A_lo B_hi + A_hi B_lo + A_hi B_hi (small first)
                dal = e.bin(tt.AddOp, "u64", dak, (gemm.a_bytes // 2) >> 4, "b64")
                dbl = e.bin(tt.AddOp, "u64", dbk, (gemm.b_bytes // 2) >> 4, "b64")
                pairs = [(dal, dbk), (dak, dbl), (dak, dbk)]
            for i, (x, y) in enumerate(pairs):
                e.add(tt.WgmmaOp(mma, list(into), x, y,
                                 accumulate if kk == 0 and i == 0 else always,
                                 trans_a=int(gemm.a_t), trans_b=int(not gemm.b_t)))
        e.add(tt.FenceOp("wgmma_commit"))

    def add_totals(part: Sequence[SSAValue]) -> None:
        for t_reg, a_reg in zip(tot, part):
            e.add(tt.AddOp("rn.f32", t_reg, t_reg, a_reg))

    never = e.setp("ne", tid, tid) if promote else always
    if gemm.overlap:
        # two accumulator sets by turns: stage j's wgmmas (set j % 2) run while stage
        # j - 1's product (the other set) is added into the totals and its slot freed
        sets = (acc, [e.reg("f32") for _ in range(bn // 2)])
        tail_a, done = e.label("TAIL_A"), e.label("STAGES_DONE")
        for half in (0, 1):
            issue_stage(sets[half], never)
            e.add(tt.WgmmaWaitOp(1))  # the previous stage's group has completed
            first = e.label("FIRST_STAGE")
            if half == 0:
                e.add(tt.BraOp(first, e.setp("eq", kt, kbeg)))
            add_totals(sets[1 - half])
            release(prev, leader)
            if half == 0:
                e.add(tt.LabelOp(first))
            e.mov("u32", prev, stage)
            e.add(tt.AddOp("u32", kt, kt, e.imm(1)))
            e.advance(stage, phase, stages)
            if half == 0:
                e.add(tt.BraOp(tail_a, e.setp("ge", kt, kend)))
            else:
                e.add(tt.BraOp(loop, e.setp("lt", kt, kend)))
        for pending, label in ((sets[1], None), (sets[0], tail_a)):
            if label is not None:
                e.add(tt.LabelOp(label))
            e.add(tt.WgmmaWaitOp(0))
            add_totals(pending)
            release(prev, leader)
            if label is None:
                e.add(tt.BraOp(done))
        e.add(tt.LabelOp(done))
    else:
        # the tile's (with promote: each stage's) first wgmma overwrites the accumulators
        issue_stage(acc, never if promote else e.setp("ne", kt, kbeg))
    if gemm.overlap:
        pass  # the stages and the totals are done
    elif promote:  # this stage's product is complete: add it to the totals, free the slot
        e.add(tt.WgmmaWaitOp(0))
        add_totals(acc)
        release(stage, leader)
    else:
        e.add(tt.WgmmaWaitOp(1))
        frees = e.reg("pred")
        e.add(tt.AndOp("pred", frees, leader, e.setp("ne", kt, kbeg)))
        release(prev, frees)
        e.mov("u32", prev, stage)
    if not gemm.overlap:
        e.add(tt.AddOp("u32", kt, kt, e.imm(1)))
        e.advance(stage, phase, stages)
        e.add(tt.BraOp(loop, e.setp("lt", kt, kend)))
    if not promote:
        e.add(tt.WgmmaWaitOp(0))
        # the tile's last slot is free: the producer refills it for the next tile during
        # the epilogue
        release(prev, leader)
    if store is not None:
        store.tile(m0, n0, tot)
    elif staged is not None:
        staged_tile(e, staged, tid, cw, m0, n0, tot, fused, c_rows)
    elif gather is not None:
        conv_implicit.nchw_epilogue(e, gemm, c_param, bias_param[0] if bias_param else None,
                                    tid, cw, m0, n0, tot, c_rows)
    else:
        register_store(e, gemm, c_param, tid, cw, m0, n0, tot, fused, c_rows)
    e.add(tt.AddOp("u32", tile, tile, nunits))
    e.add(tt.BraOp(tile_loop, e.setp("lt", tile, units)))
    if store is not None:  # the last tile's stores have completed before the CTA exits
        e.add(tt.BulkWaitOp(0))
    e.add(tt.LabelOp(end))
    if cl > 1:  # no CTA exits while its peer may still multicast into it or arrive on it
        builders.cluster_sync(e)
    e.add(tt.RetOp())
    return func


def _tma_producer(
    e: TargetAsm, gemm: Sm90Gemm, a_param: SSAValue, b_param: SSAValue, sbase: SSAValue,
    tid: SSAValue, full0: SSAValue, empty0: SSAValue, unit0: SSAValue, nunits: SSAValue,
    units: int, rank: SSAValue | None,
    tile_origin: Callable[[SSAValue], tuple[SSAValue, SSAValue, SSAValue | None]],
    k_range: Callable[[SSAValue], tuple[SSAValue, SSAValue | int, SSAValue | int]],
    batch_rows: Callable[[SSAValue | None, int, bool], SSAValue | None],
    plus: Callable[[SSAValue, SSAValue | None], SSAValue], end: str,
) -> None:
    """The TMA producer: its thread 0 loads A's and B's boxes of every K-step of the CTA's
    work units (a tile, or with split-K one K range of a tile: ``k_range``); the
    warpgroup's other threads leave (to ``end``)."""
    cfg = gemm.cfg
    bn, stages, cl = cfg.bn, cfg.stages, gemm.cluster
    builders.enter_producer(e, tid, end, GEMM_REGISTERS)
    tmap_a, tmap_b = e.reg("b64"), e.reg("b64")
    for reg, param in ((tmap_a, a_param), (tmap_b, b_param)):
        builders.tensor_map(e, param, reg)
    kt, stage, phase, issued, tile = (e.reg("b32") for _ in range(5))
    for v in (stage, phase, issued):
        e.mov("u32", v, 0)
    e.mov("u32", tile, unit0)
    tx = e.imm(gemm.a_bytes + gemm.b_bytes)
    boxes_b = bn // BOX_MN
    mine = boxes_b // cl  # B boxes this CTA loads (and multicasts when cl > 1)
    mask = e.imm((1 << cl) - 1) if cl > 1 else None
    tile_loop = e.label("PRODUCE_TILE")
    e.add(tt.LabelOp(tile_loop))
    tunit, kbeg, kend = k_range(tile)
    m0, n0, bidx = tile_origin(tunit)
    # row offsets of this tile's batch in the operands' 2-D views
    a_rows = batch_rows(bidx, gemm.k if gemm.a_t else gemm.m, gemm.a_batched)
    b_rows = batch_rows(bidx, gemm.n if gemm.b_t else gemm.k, gemm.b_batched)
    e.mov("u32", kt, kbeg)
    loop = e.label("PRODUCE")
    e.add(tt.LabelOp(loop))
    builders.wait_slot_free(e, stage, phase, empty0, e.setp("lt", issued, stages))
    full = builders.slot_barrier(e, stage, full0)
    e.add(tt.MbarrierArriveOp(full, tx))
    k0 = e.mul32(kt, gemm.box_k)
    a_dst = e.mad32(stage, gemm.a_bytes, sbase)
    if gemm.a_t:  # one 64 (M) x 64 (K) box per consumer warpgroup
        ka = plus(k0, a_rows)
        for j in range(cfg.consumers):
            dst = e.add32(a_dst, j * BOX_BYTES) if j else a_dst
            row = e.add32(m0, j * BOX_MN) if j else m0
            e.add(tt.CpAsyncBulkTensorOp(dst, tmap_a, row, ka, full))
    else:
        arow = plus(m0, a_rows)
        e.add(tt.CpAsyncBulkTensorOp(a_dst, tmap_a, k0, arow, full))
        if gemm.copies == 2:  # A's lo copy: rows a_rows.. of the view, after hi in the slot
            e.add(tt.CpAsyncBulkTensorOp(e.add32(a_dst, gemm.a_bytes // 2), tmap_a, k0,
                                         e.add32(arow, gemm.a_rows), full))
    b_dst = e.mad32(stage, gemm.b_bytes, e.add32(sbase, stages * gemm.a_bytes))
    first_box = 0
    if rank is not None:  # rank r loads boxes [r * mine, (r + 1) * mine)
        first_box = e.mul32(rank, mine)
        b_dst = e.mad32(first_box, BOX_BYTES, b_dst)
        n0 = e.mad32(first_box, BOX_MN, n0)
    # B's rows are N (stored transposed) or K: the batch offset goes on that coordinate
    nb, kb = (plus(n0, b_rows), k0) if gemm.b_t else (n0, plus(k0, b_rows))
    for j in range(mine):
        dst = e.add32(b_dst, j * BOX_BYTES) if j else b_dst
        col = e.add32(nb, j * BOX_MN) if j else nb
        inner, outer = (k0, col) if gemm.b_t else (col, kb)
        e.add(tt.CpAsyncBulkTensorOp(dst, tmap_b, inner, outer, full, mask=mask))
        if gemm.copies == 2:  # B's lo copy (K-major): rows b_rows.. of the view
            e.add(tt.CpAsyncBulkTensorOp(e.add32(dst, gemm.b_bytes // 2), tmap_b, k0,
                                         e.add32(col, gemm.b_rows), full, mask=mask))
    e.add(tt.AddOp("u32", kt, kt, e.imm(1)))
    e.add(tt.AddOp("u32", issued, issued, e.imm(1)))
    e.advance(stage, phase, stages)
    e.add(tt.BraOp(loop, e.setp("lt", kt, kend)))
    e.add(tt.AddOp("u32", tile, tile, nunits))
    e.add(tt.BraOp(tile_loop, e.setp("lt", tile, units)))
    e.add(tt.BraOp(end))


# --------------------------------------------------------------------------- lowering


_TYPE_NAMES = {
    BFloat16Type: "bf16", Float16Type: "f16", Float32Type: "f32", Float8E4M3FNType: "e4m3",
    Float8E5M2Type: "e5m2",
}


def _product_type(op: g.MatmulOp | g.MatmulEpilogueOp) -> TensorType:
    """The type the kernel stores: the result, or a fused epilogue's product type."""
    t = op.product_type if isinstance(op, g.MatmulEpilogueOp) else op.result.type
    assert isinstance(t, TensorType)
    return t


def gemm_for(
    op: g.MatmulOp | g.MatmulEpilogueOp, tiles: Sequence[str] = (), allow_tf32: bool = False,
    store: str = "staged",
) -> Sm90Gemm:
    """The kernel specialization for an eligible matmul (tile_shape, a tuned config of
    ``tiles`` or the heuristic); f32 operands take the ``tf32`` kernel when ``allow_tf32``,
    else the ``3xtf32`` one; results TMA does not store leave as ``store`` says
    (:data:`STORES`)."""
    prob = _problem(op)
    assert isinstance(prob, _Problem), prob
    ta, tb = op.transpose_lhs is not None, op.transpose_rhs is not None
    cfg = None
    if op.tile_shape is not None:
        cfg = Sm90Config.from_tile_shape(tuple(op.tile_shape.get_values()))
    in_type = _TYPE_NAMES[type(g.elem_of(op.lhs))]
    out_type = _TYPE_NAMES[type(g.elem_of(_product_type(op)))]
    if in_type == "f32":
        in_type = "tf32" if allow_tf32 else "3xtf32"
    if cfg is None:
        cfg = sm90_config(prob.m * prob.batch, prob.n, prob.k, in_type, out_type, tiles)
    a_type = in_type
    b_type = _TYPE_NAMES[type(g.elem_of(op.rhs))] if in_type not in TF32 else in_type
    if in_type in TF32:  # read K-major copies (split_tf32) or the K-major operands
        ta, tb = False, True
        cfg = tf32_config(cfg, in_type == "3xtf32", _staging(cfg, out_type, prob.n, store))
    if a_type in FP8:  # the kernel reads K-major copies of MN-major fp8 operands
        ta, tb = False, True
        if cfg.bn > 128:  # accumulators and f32 totals: 2 x BN / 2 registers
            cfg = Sm90Config.from_tile_shape((cfg.bm, 128, 64)) or cfg
    if prob.batch > 1 and prob.m % cfg.bm:  # a tile must not straddle two batches
        cfg = replace(cfg, consumers=1, cluster=1)
    return Sm90Gemm(
        prob.m, prob.n, prob.k, a_type,
        _TYPE_NAMES[type(g.elem_of(_product_type(op)))], cfg, device_sms(), a_t=ta, b_t=tb,
        batch=prob.batch, a_batched=prob.a_batched, b_batched=prob.b_batched,
        b_type=b_type if b_type != a_type else None, store=store,
    )


def _staging(cfg: Sm90Config, out_type: str, n: int, store: str) -> bool | int:
    """The output staging of a kernel with ``cfg`` storing ``n`` columns of ``out_type``
    (``Sm90Config.smem_bytes``'s ``staging``): True for the TMA store's tile, else the
    bytes of ``store``'s buffers."""
    if out_type != "f32" and n % 8 == 0:
        return True
    return c_staging_bytes(cfg, store, out_type)


def tf32_config(cfg: Sm90Config, split: bool, staging: bool | int) -> Sm90Config:
    """``cfg`` adapted to the tf32 kernels: as many stages as fit (at most 5) next to the
    output's ``staging`` (``Sm90Config.smem_bytes``: the TMA store's tile, the staged
    store's buffers, or none); a 3xTF32 stage holds two copies of each operand; promoting
    tiles (3xTF32) are at most 128 wide."""
    copies = 2 if split else 1
    if split and cfg.bn > 128:
        cfg = replace(cfg, bn=128)
    fits = [s for s in range(2, 6) if replace(cfg, stages=s).valid(copies, staging)]
    if not fits:  # a 128-wide tile always fits two stages
        cfg = replace(cfg, bn=128)
        fits = [s for s in range(2, 6) if replace(cfg, stages=s).valid(copies, staging)]
    return replace(cfg, stages=max(fits))


def device_sms() -> int:
    """SMs of the current CUDA device (the persistent grid's size), ``NUM_SMS`` when there is
    none: the kernel is correct for any grid size."""
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)
    except Exception:
        pass
    return NUM_SMS


SPLIT_K_MODES = ("off", "auto")
"""``CompileOptions.split_k``: never split K, the cost rule of
:func:`tessera.passes.matmul_config.split_k`, or (a count ``"N"``) N ranges wherever the
product may split."""


def splits_for(gemm: Sm90Gemm, mode: str = "off", max_splits: int = MAX_SPLITS) -> int:
    """How many split-K ranges ``gemm`` runs in under ``mode`` (see :data:`SPLIT_K_MODES`;
    ``auto`` tries at most ``max_splits``); 1 for batched products, and a count is cut
    down until every range has K."""
    if mode == "off" or gemm.batch > 1:
        return 1
    if mode == "auto":
        out_bytes = 4 if gemm.out_type == "f32" else 2
        s = split_k(gemm.m, gemm.n, gemm.k, gemm.cfg, gemm.in_type, out_bytes, gemm.sms,
                    max_splits=max_splits)
    elif mode.isdigit() and int(mode) >= 1:
        s = int(mode)
    else:
        raise ValueError(f"lower-matmul-sm90: split_k must be off, auto or a count >= 1, got "
                         f"'{mode}'")
    s = min(s, gemm.ktiles)
    s = cdiv(gemm.ktiles, cdiv(gemm.ktiles, s))  # no empty range
    return s if s * gemm.m * gemm.n < 1 << 31 else 1


def lower_matmul_sm90(
    lw: _FunctionLowering, op: g.MatmulOp | g.MatmulEpilogueOp, tiles: Sequence[str] = (),
    allow_tf32: bool = False, split_k: str = "off", store: str = "staged",
) -> bool:
    """Lower ``op`` to the sm90 kernel if it is eligible; False leaves it to the generic path.

    A ``tgraph.matmul_epilogue`` applies its bias add, activation and cast in the kernel's
    epilogue (:mod:`tessera.passes.sm90.epilogue`); a bias broadcast that epilogue does
    not take (a column, a partial batch) splits it: the product goes to a buffer of the
    product type, then one elementwise kernel applies the generic lowering's per-element
    epilogue (the same steps and roundings).

    With split-K (``split_k``, :func:`splits_for`) the kernel stores f32 partial products
    of K ranges in a workspace and :func:`~tessera.passes.sm90.split_k.reduce_splits` adds
    them in order and applies the epilogue.
    """
    if eligible(op) is not None:
        return False
    gemm = gemm_for(op, tiles, allow_tf32, store)
    args = [lw.mem(op.lhs), lw.mem(op.rhs)]
    if gemm.fp8:  # fp8 wgmma reads K-major only: copy an MN-major operand K-major
        kp = padded(gemm.k, 1)  # and pad K to a 16-byte row
        for i, (operand, k_major, rows) in enumerate(
            ((op.lhs, op.transpose_lhs is None, gemm.m), (op.rhs, op.transpose_rhs is not None,
                                                          gemm.n))
        ):
            if not k_major:
                args[i] = transpose_2d(lw, args[i], gemm.k, rows, g.elem_of(operand), kp)
            elif kp != gemm.k:
                args[i] = pad_rows(lw, args[i], g.shape_of(operand), g.elem_of(operand), 1,
                                   f"pad_{'ab'[i]}")
    elif not gemm.tf32:  # bf16/f16 rows of no 16-byte multiple: read zero-padded copies
        for i, operand in enumerate((op.lhs, op.rhs)):
            shape = g.shape_of(operand)
            if shape[-1] % 8:
                args[i] = pad_rows(lw, args[i], shape, g.elem_of(operand), 2, f"pad_{'ab'[i]}")
    if gemm.tf32:  # K-major TF32 copies (hi, or hi and lo); tf32 reads aligned K-major as is
        for i, (operand, k_major) in enumerate(
            ((op.lhs, op.transpose_lhs is None), (op.rhs, op.transpose_rhs is not None))
        ):
            if gemm.copies == 2 or not k_major or gemm.k % 4:
                args[i] = split_tf32(lw, args[i], g.shape_of(operand), not k_major,
                                     gemm.copies)
    splits = splits_for(replace(gemm, out_type="f32"), split_k)
    if splits > 1:
        return _lower_split_k(lw, op, gemm, args, splits)
    split = False
    if isinstance(op, g.MatmulEpilogueOp):
        ep = Sm90Epilogue.of(op, gemm.out_type)
        if isinstance(ep, Sm90Epilogue) and type(g.elem_of(op.result)) in _TYPE_NAMES:
            out = _TYPE_NAMES[type(g.elem_of(op.result))]
            cfg = gemm.cfg
            if gemm.tf32:  # a 16-bit result needs the staging tile: fewer stages may fit
                cfg = tf32_config(replace(cfg, stages=2), gemm.copies == 2,
                                  _staging(cfg, out, gemm.n, gemm.store))
            gemm = replace(gemm, out_type=out, epilogue=ep, cfg=cfg)
            args += [lw.mem(v) for v in op.epilogue_operands]
        else:
            split = True
    product = lw.alloc(_product_type(op) if split else op.result.type)
    name = lw.named_kernel("matmul", lambda nm: build_kernel(nm, gemm))
    lw.hb.add_op(
        tt.LaunchExOp(name, [product, *args], gemm.grid(), gemm.smem_bytes, gemm.boxes())
    )
    if not split:
        lw.env[op.result] = product
        return True
    assert isinstance(op, g.MatmulEpilogueOp)
    out = lw.alloc(op.result.type)
    lw.env[op.result] = out
    extra = [lw.mem(v) for v in op.epilogue_operands]
    apply = matmul_epilogue(op)
    shape = g.shape_of(op.result)
    total = math.prod(shape)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        lin = e.linear_id()
        ok = e.lt(lin, total)
        idx = e.unravel(lin, shape)
        acc = e.load(args[1], idx, mask=ok)
        e.store(apply(e, args[2:], acc, idx[:-2], idx[-2], idx[-1], ok), args[0], idx, mask=ok)

    lw.kernel("matmul_epilogue", [out, product, *extra], FMA_GROUP,
              [cdiv(total, FMA_GROUP), 1, 1], build)
    return True


def _lower_split_k(
    lw: _FunctionLowering, op: g.MatmulOp | g.MatmulEpilogueOp, gemm: Sm90Gemm,
    args: list[SSAValue], splits: int,
) -> bool:
    """The kernel storing the f32 partial products of ``splits`` K ranges, then the kernel
    adding them in order and applying ``op``'s epilogue (:mod:`tessera.passes.sm90.split_k`)."""
    result = op.result.type
    assert isinstance(result, TensorType)
    # split products have few tiles: no CTA pairs (and no pairs were run split on a GPU)
    part = replace(gemm, out_type="f32", epilogue=None, splits=splits,
                   cfg=replace(gemm.cfg, cluster=1))
    if part.tf32:  # f32 partials need no TMA tile: as many stages as fit
        part = replace(part, cfg=tf32_config(replace(part.cfg, stages=2), part.copies == 2,
                                             part.staging_bytes))
    workspace = lw.alloc(workspace_type(splits, result))
    name = lw.named_kernel("matmul", lambda nm: build_kernel(nm, part))
    lw.hb.add_op(tt.LaunchExOp(name, [workspace, *args], part.grid(), part.smem_bytes,
                               part.boxes()))
    out = lw.alloc(result)
    apply, extra = None, []
    if isinstance(op, g.MatmulEpilogueOp):
        apply = matmul_epilogue(op)
        extra = [lw.mem(v) for v in op.epilogue_operands]
    reduce_splits(lw, workspace, out, result, splits, apply, extra)
    lw.env[op.result] = out
    return True


@dataclass(frozen=True)
class LowerMatmulSm90(LowerGraphToTile):
    """``lower-graph-to-tile`` with bf16/f16/fp8/f32 matmuls and convolutions
    (:mod:`tessera.passes.sm90.conv`, :mod:`tessera.passes.sm90.conv_implicit`) as wgmma
    kernels (sm_90a)."""

    name = "lower-matmul-sm90"

    def claims(self) -> tuple:
        """A strided input gradient's phase kernel, read by its convolution's weight
        relayout from the forward weight (:mod:`tessera.passes.sm90.conv_phase_weight`)."""
        from tessera.passes.sm90.conv_phase_weight import claim

        return (claim,) if self.implicit_conv else ()

    def overrides(self) -> dict[type[Operation], tuple[Override, ...]]:
        lower = functools.partial(lower_matmul_sm90, tiles=self.sm90_tiles,
                                  allow_tf32=self.allow_tf32, split_k=str(self.split_k),
                                  store=self.sm90_store)
        conv = functools.partial(lower_conv2d_sm90, implicit=self.implicit_conv,
                                 split_k=str(self.split_k), sm90_store=self.sm90_store)
        return {  # type: ignore[dict-item]
            g.MatmulOp: (lower,), g.MatmulEpilogueOp: (lower,),
            g.Conv2dOp: (conv,),
        }
