"""Tile IR kernels for the Graph IR ops that adjoint rules are written with.

The autodiff rules of ``tgraph.fft``, ``tgraph.cholesky`` and ``tgraph.spmm`` emit six
support ops besides complex add/sub; each lowers here to one kernel, f32 and f64 only,
computed in the element type. Every output element is written by one lane, which sums its terms in a fixed
order, so results are deterministic (no atomics).

* ``tgraph.real`` / ``tgraph.imag``: a complex tensor is a ``memref<S x 2 x fT>`` of
  interleaved (real, imaginary) pairs (``tile_fft.complex_memref``); one lane per
  element copies part 0 or 1 into a ``memref<S x fT>``.
* ``tgraph.complex``: one lane per element writes the pair ``(re, im)``.
  (Complex add/sub, which the adjoint of an fft uses to sum the cotangents of its
  real and imaginary parts, are ``tile_complex``'s.)
* ``tgraph.triangular_solve`` (``op(A) X = B``, A ``[..., n, n]``, B ``[..., n, k]``):
  one lane per column of B (of every matrix of the batch). ``T = op(A)`` is lower
  triangular for a lower ``A`` without ``transpose_a`` or an upper ``A`` with it; the
  lane then runs forward substitution ``x_i = (b_i - sum_{j<i} T_ij x_j) / T_ii``
  (``i = 0, 1, ...``, the sum in order of ``j``), else back substitution from
  ``i = n-1`` down (``j > i``). ``T_ij`` is ``A_ij``, or ``A_ji`` with ``transpose_a``;
  only the triangle of ``A`` the options name is read. ``x`` is kept in the output
  buffer. ``n^2 / 2`` multiply-adds per column. A zero on the diagonal gives inf/NaN
  (the CPU reference raises ``ValueError``).
* ``tgraph.spmm_transpose`` (``Aᵀ @ D`` for CSR ``A [M, K]``, ``D [M, N]`` ->
  ``[K, N]``): one lane per output column ``c < N``. The lane zeroes its column, then
  walks the stored entries in storage order (rows ``i = 0, 1, ...``, entries
  ``p = indptr[i] .. indptr[i+1]``) and adds ``values[p] * D[i, c]`` to
  ``out[indices[p], c]``: no two lanes write one element, and each element sums its
  terms in storage order, as the CPU reference (``numpy.add.at``) does. ``nnz``
  multiply-adds per lane; lanes of a warp touch consecutive columns (coalesced).
* ``tgraph.sddmm`` (``out[p] = sum_n L[i, n] R[indices[p], n]`` for stored entry ``p``
  in row ``i``): one lane per stored entry. The lane finds its row by binary search in
  ``indptr`` (the last ``i < M`` with ``indptr[i] <= p``; ``ceil(log2(M + 1))``
  uniform steps), then sums the ``N`` products in order of ``n``.

Malformed CSR operands (the CPU reference raises ``ValueError``) do not fault: the
entry ranges are clamped to ``[0, nnz)`` and entries with a column outside
``[0, K)`` are skipped (spmm_transpose) or give 0 (sddmm).
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import ComplexType, IndexType
from xdsl.ir import SSAValue

from tessera.ir import graph as g
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv, f32_or_f64

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

GROUP = 256
"""Most lanes per tile (fewer, a multiple of 32, for less work)."""




def _launch_shape(work: int) -> tuple[int, list[int]]:
    """(group size, grid) for one lane per item of ``work``."""
    group = min(GROUP, max(32, cdiv(work, 32) * 32))
    return group, [cdiv(work, group), 1, 1]


def _lane(e: KernelEmitter, work: int, group: int) -> tuple[SSAValue, SSAValue | None]:
    """This lane's item and the mask ``item < work`` (None when every lane has one)."""
    i = e.linear_id()
    return i, None if work % group == 0 else e.lt(i, work)


def _as_index(e: KernelEmitter, v: SSAValue) -> SSAValue:
    return e.convert(v, IndexType())


def _clamp(e: KernelEmitter, v: SSAValue, lo: int, hi: int) -> Idx:
    return e.min(e.max(v, lo), hi)


# --------------------------------------------------------------------------- complex parts


def lower_complex_part(lw: _FunctionLowering, op: g.RealOp | g.ImagOp) -> None:
    """``tgraph.real`` / ``tgraph.imag``: part 0 / 1 of each interleaved pair."""
    el = g.elem_of(op.input)
    assert isinstance(el, ComplexType)
    f32_or_f64(op, el.element_type)
    shape = list(g.shape_of(op.input))
    part = 0 if isinstance(op, g.RealOp) else 1
    out = lw.alloc(op.result.type)
    work = prod(shape)
    group, grid = _launch_shape(work)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        oref, zref = args
        i, ok = _lane(e, work, group)
        idx = e.unravel(i, shape)
        e.store(e.load(zref, [*idx, part], mask=ok), oref, idx, mask=ok)

    tag = "real" if part == 0 else "imag"
    lw.kernel(tag, [out, lw.mem(op.input)], group, grid, build)
    lw.env[op.result] = out


def lower_complex(lw: _FunctionLowering, op: g.ComplexOp) -> None:
    """``tgraph.complex``: the pair ``(real, imag)`` of each element."""
    f32_or_f64(op, g.elem_of(op.real))
    shape = list(g.shape_of(op.real))
    out = lw.alloc(op.result.type)
    work = prod(shape)
    group, grid = _launch_shape(work)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        zref, rref, iref = args
        i, ok = _lane(e, work, group)
        idx = e.unravel(i, shape)
        e.store(e.load(rref, idx, mask=ok), zref, [*idx, 0], mask=ok)
        e.store(e.load(iref, idx, mask=ok), zref, [*idx, 1], mask=ok)

    lw.kernel("complex", [out, lw.mem(op.real), lw.mem(op.imag)], group, grid, build)
    lw.env[op.result] = out


# --------------------------------------------------------------------------- triangular solve


def lower_triangular_solve(lw: _FunctionLowering, op: g.TriangularSolveOp) -> None:
    """``tgraph.triangular_solve``: one lane per column of B; see the module docstring."""
    f32_or_f64(op, g.elem_of(op.a))
    *batch, n, k = g.shape_of(op.b)
    upper, trans = op.upper is not None, op.transpose_a is not None
    forward = upper == trans  # op(A) is lower triangular
    out = lw.alloc(op.result.type)
    work = prod(batch) * k
    group, grid = _launch_shape(work)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        xref, aref, bref = args
        t, ok = _lane(e, work, group)
        bi = e.unravel(e.div(t, k), batch) if batch else []
        c = e.rem(t, k)

        def tri(b: KernelEmitter, i: Idx, j: Idx) -> SSAValue:
            """``T_ij`` of ``T = op(A)``."""
            return b.load(aref, [*bi, j, i] if trans else [*bi, i, j], mask=ok)

        def row(b: KernelEmitter, s: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            i = s if forward else b.index(b.sub(n - 1, s))
            lo, hi = (0, i) if forward else (b.add(i, 1), n)

            def term(a: KernelEmitter, j: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
                xj = a.load(xref, [*bi, j, c], mask=ok)
                return [a.fsub(acc[0], a.fmul(tri(a, i, j), xj))]

            (r,) = b.for_(lo, hi, 1, [b.load(bref, [*bi, i, c], mask=ok)], term)
            b.store(b.fdiv(r, tri(b, i, i)), xref, [*bi, i, c], mask=ok)
            return []

        e.for_(0, n, 1, [], row)

    lw.kernel(
        "triangular_solve", [out, lw.mem(op.a), lw.mem(op.b)], group, grid, build
    )
    lw.env[op.result] = out


# --------------------------------------------------------------------------- sparse


def _csr_dims(op: g.SpMMTransposeOp | g.SDDMMOp) -> tuple[int, int, int]:
    m, k = (int(x) for x in op.sparse_shape.get_values())
    return m, k, g.shape_of(op.indices)[0]


def lower_spmm_transpose(lw: _FunctionLowering, op: g.SpMMTransposeOp) -> None:
    """``tgraph.spmm_transpose``: one lane per output column, entries in storage order."""
    et = f32_or_f64(op, g.elem_of(op.dense))
    m, k, nnz = _csr_dims(op)
    ncols = g.shape_of(op.dense)[1]
    out = lw.alloc(op.result.type)
    group, grid = _launch_shape(ncols)

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        oref, ipref, ixref, vref, dref = args
        c, ok = _lane(e, ncols, group)
        zero = e.const(0.0, et)

        def clear(b: KernelEmitter, r: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            b.store(zero, oref, [r, c], mask=ok)
            return []

        e.for_(0, k, 1, [], clear)

        def row(b: KernelEmitter, i: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            lo = _clamp(b, _as_index(b, b.load(ipref, [i])), 0, nnz)
            hi = _clamp(b, _as_index(b, b.load(ipref, [b.add(i, 1)])), 0, nnz)
            d = b.load(dref, [i, c], mask=ok)

            def entry(a: KernelEmitter, p: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                col = _as_index(a, a.load(ixref, [p]))
                inb = a.and_(a.and_(ok, a.le(0, col)), a.lt(col, k))
                acc = a.load(oref, [col, c], mask=inb)
                a.store(a.fadd(acc, a.fmul(a.load(vref, [p]), d)), oref, [col, c], mask=inb)
                return []

            b.for_(lo, hi, 1, [], entry)
            return []

        e.for_(0, m, 1, [], row)

    args = [out, lw.mem(op.indptr), lw.mem(op.indices), lw.mem(op.values), lw.mem(op.dense)]
    lw.kernel("spmm_transpose", args, group, grid, build)
    lw.env[op.result] = out
