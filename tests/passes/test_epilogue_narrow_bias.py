"""A bf16/f16 bias of an f32 product in ``tgraph.matmul_epilogue`` (torch's ``addmm``
rule: the product and the bias add in f32, one rounding at the end, as cuBLASLt's
epilogue with a bias of the output type): ``fuse-matmul-epilogue`` takes the bias
before its widening cast, so no kernel widens it; the reference interpreter and the
lowered program (Tile IR interpreter) give the float64 result rounded once."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.ir import graph as g
from tessera.ir import tile as ttile
from tessera.runtime.tile_interpreter import run_host


@pytest.mark.parametrize("dt", [ml_dtypes.bfloat16, np.float16])
def test_narrow_bias_rounds_once(dt):
    low = ts.bf16 if dt is ml_dtypes.bfloat16 else ts.f16

    @ts.jit
    def linear(x, w, b):
        y = ts.matmul(x, w, transpose_b=True, out_dtype=ts.f32) + ts.cast(b, ts.f32)
        return ts.cast(y, low)

    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal(s).astype(dt) for s in ((64, 96), (80, 96)))
    b = rng.standard_normal(80).astype(dt)
    exact = x.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
    want = exact.astype(np.float32).astype(dt).astype(np.float32)
    got = linear(x, w, b)
    spec = linear._last
    (epi,) = [o for o in spec.ir("graph").walk() if isinstance(o, g.MatmulEpilogueOp)]
    assert g.elem_of(epi.bias) == g.elem_of(epi.lhs)  # read as 16 bits
    tile = spec.ir("tile")
    assert len([o for o in tile.walk() if isinstance(o, ttile.LaunchOp)]) == 1
    (lowered,) = run_host(tile, spec.name, [x, w, b])
    for r in (got, lowered):
        # f32 sums of 96 products in another order than float64's: at most a step off
        step = np.abs(want) * (2.0 ** -7 if dt is ml_dtypes.bfloat16 else 2.0 ** -10)
        assert (np.abs(r.astype(np.float32) - want) <= step + 1e-6).all()
        assert (r.astype(np.float32) == want).mean() > 0.97
