"""Kernel checking on CUDA tensors: every launch of a few compiled programs (elementwise,
row softmax, f64 reductions, a batch-norm training step through ``torch.compile``) is
compared with the Tile IR interpreter, and a launch corrupted after the kernel ran is
reported at that kernel. Skipped without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import tessera as ts  # noqa: E402
import tessera.torch as tt  # noqa: E402
from tessera.runtime import cuda, kernel_check  # noqa: E402
from tessera.runtime.kernel_check import KernelChecker, KernelMismatch  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_launch_agrees_with_the_interpreter(dtype):
    @ts.jit
    def f(x, y):
        s = ts.softmax(x * 1.5 + y)
        return s, ts.sum(ts.exp(x) * y, axis=1)

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(37, 301, device="cuda", dtype=dtype, generator=g)
    y = torch.randn(37, 301, device="cuda", dtype=dtype, generator=g)
    with kernel_check.checking() as check:
        s, r = f(x, y)
    assert check.checked >= 2 and not check.unchecked, check.summary()
    xd, yd = x.double(), y.double()
    torch.testing.assert_close(s.double(), torch.softmax(xd * 1.5 + yd, -1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(r.double(), (xd.exp() * yd).sum(1), rtol=1e-5, atol=1e-5)


def test_a_batch_norm_training_step_is_checked():
    torch._dynamo.reset()
    bn = torch.nn.BatchNorm2d(6).cuda()
    x = torch.randn(3, 6, 7, 7, device="cuda", requires_grad=True)
    with kernel_check.checking() as check:
        tt.compile(bn)(x).square().sum().backward()
    torch._dynamo.reset()
    assert check.checked > 4, check.summary()


class _Corrupting(KernelChecker):
    """A checker whose launches add 1 to the first element of the first argument after the
    kernel ran: a wrong kernel, as the check sees it."""

    def launch(self, host, kernel, grid, values, run):  # type: ignore[override]
        def wrong() -> None:
            run()
            values[0].view(-1)[0] += 1

        super().launch(host, kernel, grid, values, wrong)


def test_a_wrong_result_names_its_kernel():
    @ts.jit
    def f(x):
        return ts.exp(x) + 1.0

    x = torch.rand(1000, device="cuda")
    cuda.LAUNCH_HOOK = _Corrupting()
    try:
        with pytest.raises(KernelMismatch, match=r"kernel @f_\w+ .* of @f: argument 0 .*index \[0\]"):
            f(x)
    finally:
        cuda.LAUNCH_HOOK = None
    np.testing.assert_allclose(f(x).cpu(), np.exp(x.cpu().numpy()) + 1, rtol=1e-5)
