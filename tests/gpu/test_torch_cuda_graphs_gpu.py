"""``torch.compile(model, backend="tessera", mode="reduce-overhead")`` on the GPU: the
partitions' launches are recorded and replayed as CUDA graphs, with the same bits as the
default mode's launches. Skipped without a GPU."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.usefixtures("fresh_dynamo"),
]

from torch import nn  # noqa: E402

import tessera.torch  # noqa: E402, F401  (registers the "tessera" backend)


def _graph_counts() -> tuple[int, int]:
    from tessera.runtime import cuda

    caches = [p.graphs for plans in list(cuda._PLANS.values()) for p in plans.values()
              if p.graphs is not None]
    return sum(g.captures for g in caches), sum(g.replays for g in caches)


def _steps(compiled, model, x, n):
    """``n`` training steps of ``model`` on ``x`` without other allocations between
    them; the last output and gradients."""
    for _ in range(n):
        model.zero_grad(set_to_none=True)
        y = compiled(x)
        y.float().square().mean().backward()
    return y, [p.grad for p in model.parameters()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reduce_overhead_training_steps_replay_graphs_with_the_same_bits(dtype):
    gen = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 32)).to("cuda", dtype)
    plain = copy.deepcopy(model)
    # one batch, as a benchmark loop: a key (the addresses of a call's inputs, outputs
    # and arena) repeats where torch's caching allocator hands out the same blocks
    x = torch.randn(128, 64, generator=gen).to("cuda", dtype)
    before = _graph_counts()
    a, grads_a = _steps(torch.compile(model, backend="tessera", mode="reduce-overhead"),
                        model, x, 8)
    captures, replays = (n - m for n, m in zip(_graph_counts(), before))
    b, grads_b = _steps(torch.compile(plain, backend="tessera"), plain, x, 2)
    assert torch.equal(a, b)
    for ga, gb in zip(grads_a, grads_b):
        assert torch.equal(ga, gb)
    assert captures > 0 and replays > 0, (captures, replays)
