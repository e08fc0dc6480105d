"""Zero-padded copies of matmul operands whose rows are no whole 16-byte unit.

A TMA tensor map's row stride is a multiple of 16 bytes, so the sm90 GEMM reads an
operand stored ``[.., rows, cols]`` with ``cols * elem_bytes % 16 != 0`` (a vocabulary
of 50257 entries, an odd hidden size) from a staging copy instead: :func:`pad_rows`
writes it into a new ``[.., rows, cols_p]`` buffer (``cols_p``: ``cols`` rounded up to
128 bytes, :data:`PAD_BYTES`) with zeros in the extra columns, in the operand's own layout (K-major stays
K-major, MN-major stays MN-major). The kernel then reads the copy as it reads an aligned
operand: the zero columns are either K (adding nothing to the product) or rows of M or N
past the problem (clipped from the result).

Each lane writes one 16-byte unit of a padded row with a vector store (2- and 4-byte
elements; one element per lane otherwise), from element loads of the source row (not
16-byte aligned); reads and writes are both coalesced, and the copy moves ``2 * rows * cols`` elements, small next to the
product's ``2 * M * N * K`` FLOPs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import TensorType, VectorType
from xdsl.ir import Attribute, SSAValue

from tessera.ir import tile as tt
from tessera.passes.tile_builder import KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

GROUP = 256
ROW_BYTES = 16
"""The TMA row-stride unit, and the bytes one lane of the copy writes."""
PAD_BYTES = 128
"""Padded rows are a multiple of this: each row then starts a 128-byte line, as the TMA
boxes' rows do. On an H100 the GPT-2 LM head's product ``[8192, 50257] @ [50257, 768]``
with its copy took 2.29 ms with rows padded to 16 bytes (K = 50264) and 1.64 ms with
128-byte rows (K = 50304); at K = 50176, no copy, 0.84 ms
(docs/perf/2026-11-25-h100-lmhead.txt)."""


def padded(cols: int, elem_bytes: int) -> int:
    """``cols`` rounded up to a whole 16-byte row of ``elem_bytes`` elements (what a TMA
    row stride needs)."""
    unit = ROW_BYTES // elem_bytes
    return cdiv(cols, unit) * unit


def copy_cols(cols: int, elem_bytes: int) -> int:
    """The row length of :func:`pad_rows`'s copy: ``cols`` rounded up to a whole number of
    :data:`PAD_BYTES` of ``elem_bytes`` elements."""
    unit = PAD_BYTES // elem_bytes
    return cdiv(cols, unit) * unit


def pad_rows(
    lw: _FunctionLowering, src: SSAValue, shape: Sequence[int], et: Attribute,
    elem_bytes: int, name: str = "pad_rows",
) -> SSAValue:
    """A new ``[.., rows, cols_p]`` buffer holding ``src`` (``shape = [.., rows, cols]``)
    with its rows zero-padded to a :data:`PAD_BYTES` multiple."""
    *lead, cols = shape
    if padded(cols, elem_bytes) == cols:
        raise ValueError(f"pad_rows: rows of {cols} elements need no padding")
    cp = copy_cols(cols, elem_bytes)
    dst = lw.alloc(TensorType(et, [*lead, cp]))
    total = math.prod(lead) * cp
    outer = [*lead]
    # each lane writes one 16-byte unit of a padded row (a vector store; the padded
    # rows are 16-byte aligned) from ``w`` element loads of the unaligned source row
    w = ROW_BYTES // elem_bytes if elem_bytes in (2, 4) else 1

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        out, inp = args
        lin = e.mul(e.linear_id(), w)
        ok = e.lt(lin, total)
        row, col0 = e.div(lin, cp), e.rem(lin, cp)
        ridx = e.unravel(e.select(ok, row, 0), outer)
        didx = [i if isinstance(i, int) else e.select(ok, i, 0) for i in ridx]
        xs = []
        for k in range(w):
            col = e.add(col0, k)
            inside = e.and_(ok, e.lt(col, cols))
            assert inside is not None
            sidx = [i if isinstance(i, int) else e.select(inside, i, 0) for i in ridx]
            xs.append(e.load(inp, [*sidx, e.select(inside, col, 0)], mask=inside,
                             other=e.const(0.0, et)))
        if w == 1:
            e.store(xs[0], out, [*didx, e.select(ok, col0, 0)], mask=ok)
            return
        vec = e.const(0.0, VectorType(et, [w]))
        for k, x in enumerate(xs):
            vec = e.insert(x, vec, k)
        e.emit(tt.StoreVectorOp(vec, out, [e.index(i) for i in [*didx, e.select(ok, col0, 0)]],
                                ok))

    lw.kernel(name, [dst, src], GROUP, [cdiv(cdiv(total, w), GROUP), 1, 1], build)
    return dst
