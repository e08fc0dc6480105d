"""Tile IR kernels for the Graph IR ops that adjoint rules are written with.

The autodiff rules of ``tgraph.fft`` and ``tgraph.cholesky`` emit four support ops
besides complex add/sub; each lowers here to one kernel, f32 and f64 only,
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
  (the CPU reference raises ``ValueError``). Triangles of more than 64 rows take the
  blocked kernels of ``tile_triangular_blocked`` (block rows, GEMM updates).

The two sparse ops of spmm's adjoint, ``tgraph.spmm_transpose`` and ``tgraph.sddmm``,
lower in ``tile_sparse`` with spmm itself.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import ComplexType
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
    """``tgraph.triangular_solve``: one lane per column of B; see the module docstring.
    Triangles past ``BLOCKED_MIN_N`` rows take ``tile_triangular_blocked``."""
    from tessera.passes.tile_triangular_blocked import (
        BLOCKED_MIN_N,
        lower_triangular_solve_blocked,
    )

    et = f32_or_f64(op, g.elem_of(op.a))
    *batch, n, k = g.shape_of(op.b)
    if n > BLOCKED_MIN_N and k > 0 and prod(batch) > 0:
        lower_triangular_solve_blocked(lw, op, et)
        return
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
