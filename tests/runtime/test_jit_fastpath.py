"""Repeated GPU calls take the keyed fast path (exercised on CPU with a stand-in backend)."""

import pytest
import torch

import tessera as ts
from tessera.frontend import jit as jit_mod
from tessera.runtime import convert, dispatch


@pytest.fixture
def fake_gpu(monkeypatch):
    calls = []
    monkeypatch.setattr(convert, "is_cuda_tensor", convert.is_torch_tensor)
    monkeypatch.setattr(dispatch, "GPU_BACKEND", lambda spec, args: calls.append((spec, args)))
    return calls


def test_repeated_call_skips_specialization(fake_gpu, monkeypatch):
    @ts.jit
    def f(a, b, scale):
        return a * scale + b

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    f(x, y, 2.0)
    specialize = []
    monkeypatch.setattr(
        jit_mod.CompiledFunction, "_specialize", lambda *a, **k: specialize.append(a)
    )
    f(x, y, 2.0)
    assert not specialize, "the second call must not specialize again"
    assert fake_gpu[0][0] is fake_gpu[1][0]
    assert [t is u for t, u in zip(fake_gpu[1][1], (x, y))] == [True, True]


def test_fast_path_keys_shapes_dtypes_and_static_values(fake_gpu):
    @ts.jit
    def f(a, b, scale):
        return a * scale + b

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    f(x, y, 2.0)
    f(x, y, 3.0)
    f(torch.randn(5, 4), torch.randn(5, 4), 2.0)
    f(x, b=y, scale=2.0)  # keywords: the full path, same specialization as the first call
    specs = [c[0] for c in fake_gpu]
    assert specs[0] is not specs[1] and specs[0] is not specs[2] and specs[3] is specs[0]
    assert jit_mod._fast_key((x, [1, 2])) is None
