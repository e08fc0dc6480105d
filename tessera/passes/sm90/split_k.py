"""Split-K for the sm90 matmul: the kernel that adds the partial products in order.

With split-K (:func:`tessera.passes.matmul_config.split_k`) the sm90 kernel cuts K into
``S`` ranges and stores each range's f32 product of every output tile in a workspace
``[S, *C's shape]`` (:attr:`~tessera.passes.sm90.lower_matmul_sm90.Sm90Gemm.splits`).
:func:`reduce_splits` then builds and launches one Tile IR kernel that, for each
element of C, adds its ``S`` partials in range order (``((p0 + p1) + p2) + ...`` in
f32: the same bits on every run and for every grid; no atomics) and applies the
epilogue of the matmul (bias, activation, cast; the generic lowering's per-element
steps and roundings), or for a plain matmul the rounding to the result type.

Each lane handles ``W`` consecutive elements of a row (4 when N is a multiple of 4,
else 2 or 1), read with ``ttile.load_vector`` from each partial and written with one
``ttile.store_vector``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from xdsl.dialects.builtin import TensorType, VectorType, f32
from xdsl.ir import SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tl
from tessera.passes.lower_graph_to_tile import _FunctionLowering
from tessera.passes.tile_builder import KernelEmitter, cdiv

REDUCE_GROUP = 256
"""Lanes per tile of the reduction kernel."""

Apply = Callable[..., SSAValue]
"""``apply(e, extra, acc, pre, row, col, ok)``: a matmul epilogue
(:func:`tessera.passes.lower_graph_to_tile.matmul_epilogue`)."""


def workspace_type(splits: int, result: TensorType) -> TensorType:
    """The f32 partial products ``[splits, *result's shape]`` (contiguous: the sm90 kernel
    sees ``[splits * M, N]``)."""
    return TensorType(f32, [splits, *g.shape_of(result)])


def reduce_splits(
    lw: _FunctionLowering, workspace: SSAValue, out: SSAValue, result: TensorType,
    splits: int, apply: Apply | None = None, extra: Sequence[SSAValue] = (),
) -> None:
    """Launch the kernel ``out = epilogue(sum over s of workspace[s])``, the partials added
    in order ``s = 0, 1, ...``; ``apply`` is the matmul's epilogue (None: round to the
    result type), ``extra`` its operands (the bias)."""
    shape = g.shape_of(result)
    rt = g.elem_of(result)
    n = shape[-1]
    total = math.prod(shape)
    w = 4 if n % 4 == 0 else 2 if n % 2 == 0 else 1

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        o_ref, ws, bias = args[0], args[1], args[2:]
        base = e.mul(e.linear_id(), w)
        ok = e.lt(base, total)
        idx = e.unravel(base, shape)
        acc: list[SSAValue] = []
        for s in range(splits):
            at = [e.index(i) for i in [s, *idx]]
            if w == 1:
                vals = [e.load(ws, at, mask=ok)]
            else:
                vec = e.op(tl.LoadVectorOp(ws, at, w, ok))
                vals = [e.extract(vec, j) for j in range(w)]
            acc = vals if s == 0 else [e.fadd(a, v) for a, v in zip(acc, vals)]
        ys = []
        for j, a in enumerate(acc):
            if apply is None:
                ys.append(e.convert(a, rt))
            else:
                col = e.add(idx[-1], j) if j else idx[-1]
                ys.append(apply(e, list(bias), a, idx[:-2], idx[-2], col, ok))
        if w == 1:
            e.store(ys[0], o_ref, idx, mask=ok)
            return
        vec = e.const(0.0, VectorType(rt, [w]))
        for j, y in enumerate(ys):
            vec = e.insert(y, vec, j)
        e.emit(tl.StoreVectorOp(vec, o_ref, [e.index(i) for i in idx], ok))

    lw.kernel("split_k_reduce", [out, workspace, *extra], REDUCE_GROUP,
              [cdiv(cdiv(total, w), REDUCE_GROUP), 1, 1], build)
