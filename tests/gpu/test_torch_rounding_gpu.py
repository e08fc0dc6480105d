"""The 16-bit rounding rules of the torch backend on the GPU: each case of
``tests/torch/test_torch_rounding.py`` runs its fused kernel on CUDA tensors and must give
the CPU reference's bits (the rules are casts inside the kernel, so the PTX must keep
them). Skipped without a GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.usefixtures("fresh_dynamo"),
]

import tessera.torch as tt  # noqa: E402
from tests.torch.test_torch_rounding import CASES, DTYPES, case_inputs  # noqa: E402


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(CASES))
def test_gpu_kernel_rounds_as_the_cpu_reference(case, dtype):
    x, a, b = case_inputs(dtype, seed=11)
    f = CASES[case]
    cpu = tt.compile(f)(x, a, b)
    torch._dynamo.reset()
    gpu = tt.compile(f)(x.cuda(), a.cuda(), b.cuda())
    assert tt.last_report().tessera_ops > 0
    assert gpu.device.type == "cuda" and gpu.dtype == cpu.dtype
    differ = (gpu.cpu() != cpu).sum().item()
    # f32 division: the GPU's div.rn and numpy's are both correctly rounded
    assert differ == 0, f"{differ} of {cpu.numel()} elements differ from the CPU reference"
