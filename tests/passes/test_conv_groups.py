"""Grouped and depthwise conv2d (``groups``): the Graph IR interpreter and the lowered
kernels (direct kernel with a group's channel range; the plane kernel for one input
channel per output channel) on the Tile IR interpreter against torch in float64 on fresh
random inputs, which kernel each takes, the sm90 paths' refusal, and ptxas."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from xdsl.dialects.builtin import ModuleOp

import tessera as ts
from tessera.errors import ShapeError
from tessera.ir import graph as g
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tessera.passes.pipelines import default_context
from tessera.passes.sm90.conv import conv1x1_eligible, conv_eligible
from tessera.passes.sm90.conv_implicit import implicit_eligible
from tessera.passes.tile_conv import plane_eligible, plane_rows, window_eligible
from tessera.runtime import ptxas
from tessera.runtime.graph_interpreter import run_function
from tessera.runtime.tile_interpreter import run_host

needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")
bf = ml_dtypes.bfloat16
RNG = np.random.default_rng(31)
TOL = {np.float32: 1e-5, np.float64: 1e-12, bf: 2e-2, np.float16: 4e-3}

CASES = [
    # (input NCHW, weight OIHW, groups, stride, padding, dilation, dtype, kernel)
    # C / groups > 1 with at most 64 taps: the plane kernel stages each channel of the group
    ((2, 6, 7, 9), (4, 3, 3, 3), 2, 1, 1, 1, np.float32, "conv2d_plane"),
    ((2, 6, 7, 9), (6, 2, 3, 2), 3, 2, (1, 0), (1, 2), np.float64, "conv2d_plane"),
    ((2, 16, 13, 17), (8, 4, 3, 3), 4, 1, 1, 1, bf, "conv2d_plane"),
    # 8 channels x 9 taps: the direct kernel
    ((1, 24, 5, 6), (24, 8, 3, 3), 3, 1, 1, 1, bf, "conv2d"),
    ((2, 16, 7, 9), (6, 8, 3, 3), 2, (2, 1), (0, 1), 1, np.float32, "conv2d"),
    ((2, 6, 13, 17), (6, 1, 3, 3), 6, 1, 1, 1, np.float32, "conv2d_plane"),
    ((2, 4, 13, 17), (8, 1, 3, 3), 4, 2, 1, 1, bf, "conv2d_plane"),  # channel multiplier 2
    ((1, 3, 13, 17), (3, 1, 7, 7), 3, 1, 3, 1, np.float16, "conv2d_plane"),
    ((1, 3, 13, 17), (3, 1, 3, 3), 3, (2, 1), 2, 2, np.float64, "conv2d_plane"),
    # 40 output rows in two blocks of 20 (a 62-column row: 31 rows fit the staging budget)
    ((1, 2, 40, 60), (2, 1, 3, 3), 2, 1, 1, 1, np.float32, "conv2d_plane"),
    # 152-column rows fill 59% of a tile: lanes take flat indices, not fixed columns
    ((1, 2, 7, 150), (4, 1, 3, 3), 2, 1, 1, 1, bf, "conv2d_plane"),
    # a weight gradient's shape (few outputs per plane, a large kernel): the window kernel,
    # its input plane staged in shared memory, or read from global memory when too large
    ((2, 6, 20, 22), (6, 1, 12, 14), 6, 2, 2, 1, np.float64, "conv2d_window"),
    ((1, 4, 16, 17), (8, 1, 10, 8), 4, 1, 0, (1, 2), bf, "conv2d_window"),
    ((1, 2, 76, 76), (2, 1, 72, 72), 2, 1, 0, 1, np.float64, "conv2d_window"),
    # a 110x110 bf16 plane fits shared memory as bf16 only (widened as it is read)
    ((1, 2, 110, 110), (2, 1, 107, 107), 2, 1, 0, 1, bf, "conv2d_window"),
]


def _ref(x, w, b, stride, padding, dilation, groups) -> np.ndarray:
    def t(a):
        return torch.from_numpy(np.asarray(a, np.float64))

    return torch.nn.functional.conv2d(t(x), t(w), t(b), stride=stride, padding=padding,
                                      dilation=dilation, groups=groups).numpy()


def _close(got: np.ndarray, want: np.ndarray, tol: float) -> None:
    g64 = np.asarray(got, np.float64)
    assert g64.shape == want.shape and not np.isnan(g64).any()
    err = np.abs(g64 - want) / np.maximum(np.abs(want), 1.0)
    assert float(err.max()) <= tol, float(err.max())


def _spec(xs, ws, groups, stride, padding, dilation, dt, bias=True):
    x = RNG.standard_normal(xs).astype(dt)
    w = RNG.standard_normal(ws).astype(dt)
    b = RNG.standard_normal(ws[0]).astype(dt)
    fn = ts.jit(lambda x, w, b: ts.conv2d(x, w, b, stride=stride, padding=padding,
                                          dilation=dilation, groups=groups))
    return fn.specialize(x, w, b), [x, w, b]


@pytest.mark.parametrize(("xs", "ws", "groups", "stride", "padding", "dilation", "dt", "kind"),
                         CASES)
@pytest.mark.parametrize("sm90", [False, True])
def test_grouped_conv2d_on_both_interpreters(xs, ws, groups, stride, padding, dilation, dt,
                                             kind, sm90) -> None:
    spec, args = _spec(xs, ws, groups, stride, padding, dilation, dt)
    ref = _ref(*args, stride, padding, dilation, groups)
    (want,) = run_function(spec.ir("graph"), spec.name, [a.copy() for a in args])
    _close(want, ref, TOL[dt])
    module = spec.ir("graph").clone()
    assert isinstance(module, ModuleOp)
    LowerGraphToTile(sm90=sm90, implicit_conv=sm90).apply(default_context(), module)
    kernels = [o.sym_name.data for o in module.walk() if o.name == "ttile.kernel"]
    assert [k.split("_", 1)[1].rsplit("_", 1)[0] for k in kernels] == [kind]
    (got,) = run_host(module, spec.name, [a.copy() for a in args])
    assert got.dtype == np.dtype(dt)
    _close(got, ref, TOL[dt])


def _op(xs, ws, groups, stride=1, padding=0, dt=bf) -> g.Conv2dOp:
    spec, _ = _spec(xs, ws, groups, stride, padding, 1, dt)
    return next(o for o in spec.ir("graph").walk() if isinstance(o, g.Conv2dOp))


def test_sm90_paths_refuse_groups_with_the_reason() -> None:
    op = _op((2, 64, 8, 8), (64, 32, 3, 3), 2)
    for why in (conv_eligible(op), implicit_eligible(op)):
        assert why is not None and "groups=2" in why and "direct kernel" in why
    pw = _op((2, 64, 8, 8), (64, 32, 1, 1), 2)
    assert "groups=2" in (conv1x1_eligible(pw) or "")
    assert conv_eligible(_op((2, 64, 8, 8), (64, 64, 3, 3), 1)) is None


def test_grouped_conv_flops_count_one_group_of_channels() -> None:
    from tessera.profiler.costs import flops

    op = _op((2, 24, 13, 17), (24, 8, 3, 3), 3, 1, 1)
    assert flops(op) == 2 * 2 * 24 * 13 * 17 * 8 * 9 + 2 * 24 * 13 * 17  # with the bias


def test_plane_kernel_takes_one_input_channel_per_output() -> None:
    # MobileNet's 56x56 depthwise layer: two blocks of 28 rows (30 x 58 staged inputs)
    assert plane_rows(_op((1, 8, 56, 56), (8, 1, 3, 3), 8, 1, 1)) == 28
    assert plane_eligible(_op((1, 8, 56, 56), (8, 1, 7, 7), 8, 1, 3)) is None
    assert plane_eligible(_op((1, 8, 9, 9), (8, 2, 3, 3), 4)) is None
    assert "more than 64 taps" in plane_eligible(_op((1, 16, 9, 9), (16, 8, 3, 3), 2))
    assert "more than 64 taps" in plane_eligible(_op((1, 2, 20, 20), (2, 1, 9, 9), 2))
    assert "one channel group" in plane_eligible(_op((1, 2, 20, 20), (2, 2, 3, 3), 1))
    # ResNeXt's 3x3 layer (4 channels per group): 14 rows of 4 staged 16 x 58 planes
    assert plane_rows(_op((1, 128, 56, 56), (128, 4, 3, 3), 32, 1, 1)) == 14
    assert "inputs" in plane_eligible(_op((1, 2, 3, 3000), (2, 1, 3, 3), 2))
    # a depthwise weight gradient: input [1, N C, H, W], N C output-gradient kernels
    assert window_eligible(_op((1, 12, 58, 58), (12, 1, 56, 56), 12)) is None
    assert "outputs per plane" in window_eligible(_op((1, 2, 20, 22), (2, 1, 9, 10), 2, 2, 2))
    assert "few taps" in window_eligible(_op((1, 2, 6, 6), (2, 1, 3, 3), 2))


@needs_ptxas
@pytest.mark.parametrize(("xs", "ws", "groups", "padding", "kind", "dt"), [
    ((64, 256, 56, 56), (256, 1, 3, 3), 256, 1, "conv2d_plane", bf),
    ((64, 256, 56, 56), (256, 1, 3, 3), 256, 1, "conv2d_plane", np.float32),
    ((64, 256, 56, 56), (256, 1, 7, 7), 256, 3, "conv2d_plane", bf),
    ((64, 256, 56, 56), (256, 64, 3, 3), 4, 1, "conv2d", bf),
    ((64, 128, 56, 56), (128, 4, 3, 3), 32, 1, "conv2d_plane", bf),  # ResNeXt
    # the weight gradient of the first: 16384 planes of 56x56 taps, 3x3 outputs each
    ((1, 16384, 56, 56), (16384, 1, 56, 56), 16384, 1, "conv2d_window", bf),
])
def test_grouped_kernels_assemble(xs, ws, groups, padding, kind, dt) -> None:
    fn = ts.jit(lambda x, w: ts.conv2d(x, w, padding=padding, groups=groups))
    spec = fn.specialize(np.zeros(xs, dt), np.zeros(ws, dt))
    ptx = spec.ir("ptx")
    assert f"_{kind}_0" in ptx
    assert ("ld.shared" in ptx) == (kind != "conv2d")
    ptxas.check(ptx)


def test_frontend_checks_groups() -> None:
    x, w = np.ones((1, 6, 5, 5), np.float32), np.ones((4, 3, 3, 3), np.float32)
    with pytest.raises(ShapeError, match="groups needs an int >= 1"):
        ts.jit(lambda x, w: ts.conv2d(x, w, groups=0)).specialize(x, w)
    with pytest.raises(ShapeError, match="input C=6 is not groups=3 times weight C=3"):
        ts.jit(lambda x, w: ts.conv2d(x, w, groups=3)).specialize(x, w)
    with pytest.raises(ShapeError, match="O=5 are not a multiple of groups=2"):
        ts.jit(lambda x, w: ts.conv2d(x, w, groups=2)).specialize(
            x, np.ones((5, 3, 3, 3), np.float32))


@pytest.mark.parametrize(("xs", "ws", "groups", "stride", "padding", "dilation"), [
    ((2, 6, 9, 8), (6, 1, 3, 3), 6, 1, 1, 1),  # depthwise
    ((2, 4, 9, 8), (8, 1, 3, 3), 4, 2, 1, (1, 2)),  # channel multiplier 2, strided
    ((1, 6, 7, 9), (9, 2, 3, 2), 3, (1, 2), (1, 0), 1),  # 2 channels per group
])
def test_grouped_conv2d_gradients_run_lowered(xs, ws, groups, stride, padding, dilation):
    """ts.grad of a grouped convolution, lowered (the input gradient a grouped transposed
    convolution, the weight gradient per-image partials) and run on the Tile IR
    interpreter, against torch.autograd in float64."""
    x = RNG.standard_normal(xs)
    w = RNG.standard_normal(ws)

    def f(x, w, dy):
        return ts.sum(ts.conv2d(x, w, stride=stride, padding=padding, dilation=dilation,
                                groups=groups) * dy)

    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=padding,
                                    dilation=dilation, groups=groups)
    dy = RNG.standard_normal(tuple(ty.shape))
    gx, gw = torch.autograd.grad(ty, (tx, tw), torch.from_numpy(dy))
    spec = ts.grad(f, argnums=(0, 1)).specialize(x, w, dy)
    got = run_host(spec.ir("tile"), spec.name, [x.copy(), w.copy(), dy.copy()])
    for a, b in zip(got, (gx.numpy(), gw.numpy())):
        _close(a, b, 1e-12)


def test_equal_depthwise_layers_share_their_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three equal depthwise layers: the third launches the second's plane kernel (the
    kernel memo, checked by building it anyway), and the stack matches torch."""
    from tessera.passes import lower_graph_to_tile

    monkeypatch.setattr(lower_graph_to_tile, "CHECK_KERNEL_MEMO", True)
    x = RNG.standard_normal((2, 4, 9, 11)).astype(np.float32)
    ws = [RNG.standard_normal((4, 1, 3, 3)).astype(np.float32) for _ in range(3)]

    def f(x, a, b, c):
        for w in (a, b, c):
            x = ts.conv2d(x, w, padding=1, groups=4)
        return x

    spec = ts.jit(f).specialize(x, *ws)
    module = spec.ir("graph").clone()
    assert isinstance(module, ModuleOp)
    LowerGraphToTile().apply(default_context(), module)
    kernels = [o.sym_name.data for o in module.walk() if o.name == "ttile.kernel"]
    launches = [o for o in module.walk() if o.name == "ttile.launch"]
    assert len(kernels) == 2 and len(launches) == 3, kernels
    (got,) = run_host(module, spec.name, [x.copy(), *(w.copy() for w in ws)])
    ref = torch.from_numpy(x).double()
    for w in ws:
        ref = torch.nn.functional.conv2d(ref, torch.from_numpy(w).double(), padding=1, groups=4)
    _close(got, ref.numpy(), 1e-5)
