"""The prepared per-signature call and the program cache on a real GPU: results match torch,
arguments that need checks or copies still get them, errors still raise, the profiler
still sees every launch, and a program read from the disk cache runs. Skipped without a
CUDA device. The host overhead itself is measured by ``bench/run.py --cases host_overhead``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402
from tessera.frontend.errors import TesseraError  # noqa: E402
from tessera.runtime import cuda  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _pick():
    @ts.jit
    def pick(c, a, b):
        return ts.where(c, a, b)

    return pick


def _args(n=1024, device="cuda"):
    a = torch.randn(n, device=device)
    b = torch.randn(n, device=device)
    return a > 0, a, b


def test_cached_calls_match_torch_and_use_the_prepared_call(monkeypatch):
    pick = _pick()
    c, a, b = _args()
    first = pick(c, a, b)
    assert len(pick._hot) == 1
    checked = []
    real = cuda.HostPlan.run
    monkeypatch.setattr(cuda.HostPlan, "run", lambda *x, **k: checked.append(1) or real(*x, **k))
    outs = [pick(c, a, b) for _ in range(5)]
    torch.cuda.synchronize()
    assert not checked, "repeated calls must take the prepared call"
    want = torch.where(c, a, b)
    for out in (first, *outs):
        assert torch.equal(out, want)
    c2, a2, b2 = _args()
    assert torch.equal(pick(c2, a2, b2), torch.where(c2, a2, b2))  # new buffers, same signature


def test_prepared_call_on_a_side_stream():
    pick = _pick()
    c, a, b = _args()
    pick(c, a, b)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out = pick(c, a, b)
    s.synchronize()
    assert torch.equal(out, torch.where(c, a, b))


def test_arguments_that_need_copies_still_work():
    pick = _pick()
    c, a, b = _args()
    pick(c, a, b)
    strided = torch.randn(2048, device="cuda")[::2]
    assert torch.equal(pick(c, strided, b), torch.where(c, strided, b))
    shifted = torch.randn(1025, device="cuda")[1:]  # 4 bytes past a 16-byte boundary
    assert torch.equal(pick(c, shifted, b), torch.where(c, shifted, b))
    assert torch.equal(pick(c, a, b), torch.where(c, a, b))


def test_errors_still_raise():
    pick = _pick()
    c, a, b = _args()
    pick(c, a, b)
    with pytest.raises((cuda.LaunchError, TesseraError), match="CUDA|cuda|device"):
        pick(c, a.cpu(), b)
    spec = pick.specialize(c, a, b)
    plan = cuda.host_plan(spec.launch_module(), spec.name, spec.ir("ptx"))
    with pytest.raises(cuda.LaunchError, match="dtype"):
        plan.run([c, a.double(), b])
    with pytest.raises(cuda.LaunchError, match="shape"):
        plan.run([c, a[:512], b])
    half = pick(c, a.half(), b.half())  # another dtype: another specialization
    assert half.dtype == torch.float16 and torch.equal(half, torch.where(c, a.half(), b.half()))


def test_profiler_sees_cached_calls():
    pick = _pick()
    c, a, b = _args()
    pick(c, a, b)
    with ts.profiler.session() as prof:
        for _ in range(3):
            pick(c, a, b)
    assert cuda.LAUNCH_HOOK is None
    kernels = [e for e in prof.events if e.category == "kernel"]
    assert len(kernels) == 3 and all(e.function == "pick" for e in kernels)
    pick(c, a, b)  # the prepared call again, after the session


def test_program_cache_hit_runs_in_a_fresh_process(tmp_path):
    script = """
import torch, tessera as ts
@ts.jit
def f(x, w):
    return ts.relu(ts.gemm(x, w)) * 2.0
x = torch.randn(64, 32, device="cuda")
w = torch.randn(32, 48, device="cuda")
out = f(x, w)
spec = f.specialize(x, w)
ref = torch.relu(x @ w) * 2.0
err = float(((out - ref).norm() / ref.norm()).item())
print("HIT" if spec.launch_text is not None else "MISS", err)
"""
    env = {**os.environ, "TESSERA_CACHE_DIR": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("TESSERA_NO_DISK_CACHE", None)
    runs = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, check=True).stdout.split()
        for _ in range(2)
    ]
    assert runs[0][0] == "MISS" and runs[1][0] == "HIT"
    assert float(runs[0][1]) < 1e-4 and float(runs[1][1]) < 1e-4
