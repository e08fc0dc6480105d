"""Work-sharing ts.tile.range and prefetch= pipelining (tessera/frontend/kernel_worksharing.py)
as PTX on a GPU: the guide's process_chunks (chunks round the tiles, elements round the
lanes) on several grids, and a double-buffered axpy with prefetch=2 (cp.async.wait_group
1) against the same kernel without prefetch and numpy. Outputs start as NaN."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tessera as ts

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "kernels"))


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))


@pytest.mark.parametrize("n", [1, 300, 4096 + 77])
def test_process_chunks_on_gpu(n):
    import process_chunks as pc

    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    for grid in (None, 1, 3):
        out = torch.full((n,), float("nan"), device="cuda")
        kw = {} if grid is None else {"grid": grid}
        pc.process_chunks(torch.from_numpy(x).cuda(), out, **kw)
        torch.cuda.synchronize()
        np.testing.assert_allclose(out.cpu().numpy(), pc.reference(x), rtol=1e-6, atol=1e-6)


AXPY = """
@ts.kernel
def axpy(X: ts.Tensor["m", ts.f16], Y: ts.Tensor["m", ts.f16], alpha: ts.f16):
    s0 = ts.tile.alloc_shared((128,), ts.f16)
    s1 = ts.tile.alloc_shared((128,), ts.f16)
    for t in ts.tile.range(0, m, 128{prefetch}):
        ts.tile.cp_async(s1, X[t:t+128])
        ts.tile.barrier()
        if t > 0:
            for i in range(ts.tile.local_id(), 128, ts.tile.group_size()):
                Y[t - 128 + i] = alpha * s0[i] + Y[t - 128 + i]
        ts.tile.barrier()
        s0, s1 = s1, s0
"""


def test_prefetch_pipeline_on_gpu():
    m = 128 * 40
    rng = np.random.default_rng(9)
    X = rng.standard_normal(m).astype(np.float16)
    Y0 = rng.standard_normal(m).astype(np.float16)
    outs = {}
    for pf in ("", ", prefetch=2"):
        k = ts.kernel.from_source(AXPY.format(prefetch=pf), {"ts": ts})
        assert ("cp.async.wait_group 1" in k.inspect_ir("ptx")) == bool(pf)
        Y = torch.from_numpy(Y0.copy()).cuda()
        k(torch.from_numpy(X).cuda(), Y, np.float16(0.75))
        torch.cuda.synchronize()
        outs[pf] = Y.cpu().numpy()
    assert outs[""].tobytes() == outs[", prefetch=2"].tobytes()
    want = Y0.astype(np.float32).copy()
    want[:-128] = 0.75 * X[:-128].astype(np.float32) + Y0[:-128].astype(np.float32)
    np.testing.assert_allclose(outs[""].astype(np.float32), want, rtol=2e-3, atol=2e-3)
