"""lower-graph-to-tile for tgraph.fft / tgraph.fft2d at the lengths of each algorithm
(tessera/passes/fft_plan.py): mixed-radix Stockham in one tile (powers of two and
lengths of factors 2, 3, 5, 7), several lines per tile, the four-step transform of
lengths over one tile's shared memory, and Bluestein's transform for large prime
factors (in one tile and through the four-step). Each lowered program runs on the Tile
IR interpreter against numpy in float64 on fresh random inputs (normwise relative error
of the order of eps * log2(n)); the planner's pieces are checked in numpy; the PTX of
each kernel kind passes ptxas."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.ir import tile as tt
from tessera.passes import fft_plan as fp
from tessera.runtime.tile_interpreter import run_host
from tests.passes.test_lower_graph_to_tile import lower
from tests.passes.test_lower_linalg_ops import (
    EPS,
    NP,
    as_complex,
    check_ptx,
    fft_text,
    graph_reference,
    rand,
)

NUMPY = {("fft", False): np.fft.fft, ("fft", True): np.fft.ifft,
         ("fft2d", False): np.fft.fft2, ("fft2d", True): np.fft.ifft2}


def rel_tol(elem: str, n: int) -> float:
    """Normwise relative error allowed: 4 eps log2(n) (about 5e-6 at n = 2**20 in f32)."""
    return 4 * EPS[elem] * max(1.0, np.log2(n))


def check(op: str, shape, elem: str, inverse: bool) -> np.ndarray:
    text = fft_text(op, shape, elem, inverse)
    x = rand(shape, elem)
    (got,) = run_host(lower(text), "f", [x])
    assert got.dtype == NP[elem] and got.shape == (*shape, 2)
    want = NUMPY[op, inverse](x.astype(np.float64))
    n = shape[-1] * (shape[-2] if op == "fft2d" else 1)
    axes = (-1,) if op == "fft" else (-2, -1)
    err = np.linalg.norm(as_complex(got) - want, axis=axes)
    assert np.all(err <= rel_tol(elem, n) * np.linalg.norm(want, axis=axes)), err.max()
    return got


# (length, batch, element type, inverse): every length in f32 and f64, one direction each
FFT_CASES = [
    (8, (3,), "f32", False), (8, (2,), "f64", True),
    (64, (5,), "f32", True), (64, (3,), "f64", False),
    (512, (3,), "f32", False), (512, (2,), "f64", True),
    (4096, (2,), "f32", True),  # one tile (4096 f32 points fit), radix 8 x 4
    (4096, (2,), "f64", False),  # four-step 64 x 64
    (2**16, (1,), "f32", False), (2**16, (1,), "f64", True),  # four-step 256 x 256
    (12, (4,), "f32", True), (12, (3,), "f64", False),
    (30, (2, 3), "f32", False), (30, (3,), "f64", True),
    (49, (3,), "f32", True), (49, (2,), "f64", False),
    (97, (3,), "f32", False), (97, (2,), "f64", True),  # Bluestein in one tile (m = 256)
    (1000, (2,), "f32", True), (1000, (2,), "f64", False),  # 8 x 5 x 5 x 5
    (1009, (2,), "f32", False),  # Bluestein in one tile (m = 2048)
    (1009, (2,), "f64", True),  # Bluestein in one tile (m = 2048)
    (1031, (2,), "f64", False),  # Bluestein through two four-step transforms (m = 4096)
    (1, (3,), "f32", True), (2, (3,), "f64", False), (143, (2,), "f32", True),  # 11 x 13
]


@pytest.mark.parametrize("n,batch,elem,inverse", FFT_CASES)
def test_fft_lengths(n, batch, elem, inverse):
    check("fft", (*batch, n), elem, inverse)


FFT2D_CASES = [
    ((2, 64, 512), "f32", False),  # columns of 64: 64 adjacent columns per tile
    ((2, 512, 16), "f64", True),  # columns of 512: 4 adjacent columns per tile
    ((2, 8, 12), "f64", True),
    ((30, 49), "f32", True),
    ((97, 12), "f64", False),  # columns by Bluestein in one tile
    ((2, 1031, 3), "f64", True),  # columns by Bluestein through the four-step
    ((4096, 4), "f32", False),
    ((4096, 3), "f64", True),  # columns by the four-step
]


@pytest.mark.parametrize("shape,elem,inverse", FFT2D_CASES)
def test_fft2d_shapes(shape, elem, inverse):
    check("fft2d", shape, elem, inverse)


@pytest.mark.parametrize("n,elem", [(64, "f32"), (30, "f64"), (97, "f32"), (4096, "f64")])
def test_complex_input_round_trips(n, elem):
    text = fft_text("fft", (2, n), elem, False, then_inverse=True)
    x = rand((2, n), elem)
    fwd, back = run_host(lower(text), "f", [x])
    want = np.fft.fft(x.astype(np.float64))
    tol = rel_tol(elem, n)
    assert np.linalg.norm(as_complex(fwd) - want) <= tol * np.linalg.norm(want)
    assert np.linalg.norm(as_complex(back) - x) <= 2 * tol * np.linalg.norm(x)
    _, ref = graph_reference(text, [x])
    assert np.linalg.norm(as_complex(back) - ref) <= 2 * tol * np.linalg.norm(x)


def test_results_are_deterministic():
    m = lower(fft_text("fft", (3, 1009), "f32", False))
    x = rand((3, 1009), "f32")
    (a,) = run_host(m, "f", [x])
    (b,) = run_host(m, "f", [x])
    assert np.array_equal(a, b)


# --------------------------------------------------------------------------- the plan


def test_radices():
    assert fp.radices(8) == (8,)
    assert fp.radices(2048) == (8, 8, 8, 4)
    assert fp.radices(1024) == (8, 8, 4, 4)
    assert fp.radices(2) == (2,)
    assert fp.radices(16) == (4, 4)
    assert fp.radices(1000) == (8, 5, 5, 5)
    assert fp.radices(143) == (13, 11)
    assert fp.radices(1) == ()
    for n in (8, 12, 30, 49, 1000, 4096, 143):
        assert int(np.prod(fp.radices(n))) == n


def test_plan_kinds():
    one = fp.plan_axis(512, 64, 1, -1, None, 4)
    assert [p.size for p in one.passes] == [512] and one.temp_points == 0
    assert one.passes[0].per_tile == 4 and one.passes[0].group() == 256  # 64 lanes a line
    four = fp.plan_axis(2**16, 1, 1, -1, None, 4)
    assert [(p.size, p.lines, p.twiddle) for p in four.passes] == [(256, 256, -1), (256, 256, 0)]
    assert four.temp_points == 2**16
    col = fp.plan_axis(512, 64, 512, -1, None, 4)  # the column pass of a 512 x 512 fft2d
    assert col.passes[0].per_tile == 8 and not col.passes[0].src_view.rowlike
    blue = fp.plan_axis(1009, 4, 1, 1, 1 / 1009, 8)  # m = 2048 f64: one tile
    assert [p.size for p in blue.passes] == [2048] and blue.temp_points == 0
    blue = fp.plan_axis(1031, 4, 1, 1, 1 / 1031, 8)  # m = 4096 f64: over one tile
    assert [p.size for p in blue.passes] == [4096, 64, 64, 4096, 64, 64, 4096]
    assert blue.temp_points == 4 * 4096
    with pytest.raises(ValueError, match="no split"):
        fp.plan_axis(2**23, 1, 1, -1, None, 8)


def test_bluestein_identity_in_numpy():
    """The tables of the Bluestein plan compute the DFT (checked in float64)."""
    rng = np.random.default_rng(3)
    for n, sign in ((97, -1), (1009, 1)):
        x = rng.standard_normal(n) + 1j * rng.standard_normal(n)
        m = fp.bluestein_length(n)
        c = fp.chirp(n, sign)
        a = np.zeros(m, dtype=np.complex128)
        a[:n] = x * c
        conv = np.fft.ifft(np.fft.fft(a) * fp.bluestein_kernel(n, sign)) * m
        got = c * conv[:n]
        want = np.fft.fft(x) if sign < 0 else np.fft.ifft(x) * n
        assert np.abs(got - want).max() < 1e-10 * np.abs(want).max()


def test_four_step_twiddle_tables():
    for n in (4096, 3 * 2**12, 2**16):
        q, hi, lo = fp.twiddle_tables(n, -1)
        e = np.arange(n)
        w = hi[e // q] * lo[e % q]
        assert np.abs(w - np.exp(-2j * np.pi * e / n)).max() < 1e-14


def test_column_pass_reads_adjacent_columns():
    m = lower(fft_text("fft2d", (2, 64, 512), "f32", False))
    kernels = [k for k in m.walk() if isinstance(k, tt.KernelOp)]
    assert [k.group_size.value.data for k in kernels] == [256, 256]
    shared = [o.result.type.get_shape() for o in m.walk() if isinstance(o, tt.AllocSharedOp)]
    assert shared == [(2, 2112), (2, 4224)]  # 4 rows of 512; 64 columns of 64 (+1/32 pad)
    launches = [o.grid_value() for o in m.walk() if isinstance(o, tt.LaunchOp)]
    assert launches == [(32, 1, 1), (16, 1, 1)]


# --------------------------------------------------------------------------- ptxas


PTX = {  # (mixed radix and complex inputs: test_lower_linalg_ops.py)
    "radix8-lines-f32": fft_text("fft", (64, 512), "f32", False),
    "fft2d-columns-f32": fft_text("fft2d", (2, 64, 40), "f32", True),
    "four-step-f32": fft_text("fft", (2, 2**13), "f32", False),
    "bluestein-one-tile-f32": fft_text("fft", (2, 97), "f32", True),
    "bluestein-four-step-f64": fft_text("fft", (2, 1031), "f64", False),
}


@pytest.mark.parametrize("name", PTX)
def test_kernels_pass_ptxas(name):
    check_ptx(PTX[name])
