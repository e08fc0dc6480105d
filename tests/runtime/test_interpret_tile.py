"""``TESSERA_INTERPRET_TILE=1``: CPU calls run the GPU lowering's Tile IR on the Tile IR
interpreter (``dispatch.run_on_cpu``), so that lowering is checked without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera.options import RuntimeOptions
from tessera.runtime import tile_interpreter


@pytest.fixture
def tile_runs(monkeypatch):
    """Counts the Tile IR interpreter's host calls."""
    calls = []
    real = tile_interpreter.run_host

    def run_host(module, name, args, mesh=None):
        calls.append(name)
        return real(module, name, args, mesh)

    monkeypatch.setattr(tile_interpreter, "run_host", run_host)
    return calls


def test_option_from_the_environment():
    assert RuntimeOptions.from_env({"TESSERA_INTERPRET_TILE": "1"}).interpret_tile
    assert not RuntimeOptions.from_env({}).interpret_tile


def test_jit_runs_the_tile_ir(monkeypatch, tile_runs):
    @ts.jit
    def f(x, w):
        return ts.sum(ts.softmax(ts.matmul(x, w), axis=-1) * 2.0, axis=0)

    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(37, 19)).astype(np.float32), rng.normal(size=(19, 23)).astype(np.float32)
    want = np.asarray(f(x, w))
    assert tile_runs == []
    monkeypatch.setenv("TESSERA_INTERPRET_TILE", "1")
    got = np.asarray(f(x, w))
    assert tile_runs == [f.specialize(x, w).name]
    s = x.astype(np.float64) @ w.astype(np.float64)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True) * 2.0).sum(0)
    assert np.abs(got - ref).max() < 1e-5 and np.abs(want - ref).max() < 1e-5


def test_torch_compile_partition_runs_the_tile_ir(monkeypatch, tile_runs):
    torch = pytest.importorskip("torch")
    import tessera.torch  # noqa: F401 - registers the backend

    monkeypatch.setenv("TESSERA_INTERPRET_TILE", "1")
    torch._dynamo.reset()

    def g(a, b):
        return torch.nn.functional.gelu(a @ b).mean(-1)

    a, b = torch.randn(9, 12), torch.randn(12, 5)
    got = torch.compile(g, backend="tessera")(a, b)
    assert tile_runs, "the partition ran on the Graph IR interpreter"
    ref = g(a.double(), b.double())
    assert (got.double() - ref).abs().max() < 1e-5
