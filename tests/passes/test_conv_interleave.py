"""A strided convolution's input gradient stored by the implicit GEMM's epilogue
(:mod:`tessera.passes.sm90.conv_interleave`): the chain after the phase convolution is
recognized in ts.grad's and the torch backend's graphs, its closed form matches the ops
it replaces, and the emitted epilogue (run on the straight-line Target IR simulator of
test_conv_weight_sim, every thread of every tile) stores each accumulator at its place
of ``dx`` and nothing else."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import tessera as ts
from tessera.ir import graph as g
from tessera.ir import target as tt
from tessera.passes.sm90 import builders, conv_interleave
from tessera.passes.sm90.asm import TargetAsm
from tessera.runtime import ptxas
from tests.passes.test_conv_weight_sim import OUT, POISON, Grid

bf = ml_dtypes.bfloat16

CONFIGS = [
    # x shape, w shape, stride, padding, dilation
    ((2, 8, 14, 14), (16, 8, 3, 3), 2, 1, 1),   # ResNet's 3x3/2
    ((1, 8, 15, 13), (8, 8, 3, 3), 2, 1, 1),    # odd sizes: a partial last phase row
    ((2, 8, 11, 9), (8, 8, 3, 2), (2, 3), (0, 1), 1),
    ((1, 8, 17, 17), (8, 8, 3, 3), 2, 2, 2),    # dilated
    ((1, 8, 12, 10), (8, 8, 5, 4), (3, 2), (2, 1), 1),
    # one-tap kernels (a 1x1/2 shortcut's): one phase, zeros at the others
    ((2, 8, 14, 14), (16, 8, 1, 1), 2, 0, 1),
    ((1, 8, 13, 11), (8, 8, 1, 1), 2, 0, 1),    # odd: the last block cut
    ((1, 8, 11, 10), (8, 8, 1, 1), (3, 2), 1, 1),
]
SINGLE = CONFIGS[-3:]


def _graph(xs, ws, stride, padding, dilation) -> str:
    fn = ts.grad(lambda x, w: ts.sum(ts.conv2d(x, w, stride=stride, padding=padding,
                                               dilation=dilation) ** 2))
    return fn.specialize(np.zeros(xs, bf), np.zeros(ws, bf)).ir("graph")


def _phase_convs(module) -> list[g.Conv2dOp]:
    return [o for o in module.walk() if isinstance(o, g.Conv2dOp)
            and conv_interleave.match(o) is not None]


def _chain_numpy(ops, y: np.ndarray) -> np.ndarray:
    """The ops after the convolution on ``y`` (all images), plain numpy."""
    for op in ops:
        if isinstance(op, g.ReshapeOp):
            y = y.reshape(g.shape_of(op.result))
        elif isinstance(op, g.TransposeOp):
            y = y.transpose([int(p) for p in op.permutation.get_values()])
        elif isinstance(op, g.SelectOp):
            keep = np.asarray([bool(x) for x in op.cond.owner.value.get_values()])
            y = np.where(keep.reshape(g.shape_of(op.cond)), y, 0.0)
        else:
            y = y[tuple(slice(a, b) for a, b in zip(op.start.get_values(),
                                                    op.limit.get_values()))]
    return y


@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "dilation"), CONFIGS)
def test_input_gradient_chain_is_matched(xs, ws, stride, padding, dilation):
    """ts.grad's input gradient of a strided convolution: its phase convolution's chain is
    matched, the interleave's closed form equals the chain on fresh random values (every
    image), and dx is the chain's last value with the input's shape."""
    module = _graph(xs, ws, stride, padding, dilation)
    (conv,) = _phase_convs(module)
    il, ops = conv_interleave.match(conv)
    assert list(g.shape_of(ops[-1].results[0])) == list(xs)
    y = np.random.default_rng(0).standard_normal(g.shape_of(conv.result))
    np.testing.assert_array_equal(il.apply(y), _chain_numpy(ops, y))


@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "dilation"), CONFIGS)
def test_trimmed_interleave_drops_only_rows_that_reach_nothing(xs, ws, stride, padding,
                                                              dilation):
    """The trimmed interleave of the rows and columns of y that reach dx gives the same dx;
    the rows and columns it drops reach nothing."""
    (conv,) = _phase_convs(_graph(xs, ws, stride, padding, dilation))
    il, _ = conv_interleave.match(conv)
    t, rmin, qmin = il.trimmed()
    y = np.random.default_rng(3).standard_normal(g.shape_of(conv.result))
    part = y[:, :, rmin: rmin + t.rows, qmin: qmin + t.cols]
    np.testing.assert_array_equal(t.apply(part), il.apply(y))
    for r in (rmin - 1, rmin + t.rows):  # a dropped row's every phase misses dx
        if 0 <= r < il.rows:
            assert all(not 0 <= r * il.ph + a - il.oh < il.h for a in range(il.ph))
    if (xs, ws) == ((2, 8, 14, 14), (16, 8, 3, 3)):  # the 3x3/2's first phase row is dropped
        assert (rmin, qmin, t.rows, t.cols) == (1, 1, 7, 7)


def test_torch_backend_chain_is_matched(tmp_path, monkeypatch):
    """The torch backend's conv2d_input graph (odd input, stride 2) has the same chain."""
    import tessera.torch as tth

    monkeypatch.setenv("TESSERA_DUMP_DIR", str(tmp_path))
    xs = (2, 8, 13, 13)
    w = torch.randn(16, 8, 3, 3, dtype=torch.float64)
    dy = torch.randn(2, 16, 7, 7, dtype=torch.float64)
    f = tth.compile(lambda dy, w: torch.nn.grad.conv2d_input(xs, w, dy, stride=2, padding=1))
    got = f(dy, w)
    want = torch.nn.grad.conv2d_input(xs, w, dy, stride=2, padding=1)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    from xdsl.parser import Parser

    from tessera.ir.context import default_context
    (path,) = tmp_path.glob("*/*-graph.mlir")
    module = Parser(default_context(), path.read_text()).parse_module()
    (conv,) = _phase_convs(module)
    il, ops = conv_interleave.match(conv)
    assert (il.ph, il.pw, il.h, il.w) == (2, 2, 13, 13)


def test_other_users_are_not_matched():
    """A chain value with another user (here the convolution's output itself returned)
    is not taken over."""
    def f(gy, w):
        y = ts.conv2d(gy, w, padding=1)
        z = ts.transpose(ts.reshape(y, [2, 1, 2, 2, 4, 8, 8]), [0, 1, 4, 5, 2, 6, 3])
        return ts.reshape(z, [2, 4, 16, 16]), y
    module = ts.jit(f).specialize(np.zeros((2, 8, 7, 7), bf), np.zeros((16, 8, 2, 2), bf)
                                  ).ir("graph")
    (conv,) = [o for o in module.walk() if isinstance(o, g.Conv2dOp)]
    assert conv_interleave.match(conv) is None


class EpilogueGrid(Grid):
    """The weight-relayout simulator with the epilogue's few other instructions."""

    def val(self, v) -> np.ndarray:
        if isinstance(v.owner, tt.ImmOp) and not isinstance(v.owner.value.value.data, int):
            return np.full(self.n, int(v.owner.value.value.data), np.int64)  # 0.0: a zero
        return super().val(v)

    def op_shr(self, op, params) -> None:
        self._int(op, lambda a, b: a >> b, op.a, op.b)

    def op_selp(self, op, params) -> None:
        self.vals[op.dst] = np.where(self.val(op.pred), self.val(op.a), self.val(op.b))

    def op_cvt(self, op, params) -> None:  # values are integers: rounding is the identity
        self.vals[op.dst] = self.val(op.srcs[0]).copy()


@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "dilation"),
                         CONFIGS[:4] + SINGLE)
@pytest.mark.parametrize(("bn", "consumers", "channel_major"),
                         [(64, 1, False), (128, 2, False), (64, 1, True), (128, 2, True)])
def test_epilogue_stores_every_place_once(xs, ws, stride, padding, dilation, bn, consumers,
                                          channel_major):
    """The epilogue of every ``64*consumers x bn`` tile, its accumulators holding their
    own (row, column) as a number (from the wgmma fragment layout), leaves ``dx`` equal to
    the interleave of that matrix seen as ``y`` (its columns in (phase, channel) or in
    (channel, phase) order): every place written, nothing past it."""
    from dataclasses import replace

    (conv,) = _phase_convs(_graph(xs, ws, stride, padding, dilation))
    il, _ = conv_interleave.match(conv)
    if il.single is not None and channel_major:
        pytest.skip("one phase: no phases among the channels to order")
    il = replace(il, channel_major=channel_major)
    n = xs[0]
    m, o = n * il.rows * il.cols, il.channels
    bm = 64 * consumers
    dx = np.full(n * il.groups * il.cg * il.h * il.w + 64, POISON, np.int64)
    for m0 in range(0, m, bm):
        for n0 in range(0, o, bn):
            func = tt.FuncOp("epi", ["u64"], 128 * consumers)
            e = TargetAsm(func)
            tid = e.sreg("tid.x")
            cw = e.bin(tt.ShrOp, "u32", tid, 7)
            _, warp, lane = builders.fragment_lanes(e, tid)
            row0 = builders.fragment_row(e, e.imm(m0), cw, warp, lane)
            col0 = e.add32(e.imm(n0), builders.fragment_col(e, lane))
            acc = []
            for j in range(bn // 8):
                for h in (0, 1):
                    for x in (0, 1):
                        acc.append(e.mad32(e.add32(row0, 8 * h), 1 << 12,
                                           e.add32(col0, 8 * j + x)))
            conv_interleave.epilogue(e, il, "bf16", m, bn, func.block.args[0], tid, cw,
                                     e.imm(m0), e.imm(n0), acc)
            e.add(tt.RetOp())
            func.verify()
            EpilogueGrid(128 * consumers, 128 * consumers, {OUT: dx}).run(func, [OUT])
    mm, cc = np.meshgrid(np.arange(m), np.arange(o), indexing="ij")
    y = (mm * (1 << 12) + cc).reshape(n, il.rows, il.cols, o).transpose(0, 3, 1, 2)
    size = dx.size - 64
    np.testing.assert_array_equal(dx[:size], il.apply(y).reshape(-1))
    assert (dx[size:] == POISON).all()


@pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")
@pytest.mark.parametrize("dtype", [bf, np.float16, np.float32])
@pytest.mark.parametrize("k", [3, 1])
def test_strided_input_gradient_has_no_interleave_kernel(monkeypatch, dtype, k):
    """On the Hopper kernels, ts.grad's input gradient of an odd-sized 3x3/2 or 1x1/2
    convolution is stored by its convolution (bf16, f16, and f32 as 3xTF32): no slice or
    select kernel reads the phases back; the PTX assembles."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "1")
    pad = k // 2
    fn = ts.grad(lambda x, w, dy: ts.sum(ts.conv2d(x, w, stride=2, padding=pad) * dy),
                 argnums=0)
    spec = fn.specialize(np.zeros((2, 24, 15, 13), dtype), np.zeros((40, 24, k, k), dtype),
                         np.zeros((2, 40, 8, 7), dtype))
    names = [o.callee.string_value() for o in spec.ir("target").walk()
             if isinstance(o, tt.LaunchOp | tt.LaunchExOp)]
    assert any("_conv_" in n for n in names), names
    assert not any(t in n for n in names for t in ("slice", "select", "constant")), names
    ptxas.check(spec.ir("ptx"))
