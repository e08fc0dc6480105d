"""The ATen rules vision models need, against eager torch in float64 on fresh random
inputs: pooling (``rules_pool``: average pooling with ``ceil_mode``,
``count_include_pad`` and ``divisor_override``, max pooling with ``ceil_mode``,
adaptive average pooling to sizes that do not divide the image), strided views
(``rules_views``: ``as_strided``, ``as_strided_scatter``, ``copy``, ``slice_scatter``
with a step) and table reads (``rules_index``: ``index.Tensor``, ``index_put`` with
``accumulate=True``). Each case checks the forward, the input's gradient, that the
ops ran in Tessera (no op in eager torch, no partition sent back to torch), and
channels-last inputs where the layout matters.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
import torch.nn.functional as F

import tessera.torch as tt
from tessera.torch.rules_pool import out_size


def _fallbacks() -> Counter[str]:
    rep = tt.last_report()
    return sum((g.fallback_ops for g in rep.graphs), Counter())


def _check(fn, *inputs: torch.Tensor, grad: bool = True) -> None:
    """``fn`` compiled and eager agree (forward and, with ``grad``, the gradient of every
    float input), and Tessera ran every op."""
    xs = [x.detach().clone().requires_grad_(grad and x.is_floating_point()) for x in inputs]
    refs = [x.detach().clone().requires_grad_(grad and x.is_floating_point()) for x in inputs]
    out = tt.compile(fn)(*xs)
    ref = fn(*refs)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    if grad:
        w = torch.randn_like(ref)
        out.backward(w)
        ref.backward(w)
        for x, r in zip(xs, refs):
            if r.grad is not None:
                torch.testing.assert_close(x.grad, r.grad, rtol=1e-12, atol=1e-12)
    rep = tt.last_report()
    assert not _fallbacks(), str(rep)
    assert not rep.runtime_fallbacks, str(rep)
    assert all(g.tessera_calls >= 1 for g in rep.graphs), str(rep)


def _image(hw: int, channels_last: bool = False) -> torch.Tensor:
    x = torch.randn(2, 3, hw, hw + 1, dtype=torch.float64)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


POOLS = {
    "avg_2x2": (lambda x: F.avg_pool2d(x, 2), 9),
    "avg_3x3_s1_pad_excluded": (lambda x: F.avg_pool2d(x, 3, 1, 1, count_include_pad=False), 7),
    "avg_3x3_s2_ceil": (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), 10),
    "avg_3x3_s2_ceil_pad_excluded": (
        lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), 11),
    "avg_divisor_override": (lambda x: F.avg_pool2d(x, (2, 3), (1, 2), 1, divisor_override=5), 8),
    "max_3x3_s2_ceil": (lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), 10),
    "max_2x2_ceil_odd": (lambda x: F.max_pool2d(x, 2, ceil_mode=True), 7),
    "adaptive_7_of_33": (lambda x: F.adaptive_avg_pool2d(x, 7), 33),
    "adaptive_3x5_of_10": (lambda x: F.adaptive_avg_pool2d(x, (3, 5)), 10),
    "adaptive_7_of_5": (lambda x: F.adaptive_avg_pool2d(x, 7), 5),
    "adaptive_4_of_8": (lambda x: F.adaptive_avg_pool2d(x, 4), 8),
}


@pytest.mark.parametrize("name", list(POOLS))
def test_pooling_forward_and_backward(name):
    fn, hw = POOLS[name]
    torch.manual_seed(0)
    _check(fn, _image(hw))


@pytest.mark.parametrize("name", ["avg_3x3_s2_ceil_pad_excluded", "adaptive_7_of_33", "max_3x3_s2_ceil"])
def test_pooling_of_channels_last_images(name):
    fn, hw = POOLS[name]
    torch.manual_seed(1)
    _check(fn, _image(hw, channels_last=True))


@pytest.mark.parametrize("n,k,s,p,ceil", [(10, 3, 2, 1, True), (7, 2, 2, 0, True), (5, 3, 2, 1, True),
                                          (33, 7, 7, 0, False), (6, 3, 3, 1, True)])
def test_pool_output_size_matches_torch(n, k, s, p, ceil):
    x = torch.zeros(1, 1, n, n)
    assert out_size(n, k, s, p, ceil) == F.avg_pool2d(x, k, s, p, ceil_mode=ceil).shape[-1]
    assert out_size(n, k, s, p, ceil) == F.max_pool2d(x, k, s, p, ceil_mode=ceil).shape[-1]


def test_avg_pool_with_padding_over_half_the_kernel_stays_in_torch():
    """torch rejects it; the rule leaves it to torch, counted, so torch's error is the
    user's error."""
    with pytest.raises(Exception, match="pad should be at most half"):
        tt.compile(lambda x: F.avg_pool2d(x, 2, 2, 2))(_image(8))


def test_strided_views_of_own_storage():
    torch.manual_seed(2)
    x = torch.randn(2, 3, dtype=torch.float64)
    _check(lambda x: torch.as_strided(x * 2, (2, 3, 1, 1), (3, 1, 3, 3)) + 1, x)  # keepdim layout
    _check(lambda x: torch.as_strided(x * 2, (3, 2), (1, 3)) + 1, x)  # a transpose
    _check(lambda x: torch.as_strided(x * 2, (2, 2), (3, 1), 1) + 1, x)  # an offset


def test_as_strided_scatter_and_copy():
    torch.manual_seed(3)

    def fn(x):
        flat = (x * 2).reshape(-1)
        return torch.as_strided_scatter(flat, torch.full((2, 2), 3.0, dtype=x.dtype),
                                        (2, 2), (1, 3), 1) + 1

    _check(fn, torch.randn(2, 3, dtype=torch.float64), grad=False)

    def copy(x, y):
        z = x * 2
        z.copy_(y[0])  # y broadcast into z
        return z + 1

    _check(copy, torch.randn(4, 5, dtype=torch.float64), torch.randn(1, 5, dtype=torch.float64),
           grad=False)


def test_as_strided_of_a_view_of_another_tensor_stays_in_torch():
    """A transposed operand's storage is not its row-major data: the view is counted as
    a fallback and the answer is torch's."""
    x = torch.randn(3, 4, dtype=torch.float64)

    def fn(x):
        return torch.as_strided((x * 2).t(), (2, 2), (1, 2)) + 1

    torch.testing.assert_close(tt.compile(fn)(x), fn(x))
    assert _fallbacks()["aten.as_strided.default"] == 1


@pytest.mark.parametrize("step,start", [(2, 0), (3, 1)])
def test_slice_scatter_with_a_step(step, start):
    torch.manual_seed(4)

    def fn(x, y):
        z = x * 2
        z[:, start::step] = y[:, start::step] * 7
        return z - 1

    _check(fn, torch.randn(3, 8, dtype=torch.float64), torch.randn(3, 8, dtype=torch.float64))


def test_table_read_by_index_and_its_gradient():
    """A relative position bias: ``table[index.view(-1)]`` with negative indices, and the
    table's gradient through ``index_put(accumulate=True)`` (repeated indices add)."""
    torch.manual_seed(5)
    table = torch.randn(13, 4, dtype=torch.float64)
    index = torch.randint(-13, 13, (5, 5))

    def fn(t, i):
        return t[i.view(-1)].view(5, 5, -1).permute(2, 0, 1) * 3

    _check(fn, table, index)
    # LeViT's attention_biases[:, idxs]: a 2-D index on dim 1, and its gradient
    _check(lambda t, i: t[:, i] * 2, table.t().contiguous(), index[:2])
    _check(lambda t, i: t[:, :, i].sum(-1), torch.randn(2, 3, 13, dtype=torch.float64), index)


def test_table_read_out_of_range_is_nan():
    """torch raises for an index out of range; Tessera's gather reads NaN, never a finite
    value."""
    out = tt.compile(lambda t, i: t[i] * 2)(torch.randn(4, 3, dtype=torch.float64),
                                            torch.tensor([1, 7]))
    assert torch.isnan(out[1]).all() and torch.isfinite(out[0]).all()


def test_as_strided_of_a_channels_last_result_reads_torch_storage():
    """A Tessera result that torch holds in channels-last layout and reads through
    ``as_strided`` in torch is handed back with the fake tensor's strides."""
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64).contiguous(memory_format=torch.channels_last)

    def fn(x):
        return torch.as_strided(x * 2, (2, 3), (1, 2)) + 1

    torch.testing.assert_close(tt.compile(fn)(x), fn(x))
    assert _fallbacks()["aten.as_strided.default"] == 1


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm_with_affine_parameters(groups):
    """``native_group_norm`` (PoolFormer's GroupNorm1 is one group): the forward, the
    input's and the weight's and bias's gradients (the backward is decomposed)."""
    torch.manual_seed(6)
    norm = torch.nn.GroupNorm(groups, 4).double()
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    w, b = norm.weight.detach(), norm.bias.detach()
    _check(lambda x, w, b: F.group_norm(x, groups, w, b, 1e-5),
           torch.randn(2, 4, 5, 7, dtype=torch.float64), w, b)


ACTIVATIONS = {
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "clamp_tensor_bounds": lambda x: torch.clamp(x, min=x.mean(), max=x.amax(1, keepdim=True) * 0.5),
    "vector_norm_2": lambda x: torch.linalg.vector_norm(x, dim=(1, 2)),
    "vector_norm_1": lambda x: torch.linalg.vector_norm(x, ord=1, dim=-1, keepdim=True),
    "vector_norm_inf": lambda x: torch.linalg.vector_norm(x, ord=float("inf"), dim=1),
    "normalize": lambda x: F.normalize(x, dim=1),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activations_clamps_and_norms(name):
    torch.manual_seed(7)
    _check(ACTIVATIONS[name], torch.randn(2, 4, 5, 6, dtype=torch.float64))


@pytest.mark.parametrize("shifts,dims", [((1, -2), (2, 3)), (3, 1), (-7, None), ((2, 9), (2, 3))])
def test_roll(shifts, dims):
    """``torch.roll`` (Swin's shifted windows) is kept whole and translated, forward and
    backward (a roll back)."""
    torch.manual_seed(8)
    _check(lambda x: torch.roll(x * 2, shifts, dims), torch.randn(2, 3, 4, 5, dtype=torch.float64))
