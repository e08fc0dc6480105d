"""Tile IR kernels for ``tgraph.fft`` and ``tgraph.fft2d``.

**Complex tensors.** Below Graph IR a ``tensor<... x complex<fT>>`` is stored as a
``memref<... x 2 x fT>``: interleaved (real, imaginary) pairs, which is the memory
layout of numpy's ``complex64`` / ``complex128`` and of torch's ``torch.complex64`` /
``torch.complex128`` (``torch.view_as_real``). Kernels read and write the two parts
as ordinary floats; the host side views such buffers as complex (the CUDA runtime
with ``torch.view_as_complex``, tests with ``numpy.ndarray.view``).

**One tile per transform.** A 1-D transform of length ``n`` along one axis runs in
one tile: its ``n`` values are loaded (a real input gets a zero imaginary part) into a
shared buffer of ``n x 2`` floats of the result's precision, transformed there, and
written out (times ``1/n`` for ``inverse``, as ``numpy.fft.ifft``):

* ``n`` a power of two: radix-2 Stockham autosort, ``log2(n)`` stages ping-ponging
  between two shared buffers with a barrier before each stage; in stage ``s``
  (``m = 2**s``) butterfly ``p < n/2`` computes ``j = p / m``,
  ``y[p + j*m] = x[p] + x[p + n/2]`` and ``y[p + j*m + m] = w**(j*m) (x[p] - x[p + n/2])``.
  ``O(n log n)`` work per transform.
* other ``n``: the direct DFT ``X[k] = sum_j x[j] w**(j*k mod n)``, one output per lane,
  summed in order ``j = 0, 1, ...``. ``O(n**2)`` work per transform.

The twiddles ``w**t = exp(-+2 pi i t / n)`` come from a constant ``memref.global``
computed on the host in float64 and rounded once to the element type, so they are
as accurate as the type allows. Every value is produced by one lane in a fixed
order, so results are deterministic. ``tgraph.fft2d`` is a transform along the last
axis into a temporary buffer, then one along the axis before it.

Lengths whose two shared buffers would exceed :data:`SHARED_BYTES_LIMIT` (``n > 2048``
for f32, ``n > 1024`` for f64) raise ``NotImplementedError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from xdsl.dialects import memref
from xdsl.dialects.builtin import (
    ComplexType,
    DenseIntOrFPElementsAttr,
    Float32Type,
    Float64Type,
    MemRefType,
    StringAttr,
    TensorType,
    UnitAttr,
)
from xdsl.ir import Attribute, SSAValue

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv, not_lowered

if TYPE_CHECKING:
    from tessera.passes.lower_graph_to_tile import _FunctionLowering

SHARED_BYTES_LIMIT = 32 * 1024
"""Largest shared memory (two ``n x 2`` buffers) one transform may use."""

MAX_GROUP = 256
"""Most lanes per transform tile."""


def complex_memref(t: TensorType) -> MemRefType:
    """``tensor<S x complex<fT>>`` -> ``memref<S x 2 x fT>`` (interleaved real, imaginary)."""
    el = t.element_type
    assert isinstance(el, ComplexType)
    return MemRefType(el.element_type, [*t.get_shape(), 2])



def _group(work: int) -> int:
    """Lanes for ``work`` parallel items: a multiple of 32 in ``[32, MAX_GROUP]``."""
    return min(MAX_GROUP, max(32, cdiv(work, 32) * 32))


def _twiddles(lw: _FunctionLowering, n: int, inverse: bool, et: Attribute) -> SSAValue:
    """A constant global ``[n, 2]`` of ``exp(-+2 pi i t / n)``, computed in float64."""
    t = np.arange(n, dtype=np.float64)
    ang = (2.0 if inverse else -2.0) * np.pi * t / n
    vals = np.stack([np.cos(ang), np.sin(ang)], axis=-1)
    k = lw.counter.get("cst", 0)
    lw.counter["cst"] = k + 1
    sym = f"{lw.prefix}_cst_{k}"
    mt = MemRefType(et, [n, 2])
    data = DenseIntOrFPElementsAttr.from_list(TensorType(et, [n, 2]), vals.ravel().tolist())
    gl = memref.GlobalOp.get(StringAttr(sym), mt, data, constant=UnitAttr())
    lw.module.body.block.insert_op_before(gl, lw.fn)
    return lw.host_op(memref.GetGlobalOp(sym, mt))


class _Transform:
    """Builds the body of a kernel doing one length-``n`` transform per tile along
    ``axis`` of a tensor of (logical) shape ``shape``."""

    def __init__(
        self,
        e: KernelEmitter,
        shape: Sequence[int],
        axis: int,
        et: Attribute,
        group: int,
        complex_in: bool,
    ):
        self.e = e
        self.shape = list(shape)
        self.axis = axis
        self.n = shape[axis]
        self.et = et
        self.group = group
        self.complex_in = complex_in
        self.lid = e.local_id()
        others = [d for k, d in enumerate(shape) if k != axis]
        self.outer = e.unravel(e.tile_id(), others)

    def index(self, j: Idx) -> list[Idx]:
        idx = list(self.outer)
        idx.insert(self.axis, j)
        return idx

    def strided(self, count: int, body) -> None:
        """``body(e, i, mask)`` for ``i = local_id + G*r < count`` (mask None if always)."""
        e, grp = self.e, self.group

        def step(b: KernelEmitter, base: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            i = b.add(base, self.lid)
            body(b, i, None if count % grp == 0 else b.lt(i, count))
            return []

        if count <= grp:
            body(e, self.lid, None if count == grp else e.lt(self.lid, count))
        else:
            e.for_(0, count, grp, [], step)

    def load_row(self, x: SSAValue, buf: SSAValue) -> None:
        def body(b: KernelEmitter, i: Idx, ok: SSAValue | None) -> None:
            if self.complex_in:
                re = b.load(x, [*self.index(i), 0], mask=ok)
                im = b.load(x, [*self.index(i), 1], mask=ok)
            else:
                re = b.load(x, self.index(i), mask=ok)
                im = b.const(0.0, self.et)
            re, im = b.convert(re, self.et), b.convert(im, self.et)
            b.store(re, buf, [i, 0], mask=ok)
            b.store(im, buf, [i, 1], mask=ok)

        self.strided(self.n, body)

    def store_row(self, buf: SSAValue, y: SSAValue, scale: float | None) -> None:
        def body(b: KernelEmitter, i: Idx, ok: SSAValue | None) -> None:
            for part in (0, 1):
                v = b.load(buf, [i, part], mask=ok)
                if scale is not None:
                    v = b.fmul(v, b.const(scale, self.et))
                b.store(v, y, [*self.index(i), part], mask=ok)

        self.strided(self.n, body)

    def stockham(self, bufs: tuple[SSAValue, SSAValue], tw: SSAValue) -> SSAValue:
        """Radix-2 Stockham stages; returns the buffer holding the result."""
        n, h = self.n, self.n // 2
        src, dst = bufs
        m = 1
        while m < n:
            self.e.barrier()

            def body(
                b: KernelEmitter, p: Idx, ok: SSAValue | None, src=src, dst=dst, m=m
            ) -> None:
                jm = b.mul(b.div(p, m), m)
                c0 = [b.load(src, [p, q], mask=ok) for q in (0, 1)]
                c1 = [b.load(src, [b.add(p, h), q], mask=ok) for q in (0, 1)]
                w = [b.load(tw, [jm, q], mask=ok) for q in (0, 1)]
                s = [b.fadd(c0[q], c1[q]) for q in (0, 1)]
                d = [b.fsub(c0[q], c1[q]) for q in (0, 1)]
                r = _cmul(b, w, d)
                o = b.add(p, jm)
                for q in (0, 1):
                    b.store(s[q], dst, [o, q], mask=ok)
                    b.store(r[q], dst, [b.add(o, m), q], mask=ok)

            self.strided(h, body)
            src, dst = dst, src
            m *= 2
        self.e.barrier()
        return src

    def direct(self, src: SSAValue, dst: SSAValue, tw: SSAValue) -> None:
        """``dst[k] = sum_j src[j] w**(j*k mod n)``, one output per lane."""
        n = self.n
        self.e.barrier()

        def body(b: KernelEmitter, k: Idx, ok: SSAValue | None) -> None:
            kk = b.index(k if ok is None else b.min(k, n - 1))  # in range for masked lanes
            zero = b.const(0.0, self.et)

            def term(c: KernelEmitter, j: SSAValue, acc: list[SSAValue]) -> list[SSAValue]:
                x = [c.load(src, [j, q]) for q in (0, 1)]
                w = [c.load(tw, [acc[2], q]) for q in (0, 1)]
                r = _cmul(c, w, x)
                nxt = c.add(acc[2], kk)
                wrapped = c.select(c.lt(nxt, n), nxt, c.sub(nxt, n))
                return [c.fadd(acc[0], r[0]), c.fadd(acc[1], r[1]), wrapped]

            re, im, _ = b.for_(0, n, 1, [zero, zero, b.index(0)], term)
            b.store(re, dst, [k, 0], mask=ok)
            b.store(im, dst, [k, 1], mask=ok)

        self.strided(n, body)
        self.e.barrier()


def _cmul(e: KernelEmitter, a: Sequence[SSAValue], b: Sequence[SSAValue]) -> list[SSAValue]:
    """``a * b`` for complex numbers given as (real, imaginary)."""
    re = e.fsub(e.fmul(a[0], b[0]), e.fmul(a[1], b[1]))
    im = e.fadd(e.fmul(a[0], b[1]), e.fmul(a[1], b[0]))
    return [re, im]


def _is_pow2(n: int) -> bool:
    return n & (n - 1) == 0


def _transform(
    lw: _FunctionLowering,
    op: g.FFTOp | g.FFT2dOp,
    x: SSAValue,
    y: SSAValue,
    axis: int,
    complex_in: bool,
) -> None:
    """Launch one kernel transforming every length-``n`` line along ``axis`` of ``x``
    into ``y`` (``memref<S x 2 x fT>``)."""
    shape = g.shape_of(op.result)
    rt = op.result.type
    assert isinstance(rt, TensorType) and isinstance(rt.element_type, ComplexType)
    et = rt.element_type.element_type
    n = shape[axis]
    lines = 1
    for k, d in enumerate(shape):
        if k != axis:
            lines *= d
    if lines == 0 or n == 0:
        return
    ebytes = 8 if isinstance(et, Float64Type) else 4
    if 2 * n * 2 * ebytes > SHARED_BYTES_LIMIT:
        raise not_lowered(
            op, f"length {n} along axis {axis}: two {n}x2 {et} shared buffers exceed "
            f"{SHARED_BYTES_LIMIT} bytes (limit {SHARED_BYTES_LIMIT // (4 * ebytes)})"
        )
    inverse = op.inverse is not None
    pow2 = _is_pow2(n)
    tw = _twiddles(lw, n, inverse, et)
    group = _group(n // 2 if pow2 else n)
    scale = 1.0 / n if inverse and n > 1 else None

    def build(e: KernelEmitter, args: list[SSAValue]) -> None:
        y_ref, x_ref, tw_ref = args
        t = _Transform(e, shape, axis, et, group, complex_in)
        a = e.op(tt.AllocSharedOp([n, 2], et))
        b = e.op(tt.AllocSharedOp([n, 2], et))
        t.load_row(x_ref, a)
        if pow2:
            res = t.stockham((a, b), tw_ref)
        else:
            t.direct(a, b, tw_ref)
            res = b
        t.store_row(res, y_ref, scale)

    tag = op.name.split(".")[1]
    lw.kernel(tag, [y, x, tw], group, [lines, 1, 1], build)


def lower_fft(lw: _FunctionLowering, op: g.FFTOp | g.FFT2dOp) -> None:
    """``tgraph.fft`` (last axis) and ``tgraph.fft2d`` (last two axes), forward or
    inverse, of f32 / f64 / complex input; see the module docstring."""
    shape = g.shape_of(op.result)
    el = g.elem_of(op.result)
    assert isinstance(el, ComplexType)
    if not isinstance(el.element_type, Float32Type | Float64Type):
        raise not_lowered(op, f"element type {el}")
    complex_in = isinstance(g.elem_of(op.input), ComplexType)
    out = lw.alloc(op.result.type)
    x = lw.mem(op.input)
    r = len(shape)
    if isinstance(op, g.FFT2dOp):
        tmp = lw.alloc(op.result.type)
        _transform(lw, op, x, tmp, r - 1, complex_in)
        _transform(lw, op, tmp, out, r - 2, True)
    else:
        _transform(lw, op, x, out, r - 1, complex_in)
    lw.env[op.result] = out

