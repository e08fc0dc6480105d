"""``fuse-matmul-epilogue`` keeps a program's meaning bit for bit: random chains of a
matmul (either operand transposed), a bias of several broadcasts, an activation, a
reshape splitting the product's rows, a residual add (either operand order) and a cast,
run on the CPU reference with the pass and without it, must give the same bits."""

from __future__ import annotations

import random

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.options import DEFAULT_GRAPH_PASSES, CompileOptions

UNFUSED = CompileOptions(
    graph_passes=tuple(p for p in DEFAULT_GRAPH_PASSES if p != "fuse-matmul-epilogue"))
DTYPES = {"f32": (np.float32, ts.f32), "bf16": (ml_dtypes.bfloat16, ts.bf16),
          "f64": (np.float64, ts.f64)}


def _case(seed: int):
    """``(function, arguments, description)`` of one random chain."""
    r = random.Random(seed)
    np_t, ts_t = DTYPES[r.choice(list(DTYPES))]
    b, s, k, n = r.randint(1, 3), r.randint(1, 9), r.randint(1, 24), r.randint(1, 21)
    m = b * s
    ta, tb = r.random() < 0.3, r.random() < 0.5
    bias = r.choice([None, (n,), (m, n), (1, n), (m, 1)])
    act = r.choice([None, "relu", "gelu", "silu"])
    split = r.random() < 0.5
    out_shape = (b, s, n) if split else (m, n)
    bias_at_split = split and bias in ((n,), (m, n)) and r.random() < 0.5
    if bias_at_split:  # the bias added after the reshape, in its shape
        bias = (1, 1, n) if bias == (n,) else out_shape
    residual = r.choice([None, "left", "right"])
    cast = r.choice([None, None, "bf16", "f32"])
    rng = np.random.default_rng(seed)

    def arr(shape):
        return rng.standard_normal(shape).astype(np_t)

    args = [arr((k, m) if ta else (m, k)), arr((n, k) if tb else (k, n))]
    if bias is not None:
        args.append(arr(bias))
    if residual is not None:
        args.append(arr(out_shape))

    def fn(a, w, *more):
        y = ts.matmul(a, w, transpose_a=ta, transpose_b=tb)
        it = iter(more)
        if bias is not None and not bias_at_split:
            y = y + next(it)
        if split:
            y = ts.reshape(y, out_shape)
        if bias_at_split:
            y = y + next(it)
        if act is not None:
            y = getattr(ts, act)(y)
        if residual == "left":
            y = next(it) + y
        elif residual == "right":
            y = y + next(it)
        if cast is not None:
            y = ts.cast(y, DTYPES[cast][1])
        return y

    desc = (f"{np.dtype(np_t).name} {m}x{k}x{n} ta={ta} tb={tb} bias={bias} "
            f"split={split} act={act} residual={residual} cast={cast}")
    return fn, args, desc


@pytest.mark.parametrize("seed", range(120))
def test_fused_and_unfused_give_the_same_bits(seed: int) -> None:
    fn, args, desc = _case(seed)
    fused = ts.jit(fn)
    got = np.asarray(fused(*args))
    want = np.asarray(ts.jit(fn, options=UNFUSED)(*args))
    assert got.dtype == want.dtype and got.shape == want.shape, desc
    assert got.tobytes() == want.tobytes(), desc


def test_the_random_chains_take_every_epilogue_step() -> None:
    """The cases above reach the fused op with a residual, through the reshape, too."""
    seen: set[str] = set()
    for seed in range(48):
        fn, args, _ = _case(seed)
        spec = ts.jit(fn).specialize(*args)
        text = str(spec.ir("graph"))
        if "tgraph.matmul_epilogue" in text:
            seen.add("epilogue")
            seen |= {w for w in ("residual", "bias", "activation") if f" {w} " in text}
            if "residual" in text and "tgraph.reshape" in text:
                seen.add("split residual")
    assert seen >= {"epilogue", "residual", "bias", "activation", "split residual"}, seen
