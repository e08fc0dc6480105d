"""Philox4x32-10, the counter-based random number generator of Salmon et al. (SC'11).

Vectorised in numpy. A counter is four 32-bit words and a key two; each
(counter, key) pair maps to four independent 32-bit outputs, so the stream is
reproducible from the key and random-accessible by counter, which is what
stochastic rounding needs to give identical results on CPU and GPU whatever
order the elements are processed in.

Stochastic rounding uses one counter per element: element ``i`` of a cast with
``seed`` and ``offset`` uses counter ``(offset + i) mod 2**64`` split into
``(low word, high word, 0, 0)``, key ``(seed mod 2**32, (seed >> 32) mod 2**32)``,
and the first output word.
"""

from __future__ import annotations

import numpy as np

PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
ROUNDS = 10

_MASK32 = np.uint64(0xFFFFFFFF)


def _mulhilo(m: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """High and low 32-bit words of the 64-bit product ``m * x`` (``x`` holds uint32 values)."""
    prod = np.uint64(m) * x.astype(np.uint64)
    return prod >> np.uint64(32), prod & _MASK32


def philox4x32(
    counter: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    key: tuple[int, int],
    rounds: int = ROUNDS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Apply Philox4x32 with ``rounds`` rounds to counters (four broadcastable uint32 arrays).

    Returns four uint32 arrays of the broadcast shape.
    """
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) & _MASK32 for c in counter)
    c0, c1, c2, c3 = np.broadcast_arrays(c0, c1, c2, c3)
    k0 = int(key[0]) & 0xFFFFFFFF
    k1 = int(key[1]) & 0xFFFFFFFF
    for r in range(rounds):
        if r:
            k0 = (k0 + PHILOX_W0) & 0xFFFFFFFF
            k1 = (k1 + PHILOX_W1) & 0xFFFFFFFF
        hi0, lo0 = _mulhilo(PHILOX_M0, c0)
        hi1, lo1 = _mulhilo(PHILOX_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
    return tuple(c.astype(np.uint32) for c in (c0, c1, c2, c3))  # type: ignore[return-value]


def key_from_seed(seed: int) -> tuple[int, int]:
    """The Philox key (two 32-bit words) for a 64-bit seed."""
    s = int(seed) & 0xFFFFFFFFFFFFFFFF
    return s & 0xFFFFFFFF, s >> 32


def uniform_bits(n: int, seed: int, offset: int = 0) -> np.ndarray:
    """``n`` random uint32 words: element ``i`` is word 0 of Philox at counter ``offset + i``."""
    idx = (np.arange(n, dtype=np.uint64) + np.uint64(int(offset) & 0xFFFFFFFFFFFFFFFF))
    lo = idx & _MASK32
    hi = idx >> np.uint64(32)
    zero = np.zeros((), dtype=np.uint64)
    return philox4x32((lo, hi, zero, zero), key_from_seed(seed))[0]
