"""Plans of the kernels that compute one batch of 1-D discrete Fourier transforms.

A transform of length ``n`` along one axis of a tensor sees the data as
``[outer, n, batch]`` (``batch``: the product of the dims after the axis, 1 for the
last axis). :func:`plan_axis` turns that into a list of :class:`TilePass` es, each one
kernel whose tiles hold ``lines`` transform lines of ``size`` points in shared memory:

* **In shared memory** (``size`` points fit: :func:`max_points`): one pass, a
  mixed-radix Stockham transform (:func:`radices`) on every line.
* **Four-step** (``n = n1 * n2`` too long for one tile, every prime factor at most
  :data:`MAX_RADIX`): with ``j = n2 j1 + j2`` and ``k = k1 + n1 k2``,
  ``X[k] = sum_j2 w_n**(j2 k1) w_n2**(j2 k2) sum_j1 x[j] w_n1**(j1 k1)``. Pass 1 does
  the ``n1``-point transforms along ``j1`` (a "column" of the ``[n1, n2]`` view of the
  line, ``n2`` adjacent columns per tile) and multiplies by ``w_n**(j2 k1)`` as it
  stores (:attr:`TilePass.twiddle`); pass 2 does the ``n2``-point transforms along
  ``j2`` (rows) and stores ``X[k1 + n1 k2]``, adjacent ``k1`` from adjacent lines of
  the tile, so both passes read and write whole segments of memory.
* **Bluestein** (a prime factor above :data:`MAX_RADIX`): with
  ``jk = (j**2 + k**2 - (k - j)**2) / 2`` and the chirp ``c[j] = w**(j**2 / 2)``,
  ``X[k] = c[k] sum_j (x[j] c[j]) conj(c[k - j])``: a circular convolution of length
  ``m`` (the power of two ``>= 2n - 1``) computed as ``ifft_m(fft_m(x c) * fft_m(conj c))``.
  The transform of ``conj c`` (times ``1/m``) is a constant table computed in float64.
  One tile when ``m`` points fit (:class:`ConvolveLoop`), else seven kernels (chirp,
  forward four-step, product, inverse four-step, chirp) through two temporaries of
  ``m`` points per line.

A :class:`View` maps (line, point) of a pass to a flat element of a buffer, so the
same kernel reads rows, columns of a 2-D transform and the transposed views of the
four-step without copies. Everything here is Python on integers and float64 numpy
tables; :mod:`tessera.passes.tile_fft_kernel` builds the kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import numpy as np

SHARED_BYTES_LIMIT = 32 * 1024
"""Shared memory of one tile: one buffer of ``lines x size`` complex points."""

MAX_GROUP = 256
"""Most lanes per tile."""

MAX_RADIX = 13
"""Largest prime factor done as one radix stage (a DFT in registers); larger ones go
through Bluestein."""

COLUMN_LINES = 64
"""Most lines per tile when adjacent lines are adjacent in memory (columns)."""


def max_points(ebytes: int) -> int:
    """Most points of one line in shared memory (complex values of ``ebytes`` parts)."""
    return SHARED_BYTES_LIMIT // (2 * ebytes)


def factor(n: int) -> list[int]:
    """Prime factors of ``n``, ascending."""
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def smooth(n: int) -> bool:
    """Whether every prime factor of ``n`` is at most :data:`MAX_RADIX`."""
    return all(p <= MAX_RADIX for p in factor(n))


def radices(n: int) -> tuple[int, ...]:
    """Stage radices of a smooth ``n`` (largest first): the power of two as radix-8
    stages with a radix-4 or two for the remainder (``2**10 = 8*8*4*4``), each other
    prime factor one stage. ``n = 1``: no stage."""
    fs = factor(n)
    a = fs.count(2)
    twos: list[int] = [8] * (a // 3)
    if a % 3 == 1:
        twos = twos[:-1] + [4, 4] if twos else [2]
    elif a % 3 == 2:
        twos.append(4)
    odd = sorted((p for p in fs if p != 2), reverse=True)
    return tuple(sorted(twos + odd, reverse=True))


@dataclass(frozen=True)
class View:
    """Where point ``k`` of line ``L`` of a pass lies in a flat buffer of complex values:
    ``L = (o * sub + s) * batch + b`` and the element is
    ``((o * n + k) * sub + s) * batch + b``. ``n``: the points of a line in memory
    (points ``k >= n`` are zeros when read and dropped when written)."""

    n: int
    sub: int = 1
    batch: int = 1

    @property
    def rowlike(self) -> bool:
        """Consecutive points of a line are consecutive in memory (else consecutive lines
        are)."""
        return self.sub * self.batch == 1


@dataclass(frozen=True)
class Stages:
    """A Stockham transform of ``size`` points, ``sign`` -1 (forward) or +1 (unscaled
    inverse)."""

    sign: int


@dataclass(frozen=True)
class Multiply:
    """Multiply point ``k`` of every line by ``table[k]`` (complex, float64)."""

    table: np.ndarray = field(compare=False)
    key: tuple = ()


@dataclass(frozen=True)
class ConvolveLoop:
    """Bluestein's convolution in one tile as a loop of two identical iterations
    ``x = conj(fft_m(x) * table[it*m + k])``, ``it = 0, 1``: with ``table`` the kernel's
    transform then the conjugated final chirp, the first iteration makes
    ``conj(fft(a) K)``, whose forward transform conjugated is ``m ifft(fft(a) K)``, and
    the second multiplies that by the chirp. One copy of the stages' code (a forward
    transform both times) keeps the kernel small and its registers few."""

    table: np.ndarray = field(compare=False)
    key: tuple = ()


@dataclass
class TilePass:
    """One kernel: ``lines`` lines of ``size`` points, ``per_tile`` lines per tile, read
    from buffer ``src`` through ``src_view``, transformed by ``steps`` in shared memory,
    multiplied by ``w_(size*sub)**(s*k)`` when ``twiddle`` (``s`` the line's ``sub``
    index in ``dst_view``, the four-step twiddle) and by ``scale``, written to ``dst``
    through ``dst_view``. Buffers: ``"in"``, ``"out"``, ``"t0"``, ``"t1"``."""

    size: int
    lines: int
    src: str
    src_view: View
    dst: str
    dst_view: View
    steps: list[Stages | Multiply | ConvolveLoop]
    twiddle: int = 0  # the four-step sign (0: none)
    scale: float | None = None
    per_tile: int = 1

    def radix_list(self) -> tuple[int, ...]:
        return radices(self.size) if any(
            isinstance(s, Stages | ConvolveLoop) for s in self.steps) else ()

    def group(self) -> int:
        """Lanes of a tile: one per butterfly of the stage with the most (the smallest
        radix; one per point without stages), a multiple of 32, at most
        :data:`MAX_GROUP` (more butterflies: several per lane, unrolled)."""
        rs = self.radix_list()
        work = self.per_tile * self.size // (min(rs) if rs else 1)
        return min(MAX_GROUP, max(32, -(-work // 32) * 32))


@dataclass
class AxisPlan:
    """The passes of one axis transform and the points of its temporaries."""

    passes: list[TilePass]
    temp_points: int = 0  # points of each of "t0" / "t1" (0: none)


def _per_tile(p: TilePass, ebytes: int) -> int:
    cap = max(1, max_points(ebytes) // p.size)
    rs = p.radix_list()
    if p.src_view.rowlike and p.dst_view.rowlike:
        lanes = max(1, p.size // (min(rs) if rs else 1))
        want = max(1, MAX_GROUP // lanes)
    else:
        want = COLUMN_LINES
    t = min(cap, want, p.lines)
    return 1 << (t.bit_length() - 1)  # a power of two: shifts, not divisions


def chirp(n: int, sign: int) -> np.ndarray:
    """``c[j] = exp(sign * pi i j**2 / n)``; ``j**2`` reduced mod ``2n`` in integers."""
    j = np.arange(n, dtype=np.int64)
    e = (j * j) % (2 * n)
    return np.exp(sign * 1j * np.pi * e.astype(np.float64) / n)


def bluestein_length(n: int) -> int:
    return 1 << (2 * n - 2).bit_length()


def bluestein_kernel(n: int, sign: int) -> np.ndarray:
    """``fft_m(conj(c) wrapped to length m) / m``: the convolution's constant factor."""
    m = bluestein_length(n)
    c = chirp(n, sign)
    b = np.zeros(m, dtype=np.complex128)
    b[:n] = np.conj(c)
    b[m - n + 1:] = np.conj(c[1:])[::-1]
    return np.fft.fft(b) / m


def four_step_split(n: int, limit: int) -> tuple[int, int] | None:
    """``(n1, n2)`` with ``n = n1 n2 ``, both at most ``limit``, ``n1 <= n2`` as close to
    ``sqrt(n)`` as the divisors allow (so both passes hold many lines per tile: long
    contiguous segments); None when there is none."""
    best = None
    for n1 in range(2, int(n**0.5) + 1):
        if n % n1 == 0 and n // n1 <= limit:
            best = (n1, n // n1)
    return best


def plan_axis(n: int, outer: int, batch: int, sign: int, scale: float | None,
              ebytes: int) -> AxisPlan:
    """Passes transforming the ``outer * batch`` lines of ``n`` points of buffer
    ``"in"`` (viewed ``[outer, n, batch]``) into ``"out"`` (same view); ``sign`` -1
    forward, +1 inverse; every output times ``scale``. Raises ValueError when ``n``
    is too long."""
    limit = max_points(ebytes)
    lines = outer * batch
    io = View(n, 1, batch)
    if smooth(n) and n <= limit:
        passes = [TilePass(n, lines, "in", io, "out", io, [Stages(sign)], scale=scale)]
        temp = 0
    elif smooth(n):
        split = four_step_split(n, limit)
        if split is None:
            raise ValueError(f"length {n} has no split n1 * n2 with both at most {limit}")
        passes, temp = _four_step(n, split, outer, batch, "in", io, "out", sign, scale), n * lines
    else:
        m = bluestein_length(n)
        c = chirp(n, sign)
        cpad = np.zeros(m, dtype=np.complex128)
        cpad[:n] = c
        kern = bluestein_kernel(n, sign)
        post = c * (1.0 if scale is None else scale)
        pre_s = Multiply(cpad, ("chirp", n, sign))
        mid_s = Multiply(kern, ("bluestein", n, sign))
        post_s = Multiply(np.concatenate([post, np.zeros(m - n)]), ("chirp", n, sign, scale))
        if m <= limit:
            loop = ConvolveLoop(np.concatenate([kern, np.conj(post_s.table)]),
                                ("convolve", n, sign, scale))
            steps: list[Stages | Multiply | ConvolveLoop] = [pre_s, loop]
            passes = [TilePass(m, lines, "in", io, "out", View(n, 1, batch), steps)]
            temp = 0
        else:
            split = four_step_split(m, limit)
            if split is None:
                raise ValueError(f"length {n} needs a Bluestein convolution of {m} points, "
                                 f"more than {limit} * {limit}")
            rows = View(m)
            passes = [TilePass(m, lines, "in", io, "t0", rows, [pre_s])]
            passes += _four_step(m, split, lines, 1, "t0", rows, "t1", -1, None, via="t0")
            # the forward transform is in t1; the product in place
            passes.append(TilePass(m, lines, "t1", rows, "t1", rows, [mid_s]))
            passes += _four_step(m, split, lines, 1, "t1", rows, "t0", 1, None, via="t1")
            passes.append(TilePass(m, lines, "t0", rows, "out", io, [post_s]))
            temp = m * lines
    for p in passes:
        p.per_tile = _per_tile(p, ebytes)
    return AxisPlan(passes, temp)


def _four_step(n: int, split: tuple[int, int], outer: int, batch: int, src: str,
               src_view: View, dst: str, sign: int, scale: float | None,
               via: str = "t0") -> list[TilePass]:
    """The two passes of a four-step transform of ``[outer, n, batch]`` lines from
    ``src`` into ``dst`` through ``via`` (a temporary laid out ``[outer, n1, n2, batch]``).
    ``src_view`` is how ``src`` holds the lines (``View(n, 1, batch)``)."""
    n1, n2 = split
    lines = outer * batch
    assert src_view.sub == 1 and src_view.n == n
    p1 = TilePass(n1, lines * n2, src, View(n1, n2, batch), via, View(n1, n2, batch),
                  [Stages(sign)], twiddle=sign)
    p2 = TilePass(n2, lines * n1, via, View(n2, 1, batch), dst, View(n2, n1, batch),
                  [Stages(sign)], scale=scale)
    return [p1, p2]


def twiddle_tables(n: int, sign: int) -> tuple[int, np.ndarray, np.ndarray]:
    """``(q, hi, lo)`` with ``w_n**e = hi[e // q] * lo[e % q]`` for ``e < n``, ``q`` a
    power of two near ``sqrt(n)``: the four-step twiddles from two short tables."""
    q = 1 << max(0, (n - 1).bit_length() + 1) // 2
    hi = np.exp(sign * 2j * np.pi * (np.arange(-(-n // q)) * q % n) / n)
    lo = np.exp(sign * 2j * np.pi * np.arange(q) / n)
    return q, hi, lo


def line_count(shape: list[int], axis: int) -> tuple[int, int]:
    """``(outer, batch)``: the products of the dims before and after ``axis``."""
    return prod(shape[:axis]), prod(shape[axis + 1:])
