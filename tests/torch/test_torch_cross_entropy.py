"""Cross-entropy, gather and scatter under ``torch.compile(backend="tessera")``.

The loss and the logits' gradient are checked against torch's autograd in float64 on
fresh random logits (CPU: Tessera's reference interpreter), with ignored rows, all rows
ignored, odd class counts (50257) and 16-bit logits upcast as Hugging Face's causal-LM
loss does. The report must show no graph break.
"""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F

import tessera.torch as tt
from tessera.torch.cross_entropy import cross_entropy

backend_module = importlib.import_module("tessera.torch.backend")


def _hf_loss(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Hugging Face's ForCausalLMLoss without the shift: f32 upcast, flatten, loss."""
    logits = logits.float()
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1),
                           ignore_index=-100, reduction=reduction)


def _plain_loss(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    return F.cross_entropy(logits, labels, ignore_index=-100, reduction=reduction)


def _labels(n: int, c: int, ignored: list[int], gen: torch.Generator) -> torch.Tensor:
    t = torch.randint(0, c, (n,), generator=gen)
    t[ignored] = -100
    return t


def _reference(x: torch.Tensor, t: torch.Tensor, reduction: str) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's loss and logits' gradient in float64 (upstream gradient: the loss's
    size in ones)."""
    x64 = x.detach().double().requires_grad_()
    loss = F.cross_entropy(x64.view(-1, x.shape[-1]), t.view(-1), ignore_index=-100,
                           reduction=reduction)
    loss.backward(torch.ones_like(loss))
    return loss.detach(), x64.grad


def _run(fn, x: torch.Tensor, t: torch.Tensor, reduction: str):
    x = x.detach().clone().requires_grad_()
    loss = tt.compile(fn)(x, t, reduction)
    loss.backward(torch.ones_like(loss))
    return loss.detach(), x.grad


@pytest.mark.parametrize("n, c, dtype, fn, ignored, reduction", [
    (6, 50257, torch.bfloat16, _hf_loss, [1, 4], "mean"),
    (6, 50257, torch.float32, _plain_loss, [0], "mean"),
    (13, 7, torch.float32, _plain_loss, [2, 3, 12], "sum"),
    (9, 1031, torch.bfloat16, _hf_loss, [5], "none"),
    (5, 3, torch.float16, _hf_loss, [], "mean"),
    (4, 11, torch.float64, _plain_loss, [1], "mean"),
])
def test_loss_and_gradient_match_float64(n, c, dtype, fn, ignored, reduction):
    gen = torch.Generator().manual_seed(n * 1000 + c)
    x = (torch.randn(n, c, generator=gen) * 3).to(dtype)
    t = _labels(n, c, ignored, gen)
    loss, grad = _run(fn, x, t, reduction)
    want, want_grad = _reference(x, t, reduction)
    # the loss is computed in f32 from the exact (16-bit) logits: f32 rounding only
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    torch.testing.assert_close(loss.double(), want.to(torch.float64), rtol=tol, atol=tol)
    assert grad.dtype == dtype
    # the gradient is rounded once to the logits' dtype
    gtol = {torch.bfloat16: 8e-3, torch.float16: 1e-3, torch.float32: 2e-6,
            torch.float64: 1e-12}[dtype]
    torch.testing.assert_close(grad.double(), want_grad, rtol=gtol, atol=gtol * want_grad.abs().max().item())
    assert torch.all(grad[ignored] == 0)
    rep = tt.last_report()
    assert rep.graph_breaks == 0, str(rep)
    assert [g.partitions for g in rep.graphs] == [1, 1], str(rep)


def test_all_rows_ignored_gives_nan_mean_and_zero_gradient():
    x = torch.randn(4, 37, dtype=torch.bfloat16)
    t = torch.full((4,), -100)
    loss, grad = _run(_hf_loss, x, t, "mean")
    want, want_grad = _reference(x, t, "mean")
    assert torch.isnan(want) and torch.isnan(loss)
    assert torch.all(grad == 0) and torch.all(want_grad == 0)
    loss, grad = _run(_hf_loss, x, t, "sum")
    assert loss.item() == 0.0 and torch.all(grad == 0)


def test_backward_saves_the_row_log_sum_exp_not_log_probabilities(monkeypatch):
    """The forward returns the 16-bit logits' view and an [N] log-sum-exp to the backward:
    no [N, C] float32 tensor is saved, and the upcast is not computed at all."""
    graphs = {}
    orig = backend_module.compile_graph

    def spy(gm, example_inputs, *, kind, name, **kw):
        graphs[kind] = [(nd.op, str(nd.target), nd.meta.get("val")) for nd in gm.graph.nodes]
        return orig(gm, example_inputs, kind=kind, name=name, **kw)

    monkeypatch.setattr(backend_module, "compile_graph", spy)
    n, c = 8, 301
    x = torch.randn(n, c, dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, c, (n,))
    tt.compile(_hf_loss)(x, t).backward()
    fw = [(target, v) for op, target, v in graphs["forward"] if op == "call_function"]
    assert "tessera.cross_entropy_rows.default" in {target for target, _ in fw}
    assert not [target for target, v in fw if isinstance(v, torch.Tensor) and v.dim() == 2
                and v.dtype == torch.float32]  # no [N, C] f32 tensor is made at all
    saved = [v for op, _, v in graphs["backward"] if op == "placeholder"]
    big = [v for v in saved if isinstance(v, torch.Tensor) and v.numel() >= n * c]
    assert [v.dtype for v in big] == [torch.bfloat16]
    assert sorted(list(v.shape) for v in saved if isinstance(v, torch.Tensor)
                  and v.dtype == torch.float32 and v.dim() == 1) == [[n]]


def test_nll_loss_of_log_softmax_translates_gather_and_scatter():
    """Without the cross-entropy call (log_softmax, then nll_loss): the gather of the
    forward and the scatter of the backward are Tessera ops, no graph break."""
    def f(x, t):
        return F.nll_loss(F.log_softmax(x, dim=-1), t, ignore_index=-100)

    gen = torch.Generator().manual_seed(7)
    x = torch.randn(7, 129, generator=gen, requires_grad=True)
    t = _labels(7, 129, [3], gen)
    loss = tt.compile(f)(x, t)
    loss.backward()
    x64 = x.detach().double().requires_grad_()
    want = f(x64, t)
    want.backward()
    torch.testing.assert_close(loss.double(), want, rtol=2e-6, atol=2e-6)
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=2e-6, atol=2e-7)
    rep = tt.last_report()
    assert rep.graph_breaks == 0, str(rep)


def test_gather_with_indices_smaller_than_the_input():
    def f(x, i):
        return torch.gather(x, 1, i) * 2.0 + torch.gather(x, 0, i)

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(5, 9, generator=gen)
    i = torch.randint(0, 5, (4, 3), generator=gen)
    with torch.no_grad():
        got = tt.compile(f)(x, i)
    torch.testing.assert_close(got, f(x, i))
    assert tt.last_report().graph_breaks == 0


def test_out_of_range_target_gives_nan_not_a_plausible_loss():
    """torch raises on a target outside the classes; Tessera's gather reads nothing and
    the loss is NaN (as is the row's gradient)."""
    x = torch.randn(4, 10, requires_grad=True)
    t = torch.tensor([1, 10, 3, -100])
    loss = tt.compile(_plain_loss)(x, t, "none")
    assert torch.isnan(loss[1]) and not torch.isnan(loss[[0, 2]]).any() and loss[3] == 0
    loss.sum().backward()
    assert torch.isnan(x.grad[1]).all() and not torch.isnan(x.grad[[0, 2, 3]]).any()


def test_eager_custom_ops_match_torch():
    """The custom ops' own torch implementations (used where a partition runs in torch)."""
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(6, 33, generator=gen, dtype=torch.float64, requires_grad=True)
    t = _labels(6, 33, [2], gen)
    for red in ("mean", "sum", "none"):
        x.grad = None
        got = cross_entropy(x, t, -100, red)
        got.backward(torch.ones_like(got))
        want, want_grad = _reference(x, t, red)
        torch.testing.assert_close(got.detach(), want)
        torch.testing.assert_close(x.grad, want_grad)


def test_only_plain_cross_entropy_calls_are_replaced():
    """Class weights, label smoothing, probability targets and N-d logits keep torch's
    decomposition (still correct); an upcast used elsewhere too is kept and not folded."""
    import torch.fx

    from tessera.torch.cross_entropy import fuse_cross_entropy

    def cases(x, t, p, w, xb):
        y = xb.float()
        return (F.cross_entropy(x, t, weight=w), F.cross_entropy(x, t, label_smoothing=0.1),
                F.cross_entropy(x, p), F.cross_entropy(x.view(2, 3, 7).transpose(1, 2), t.view(2, 3)),
                F.cross_entropy(y, t) + y.sum())

    seen = {}

    def spy(gm: torch.fx.GraphModule, example_inputs):
        seen["n"] = fuse_cross_entropy(gm)
        seen["float"] = any(n.op == "call_method" and n.target == "float" for n in gm.graph.nodes)
        return gm.forward

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(6, 7, generator=gen)
    t = torch.randint(0, 7, (6,), generator=gen)
    p = torch.softmax(torch.randn(6, 7, generator=gen), -1)
    w = torch.rand(7, generator=gen)
    xb = x.to(torch.bfloat16)
    got = torch.compile(cases, backend=spy)(x, t, p, w, xb)
    assert seen == {"n": 1, "float": True}  # the last call only, its upcast kept
    for a, b in zip(got, cases(x, t, p, w, xb)):
        torch.testing.assert_close(a, b)


def test_dynamic_batch_sizes_share_the_graph():
    compiled = tt.compile(_hf_loss, dynamic=True)
    gen = torch.Generator().manual_seed(9)
    for n in (5, 9, 12):
        x = torch.randn(n, 33, generator=gen).to(torch.bfloat16).requires_grad_()
        t = _labels(n, 33, [1], gen)
        loss = compiled(x, t)
        loss.backward()
        want, want_grad = _reference(x, t, "mean")
        torch.testing.assert_close(loss.double(), want, rtol=2e-6, atol=2e-6)
        torch.testing.assert_close(x.grad.double(), want_grad, rtol=8e-3, atol=8e-3 * want_grad.abs().max().item())
    assert tt.last_report().graph_breaks == 0


def test_scatter_one_index_per_position():
    """scatter.value and scatter.src with one index per row along the dim; a row whose
    index is outside the dim becomes NaN (torch raises)."""
    def f(x, i, j, s):
        return torch.scatter(x, 1, i, 2.5) + torch.scatter(x, 0, j, s)

    gen = torch.Generator().manual_seed(4)
    x = torch.randn(5, 6, generator=gen)
    i = torch.randint(0, 6, (5, 1), generator=gen)
    j = torch.randint(0, 5, (1, 6), generator=gen)
    s = torch.randn(1, 6, generator=gen)
    with torch.no_grad():
        got = tt.compile(f)(x, i, j, s)
        torch.testing.assert_close(got, f(x, i, j, s))
        assert tt.last_report().graph_breaks == 0
        bad = i.clone()
        bad[2, 0] = 6
        got = tt.compile(lambda x, i: torch.scatter(x, 1, i, 1.0))(x, bad)
    assert torch.isnan(got[2]).all() and not torch.isnan(got[[0, 1, 3, 4]]).any()
