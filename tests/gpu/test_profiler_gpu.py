"""ts.profiler on the GPU: kernel events from CUDA events, with IR bytes/FLOPs, in the
table, the Chrome trace and the roofline against measured ceilings. Skipped without a
CUDA device."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402

M, K, N = 64, 96, 48


@pytest.fixture
def lowered(monkeypatch):
    """ts.jit with the generic (mma.sync) kernels."""
    monkeypatch.setenv("TESSERA_SM90_MATMUL", "0")


def _program():
    def mm_softmax(x, w):
        return ts.transpose(ts.softmax(ts.matmul(x, w), axis=-1), (1, 0))

    return ts.jit(mm_softmax)


def test_kernel_events_in_table_and_trace(lowered, tmp_path):
    from tessera.runtime import cuda

    fn = _program()
    x = torch.randn(M, K, device="cuda")
    w = torch.randn(K, N, device="cuda")
    want = torch.softmax(x @ w, dim=-1).T
    fn(x, w)  # compile and load outside the session
    with ts.profiler.session() as prof:
        for _ in range(3):
            out = fn(x, w)
    assert cuda.LAUNCH_HOOK is None
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
    kernels = [e for e in prof.events if e.category == "kernel"]
    assert len(kernels) >= 9 and all(e.dur_us > 0 for e in kernels)
    assert all(e.device.startswith("cuda:") and e.function == "mm_softmax" for e in kernels)
    mm = [e for e in kernels if e.name == "mm_softmax_matmul_0"]
    assert len(mm) == 3
    assert mm[0].flops == 2 * M * N * K and mm[0].bytes == 4 * (M * K + K * N + M * N)
    starts = [e.start_us for e in kernels]
    assert starts == sorted(starts) and starts[0] >= 0
    text = prof.table(file=open("/dev/null", "w"))
    assert "GPU kernels" in text and "mm_softmax_matmul_0" in text

    doc = json.loads(prof.export_chrome_trace(tmp_path / "t.json").read_text())
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel"]
    assert len(xs) == len(kernels)
    tids = {e["tid"] for e in xs}
    assert len(tids) == 1
    (track,) = [e for e in doc["traceEvents"] if e["ph"] == "M" and e["tid"] in tids]
    assert track["args"]["name"] == "GPU kernels"
    for e in xs:
        assert e["dur"] > 0 and e["args"]["bytes"] > 0 and "grid" in e["args"]
    mm_ev = next(e for e in xs if e["name"] == "mm_softmax_matmul_0")
    assert mm_ev["args"]["flops"] == 2 * M * N * K

    png = prof.roofline(tmp_path / "roof.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    c = prof.ceilings()
    assert c.device == torch.cuda.get_device_name() and c.bandwidth > 1e9
    assert set(c.flops) == {"float32", "bfloat16"}


def test_no_events_without_session(lowered):
    from tessera.runtime import cuda

    fn = _program()
    x = torch.randn(M, K, device="cuda")
    w = torch.randn(K, N, device="cuda")
    with ts.profiler.session() as prof:
        fn(x, w)
    n = len(prof.events)
    fn(x, w)
    torch.cuda.synchronize()
    assert cuda.LAUNCH_HOOK is None and len(prof.events) == n
