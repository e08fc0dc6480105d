"""``lower-tile-to-target``: Tile IR kernels → Target IR (PTX on virtual registers).

Every ``ttile.kernel`` becomes a ``ttarget.func`` of the same name and every
``ttile.launch`` a ``ttarget.launch``, every host collective (``ttile.all_reduce``
...) the ``ttarget`` op of the same name; host ``func.func``s stay as they are.
Inside a kernel each SSA value gets its own virtual register (vectors one per
element) and ops translate one by one, top to bottom, into one flat block:

* ``scf.for`` / ``scf.if`` / ``scf.while`` become labels and (predicated)
  branches; loop-carried values live in registers written at ``scf.yield``
  (through temporaries, so the copy is parallel).
* ``ttile.load`` / ``ttile.store`` (and ``memref.load`` / ``memref.store``) compute
  row-major addresses; a mask predicates the access (``@%p ld``), ``other`` is
  moved in first. Shared memrefs use 32-bit ``.shared`` addresses; an
  ``alloc_shared`` with ``swizzle = "xor"`` XORs the 16-byte chunk index with the
  row index modulo ``p`` (docs/TILE_IR.md).
* ``ttile.reduce`` is a ``shfl.sync.bfly`` butterfly (offsets 16…1); with
  ``scope = group`` lane 0 of each warp writes its warp's result to shared
  memory and every lane combines the warps in order, between two barriers.
* ``ttile.mma`` packs bf16/f16 pairs into ``.b32`` fragment registers and emits
  ``mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32``.

Anything without a lowering raises :class:`TileLoweringError` naming the op and
the kernel.

The lowerings are split by source dialect, each module registering its handlers
in :data:`~tessera.passes.lower_tile_to_target.kernel.TARGET_LOWERINGS`: :mod:`.tile_ops`
(``ttile`` and ``memref`` accesses), :mod:`.arith_ops`, :mod:`.float_casts`,
:mod:`.math_ops`, :mod:`.vector_ops` and :mod:`.scf_ops`. :mod:`.kernel` holds the
per-kernel state (:class:`KernelLowering`) and :mod:`.types` the type mapping.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tessera.ir import target as tt
from tessera.ir import tile
from tessera.passes import tile_collectives
from tessera.passes.dedupe_kernels import kernel_fingerprint, refers_to_symbols
from tessera.passes.lower_tile_to_target import (  # noqa: F401  (each registers its lowerings)
    arith_ops,
    float_casts,
    math_ops,
    scf_ops,
    tile_ops,
    vector_ops,
)
from tessera.passes.lower_tile_to_target.float_casts import FP8_OVERFLOW
from tessera.passes.lower_tile_to_target.kernel import TARGET_LOWERINGS, KernelLowering
from tessera.passes.lower_tile_to_target.math_ops import LN2, LOG2E
from tessera.passes.lower_tile_to_target.types import (
    TYPE_BITS_OF,
    TileLoweringError,
    bits_type,
    element_bits,
    float_type,
    int_type,
    mem_type,
    reg_class_of,
)

__all__ = [
    "FP8_OVERFLOW",
    "LN2",
    "LOG2E",
    "TARGET_LOWERINGS",
    "TYPE_BITS_OF",
    "KernelLowering",
    "LowerTileToTargetPass",
    "TileLoweringError",
    "bits_type",
    "element_bits",
    "float_type",
    "int_type",
    "lower_kernel",
    "lower_kernel_memo",
    "mem_type",
    "reg_class_of",
]


def lower_kernel(kernel: tile.KernelOp) -> tt.FuncOp:
    """The ``ttarget.func`` for one ``ttile.kernel``."""
    return KernelLowering(kernel).run()


MEMO_SIZE = 512
"""Kernels whose lowering :func:`lower_kernel_memo` keeps (least recently used dropped)."""

_MEMO: OrderedDict[tuple[Hashable, ...], tt.FuncOp] = OrderedDict()


def lower_kernel_memo(kernel: tile.KernelOp) -> tt.FuncOp:
    """:func:`lower_kernel`, reusing the lowering of a structurally equal kernel lowered
    before in this process (another partition of a model, another layer, a recompile):
    the lowering is a function of the kernel alone, so a kernel equal up to its name
    (:func:`~tessera.passes.dedupe_kernels.kernel_fingerprint`) gets a renamed copy of
    the earlier result. Kernels naming module symbols are always lowered afresh."""
    if refers_to_symbols(kernel):
        return lower_kernel(kernel)
    key = kernel_fingerprint(kernel)
    proto = _MEMO.get(key)
    if proto is None:
        func = lower_kernel(kernel)
        _MEMO[key] = func.clone()
        if len(_MEMO) > MEMO_SIZE:
            _MEMO.popitem(last=False)
        return func
    _MEMO.move_to_end(key)
    func = proto.clone()
    func.sym_name = StringAttr(kernel.sym_name.data)
    return func


@dataclass(frozen=True)
class LowerTileToTargetPass(ModulePass):
    """Replaces every ``ttile.kernel`` by a ``ttarget.func``, every ``ttile.launch``
    by a ``ttarget.launch`` and every host collective by its ``ttarget`` op."""

    name = "lower-tile-to-target"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        kernels = [k for k in op.walk() if isinstance(k, tile.KernelOp)]
        launches = [launch for launch in op.walk() if isinstance(launch, tile.LaunchOp)]
        for launch in launches:
            Rewriter.replace_op(
                launch,
                tt.LaunchOp(launch.callee.root_reference.data, list(launch.args), launch.grid_value()),
            )
        for k in kernels:
            Rewriter.replace_op(k, lower_kernel_memo(k))
        for c in [c for c in op.walk() if isinstance(c, tile.HOST_COLLECTIVE_OPS)]:
            Rewriter.replace_op(c, tile_collectives.to_target(c))
