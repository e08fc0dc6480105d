"""The guide's double-buffered, autotuned ``tp_axpy`` (Chapter 2.3).

``TP_AXPY_GUIDE_TEXT`` is the guide's text, compiled verbatim with
``ts.kernel.from_source`` (``tp_axpy_from_guide``): its bare ``tshared.alloc``
buffers take the shape and dtype of the ``cp_async`` windows copied into them
(``f16[128]``). Its ``for i in range(128)`` runs on every lane, which the
lockstep interpreter runs correctly and a GPU runs as a race, so the ``.py``
version below changes it.

Changes from the guide in the ``.py`` version:

* the buffers are ``tshared.alloc[f16](128)``, the spelling of the guide's
  GEMM snippet (the inferred shape, written out).
* ``cp_async.shared.global`` is a syntax error in Python (``global`` is a
  keyword): the attribute is ``global_`` in ``.py`` files
  (``ts.kernel.from_source`` accepts ``.global``).
* The guide's ``for i in range(128)`` runs on every lane, so every lane
  read-modify-writes the same ``Y`` elements (a race on a real GPU); here the
  lanes share the elements: ``range(tile.local_id(), 128, tile.group_size())``.
  A ``tbarrier()`` before the swap keeps a buffer from being refilled while
  another warp still reads it.

As in the guide, the chunk loaded by the last iteration is not consumed: the
kernel updates ``Y[:128 * (ceil(m / 128) - 1)]`` (see :func:`reference`).
``BM`` and ``stages`` are searched by the autotuner; the kernel body does not
use them (as in the guide).
"""

from __future__ import annotations

import numpy as np

import tessera as ts
from tessera import cp_async, f16, kernel, mut, tbarrier, tile, tshared


@kernel.autotune(space=dict(BM=[128, 256], stages=[2, 3]))
def tp_axpy(X: f16[m], Y: mut[f16[m]], alpha: f16):  # noqa: F821
    s0 = tshared.alloc[f16](128)
    s1 = tshared.alloc[f16](128)
    for t in tile.range(m, step=128, prefetch=2):  # noqa: F821
        cp_async.shared.global_(s1, X[t:t+128])
        tbarrier()
        if t > 0:
            for i in range(tile.local_id(), 128, tile.group_size()):
                yv = alpha * s0[i] + tile.load(Y, index=t-128+i)
                tile.store(Y, index=t-128+i, value=yv)
        tbarrier()
        s0, s1 = s1, s0
    tbarrier()


TP_AXPY_GUIDE_TEXT = """
@kernel.autotune(space=dict(BM=[128,256], stages=[2,3]))
def tp_axpy(X: f16[m], Y: mut f16[m], alpha: f16):
    s0 = tshared.alloc
    s1 = tshared.alloc
    for t in tile.range(m, step=128, prefetch=2):
        cp_async.shared.global(s1, X[t:t+128])
        tbarrier()
        if t > 0:
            for i in range(128):
                yv = alpha * s0[i] + tile.load(Y, index=t-128+i)
                tile.store(Y, index=t-128+i, value=yv)
        s0, s1 = s1, s0
    tbarrier()
"""

tp_axpy_from_guide = ts.kernel.from_source(TP_AXPY_GUIDE_TEXT, file=__file__)


def reference(X: np.ndarray, Y: np.ndarray, alpha: float) -> np.ndarray:
    out = Y.copy()
    m = X.shape[0]
    a = np.float16(alpha)
    for t in range(128, m, 128):
        lo = t - 128
        prod = (np.float32(a) * X[lo:t].astype(np.float32)).astype(np.float16)
        out[lo:t] = (prod.astype(np.float32) + out[lo:t].astype(np.float32)).astype(np.float16)
    return out
