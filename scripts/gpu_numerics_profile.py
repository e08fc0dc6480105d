"""On a GPU: the guide's mixed_precision_gemm (fp8 e4m3 / e5m2) and numerically_stable_softmax
through ``ts.jit`` on CUDA tensors, checked against float64 and the CPU reference, and a
``ts.profiler`` session of the transformer-block example (table, Chrome trace, roofline PNG).

Run from the repository root: ``python scripts/gpu_numerics_profile.py OUT_DIR``.
"""


import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import tessera as ts  # noqa: E402


def fp8_gemm(fmt: ts.DType, m: int, k: int, n: int) -> str:
    pol = fmt @ ts.accum(ts.f32)
    lhs, rhs = ts.Tensor["M", "K", pol], ts.Tensor["K", "N", pol]

    @ts.jit
    def gemm(a: lhs, b: rhs):
        return ts.gemm(a, b)

    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", generator=g).to(fmt.torch_dtype)
    b = torch.randn(k, n, device="cuda", generator=g).to(fmt.torch_dtype)
    c = gemm(a, b)
    torch.cuda.synchronize()
    want = a.double() @ b.double()  # exact products of the fp8 inputs
    rel = float((c.double() - want).norm() / want.norm())
    worst = float(((c.double() - want).abs() / want.abs().clamp(min=1.0)).max())
    return (
        f"fp8 GEMM {fmt!r} {m}x{k}x{n} -> {c.dtype}: relative Frobenius error vs float64 "
        f"{rel:.2e}, max |err|/max(|ref|,1) {worst:.2e}"
    )


def stable_softmax() -> str:
    from stable_softmax import numerically_stable_softmax

    g = torch.Generator().manual_seed(1)
    x = (4 * torch.randn(37, 1000, generator=g)).to(torch.bfloat16)
    gpu = numerically_stable_softmax(x.cuda()).cpu()
    cpu = numerically_stable_softmax(x)
    ref = torch.softmax(x.double(), -1)
    diff_cpu = float((gpu.double() - cpu.double()).abs().max())
    err = float((gpu.double() - ref).abs().max())
    return (
        f"numerically_stable_softmax bf16 37x1000 on GPU: max |GPU - CPU reference| {diff_cpu:.2e}, "
        f"max abs error vs float64 {err:.2e}"
    )


def profile_block(out: Path) -> str:
    from transformer_block import block

    g = torch.Generator(device="cuda").manual_seed(2)
    s, d = 2048, 1024
    x = torch.randn(s, d, device="cuda", generator=g)
    wqkv = torch.randn(d, 3 * d, device="cuda", generator=g) / d**0.5
    wo = torch.randn(d, d, device="cuda", generator=g) / d**0.5
    block(x, wqkv, wo)
    torch.cuda.synchronize()
    with ts.profiler.session() as prof:
        for _ in range(3):
            block(x, wqkv, wo)
        torch.cuda.synchronize()
    table = prof.table()
    prof.export_chrome_trace(out / "transformer_block_trace.json")
    prof.roofline(out / "roofline_transformer_block_h200.png", title="transformer block, H200")
    (out / "transformer_block_profile.txt").write_text(table)
    return table


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-logs")
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        fp8_gemm(ts.fp8_e4m3, 1000, 512, 768),
        fp8_gemm(ts.fp8_e5m2, 1000, 512, 768),
        stable_softmax(),
    ]
    profile_block(out)  # prof.table() prints the table
    for line in lines:
        print(line)
    (out / "numerics.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
