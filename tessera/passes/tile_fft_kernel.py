"""The body of one FFT kernel (a :class:`~tessera.passes.fft_plan.TilePass`).

A tile takes ``T = per_tile`` consecutive lines ``L = tile_id * T + t`` of ``N = size``
points and keeps them in shared memory as two planes, ``buf[0, t*N + k]`` (real parts)
and ``buf[1, t*N + k]`` (imaginary parts), each index ``i`` padded to ``i + i / 32``
(:func:`pad`), so lanes reading consecutive points read consecutive words and the
strided writes of a stage spread over the banks; the stages work in place in that one
buffer.

* **Load.** Flat index ``f < T*N``, one per lane and step: a row-like source view
  (points of a line consecutive in memory) takes ``t, k = divmod(f, N)``, a column-like
  one ``k, t = divmod(f, T)``, so consecutive lanes touch consecutive complex values in
  either case. A complex value is one vector load of its (re, im) pair; a real input
  gets a zero imaginary part; points past the view's ``n`` and lines past ``lines`` are
  zeros.
* **Stockham stage** of radix ``R`` with ``Ns`` (the product of the radices before it):
  butterfly ``j < N/R`` of line ``t`` reads ``x[j + r N/R]`` for ``r < R``, multiplies
  them by ``w_N**(r (j mod Ns) N/(Ns R))`` (the float64 table of ``w_N**e``, rounded once),
  does the ``R``-point DFT in registers (:func:`small_dft`) and, after a barrier (every
  lane holds the values of its butterflies in registers), writes
  ``y[(j div Ns) Ns R + (j mod Ns) + r Ns]`` into the same buffer: ``log_R N`` passes
  through shared memory, two barriers each, and the result in natural order (autosort).
* **Multiply** (Bluestein's chirps and kernel): point ``k`` times ``table[k]``, in place.
* **Store**, in the order of the destination view like the load; optionally times the
  four-step twiddle ``w_(N sub)**(s k)`` (``s``: the line's ``sub`` index; from two
  short tables, :func:`~tessera.passes.fft_plan.twiddle_tables`) and a scale.

Indices inside the tile (points, shared slots, table entries) are ``i32`` (:class:`I32`),
global addresses ``index``. Every value is computed by one lane in a fixed order:
deterministic. A lane's steps
over the points are unrolled (straight-line code, no data-dependent loops), so its
global loads are all in flight before the first shared-memory store.
"""

from __future__ import annotations

import cmath
from collections.abc import Callable, Sequence

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType, IntegerAttr, VectorType, i32
from xdsl.ir import Attribute, SSAValue

from tessera.ir import tile as tt
from tessera.passes.fft_plan import (
    ConvolveLoop,
    Multiply,
    Stages,
    TilePass,
    View,
    radices,
    twiddle_tables,
)
from tessera.passes.tile_builder import Idx, KernelEmitter, cdiv

Pair = list[SSAValue]
"""A complex value as [real, imaginary]."""

TINY = 1e-12

BANKS = 32
"""Shared-memory banks (4-byte words)."""


def pass_tables(p: TilePass) -> list[tuple[tuple, np.ndarray]]:
    """The constant tables a pass's kernel reads, in argument order: ``(key, values)``
    (complex128; the key names equal tables)."""
    out: list[tuple[tuple, np.ndarray]] = []
    for s in p.steps:
        if isinstance(s, Stages):
            key = ("w", p.size, s.sign)
            if all(k != key for k, _ in out):
                e = np.arange(p.size, dtype=np.float64)
                out.append((key, np.exp(s.sign * 2j * np.pi * e / p.size)))
        elif isinstance(s, ConvolveLoop):
            key = ("w", p.size, -1)
            if all(k != key for k, _ in out):
                e = np.arange(p.size, dtype=np.float64)
                out.append((key, np.exp(-2j * np.pi * e / p.size)))
            out.append((s.key, s.table))
        else:
            out.append((s.key, s.table))
    if p.twiddle:
        n = p.size * p.dst_view.sub
        _, hi, lo = twiddle_tables(n, p.twiddle)
        out += [(("hi", n, p.twiddle), hi), (("lo", n, p.twiddle), lo)]
    return out


def cadd(b: KernelEmitter, x: Pair, y: Pair) -> Pair:
    return [b.fadd(x[0], y[0]), b.fadd(x[1], y[1])]


def csub(b: KernelEmitter, x: Pair, y: Pair) -> Pair:
    return [b.fsub(x[0], y[0]), b.fsub(x[1], y[1])]


def cmul(b: KernelEmitter, x: Pair, y: Pair) -> Pair:
    """``x * y`` (numpy's formula)."""
    re = b.fsub(b.fmul(x[0], y[0]), b.fmul(x[1], y[1]))
    im = b.fadd(b.fmul(x[0], y[1]), b.fmul(x[1], y[0]))
    return [re, im]


def _neg(b: KernelEmitter, x: SSAValue) -> SSAValue:
    return b.op(arith.NegfOp(x))


def cmul_const(b: KernelEmitter, x: Pair, w: complex, et: Attribute) -> Pair:
    """``x * w`` for a constant ``w``: free for ``+-1, +-i``; two products for
    ``|re w| = |im w|``."""
    c, s = w.real, w.imag
    if abs(s) < TINY and abs(abs(c) - 1) < TINY:
        return x if c > 0 else [_neg(b, x[0]), _neg(b, x[1])]
    if abs(c) < TINY and abs(abs(s) - 1) < TINY:  # +-i (x + iy) = -+y +- ix
        return [_neg(b, x[1]), x[0]] if s > 0 else [x[1], _neg(b, x[0])]
    if abs(abs(c) - abs(s)) < TINY:
        cc = b.const(c, et)
        if s / c > 0:  # (x + iy)(c + ic) = c(x - y) + ic(x + y)
            return [b.fmul(cc, b.fsub(x[0], x[1])), b.fmul(cc, b.fadd(x[0], x[1]))]
        return [b.fmul(cc, b.fadd(x[0], x[1])), b.fmul(cc, b.fsub(x[1], x[0]))]
    cc, ss = b.const(c, et), b.const(s, et)
    return [b.fsub(b.fmul(x[0], cc), b.fmul(x[1], ss)),
            b.fadd(b.fmul(x[0], ss), b.fmul(x[1], cc))]


def small_dft(b: KernelEmitter, v: Sequence[Pair], sign: int, et: Attribute) -> list[Pair]:
    """The DFT ``X[k] = sum_j v[j] exp(sign 2 pi i j k / R)`` of ``R = len(v)`` values in
    registers: radix-2 decimation in time for even ``R``; for odd ``R`` the direct sum
    over pairs ``j, R - j``, ``v_j w**jk + v_(R-j) w**-jk = (v_j + v_(R-j)) cos +
    sign i (v_j - v_(R-j)) sin``, so ``(R-1)**2 / 2`` real products per part."""
    r = len(v)
    if r == 1:
        return [list(v[0])]
    if r % 2 == 0:
        ev = small_dft(b, v[0::2], sign, et)
        od = small_dft(b, v[1::2], sign, et)
        h = r // 2
        out: list[Pair] = [[]] * r
        for k in range(h):
            t = cmul_const(b, od[k], cmath.exp(sign * 2j * cmath.pi * k / r), et)
            out[k] = cadd(b, ev[k], t)
            out[k + h] = csub(b, ev[k], t)
        return out
    h = (r - 1) // 2
    a = [cadd(b, v[j], v[r - j]) for j in range(1, h + 1)]
    d = [csub(b, v[j], v[r - j]) for j in range(1, h + 1)]
    x0 = list(v[0])
    for aj in a:
        x0 = cadd(b, x0, aj)
    out = [x0] + [[]] * (r - 1)
    for k in range(1, h + 1):
        re_a, im_a = v[0][0], v[0][1]
        re_d: SSAValue | None = None
        im_d: SSAValue | None = None
        for j in range(1, h + 1):
            ang = 2 * np.pi * ((j * k) % r) / r
            c, s = b.const(float(np.cos(ang)), et), b.const(float(np.sin(ang)), et)
            re_a = b.fadd(re_a, b.fmul(a[j - 1][0], c))
            im_a = b.fadd(im_a, b.fmul(a[j - 1][1], c))
            tr, ti = b.fmul(d[j - 1][0], s), b.fmul(d[j - 1][1], s)
            re_d = tr if re_d is None else b.fadd(re_d, tr)
            im_d = ti if im_d is None else b.fadd(im_d, ti)
        assert re_d is not None and im_d is not None
        # sign i (re_d + i im_d) = (-sign im_d) + i (sign re_d)
        if sign < 0:
            out[k] = [b.fadd(re_a, im_d), b.fsub(im_a, re_d)]
            out[r - k] = [b.fsub(re_a, im_d), b.fadd(im_a, re_d)]
        else:
            out[k] = [b.fsub(re_a, im_d), b.fadd(im_a, re_d)]
            out[r - k] = [b.fadd(re_a, im_d), b.fsub(im_a, re_d)]
    return out


class I32(KernelEmitter):
    """Integer arithmetic in ``i32`` (constants made ``i32``): the indices inside a tile
    (shared-memory slots, points, table entries, all below ``2**16``), so PTX computes
    them in 32-bit registers instead of emulating 64-bit ones."""

    def index(self, v: Idx) -> SSAValue:
        if isinstance(v, int):
            return self.op(arith.ConstantOp(IntegerAttr(v, i32)))
        return v


def wide(b: KernelEmitter, v: Idx) -> Idx:
    """An ``i32`` value as ``index``."""
    if isinstance(v, int) or v.type == IndexType():
        return v
    return b.op(arith.IndexCastOp(v, IndexType()))


def load_pair(b: KernelEmitter, table: SSAValue, i: Idx, ok: SSAValue | None) -> Pair:
    """Entry ``i`` of a constant ``[n, 2]`` table as one 2-element vector load."""
    v = b.op(tt.LoadVectorOp(table, [b.index(wide(b, i)), b.index(0)], 2, ok))
    return [b.extract(v, 0), b.extract(v, 1)]


def pad(b: KernelEmitter, i: Idx) -> Idx:
    """Shared-memory slot of point ``i`` of a plane: one padding word after every
    :data:`BANKS` words, so the strided writes of the first Stockham stages (stride
    ``R``) fall in distinct banks."""
    return b.add(i, b.div(i, BANKS))


def _divmod(b: KernelEmitter, x: Idx, d: int, bound: int) -> tuple[Idx, Idx]:
    """``(x // d, x % d)`` for ``0 <= x < bound`` (shifts for powers of two, 32-bit
    divisions by a constant otherwise)."""
    if d == 1:
        return x, 0
    if isinstance(b, I32):
        return b.div(x, d), b.rem(x, d)
    q, r = b.unravel(x, [max(1, cdiv(bound, d)), d])
    return q, r


class PassKernel:
    """Emits the body of the kernel of pass ``p``: arguments ``(dst, src, *tables)``."""

    def __init__(self, e: KernelEmitter, p: TilePass, et: Attribute, src_complex: bool,
                 args: list[SSAValue]):
        self.e, self.p, self.et, self.src_complex = e, p, et, src_complex
        self.dst, self.src = args[0], args[1]
        self.tables = {key: a for (key, _), a in zip(pass_tables(p), args[2:], strict=True)}
        self.T, self.N = p.per_tile, p.size
        self.group = p.group()
        self.lid = e.op(arith.IndexCastOp(e.local_id(), i32))
        self.first = e.mul(e.tile_id(), self.T)

    # ------------------------------------------------------------------ loops
    def strided(self, count: int,
                body: Callable[[KernelEmitter, Idx, SSAValue | None], Callable[[], None] | None]
                ) -> None:
        """``body(e, i, mask)`` for ``i = local_id + G*u < count`` (an ``i32``; mask None
        where every lane is in range), unrolled (at most ``4096 / G`` steps: a tile holds
        at most 4096 points), so the global loads of all steps are in flight together;
        what a body returns runs after every body (the shared-memory stores of the
        loads). ``e`` is an :class:`I32` emitter."""
        e, grp = I32(self.e.block), self.group
        later = []
        for u in range(cdiv(count, grp)):
            i = e.add(self.lid, u * grp)
            ok = None if (u + 1) * grp <= count else e.lt(i, count)
            fin = body(e, i, ok)
            if fin is not None:
                later.append(fin)
        for fin in later:
            fin()

    # ------------------------------------------------------------------ addressing
    def _split(self, b: KernelEmitter, f: Idx, view: View) -> tuple[Idx, Idx]:
        """(line in tile, point) of flat index ``f`` in the order of ``view``."""
        total = self.T * self.N
        if view.rowlike or self.T == 1:
            return _divmod(b, f, self.N, total)
        k, t = _divmod(b, f, self.T, total)
        return t, k

    def _line(self, b: KernelEmitter, t: Idx) -> Idx:
        """The line (an ``index``) of line ``t`` (``i32``) of the tile."""
        w = KernelEmitter(b.block)
        return w.add(self.first, wide(w, t))

    def address(self, b: KernelEmitter, view: View, line: Idx, k: Idx) -> Idx:
        """Flat element (an ``index``) of point ``k`` of line ``line`` in ``view``."""
        b = KernelEmitter(b.block)
        k = wide(b, k)
        lines = self.p.lines
        sb = view.sub * view.batch
        outer = cdiv(lines, sb)
        o, s, bb = b.unravel(line, [max(outer, 1) + self.T, view.sub, view.batch])
        row = b.add(b.mul(o, view.n), k)
        return b.add(b.mul(b.add(b.mul(row, view.sub), s), view.batch), bb)

    def _valid(self, b: KernelEmitter, ok: SSAValue | None, line: Idx, k: Idx,
               view: View) -> SSAValue | None:
        m = ok
        if self.p.lines % self.T:
            m = b.and_(m, KernelEmitter(b.block).lt(line, self.p.lines))
        if view.n < self.N:
            m = b.and_(m, b.lt(k, view.n))
        return m

    def sidx(self, b: KernelEmitter, t: Idx, k: Idx) -> Idx:
        return pad(b, b.add(b.mul(t, self.N), k))

    # ------------------------------------------------------------------ steps
    def load(self, buf: SSAValue) -> None:
        p, et = self.p, self.et

        def body(b: KernelEmitter, f: Idx, ok: SSAValue | None) -> Callable[[], None]:
            t, k = self._split(b, f, p.src_view)
            line = self._line(b, t)
            valid = self._valid(b, ok, line, k, p.src_view)
            a = self.address(b, p.src_view, line, k)
            g = KernelEmitter(b.block)
            if self.src_complex:
                v = g.op(tt.LoadVectorOp(self.src, [a, g.index(0)], 2, valid))
                re, im = g.extract(v, 0), g.extract(v, 1)
            else:
                re = g.load(self.src, [a], mask=valid)
                im = g.const(0.0, et)
            si = wide(g, self.sidx(b, t, k))

            def put() -> None:
                g.store(g.convert(re, et), buf, [0, si], mask=ok)
                g.store(g.convert(im, et), buf, [1, si], mask=ok)

            return put

        self.strided(self.T * self.N, body)

    def stages(self, buf: SSAValue, sign: int) -> None:
        """Mixed-radix Stockham stages in place in ``buf``: each lane loads the inputs of
        its butterflies (``ceil(T N/R / G)`` of them, unrolled) into registers, computes
        them, and after a barrier writes the outputs back."""
        N, T, et, grp = self.N, self.T, self.et, self.group
        tw = self.tables[("w", N, sign)]
        ns = 1
        for r in radices(N):
            q = N // r
            items = T * q
            g = self.e
            b = I32(g.block)
            results: list[tuple[SSAValue | None, Idx, list[Pair]]] = []
            g.barrier()
            for u in range(cdiv(items, grp)):
                i = b.add(self.lid, u * grp)
                ok = None if (u + 1) * grp <= items else b.lt(i, items)
                t, j = _divmod(b, i, q, items) if T > 1 else (0, i)
                base = b.mul(t, N)
                src = [wide(g, pad(b, b.add(base, b.add(j, rr * q)))) for rr in range(r)]
                v = [[g.load(buf, [c, src[rr]], mask=ok) for c in (0, 1)] for rr in range(r)]
                hi, jm = _divmod(b, j, ns, q) if ns > 1 else (j, 0)
                if ns > 1:
                    step = N // (ns * r)
                    for rr in range(1, r):
                        e_ = b.mul(jm, rr * step)
                        w = load_pair(g, tw, e_, ok)
                        v[rr] = cmul(g, v[rr], w)
                out = small_dft(g, v, sign, et)
                results.append((ok, b.add(b.add(base, b.mul(hi, ns * r)), jm), out))
            g.barrier()
            for ok, d, out in results:
                for rr in range(r):
                    dst = wide(g, pad(b, b.add(d, rr * ns)))
                    for c in (0, 1):
                        g.store(out[rr][c], buf, [c, dst], mask=ok)
            ns *= r

    def multiply(self, buf: SSAValue, key: tuple, offset: Idx = 0, conj: bool = False
                 ) -> None:
        """Point ``k`` times ``table[offset + k]`` (conjugated after when ``conj``)."""
        table = self.tables[key]
        self.e.barrier()

        def body(b: KernelEmitter, f: Idx, ok: SSAValue | None) -> None:
            g = KernelEmitter(b.block)
            _, k = _divmod(b, f, self.N, self.T * self.N)
            w = load_pair(g, table, b.add(offset, k), ok)
            si = wide(g, pad(b, f))
            x = [g.load(buf, [c, si], mask=ok) for c in (0, 1)]
            y = cmul(g, x, w)
            if conj:
                y = [y[0], _neg(g, y[1])]
            for c in (0, 1):
                g.store(y[c], buf, [c, si], mask=ok)

        self.strided(self.T * self.N, body)

    def convolve_loop(self, buf: SSAValue, key: tuple) -> None:
        """:class:`~tessera.passes.fft_plan.ConvolveLoop`: an ``scf.for`` of two steps."""
        outer = self.e

        def body(b: KernelEmitter, it: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            self.e = b
            self.stages(buf, -1)
            it32 = b.op(arith.IndexCastOp(it, i32))
            self.multiply(buf, key, I32(b.block).mul(it32, self.N), conj=True)
            self.e = outer
            return []

        outer.for_(0, 2, 1, [], body)

    def store(self, buf: SSAValue) -> None:
        p, et = self.p, self.et
        view = p.dst_view
        self.e.barrier()

        def body(b: KernelEmitter, f: Idx, ok: SSAValue | None) -> None:
            g = KernelEmitter(b.block)
            t, k = self._split(b, f, view)
            line = self._line(b, t)
            valid = self._valid(b, ok, line, k, view)
            si = wide(g, self.sidx(b, t, k))
            x = [g.load(buf, [c, si], mask=ok) for c in (0, 1)]
            if p.twiddle:
                n = self.N * view.sub
                q, _, _ = twiddle_tables(n, p.twiddle)
                hi_t, lo_t = self.tables[("hi", n, p.twiddle)], self.tables[("lo", n, p.twiddle)]
                s = g.unravel(line, [cdiv(p.lines, view.sub * view.batch) + self.T,
                                     view.sub, view.batch])[1]
                ex = g.mul(s, wide(g, k))  # s < sub, k < N: below n
                eh, el = _divmod(g, ex, q, n)
                w = cmul(g, load_pair(g, hi_t, eh, ok), load_pair(g, lo_t, el, ok))
                x = cmul(g, x, w)
            if p.scale is not None:
                sc = g.const(p.scale, et)
                x = [g.fmul(x[0], sc), g.fmul(x[1], sc)]
            vec = g.const(0.0, VectorType(et, [2]))
            vec = g.insert(x[1], g.insert(x[0], vec, 0), 1)
            a = self.address(b, view, line, k)
            g.emit(tt.StoreVectorOp(vec, self.dst, [a, g.index(0)], valid))

        self.strided(self.T * self.N, body)

    def build(self) -> None:
        e, et = self.e, self.et
        size = self.T * self.N
        cur = e.op(tt.AllocSharedOp([2, size + size // BANKS], et))
        self.load(cur)
        for s in self.p.steps:
            if isinstance(s, Stages):
                self.stages(cur, s.sign)
            elif isinstance(s, ConvolveLoop):
                self.convolve_loop(cur, s.key)
            else:
                assert isinstance(s, Multiply)
                self.multiply(cur, s.key)
        self.store(cur)
