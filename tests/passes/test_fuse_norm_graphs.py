"""Batch norm's training graphs through ``fuse-elementwise``'s reduction merging, reshape
hoisting and producer copying, lowered and run by the Tile IR interpreter against numpy
float64 on random non-zero inputs.

The graphs are those AOTAutograd traces for ``BatchNorm2d`` followed by relu (forward:
statistics as ``sum(sum(x, [2, 3]), [0])``, the running statistics, the normalization;
backward: the relu backward feeding two reductions and the input gradient), in f32 and
with bf16 activations. Each is lowered with every rewrite on and with them off: the
results agree with float64 either way, and the rewrites take fewer kernels.
"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tessera.ir import graph as g
from tessera.ir import tile as tt
from tessera.passes.fuse_elementwise import FuseElementwisePass
from tessera.passes.lower_graph_to_tile import LowerGraphToTile
from tests.passes.test_lower_graph_to_tile import BF16, context, f64, rand

EPS = 1e-5
SHAPES = [(4, 8, 32, 40), (3, 5, 6, 7)]  # split reductions (5120 per channel), one tile each


def _t(shape, e: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + e + ">"


def forward_mlir(shape, act: str) -> str:
    """relu(batch_norm(x)) in training mode: returns y, mean, rstd and the new running
    mean; ``act`` is the activations' element type (statistics in f32)."""
    n, c, h, w = shape
    X, A, C, C4 = _t(shape, act), _t(shape, "f32"), _t((c,), "f32"), _t((1, c, 1, 1), "f32")
    NC, F, CA = _t((n, c), "f32"), _t((), "f32"), _t((c,), act)
    cnt = n * h * w
    xf = "%a" if act == "f32" else "%xf"
    cast = "" if act == "f32" else f"  %xf = tgraph.cast %a : ({X}) -> {A}\n"
    tail = "" if act == "f32" else f"  %y = tgraph.cast %y2 : ({A}) -> {X}\n"
    yv = "%y2" if act == "f32" else "%y"
    return f"""func.func @fwd(%a: {X}, %w: {CA}, %rm: {C}) -> ({X}, {C}, {C}, {C}) {{
{cast}  %s1 = tgraph.sum {xf} axes = [2, 3] : ({A}) -> {NC}
  %s = tgraph.sum %s1 axes = [0] : ({NC}) -> {C}
  %n = tgraph.constant dense<{float(cnt)}> : {F} -> {F}
  %mean = tgraph.div %s, %n : ({C}, {F}) -> {C}
  %m4 = tgraph.reshape %mean : ({C}) -> {C4}
  %d = tgraph.sub {xf}, %m4 : ({A}, {C4}) -> {A}
  %d2 = tgraph.mul %d, %d : ({A}, {A}) -> {A}
  %v1 = tgraph.sum %d2 axes = [2, 3] : ({A}) -> {NC}
  %v = tgraph.sum %v1 axes = [0] : ({NC}) -> {C}
  %var = tgraph.div %v, %n : ({C}, {F}) -> {C}
  %eps = tgraph.constant dense<{EPS:.6e}> : {F} -> {F}
  %ve = tgraph.add %var, %eps : ({C}, {F}) -> {C}
  %rstd = tgraph.rsqrt %ve : ({C}) -> {C}
  %r4 = tgraph.reshape %rstd : ({C}) -> {C4}
  %wf = tgraph.cast %w : ({CA}) -> {C}
  %w4 = tgraph.reshape %wf : ({C}) -> {C4}
  %k = tgraph.constant dense<0.1> : {F} -> {F}
  %k9 = tgraph.constant dense<0.9> : {F} -> {F}
  %mk = tgraph.mul %mean, %k : ({C}, {F}) -> {C}
  %rk = tgraph.mul %rm, %k9 : ({C}, {F}) -> {C}
  %rm2 = tgraph.add %rk, %mk : ({C}, {C}) -> {C}
  %y0 = tgraph.mul %d, %r4 : ({A}, {C4}) -> {A}
  %y1 = tgraph.mul %y0, %w4 : ({A}, {C4}) -> {A}
  %y2 = tgraph.relu %y1 : ({A}) -> {A}
{tail}  func.return {yv}, %mean, %rstd, %rm2 : {X}, {C}, {C}, {C}
}}
"""


def forward_ref(x, w, rm):
    mean = x.mean(axis=(0, 2, 3))
    var = ((x - mean[None, :, None, None]) ** 2).mean(axis=(0, 2, 3))
    rstd = 1 / np.sqrt(var + EPS)
    y = np.maximum((x - mean[None, :, None, None]) * (rstd * w)[None, :, None, None], 0)
    return y, mean, rstd, 0.9 * rm + 0.1 * mean


def backward_mlir(shape, act: str) -> str:
    """batch norm's backward after relu (``y`` the relu output, ``dy`` its gradient):
    returns the bias and weight gradients and the input gradient plus the relu gradient
    (the residual branch)."""
    n, c, h, w = shape
    X, A, C, C4 = _t(shape, act), _t(shape, "f32"), _t((c,), "f32"), _t((1, c, 1, 1), "f32")
    K, F, I1 = _t((n, c, 1, 1), "f32"), _t((), "f32"), _t(shape, "i1")
    Z = _t((), act)
    xf = "%x" if act == "f32" else "%xf"
    gf = "%sel" if act == "f32" else "%gf"
    pre = "" if act == "f32" else (f"  %xf = tgraph.cast %x : ({X}) -> {A}\n"
                                   f"  %gf = tgraph.cast %sel : ({X}) -> {A}\n")
    inv = 1.0 / (n * h * w)
    return f"""func.func @bwd(%y: {X}, %dy: {X}, %x: {X}, %mean: {C}, %rstd: {C}, %w: {C}) -> ({C}, {C}, {A}) {{
  %z = tgraph.constant dense<0.0> : {F} -> {Z}
  %le = tgraph.le %y, %z : ({X}, {Z}) -> {I1}
  %sel = tgraph.select %le, %z, %dy : ({I1}, {Z}, {X}) -> {X}
{pre}  %m4 = tgraph.reshape %mean : ({C}) -> {C4}
  %a1 = tgraph.sum {gf} axes = [2, 3] keepdims : ({A}) -> {K}
  %a2 = tgraph.sum %a1 axes = [0] keepdims : ({K}) -> {C4}
  %db = tgraph.reshape %a2 : ({C4}) -> {C}
  %d = tgraph.sub {xf}, %m4 : ({A}, {C4}) -> {A}
  %gd = tgraph.mul {gf}, %d : ({A}, {A}) -> {A}
  %b1 = tgraph.sum %gd axes = [2, 3] keepdims : ({A}) -> {K}
  %b2 = tgraph.sum %b1 axes = [0] keepdims : ({K}) -> {C4}
  %sgd = tgraph.reshape %b2 : ({C4}) -> {C}
  %inv = tgraph.constant dense<{inv:.9e}> : {F} -> {F}
  %mdb = tgraph.mul %db, %inv : ({C}, {F}) -> {C}
  %mdb4 = tgraph.reshape %mdb : ({C}) -> {C4}
  %r2 = tgraph.mul %rstd, %rstd : ({C}, {C}) -> {C}
  %si = tgraph.mul %sgd, %inv : ({C}, {F}) -> {C}
  %cf = tgraph.mul %si, %r2 : ({C}, {C}) -> {C}
  %cf4 = tgraph.reshape %cf : ({C}) -> {C4}
  %rw = tgraph.mul %rstd, %w : ({C}, {C}) -> {C}
  %rw4 = tgraph.reshape %rw : ({C}) -> {C4}
  %t0 = tgraph.mul %d, %cf4 : ({A}, {C4}) -> {A}
  %t1 = tgraph.sub {gf}, %t0 : ({A}, {A}) -> {A}
  %t2 = tgraph.sub %t1, %mdb4 : ({A}, {C4}) -> {A}
  %t3 = tgraph.mul %t2, %rw4 : ({A}, {C4}) -> {A}
  %dx = tgraph.add %t3, {gf} : ({A}, {A}) -> {A}
  %dw = tgraph.mul %sgd, %rstd : ({C}, {C}) -> {C}
  func.return %db, %dw, %dx : {C}, {C}, {A}
}}
"""


def backward_ref(y, dy, x, mean, rstd, w):
    gr = np.where(y <= 0, 0.0, dy)
    m = x.size / x.shape[1]
    db = gr.sum(axis=(0, 2, 3))
    d = x - mean[None, :, None, None]
    sgd = (gr * d).sum(axis=(0, 2, 3))
    b = lambda v: v[None, :, None, None]  # noqa: E731
    dx = (gr - d * b(sgd / m * rstd**2) - b(db / m)) * b(rstd * w) + gr
    return db, sgd * rstd, dx


def _lower(text: str, rewrites: bool, sm90: bool = False) -> ModuleOp:
    ctx = context()
    m = Parser(ctx, text).parse_module()
    m.verify()
    FuseElementwisePass(merge_reductions=rewrites, hoist_reshapes=rewrites).apply(ctx, m)
    m.verify()
    LowerGraphToTile(sm90=sm90).apply(ctx, m)
    m.verify()
    return m


def _launches(m: ModuleOp) -> int:
    return sum(isinstance(op, tt.LaunchOp) for op in m.walk())


def _inputs_fwd(rng, shape, act):
    x = rand(rng, shape, "f32", -2.0, 2.0) * 3 + 1.5  # an offset mean: two-pass variance
    x = x.astype(BF16 if act == "bf16" else np.float32)
    c = shape[1]
    return [x, rand(rng, (c,), act, 0.5, 2.0), rand(rng, (c,), "f32")]


def _close(got, ref, tol):
    got = f64(got)
    assert np.isfinite(got).all()
    err = np.abs(got - ref)
    assert (err <= tol * np.maximum(1.0, np.abs(ref))).all(), float(err.max())


@pytest.mark.parametrize("act", ["f32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward(shape, act) -> None:
    from tessera.runtime.tile_interpreter import run_host

    text = forward_mlir(shape, act)
    rng = np.random.default_rng(sum(shape) + len(act))
    xs = _inputs_fwd(rng, shape, act)
    refs = forward_ref(*(f64(v) for v in xs))
    m = _lower(text, True)
    for got, ref, tol in zip(run_host(m, "fwd", xs), refs,
                             (3e-2 if act == "bf16" else 1e-5, 1e-5, 1e-4, 1e-5)):
        _close(got, ref, tol)
    # the reshapes of size-1 dims join kernels as index maps also without the rewrites
    assert _launches(m) == 9 <= _launches(_lower(text, False))


@pytest.mark.parametrize("act", ["f32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backward(shape, act) -> None:
    from tessera.runtime.tile_interpreter import run_host

    text = backward_mlir(shape, act)
    rng = np.random.default_rng(7 * sum(shape) + len(act))
    c = shape[1]
    y = rand(rng, shape, act)
    dy, x = rand(rng, shape, act), rand(rng, shape, act)
    mean, rstd, w = rand(rng, (c,), "f32"), rand(rng, (c,), "f32", 0.5, 2.0), rand(rng, (c,), "f32")
    xs = [y, dy, x, mean, rstd, w]
    refs = backward_ref(*(f64(v) for v in xs))
    m = _lower(text, True)
    for got, ref in zip(run_host(m, "bwd", xs), refs):
        _close(got, ref, 1e-4)
    assert _launches(m) == 6 <= _launches(_lower(text, False))


def test_graph_shape() -> None:
    """The backward's reductions: two over [2, 3] (the sums over [0] after them stay
    separate: a merged [0, 2, 3] reduction of NCHW measured slower on the GPU), each fused
    with the relu backward (which is copied into its users, not stored)."""
    ctx = context()
    m = Parser(ctx, backward_mlir((4, 8, 32, 40), "bf16")).parse_module()
    FuseElementwisePass().apply(ctx, m)
    m.verify()
    top = [op for op in m.walk() if op.parent_op() is not None
           and not isinstance(op.parent_op(), g.FusedOp) and op.dialect_name() == "tgraph"]
    reds = [op for op in top if isinstance(op, g.FusedOp) and op.reduction() is not None]
    assert [r.reduction().axis_list() for r in reds] == [[2, 3], [2, 3]]
    assert not any(isinstance(op, g.SelectOp) for op in top)
    for r in reds:
        assert any(isinstance(o, g.SelectOp) for o in r.body.walk())


def test_sm90_lowering_runs() -> None:
    """The Hopper lowering choices take the same kernels for these ops."""
    from tessera.runtime.tile_interpreter import run_host

    shape = (4, 8, 32, 40)
    text = backward_mlir(shape, "bf16")
    rng = np.random.default_rng(3)
    c = shape[1]
    xs = [rand(rng, shape, "bf16"), rand(rng, shape, "bf16"), rand(rng, shape, "bf16"),
          rand(rng, (c,), "f32"), rand(rng, (c,), "f32", 0.5, 2.0), rand(rng, (c,), "f32")]
    refs = backward_ref(*(f64(v) for v in xs))
    for got, ref in zip(run_host(_lower(text, True, sm90=True), "bwd", xs), refs):
        _close(got, ref, 1e-4)
