"""The guide's first tile kernel (Chapter 2.1): ``y = alpha * x + y``.

The guide writes ``y: mut f32[n]``, which Python cannot parse; in a ``.py``
file the same annotation is ``mut[f32[n]]`` (or the string ``"mut f32[n]"``).
``SAXPY_GUIDE_TEXT`` is the guide's text, compiled verbatim with
``ts.kernel.from_source``.
"""

from __future__ import annotations

import numpy as np

import tessera as ts
from tessera import f32, kernel, mut, tile


@kernel
def saxpy(x: f32[n], y: mut[f32[n]], alpha: f32):  # noqa: F821
    i = tile.linear_id()
    if i < n:  # noqa: F821
        y[i] = alpha * x[i] + y[i]


SAXPY_GUIDE_TEXT = """
@kernel
def saxpy(x: f32[n], y: mut f32[n], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]
"""

saxpy_from_guide = ts.kernel.from_source(SAXPY_GUIDE_TEXT, file=__file__)


def reference(x: np.ndarray, y: np.ndarray, alpha: float) -> np.ndarray:
    return (np.float32(alpha) * x + y).astype(np.float32)


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1000).astype(np.float32)
    y = rng.standard_normal(1000).astype(np.float32)
    want = reference(x, y, 2.5)
    saxpy(x, y, 2.5)
    print("max error:", float(np.abs(y - want).max()))
    print(saxpy.inspect_ir("tile"))
