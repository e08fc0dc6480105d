"""Work-sharing ``ts.tile.range`` (tessera/frontend/kernel_worksharing.py): the guide's
``process_chunks`` splits its chunk loop across tiles and its element loop across the
lanes of a tile; a lone shared loop splits across the grid; loops that carry values,
synchronize, depend on the lane or sit in divergent control flow stay per-lane. And
``prefetch=n`` pipelines cp.async n deep (``wait_group n-1``). Each change is seen in the
Tile IR and the PTX (ptxas-checked) while the Tile IR interpreter's results stay equal."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera.runtime import ptxas

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "kernels"))

import process_chunks as pc  # noqa: E402

RNG = np.random.default_rng(17)
needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")


def loops(ir: str) -> list[str]:
    """The ``tessera.shared_by`` of each scf.for, in order of their closing braces."""
    return re.findall(r"\}(?: \{tessera.shared_by = \"(\w+)\"\})?\n", ir.split("ttile.return")[0])


@pytest.mark.parametrize("n", [300, 128, 1, 257])
def test_process_chunks_shares_chunks_and_elements(n):
    x = RNG.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    pc.process_chunks(x, out)
    np.testing.assert_array_equal(out, pc.reference(x))
    for grid in (1, 2, 7):  # any grid: the chunks go round the tiles
        out2 = np.full(n, np.nan, np.float32)
        pc.process_chunks(x, out2, grid=grid)
        np.testing.assert_array_equal(out2, out)


def test_process_chunks_ir_ptx_and_grid():
    tile = pc.process_chunks.inspect_ir("tile", N=300)
    assert 'tessera.shared_by = "tiles"' in tile and 'tessera.shared_by = "lanes"' in tile
    # chunk loop: lb = 0 + tile_id * 128, step = 128 * num_tiles; element loop: + local_id
    assert re.search(r"arith.muli %\d+, %\d+ : index\n.*arith.addi", tile)
    assert "ttile.local_id" in tile and "ttile.num_tiles x" in tile
    if ptxas.find_ptxas() is not None:
        ptx = pc.process_chunks.inspect_ir("ptx")
        assert "%ctaid.x" in ptx and "%nctaid.x" in ptx and "%tid.x" in ptx
        ptxas.check(ptx)


SRC = """
@ts.kernel
def k(x: ts.Tensor["N", ts.f32], y: ts.Tensor["N", ts.f32]):
{body}
"""


def kernel(body: str):
    return ts.kernel.from_source(SRC.format(body=body), {"ts": ts})


CASES = {
    # a lone shared loop: the whole grid
    "grid": ("    for i in ts.tile.range(0, N):\n        y[i] = 2.0 * x[i] + 1.0\n", ["grid"]),
    # carries acc: every lane runs every iteration
    "carried": ("    acc = 0.0\n    for i in ts.tile.range(0, N):\n        acc += x[i]\n"
                "    y[0] = acc\n", [None]),
    # lane-dependent bounds (the guide's cooperative_reduction form)
    "lane_bounds": ("    for i in ts.tile.range(ts.tile.local_id(), N, ts.tile.group_size()):\n"
                    "        y[i] = x[i] * 3.0\n", [None]),
    # a barrier in the body
    "barrier": ("    for i in ts.tile.range(0, N):\n        y[i] = x[i] - 1.0\n"
                "        ts.tile.barrier()\n", [None]),
    # inside an if whose lanes may diverge
    "divergent": ("    if ts.tile.local_id() < 200:\n        for i in ts.tile.range(0, N):\n"
                  "            y[i] = x[i] * x[i]\n", [None]),
    # a plain range is never shared
    "range": ("    for i in range(0, N):\n        y[i] = x[i] + 2.0\n", [None]),
}
WANT = {
    "grid": lambda x: 2 * x + 1, "carried": None, "lane_bounds": lambda x: x * 3,
    "barrier": lambda x: x - 1, "divergent": lambda x: x * x, "range": lambda x: x + 2,
}


@pytest.mark.parametrize("case", list(CASES))
def test_which_loops_are_shared(case):
    body, shared = CASES[case]
    k = kernel(body)
    n = 333
    x = RNG.standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    k(x, y)
    if WANT[case] is None:
        np.testing.assert_allclose(y[0], x.astype(np.float64).sum(), rtol=1e-4)
    else:
        np.testing.assert_allclose(y, WANT[case](x), rtol=1e-6)
    tile = k.inspect_ir("tile", N=n)
    got = re.findall(r'tessera.shared_by = "(\w+)"', tile)
    assert got == [s for s in shared if s], tile
    if ptxas.find_ptxas() is not None:
        ptxas.check(k.inspect_ir("ptx"))


AXPY = """
@ts.kernel
def axpy(X: ts.Tensor["m", ts.f16], Y: ts.Tensor["m", ts.f16], alpha: ts.f16):
    s0 = ts.tile.alloc_shared((128,), ts.f16)
    s1 = ts.tile.alloc_shared((128,), ts.f16)
    for t in ts.tile.range(0, m, 128{prefetch}):
        ts.tile.cp_async(s1, X[t:t+128])
        ts.tile.barrier()
        if t > 0:
            for i in range(ts.tile.local_id(), 128, ts.tile.group_size()):
                Y[t - 128 + i] = alpha * s0[i] + Y[t - 128 + i]
        ts.tile.barrier()
        s0, s1 = s1, s0
    ts.tile.barrier()
"""


def axpy(prefetch: str):
    return ts.kernel.from_source(AXPY.format(prefetch=prefetch), {"ts": ts})


def test_prefetch_pipelines_cp_async_and_keeps_results():
    m = 128 * 5
    X = RNG.standard_normal(m).astype(np.float16)
    Y0 = RNG.standard_normal(m).astype(np.float16)
    alpha = np.float16(0.75)
    outs, tiles = {}, {}
    for name, pf in (("none", ""), ("1", ", prefetch=1"), ("2", ", prefetch=2"),
                     ("3", ", prefetch=3")):
        k = axpy(pf)
        Y = Y0.copy()
        k(X, Y, alpha)
        outs[name] = Y
        tiles[name] = k.inspect_ir("tile", m=m)
        if ptxas.find_ptxas() is not None:
            ptx = k.inspect_ir("ptx")
            ptxas.check(ptx)
            waits = sorted(set(re.findall(r"cp.async.wait_group (\d+)", ptx)))
            assert waits == {"none": ["0"], "1": ["0"], "2": ["0", "1"], "3": ["0", "2"]}[name]
    for name in outs:  # the interpreter's results do not change
        assert outs[name].tobytes() == outs["none"].tobytes(), name
    want = Y0.astype(np.float32).copy()
    want[:-128] = alpha * X[:-128].astype(np.float32) + Y0[:-128].astype(np.float32)
    np.testing.assert_allclose(outs["none"].astype(np.float32), want, rtol=1e-3, atol=1e-3)
    # the code differs: wait_group 1 in the loop and a drain after it
    assert tiles["none"] == tiles["1"].replace(" {tessera.prefetch = 1 : i64}", "")
    assert tiles["2"] != tiles["none"]
    assert "ttile.wait_group 1" in tiles["2"] and "ttile.wait_group 1" not in tiles["none"]
    body, after = tiles["2"].split('{tessera.prefetch = 2 : i64}')
    assert "ttile.wait_group 0" in after.split("ttile.barrier")[0]  # the drain
    # a pipelined loop is never shared (its iterations hand buffers on)
    assert "tessera.shared_by" not in tiles["2"]


def test_prefetch_must_be_a_non_negative_int():
    with pytest.raises(Exception, match="prefetch must be a compile-time int >= 0"):
        axpy(", prefetch=-1").inspect_ir("tile", m=256)
