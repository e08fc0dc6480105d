"""Graph IR ops compiled to PTX and run on the GPU through tessera.runtime.cuda, compared
with torch on random inputs of odd shapes (fp32 within 1e-5 relative, bf16 within 1e-2).
Outputs are poisoned with NaN before the launch, so an element a kernel forgets to
write fails the comparison. Skipped without a CUDA device.

The programs are those of tests/passes/test_ptx_ops.py, whose CPU test checks that ptxas
accepts every kernel launched here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tessera.passes.emit_ptx import emit_ptx  # noqa: E402
from tessera.runtime import cuda  # noqa: E402
from tests.passes.test_ptx_ops import CASES, Case, lower_case  # noqa: E402

DTYPES = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16, "i1": torch.bool}
REDUCING = {
    "sum_rows", "sum_small", "max_cols", "min_all", "mean_rows", "softmax", "softmax_axis0",
    "softmax_bf16", "rmsnorm", "layernorm", "mse", "matmul_bf16", "matmul_bf16_oddk",
    "matmul_bf16_batched", "matmul_f32", "flash_attention",
}


def _inputs(case: Case, gen: torch.Generator) -> list[torch.Tensor]:
    out = []
    for i, (shape, e) in enumerate(case.args):
        if e == "i1":
            t = torch.rand(shape, generator=gen) < 0.5
        else:
            t = torch.randn(shape, generator=gen, dtype=torch.float64)
            if "positive" in case.tags or (case.name == "pow" and i == 0):
                t = t.abs() + 0.5
            t = t.to(DTYPES[e])
        out.append(t.cuda())
    return out


def _tolerance(case: Case) -> tuple[float, float]:
    if any(e == "bf16" for _, e in case.args) or case.result[1] == "bf16":
        return 1e-2, 1e-2
    if case.name in REDUCING:
        return 1e-5, 1e-4
    return 1e-5, 2e-5


def run_host(module: object, name: str, args: list, **kw: object) -> list:
    """``cuda.run_host`` with the module's PTX."""
    return cuda.run_host(module, name, args, ptx=emit_ptx(module), **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def modules() -> dict[str, object]:
    return {c.name: lower_case(c) for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_matches_torch(case: Case, modules: dict[str, object]) -> None:
    gen = torch.Generator().manual_seed(1234)
    args = _inputs(case, gen)
    (out,) = run_host(modules[case.name], case.name, args, poison=True)  # type: ignore[arg-type]
    torch.cuda.synchronize()
    want = case.ref(*args)
    assert out.device == args[0].device
    assert out.dtype == DTYPES[case.result[1]]
    assert tuple(out.shape) == tuple(case.result[0])
    if out.dtype == torch.bool:
        assert torch.equal(out, want)
        return
    rtol, atol = _tolerance(case)
    torch.testing.assert_close(out, want.to(out.dtype), rtol=rtol, atol=atol)


def test_bf16_matmul_runs_mma_sync(modules: dict[str, object]) -> None:
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in emit_ptx(modules["matmul_bf16"])  # type: ignore[arg-type]


def test_launch_on_current_stream(modules: dict[str, object]) -> None:
    gen = torch.Generator().manual_seed(7)
    case = next(c for c in CASES if c.name == "add")
    args = _inputs(case, gen)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        (out,) = run_host(modules["add"], "add", args, poison=True)  # type: ignore[arg-type]
    s.synchronize()
    torch.testing.assert_close(out, args[0] + args[1])


def test_non_contiguous_input_is_made_contiguous(modules: dict[str, object]) -> None:
    a = torch.randn(45, 37, device="cuda").t()
    b = torch.randn(45, device="cuda")
    assert not a.is_contiguous()
    (out,) = run_host(modules["add"], "add", [a, b], poison=True)  # type: ignore[arg-type]
    torch.testing.assert_close(out, a + b)


def test_cpu_tensor_is_rejected(modules: dict[str, object]) -> None:
    with pytest.raises(cuda.LaunchError, match="argument 0: tensor is on cpu, expected a CUDA tensor"):
        run_host(modules["add"], "add", [torch.zeros(37, 45), torch.zeros(45, device="cuda")])  # type: ignore[arg-type]


def test_wrong_dtype_and_shape_are_rejected(modules: dict[str, object]) -> None:
    good = torch.zeros(45, device="cuda")
    with pytest.raises(cuda.LaunchError, match="dtype torch.float64, expected torch.float32"):
        run_host(modules["add"], "add", [torch.zeros(37, 45, device="cuda", dtype=torch.float64), good])  # type: ignore[arg-type]
    with pytest.raises(cuda.LaunchError, match=r"shape \(37, 44\), expected \(37, 45\)"):
        run_host(modules["add"], "add", [torch.zeros(37, 44, device="cuda"), good])  # type: ignore[arg-type]


def test_bad_ptx_reports_the_jit_log(modules: dict[str, object]) -> None:
    ptx = emit_ptx(modules["add"]).replace("ret;", "ret.bogus;")  # type: ignore[arg-type]
    with pytest.raises(cuda.CudaError, match="cuModuleLoadDataEx \\(PTX\\) failed: CUDA_ERROR_INVALID_PTX") as e:
        cuda._load_image(ptx.encode() + b"\0", "PTX")
    assert "bogus" in str(e.value) or "error" in str(e.value).lower()


def test_modules_are_cached(modules: dict[str, object]) -> None:
    ptx = emit_ptx(modules["neg"])  # type: ignore[arg-type]
    dev = torch.cuda.current_device()
    assert cuda.load_module(ptx, dev) is cuda.load_module(ptx, dev)
