"""``spectral-rewrite``: the guide's spectral rewrites on Graph IR.

Unlike ``algebraic-simplify``, these rewrites keep the meaning of a program in exact
arithmetic, not bit for bit: they replace one rounding of a transform pair by none
(``ifft(fft(x))`` is ``x`` exactly, where the two transforms give ``x`` up to a few
ulps) or change the algorithm (a convolution through FFTs). Each has a pass option:

* ``fold-inverse-pairs``: ``fft(fft(z), inverse)`` and ``fft(fft(z, inverse))`` are
  ``z`` (likewise ``fft2d``); for a real ``x`` the pair is ``complex(x, 0)``. With it,
  ``real(complex(a, b))`` is ``a`` and ``imag(complex(a, b))`` is ``b``, so
  ``real(ifft(fft(x)))`` is ``x``.
* ``parseval``: ``sum(real(F)*real(F) + imag(F)*imag(F))`` (either order, ``p*p`` or
  ``p**2``) over axes that include the transformed ones of ``F = fft(x)`` is
  ``n * sum(|x|^2)``, ``n`` the transformed size (``prod`` of the last two dims for
  ``fft2d``); for an inverse transform the factor is ``1/n``. ``|x|^2`` is ``x*x`` for
  a real ``x`` and ``real(x)^2 + imag(x)^2`` for a complex one. The transform then
  has no use left and is removed.
* ``conv-via-fft`` (off unless asked for, ``spectral-rewrite{conv-via-fft=true}``: it
  changes a convolution's rounding, and the operation count below does not see that
  the direct convolution runs on the tensor cores): a ``tgraph.conv2d`` with stride 1
  (no dilation, one channel group) in f32/f64 becomes a
  cross-correlation through 2-D FFTs when that takes fewer floating-point operations
  by the rule below. The input is zero-padded to ``P x Q = (H + 2 ph) x (W + 2 pw)``
  and the weight to ``P x Q``; ``Y = real(ifft2d(fft2d(x)[N,1,C] * conj(fft2d(w))[K,C]))``
  summed over ``C`` and sliced to ``Ho x Wo`` is the convolution (no wrap-around:
  ``Ho + R - 1 = P``), plus the bias.

  **Cost rule.** ``f1(n) = 5 n log2 n`` when every prime factor of ``n`` is at most 13
  (the mixed-radix Stockham kernel), else ``2 f1(m) + 18 m`` (Bluestein's two
  transforms of ``m >= 2n - 1`` points and three complex products: ``tile_fft``);
  ``f2(P, Q) = P f1(Q) + Q f1(P)``. FFT cost ``= (N C + K C + N K C) f2(P, Q) +
  7 N K C P Q`` (the transforms, a complex product and the channel sum); direct cost
  ``= 2 N K C Ho Wo R S``. The rewrite applies when ``fft-conv-margin * FFT cost <
  direct cost`` (margin 1 by default) and ``P`` and ``Q`` fit one transform tile of
  ``tile_fft`` (at most 4096 points in f32, 2048 in f64).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.dialects.builtin import ComplexType, Float32Type, Float64Type
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.transforms.dead_code_elimination import region_dce

from tessera.autodiff.emitter import GraphEmitter
from tessera.ir import graph as g
from tessera.ir.graph import elem_of, shape_of
from tessera.passes.algebra_utils import has_encoding, splat_value
from tessera.passes.fft_plan import bluestein_length, max_points, smooth


def _emitter(op: Operation) -> GraphEmitter:
    """A Graph IR emitter inserting before ``op``."""
    e = GraphEmitter(op.parent_block())  # type: ignore[arg-type]
    e.builder = Builder(InsertPoint.before(op))
    return e


def _is_inverse(op: g.FFTOp | g.FFT2dOp) -> bool:
    return op.inverse is not None


def _plain(*vals: SSAValue) -> bool:
    """No value carries a numeric policy encoding."""
    return not any(has_encoding(v.type) for v in vals)


# --------------------------------------------------------------------------- inverse pairs


class FoldInverseFFTPair(RewritePattern):
    """``fft(fft(z), inverse)`` / ``fft(fft(z, inverse))`` -> ``z`` (``complex(x, 0)`` for
    a real ``x``); the same for ``fft2d``."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, g.FFTOp | g.FFT2dOp):
            return
        inner = op.input.owner
        if type(inner) is not type(op) or _is_inverse(inner) == _is_inverse(op):
            return
        assert isinstance(inner, g.FFTOp | g.FFT2dOp)
        x = inner.input
        if not _plain(x, inner.result, op.result):
            return
        if x.type == op.result.type:
            rewriter.replace(op, [], [x])
            return
        if isinstance(elem_of(x), ComplexType):
            return
        e = _emitter(op)
        rewriter.replace(op, [], [e.complex(x, e.zeros_like(x))])


class FoldComplexParts(RewritePattern):
    """``real(complex(a, b))`` -> ``a``, ``imag(complex(a, b))`` -> ``b``."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, g.RealOp | g.ImagOp):
            return
        c = op.input.owner
        if not isinstance(c, g.ComplexOp):
            return
        part = c.real if isinstance(op, g.RealOp) else c.imag
        if part.type == op.result.type:
            rewriter.replace(op, [], [part])


# --------------------------------------------------------------------------- Parseval


def _same(a: SSAValue, b: SSAValue) -> bool:
    """``a`` and ``b`` are one value: the same SSA value, or the same part of one complex
    value taken twice (``ts.real(X) * ts.real(X)`` before CSE)."""
    if a == b:
        return True
    oa, ob = a.owner, b.owner
    return (isinstance(oa, g.RealOp | g.ImagOp) and type(oa) is type(ob)
            and oa.input == ob.input)  # type: ignore[union-attr]


def _square_of(v: SSAValue) -> SSAValue | None:
    """``p`` when ``v`` is ``p * p`` or ``p ** 2``."""
    o = v.owner
    if isinstance(o, g.MulOp) and _same(o.lhs, o.rhs):
        return o.lhs
    if isinstance(o, g.PowOp) and splat_value(o.rhs) == 2:
        return o.lhs
    return None


def _power_spectrum_of(v: SSAValue) -> g.FFTOp | g.FFT2dOp | None:
    """The transform ``F`` when ``v`` is ``real(F)^2 + imag(F)^2`` (either order)."""
    o = v.owner
    if not isinstance(o, g.AddOp):
        return None
    a, b = _square_of(o.lhs), _square_of(o.rhs)
    if a is None or b is None:
        return None
    pa, pb = a.owner, b.owner
    if isinstance(pa, g.ImagOp) and isinstance(pb, g.RealOp):
        pa, pb = pb, pa
    if not (isinstance(pa, g.RealOp) and isinstance(pb, g.ImagOp)) or pa.input != pb.input:
        return None
    f = pa.input.owner
    if not isinstance(f, g.FFTOp | g.FFT2dOp):
        return None
    if shape_of(f.result) != shape_of(v):
        return None  # the squares were broadcast
    return f


class ParsevalSum(RewritePattern):
    """``sum(|F|^2)`` over axes covering the transformed ones -> ``n^±1 * sum(|x|^2)``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.SumOp, rewriter: PatternRewriter) -> None:
        f = _power_spectrum_of(op.input)
        if f is None or not _plain(op.input, op.result, f.input):
            return
        shape = shape_of(f.input)
        rank = len(shape)
        ndims = 2 if isinstance(f, g.FFT2dOp) else 1
        if not set(range(rank - ndims, rank)) <= set(op.axis_list()):
            return
        n = math.prod(shape[rank - ndims:])
        x = f.input
        e = _emitter(op)
        if isinstance(elem_of(x), ComplexType):
            re, im = e.real(x), e.imag(x)
            sq = e.add(e.mul(re, re), e.mul(im, im))
        else:
            sq = e.mul(x, x)
        total = e.insert(g.SumOp(sq, op.axis_list(), op.keepdims is not None, op.result.type))
        scale = e.const(1.0 / n if _is_inverse(f) else float(n), op.result.type)
        rewriter.replace(op, [], [e.mul(total, scale)])


# --------------------------------------------------------------------------- conv via fft


def _f1(n: int) -> float:
    """Floating-point operations of one length-``n`` transform (see the module docstring)."""
    if smooth(n):
        return 5.0 * n * max(1.0, math.log2(n))
    m = bluestein_length(n)
    return 2 * _f1(m) + 18.0 * m


def conv_costs(
    x: Sequence[int], w: Sequence[int], padding: Sequence[int]
) -> tuple[float, float]:
    """(direct cost, FFT cost) of a stride-1 conv2d, by the module docstring's rule."""
    n, c, h, wd = x
    k, _, r, s = w
    p, q = h + 2 * padding[0], wd + 2 * padding[1]
    ho, wo = p - r + 1, q - s + 1
    direct = 2.0 * n * k * c * ho * wo * r * s
    f2 = p * _f1(q) + q * _f1(p)
    fft = (n * c + k * c + n * k * c) * f2 + 7.0 * n * k * c * p * q
    return direct, fft


def _fits_fft_tile(n: int, et: object) -> bool:
    return n <= max_points(8 if isinstance(et, Float64Type) else 4)


class ConvViaFFT(RewritePattern):
    """A stride-1 ``conv2d`` that the cost rule finds cheaper as FFTs."""

    def __init__(self, margin: float):
        self.margin = margin

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.Conv2dOp, rewriter: PatternRewriter) -> None:
        et = elem_of(op.result)
        if not isinstance(et, Float32Type | Float64Type):
            return
        if not _plain(op.input, op.weight, op.result):
            return
        if list(op.stride.get_values()) != [1, 1] or op.dilation_values != (1, 1):
            return
        if op.groups_value != 1:
            return  # the FFT product sums over all input channels
        pad = list(op.padding.get_values())
        xs, ws = list(shape_of(op.input)), list(shape_of(op.weight))
        n, c, h, wd = xs
        k, _, r, s = ws
        p, q = h + 2 * pad[0], wd + 2 * pad[1]
        if not (_fits_fft_tile(p, et) and _fits_fft_tile(q, et)):
            return
        direct, fft = conv_costs(xs, ws, pad)
        if not self.margin * fft < direct:
            return
        e = _emitter(op)
        # zero-pad the input by the padding and the weight to P x Q
        xp = e.pad(op.input, [n, c, p, q], [0, 0, pad[0], pad[1]], [1, 1, 1, 1])
        wp = e.pad(op.weight, [k, c, p, q], [0, 0, 0, 0], [1, 1, 1, 1])
        xf = e.fft(g.FFT2dOp, e.reshape(xp, [n, 1, c, p, q]), inverse=False)
        wf = e.conj(e.fft(g.FFT2dOp, wp, inverse=False))
        y = e.real(e.fft(g.FFT2dOp, e.mul(xf, wf), inverse=True))  # [N, K, C, P, Q]
        y = e.sum(y, [2])
        ho, wo = p - r + 1, q - s + 1
        y = e.slice(y, [0, 0, 0, 0], [n, k, ho, wo], [1, 1, 1, 1])
        if op.bias is not None:
            y = e.add(y, e.reshape(op.bias, [1, k, 1, 1]))
        if y.type != op.result.type:
            return  # not reached: the same shape and element type
        rewriter.replace(op, [], [y])


# --------------------------------------------------------------------------- the pass


@dataclass(frozen=True)
class SpectralRewritePass(ModulePass):
    """The guide's spectral rewrites (see the module docstring); each has an option."""

    name = "spectral-rewrite"

    fold_inverse_pairs: bool = True
    parseval: bool = True
    conv_via_fft: bool = False
    fft_conv_margin: float = 1.0

    def patterns(self) -> list[RewritePattern]:
        ps: list[RewritePattern] = []
        if self.fold_inverse_pairs:
            ps += [FoldInverseFFTPair(), FoldComplexParts()]
        if self.parseval:
            ps.append(ParsevalSum())
        if self.conv_via_fft:
            ps.append(ConvViaFFT(self.fft_conv_margin))
        return ps

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        ps = self.patterns()
        if not ps:
            return
        PatternRewriteWalker(
            GreedyRewritePatternApplier(ps), post_walk_func=region_dce
        ).rewrite_module(op)

