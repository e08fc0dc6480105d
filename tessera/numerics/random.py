"""Counter-based normal and Poisson samples, identical on the CPU and the GPU.

``tgraph.randn`` and ``tgraph.poisson`` draw from Philox4x32-10
(:mod:`tessera.numerics.philox`). Draw ``j`` of element ``i`` (flat C order) of an op
with ``seed`` and ``offset`` is the Philox block at

    counter = (i mod 2^32, (i >> 32) + j * 2^16, offset mod 2^32, (offset >> 32) mod 2^32)
    key     = (seed mod 2^32, (seed >> 32) mod 2^32)

so every element has its own stream whatever the launch shape (distinct for
``i < 2^48`` and ``j < 2^16``). A block's four words ``w0..w3`` give two uniforms
``(2 k + 1) / 2^53`` in ``(0, 1)`` with ``k = (wa >> 6) * 2^26 + (wb >> 6)``, one from
``(w0, w1)`` and one from ``(w2, w3)``.

The samplers below are written once against a small set of float64 scalar operations
(:class:`ScalarOps`): add, sub, mul, div, sqrt (all correctly rounded in IEEE
arithmetic, so numpy and PTX's ``.rn`` instructions agree bit for bit), comparisons,
selects, truncation to an integer and the exponent/mantissa split of a float64.
:class:`NumpyOps` runs them on numpy arrays (the Graph IR interpreter's reference);
``tessera.passes.tile_random`` emits the same operations as Tile IR, so a GPU kernel
gives bitwise the interpreter's samples. ``log`` and ``cos(2 pi t)`` are therefore
computed here from polynomials rather than taken from a math library:

* ``log(x)``: ``x = m 2^e`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` from the float64
  bits, then ``log m = 2 atanh(s)``, ``s = (m - 1) / (m + 1)``, by its series to
  ``s^23`` (``|s| <= 0.172``; truncation error below 1e-18), plus ``e ln 2``.
* ``cos(2 pi t)``, ``t`` in ``(0, 1)``: ``n = trunc(4 t + 1/2)``, ``x = (4 t - n) pi / 2``
  in ``[-pi/4, pi/4]`` (the reduction ``4 t - n`` is exact), then the Taylor series of
  ``cos x`` (to ``x^16``) or ``sin x`` (to ``x^17``) with the sign of the quadrant.

Samplers:

* :func:`normal`: Box-Muller from draw 0, ``sqrt(-2 log u1) cos(2 pi u2)``.
* :func:`poisson`: rates below 10 count the arrivals of a unit-rate Poisson process in
  ``[0, lam]`` (draw ``j`` gives the exponential gap ``-log u``, from ``(w0, w1)``), so an
  element uses ``X + 1`` draws; rates of 10 and more use Hörmann's transformed
  rejection with squeeze (PTRS, "The transformed rejection method for generating
  Poisson random variables", 1993; the algorithm of numpy's ``random_poisson_ptrs``),
  attempt ``j`` taking ``U`` from ``(w0, w1)`` and ``V`` from ``(w2, w3)``. ``log k!`` is
  a table for ``k <= 9`` and Stirling's series (numpy's ``random_loggam``) above. No
  normal approximation is involved: both methods are exact up to float64 rounding.
  Rates must be finite, ``>= 0`` and at most :data:`POISSON_MAX_RATE`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from tessera.numerics.philox import key_from_seed, philox4x32

V = TypeVar("V")

MAX_DRAWS = 1 << 16
"""Draws per element available to a sampler (``j < 2^16``)."""

POISSON_SMALL_RATE = 10.0
"""Rates below this count Poisson-process arrivals; rates at or above use PTRS."""

POISSON_MAX_RATE = float(2**52)
"""Largest supported Poisson rate (samples stay exact integers in float64)."""

K_LIMIT = float(2**53)
"""PTRS candidates above this are rejected (so truncation to an integer stays exact)."""

LN2 = math.log(2.0)
SQRT2 = math.sqrt(2.0)
HALF_PI = math.pi / 2
LOG_SERIES = [1.0 / (2 * k + 1) for k in range(12)]
"""``atanh(s) / s = sum s^(2k) / (2k + 1)``, k = 0..11."""
COS_SERIES = [(-1.0) ** k / math.factorial(2 * k) for k in range(9)]
SIN_SERIES = [(-1.0) ** k / math.factorial(2 * k + 1) for k in range(9)]
LOG_FACTORIAL = [math.lgamma(k + 1.0) for k in range(10)]
"""``log k!`` for k = 0..9 (correctly rounded float64 constants)."""
LOGGAM_SERIES = [
    8.333333333333333e-02, -2.777777777777778e-03, 7.936507936507937e-04,
    -5.952380952380952e-04, 8.417508417508418e-04, -1.917526917526918e-03,
    6.410256410256410e-03, -2.955065359477124e-02, 1.796443723688307e-01,
    -1.39243221690590e00,
]
HALF_LOG_2PI = 0.9189385332046727


class ScalarOps(Protocol, Generic[V]):
    """Float64 scalar operations on values ``V`` (numpy arrays, or Tile IR SSA values).

    Booleans are values too; ``i`` is an element index value (see the backends)."""

    def f(self, x: float) -> V: ...
    def add(self, a: V, b: V) -> V: ...
    def sub(self, a: V, b: V) -> V: ...
    def mul(self, a: V, b: V) -> V: ...
    def div(self, a: V, b: V) -> V: ...
    def sqrt(self, a: V) -> V: ...
    def absf(self, a: V) -> V: ...
    def lt(self, a: V, b: V) -> V: ...
    def le(self, a: V, b: V) -> V: ...
    def eq(self, a: V, b: V) -> V: ...
    def and_(self, a: V, b: V) -> V: ...
    def or_(self, a: V, b: V) -> V: ...
    def not_(self, a: V) -> V: ...
    def sel(self, c: V, a: V, b: V) -> V: ...
    def trunc(self, a: V) -> V:
        """Round toward zero to an integral float64 (``|a| < 2^63``)."""
        ...
    def frexp(self, a: V) -> tuple[V, V]:
        """``(m, e)`` with ``a = m 2^e``, ``m`` in ``[1, 2)`` (``a`` positive, normal)."""
        ...
    def uniforms(self, i: V, j: V) -> tuple[V, V]:
        """The two uniforms of draw ``j`` (an integral float64) of element ``i``."""
        ...
    def while_(
        self,
        state: Sequence[V],
        consts: Sequence[V],
        cond: Callable[[list[V], list[V]], V],
        body: Callable[[list[V], list[V]], list[V]],
    ) -> list[V]:
        """Per element: ``while cond(state, consts): state = body(state, consts)``."""
        ...


def _poly(o: ScalarOps[V], x: V, coeffs: Sequence[float]) -> V:
    """``sum coeffs[k] x^k`` by Horner's rule."""
    p = o.f(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        p = o.add(o.mul(p, x), o.f(c))
    return p


def log(o: ScalarOps[V], x: V) -> V:
    """Natural logarithm of a positive normal float64 (see the module docstring)."""
    m, e = o.frexp(x)
    big = o.le(o.f(SQRT2), m)
    m = o.sel(big, o.mul(m, o.f(0.5)), m)
    e = o.sel(big, o.add(e, o.f(1.0)), e)
    s = o.div(o.sub(m, o.f(1.0)), o.add(m, o.f(1.0)))
    p = _poly(o, o.mul(s, s), LOG_SERIES)
    return o.add(o.mul(e, o.f(LN2)), o.mul(o.add(s, s), p))


def cos_2pi(o: ScalarOps[V], t: V) -> V:
    """``cos(2 pi t)`` for ``t`` in ``(0, 1)``."""
    q = o.mul(t, o.f(4.0))
    n = o.trunc(o.add(q, o.f(0.5)))
    x = o.mul(o.sub(q, n), o.f(HALF_PI))
    x2 = o.mul(x, x)
    c = _poly(o, x2, COS_SERIES)
    s = o.mul(x, _poly(o, x2, SIN_SERIES))
    odd = o.or_(o.eq(n, o.f(1.0)), o.eq(n, o.f(3.0)))
    neg = o.or_(o.eq(n, o.f(1.0)), o.eq(n, o.f(2.0)))
    v = o.sel(odd, s, c)
    return o.sel(neg, o.sub(o.f(0.0), v), v)


def normal(o: ScalarOps[V], i: V) -> V:
    """A standard normal sample for element ``i`` (Box-Muller on draw 0)."""
    u1, u2 = o.uniforms(i, o.f(0.0))
    r = o.sqrt(o.mul(o.f(-2.0), log(o, u1)))
    return o.mul(r, cos_2pi(o, u2))


def log_factorial(o: ScalarOps[V], k: V) -> V:
    """``log k!`` for an integral float64 ``k >= 0``."""
    tab = o.f(LOG_FACTORIAL[-1])
    for m in range(len(LOG_FACTORIAL) - 2, -1, -1):
        tab = o.sel(o.eq(k, o.f(float(m))), o.f(LOG_FACTORIAL[m]), tab)
    x = o.add(k, o.f(1.0))
    x2 = o.div(o.f(1.0), o.mul(x, x))
    g0 = _poly(o, x2, LOGGAM_SERIES)
    series = o.sub(
        o.add(o.add(o.div(g0, x), o.f(HALF_LOG_2PI)), o.mul(o.sub(x, o.f(0.5)), log(o, x))), x
    )
    return o.sel(o.le(k, o.f(float(len(LOG_FACTORIAL) - 1))), tab, series)


def _poisson_small(o: ScalarOps[V], i: V, lam: V) -> V:
    """Arrivals of a unit-rate Poisson process in ``[0, lam]`` (for ``lam < 10``)."""
    limit = o.f(float(MAX_DRAWS))

    def cond(s: list[V], c: list[V]) -> V:
        t, j = s
        ilam, ismall = c[1], c[2]
        return o.and_(ismall, o.and_(o.le(t, ilam), o.lt(j, limit)))

    def body(s: list[V], c: list[V]) -> list[V]:
        t, j = s
        u, _ = o.uniforms(c[0], j)
        return [o.sub(t, log(o, u)), o.add(j, o.f(1.0))]

    small = o.lt(lam, o.f(POISSON_SMALL_RATE))
    _, j = o.while_([o.f(0.0), o.f(0.0)], [i, lam, small], cond, body)
    return o.sel(o.lt(o.f(0.0), j), o.sub(j, o.f(1.0)), o.f(0.0))


def _poisson_ptrs(o: ScalarOps[V], i: V, lam: V) -> V:
    """Hörmann's PTRS (for ``10 <= lam <= POISSON_MAX_RATE``)."""
    large = o.and_(o.le(o.f(POISSON_SMALL_RATE), lam), o.le(lam, o.f(POISSON_MAX_RATE)))
    # below 10 the constants are computed for lam = 10 and not used
    lam = o.sel(large, lam, o.f(POISSON_SMALL_RATE))
    slam = o.sqrt(lam)
    loglam = log(o, lam)
    b = o.add(o.f(0.931), o.mul(o.f(2.53), slam))
    a = o.add(o.f(-0.059), o.mul(o.f(0.02483), b))
    invalpha = o.add(o.f(1.1239), o.div(o.f(1.1328), o.sub(b, o.f(3.4))))
    vr = o.sub(o.f(0.9277), o.div(o.f(3.6224), o.sub(b, o.f(2.0))))
    log_invalpha = log(o, invalpha)
    limit = o.f(float(MAX_DRAWS))

    def cond(s: list[V], c: list[V]) -> V:
        _, done, j = s
        return o.and_(c[1], o.and_(o.not_(done), o.lt(j, limit)))

    def body(s: list[V], c: list[V]) -> list[V]:
        k, _, j = s
        ii, _, lam_, loglam_, a_, b_, vr_, lia = c
        u, v = o.uniforms(ii, j)
        uu = o.sub(u, o.f(0.5))
        us = o.sub(o.f(0.5), o.absf(uu))
        x = o.add(o.add(o.mul(o.add(o.div(o.add(a_, a_), us), b_), uu), lam_), o.f(0.43))
        # k = floor(x); candidates outside [0, 2^53] are rejected (k < 0 by PTRS itself,
        # k > 2^53 has probability far below 2^-1000 for rates <= 2^52)
        inrange = o.and_(o.le(o.f(0.0), x), o.le(x, o.f(K_LIMIT)))
        kf = o.trunc(o.sel(inrange, x, o.f(0.0)))
        quick = o.and_(inrange, o.and_(o.le(o.f(0.07), us), o.le(v, vr_)))
        reject = o.or_(o.not_(inrange), o.and_(o.lt(us, o.f(0.013)), o.lt(us, v)))
        lhs = o.sub(o.add(log(o, v), lia), log(o, o.add(o.div(a_, o.mul(us, us)), b_)))
        rhs = o.sub(o.mul(kf, loglam_), o.add(lam_, log_factorial(o, kf)))
        accept = o.or_(quick, o.and_(o.not_(reject), o.le(lhs, rhs)))
        return [o.sel(accept, kf, k), accept, o.add(j, o.f(1.0))]

    k, _, _ = o.while_(
        [o.f(0.0), o.lt(o.f(1.0), o.f(0.0)), o.f(0.0)],
        [i, large, lam, loglam, a, b, vr, log_invalpha],
        cond,
        body,
    )
    return k


def poisson(o: ScalarOps[V], i: V, lam: V) -> V:
    """A Poisson sample with rate ``lam`` for element ``i``; NaN for a rate that is negative,
    not finite or above :data:`POISSON_MAX_RATE`."""
    ok = o.and_(o.le(o.f(0.0), lam), o.le(lam, o.f(POISSON_MAX_RATE)))
    small = _poisson_small(o, i, lam)
    large = _poisson_ptrs(o, i, lam)
    r = o.sel(o.lt(lam, o.f(POISSON_SMALL_RATE)), small, large)
    return o.sel(ok, r, o.f(math.nan))


# --------------------------------------------------------------------------- numpy backend

_U64 = np.uint64
_MASK32 = _U64(0xFFFFFFFF)


class NumpyOps:
    """:class:`ScalarOps` on numpy arrays (float64, bool; ``i`` is a uint64 array)."""

    def __init__(self, seed: int, offset: int):
        self.key = key_from_seed(seed)
        off = int(offset) & 0xFFFFFFFFFFFFFFFF
        self.c2, self.c3 = off & 0xFFFFFFFF, off >> 32

    def f(self, x: float) -> Any:
        return np.float64(x)

    def add(self, a: Any, b: Any) -> Any:
        return np.add(a, b)

    def sub(self, a: Any, b: Any) -> Any:
        return np.subtract(a, b)

    def mul(self, a: Any, b: Any) -> Any:
        return np.multiply(a, b)

    def div(self, a: Any, b: Any) -> Any:
        return np.divide(a, b)

    def sqrt(self, a: Any) -> Any:
        return np.sqrt(a)

    def absf(self, a: Any) -> Any:
        return np.abs(a)

    def lt(self, a: Any, b: Any) -> Any:
        return np.less(a, b)

    def le(self, a: Any, b: Any) -> Any:
        return np.less_equal(a, b)

    def eq(self, a: Any, b: Any) -> Any:
        return np.equal(a, b)

    def and_(self, a: Any, b: Any) -> Any:
        return np.logical_and(a, b)

    def or_(self, a: Any, b: Any) -> Any:
        return np.logical_or(a, b)

    def not_(self, a: Any) -> Any:
        return np.logical_not(a)

    def sel(self, c: Any, a: Any, b: Any) -> Any:
        return np.where(c, a, b)

    def trunc(self, a: Any) -> Any:
        return np.trunc(a)

    def frexp(self, a: Any) -> tuple[Any, Any]:
        bits = np.asarray(a, np.float64).view(_U64)
        e = ((bits >> _U64(52)) & _U64(0x7FF)).astype(np.float64) - 1023.0
        m = ((bits & _U64(0xFFFFFFFFFFFFF)) | _U64(0x3FF0000000000000)).view(np.float64)
        return m, e

    def uniforms(self, i: Any, j: Any) -> tuple[Any, Any]:
        i = np.asarray(i, _U64)
        jj = np.asarray(j).astype(_U64)
        c0 = i & _MASK32
        c1 = ((i >> _U64(32)) + (jj << _U64(16))) & _MASK32
        w = philox4x32((c0, c1, np.uint64(self.c2), np.uint64(self.c3)), self.key)
        return _u53(w[0], w[1]), _u53(w[2], w[3])

    def while_(
        self,
        state: Sequence[Any],
        consts: Sequence[Any],
        cond: Callable[[list[Any], list[Any]], Any],
        body: Callable[[list[Any], list[Any]], list[Any]],
    ) -> list[Any]:
        shape = np.broadcast_shapes(*(np.shape(x) for x in (*state, *consts)))
        st = [np.broadcast_to(s, shape).copy() for s in state]
        cs = [np.broadcast_to(c, shape) for c in consts]
        active = np.asarray(cond(st, list(cs)), np.bool_)
        while active.any():
            idx = np.nonzero(active)
            sub = [s[idx] for s in st]
            csub = [c[idx] for c in cs]
            new = body(sub, csub)
            for s, v in zip(st, new):
                s[idx] = v
            active[idx] = np.asarray(cond([s[idx] for s in st], csub), np.bool_)
        return st


def _u53(wa: np.ndarray, wb: np.ndarray) -> np.ndarray:
    k = (wa >> np.uint32(6)).astype(np.float64) * 67108864.0 + (wb >> np.uint32(6)).astype(
        np.float64
    )
    return (k + 0.5) * 2.0**-52


def randn_array(shape: Sequence[int], seed: int, offset: int = 0) -> np.ndarray:
    """Float64 standard normal samples of ``shape`` (the reference of ``tgraph.randn``)."""
    n = math.prod(shape)
    with np.errstate(all="ignore"):
        z = normal(NumpyOps(seed, offset), np.arange(n, dtype=_U64))
    return np.asarray(z, np.float64).reshape(tuple(shape))


def poisson_array(lam: np.ndarray, seed: int, offset: int = 0) -> np.ndarray:
    """Float64 Poisson samples with rates ``lam`` (the reference of ``tgraph.poisson``).

    Raises ``ValueError`` for a rate that is negative, not finite or above
    :data:`POISSON_MAX_RATE`."""
    lam = np.asarray(lam, np.float64)
    if lam.size and not (np.all(lam >= 0) and np.all(lam <= POISSON_MAX_RATE)):
        raise ValueError(
            f"tgraph.poisson: rates must be finite, >= 0 and <= 2^52 (got min {np.min(lam)}, "
            f"max {np.max(lam)})"
        )
    flat = lam.reshape(-1)
    with np.errstate(all="ignore"):
        r = poisson(NumpyOps(seed, offset), np.arange(flat.size, dtype=_U64), flat)
    return np.asarray(r, np.float64).reshape(lam.shape)
