"""The Graph IR of the rules the wider model sweep added (integer ``gather`` through
float64 with its run-time checks, ``argmax``/``max.dim``, ``floor``/``ceil``, ``log1p``/
``expm1``, ``sign`` of integers, ``scatter_add``, several-index ``index_put``, 1-D
convolutions) lowers through the GPU pipeline to PTX that ptxas accepts: on this CPU
machine the partitions run on the reference interpreter, and this checks that on a GPU
they compile rather than fail in the lowering (an error there would not fall back to
torch)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from xdsl.parser import Parser

import tessera.torch as tt
from tessera.passes.pipelines import default_context, lower_to_target, lower_to_tile, to_ptx
from tessera.runtime import ptxas


def _f(x, ids, table, pos, w, src, idx):
    t = torch.gather(table, 1, pos)  # int64: float64 gather, run-time checks
    a = torch.argmax(x, 1) + torch.max(x, 2)[1].sum() + torch.sign(ids)
    r = torch.floor(x) + torch.ceil(x) * torch.log1p(x.abs()) + torch.expm1(x)
    s = torch.scatter_add(x, 1, idx, src)
    up = F.interpolate(x.unsqueeze(0), size=(9, 8), mode="bilinear")
    c = F.conv1d(x, w, stride=2, padding=1)
    return (r + s).sum() + up.sum() + c.pow(2).sum() + torch.max(x, 1).values.sum(), a + t


def test_new_rules_lower_to_ptx_that_ptxas_accepts(tmp_path, monkeypatch):
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found (set TESSERA_PTXAS or install nvidia-cuda-nvcc)")
    monkeypatch.setenv("TESSERA_DUMP_DIR", str(tmp_path))
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(4, 7, 5, generator=gen, requires_grad=True)
    args = (x, torch.randint(-3, 3, (4, 5), generator=gen),
            torch.randint(0, 2, (1, 16), generator=gen), torch.arange(5).unsqueeze(0),
            torch.randn(6, 7, 3, generator=gen, requires_grad=True),
            torch.randn(4, 7, 5, generator=gen), torch.randint(0, 7, (3, 4, 5), generator=gen))
    loss, ints = tt.compile(_f)(*args)
    loss.backward()
    want_loss, want_ints = _f(*args)
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-5)
    assert torch.equal(ints, want_ints)
    rep = tt.last_report()
    assert not rep.fallback_ops and not rep.runtime_fallbacks, str(rep)
    graphs = sorted(tmp_path.glob("*/*-graph.mlir"))
    assert len(graphs) >= 2  # the forward's and the backward's partitions
    for g in graphs:
        module = Parser(default_context(), g.read_text()).parse_module()
        ptxas.check(to_ptx(lower_to_target(lower_to_tile(module)), verify=False))
    torch._dynamo.reset()


def _masks(x, y, n):
    """16-bit floats cast to bool (Longformer's ``mask.bool()`` of a bf16 model: ``x != 0``)
    in a fused kernel and alone, to an integer, and an integer to the 16-bit type."""
    keep = x.bool()
    filled = torch.where(keep, y, torch.full_like(y, float("-inf"))) * 2
    return filled, y.bool(), (y * 4).to(torch.int32), n.to(x.dtype) + x


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_casts_to_bool_lower_to_ptx_and_match_float64(tmp_path, monkeypatch, dtype):
    """A 16-bit float cast to bool is ``x != 0`` compared in f32 (exact: widening a 16-bit
    float is); the GPU lowering had emitted a 16-bit comparison, which the target lowering
    refuses ("arithmetic on bf16 is not lowered"). Results on the CPU reference against
    float64, then the partitions through the GPU pipeline (sm90 kernels) to PTX that
    ptxas accepts."""
    from tessera.options import CompileOptions

    monkeypatch.setenv("TESSERA_DUMP_DIR", str(tmp_path))
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 8, generator=gen).to(dtype)
    x[0, :4] = torch.tensor([0.0, -0.0, float("nan"), 1e-7]).to(dtype)  # -0 is False, NaN True
    y = torch.randn(4, 8, generator=gen).to(dtype)
    y[1, :2] = 0.0
    n = torch.randint(-300, 300, (4, 8), generator=gen, dtype=torch.int32)
    got = tt.compile(_masks)(x, y, n)
    xd, yd = x.double(), y.double()
    keep = xd != 0
    want = (torch.where(keep, yd, torch.full_like(yd, float("-inf"))) * 2, yd != 0,
            (y * 4).to(torch.int32), (n.to(dtype).double() + xd).to(dtype))
    torch.testing.assert_close(got[0], want[0].to(dtype), rtol=0, atol=0)
    assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
    torch.testing.assert_close(got[3], want[3], rtol=0, atol=0, equal_nan=True)
    assert torch.equal(got[1], y.bool()) and torch.equal(x.bool(), keep)
    rep = tt.last_report()
    assert not rep.fallback_ops and not rep.runtime_fallbacks, str(rep)
    if ptxas.find_ptxas() is None:
        pytest.skip("ptxas not found (set TESSERA_PTXAS or install nvidia-cuda-nvcc)")
    graphs = sorted(tmp_path.glob("*/*-graph.mlir"))
    assert graphs
    options = CompileOptions(sm90_kernels=True)
    for g in graphs:
        module = Parser(default_context(), g.read_text()).parse_module()
        ptx = to_ptx(lower_to_target(lower_to_tile(module, options), options), verify=False)
        ptxas.check(ptx)
    torch._dynamo.reset()
