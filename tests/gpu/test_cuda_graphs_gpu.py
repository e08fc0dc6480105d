"""Repeated calls replayed as CUDA graphs (``TESSERA_CUDA_GRAPHS=1``,
tessera/runtime/cuda_graphs.py) on the GPU: every call of a loop, the recorded and
replayed ones included, against float64 with fresh values in the same input buffer (a
replay must read what the buffers hold now), bitwise equal to the same call with graphs
off; a torch.compile training loop of a tiny GPT-2 against eager at every step."""

from __future__ import annotations

import copy
import importlib
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _graph_caches():
    from tessera.runtime import cuda

    return [p.graphs for plans in list(cuda._PLANS.values()) for p in plans.values()
            if p.graphs is not None]


def _fn():
    import tessera as ts

    def body(x, w, b):
        h = ts.tanh(x @ w + b)
        s = ts.softmax(h, axis=-1)
        return ts.sum(s * h, axis=0), ts.rmsnorm(h)

    return ts.jit(body)


def _ref(x, w, b):
    h = torch.tanh(x.double() @ w.double() + b.double())
    s = torch.softmax(h, dim=-1)
    return (s * h).sum(0), h * torch.rsqrt(h.square().mean(-1, keepdim=True) + 1e-6)


def test_replayed_calls_match_float64_and_the_calls_without_graphs(monkeypatch):
    monkeypatch.setenv("TESSERA_CUDA_GRAPHS", "1")
    fn = _fn()
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.empty(300, 96, device="cuda")
    w = torch.randn(96, 200, device="cuda", generator=gen) / 10
    b = torch.randn(200, device="cuda", generator=gen)
    before = sum(g.replays for g in _graph_caches())
    last = None
    for i in range(6):
        x.copy_(torch.randn(300, 96, device="cuda", generator=gen))  # same buffer, new values
        outs = fn(x, w, b)
        errs = [((o.double() - r).abs().max() / r.abs().max()).item()
                for o, r in zip(outs, _ref(x, w, b))]
        assert max(errs) < 1e-4, f"call {i}: errors {errs}"
        if i == 5:
            last = (x.clone(), [o.clone() for o in outs])
        del outs, errs
    replays = sum(g.replays for g in _graph_caches()) - before
    assert replays >= 1, "no call of the loop was replayed"
    # the same call without graphs: bitwise the same results
    monkeypatch.setenv("TESSERA_CUDA_GRAPHS", "0")
    plain = _fn()(last[0], w, b)
    for a, p in zip(last[1], plain):
        assert torch.equal(a, p), "a replay differs from launching kernel by kernel"


def test_torch_compile_training_loop_with_graphs_matches_eager(monkeypatch):
    monkeypatch.setenv("TESSERA_CUDA_GRAPHS", "1")
    try:
        importlib.import_module("transformers")
    except ImportError as e:
        pytest.skip(f"transformers is not importable ({e}); install tessera[models]")
    import tessera.torch as tt
    from tests.torch.torch_models import MODELS, _loss

    torch.manual_seed(0)
    model, inputs = MODELS["gpt2"]("tiny", device="cuda")
    model = model.cuda().train()
    ref = copy.deepcopy(model)
    compiled = tt.compile(model)
    for step in range(6):  # the same batch each step, gradients dropped between steps
        for m in (model, ref):
            for p in m.parameters():
                p.grad = None
        loss = _loss(compiled(**inputs))
        loss.backward()
        ref_loss = _loss(ref(**inputs))
        ref_loss.backward()
        assert abs(loss.item() - ref_loss.item()) <= 2e-3 * abs(ref_loss.item()), step
        scale = max(p.grad.abs().max().item() for p in ref.parameters() if p.grad is not None)
        for (n, p), q in zip(model.named_parameters(), ref.parameters()):
            if q.grad is not None:
                err = (p.grad - q.grad).abs().max().item() / scale
                assert err < 2e-3, f"step {step} {n}: gradient error {err:.2e}"
        del loss, ref_loss
