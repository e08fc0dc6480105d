"""Batch norm's training step through ``torch.compile(backend="tessera")`` on CUDA
tensors: the per-(sample, channel) statistics and their gradients are fused bodies
closed by reductions over the trailing ``[H, W]`` dims, lowered as row kernels
(``tgraph.row_moments`` forward, ``tgraph.fused_reductions`` backward). Planes of odd sizes (49 as at ResNet-50's last stage, a ragged
37 x 37 and a 56 x 56 plane of a tile per row) are checked against float64 on fresh
random inputs: the output, the input and parameter gradients and the running
statistics. Skipped without a GPU."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.usefixtures("fresh_dynamo"),
]

import tessera.torch as tt  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(x)) * 1.5


@pytest.mark.parametrize("shape", [(8, 32, 7, 7), (3, 5, 37, 37), (4, 16, 56, 56), (2, 3, 1, 9)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("offset", [0.3, 100.0])
def test_batch_norm_training_step(shape: tuple[int, ...], dtype: torch.dtype,
                                  offset: float) -> None:
    """Also with data far from 0 (``offset`` 100 against a spread of 2): the statistics
    come from each plane's own mean (``tgraph.row_moments``) and lose no precision."""
    torch.manual_seed(sum(shape))
    c = shape[1]
    model = Block(c).cuda().to(dtype)
    with torch.no_grad():
        model.bn.weight.uniform_(0.5, 1.5)
        model.bn.bias.uniform_(-0.5, 0.5)
    ref = copy.deepcopy(model).double()
    x = (torch.randn(shape, device="cuda") * 2 + offset).to(dtype)
    w = torch.randn(shape, device="cuda").to(dtype)
    xg = x.detach().clone().requires_grad_()
    out = tt.compile(model)(xg)
    out.backward(w)
    x64 = x.detach().double().requires_grad_()
    out64 = ref(x64)
    out64.backward(w.double())
    tol = 2e-2 if dtype == torch.bfloat16 else 2e-5
    scale = out64.abs().max().item()
    assert (out.double() - out64).abs().max().item() <= tol * scale
    for got, want in [(xg.grad, x64.grad), (model.bn.weight.grad, ref.bn.weight.grad),
                      (model.bn.bias.grad, ref.bn.bias.grad)]:
        err = (got.double() - want).abs().max().item()
        assert err <= tol * want.abs().max().item(), err
    for name in ("running_mean", "running_var"):
        got, want = getattr(model.bn, name), getattr(ref.bn, name)
        assert (got.double() - want).abs().max().item() <= 1e-2 * want.abs().max().item() + 1e-5
    rep = tt.last_report()
    assert not rep.runtime_fallbacks, str(rep)
