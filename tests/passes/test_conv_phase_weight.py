"""A strided input gradient's phase kernel read from the forward weight
(:mod:`tessera.passes.sm90.conv_phase_weight`): the data movement that ts.grad and the
torch backend build it with is recognized and equals the per-axis tables on fresh random
weights, and the relayout kernel (run on the straight-line Target IR simulator of
test_conv_weight_sim, every thread) writes the GEMM's operand from ``w`` itself."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.ir import graph as g
from tessera.ir import target as tt
from tessera.passes.sm90 import conv_layout, conv_phase_weight
from tessera.runtime import ptxas
from tests.passes.test_conv_weight_sim import OUT, POISON, SRC, Grid

bf = ml_dtypes.bfloat16

CONFIGS = [
    # x shape, w shape, stride, padding, dilation
    ((2, 8, 14, 14), (16, 8, 3, 3), 2, 1, 1),   # ResNet's 3x3/2
    ((1, 8, 15, 13), (8, 8, 3, 3), 2, 1, 1),
    ((2, 8, 11, 9), (8, 8, 3, 2), (2, 3), (0, 1), 1),
    ((1, 8, 17, 17), (8, 8, 3, 3), 2, 2, 2),    # dilated: taps spread first
    ((1, 3, 33, 31), (16, 3, 7, 7), 2, 3, 1),   # the stem's 7x7/2
    ((1, 8, 12, 10), (8, 8, 5, 4), (3, 2), (2, 1), 1),
]


def _conv(xs, ws, stride, padding, dilation) -> g.Conv2dOp | None:
    fn = ts.grad(lambda x, w: ts.sum(ts.conv2d(x, w, stride=stride, padding=padding,
                                               dilation=dilation) ** 2))
    module = fn.specialize(np.zeros(xs, bf), np.zeros(ws, bf)).ir("graph")
    convs = [o for o in module.walk() if isinstance(o, g.Conv2dOp)
             and conv_phase_weight.match(o) is not None]
    return convs[0] if convs else None


def _chain_values(ops, root, w: np.ndarray) -> np.ndarray:
    """The ops on ``w``'s values (plain numpy; splat constants only)."""
    vals = {root: w}
    for op in ops:
        if isinstance(op, g.ConstantOp):
            (value,) = set(op.value.get_values())
            vals[op.result] = np.full(g.shape_of(op.result), float(value))
        elif isinstance(op, g.BroadcastOp):
            (value,) = set(op.input.owner.value.get_values())
            vals[op.result] = np.full(g.shape_of(op.result), float(value))
        elif isinstance(op, g.ConcatOp):
            vals[op.result] = np.concatenate([vals[v] for v in op.inputs],
                                             axis=op.axis.value.data)
        elif isinstance(op, g.ReshapeOp):
            vals[op.result] = vals[op.input].reshape(g.shape_of(op.result))
        elif isinstance(op, g.TransposeOp):
            vals[op.result] = vals[op.input].transpose(
                [int(p) for p in op.permutation.get_values()])
        elif isinstance(op, g.ReverseOp):
            vals[op.result] = np.flip(vals[op.input], op.dim_values())
        else:
            vals[op.result] = vals[op.input][tuple(slice(a, b, c) for a, b, c in zip(
                op.start.get_values(), op.limit.get_values(), op.stride.get_values()))]
    return vals[ops[-1].results[0]]


@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "dilation"), CONFIGS)
def test_phase_kernel_is_matched(xs, ws, stride, padding, dilation):
    conv = _conv(xs, ws, stride, padding, dilation)
    assert conv is not None
    pwt, ops, root = conv_phase_weight.match(conv)
    assert tuple(g.shape_of(root)) == ws
    w = np.random.default_rng(1).standard_normal(ws)
    np.testing.assert_array_equal(pwt.apply(w), _chain_values(ops, root, w))
    assert not any(isinstance(o, g.Conv2dOp) for o in ops)


def test_stride_one_kernel_is_not_a_phase_kernel():
    """A stride-1 input gradient's kernel (a flip, read by the relayout itself) and a
    weight that is not made by data movement are left alone."""
    assert _conv((1, 8, 9, 9), (8, 8, 3, 3), 1, 1, 1) is None
    fn = ts.jit(lambda x, w: ts.conv2d(x, w * 2.0))
    module = fn.specialize(np.zeros((1, 8, 9, 9), bf), np.zeros((8, 8, 3, 3), bf)).ir("graph")
    (conv,) = [o for o in module.walk() if isinstance(o, g.Conv2dOp)]
    assert conv_phase_weight.match(conv) is None


class PhaseGrid(Grid):
    def op_or(self, op, params) -> None:
        self._int(op, lambda a, b: a | b, op.a, op.b)


@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "dilation"), CONFIGS)
@pytest.mark.parametrize(("kwp_extra", "channel_major"), [(0, False), (2, False), (0, True)])
def test_relayout_reads_the_forward_weight(xs, ws, stride, padding, dilation, kwp_extra,
                                           channel_major):
    """``wk[oc, (u*kwp + v)*Cp + o] = wc[oc, o, u, v]`` from ``w``: zeros where no tap
    reaches, for channels past O and for filter-row taps past Tw; nothing past the end.
    ``channel_major``: wk's rows in (channel, phase) order."""
    pwt, _, _ = conv_phase_weight.match(_conv(xs, ws, stride, padding, dilation))
    cp = -(-pwt.o // 8) * 8
    kwp = pwt.tw + kwp_extra
    func = conv_phase_weight.weight_kernel("w", pwt, cp, 2, 1, kwp, channel_major)
    func.verify()
    oc = pwt.ph * pwt.pw * pwt.c
    k = pwt.th * kwp * cp
    w = np.random.default_rng(2).integers(1, 1 << 15, ws, dtype=np.int64)
    out = np.full(oc * k + 64, POISON, np.int64)
    grid = conv_layout.weight_grid(oc, k)
    PhaseGrid(grid * conv_layout.THREADS, conv_layout.THREADS,
              {OUT: out, SRC: w.reshape(-1).copy()}).run(func, [OUT, SRC])
    want = np.zeros((oc, pwt.th, kwp, cp), np.int64)
    wc = pwt.apply(w)
    if channel_major:  # row (c*P + p) holds channel p*C + c
        wc = wc.reshape(pwt.ph * pwt.pw, pwt.c, *wc.shape[1:]).swapaxes(0, 1).reshape(wc.shape)
    want[:, :, : pwt.tw, : pwt.o] = wc.transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(out[: oc * k].reshape(oc, pwt.th, kwp, cp), want)
    assert (out[oc * k:] == POISON).all()


def _input_grad_launches(monkeypatch, padding, xs, ws, dys, dtype):
    """The specialization of ts.grad's input gradient of a stride-2 convolution on the
    Hopper kernels, and the kinds of its launches in order."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "1")
    fn = ts.grad(lambda x, w, dy: ts.sum(ts.conv2d(x, w, stride=2, padding=padding) * dy),
                 argnums=0)
    spec = fn.specialize(np.zeros(xs, dtype), np.zeros(ws, dtype), np.zeros(dys, dtype))
    kinds = [re.sub(r"^.*?_grad_|_\d+$", "", o.callee.string_value())
             for o in spec.ir("target").walk() if isinstance(o, tt.LaunchOp | tt.LaunchExOp)]
    return spec, kinds


@pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")
@pytest.mark.parametrize("dtype", [bf, np.float32])
def test_strided_input_gradient_is_three_kernels(monkeypatch, dtype):
    """On the Hopper kernels ts.grad's input gradient of a 3x3/2 convolution is the NHWC
    copy of the gradient, the relayout of the forward weight into the phase kernel, and
    the convolution storing dx: no pad, reverse, transpose or slice kernels. PTX through
    ptxas."""
    spec, kinds = _input_grad_launches(monkeypatch, 1, (2, 24, 15, 13), (40, 24, 3, 3),
                                       (2, 40, 8, 7), dtype)
    assert kinds == ["conv_nhwc", "conv_weight", "conv"], kinds
    ptxas.check(spec.ir("ptx"))


def test_wide_phase_kernels_are_made(monkeypatch):
    """A phase kernel of 64 taps or more (a 15x15/2 kernel: 8 x 8 window taps) is relaid
    out by the NHWC copy from the made kernel: not claimed, its ops lowered."""
    _, kinds = _input_grad_launches(monkeypatch, 7, (1, 8, 16, 16), (8, 8, 15, 15),
                                    (1, 8, 8, 8), bf)
    assert "reverse" in kinds and "conv" in kinds, kinds


def test_relayout_and_epilogue_agree_on_the_column_order(monkeypatch):
    """With the phase kernel relaid out and the phases stored by the epilogue, both order
    the GEMM's columns as (channel, phase); with a made kernel (a weight used twice) both
    keep the graph's (phase, channel)."""
    from tessera.passes.sm90 import conv_interleave

    monkeypatch.setenv("TESSERA_SM90_MATMUL", "1")
    monkeypatch.setenv("TESSERA_IMPLICIT_CONV", "1")
    seen = []
    relayout, epilogue = conv_phase_weight.weight_kernel, conv_interleave.epilogue

    def spy_relayout(*args):
        seen.append(("weight", args[-1]))
        return relayout(*args)

    def spy_epilogue(e, il, *args):
        seen.append(("epilogue", il.channel_major))
        return epilogue(e, il, *args)

    monkeypatch.setattr(conv_phase_weight, "weight_kernel", spy_relayout)
    monkeypatch.setattr(conv_interleave, "epilogue", spy_epilogue)
    fn = ts.grad(lambda x, w, dy: ts.sum(ts.conv2d(x, w, stride=2, padding=1) * dy),
                 argnums=0)
    fn.specialize(np.zeros((2, 16, 13, 13), bf), np.zeros((16, 16, 3, 3), bf),
                  np.zeros((2, 16, 7, 7), bf)).ir("target")
    assert seen == [("weight", True), ("epilogue", True)], seen
    seen.clear()
    # the padded weight also returned: the pads are made, the relayout reads the made kernel
    fn2 = ts.jit(lambda g, w: (ts.conv2d(g, ts.reshape(ts.concat([w, w * 0.0], 0),
                                                       [32, 16, 2, 2]), padding=1), w))
    fn2.specialize(np.zeros((2, 16, 7, 7), bf), np.zeros((16, 16, 2, 2), bf)).ir("target")
    assert ("weight", True) not in seen and ("epilogue", True) not in seen, seen
