"""Tensors of no elements on the GPU: the cases of ``tests/passes/test_empty_tensors.py``
through ``ts.jit`` on CUDA tensors, and torch functions with empty inputs (an empty batch
through ``nn.Linear`` forward and backward, elementwise ops of empty tensors, integer
``abs``) through ``torch.compile``, against eager. Skipped without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.usefixtures("fresh_dynamo"),
]

import tessera as ts  # noqa: E402
import tessera.torch as tt  # noqa: E402
from tests.passes.test_empty_tensors import CASES  # noqa: E402


@pytest.mark.parametrize("name", list(CASES))
def test_jit_on_cuda(name):
    fn, shapes, ref = CASES[name]
    g = torch.Generator().manual_seed(3)
    args = [torch.randn(s, generator=g) for s in shapes]
    got = ts.jit(fn)(*[a.cuda() for a in args])
    want = ref(*[a.numpy() for a in args])
    assert got.is_cuda and tuple(got.shape) == want.shape
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5, atol=1e-5)


TORCH_CASES = {
    "cos": (lambda x: torch.cos(x), [(1, 0, 3)]),
    "softsign int": (lambda x: torch.nn.functional.softsign(x), [(20,)]),
    "abs int": (lambda x: torch.abs(x), [(20, 20)]),
    "flip of empty": (lambda x: torch.flipud(x), [(5, 0, 10)]),
    "unfold empty batch": (lambda x: torch.nn.functional.unfold(x, (2, 2)), [(0, 1, 5, 5)]),
    "vecdot of nothing": (lambda a, b: torch.linalg.vecdot(a, b), [(0,), (0,)]),
}



@pytest.mark.parametrize("name", list(TORCH_CASES))
def test_torch_compile_on_cuda(name):
    fn, shapes = TORCH_CASES[name]
    g = torch.Generator().manual_seed(4)
    args = [torch.randn(s, generator=g) for s in shapes]
    if "int" in name:
        args = [(a * 100).long() for a in args]
    args = [a.cuda() for a in args]
    got, want = tt.compile(fn)(*args), fn(*args)
    assert got.shape == want.shape and got.dtype == want.dtype and got.is_cuda
    torch.testing.assert_close(got, want)


def test_empty_batch_linear_forward_and_backward():
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 4).cuda()
    x = torch.randn(0, 3, device="cuda", requires_grad=True)
    out = torch.compile(lin, backend="tessera")(x)
    assert out.shape == (0, 4)
    out.sum().backward()
    assert x.grad.shape == (0, 3)
    # nothing flowed back: the weight and bias gradients are zeros, as eager's
    torch.testing.assert_close(lin.weight.grad, torch.zeros_like(lin.weight))
    torch.testing.assert_close(lin.bias.grad, torch.zeros_like(lin.bias))
