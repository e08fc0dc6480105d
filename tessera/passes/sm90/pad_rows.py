"""Zero-padded copies of matmul operands whose rows are no whole 16-byte unit.

A TMA tensor map's row stride is a multiple of 16 bytes, so the sm90 GEMM reads an
operand stored ``[.., rows, cols]`` with ``cols * elem_bytes % 16 != 0`` (a vocabulary
of 50257 entries, an odd hidden size) from a staging copy instead: :func:`pad_rows`
writes it into a new ``[.., rows, cols_p]`` buffer (``cols_p``: ``cols`` rounded up to
16 bytes) with zeros in the extra columns, in the operand's own layout (K-major stays
K-major, MN-major stays MN-major). The kernel then reads the copy as it reads an aligned
operand: the zero columns are either K (adding nothing to the product) or rows of M or N
past the problem (clipped from the result).

The copy is one element per lane over the padded buffer in row-major order: reads and
writes are both coalesced, and it moves ``2 * rows * cols`` elements, small next to the
product's ``2 * M * N * K`` FLOPs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, SSAValue

from tessera.passes.tile_builder import KernelEmitter, cdiv

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

GROUP = 256
ROW_BYTES = 16
"""The TMA row-stride unit."""


def padded(cols: int, elem_bytes: int) -> int:
    """``cols`` rounded up to a whole 16-byte row of ``elem_bytes`` elements."""
    unit = ROW_BYTES // elem_bytes
    return cdiv(cols, unit) * unit


def pad_rows(
    lw: _FunctionLowering, src: SSAValue, shape: Sequence[int], et: Attribute,
    elem_bytes: int, name: str = "pad_rows",
) -> SSAValue:
    """A new ``[.., rows, cols_p]`` buffer holding ``src`` (``shape = [.., rows, cols]``)
    with its rows zero-padded to a 16-byte multiple."""
    *lead, cols = shape
    cp = padded(cols, elem_bytes)
    if cp == cols:
        raise ValueError(f"pad_rows: rows of {cols} elements need no padding")
    dst = lw.alloc(TensorType(et, [*lead, cp]))
    total = math.prod(lead) * cp
    outer = [*lead]

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        out, inp = args
        lin = e.linear_id()
        ok = e.lt(lin, total)
        row, col = e.div(lin, cp), e.rem(lin, cp)
        inside = e.and_(ok, e.lt(col, cols))
        ridx = e.unravel(e.select(ok, row, 0), outer)
        sidx = [i if isinstance(i, int) else e.select(inside, i, 0) for i in ridx]
        x = e.load(inp, [*sidx, e.select(inside, col, 0)], mask=inside, other=e.const(0.0, et))
        didx = [i if isinstance(i, int) else e.select(ok, i, 0) for i in ridx]
        e.store(x, out, [*didx, e.select(ok, col, 0)], mask=ok)

    lw.kernel(name, [dst, src], GROUP, [cdiv(total, GROUP), 1, 1], build)
    return dst
