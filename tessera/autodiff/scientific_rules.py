"""Adjoint rules for convolution, FFTs, linear algebra and sparse products.

Registered in :data:`tessera.autodiff.rules.VJP_RULES` on import, with the
calling convention of :mod:`tessera.autodiff.rules`. Each adjoint is ordinary
Graph IR built from ``tgraph`` ops, so it is itself differentiable (forward
mode transposes it once more):

* ``conv2d``: the input gradient is one stride-1 ``conv2d`` of the undilated cotangent
  (:func:`tessera.autodiff.conv_grad.input_grad`): with the reversed (``tgraph.reverse``),
  channel-swapped weight along axes of stride 1, and along a strided axis with the
  kernel cut into its stride phases, one output channel per (phase, channel), the
  phases interleaved by one transpose (no stride-dilated cotangent, no product of its
  zero rows); the weight gradient is a
  ``conv2d`` of the input (batch and channels swapped) with the cotangent as
  kernel, dilated by the forward's stride and strided by its dilation (no
  dilated copy of the cotangent), cropped to the kernel; the bias gradient is
  ``sum(ct)`` over N, H, W. With ``groups = G``: the input gradient's convolution is
  grouped too, its weight transposed within each group (``[G, O/G, C/G] -> [G, C/G,
  O/G]``: a grouped transposed convolution); the weight gradient is one convolution
  of the input as ``[C/G, N G, H, W]`` (a reshape, no copy, for a depthwise one) with
  the cotangent as ``[N O, 1, Ho, Wo]`` kernels in ``N G`` groups, i.e. one image's
  partial gradient per output channel ``(n, o)`` (``N O C/G kh kw`` independent sums, so
  the direct kernel has work for every SM), summed over N.
* ``fft`` / ``fft2d``: ``x̄ = F^H ȳ``, i.e. ``n · ifft(ȳ)`` for the forward
  transform and ``fft(ȳ) / n`` for the inverse one (n: the transformed size),
  and its real part for a real input. Cotangents of complex values follow
  torch: ``z̄ = ∂L/∂Re z + i ∂L/∂Im z``.
* ``cholesky`` (Murray 2016): ``S = L⁻ᵀ Φ(Lᵀ L̄) L⁻¹`` with ``Φ`` the lower
  triangle with halved diagonal, symmetrized: ``Ā = (S + Sᵀ) / 2``.
* ``svd`` (reduced, real): with ``E_jk = s_k² - s_j²`` (1 on the diagonal),
  ``Ā = U [(skew(UᵀŪ) S + S skew(VᵀV̄)) / E + diag(S̄)] Vᵀ`` plus the
  projections ``(I - UUᵀ) Ū S⁻¹ Vᵀ`` (m > n) or ``U S⁻¹ V̄ᵀ (I - VVᵀ)``
  (n > m), as torch.linalg.svd. At repeated singular values ``E`` has zeros
  off the diagonal and the gradient of a loss that reads U or Vh is inf/nan
  (as in torch); a loss of S alone is fine.
* ``spmm``: values get ``sddmm(ct, denseᵀ)`` at the stored entries, dense
  gets ``spmm_transpose`` (``Aᵀ ct``); ``indptr`` and ``indices`` are integer
  and get none.
* The support ops close the set: ``triangular_solve``, ``real``, ``imag``,
  ``complex``, ``spmm_transpose`` and ``sddmm`` have rules too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import ComplexType
from xdsl.ir import Operation, SSAValue

from tessera.autodiff.conv_grad import input_grad
from tessera.autodiff.emitter import GraphEmitter, numel
from tessera.autodiff.rules import VJP_RULES, Cot, operand_slots
from tessera.ir import graph as g
from tessera.ir.graph import elem_of, shape_of


def _is_complex(v: SSAValue) -> bool:
    return isinstance(elem_of(v), ComplexType)


def _identity(e: GraphEmitter, n: int, like: SSAValue) -> SSAValue:
    return e.dense_const([float(i == j) for i in range(n) for j in range(n)], [n, n], like)


def _crop(e: GraphEmitter, x: SSAValue, start: Sequence[int], shape: Sequence[int]) -> SSAValue:
    if tuple(shape_of(x)) == tuple(shape):
        return x
    limit = [a + n for a, n in zip(start, shape)]
    return e.slice(x, start, limit, [1] * len(shape))


# --------------------------------------------------------------------------- conv2d


def _patch_weight_grad(
    e: GraphEmitter, ct: SSAValue, x: SSAValue, k: Sequence[int], st: Sequence[int],
    pd: Sequence[int],
) -> SSAValue:
    """The weight gradient of a convolution whose windows do not overlap (stride >= kernel):
    the patches are a reshaped, transposed view of the padded input, so the gradient is one
    GEMM ``dW[o, (c,i,j)] = sum over (n,ho,wo) of ct[(n,ho,wo), o] patches[(n,ho,wo), (c,i,j)]``
    (no dilated cotangent, no convolution)."""
    n, c = shape_of(x)[:2]
    o, ho, wo = shape_of(ct)[1:]
    (kh, kw), (sh, sw) = k, st
    # rows (cols) 0 .. ho*sh of the input padded by pd (zeros past its end too)
    rows = [min(ho * sh - pd[0], shape_of(x)[2]), min(wo * sw - pd[1], shape_of(x)[3])]
    x = _crop(e, x, [0, 0, 0, 0], [n, c, *rows])
    x = e.pad(x, [n, c, ho * sh, wo * sw], [0, 0, pd[0], pd[1]], [1, 1, 1, 1])
    xp = e.reshape(x, [n, c, ho, sh, wo, sw])
    xp = _crop(e, xp, [0] * 6, [n, c, ho, kh, wo, kw])
    patches = e.reshape(e.transpose(xp, [0, 2, 4, 1, 3, 5]), [n * ho * wo, c * kh * kw])
    cm = e.reshape(e.transpose(ct, [0, 2, 3, 1]), [n * ho * wo, o])
    return e.reshape(e.matmul(cm, patches, transpose_lhs=True), [o, c, kh, kw])


class _Emit:
    """:class:`~tessera.autodiff.conv_grad.Builder` over a :class:`GraphEmitter`."""

    def __init__(self, e: GraphEmitter):
        self.e = e

    def shape(self, x: SSAValue) -> tuple[int, ...]:
        return tuple(shape_of(x))

    def reshape(self, x: SSAValue, shape: list[int]) -> SSAValue:
        return self.e.reshape(x, shape)

    def transpose(self, x: SSAValue, perm: list[int]) -> SSAValue:
        return x if list(perm) == sorted(perm) else self.e.transpose(x, perm)

    def reverse(self, x: SSAValue, dims: list[int]) -> SSAValue:
        return self.e.reverse(x, dims)

    def pad(self, x: SSAValue, axis: int, before: int, after: int) -> SSAValue:
        s = list(shape_of(x))
        parts = [self.e.const(0.0, x, [*s[:axis], before, *s[axis + 1 :]])] if before else []
        parts.append(x)
        if after:
            parts.append(self.e.const(0.0, x, [*s[:axis], after, *s[axis + 1 :]]))
        return self.e.concat(parts, axis)

    def take(self, x: SSAValue, axis: int, start: int, stop: int) -> SSAValue:
        s = list(shape_of(x))
        st = [0] * len(s)
        st[axis] = start
        s[axis] = stop - start
        return _crop(self.e, x, st, s)

    def crop(self, x: SSAValue, start: list[int], shape: list[int]) -> SSAValue:
        return _crop(self.e, x, start, shape)

    def conv2d(self, x: SSAValue, w: SSAValue, padding: list[int], dilation: list[int],
               groups: int) -> SSAValue:
        return self.e.conv2d(x, w, [1, 1], padding, dilation, groups)

    def mask(self, x: SSAValue, keep: np.ndarray) -> SSAValue:
        return self.e.select(self.e.bool_const(keep, keep.shape), x, 0.0)


def _grouped_weight_grad(
    e: GraphEmitter, ct: SSAValue, x: SSAValue, k: Sequence[int], st: Sequence[int],
    pd: Sequence[int], dl: Sequence[int], groups: int,
) -> SSAValue:
    """The weight gradient of a grouped convolution (module docstring): ``dW[o, c, i, j] =
    sum over n of r[c, (n, o), i, j]``, ``r`` the convolution of the input as
    ``[C/G, (n, g), H, W]`` with ``ct`` as ``[(n, o), 1, Ho, Wo]`` in ``N G`` groups (taps
    spaced by the stride, outputs by the dilation), cropped to the kernel."""
    n, c, h, wd = shape_of(x)
    o, ho, wo = shape_of(ct)[1:]
    cg = c // groups
    if cg == 1:
        xt = e.reshape(x, [1, n * c, h, wd])
    else:
        x5 = e.transpose(e.reshape(x, [n, groups, cg, h, wd]), [2, 0, 1, 3, 4])
        xt = e.reshape(x5, [cg, n * groups, h, wd])
    kt = e.reshape(ct, [n * o, 1, ho, wo])
    r = e.conv2d(xt, kt, dl, pd, st, n * groups)
    r = _crop(e, r, [0, 0, 0, 0], [cg, n * o, k[0], k[1]])
    r = e.sum(e.reshape(r, [cg, n, o, k[0], k[1]]), [1])
    return e.reshape(r, [o, 1, *k]) if cg == 1 else e.transpose(r, [1, 0, 2, 3])


@VJP_RULES.register(g.Conv2dOp)
def _conv2d(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.Conv2dOp)
    ct = cts[0]
    assert ct is not None
    x, w = op.input, op.weight
    sh, sw = op.stride.get_values()
    ph, pw = op.padding.get_values()
    dh, dw = op.dilation_values
    gr = op.groups_value
    n, c, h, wd = shape_of(x)
    o, _, kh, kw = shape_of(w)
    ho, wo = shape_of(ct)[2:]
    slots = operand_slots(op)
    out: list[Cot] = [None] * len(op.operands)
    if needs[slots["input"]]:
        out[slots["input"]] = input_grad(_Emit(e), ct, w, (h, wd), [sh, sw], [ph, pw], [dh, dw],
                                         gr)
    if needs[slots["weight"]] and gr != 1:
        out[slots["weight"]] = _grouped_weight_grad(e, ct, x, [kh, kw], [sh, sw], [ph, pw],
                                                    [dh, dw], gr)
    elif needs[slots["weight"]] and sh >= kh and sw >= kw and (dh, dw) == (1, 1):
        out[slots["weight"]] = _patch_weight_grad(e, ct, x, [kh, kw], [sh, sw], [ph, pw])
    elif needs[slots["weight"]]:
        # dW[o, c, i, j] = sum of ct[n, o, ho, wo] xp[n, c, ho*sh + i*dh, wo*sw + j*dw]: the
        # input (channels as batch) correlated with ct, its taps spaced by the stride and
        # its outputs by the dilation; no stride-dilated copy of ct
        r = e.conv2d(e.transpose(x, [1, 0, 2, 3]), e.transpose(ct, [1, 0, 2, 3]), [dh, dw],
                     [ph, pw], [sh, sw])
        r = _crop(e, r, [0, 0, 0, 0], [c, o, kh, kw])
        out[slots["weight"]] = e.transpose(r, [1, 0, 2, 3])
    if "bias" in slots and needs[slots["bias"]]:
        out[slots["bias"]] = e.sum(ct, [0, 2, 3])
    return out


# --------------------------------------------------------------------------- fft and complex parts


@VJP_RULES.register(g.FFTOp, g.FFT2dOp)
def _fft(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.FFTOp | g.FFT2dOp)
    ct = cts[0]
    assert ct is not None
    x = op.input
    dims = shape_of(x)[-op.NDIMS :]
    inverse = op.inverse is not None
    # y = F x  ->  x̄ = F^H ȳ = n ifft(ȳ);   y = F^H x / n  ->  x̄ = F ȳ / n
    r = e.fft(type(op), ct, inverse=not inverse)
    scale = 1.0 / numel(dims) if inverse else float(numel(dims))
    if _is_complex(x):
        return [e.mul(r, scale)]
    return [e.mul(e.real(r), scale)]


@VJP_RULES.register(g.RealOp)
def _real(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    ct = cts[0]
    assert ct is not None
    return [e.complex(ct, e.zeros_like(ct))]


@VJP_RULES.register(g.ImagOp)
def _imag(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    ct = cts[0]
    assert ct is not None
    return [e.complex(e.zeros_like(ct), ct)]


@VJP_RULES.register(g.ComplexOp)
def _complex(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    ct = cts[0]
    assert ct is not None
    return [e.real(ct) if needs[0] else None, e.imag(ct) if needs[1] else None]


# --------------------------------------------------------------------------- linear algebra


def _triangle_mask(
    e: GraphEmitter, n: int, like: SSAValue, *, upper: bool = False, diag: float = 1.0
) -> SSAValue:
    """[n, n] constant: 1 on the strict (lower or upper) triangle, ``diag`` on the
    diagonal, 0 elsewhere."""
    vals = []
    for i in range(n):
        for j in range(n):
            inside = j > i if upper else j < i
            vals.append(diag if i == j else float(inside))
    return e.dense_const(vals, [n, n], like)


@VJP_RULES.register(g.CholeskyOp)
def _cholesky(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.CholeskyOp)
    ct = cts[0]
    assert ct is not None
    lo = op.result
    n = shape_of(lo)[-1]
    phi = e.mul(e.matmul(lo, ct, transpose_lhs=True), _triangle_mask(e, n, lo, diag=0.5))
    left = e.triangular_solve(lo, phi, transpose_a=True)  # L⁻ᵀ Φ
    # S = (L⁻ᵀ Φ) L⁻¹, whose transpose is L⁻ᵀ (L⁻ᵀ Φ)ᵀ
    s_t = e.triangular_solve(lo, e.swap_last(left), transpose_a=True)
    return [e.mul(e.add(e.swap_last(s_t), s_t), 0.5)]


@VJP_RULES.register(g.TriangularSolveOp)
def _triangular_solve(
    e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]
):
    assert isinstance(op, g.TriangularSolveOp)
    ct = cts[0]
    assert ct is not None
    upper, trans = op.upper is not None, op.transpose_a is not None
    # X = op(T)⁻¹ B:  B̄ = op(T)⁻ᵀ X̄,  op(T)̄ = -B̄ Xᵀ, only T's triangle is read
    db = e.triangular_solve(op.a, ct, upper=upper, transpose_a=not trans)
    da = None
    if needs[0]:
        gm = e.neg(e.matmul(db, op.result, transpose_rhs=True))
        if trans:
            gm = e.swap_last(gm)
        n = shape_of(op.a)[-1]
        da = e.mul(gm, _triangle_mask(e, n, op.a, upper=upper))
    return [da, db if needs[1] else None]


@VJP_RULES.register(g.SVDOp)
def _svd(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.SVDOp)
    gu, gs, gvh = cts
    u, s, vh = op.u, op.s, op.vh
    *b, m, n = shape_of(op.input)
    k = min(m, n)
    s_row = e.reshape(s, [*b, 1, k])  # scales column k by s_k
    s_col = e.reshape(s, [*b, k, 1])  # scales row j by s_j
    eye = _identity(e, k, s)
    inner: SSAValue | None = None
    if gu is not None or gvh is not None:
        s2 = e.mul(s, s)
        # E_jk = s_k² - s_j² off the diagonal, 1 on it
        big_e = e.add(e.sub(e.reshape(s2, [*b, 1, k]), e.reshape(s2, [*b, k, 1])), eye)
        num: SSAValue | None = None
        if gu is not None:
            uhgu = e.matmul(u, gu, transpose_lhs=True)
            num = e.mul(e.sub(uhgu, e.swap_last(uhgu)), s_row)
        if gvh is not None:
            vhgv = e.matmul(vh, gvh, transpose_rhs=True)
            term = e.mul(s_col, e.sub(vhgv, e.swap_last(vhgv)))
            num = term if num is None else e.add(num, term)
        assert num is not None
        inner = e.div(num, big_e)
    if gs is not None:
        d = e.mul(e.reshape(gs, [*b, k, 1]), eye)
        inner = d if inner is None else e.add(inner, d)
    assert inner is not None
    if m > k and gu is not None:
        ga = e.matmul(u, inner)
        gu_sinv = e.div(gu, s_row)
        proj = e.matmul(u, e.matmul(u, gu_sinv, transpose_lhs=True))
        ga = e.matmul(e.add(ga, e.sub(gu_sinv, proj)), vh)
    elif n > k and gvh is not None:
        ga = e.matmul(inner, vh)
        gvh_sinv = e.div(gvh, s_col)
        proj = e.matmul(e.matmul(gvh_sinv, vh, transpose_rhs=True), vh)
        ga = e.matmul(u, e.add(ga, e.sub(gvh_sinv, proj)))
    else:
        ga = e.matmul(e.matmul(u, inner), vh)
    return [ga]


# --------------------------------------------------------------------------- sparse products


def _csr_parts(op: g.SpMMOp | g.SpMMTransposeOp | g.SDDMMOp) -> tuple[SSAValue, SSAValue, list[int]]:
    return op.indptr, op.indices, list(op.sparse_shape.get_values())


@VJP_RULES.register(g.SpMMOp)
def _spmm(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.SpMMOp)
    ct = cts[0]
    assert ct is not None
    ip, ix, ss = _csr_parts(op)
    nnz = shape_of(op.values)
    dv = e.csr(g.SDDMMOp, ip, ix, ct, op.dense, ss, nnz) if needs[2] else None
    dd = (
        e.csr(g.SpMMTransposeOp, ip, ix, op.values, ct, ss, shape_of(op.dense))
        if needs[3]
        else None
    )
    return [None, None, dv, dd]


@VJP_RULES.register(g.SpMMTransposeOp)
def _spmm_transpose(
    e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]
):
    assert isinstance(op, g.SpMMTransposeOp)
    ct = cts[0]
    assert ct is not None
    ip, ix, ss = _csr_parts(op)
    dv = e.csr(g.SDDMMOp, ip, ix, op.dense, ct, ss, shape_of(op.values)) if needs[2] else None
    dd = e.csr(g.SpMMOp, ip, ix, op.values, ct, ss, shape_of(op.dense)) if needs[3] else None
    return [None, None, dv, dd]


@VJP_RULES.register(g.SDDMMOp)
def _sddmm(e: GraphEmitter, op: Operation, cts: Sequence[Cot], needs: Sequence[bool]):
    assert isinstance(op, g.SDDMMOp)
    ct = cts[0]
    assert ct is not None
    ip, ix, ss = _csr_parts(op)
    dl = e.csr(g.SpMMOp, ip, ix, ct, op.rhs, ss, shape_of(op.lhs)) if needs[2] else None
    dr = e.csr(g.SpMMTransposeOp, ip, ix, ct, op.lhs, ss, shape_of(op.rhs)) if needs[3] else None
    return [None, None, dl, dr]
