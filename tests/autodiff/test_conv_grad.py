"""The convolution input gradient of :mod:`tessera.autodiff.conv_grad` (stride phases as
output channels of one stride-1 convolution of the undilated gradient) against torch's in
float64, over random configurations: stride 1-3, padding 0-3, dilation 1-2, kernels 1-7,
groups (depthwise and channel multipliers), odd sizes whose last rows the forward's
stride skipped, batches 1-3. Three ways: the construction on numpy (every plan, fast),
the ``conv2d`` adjoint through the Graph IR interpreter, and the lowered kernels of
the adjoint on the Tile IR interpreter."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from xdsl.dialects.builtin import ModuleOp

from tessera.autodiff.conv_grad import axis_plan, input_grad
from tessera.ir import graph as g
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tessera.passes.pipelines import default_context
from tessera.runtime.graph_interpreter import run_function
from tessera.runtime.tile_interpreter import run_host
from tests.autodiff.test_autodiff_linalg import assert_close, build, conv_case


class NumpyBuilder:
    """The construction's ops on float64 numpy arrays (the convolution by torch)."""

    def shape(self, x):
        return tuple(x.shape)

    def reshape(self, x, shape):
        return x.reshape(shape)

    def transpose(self, x, perm):
        return np.ascontiguousarray(x.transpose(perm))

    def reverse(self, x, dims):
        return np.flip(x, tuple(dims)) if dims else x

    def pad(self, x, axis, before, after):
        widths = [(0, 0)] * x.ndim
        widths[axis] = (before, after)
        return np.pad(x, widths)

    def take(self, x, axis, start, stop):
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(start, stop)
        return x[tuple(idx)]

    def crop(self, x, start, shape):
        return x[tuple(slice(a, a + n) for a, n in zip(start, shape))]

    def conv2d(self, x, w, padding, dilation, groups):
        t = [torch.from_numpy(np.ascontiguousarray(a)) for a in (x, w)]
        return F.conv2d(*t, padding=padding, dilation=dilation, groups=groups).numpy()

    def mask(self, x, keep):
        return np.where(keep, x, 0.0)


def random_config(rng: random.Random) -> tuple:
    """``(x shape, w shape, stride, padding, dilation, groups)``: a valid convolution."""
    while True:
        s = [rng.randint(1, 3) for _ in range(2)]
        p = [rng.randint(0, 3) for _ in range(2)]
        d = [rng.randint(1, 2) for _ in range(2)]
        k = [rng.randint(1, 7) for _ in range(2)]
        kind = rng.random()
        if kind < 0.25:  # depthwise, sometimes with a channel multiplier
            groups, cg, og = rng.randint(1, 4), 1, rng.choice([1, 1, 2])
        elif kind < 0.45:
            groups, cg, og = rng.randint(2, 3), rng.randint(1, 3), rng.randint(1, 3)
        else:
            groups, cg, og = 1, rng.randint(1, 4), rng.randint(1, 4)
        n, h, w = rng.randint(1, 3), rng.randint(1, 13), rng.randint(1, 13)
        if h + 2 * p[0] >= (k[0] - 1) * d[0] + 1 and w + 2 * p[1] >= (k[1] - 1) * d[1] + 1:
            return (n, cg * groups, h, w), (og * groups, cg, *k), s, p, d, groups


def torch_input_grad(xs, ws, s, p, d, groups, seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*xs, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.randn(*ws, dtype=torch.float64, generator=gen)
    y = F.conv2d(x, w, stride=s, padding=p, dilation=d, groups=groups)
    gy = torch.randn(y.shape, dtype=torch.float64, generator=gen)
    (dx,) = torch.autograd.grad(y, x, gy)
    return gy.numpy(), w.numpy(), dx.numpy()


@pytest.fixture
def one_thread():
    """Tiny convolutions: torch's thread pool costs more than it gives."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_construction_matches_torch_over_random_configurations(one_thread):
    rng = random.Random(2026)
    for i in range(400):
        xs, ws, s, p, d, groups = random_config(rng)
        gy, w, want = torch_input_grad(xs, ws, s, p, d, groups, i)
        got = input_grad(NumpyBuilder(), gy, w, xs[2:], s, p, d, groups)
        what = f"x {xs} w {ws} stride {s} padding {p} dilation {d} groups {groups}"
        assert got.shape == want.shape, what
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11, err_msg=what)


def test_axis_plans_of_resnet_layers():
    # 3x3/2 pad 1, 56 -> 28: both phases from one 2-tap window (not 3 taps over 56 rows)
    pl = axis_plan(56, 28, 3, 2, 1, 1)
    assert (pl.phases, pl.taps, pl.padding, pl.before, pl.after) == (2, 2, 1, 1, 0)
    assert (pl.rows, pl.start) == (29, 2)  # rows 2 .. 58 of the interleaved 58
    # 1x1/2: one phase gets the tap, no crop
    pl = axis_plan(56, 28, 1, 2, 0, 1)
    assert (pl.phases, pl.single, pl.taps, pl.padding, pl.rows, pl.start) == (1, 0, 1, 0, 28, 0)
    # stride 1: the reversed kernel, its padding e - 1 - p, no crop
    pl = axis_plan(56, 56, 3, 1, 1, 1)
    assert (pl.phases, pl.taps, pl.conv_dilation, pl.padding, pl.start, pl.rows) == (
        1, 3, 1, 1, 0, 56)
    # the 7x7/2 stem: 4 window rows per phase
    pl = axis_plan(224, 112, 7, 2, 3, 1)
    assert (pl.phases, pl.taps) == (2, 4)


CASES = [
    # (x, w, stride, padding, dilation, groups)
    ((2, 3, 9, 8), (4, 3, 3, 3), (2, 2), (1, 1), (1, 1), 1),   # ResNet's 3x3/2, odd sizes
    ((1, 4, 8, 9), (6, 4, 1, 1), (2, 2), (0, 0), (1, 1), 1),   # the 1x1/2 shortcut
    ((2, 2, 7, 10), (3, 2, 1, 3), (2, 3), (0, 1), (1, 2), 1),  # one-tap rows, dilated columns
    ((1, 3, 11, 9), (3, 1, 3, 3), (2, 2), (1, 1), (1, 1), 3),  # depthwise /2
    ((2, 4, 9, 9), (6, 2, 3, 2), (3, 1), (2, 0), (2, 1), 2),   # grouped, dilated stride 3
    ((1, 2, 12, 7), (2, 2, 5, 7), (1, 2), (3, 3), (1, 1), 1),  # padding past the kernel rows
]


@pytest.mark.parametrize("xs,ws,s,p,d,groups", CASES)
def test_adjoint_on_both_interpreters(xs, ws, s, p, d, groups):
    """The ``conv2d`` adjoint (its input gradient) through the Graph IR interpreter and its
    lowered kernels through the Tile IR interpreter; the gradient is never stride-dilated:
    no concat of anything larger than the weight."""
    case = conv_case("c", xs, ws, s, p, False, d, groups)
    case.wrt = (0,)
    m = build(case)
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    (y,) = run_function(m, "f", [x, w])
    ct = rng.standard_normal(y.shape)
    tx = torch.tensor(x, requires_grad=True)
    yt = F.conv2d(tx, torch.tensor(w), stride=s, padding=p, dilation=d, groups=groups)
    (want,) = torch.autograd.grad(yt, tx, torch.tensor(ct))
    (got,) = run_function(m, "f_grad", [x, w, ct])
    assert_close(got, want, 1e-12, "graph interpreter")
    fn = next(o for o in m.walk() if getattr(o, "sym_name", None) and o.sym_name.data == "f_grad")
    ops = list(fn.walk())
    convs = [i for i, op in enumerate(ops) if isinstance(op, g.Conv2dOp)]
    assert len(convs) == 1
    ct_arg = fn.body.block.args[2]
    for i, op in enumerate(ops):
        if isinstance(op, g.ConcatOp):  # only the weight is padded
            assert i < convs[0] and ct_arg not in op.operands, op
    low = m.clone()
    assert isinstance(low, ModuleOp)
    LowerGraphToTile().apply(default_context(), low)
    (got,) = run_host(low, "f_grad", [x, w, ct])
    assert_close(got, want, 1e-12, "tile interpreter")
