"""The prepared call's arena (tessera/runtime/arena.py): one allocation for the
intermediates, each placed where no buffer in use at the same time lies, results left
out (driven on CPU with bench/host_path.py's stand-ins)."""

import random
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import host_path  # noqa: E402
from tessera.runtime import arena, cuda  # noqa: E402


def test_first_fit_never_overlaps_buffers_in_use_together():
    rng = random.Random(0)
    bufs = []
    for first in range(200):
        for _ in range(rng.randint(0, 3)):
            bufs.append((rng.randint(1, 5000), first, first + rng.randint(0, 30)))
    offsets, total = arena.first_fit(bufs)
    for (size, _, _), off in zip(bufs, offsets):
        assert off % arena.ARENA_ALIGNMENT == 0 and off + size <= total
    for i, ((si, fi, li), oi) in enumerate(zip(bufs, offsets)):
        for (sj, fj, lj), oj in zip(bufs[i + 1:], offsets[i + 1:]):
            if fj <= li and fi <= lj:  # both in use at one launch
                assert oi + si <= oj or oj + sj <= oi
    # dead buffers' bytes are taken again: far below the sum of the sizes
    assert total < sum(-(-s // 256) * 256 for s, _, _ in bufs) / 4


def test_first_fit_takes_a_dead_buffers_place():
    offsets, total = arena.first_fit([(1000, 0, 1), (1000, 1, 2), (1000, 2, 3)])
    # the third starts after the first's last launch: its bytes
    assert offsets == [0, 1024, 0] and total == 2048


@pytest.fixture
def gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    with host_path.stand_ins() as fake:
        fake.read = 2  # every kernel's first two parameters: its output and an input
        yield fake


def _arena_blocks(monkeypatch) -> list[torch.Tensor]:
    """The arena blocks (``torch.empty`` of uint8) allocated from now on, kept alive."""
    blocks: list[torch.Tensor] = []
    real_empty = torch.empty

    def empty(*a, **k):
        t = real_empty(*a, **k)
        if k.get("dtype") is torch.uint8:
            blocks.append(t)
        return t

    monkeypatch.setattr(torch, "empty", empty)
    return blocks


def test_runner_passes_intermediates_inside_one_block(gpu, monkeypatch):
    import tessera as ts

    @ts.jit
    def f(x, w):
        h = ts.tanh(x @ w)
        return ts.exp(ts.transpose(h, [1, 0])) * 2.0, ts.sum(h, axis=1)

    launches = gpu.params  # each launch's first parameters
    x, w = torch.randn(64, 32), torch.randn(32, 48)
    spec = f.specialize(x, w)
    plan = cuda.host_plan(spec.launch_module(), spec.name, spec.ir("ptx"))
    blocks = _arena_blocks(monkeypatch)
    run = plan.runner()
    out, s = run([x, w])
    assert len(blocks) == 1, "one arena per call"
    lo, hi = blocks[0].data_ptr(), blocks[0].data_ptr() + blocks[0].numel()
    pointers = {p for values in launches for p in values if isinstance(p, int)}
    inside = {p for p in pointers if lo <= p < hi}
    assert inside, "the intermediates live in the arena"
    for r in (out, s):  # results are tensors of their own, outside it
        assert isinstance(r, torch.Tensor) and not lo <= r.data_ptr() < hi
    assert out.shape == (48, 64) and s.shape == (64,)


def test_runner_follows_the_arena_when_it_moves(gpu, monkeypatch):
    """The buffers of an arena address are made once and reused while the arena block
    comes back at that address; a call whose block is elsewhere passes addresses inside
    its own block."""
    import tessera as ts

    @ts.jit
    def f(x, w):
        h = ts.tanh(x @ w)
        return ts.exp(ts.transpose(h, [1, 0])) * 2.0, ts.sum(h, axis=1)

    launches = gpu.params  # each launch's first parameters
    x, w = torch.randn(64, 32), torch.randn(32, 48)
    spec = f.specialize(x, w)
    plan = cuda.host_plan(spec.launch_module(), spec.name, spec.ir("ptx"))
    blocks = _arena_blocks(monkeypatch)  # kept alive: the next call's block is elsewhere
    run = plan.runner()
    for call in range(3):
        launches.clear()
        run([x, w])
        lo, hi = blocks[-1].data_ptr(), blocks[-1].data_ptr() + blocks[-1].numel()
        pointers = {p for values in launches for p in values if isinstance(p, int)}
        others = [(b.data_ptr(), b.data_ptr() + b.numel()) for b in blocks[:-1]]
        assert any(lo <= p < hi for p in pointers), call
        assert not any(a <= p < b for p in pointers for a, b in others), call
    assert len({b.data_ptr() for b in blocks}) == 3
